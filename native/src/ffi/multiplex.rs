//! Exports for [`crate::multiplex`]: the server's Multiplex table (models and settings) and one
//! call per client message, raw `MultiplexRequest` bytes in, raw `MultiplexResponse` bytes out.

use std::time::Duration;

use super::buf::{
    free_handle, free_slice, leak_slice, read_cancel_flag, read_handle, read_slice, read_str,
    sc_bytes, sc_str, write_handle,
};
use super::render::sc_renderer;
use super::status::sc_error;
use super::tokenizer::sc_tokenizer;
use super::{guard, require_out, write_out};
use crate::cancel::Cancel;
use crate::error::Error;
use crate::multiplex::{Batch, Model, Multiplexer, RunOptions, Settings, UnaryOptions};
use crate::settings::from_json;
use crate::wire::CallKind;

/// The models and settings every Multiplex stream of a server runs requests with; immutable and
/// shareable across threads. Free with `sc_multiplexer_free`.
pub struct sc_multiplexer {
    inner: Multiplexer,
}

/// One hosted model for `sc_multiplexer_new`; everything is borrowed for the call (the table
/// keeps its own references to the tokenizer and renderer).
#[repr(C)]
pub struct sc_multiplex_model {
    /// The name requests address it by.
    pub name: sc_str,
    /// Its fingerprint.
    pub fingerprint: sc_str,
    /// Its tokenizer.
    pub tokenizer: *const sc_tokenizer,
    /// Its renderer (built on that tokenizer).
    pub renderer: *const sc_renderer,
}

/// A large request for the worker pool: run it with `sc_multiplexer_run_one` on the message bytes
/// `[start, start + len)`.
#[repr(C)]
pub struct sc_multiplex_deferred {
    /// The client's id.
    pub id: u64,
    /// Its kind (as `sc_multiplex_tally.kind`).
    pub kind: u32,
    /// Its deadline from when the message was read (µs); 0 = none.
    pub timeout_us: u64,
    /// Its cost in bytes of input.
    pub cost: u64,
    /// Offset of its `MultiplexCall` in the message.
    pub start: usize,
    /// Length of its `MultiplexCall`.
    pub len: usize,
}

/// How many results of one kind ended with one status code.
#[repr(C)]
pub struct sc_multiplex_tally {
    /// 0 = no request set, 1 = tokenize, 2 = detokenize, 3 = render.
    pub kind: u32,
    /// gRPC status code (0 = OK).
    pub code: i32,
    /// Results.
    pub count: u32,
}

/// The outcome of one call; free with `sc_multiplex_batch_free`.
#[repr(C)]
pub struct sc_multiplex_batch {
    /// Results as `MultiplexResponse` messages, back to back.
    pub out: *mut u8,
    /// Bytes in `out`.
    pub out_len: usize,
    /// End offset in `out` of each message (each within the server's message limit).
    pub chunk_ends: *mut usize,
    /// Number of messages.
    pub chunks: usize,
    /// Large requests for the worker pool.
    pub deferred: *mut sc_multiplex_deferred,
    /// Number of deferred requests.
    pub deferred_len: usize,
    /// Ids the client cancelled.
    pub cancel: *mut u64,
    /// Number of cancelled ids.
    pub cancel_len: usize,
    /// Results by kind and code.
    pub tally: *mut sc_multiplex_tally,
    /// Number of tally entries.
    pub tally_len: usize,
    /// Render: prompt segments served from the multi-turn cache.
    pub cache_hit_segments: u64,
    /// Render: segments tokenized.
    pub cache_miss_segments: u64,
    /// Render: bytes in hit segments.
    pub cache_hit_bytes: u64,
    /// Render: bytes in missed segments.
    pub cache_miss_bytes: u64,
}

/// Builds the table from `count` models and `settings_json` (`allow_request_templates`,
/// `inline_bytes`, `max_inflight`, `max_message_bytes`).
///
/// # Safety
/// `models` must be NULL (count 0) or `count` readable entries whose strings and live handles are
/// borrowed for the call; `settings_json` is borrowed; `out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_multiplexer_new(
    models: *const sc_multiplex_model,
    count: usize,
    settings_json: sc_str,
    out: *mut *mut sc_multiplexer,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller lends the entries and their contents for the call.
        let entries = unsafe { read_slice(models, count, "models")? };
        let mut table = Vec::with_capacity(count);
        for (i, entry) in entries.iter().enumerate() {
            // SAFETY: as above.
            table.push(unsafe { read_model(entry, i)? });
        }
        // SAFETY: as above.
        let settings: Settings =
            from_json(unsafe { read_str(settings_json, "settings")? }, "settings")?;
        let inner = Multiplexer::new(table, settings);
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_handle(out, sc_multiplexer { inner }) }
    })
}

