//! `split_score` against the `ScoreRequest` prost generates: the oneof's last member wins,
//! `token_ids` occurrences after it merge, ids packed or not, other fields kept byte for byte.

use prost::Message;

use super::pb::{self, score_request::Input};
use super::tests::Rng;
use super::{split_score, SplitScore};

fn encoded(input: Option<Input>) -> Vec<u8> {
    pb::ScoreRequest {
        input,
        ..Default::default()
    }
    .encode_to_vec()
}

fn ids(token_ids: &[u32]) -> Vec<u8> {
    encoded(Some(Input::TokenIds(pb::TokenIds {
        token_ids: token_ids.to_vec(),
    })))
}

fn text(text: &str) -> Vec<u8> {
    encoded(Some(Input::Text(text.into())))
}

fn messages(json: &str) -> Vec<u8> {
    encoded(Some(Input::MessagesJson(json.into())))
}

/// A split's rest and ids (or the refusal's message).
type Split = (Vec<u8>, Result<Vec<u32>, String>);

type Ids = Vec<u32>;

/// The message's split when its input is `token_ids`; None when it is not.
fn split(message: &[u8]) -> Option<Split> {
    match split_score(message).expect("reads") {
        SplitScore::NotTokenIds => None,
        SplitScore::TokenIds { without_input, ids } => Some((
            without_input,
            ids.map(|ids| ids.to_vec())
                .map_err(|e| e.message().to_string()),
        )),
    }
}

#[test]
fn a_token_ids_request_is_split_into_its_ids_and_the_rest() {
    let request = pb::ScoreRequest {
        model: "m".into(),
        lora_name: "l".into(),
        lora_path: "/adapters/l".into(),
        cache_salt: "s".into(),
        mm_items: vec![pb::MultimodalItem {
            identifier: "i".into(),
            offset: 3,
            length: 4,
        }],
        add_special_tokens: Some(false),
        tools_json: "[]".into(),
        chat_template_kwargs_json: "{}".into(),
        input: Some(Input::TokenIds(pb::TokenIds {
            token_ids: vec![0, 1, 300, u32::MAX],
        })),
    };
    let (rest, read) = split(&request.encode_to_vec()).expect("token ids");
    assert_eq!(read.unwrap(), vec![0, 1, 300, u32::MAX]);
    let expected = pb::ScoreRequest {
        input: None,
        ..request
    };
    assert_eq!(pb::ScoreRequest::decode(&rest[..]).unwrap(), expected);
    // No input at all, or an empty message: nothing to split.
    assert!(split(b"").is_none());
    assert!(split(
        &pb::ScoreRequest {
            model: "m".into(),
            ..Default::default()
        }
        .encode_to_vec()
    )
    .is_none());
    // An empty `token_ids` still selects the oneof.
    assert_eq!(split(&ids(&[])).map(|(_, ids)| ids), Some(Ok(vec![])));
}

#[test]
fn the_last_member_of_the_oneof_wins_and_token_ids_after_it_merge() {
    // The parts concatenated, and the ids read (None: the input is not `token_ids`).
    let cases: Vec<(Vec<Vec<u8>>, Option<Ids>)> = vec![
        (vec![ids(&[1, 2]), text("a")], None),
        (vec![ids(&[1, 2]), messages("[]")], None),
        (vec![text("a"), ids(&[1, 2])], Some(vec![1, 2])),
        (vec![messages("[]"), ids(&[1, 2])], Some(vec![1, 2])),
        (
            vec![ids(&[1]), text("a"), ids(&[2]), ids(&[3, 4])],
            Some(vec![2, 3, 4]),
        ),
        (vec![ids(&[1]), ids(&[]), ids(&[5])], Some(vec![1, 5])),
        (vec![text("a"), ids(&[1]), messages("[]"), text("b")], None),
    ];
    for (parts, expected) in cases {
        let message = parts.concat();
        let input = pb::ScoreRequest::decode(&message[..]).unwrap().input;
        let read = split(&message).map(|(rest, ids)| {
            assert!(rest.is_empty());
            ids.unwrap()
        });
        assert_eq!(read, expected);
        match input {
            Some(Input::TokenIds(t)) => assert_eq!(Some(t.token_ids), read),
            _ => assert!(read.is_none()),
        }
    }
}

