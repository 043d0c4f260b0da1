//! The stream's rules on a toy tokenizer and a one-line template: results per id, deferral by
//! cost, the in-flight limit, duplicate ids, refusal while draining, deadlines, chunking under the
//! message limit. That each request is answered as its unary RPC answers it is held by the
//! end-to-end tests (`tests/server/test_multiplex.py`) against the real server.

use std::sync::Arc;

use prost::Message;

use super::*;
use crate::render::RendererConfig;
use crate::tokenizer::tests::toy_json;
use crate::tokenizer::{Tokenizer, TokenizerFormat};
use crate::wire::pb::multiplex_call::Request as Call;
use crate::wire::pb::multiplex_result::Result as Outcome;

/// gRPC's UNAVAILABLE (the server's drain refusal; the core itself never returns it).
const UNAVAILABLE: i32 = 14;

const TEMPLATE: &str = "{% for m in messages %}{{ m.content }} {% endfor %}";

fn multiplexer(inline_bytes: usize, max_inflight: usize, max_message_bytes: usize) -> Multiplexer {
    multiplexer_allowing(false, inline_bytes, max_inflight, max_message_bytes)
}

fn multiplexer_allowing(
    allow_request_templates: bool,
    inline_bytes: usize,
    max_inflight: usize,
    max_message_bytes: usize,
) -> Multiplexer {
    multiplexer_with_template(
        TEMPLATE,
        allow_request_templates,
        inline_bytes,
        max_inflight,
        max_message_bytes,
    )
}

fn multiplexer_with_template(
    template: &str,
    allow_request_templates: bool,
    inline_bytes: usize,
    max_inflight: usize,
    max_message_bytes: usize,
) -> Multiplexer {
    let tokenizer =
        Arc::new(Tokenizer::from_json_text(&toy_json(), TokenizerFormat::TokenizerJson).unwrap());
    let config = RendererConfig {
        templates: vec![("default".into(), template.into())],
        ..RendererConfig::default()
    };
    let renderer = Arc::new(Renderer::new(tokenizer.clone(), config));
    let model = Model {
        name: "toy".into(),
        fingerprint: "fp".into(),
        tokenizer,
        renderer,
    };
    let settings = Settings {
        allow_request_templates,
        inline_bytes,
        max_inflight,
        max_message_bytes,
        max_text_chars: 64 << 20,
        max_word_chars: 100_000,
        max_token_ids: 16 << 20,
        max_kwargs_bytes: 1 << 20,
    };
    Multiplexer::new(vec![model], settings)
}

/// What encoding a byte costs on the toy tokenizer (the fast encoder does not load it, so every
/// encode takes the `tokenizers` path and is priced as such).
fn toy_encode_factor() -> usize {
    Tokenizer::from_json_text(&toy_json(), TokenizerFormat::TokenizerJson)
        .unwrap()
        .encode_cost(1, false, false)
}

fn tokenize(id: u64, text: &str) -> pb::MultiplexCall {
    pb::MultiplexCall {
        id,
        timeout_us: 0,
        request: Some(Call::Tokenize(pb::TokenizeRequest {
            model: "toy".into(),
            texts: vec![text.into()],
            ..Default::default()
        })),
    }
}

fn message(calls: Vec<pb::MultiplexCall>, cancel: Vec<u64>) -> Vec<u8> {
    pb::MultiplexRequest { calls, cancel }.encode_to_vec()
}

fn results(batch: &Batch) -> Vec<pb::MultiplexResult> {
    let mut start = 0;
    let mut out = Vec::new();
    for &end in &batch.chunk_ends {
        out.extend(
            pb::MultiplexResponse::decode(&batch.out[start..end])
                .unwrap()
                .results,
        );
        start = end;
    }
    assert_eq!(start, batch.out.len(), "bytes outside every chunk");
    out
}

/// The one result of a call `run` deferred, run alone as the server runs it on a worker.
fn run_deferred(mux: &Multiplexer, raw: &[u8], deferred: Deferred) -> pb::MultiplexResult {
    let one = mux
        .run_one(
            &raw[deferred.start..deferred.start + deferred.len],
            Duration::ZERO,
            None,
        )
        .unwrap();
    let [result] = &results(&one)[..] else {
        panic!("{:?}", results(&one))
    };
    result.clone()
}

