//! The hand-written codecs against the types prost generates from `protos/`: every message they
//! read is written by prost and read back by hand, every message they write is compared byte for
//! byte with prost's encoding of the same message (and decoded by prost), with every field set.
//! A field number typed wrong in `wire` fails here.

use prost::Message;

use super::pb::{self, parse_stream_request::Kind};
use super::{
    decode_request, put_delta, put_error, render_response, ClientMessage, DeltaFields, StepTokens,
    ToolCallFields,
};
use crate::error::{Error, ErrorKind};

/// A small deterministic generator (xorshift64*), so the cases are the same on every run.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Mutates `message` fewer than `rounds` times (most cases at least once): a byte flipped,
    /// the end cut off, or a byte appended.
    pub(super) fn mutate(&mut self, message: &mut Vec<u8>, rounds: u64) {
        for _ in 0..self.below(rounds) {
            match self.below(3) {
                0 if !message.is_empty() => {
                    let at = self.below(message.len() as u64) as usize;
                    message[at] = self.next() as u8;
                }
                1 => message.truncate(self.below(message.len() as u64 + 1) as usize),
                _ => message.push(self.next() as u8),
            }
        }
    }

    /// A token id spread over every varint length, the extremes included.
    pub(super) fn id(&mut self) -> u32 {
        match self.below(6) {
            0 => 0,
            1 => u32::MAX,
            2 => self.below(128) as u32,
            _ => (self.next() >> (self.below(32) + 32)) as u32,
        }
    }

    /// Text of 0 to `max` characters, multi-byte ones included.
    pub(super) fn text(&mut self, max: u64) -> String {
        const CHARS: [&str; 8] = ["a", "Z", " ", "\n", "é", "漢", "🤔", "<|im_end|>"];
        let n = self.below(max + 1);
        (0..n).map(|_| CHARS[self.below(8) as usize]).collect()
    }
}

fn step_message(rng: &mut Rng) -> pb::ParseStreamRequest {
    let items = (0..rng.below(70))
        .map(|_| pb::StepTokens {
            request_id: rng.text(12),
            token_ids: (0..rng.below(40)).map(|_| rng.id()).collect(),
            finished: rng.below(2) == 1,
        })
        .collect();
    pb::ParseStreamRequest {
        kind: Some(Kind::Step(pb::Step { items })),
    }
}

#[test]
fn steps_decode_as_the_generated_types_wrote_them() {
    let mut rng = Rng(0x5eed);
    for _ in 0..300 {
        let message = step_message(&mut rng);
        let bytes = message.encode_to_vec();
        let Some(Kind::Step(step)) = &message.kind else {
            unreachable!()
        };
        let expected: Vec<StepTokens<'_>> = step
            .items
            .iter()
            .map(|i| StepTokens {
                request_id: &i.request_id,
                token_ids: i.token_ids.clone(),
                finished: i.finished,
                out_of_range: None,
            })
            .collect();
        assert_eq!(
            decode_request(&bytes).expect("decodes"),
            ClientMessage::Step(expected)
        );
    }
}

#[test]
fn open_cancel_and_empty_messages_are_told_apart() {
    let open = pb::ParseStreamRequest {
        kind: Some(Kind::Open(pb::OpenRequest {
            request_id: "r1".into(),
            model: "qwen3".into(),
            tool_parser: "hermes".into(),
            reasoning_parser: "qwen3".into(),
            tools_json: "[]".into(),
            prompt_token_ids: vec![1, 2, 300_000],
            chat_template_kwargs_json: "{}".into(),
            skip_special_tokens: Some(false),
            stop: vec!["x".into()],
            include_stop_str_in_output: true,
        })),
    };
    assert_eq!(
        decode_request(&open.encode_to_vec()).expect("decodes"),
        ClientMessage::Open
    );
    let cancel = pb::ParseStreamRequest {
        kind: Some(Kind::Cancel(pb::CancelRequest {
            request_id: "漢 r2".into(),
        })),
    };
    assert_eq!(
        decode_request(&cancel.encode_to_vec()).expect("decodes"),
        ClientMessage::Cancel("漢 r2")
    );
    assert_eq!(decode_request(&[]).expect("decodes"), ClientMessage::Empty);
}

