//! Target `parse_wire`: arbitrary bytes as `ParseStreamRequest` messages through
//! [`sidecar_native::parse::Mux::handle`], the path a client's raw bytes take, against a reference
//! decoder (prost, message structs written from protos/sidecar/v1/preprocessor.proto).
//!
//! Layout: a sequence of messages, each a length byte and that many bytes (255 = the rest). An
//! `open` that the reference decodes is opened on the embedded-model vocabulary (qwen3) as the
//! server would; steps and cancels are answered by the mux.
//!
//! Checks, while the reference accepts every message so far: a message the reference decodes is
//! accepted (or refused only for out-of-range token ids), an empty one is refused; a step answers
//! each item in order: exactly one error delta (NOT_FOUND, or FAILED_PRECONDITION once finished)
//! for a request that is not open, at most one delta for an open one; a request's first delta
//! carries the fingerprint and no later one does; per-request errors are client codes, never
//! INTERNAL. Always: the answer is a valid `ParseStreamResponse`.

use std::collections::HashSet;

use prost::Message;
use sidecar_native::parse::{Handled, Mux, MuxLimits, OpenOptions, SessionConfig};

use crate::input::Input;
use crate::models;

/// Reference message structs (field numbers from the .proto).
pub mod pb {
    /// `ParseStreamRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ParseStreamRequest {
        /// `oneof kind`.
        #[prost(oneof = "Kind", tags = "1, 2, 3")]
        pub kind: Option<Kind>,
    }
    /// `ParseStreamRequest.kind`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Kind {
        /// `open = 1`.
        #[prost(message, tag = "1")]
        Open(OpenRequest),
        /// `step = 2`.
        #[prost(message, tag = "2")]
        Step(Step),
        /// `cancel = 3`.
        #[prost(message, tag = "3")]
        Cancel(CancelRequest),
    }
    /// `OpenRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct OpenRequest {
        /// 1
        #[prost(string, tag = "1")]
        pub request_id: String,
        /// 2
        #[prost(string, tag = "2")]
        pub model: String,
        /// 3
        #[prost(string, tag = "3")]
        pub tool_parser: String,
        /// 4
        #[prost(string, tag = "4")]
        pub reasoning_parser: String,
        /// 5
        #[prost(string, tag = "5")]
        pub tools_json: String,
        /// 6
        #[prost(uint32, repeated, tag = "6")]
        pub prompt_token_ids: Vec<u32>,
        /// 7
        #[prost(string, tag = "7")]
        pub chat_template_kwargs_json: String,
        /// 8
        #[prost(bool, optional, tag = "8")]
        pub skip_special_tokens: Option<bool>,
        /// 9
        #[prost(string, repeated, tag = "9")]
        pub stop: Vec<String>,
        /// 10
        #[prost(bool, tag = "10")]
        pub include_stop_str_in_output: bool,
    }
    /// `StepTokens`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StepTokens {
        /// 1
        #[prost(string, tag = "1")]
        pub request_id: String,
        /// 2
        #[prost(uint32, repeated, tag = "2")]
        pub token_ids: Vec<u32>,
        /// 3
        #[prost(bool, tag = "3")]
        pub finished: bool,
    }
    /// `Step`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Step {
        /// 1
        #[prost(message, repeated, tag = "1")]
        pub items: Vec<StepTokens>,
    }
    /// `CancelRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CancelRequest {
        /// 1
        #[prost(string, tag = "1")]
        pub request_id: String,
    }
    /// `ToolCallDelta`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ToolCallDelta {
        /// 1
        #[prost(uint32, tag = "1")]
        pub index: u32,
        /// 2
        #[prost(string, tag = "2")]
        pub id: String,
        /// 3
        #[prost(string, tag = "3")]
        pub name: String,
        /// 4
        #[prost(string, tag = "4")]
        pub arguments: String,
    }
    /// `Status`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Status {
        /// 1
        #[prost(int32, tag = "1")]
        pub code: i32,
        /// 2
        #[prost(string, tag = "2")]
        pub message: String,
    }
    /// `RequestDelta`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RequestDelta {
        /// 1
        #[prost(string, tag = "1")]
        pub request_id: String,
        /// 2
        #[prost(string, tag = "2")]
        pub content: String,
        /// 3
        #[prost(string, tag = "3")]
        pub reasoning: String,
        /// 4
        #[prost(message, repeated, tag = "4")]
        pub tool_calls: Vec<ToolCallDelta>,
        /// 5
        #[prost(uint32, tag = "5")]
        pub reasoning_tokens: u32,
        /// 6
        #[prost(uint32, tag = "6")]
        pub completion_tokens: u32,
        /// 7
        #[prost(bool, tag = "7")]
        pub finished: bool,
        /// 8
        #[prost(string, tag = "8")]
        pub finish_reason: String,
        /// 9
        #[prost(string, tag = "9")]
        pub matched_stop: String,
        /// 10
        #[prost(message, optional, tag = "10")]
        pub error: Option<Status>,
        /// 11
        #[prost(string, tag = "11")]
        pub fingerprint: String,
    }
    /// `ParseStreamResponse`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ParseStreamResponse {
        /// 1
        #[prost(message, repeated, tag = "1")]
        pub deltas: Vec<RequestDelta>,
    }
}