fn error_code(result: &pb::MultiplexResult) -> Option<i32> {
    match &result.result {
        Some(Outcome::Error(status)) => Some(status.code),
        _ => None,
    }
}

#[test]
fn small_requests_are_answered_in_the_call_and_large_ones_deferred() {
    // A text costs its bytes and ITEM_COST, priced by the encoder: "ab" 66 and "a b" 67 run
    // inline, `big` 94 does not.
    let factor = toy_encode_factor();
    let mux = multiplexer((8 + execute::ITEM_COST) * factor, 100, 1 << 20);
    let big = "ab ".repeat(10);
    let raw = message(
        vec![tokenize(1, "ab"), tokenize(2, &big), tokenize(3, "a b")],
        vec![7],
    );
    let pending = RunOptions {
        pending: &[7],
        ..RunOptions::default()
    };
    let batch = mux.run(&raw, &pending).unwrap();
    let answered: Vec<u64> = results(&batch).iter().map(|r| r.id).collect();
    assert_eq!(answered, [1, 3]);
    assert_eq!(batch.cancel, [7]);
    let [deferred] = batch.deferred[..] else {
        panic!("{:?}", batch.deferred)
    };
    assert_eq!(
        (deferred.id, deferred.kind, deferred.cost),
        (
            2,
            CallKind::Tokenize,
            (big.len() + execute::ITEM_COST) * factor
        )
    );
    let result = run_deferred(&mux, &raw, deferred);
    let Some(Outcome::Tokenize(response)) = &result.result else {
        panic!("{result:?}")
    };
    // The same request run inline (a larger inline bound) gets the same response.
    let inline = multiplexer(1 << 20, 100, 1 << 20);
    let again = results(
        &inline
            .run(
                &message(vec![tokenize(2, &big)], vec![]),
                &RunOptions::default(),
            )
            .unwrap(),
    );
    let Some(Outcome::Tokenize(direct)) = &again[0].result else {
        panic!("{:?}", again[0])
    };
    assert_eq!(response, direct);
}

#[test]
fn each_bad_request_gets_its_own_error() {
    let mux = multiplexer(1 << 20, 100, 1 << 20);
    let unknown = pb::MultiplexCall {
        request: Some(Call::Detokenize(pb::DetokenizeRequest {
            model: "nope".into(),
            ..Default::default()
        })),
        ..tokenize(2, "")
    };
    let empty = pb::MultiplexCall {
        id: 3,
        ..Default::default()
    };
    let raw = message(
        vec![tokenize(1, "ab"), unknown, empty, tokenize(4, "b")],
        vec![],
    );
    let got = results(&mux.run(&raw, &RunOptions::default()).unwrap());
    let codes: Vec<_> = got.iter().map(|r| (r.id, error_code(r))).collect();
    assert_eq!(
        codes,
        [
            (1, None),
            (2, Some(grpc_code::NOT_FOUND)),
            (3, Some(grpc_code::INVALID_ARGUMENT)),
            (4, None)
        ]
    );
}

#[test]
fn limit_duplicates_and_refusal() {
    let mux = multiplexer(1 << 20, 3, 1 << 20);
    let calls = vec![tokenize(1, "a"), tokenize(1, "a"), tokenize(2, "b")];
    let opts = RunOptions {
        pending: &[9],
        ..RunOptions::default()
    };
    let got = results(&mux.run(&message(calls.clone(), vec![]), &opts).unwrap());
    let codes: Vec<_> = got.iter().map(|r| (r.id, error_code(r))).collect();
    assert_eq!(
        codes,
        [
            (1, None),
            (1, Some(grpc_code::INVALID_ARGUMENT)),
            (2, Some(grpc_code::RESOURCE_EXHAUSTED))
        ]
    );
    let refuse = RunOptions {
        refuse: Some((UNAVAILABLE, "draining")),
        ..RunOptions::default()
    };
    let got = results(&mux.run(&message(calls, vec![]), &refuse).unwrap());
    assert!(got.iter().all(|r| error_code(r) == Some(UNAVAILABLE)));
}

