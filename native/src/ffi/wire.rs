//! Exports for [`crate::wire`]: protobuf encoders the server's transport layer calls.

use super::buf::{read_ids, read_slice, read_str, sc_bytes, sc_ids, sc_str};
use super::status::sc_error;
use super::{guard, require_out, write_out};
use crate::wire;

/// Encodes `sidecar.v1.RenderResponse` fields 1-3 (`text` when `has_text`, `token_ids`,
/// `offsets`) in protobuf wire format into `out`, so the server builds its response from a
/// rendered prompt's id buffer without a Python int per id.
///
/// # Safety
/// `text`, `ids` and `offsets` are borrowed for the call; `out` and `err` must be NULL or valid for
/// writes.
#[no_mangle]
pub unsafe extern "C" fn sc_render_response_encode(
    text: sc_str,
    has_text: bool,
    ids: sc_ids,
    offsets: sc_ids,
    out: *mut sc_bytes,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(out, "out")?;
        // SAFETY: the caller lends the arguments for the call.
        let (text, ids, offsets) = unsafe {
            (
                read_str(text, "text")?,
                read_ids(ids, "token_ids")?,
                read_ids(offsets, "offsets")?,
            )
        };
        let bytes = wire::render_response(has_text.then_some(text), ids, offsets);
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_out(out, sc_bytes::from_vec(bytes), "out") }
    })
}

/// Splits a raw KvRouter `ScoreRequest` (see [`wire::split_score`]). When its input is
/// `token_ids`, `*is_token_ids` is set, `rest` gets the message without its input (fields 2, 3
/// and 4) and `ids` the ids as native-endian `uint32_t` values, so the server scores them without
/// a Python int per id. Otherwise `*is_token_ids` is cleared and nothing else is written: the
/// caller decodes the message whole. A message that does not decode is
/// `SC_ERR_KIND_INVALID_ARGUMENT` with nothing written; an id above 2^32-1 is
/// `SC_ERR_KIND_INVALID_ARGUMENT` naming it, with `*is_token_ids` and `rest` written (the caller
/// frees it) and `ids` not.
///
/// # Safety
/// `message` must be NULL (len 0) or readable for `len` bytes during the call; `is_token_ids`,
/// `rest`, `ids` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_kv_score_split(
    message: *const u8,
    len: usize,
    is_token_ids: *mut bool,
    rest: *mut sc_bytes,
    ids: *mut sc_bytes,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(is_token_ids, "is_token_ids")?;
        require_out(rest, "rest")?;
        require_out(ids, "ids")?;
        // SAFETY: the caller lends the bytes for the call.
        let message = unsafe { read_slice(message, len, "message")? };
        let wire::SplitScore::TokenIds {
            without_input,
            ids: read,
        } = wire::split_score(message)?
        else {
            // SAFETY: checked non-null above; the caller promises it is writable.
            return unsafe { write_out(is_token_ids, false, "is_token_ids") };
        };
        // SAFETY: as above. Written before an out-of-range id is reported, so the caller can
        // name the request it refuses.
        unsafe {
            write_out(is_token_ids, true, "is_token_ids")?;
            write_out(rest, sc_bytes::from_vec(without_input), "rest")?;
        }
        let raw = read?.into_bytes();
        // SAFETY: as above.
        unsafe { write_out(ids, sc_bytes::from_vec(raw), "ids") }
    })
}
