//! Exports for [`crate::wire`]: protobuf encoders the server's transport layer calls.

use super::buf::{read_ids, read_str, sc_bytes, sc_ids, sc_str};
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
