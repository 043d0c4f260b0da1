//! The `open` of a ParseStream, read off the event loop: the server decodes the rest of an
//! `OpenRequest` itself (it resolves the model and its defaults), but its prompt ids can be
//! millions of varints, so they are taken out here, with the GIL released, and handed over as one
//! buffer of ids.

use super::codec::{put_key, put_varint, Reader, LEN, VARINT};
use crate::error::{Error, Result};

/// `ParseStreamRequest.open` (field 1 of the oneof).
const OPEN: u64 = 1;
/// `OpenRequest.prompt_token_ids`.
const PROMPT_IDS: u64 = 6;

/// What `split_open` makes of a message: the message without the open's prompt ids, and those ids,
/// or the first id that is not a token id (the message is still given, to name its request).
pub struct SplitOpen {
    pub without_ids: Vec<u8>,
    pub ids: std::result::Result<Vec<u32>, Error>,
}

/// Splits a raw `ParseStreamRequest` holding an `open` into the same message without the open's
/// `prompt_token_ids` and those ids, in one pass: every other field is copied byte for byte. A
/// message whose fields do not read is INVALID_ARGUMENT (the server answers it as a malformed
/// open; it decodes the rest itself); an id above 2^32-1 is INVALID_ARGUMENT naming it, in `ids`.
pub fn split_open(message: &[u8]) -> Result<SplitOpen> {
    let mut without_ids = Vec::with_capacity(message.len());
    let mut ids = Ids::default();
    let mut r = Reader::new(message, "ParseStreamRequest");
    while !r.done() {
        let start = r.pos();
        let (field, wire) = r.key()?;
        if (field, wire) == (OPEN, LEN) {
            let open = split_ids(r.bytes()?, &mut ids)?;
            // Written even when empty: an empty open still selects the oneof.
            put_key(&mut without_ids, OPEN, LEN);
            put_varint(&mut without_ids, open.len() as u64);
            without_ids.extend_from_slice(&open);
        } else if field == OPEN {
            return Err(wrong_wire("ParseStreamRequest.open", wire));
        } else {
            r.skip(field, wire)?;
            without_ids.extend_from_slice(&message[start..r.pos()]);
        }
    }
    let ids = match ids.refused {
        Some((at, id)) => Err(Error::invalid_argument(format!(
            "open.prompt_token_ids[{at}]: {id} is not a token id (token ids are below 2^32)"
        ))),
        None => Ok(ids.read),
    };
    Ok(SplitOpen { without_ids, ids })
}

/// The prompt ids read so far (repeated opens merge, as protobuf merges them), and the first
/// one out of range with its position.
#[derive(Default)]
struct Ids {
    read: Vec<u32>,
    count: usize,
    refused: Option<(usize, u64)>,
}

impl Ids {
    /// Ids are read as 64-bit varints and checked: truncating to 32 bits (what a `uint32` decoder
    /// does) would turn 2^32 into token 0.
    fn push(&mut self, id: u64) {
        match u32::try_from(id) {
            Ok(id) if self.refused.is_none() => self.read.push(id),
            Ok(_) => {}
            Err(_) => {
                self.refused.get_or_insert((self.count, id));
            }
        }
        self.count += 1;
    }
}

/// An `OpenRequest`'s bytes without its prompt ids, which go to `ids` (packed or not).
fn split_ids(open: &[u8], ids: &mut Ids) -> Result<Vec<u8>> {
    let mut rest = Vec::new();
    let mut r = Reader::new(open, "OpenRequest");
    while !r.done() {
        let start = r.pos();
        match r.key()? {
            (PROMPT_IDS, LEN) => {
                let packed = r.bytes()?;
                // Ids of a large vocabulary take two or three bytes each.
                ids.read.reserve(packed.len() / 2);
                let mut values = Reader::new(packed, "OpenRequest.prompt_token_ids");
                while !values.done() {
                    ids.push(values.varint()?);
                }
            }
            (PROMPT_IDS, VARINT) => ids.push(r.varint()?),
            (PROMPT_IDS, wire) => return Err(wrong_wire("OpenRequest.prompt_token_ids", wire)),
            (field, wire) => {
                r.skip(field, wire)?;
                rest.extend_from_slice(&open[start..r.pos()]);
            }
        }
    }
    Ok(rest)
}

/// A known field written with a wire type it cannot have (a decoder would refuse it too).
fn wrong_wire(field: &str, wire: u64) -> Error {
    Error::invalid_argument(format!("malformed {field}: wire type {wire}"))
}
