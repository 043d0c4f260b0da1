//! Exports for [`crate::parse`]: per-model parse data, and one multiplexer per ParseStream that
//! takes raw `ParseStreamRequest` bytes and answers with raw `ParseStreamResponse` bytes, so a
//! whole decode step is one call with no per-request Python work.

use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use super::buf::{
    free_handle, read_cancel_flag, read_handle, read_ids, read_slice, read_str, sc_bytes, sc_ids,
    sc_str, write_handle, write_json,
};
use super::status::sc_error;
use super::tokenizer::sc_tokenizer;
use super::{guard, require_out, write_out};
use crate::cancel::Cancel;
use crate::error::Error;
use crate::parse::{
    Handled, Mux, MuxLimits, OpenOptions, ParseModel, ParseModelOptions, SessionConfig,
};
use crate::settings::from_json_or_default;

/// A model's parse data (decode table, added tokens); immutable, shareable across threads. Free
/// with `sc_parse_model_free`.
pub struct sc_parse_model {
    inner: Arc<ParseModel>,
}

impl sc_parse_model {
    /// The parse data inside a handle, for other exports (benchmarks).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn model(&self) -> &Arc<ParseModel> {
        &self.inner
    }
}

/// The open requests of one ParseStream. Calls on one multiplexer must not overlap: a call that
/// finds another one in progress fails with `FAILED_PRECONDITION` instead of racing it. Free with
/// `sc_parse_mux_free`, never while a call on it is in progress (the Python wrapper's lease
/// guarantees that).
pub struct sc_parse_mux {
    inner: Mutex<Mux>,
}

impl sc_parse_mux {
    /// Exclusive use for one call. A poisoned lock (a panic inside an earlier call, caught by
    /// `guard`) still holds a consistent map of sessions, so it is used as is.
    fn lock(&self) -> crate::Result<MutexGuard<'_, Mux>> {
        match self.inner.try_lock() {
            Ok(mux) => Ok(mux),
            Err(TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => Err(Error::failed_precondition(
                "mux: another call on this parse stream is still in progress",
            )),
        }
    }
}

/// `sc_parse_mux_handle` answered a step or a cancel.
pub const SC_PARSE_HANDLED: i32 = 0;
/// `sc_parse_mux_handle` saw an `open`: resolve the model and call `sc_parse_mux_open`.
pub const SC_PARSE_OPEN: i32 = 1;
/// `sc_parse_mux_handle` saw a step costing more than its `budget` and did nothing; `*cost` says
/// what it costs.
pub const SC_PARSE_DEFERRED: i32 = 2;

/// Builds the parse data of a tokenizer. `options_json`: `{"force_generic": bool}` or empty.
///
/// # Safety
/// `tok` must be a live handle; `options_json` is borrowed for the call; `out` and `err` must be
/// NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn sc_parse_model_new(
    tok: *const sc_tokenizer,
    options_json: sc_str,
    out: *mut *mut sc_parse_model,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes a live handle and lends the string for the call.
        let t = unsafe { read_handle(tok, "tokenizer")? }.tokenizer();
        // SAFETY: as above.
        let options = unsafe { read_str(options_json, "options_json")? };
        let options: ParseModelOptions = from_json_or_default(options, "options_json")?;
        let inner = Arc::new(ParseModel::with_options(t, options)?);
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_handle(out, sc_parse_model { inner }) }
    })
}

/// Frees parse data. Streams opened with it keep their own reference. NULL is a no-op.
///
/// # Safety
/// `model` must be NULL or a handle from `sc_parse_model_new`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn sc_parse_model_free(model: *mut sc_parse_model) {
    // SAFETY: the caller passes NULL or a handle it no longer uses.
    unsafe { free_handle(model) }
}