const FINGERPRINT: &str = "fp";

/// What the target knows of the mux's requests.
#[derive(Default)]
struct Model {
    open: HashSet<String>,
    /// Opened and not yet answered (the next delta must carry the fingerprint).
    unanswered: HashSet<String>,
    finished: HashSet<String>,
    /// False once a message the reference refused was accepted: the state is no longer known.
    exact: bool,
}

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let Some(model) = models::model("qwen3") else {
        return;
    };
    let mut input = Input::new(data);
    let mut mux = Mux::new(MuxLimits {
        max_requests: 8,
        ..MuxLimits::default()
    });
    let mut state = Model {
        exact: true,
        ..Model::default()
    };
    loop {
        let rest = input.rest();
        if rest.is_empty() {
            break;
        }
        let len = rest[0] as usize;
        let len = if len == 255 {
            rest.len() - 1
        } else {
            len.min(rest.len() - 1)
        };
        let (message, tail) = rest[1..].split_at(len);
        handle(&mut mux, &model.parse, &mut state, message);
        input = Input::new(tail);
    }
}

fn handle(
    mux: &mut Mux,
    parse: &std::sync::Arc<sidecar_native::parse::ParseModel>,
    state: &mut Model,
    message: &[u8],
) {
    let reference = pb::ParseStreamRequest::decode(message);
    let mut out = Vec::new();
    let native = mux.handle(message, &mut out);
    if let Err(e) = &native {
        crate::assert_clean_error(e, "Mux::handle");
        assert!(out.is_empty(), "a refused message wrote an answer");
    }
    let response = pb::ParseStreamResponse::decode(out.as_slice())
        .unwrap_or_else(|e| panic!("the answer is not a ParseStreamResponse: {e}"));
    for d in &response.deltas {
        if let Some(status) = &d.error {
            assert!(
                [3, 5, 8, 9].contains(&status.code),
                "request {:?} failed with code {}: {}",
                d.request_id,
                status.code,
                status.message
            );
        }
    }
    let reference = match reference {
        Ok(r) => r,
        Err(_) => {
            state.exact &= native.is_err();
            return;
        }
    };
    let kind = match (&native, reference.kind) {
        (Err(e), Some(_)) => {
            assert!(
                e.message().contains("token_ids"),
                "a valid message was refused: {}",
                e.message()
            );
            return;
        }
        (Err(_), None) => return,
        (Ok(h), None) => panic!("a message with none of open/step/cancel was accepted as {h:?}"),
        (Ok(_), Some(kind)) => kind,
    };
    match kind {
        pb::Kind::Open(open) => {
            assert_eq!(
                native.ok(),
                Some(Handled::Open),
                "open not reported as open"
            );
            do_open(mux, parse, state, &open);
        }
        pb::Kind::Cancel(cancel) => {
            assert!(out.is_empty(), "a cancel was answered");
            if state.open.remove(&cancel.request_id) {
                state.unanswered.remove(&cancel.request_id);
                state.finished.insert(cancel.request_id);
            }
        }
        pb::Kind::Step(step) => check_step(state, &step, &response),
    }
}

