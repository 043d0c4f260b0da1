//! The `open` of a ParseStream, read off the event loop: the server decodes the rest of an
//! `OpenRequest` itself (it resolves the model and its defaults), but its prompt ids can be
//! millions of varints, so they are taken out here, with the GIL released, and handed over as one
//! buffer of ids.

use prost::Message;

use super::pb;
use crate::error::{Error, Result};

/// Splits a raw `ParseStreamRequest` holding an `open` into the same message without the open's
/// `prompt_token_ids` and those ids. A message that does not decode is INVALID_ARGUMENT (the
/// server answers it as a malformed open).
pub fn split_open(message: &[u8]) -> Result<(Vec<u8>, Vec<u32>)> {
    let mut request = pb::ParseStreamRequest::decode(message)
        .map_err(|e| Error::invalid_argument(format!("open: malformed OpenRequest ({e})")))?;
    let ids = match &mut request.kind {
        Some(pb::parse_stream_request::Kind::Open(open)) => {
            std::mem::take(&mut open.prompt_token_ids)
        }
        _ => Vec::new(),
    };
    Ok((request.encode_to_vec(), ids))
}