#[test]
fn a_message_whose_flag_is_set_stops_as_cancelled() {
    // A large message runs on a worker; its client gone, the rest of its requests must not run.
    let mux = multiplexer(1 << 20, 100, 1 << 20);
    let flag = std::sync::atomic::AtomicU32::new(1);
    let opts = RunOptions {
        flag: Some(&flag),
        ..RunOptions::default()
    };
    let raw = message(vec![tokenize(1, "ab"), tokenize(2, "b")], vec![]);
    let err = mux.run(&raw, &opts).expect_err("cancelled");
    assert_eq!(err.kind(), crate::error::ErrorKind::Cancelled);
    flag.store(0, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(results(&mux.run(&raw, &opts).unwrap()).len(), 2);
}

#[test]
fn a_passed_deadline_fails_before_work() {
    let mux = multiplexer(1 << 20, 100, 1 << 20);
    let call = pb::MultiplexCall {
        timeout_us: 10,
        ..tokenize(1, "ab")
    };
    let opts = RunOptions {
        elapsed: Duration::from_millis(1),
        ..RunOptions::default()
    };
    let got = results(&mux.run(&message(vec![call], vec![]), &opts).unwrap());
    assert_eq!(error_code(&got[0]), Some(grpc_code::DEADLINE_EXCEEDED));
}

#[test]
fn results_are_cut_into_messages_within_the_limit() {
    let limit = 200;
    let mux = multiplexer(1 << 20, 100, limit);
    let calls = (1..=20).map(|i| tokenize(i, "ab ab ab")).collect();
    let batch = mux
        .run(&message(calls, vec![]), &RunOptions::default())
        .unwrap();
    assert!(batch.chunk_ends.len() > 1);
    let mut start = 0;
    for &end in &batch.chunk_ends {
        assert!(end - start <= limit);
        start = end;
    }
    assert_eq!(results(&batch).len(), 20);
    // One response larger than the limit is replaced by its own error.
    let huge = tokenize(21, &"ab ".repeat(200));
    let got = results(
        &mux.run(&message(vec![huge], vec![]), &RunOptions::default())
            .unwrap(),
    );
    assert_eq!(error_code(&got[0]), Some(grpc_code::RESOURCE_EXHAUSTED));
}

#[test]
fn a_render_with_its_own_template_is_deferred_however_small() {
    // A 100-byte template loop ran for a second inline, on the server's event loop.
    let render = |id: u64, template: Option<&str>| pb::MultiplexCall {
        id,
        timeout_us: 0,
        request: Some(Call::Render(pb::RenderRequest {
            model: "toy".into(),
            messages_json: r#"[{"role":"user","content":"ab"}]"#.into(),
            chat_template: template.map(str::to_owned),
            return_text: true,
            ..Default::default()
        })),
    };
    let calls = vec![
        render(1, Some("{{ messages[0].content }}")),
        render(2, None),
    ];
    let allowed = multiplexer_allowing(true, 1 << 20, 100, 1 << 20);
    let batch = allowed
        .run(&message(calls.clone(), vec![]), &RunOptions::default())
        .unwrap();
    let deferred: Vec<_> = batch.deferred.iter().map(|d| (d.id, d.cost)).collect();
    assert_eq!(deferred, [(1, usize::MAX)]);
    assert_eq!(
        results(&batch).iter().map(|r| r.id).collect::<Vec<_>>(),
        [2]
    );
    // Not allowed: refused inline (the template is never run), so there is nothing to defer.
    let refused = multiplexer(1 << 20, 100, 1 << 20)
        .run(&message(calls, vec![]), &RunOptions::default())
        .unwrap();
    assert!(refused.deferred.is_empty());
}

#[test]
fn render_and_detokenize_run_through_the_model() {
    let mux = multiplexer(1 << 20, 100, 1 << 20);
    let render = pb::MultiplexCall {
        id: 1,
        timeout_us: 0,
        request: Some(Call::Render(pb::RenderRequest {
            model: "toy".into(),
            messages_json: r#"[{"role":"user","content":"ab"}]"#.into(),
            return_text: true,
            ..Default::default()
        })),
    };
    let detokenize = pb::MultiplexCall {
        id: 2,
        timeout_us: 0,
        request: Some(Call::Detokenize(pb::DetokenizeRequest {
            model: "toy".into(),
            sequences: vec![pb::TokenIds {
                token_ids: vec![2, 4],
            }],
            skip_special_tokens: None,
        })),
    };
    let got = results(
        &mux.run(
            &message(vec![render, detokenize], vec![]),
            &RunOptions::default(),
        )
        .unwrap(),
    );
    let Some(Outcome::Render(rendered)) = &got[0].result else {
        panic!("{:?}", got[0])
    };
    assert_eq!(
        (rendered.text.as_str(), rendered.fingerprint.as_str()),
        ("ab ", "fp")
    );
    let Some(Outcome::Detokenize(detok)) = &got[1].result else {
        panic!("{:?}", got[1])
    };
    assert_eq!(detok.texts, ["ab ab"]);
}

#[test]
fn a_deferred_request_whose_flag_is_set_stops_as_cancelled() {
    let mux = multiplexer(8, 100, 1 << 20);
    let big = "ab ".repeat(10);
    let raw = message(vec![tokenize(2, &big)], vec![]);
    let batch = mux.run(&raw, &RunOptions::default()).unwrap();
    let [deferred] = batch.deferred[..] else {
        panic!("{:?}", batch.deferred)
    };
    let call = &raw[deferred.start..deferred.start + deferred.len];
    let flag = std::sync::atomic::AtomicU32::new(1);
    let cancelled = mux.run_one(call, Duration::ZERO, Some(&flag)).unwrap();
    let [result] = &results(&cancelled)[..] else {
        panic!()
    };
    assert_eq!(
        (result.id, error_code(result)),
        (2, Some(grpc_code::CANCELLED))
    );
    // An unset flag lets the same call run to its result.
    flag.store(0, std::sync::atomic::Ordering::Relaxed);
    let done = mux.run_one(call, Duration::ZERO, Some(&flag)).unwrap();
    assert_eq!(error_code(&results(&done)[0]), None);
}

fn unary_tokenize(text: &str) -> Vec<u8> {
    pb::TokenizeRequest {
        model: "toy".into(),
        texts: vec![text.into()],
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn a_unary_request_answers_as_its_multiplexed_twin() {
    let mux = multiplexer(1 << 20, 100, 1 << 20);
    let (outcome, result) = mux.run_unary(
        CallKind::Tokenize,
        &unary_tokenize("ab a b"),
        &UnaryOptions::default(),
    );
    result.unwrap();
    assert_eq!(
        (
            outcome.model.as_str(),
            outcome.malformed,
            outcome.deferred_cost
        ),
        ("toy", false, 0)
    );
    let unary = pb::TokenizeResponse::decode(&outcome.response[..]).unwrap();
    let batch = mux
        .run(
            &message(vec![tokenize(1, "ab a b")], vec![]),
            &RunOptions::default(),
        )
        .unwrap();
    let Some(Outcome::Tokenize(streamed)) = &results(&batch)[0].result else {
        panic!()
    };
    assert_eq!(&unary, streamed);
    assert_eq!(unary.fingerprint, "fp");
}

#[test]
fn a_unary_request_above_the_inline_bound_is_deferred_by_its_cost() {
    let mux = multiplexer(1 << 20, 100, 1 << 20);
    let body = unary_tokenize(&"ab ".repeat(10));
    let opts = UnaryOptions {
        inline_bytes: 16,
        ..UnaryOptions::default()
    };
    let (outcome, result) = mux.run_unary(CallKind::Tokenize, &body, &opts);
    result.unwrap();
    // The body's bytes plus one item's cost, as the server counts a Tokenize, priced by the
    // encoder.
    assert_eq!(
        outcome.deferred_cost,
        (body.len() + 64) * toy_encode_factor()
    );
    assert!(outcome.response.is_empty());
}

#[test]
fn unary_failures_keep_what_the_log_line_needs() {
    let mux = multiplexer(1 << 20, 100, 1 << 20);
    let (outcome, result) = mux.run_unary(CallKind::Render, b"\xff\xff", &UnaryOptions::default());
    let e = result.unwrap_err();
    assert!(outcome.malformed);
    assert_eq!(e.kind(), crate::error::ErrorKind::InvalidArgument);
    assert!(
        e.message()
            .starts_with("RenderRequest: the request body is not a valid RenderRequest"),
        "{}",
        e.message()
    );

    let body = pb::TokenizeRequest {
        model: "other".into(),
        ..Default::default()
    }
    .encode_to_vec();
    let (outcome, result) = mux.run_unary(CallKind::Tokenize, &body, &UnaryOptions::default());
    assert_eq!(
        result.unwrap_err().kind(),
        crate::error::ErrorKind::NotFound
    );
    assert_eq!(
        (outcome.model.as_str(), outcome.malformed),
        ("other", false)
    );
}

#[test]
fn a_unary_request_stops_when_its_flag_is_set() {
    let mux = multiplexer(1 << 20, 100, 1 << 20);
    let flag = std::sync::atomic::AtomicU32::new(1);
    let opts = UnaryOptions {
        cancel: Cancel::new(None, Some(&flag)),
        inline_bytes: 0,
    };
    let (_, result) = mux.run_unary(
        CallKind::Tokenize,
        &unary_tokenize(&"ab ".repeat(1000)),
        &opts,
    );
    assert_eq!(
        result.unwrap_err().kind(),
        crate::error::ErrorKind::Cancelled
    );
}

/// A message may carry no more calls than a stream may have waiting: every call is answered, and
/// a message of 2-byte empty calls made hundreds of times its size in error answers.
#[test]
fn a_message_of_more_calls_than_may_wait_is_refused_whole() {
    let mux = multiplexer(1 << 20, 3, 1 << 20);
    let four = message((1..=4).map(|id| tokenize(id, "ab")).collect(), vec![]);
    let err = mux.run(&four, &RunOptions::default()).unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::ResourceExhausted);
    assert!(
        err.message().contains("--multiplex-max-inflight 3"),
        "{}",
        err.message()
    );
    let three = message((1..=3).map(|id| tokenize(id, "ab")).collect(), vec![]);
    assert_eq!(
        results(&mux.run(&three, &RunOptions::default()).unwrap()).len(),
        3
    );
}

/// Only ids that wait for a result are handed back to cancel, each once, in the message's order:
/// the stream's pending ones and the message's own deferred ones (a message of 60M cancel ids
/// made a 500 MB list the server walked on its event loop).
#[test]
fn cancels_name_only_waiting_requests_once() {
    let mux = multiplexer((8 + execute::ITEM_COST) * toy_encode_factor(), 100, 1 << 20);
    let big = "ab ".repeat(10);
    let mut cancel = vec![5, 5, 9, 12, 6, 5];
    cancel.extend(1000..200_000);
    let mut raw = message(vec![tokenize(12, &big), tokenize(13, "ab")], cancel);
    // And one not packed (field 2, a varint), as protobuf allows.
    raw.extend([0x10, 8]);
    let opts = RunOptions {
        pending: &[5, 6, 8],
        ..RunOptions::default()
    };
    let batch = mux.run(&raw, &opts).unwrap();
    assert_eq!(batch.deferred.len(), 1);
    assert_eq!(batch.cancel, [5, 12, 6, 8]);
}

/// A Tokenize of many short texts costs an item's cost per text, as on the unary path: 5,400
/// one-character texts in 16 KB ran 11 ms on the event loop.
#[test]
fn many_short_texts_cost_their_items() {
    let mux = multiplexer(16 << 10, 100, 1 << 20);
    let mut call = tokenize(1, "a");
    if let Some(Call::Tokenize(r)) = &mut call.request {
        r.texts = vec!["a".into(); 5400];
    }
    let batch = mux
        .run(&message(vec![call], vec![]), &RunOptions::default())
        .unwrap();
    let [deferred] = batch.deferred[..] else {
        panic!("{:?}", batch.deferred)
    };
    assert_eq!(
        deferred.cost,
        5400 * (1 + execute::ITEM_COST) * toy_encode_factor()
    );
}

/// Every message once per message: a prompt that grows with the square of the request, as
/// templates that print the tools for every user message equal to the last one do.
const SQUARING_TEMPLATE: &str =
    "{% for m in messages %}{% for n in messages %}{{ m.content }} {% endfor %}{% endfor %}";

fn chat(n: usize) -> String {
    format!(
        "[{}]",
        vec![r#"{"role": "user", "content": "ab"}"#; n].join(",")
    )
}

/// A request small enough for the event loop whose real work is not (a prompt 40 times its
/// request, block hashing that repeats a 1.5 KB LoRA name in every block) stops once that shows and
/// is handed back with its cost; run on a worker (no inline bound) it answers in full, exactly
/// as a request that never started inline.
#[test]
fn a_unary_request_whose_work_outgrows_its_size_runs_on_a_worker() {
    let inline = UnaryOptions {
        inline_bytes: 16 << 10,
        ..UnaryOptions::default()
    };
    let mux = multiplexer_with_template(SQUARING_TEMPLATE, false, 1 << 20, 100, 1 << 20);
    let render = pb::RenderRequest {
        model: "toy".into(),
        messages_json: chat(50),
        ..Default::default()
    }
    .encode_to_vec();
    let (outcome, result) = mux.run_unary(CallKind::Render, &render, &inline);
    result.unwrap();
    let prompt = 50 * 50 * "ab ".len();
    assert!(render.len() * toy_encode_factor() < 16 << 10);
    assert_eq!(outcome.deferred_cost, prompt * toy_encode_factor());
    assert!(outcome.response.is_empty());
    let (worker, result) = mux.run_unary(CallKind::Render, &render, &UnaryOptions::default());
    result.unwrap();
    assert_eq!(worker.response, whole_render(&render));

    let hashing = |lora: &str| pb::TokenizeRequest {
        model: "toy".into(),
        texts: vec!["ab ".repeat(100)],
        block_hashing: Some(pb::BlockHashing {
            algorithm: "vllm_sha256".into(),
            block_size: 1,
            lora_name: lora.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let small = hashing("x").encode_to_vec();
    let (outcome, result) = mux.run_unary(CallKind::Tokenize, &small, &inline);
    result.unwrap();
    assert_eq!(outcome.deferred_cost, 0, "a plain hash runs inline");
    let blocks = pb::TokenizeResponse::decode(&outcome.response[..])
        .unwrap()
        .encodings[0]
        .block_hashes
        .len();
    let long_lora = hashing(&"L".repeat(1_500)).encode_to_vec();
    assert!(long_lora.len() * toy_encode_factor() < 16 << 10);
    let (outcome, result) = mux.run_unary(CallKind::Tokenize, &long_lora, &inline);
    result.unwrap();
    assert!(
        outcome.deferred_cost > blocks * 1_500,
        "{}",
        outcome.deferred_cost
    );
    let (worker, result) = mux.run_unary(CallKind::Tokenize, &long_lora, &UnaryOptions::default());
    result.unwrap();
    let response = pb::TokenizeResponse::decode(&worker.response[..]).unwrap();
    assert_eq!(response.encodings[0].block_hashes.len(), blocks);
}

/// The same on the Multiplex stream: the call that outgrew the bound is deferred (no result in
/// this batch) and answers in full when the server runs it alone.
#[test]
fn a_multiplexed_render_whose_prompt_outgrows_its_size_is_deferred() {
    let mux = multiplexer_with_template(SQUARING_TEMPLATE, false, 16 << 10, 100, 1 << 20);
    let call = |id, n| pb::MultiplexCall {
        id,
        timeout_us: 0,
        request: Some(Call::Render(pb::RenderRequest {
            model: "toy".into(),
            messages_json: chat(n),
            ..Default::default()
        })),
    };
    let raw = message(vec![call(1, 3), call(2, 50)], vec![]);
    let batch = mux.run(&raw, &RunOptions::default()).unwrap();
    let answered: Vec<u64> = results(&batch).iter().map(|r| r.id).collect();
    assert_eq!(answered, [1]);
    let [deferred] = batch.deferred[..] else {
        panic!("{:?}", batch.deferred)
    };
    assert_eq!(
        (deferred.id, deferred.cost),
        (2, 50 * 50 * "ab ".len() * toy_encode_factor())
    );
    let result = run_deferred(&mux, &raw, deferred);
    let Some(Outcome::Render(response)) = &result.result else {
        panic!("{result:?}")
    };
    assert_eq!(
        response.encode_to_vec(),
        whole_render(
            &pb::RenderRequest {
                model: "toy".into(),
                messages_json: chat(50),
                ..Default::default()
            }
            .encode_to_vec()
        )
    );
}

/// The response of a Render run inline under a bound it never reaches.
fn whole_render(body: &[u8]) -> Vec<u8> {
    let mux = multiplexer_with_template(SQUARING_TEMPLATE, false, 1 << 30, 100, 1 << 30);
    let opts = UnaryOptions {
        inline_bytes: 1 << 30,
        ..UnaryOptions::default()
    };
    let (outcome, result) = mux.run_unary(CallKind::Render, body, &opts);
    result.unwrap();
    assert_eq!(outcome.deferred_cost, 0);
    outcome.response
}
