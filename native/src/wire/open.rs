//! The `open` of a ParseStream, read off the event loop: the server decodes the rest of an
//! `OpenRequest` itself (it resolves the model and its defaults), but its prompt ids can be
//! millions of varints, so they are taken out here, with the GIL released, and handed over as one
//! buffer of ids.

use prost::Message;

use super::pb;
use crate::error::{Error, Result};

/// The open's ids read as 64-bit: prost reads a `uint32` field by truncating the varint (2^32
/// would arrive as token 0), so the ids are read wide and checked.
#[derive(Clone, PartialEq, prost::Message)]
struct WideIds {
    #[prost(uint64, repeated, tag = "6")]
    prompt_token_ids: Vec<u64>,
}

/// `ParseStreamRequest` down to its `open` (field 1 of the oneof), everything else skipped.
#[derive(Clone, PartialEq, prost::Message)]
struct WideOpen {
    #[prost(message, optional, tag = "1")]
    open: Option<WideIds>,
}

/// What `split_open` makes of a message: the message without the open's prompt ids, and those ids,
/// or the first id that is not a token id (the message is still given, to name its request).
pub struct SplitOpen {
    pub without_ids: Vec<u8>,
    pub ids: std::result::Result<Vec<u32>, Error>,
}

/// Splits a raw `ParseStreamRequest` holding an `open` into the same message without the open's
/// `prompt_token_ids` and those ids. A message that does not decode is INVALID_ARGUMENT (the
/// server answers it as a malformed open); an id above 2^32-1 is INVALID_ARGUMENT naming it, in
/// `ids`.
pub fn split_open(message: &[u8]) -> Result<SplitOpen> {
    let malformed = |e: prost::DecodeError| {
        Error::invalid_argument(format!("open: malformed OpenRequest ({e})"))
    };
    let wide = WideOpen::decode(message).map_err(malformed)?;
    let mut request = pb::ParseStreamRequest::decode(message).map_err(malformed)?;
    if let Some(pb::parse_stream_request::Kind::Open(open)) = &mut request.kind {
        open.prompt_token_ids = Vec::new();
    }
    let wide_ids = wide.open.map(|o| o.prompt_token_ids).unwrap_or_default();
    let ids = match wide_ids.iter().position(|&id| id > u64::from(u32::MAX)) {
        Some(at) => Err(Error::invalid_argument(format!(
            "open.prompt_token_ids[{at}]: {} is not a token id (token ids are below 2^32)",
            wide_ids[at]
        ))),
        // In range, so the narrowing keeps every value.
        None => Ok(wide_ids.into_iter().map(|id| id as u32).collect()),
    };
    Ok(SplitOpen {
        without_ids: request.encode_to_vec(),
        ids,
    })
}