/// Describes the parse data as JSON: `decoder` (`byte_level`, `sentencepiece`, `generic`),
/// `vocab_size`, `output_size` (the tokenizer's option; 0 = unknown), `tool_parsers`,
/// `reasoning_parsers`, `response_template` (`state`: `absent`, `invalid` with `error`, or
/// `ready`; its `fields`).
///
/// # Safety
/// `model` must be a live handle; `out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_parse_model_info(
    model: *const sc_parse_model,
    out: *mut sc_bytes,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes a live handle.
        let m = &unsafe { read_handle(model, "model")? }.inner;
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_json(out, &m.info()) }
    })
}

/// A new multiplexer. `limits_json`: `{"max_requests": n, "remember_finished": n}` or empty.
///
/// # Safety
/// `limits_json` is borrowed for the call; `out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_parse_mux_new(
    limits_json: sc_str,
    out: *mut *mut sc_parse_mux,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller lends the string for the call.
        let limits = unsafe { read_str(limits_json, "limits_json")? };
        let limits: MuxLimits = from_json_or_default(limits, "limits_json")?;
        let handle = sc_parse_mux {
            inner: Mutex::new(Mux::new(limits)),
        };
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_handle(out, handle) }
    })
}

/// Frees a multiplexer and every request still open in it. NULL is a no-op.
///
/// # Safety
/// `mux` must be NULL or a handle from `sc_parse_mux_new`, not yet freed, with no call on it in
/// progress on any thread.
#[no_mangle]
pub unsafe extern "C" fn sc_parse_mux_free(mux: *mut sc_parse_mux) {
    // SAFETY: the caller passes NULL or a handle it no longer uses and no request runs in it.
    unsafe { free_handle(mux) }
}

/// Number of open requests.
///
/// # Safety
/// `mux` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn sc_parse_mux_len(mux: *const sc_parse_mux) -> usize {
    if mux.is_null() {
        return 0;
    }
    // SAFETY: non-null live handle, as the caller promises.
    unsafe { &*mux }.lock().map_or(0, |m| m.len())
}

/// Opens a request. `config_json` is a session configuration (`tool_parser`,
/// `reasoning_parser`, `tools_json`, `chat_template_kwargs_json`, `skip_special_tokens`, `stop`,
/// `include_stop_str_in_output`, `max_held_bytes`, `trace`, `id_seed`); parser names must already
/// be resolved (empty or `none` = no parser). Errors: `INVALID_ARGUMENT` (unknown parser, bad JSON,
/// duplicate id, which also ends the request open under it, as its answer says; prompt id outside
/// the vocabulary), `RESOURCE_EXHAUSTED` (too many open requests).
///
/// # Safety
/// `mux` and `model` must be live handles (a concurrent call on the same mux fails with
/// `FAILED_PRECONDITION`); strings and ids are borrowed for the call; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_parse_mux_open(
    mux: *mut sc_parse_mux,
    model: *const sc_parse_model,
    request_id: sc_str,
    fingerprint: sc_str,
    config_json: sc_str,
    prompt_ids: sc_ids,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes a live handle.
        let mut mux = unsafe { read_handle(mux, "mux")? }.lock()?;
        // SAFETY: the caller passes a live handle and lends the arguments for the call.
        let model = Arc::clone(&unsafe { read_handle(model, "model")? }.inner);
        // SAFETY: as above.
        let (request_id, fingerprint, config, prompt) = unsafe {
            (
                read_str(request_id, "open.request_id")?,
                read_str(fingerprint, "fingerprint")?,
                read_str(config_json, "config_json")?,
                read_ids(prompt_ids, "open.prompt_token_ids")?,
            )
        };
        let cfg: SessionConfig = from_json_or_default(config, "config_json")?;
        let opts = OpenOptions {
            request_id: request_id.to_string(),
            fingerprint: fingerprint.to_string(),
        };
        mux.open(model, &opts, &cfg, prompt)
    })
}