#[test]
fn unpacked_ids_and_unknown_fields_are_read_as_protobuf_does() {
    // StepTokens { request_id = "a", token_ids = 5, token_ids = 300 (unpacked), 15: "skip me" }
    let mut item = vec![0x0a, 1, b'a', 0x10, 5, 0x10, 0xac, 0x02];
    item.extend_from_slice(&[0x7a, 7]);
    item.extend_from_slice(b"skip me");
    let mut step = vec![0x0a, item.len() as u8];
    step.extend_from_slice(&item);
    let mut message = vec![0x12, step.len() as u8];
    message.extend_from_slice(&step);
    let reference = pb::ParseStreamRequest::decode(message.as_slice()).expect("prost reads it");
    let Some(Kind::Step(reference)) = reference.kind else {
        panic!("a step")
    };
    assert_eq!(reference.items[0].token_ids, [5, 300]);
    assert_eq!(
        decode_request(&message).expect("decodes"),
        ClientMessage::Step(vec![StepTokens {
            request_id: "a",
            token_ids: vec![5, 300],
            finished: false,
            out_of_range: None,
        }])
    );
}

#[test]
fn an_id_above_32_bits_is_reported_not_truncated() {
    // StepTokens { request_id = "a", token_ids = [7, 2^32, 9] (packed) }: protobuf would read 7, 0, 9.
    let mut packed = vec![7u8];
    super::codec::put_varint(&mut packed, 1 << 32);
    packed.push(9);
    let mut item = vec![0x0a, 1, b'a', 0x12, packed.len() as u8];
    item.extend_from_slice(&packed);
    let mut step = vec![0x0a, item.len() as u8];
    step.extend_from_slice(&item);
    let mut message = vec![0x12, step.len() as u8];
    message.extend_from_slice(&step);
    assert_eq!(
        decode_request(&message).expect("decodes"),
        ClientMessage::Step(vec![StepTokens {
            request_id: "a",
            token_ids: vec![7],
            finished: false,
            out_of_range: Some((1, 1 << 32)),
        }])
    );
}

#[test]
fn malformed_messages_are_invalid_argument() {
    let bad_utf8 = [0x1a, 3, 0x0a, 1, 0xff];
    for bytes in [
        &b"\x12\xff\xff\xff"[..],
        b"\x12\xff\xff\xff\x0f",
        b"\x0b",
        &bad_utf8,
    ] {
        let err = decode_request(bytes).expect_err("malformed");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{bytes:?}");
        assert!(
            pb::ParseStreamRequest::decode(bytes).is_err(),
            "prost refuses it too: {bytes:?}"
        );
    }
}

struct Call(pb::ToolCallDelta);

impl ToolCallFields for Call {
    fn index(&self) -> u32 {
        self.0.index
    }
    fn id(&self) -> &str {
        &self.0.id
    }
    fn name(&self) -> &str {
        &self.0.name
    }
    fn arguments(&self) -> &str {
        &self.0.arguments
    }
}

fn random_delta(rng: &mut Rng) -> pb::RequestDelta {
    let tool_calls = (0..rng.below(4))
        .map(|i| pb::ToolCallDelta {
            index: i as u32 + rng.below(2) as u32 * 200,
            id: rng.text(3),
            name: rng.text(3),
            arguments: rng.text(100),
        })
        .collect();
    pb::RequestDelta {
        request_id: rng.text(10),
        // Up to 200 characters: bodies on both sides of the one-byte length prefix.
        content: rng.text(200),
        reasoning: rng.text(40),
        tool_calls,
        reasoning_tokens: rng.id(),
        completion_tokens: rng.id(),
        finished: rng.below(2) == 1,
        finish_reason: ["", "stop", "tool_calls"][rng.below(3) as usize].into(),
        matched_stop: rng.text(2),
        error: None,
        fingerprint: rng.text(3),
    }
}

#[test]
fn deltas_encode_exactly_as_the_generated_types_do() {
    let mut rng = Rng(0xde17a);
    for _ in 0..500 {
        let expected: Vec<pb::RequestDelta> =
            (0..rng.below(5)).map(|_| random_delta(&mut rng)).collect();
        let mut out = Vec::new();
        for d in &expected {
            let calls: Vec<Call> = d.tool_calls.iter().cloned().map(Call).collect();
            let fields = DeltaFields {
                content: &d.content,
                reasoning: &d.reasoning,
                tool_calls: &calls,
                reasoning_tokens: d.reasoning_tokens,
                completion_tokens: d.completion_tokens,
                finished: d.finished,
                finish_reason: &d.finish_reason,
                matched_stop: &d.matched_stop,
            };
            put_delta(&mut out, &d.request_id, &fields, &d.fingerprint);
        }
        let response = pb::ParseStreamResponse { deltas: expected };
        assert_eq!(out, response.encode_to_vec());
        assert_eq!(
            pb::ParseStreamResponse::decode(out.as_slice()).expect("decodes"),
            response
        );
    }
}