fn do_open(
    mux: &mut Mux,
    parse: &std::sync::Arc<sidecar_native::parse::ParseModel>,
    state: &mut Model,
    open: &pb::OpenRequest,
) {
    let cfg = SessionConfig {
        tool_parser: open.tool_parser.clone(),
        reasoning_parser: open.reasoning_parser.clone(),
        tools_json: open.tools_json.clone(),
        chat_template_kwargs_json: open.chat_template_kwargs_json.clone(),
        skip_special_tokens: open.skip_special_tokens.unwrap_or(true),
        stop: open.stop.clone(),
        include_stop_str_in_output: open.include_stop_str_in_output,
        id_seed: 7,
        ..SessionConfig::default()
    };
    let opts = OpenOptions {
        request_id: open.request_id.clone(),
        fingerprint: FINGERPRINT.into(),
    };
    match mux.open(parse.clone(), &opts, &cfg, &open.prompt_token_ids) {
        Ok(()) => {
            assert!(
                !state.open.contains(&open.request_id) || !state.exact,
                "reopened an open id"
            );
            state.open.insert(open.request_id.clone());
            state.unanswered.insert(open.request_id.clone());
            state.finished.remove(&open.request_id);
        }
        Err(e) => {
            crate::assert_clean_error(&e, "Mux::open");
            // Opening an id that is open ends that request too (see `Mux::open`): its later
            // steps are answered as finished.
            if state.open.remove(&open.request_id) {
                state.unanswered.remove(&open.request_id);
                state.finished.insert(open.request_id.clone());
            }
        }
    }
}

fn check_step(state: &mut Model, step: &pb::Step, response: &pb::ParseStreamResponse) {
    // An open request named twice in one step may answer the first item or only the second: the
    // answers no longer say which item they belong to.
    let mut seen = HashSet::new();
    if step
        .items
        .iter()
        .any(|i| state.open.contains(&i.request_id) && !seen.insert(&i.request_id))
    {
        state.exact = false;
    }
    let mut deltas = response.deltas.iter().peekable();
    for item in &step.items {
        let id = &item.request_id;
        let ours = deltas.peek().is_some_and(|d| &d.request_id == id);
        if !state.exact {
            if ours {
                deltas.next();
            }
            continue;
        }
        if !state.open.contains(id) {
            let d = deltas
                .next()
                .unwrap_or_else(|| panic!("no answer for unknown request {id:?}"));
            assert_eq!(&d.request_id, id, "answers out of order");
            let code = d.error.as_ref().map(|s| s.code);
            let want = if state.finished.contains(id) { 9 } else { 5 };
            assert_eq!(code, Some(want), "request {id:?}: {:?}", d.error);
            continue;
        }
        if !ours {
            continue;
        }
        let d = deltas.next().expect("peeked");
        let first = state.unanswered.remove(id);
        assert_eq!(
            d.fingerprint,
            if first { FINGERPRINT } else { "" },
            "fingerprint on the wrong delta of {id:?}"
        );
        if d.finished || d.error.is_some() {
            assert!(d.finished, "an error delta of {id:?} does not say finished");
            state.open.remove(id);
            state.finished.insert(id.clone());
        }
    }
    if state.exact {
        assert!(deltas.next().is_none(), "more answers than items");
    }
}