/// Handles one raw `ParseStreamRequest`: a step or a cancel is answered in `out` (raw
/// `ParseStreamResponse` bytes, possibly empty) and `*kind` is `SC_PARSE_HANDLED`; an open sets
/// `*kind` to `SC_PARSE_OPEN` and leaves `out` empty. A malformed message is
/// `SC_ERR_KIND_INVALID_ARGUMENT`; failures of single requests are inside the answer. `cancel` is
/// the call's cancellation flag (as in `sc_encode_options`) or NULL: once set, the call stops
/// between requests or within a long request's ids with `SC_ERR_KIND_CANCELLED` (the requests it
/// touched are left mid-step; the stream is being closed).
///
/// `budget`: bytes a step may read (`UINT64_MAX`: any). A step reads its message and the text
/// held back by each request it finishes or may push past its held-back limit, which it reads
/// whole (a 2 KB step finishing 200 requests holding 400 KB each reads 80 MB); one that would
/// read more than `budget` is not handled: `*kind` is `SC_PARSE_DEFERRED`, `*cost` (when not
/// NULL) what it would read, and `out` empty. The server runs a message inline only when it is
/// cheap, so one decoding prices and handles it.
///
/// # Safety
/// `mux` must be a live handle (a concurrent call on it fails with `FAILED_PRECONDITION`);
/// `message` must be NULL (len 0) or readable for `len` bytes during the call; `cancel` NULL or an
/// aligned `uint32_t` valid for the call; `out`, `kind`, `cost` and `err` NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn sc_parse_mux_handle(
    mux: *mut sc_parse_mux,
    message: *const u8,
    len: usize,
    budget: u64,
    cancel: *const u32,
    out: *mut sc_bytes,
    kind: *mut i32,
    cost: *mut u64,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(kind, "kind")?;
        require_out(out, "out")?;
        // SAFETY: the caller passes a live handle.
        let mut mux = unsafe { read_handle(mux, "mux")? }.lock()?;
        // SAFETY: the caller lends the bytes for the call.
        let message = unsafe { read_slice(message, len, "message")? };
        // SAFETY: the caller lends the flag for the call.
        let flag = unsafe { read_cancel_flag(cancel)? };
        let budget = usize::try_from(budget).unwrap_or(usize::MAX);
        let mut response = Vec::new();
        let handled =
            mux.handle_within(message, &mut response, &Cancel::new(None, flag), budget)?;
        let code = match handled {
            Handled::Done => SC_PARSE_HANDLED,
            Handled::Open => SC_PARSE_OPEN,
            Handled::Deferred(bytes) => {
                if !cost.is_null() {
                    // SAFETY: the caller promises `cost` is NULL or writable.
                    unsafe { write_out(cost, bytes as u64, "cost")? };
                }
                SC_PARSE_DEFERRED
            }
        };
        // SAFETY: the caller promises `kind` and `out` are NULL or writable.
        unsafe {
            write_out(kind, code, "kind")?;
            write_out(out, sc_bytes::from_vec(response), "out")
        }
    })
}

/// The attribution trace of a request opened with `"trace": true` (JSON), or empty `out` when
/// there is none.
///
/// # Safety
/// `mux` must be a live handle; `request_id` is borrowed for the call; `out` and `err` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn sc_parse_mux_trace(
    mux: *const sc_parse_mux,
    request_id: sc_str,
    out: *mut sc_bytes,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(out, "out")?;
        // SAFETY: the caller passes a live handle and lends the string.
        let mux = unsafe { read_handle(mux, "mux")? }.lock()?;
        // SAFETY: as above.
        let id = unsafe { read_str(request_id, "request_id")? };
        let bytes = match mux.trace(id) {
            Some(v) => serde_json::to_vec(&v).map_err(|e| Error::internal(e.to_string()))?,
            None => Vec::new(),
        };
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_out(out, sc_bytes::from_vec(bytes), "out") }
    })
}