#[test]
fn errors_encode_exactly_as_the_generated_types_do() {
    let long = "m".repeat(300);
    for kind in ErrorKind::ALL {
        for message in ["", "step.items: no open request", long.as_str()] {
            let error = Error::new(kind, message);
            let mut out = Vec::new();
            put_error(&mut out, "r7", &error, "sha256:ab");
            let expected = pb::ParseStreamResponse {
                deltas: vec![pb::RequestDelta {
                    request_id: "r7".into(),
                    finished: true,
                    error: Some(pb::Status {
                        code: kind.grpc_code(),
                        message: message.into(),
                    }),
                    fingerprint: "sha256:ab".into(),
                    ..pb::RequestDelta::default()
                }],
            };
            assert_eq!(out, expected.encode_to_vec(), "{kind:?}");
        }
    }
}

#[test]
fn render_responses_encode_exactly_as_the_generated_type_does() {
    let mut rng = Rng(0x4e4de4);
    for case in 0..300 {
        let text = if case % 7 == 0 {
            None
        } else {
            Some(rng.text(300))
        };
        let ids: Vec<u32> = (0..rng.below(500)).map(|_| rng.id()).collect();
        let offsets: Vec<u32> = (0..rng.below(3) * ids.len() as u64)
            .map(|_| rng.id())
            .collect();
        let bytes = render_response(text.as_deref(), &ids, &offsets);
        let expected = pb::RenderResponse {
            text: text.unwrap_or_default(),
            token_ids: ids,
            offsets,
            ..pb::RenderResponse::default()
        };
        assert_eq!(bytes, expected.encode_to_vec());
        assert_eq!(
            pb::RenderResponse::decode(bytes.as_slice()).expect("decodes"),
            expected
        );
    }
}

#[test]
fn unknown_groups_are_skipped() {
    // Found by the parse_wire fuzz target: a valid message with an unknown field in group
    // encoding (wire types 3/4, nested) was refused; protobuf parsers skip it.
    let cancel = [0x0a, 0x01, b'r'];
    let mut msg = vec![0x1a, cancel.len() as u8];
    msg.extend_from_slice(&cancel);
    // Field 9 as a group holding field 10 as a group holding a varint, then the end tags.
    msg.extend_from_slice(&[
        (9 << 3) | 3,
        (10 << 3) | 3,
        0x08,
        0x01,
        (10 << 3) | 4,
        (9 << 3) | 4,
    ]);
    assert_eq!(
        decode_request(&msg).expect("decodes"),
        ClientMessage::Cancel("r")
    );
    assert!(decode_request(&[(9 << 3) | 3, (8 << 3) | 4]).is_err());
    assert!(decode_request(&[(9 << 3) | 4]).is_err());
    assert!(decode_request(&[(9 << 3) | 3]).is_err());
}

#[test]
fn an_open_is_split_into_its_prompt_ids_and_the_rest() {
    let open = pb::OpenRequest {
        request_id: "r".into(),
        model: "m".into(),
        prompt_token_ids: vec![0, 1, 300, u32::MAX],
        stop: vec!["x".into()],
        ..Default::default()
    };
    let message = pb::ParseStreamRequest {
        kind: Some(pb::parse_stream_request::Kind::Open(open.clone())),
    }
    .encode_to_vec();
    let split = super::split_open(&message).unwrap();
    let rest = split.without_ids;
    assert_eq!(split.ids.unwrap(), open.prompt_token_ids);
    let expected = pb::OpenRequest {
        prompt_token_ids: Vec::new(),
        ..open
    };
    assert_eq!(
        pb::ParseStreamRequest::decode(&rest[..]).unwrap().kind,
        Some(pb::parse_stream_request::Kind::Open(expected))
    );
    assert!(super::split_open(b"\x0a\xff").is_err());
}

#[test]
fn an_open_prompt_id_above_u32_is_refused_by_position_and_the_rest_still_names_the_request() {
    // OpenRequest { request_id = "r", prompt_token_ids = [7, 2^32, 9] (packed) }: prost alone would read 7, 0, 9.
    let open = [
        0x0a, 0x01, b'r', 0x32, 0x07, 0x07, 0x80, 0x80, 0x80, 0x80, 0x10, 0x09,
    ];
    let mut message = vec![0x0a, open.len() as u8];
    message.extend_from_slice(&open);
    let split = super::split_open(&message).unwrap();
    assert_eq!(
        split.ids.unwrap_err().message(),
        "open.prompt_token_ids[1]: 4294967296 is not a token id (token ids are below 2^32)"
    );
    let Some(pb::parse_stream_request::Kind::Open(rest)) =
        pb::ParseStreamRequest::decode(&split.without_ids[..])
            .unwrap()
            .kind
    else {
        panic!("not an open")
    };
    assert_eq!(
        (rest.request_id.as_str(), rest.prompt_token_ids.len()),
        ("r", 0)
    );
}