#[test]
fn ids_packed_or_not_and_unknown_fields_are_read_as_protobuf_does() {
    // model = "m"; token_ids { 5 (unpacked), unknown 99 = 1, [7, 300] (packed) }; unknown 15 = 2;
    // token_ids { 8 } merged into the first.
    let message = [
        0x0a, 0x01, b'm', 0x22, 0x0a, 0x08, 0x05, 0x98, 0x06, 0x01, 0x0a, 0x03, 0x07, 0xac, 0x02,
        0x78, 0x02, 0x22, 0x02, 0x08, 0x08,
    ];
    let Some(Input::TokenIds(read)) = pb::ScoreRequest::decode(&message[..]).unwrap().input else {
        panic!("prost reads token ids")
    };
    assert_eq!(read.token_ids, vec![5, 7, 300, 8]);
    let (rest, ids) = split(&message).expect("token ids");
    assert_eq!(
        (rest, ids.unwrap()),
        (vec![0x0a, 0x01, b'm', 0x78, 0x02], vec![5, 7, 300, 8])
    );
    // A member with a wire type it cannot have is an unknown field to upb (the server's parser;
    // prost refuses it): kept in the rest, and it selects nothing.
    assert!(split(&[0x20, 0x05]).is_none());
    assert!(split(&[0x23, 0x24]).is_none());
    let (rest, ids) = split(&[0x20, 0x05, 0x22, 0x02, 0x08, 0x06]).expect("token ids");
    assert_eq!((rest, ids.unwrap()), (vec![0x20, 0x05], vec![6]));
    // So is an id of the wrong wire type inside `token_ids`: dropped with it.
    let (rest, ids) = split(&[0x22, 0x07, 0x0d, 1, 0, 0, 0, 0x08, 0x09]).expect("token ids");
    assert_eq!((rest, ids.unwrap()), (vec![], vec![9]));
}

#[test]
fn an_id_above_32_bits_is_refused_by_its_position_in_the_merged_ids() {
    // token_ids { [7, 2^32, 9] (packed) }: prost alone would read 7, 0, 9.
    let wide = [
        0x22, 0x09, 0x0a, 0x07, 0x07, 0x80, 0x80, 0x80, 0x80, 0x10, 0x09,
    ];
    let message = [&[0x0a, 0x01, b'm'][..], &ids(&[1, 2]), &wide].concat();
    let (rest, read) = split(&message).expect("token ids");
    assert_eq!(
        read.unwrap_err(),
        "token_ids.token_ids[3]: 4294967296 is not a token id (token ids are below 2^32)"
    );
    assert_eq!(rest, [0x0a, 0x01, b'm']);
    // Ids a later text replaced are not read at all.
    assert!(split(&[&wide[..], &text("a")].concat()).is_none());
    let (_, read) = split(&[&wide[..], &text("a"), &ids(&[4])].concat()).expect("token ids");
    assert_eq!(read.unwrap(), vec![4]);
}

#[test]
fn malformed_messages_are_invalid_argument() {
    let overflow = [
        0x22, 0x0b, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
    ];
    for bad in [
        &[0x22, 0x03, 0x0a, 0x01, 0x80][..], // a truncated packed id
        &[0x22, 0x05, 0x0a],                 // a truncated token_ids
        &[0x12, 0x01, 0xff],                 // a text that is not UTF-8
        &[0x1a, 0x01, 0xff, 0x22, 0x00],     // and messages_json, even when replaced
        &[0x22, 0x02, 0x0c, 0x08],           // an unmatched end of group inside
    ] {
        assert!(pb::ScoreRequest::decode(bad).is_err());
        let err = split_score(bad).err().expect("refused");
        assert!(err.message().contains("ScoreRequest"), "{}", err.message());
    }
    // A tenth varint byte above 1: prost refuses it, but the server's parser (upb) drops the extra
    // bits, so a fallback to it scored a truncated id. Refused as an id, naming it.
    assert!(pb::ScoreRequest::decode(&overflow[..]).is_err());
    let Ok(SplitScore::TokenIds { ids: Err(e), .. }) = split_score(&overflow) else {
        panic!("an overflowing id is a refused token id")
    };
    assert!(
        e.message()
            .starts_with("token_ids.token_ids[0]: a varint past 64 bits"),
        "{}",
        e.message()
    );
}