/// Splits a raw `ParseStreamRequest` holding an `open` (see `sc_parse_mux_handle`): `rest` gets
/// the message without the open's `prompt_token_ids`, `ids` those ids as little-endian `uint32_t`
/// values. Decoding millions of prompt ids here, not in the server's protobuf parser, keeps them
/// off the GIL. A message that does not decode is `SC_ERR_KIND_INVALID_ARGUMENT` with nothing
/// written; an id above 2^32-1 is `SC_ERR_KIND_INVALID_ARGUMENT` naming it, with `rest` written
/// (the caller frees it) and `ids` not.
///
/// # Safety
/// `message` must be NULL (len 0) or readable for `len` bytes during the call; `rest`, `ids` and
/// `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_parse_open_split(
    message: *const u8,
    len: usize,
    rest: *mut sc_bytes,
    ids: *mut sc_bytes,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(rest, "rest")?;
        require_out(ids, "ids")?;
        // SAFETY: the caller lends the bytes for the call.
        let message = unsafe { read_slice(message, len, "message")? };
        let split = crate::wire::split_open(message)?;
        // SAFETY: checked non-null above; the caller promises it is writable. Written before an
        // out-of-range id is reported, so the caller can name the request it refuses.
        unsafe { write_out(rest, sc_bytes::from_vec(split.without_ids), "rest")? };
        let raw: Vec<u8> = split.ids?.iter().flat_map(|id| id.to_le_bytes()).collect();
        // SAFETY: as above.
        unsafe { write_out(ids, sc_bytes::from_vec(raw), "ids") }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::status::{sc_error_free, SC_ERR_KIND_FAILED_PRECONDITION, SC_STATUS_ERROR};

    #[test]
    fn an_overlapping_call_on_one_stream_is_refused() {
        // A call that finds another one inside the stream fails instead of racing its sessions.
        // The first call is stood in for by holding the stream's lock, so the test is exact.
        let mut mux: *mut sc_parse_mux = std::ptr::null_mut();
        let no_limits = sc_str {
            ptr: std::ptr::null(),
            len: 0,
        };
        let mut err: *mut sc_error = std::ptr::null_mut();
        // SAFETY: valid out-pointers for the call.
        assert_eq!(
            unsafe { sc_parse_mux_new(no_limits, &mut mux, &mut err) },
            0
        );
        // SAFETY: `mux` was just made and is freed at the end of the test.
        let held = unsafe { &*mux }.inner.lock().expect("not poisoned");
        let cancel = [0x1a, 0x03, 0x0a, 0x01, b'r'];
        let mut out = sc_bytes::from_vec(Vec::new());
        let mut kind = 0;
        // SAFETY: live handle, borrowed message, valid out-pointers.
        let status = unsafe {
            sc_parse_mux_handle(
                mux,
                cancel.as_ptr(),
                cancel.len(),
                u64::MAX,
                std::ptr::null(),
                &mut out,
                &mut kind,
                std::ptr::null_mut(),
                &mut err,
            )
        };
        assert_eq!(status, SC_STATUS_ERROR);
        // SAFETY: the failed call wrote an error record.
        let (error_kind, message) = unsafe {
            let e = &*err;
            let text = std::slice::from_raw_parts(e.message, e.message_len);
            (e.kind, String::from_utf8_lossy(text).into_owned())
        };
        assert_eq!(error_kind, SC_ERR_KIND_FAILED_PRECONDITION);
        assert!(message.contains("in progress"), "{message}");
        drop(held);
        // The stream works again once the other call is done.
        // SAFETY: as above.
        let status = unsafe {
            sc_parse_mux_handle(
                mux,
                cancel.as_ptr(),
                cancel.len(),
                u64::MAX,
                std::ptr::null(),
                &mut out,
                &mut kind,
                std::ptr::null_mut(),
                &mut err,
            )
        };
        assert_eq!(status, 0);
        // SAFETY: every buffer and handle here was made by this library and is freed once.
        unsafe {
            sc_error_free(err);
            crate::ffi::buf::sc_bytes_free(&mut out);
            sc_parse_mux_free(mux);
        }
    }
}