/// # Safety
/// The entry's strings and handles must be valid for the call.
unsafe fn read_model(entry: &sc_multiplex_model, i: usize) -> crate::Result<Model> {
    // SAFETY: forwarded from the caller.
    unsafe {
        Ok(Model {
            name: read_str(entry.name, &format!("models[{i}].name"))?.to_string(),
            fingerprint: read_str(entry.fingerprint, &format!("models[{i}].fingerprint"))?
                .to_string(),
            tokenizer: read_handle(entry.tokenizer, "tokenizer")?.shared(),
            renderer: read_handle(entry.renderer, "renderer")?.shared(),
        })
    }
}

/// Frees a table; streams still running a call on it must not exist. NULL is a no-op.
///
/// # Safety
/// `mux` must be NULL or a handle from `sc_multiplexer_new`, not yet freed and not in use.
#[no_mangle]
pub unsafe extern "C" fn sc_multiplexer_free(mux: *mut sc_multiplexer) {
    // SAFETY: the caller passes NULL or a handle it no longer uses.
    unsafe { free_handle(mux) }
}

/// Runs the small requests of one raw `MultiplexRequest` and lists the large ones.
/// `elapsed_us`: time since the message was read; `pending`: ids of the stream's requests still
/// waiting for their result; `refuse_code` non-zero answers every request with that status and
/// `refuse_message` instead of running it. Malformed framing is `SC_ERR_KIND_INVALID_ARGUMENT`.
/// `cancel` is the message's cancel flag or NULL: once set (its client has gone) the run stops with
/// `SC_ERR_KIND_CANCELLED`.
///
/// # Safety
/// `mux` must be a live handle; `message` (`len` bytes), `pending` (`pending_len` ids),
/// `refuse_message` and `cancel` (NULL or an aligned `uint32_t`) are borrowed for the call; `out`
/// and `err` NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn sc_multiplexer_run(
    mux: *const sc_multiplexer,
    message: *const u8,
    len: usize,
    elapsed_us: u64,
    pending: *const u64,
    pending_len: usize,
    refuse_code: i32,
    refuse_message: sc_str,
    cancel: *const u32,
    out: *mut *mut sc_multiplex_batch,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(out, "out")?;
        // SAFETY: the caller passes a live handle and lends the rest for the call.
        let mux = unsafe { read_handle(mux, "multiplexer")? };
        // SAFETY: as above.
        let (message, pending, refuse_message) = unsafe {
            (
                read_slice(message, len, "message")?,
                read_slice(pending, pending_len, "pending")?,
                read_str(refuse_message, "refuse_message")?,
            )
        };
        // SAFETY: the caller lends the flag for the call.
        let flag = unsafe { read_cancel_flag(cancel)? };
        let opts = RunOptions {
            elapsed: Duration::from_micros(elapsed_us),
            pending,
            refuse: (refuse_code != 0).then_some((refuse_code, refuse_message)),
            flag,
        };
        let batch = mux.inner.run(message, &opts)?;
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_out(out, Box::into_raw(Box::new(export(batch))), "out") }
    })
}

/// Runs one deferred `MultiplexCall` (`call`, `len` bytes) whatever its cost; `elapsed_us` is the
/// time since its message was read; `cancel` is its cancel flag or NULL (set it when the client
/// cancels the request: the work stops at its next check and the result is CANCELLED). The batch
/// holds its one result.
///
/// # Safety
/// `mux` must be a live handle; `call` is borrowed for the call; `cancel` NULL or a 4-byte-aligned
/// `uint32_t` valid for the call; `out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_multiplexer_run_one(
    mux: *const sc_multiplexer,
    call: *const u8,
    len: usize,
    elapsed_us: u64,
    cancel: *const u32,
    out: *mut *mut sc_multiplex_batch,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(out, "out")?;
        // SAFETY: the caller passes a live handle and lends the bytes for the call.
        let mux = unsafe { read_handle(mux, "multiplexer")? };
        // SAFETY: as above.
        let call = unsafe { read_slice(call, len, "call")? };
        // SAFETY: the caller promises a NULL or aligned flag valid for the call.
        let flag = unsafe { read_cancel_flag(cancel)? };
        let batch = mux
            .inner
            .run_one(call, Duration::from_micros(elapsed_us), flag)?;
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_out(out, Box::into_raw(Box::new(export(batch))), "out") }
    })
}

/// What `sc_multiplexer_unary` wrote: filled as far as the call got, also when it failed (then
/// `response` is empty). The caller owns the struct and frees `response` and `model` with
/// `sc_bytes_free`.
#[repr(C)]
pub struct sc_unary_outcome {
    /// The response message's wire bytes.
    pub response: sc_bytes,
    /// Non-zero: the request was not run, its cost (bytes of input) is above `inline_bytes`.
    pub deferred_cost: u64,
    /// The body did not decode as the RPC's request message (the call failed INVALID_ARGUMENT).
    pub malformed: bool,
    /// The request's `model`.
    pub model: sc_bytes,
    /// Render: prompt segments served from the multi-turn cache.
    pub cache_hit_segments: u64,
    /// Render: segments tokenized.
    pub cache_miss_segments: u64,
    /// Render: bytes in hit segments.
    pub cache_hit_bytes: u64,
    /// Render: bytes in missed segments.
    pub cache_miss_bytes: u64,
}