/// `ScoreRequest` as prost reads it with 64-bit ids (what a refusal is checked against).
#[derive(Clone, PartialEq, prost::Message)]
struct WideScore {
    #[prost(oneof = "WideInput", tags = "2, 3, 4")]
    input: Option<WideInput>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum WideInput {
    #[prost(string, tag = "2")]
    Text(String),
    #[prost(string, tag = "3")]
    MessagesJson(String),
    #[prost(message, tag = "4")]
    TokenIds(WideIds),
}

#[derive(Clone, PartialEq, prost::Message)]
struct WideIds {
    #[prost(uint64, repeated, tag = "1")]
    token_ids: Vec<u64>,
}

/// One message part: a random request, or an input of ids some of which are above 2^32-1.
fn random_part(rng: &mut Rng) -> Vec<u8> {
    if rng.below(8) == 0 {
        let token_ids = (0..rng.below(6))
            .map(|_| u64::from(rng.id()) << (32 * rng.below(2)))
            .collect();
        return WideScore {
            input: Some(WideInput::TokenIds(WideIds { token_ids })),
        }
        .encode_to_vec();
    }
    let input = match rng.below(4) {
        0 => None,
        1 => Some(Input::Text(rng.text(6))),
        2 => Some(Input::MessagesJson(rng.text(6))),
        _ => Some(Input::TokenIds(pb::TokenIds {
            token_ids: (0..rng.below(40)).map(|_| rng.id()).collect(),
        })),
    };
    pb::ScoreRequest {
        model: rng.text(4),
        lora_name: rng.text(2),
        lora_path: rng.text(2),
        cache_salt: rng.text(2),
        mm_items: (0..rng.below(2))
            .map(|_| pb::MultimodalItem {
                identifier: rng.text(3),
                offset: rng.below(1000),
                length: rng.below(1000),
            })
            .collect(),
        add_special_tokens: [None, Some(true), Some(false)][rng.below(3) as usize],
        tools_json: rng.text(3),
        chat_template_kwargs_json: rng.text(3),
        input,
    }
    .encode_to_vec()
}

#[test]
fn split_score_agrees_with_prost_on_random_and_mutated_messages() {
    let mut rng = Rng(0x5c02_e5ee);
    let (mut compared, mut with_ids, mut refused) = (0, 0, 0);
    for case in 0..4000 {
        // One to three requests concatenated: protobuf merges them, so the oneof changes hands.
        let mut message: Vec<u8> = (0..=rng.below(3))
            .flat_map(|_| random_part(&mut rng))
            .collect();
        // Most cases mutated: bytes flipped, cut short or appended.
        rng.mutate(&mut message, 3);
        let (Ok(whole), Ok(wide)) = (
            pb::ScoreRequest::decode(&message[..]),
            WideScore::decode(&message[..]),
        ) else {
            continue;
        };
        compared += 1;
        let split = split_score(&message)
            .unwrap_or_else(|e| panic!("case {case}: prost reads it, split_score refused: {e:?}"));
        let (rest, read) = match split {
            SplitScore::NotTokenIds => {
                assert!(
                    !matches!(whole.input, Some(Input::TokenIds(_))),
                    "case {case}"
                );
                continue;
            }
            SplitScore::TokenIds { without_input, ids } => (without_input, ids),
        };
        let Some(WideInput::TokenIds(wide)) = wide.input else {
            panic!(
                "case {case}: split as token ids, prost read {:?}",
                whole.input
            )
        };
        with_ids += 1;
        let expected = pb::ScoreRequest {
            input: None,
            ..whole
        };
        assert_eq!(
            pb::ScoreRequest::decode(&rest[..]).expect("rest decodes"),
            expected,
            "case {case}"
        );
        match wide
            .token_ids
            .iter()
            .position(|&id| id > u64::from(u32::MAX))
        {
            Some(at) => {
                refused += 1;
                let message = read.unwrap_err().message().to_string();
                assert!(
                    message.starts_with(&format!("token_ids.token_ids[{at}]: ")),
                    "{message}"
                );
            }
            None => assert_eq!(
                read.unwrap().to_vec(),
                wide.token_ids
                    .iter()
                    .map(|&id| id as u32)
                    .collect::<Vec<_>>(),
                "case {case}"
            ),
        }
    }
    assert!(
        compared > 1000 && with_ids > 400 && refused > 20,
        "{compared} {with_ids} {refused}"
    );
}

/// An id's varint as some encoder may write it: canonical, or padded with continuation bytes
/// (protobuf reads up to 10 bytes).
fn varint_bytes(rng: &mut Rng, mut value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
    let pad = if rng.below(6) == 0 {
        rng.below(11 - out.len() as u64)
    } else {
        0
    };
    for _ in 0..pad {
        *out.last_mut().expect("a byte") |= 0x80;
        out.push(0);
    }
    out
}

/// Packed ids read one varint at a time by the byte reader: what the word-at-a-time reading must
/// equal, ids, refusals and errors alike.
/// (None: a varint past 64 bits, refused as an id).
fn read_bytewise(packed: &[u8]) -> Result<Vec<Option<u64>>, String> {
    let mut r = super::codec::Reader::new(packed, "ScoreRequest.token_ids.token_ids");
    let mut out = Vec::new();
    while !r.done() {
        let (value, overflowed) = r.varint_truncating().map_err(|e| e.message().to_string())?;
        out.push((!overflowed).then_some(value));
    }
    Ok(out)
}

#[test]
fn packed_ids_of_every_length_and_padding_read_as_byte_by_byte() {
    let mut rng = Rng(0x9ac4_ed1d);
    let mut compared = 0;
    for case in 0..3000 {
        let mut packed: Vec<u8> = (0..rng.below(60))
            .flat_map(|_| {
                let value = match rng.below(10) {
                    0 => u64::MAX >> rng.below(64),
                    _ => u64::from(rng.id()),
                };
                varint_bytes(&mut rng, value)
            })
            .collect();
        match rng.below(5) {
            0 if !packed.is_empty() => {
                let at = rng.below(packed.len() as u64) as usize;
                packed[at] = rng.next() as u8;
            }
            1 => packed.truncate(rng.below(packed.len() as u64 + 1) as usize),
            _ => {}
        }
        let mut message = vec![0x22];
        let mut inner = vec![0x0a];
        put_len(&mut inner, packed.len());
        inner.extend_from_slice(&packed);
        put_len(&mut message, inner.len());
        message.extend_from_slice(&inner);
        let expected = read_bytewise(&packed);
        let got = match split_score(&message) {
            Err(e) => Err(e.message().to_string()),
            Ok(SplitScore::TokenIds { ids, .. }) => Ok(ids),
            Ok(SplitScore::NotTokenIds) => panic!("case {case}: token ids"),
        };
        match (expected, got) {
            (Err(want), Err(got)) => assert_eq!(got, want, "case {case}"),
            (Ok(values), Ok(read)) => {
                compared += 1;
                match values
                    .iter()
                    .position(|&v| v.is_none_or(|v| v > u64::from(u32::MAX)))
                {
                    Some(at) => {
                        let shown =
                            values[at].map_or("a varint past 64 bits".into(), |v| format!("{v} "));
                        assert!(read
                            .unwrap_err()
                            .message()
                            .starts_with(&format!("token_ids.token_ids[{at}]: {shown}")))
                    }
                    None => assert_eq!(
                        read.expect("ids").to_vec(),
                        values
                            .iter()
                            .map(|&v| v.expect("in range") as u32)
                            .collect::<Vec<_>>(),
                        "case {case}"
                    ),
                }
            }
            (want, got) => panic!("case {case}: {want:?} vs {:?}", got.map(|_| ())),
        }
    }
    assert!(compared > 1500, "{compared}");
}

fn put_len(out: &mut Vec<u8>, mut len: usize) {
    while len >= 0x80 {
        out.push(len as u8 | 0x80);
        len >>= 7;
    }
    out.push(len as u8);
}
