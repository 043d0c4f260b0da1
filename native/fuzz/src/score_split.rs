//! Target `score_split`: arbitrary bytes as the raw body of a KvRouter `ScoreRequest` through
//! [`sidecar_native::wire::split_score`], the path any router's request takes on the native
//! backend (its token ids read in vector code where the CPU has it), against prost's decoding of
//! the generated message ([`sidecar_native::wire::pb`]) and of a copy whose ids are 64-bit (so an
//! id protobuf would truncate is seen as it was sent).
//!
//! Layout: the message itself.
//!
//! Checks, when prost decodes the message: the split accepts it; it splits off ids exactly when
//! the input is `token_ids`; the rest decodes to the message without its input; the ids equal
//! prost's, or, when one is above 2^32-1, the split refuses the first such by its position.
//! Always: no panic (a refusal is an error, never a crash).

use prost::Message;
use sidecar_native::wire::pb::{self, score_request::Input};
use sidecar_native::wire::{split_score, SplitScore};

/// `ScoreRequest` with only its input, ids as `uint64`: the same bytes read without truncation.
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

pub fn run(data: &[u8]) {
    let split = split_score(data);
    let (Ok(whole), Ok(wide)) = (pb::ScoreRequest::decode(data), WideScore::decode(data)) else {
        return;
    };
    let split = split.unwrap_or_else(|e| panic!("prost reads it, split_score refused: {e:?}"));
    let (rest, ids) = match split {
        SplitScore::NotTokenIds => {
            assert!(
                !matches!(whole.input, Some(Input::TokenIds(_))),
                "ids not split off"
            );
            return;
        }
        SplitScore::TokenIds { without_input, ids } => (without_input, ids),
    };
    let Some(WideInput::TokenIds(wide)) = wide.input else {
        panic!("split as token ids, prost read {:?}", whole.input);
    };
    let without = pb::ScoreRequest {
        input: None,
        ..whole
    };
    assert_eq!(
        pb::ScoreRequest::decode(&rest[..]).expect("the rest decodes"),
        without
    );
    match wide
        .token_ids
        .iter()
        .position(|&id| id > u64::from(u32::MAX))
    {
        Some(at) => {
            let refused = ids.expect_err("an id above 2^32-1 is refused");
            let message = refused.message();
            assert!(
                message.starts_with(&format!("token_ids.token_ids[{at}]: ")),
                "{message}"
            );
        }
        None => {
            let read = ids.expect("ids in range are read").to_vec();
            assert!(read
                .iter()
                .map(|&id| u64::from(id))
                .eq(wide.token_ids.iter().copied()));
        }
    }
}