/// Runs one unary Tokenize (`kind` 1), Detokenize (2) or Render (3) from its raw request body
/// (`body`, `len` bytes) and writes the response's wire bytes to `out`, as the unary RPC answers
/// it. `timeout_us` is its deadline from now (0 = none), `cancel` its cancellation flag or NULL.
/// With `inline_bytes` non-zero a request costing more is not run: `out->deferred_cost` says so
/// (run it again with 0 on a worker thread). Failures are the RPC's status (a body that does not
/// decode is `SC_ERR_KIND_INVALID_ARGUMENT` with `out->malformed` set).
///
/// # Safety
/// `mux` must be a live handle; `body` is borrowed for the call; `cancel` NULL or an aligned
/// `uint32_t` valid for the call; `out` and `err` NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn sc_multiplexer_unary(
    mux: *const sc_multiplexer,
    kind: u32,
    body: *const u8,
    len: usize,
    timeout_us: u64,
    cancel: *const u32,
    inline_bytes: usize,
    out: *mut sc_unary_outcome,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(out, "out")?;
        // SAFETY: the caller passes a live handle and lends the rest for the call.
        let (mux, body, flag) = unsafe {
            (
                read_handle(mux, "multiplexer")?,
                read_slice(body, len, "body")?,
                read_cancel_flag(cancel)?,
            )
        };
        let kind = kind
            .checked_sub(1)
            .and_then(|i| CallKind::ALL.get(i as usize).copied())
            .ok_or_else(|| Error::invalid_argument(format!("kind: unknown request kind {kind}")))?;
        let opts = UnaryOptions {
            cancel: Cancel::after_micros(timeout_us, flag),
            inline_bytes,
        };
        let (outcome, result) = mux.inner.run_unary(kind, body, &opts);
        let cache = outcome.cache;
        let written = sc_unary_outcome {
            response: sc_bytes::from_vec(outcome.response),
            deferred_cost: outcome.deferred_cost as u64,
            malformed: outcome.malformed,
            model: sc_bytes::from_vec(outcome.model.into_bytes()),
            cache_hit_segments: cache.hit_segments,
            cache_miss_segments: cache.miss_segments,
            cache_hit_bytes: cache.hit_bytes,
            cache_miss_bytes: cache.miss_bytes,
        };
        // SAFETY: checked non-null above; the caller promises it is writable.
        unsafe { out.write(written) };
        result
    })
}

/// 0 = no request, then 1, 2, 3 in `CallKind::ALL` order.
fn kind_number(kind: Option<CallKind>) -> u32 {
    kind.map_or(0, |k| {
        1 + CallKind::ALL.iter().position(|a| *a == k).unwrap_or(0) as u32
    })
}

fn export(batch: Batch) -> sc_multiplex_batch {
    let deferred: Vec<_> = batch
        .deferred
        .iter()
        .map(|d| sc_multiplex_deferred {
            id: d.id,
            kind: kind_number(Some(d.kind)),
            timeout_us: d.timeout_us,
            cost: d.cost as u64,
            start: d.start,
            len: d.len,
        })
        .collect();
    let tally: Vec<_> = batch
        .tally
        .iter()
        .map(|t| sc_multiplex_tally {
            kind: kind_number(t.kind),
            code: t.code,
            count: t.count,
        })
        .collect();
    let cache = batch.cache;
    let (out, out_len) = leak_slice(batch.out);
    let (chunk_ends, chunks) = leak_slice(batch.chunk_ends);
    let (deferred, deferred_len) = leak_slice(deferred);
    let (cancel, cancel_len) = leak_slice(batch.cancel);
    let (tally, tally_len) = leak_slice(tally);
    sc_multiplex_batch {
        out,
        out_len,
        chunk_ends,
        chunks,
        deferred,
        deferred_len,
        cancel,
        cancel_len,
        tally,
        tally_len,
        cache_hit_segments: cache.hit_segments,
        cache_miss_segments: cache.miss_segments,
        cache_hit_bytes: cache.hit_bytes,
        cache_miss_bytes: cache.miss_bytes,
    }
}

/// Frees a batch. NULL is a no-op.
///
/// # Safety
/// `batch` must be NULL or a result of `sc_multiplexer_run` / `sc_multiplexer_run_one`, not yet
/// freed.
#[no_mangle]
pub unsafe extern "C" fn sc_multiplex_batch_free(batch: *mut sc_multiplex_batch) {
    if batch.is_null() {
        return;
    }
    // SAFETY: made by Box::into_raw in `export`'s callers; every array came from `leak_slice`
    // with the length recorded next to it.
    unsafe {
        let b = Box::from_raw(batch);
        free_slice(b.out, b.out_len);
        free_slice(b.chunk_ends, b.chunks);
        free_slice(b.deferred, b.deferred_len);
        free_slice(b.cancel, b.cancel_len);
        free_slice(b.tally, b.tally_len);
    }
}