#[test]
fn an_open_split_copies_the_other_fields_byte_for_byte() {
    // OpenRequest { request_id = "r", ids 5 (unpacked), unknown field 99 = 1, ids [7, 300] (packed),
    // model = "m" }, then a second open merged into it { ids 8 }, and an unknown top-level field 15.
    let open = [
        0x0a, 0x01, b'r', 0x30, 0x05, 0x98, 0x06, 0x01, 0x32, 0x03, 0x07, 0xac, 0x02, 0x12, 0x01,
        b'm',
    ];
    let mut message = vec![0x0a, open.len() as u8];
    message.extend_from_slice(&open);
    message.extend_from_slice(&[0x0a, 0x02, 0x30, 0x08, 0x78, 0x02]);
    let split = super::split_open(&message).unwrap();
    assert_eq!(split.ids.unwrap(), vec![5, 7, 300, 8]);
    // The open keeps request_id, the unknown field and model in order; the second open is empty.
    let rest = [
        0x0a, 0x09, 0x0a, 0x01, b'r', 0x98, 0x06, 0x01, 0x12, 0x01, b'm', 0x0a, 0x00, 0x78, 0x02,
    ];
    assert_eq!(split.without_ids, rest);
    let Some(pb::parse_stream_request::Kind::Open(read)) =
        pb::ParseStreamRequest::decode(&split.without_ids[..])
            .unwrap()
            .kind
    else {
        panic!("not an open")
    };
    assert_eq!((read.request_id.as_str(), read.model.as_str()), ("r", "m"));
    // Malformed: a truncated packed id, ids or the open with a wire type they cannot have, an id
    // whose tenth varint byte carries bits past 64 (prost refuses it too; read, it would wrap).
    let overflow = [
        0x0a, 0x0b, 0x30, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
    ];
    assert!(pb::ParseStreamRequest::decode(&overflow[..]).is_err());
    for bad in [
        &[0x0a, 0x03, 0x32, 0x01, 0x80][..],
        &[0x0a, 0x05, 0x35, 0x01, 0x02, 0x03, 0x04],
        &[0x08, 0x01],
        &overflow,
    ] {
        let err = super::split_open(bad).err().expect("refused");
        assert!(err.message().starts_with("malformed "), "{}", err.message());
    }
}

/// The open's ids as prost reads them 64-bit wide (what `split_open` did before it read the
/// message by hand).
#[derive(Clone, PartialEq, prost::Message)]
struct WideIds {
    #[prost(uint64, repeated, tag = "6")]
    prompt_token_ids: Vec<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct WideOpen {
    #[prost(message, optional, tag = "1")]
    open: Option<WideIds>,
}

#[test]
fn an_open_split_agrees_with_prost_on_random_and_mutated_messages() {
    let mut rng = Rng(0x5eed_0dd5);
    let mut compared = 0;
    for case in 0..3000 {
        let open = pb::OpenRequest {
            request_id: rng.text(8),
            model: rng.text(4),
            prompt_token_ids: (0..rng.below(50)).map(|_| rng.id()).collect(),
            stop: (0..rng.below(3)).map(|_| rng.text(5)).collect(),
            tools_json: rng.text(6),
            ..Default::default()
        };
        let mut message = pb::ParseStreamRequest {
            kind: Some(Kind::Open(open)),
        }
        .encode_to_vec();
        // Most cases mutated: bytes flipped, cut short or appended.
        rng.mutate(&mut message, 4);
        let (Ok(whole), Ok(wide)) = (
            pb::ParseStreamRequest::decode(&message[..]),
            WideOpen::decode(&message[..]),
        ) else {
            continue;
        };
        compared += 1;
        let split = super::split_open(&message)
            .unwrap_or_else(|e| panic!("case {case}: prost reads it, split_open refused: {e:?}"));
        let mut expected = whole;
        if let Some(Kind::Open(open)) = &mut expected.kind {
            open.prompt_token_ids.clear();
        }
        let rest = pb::ParseStreamRequest::decode(&split.without_ids[..]).expect("rest decodes");
        assert_eq!(rest, expected, "case {case}");
        let wide = wide.open.map(|o| o.prompt_token_ids).unwrap_or_default();
        match wide.iter().position(|&id| id > u64::from(u32::MAX)) {
            Some(at) => assert!(split
                .ids
                .unwrap_err()
                .message()
                .contains(&format!("[{at}]"))),
            None => assert_eq!(
                split.ids.unwrap(),
                wide.iter().map(|&id| id as u32).collect::<Vec<_>>(),
                "case {case}"
            ),
        }
    }
    assert!(compared > 800, "{compared} compared");
}
