//! Exports for [`crate::index`]: argument conversion only.
//!
//! An `sc_kv_index` is internally synchronized (a read-write lock: scoring reads, applying
//! writes), so one handle is used from several threads at once: a subscriber thread applying
//! payloads while other threads score. Only `sc_kv_index_free` must not overlap any other call
//! on the handle: the caller (Python holds a lease per call) guarantees that.

use super::buf::{free_handle, read_handle, read_slice, read_str, sc_bytes, sc_str, write_handle};
use super::status::sc_error;
use super::{guard, require_out, write_out};
use crate::error::Error;
use crate::index::{take_released_bytes, Columns, Encoding, Options, SharedIndex};

/// Freed table memory after which the allocator is asked to return free pages to the OS.
const TRIM_AFTER_BYTES: u64 = 8 << 20;

/// Asks the allocator to return free pages now once the indexes have freed `TRIM_AFTER_BYTES`
/// of tables (growth re-lays tables out, evictions and clears free them). mimalloc otherwise
/// keeps freed pages for a second and returns them only on a later allocation from the OS, so
/// an index that grew fast would keep its discarded tables in RSS. One collection takes about a
/// millisecond; it happens at most once per 8 MiB freed.
fn trim_allocator() {
    if take_released_bytes(TRIM_AFTER_BYTES).is_some() {
        // SAFETY: `mi_collect` has no preconditions; it only frees and purges the allocator's
        // own free memory and is safe to call from any thread at any time.
        unsafe { libmimalloc_sys::mi_collect(true) };
    }
}

/// A KV prefix index (one model). Create with `sc_kv_index_new`, free with `sc_kv_index_free`.
pub struct sc_kv_index {
    pub(super) inner: SharedIndex,
}

/// `sc_kv_index_apply`: a payload as an engine publishes it (vLLM or SGLang msgpack batch).
pub const SC_KV_PAYLOAD_ENGINE: i32 = 0;
/// `sc_kv_index_apply`: `msgspec.msgpack.encode(router_adapter.events.Batch)`.
pub const SC_KV_PAYLOAD_NORMALIZED: i32 = 1;

/// Counters and sizes of an index.
#[repr(C)]
pub struct sc_kv_status {
    /// Events applied.
    pub events: u64,
    /// Blocks stored (re-stores included).
    pub blocks_stored: u64,
    /// Blocks removed by removal events.
    pub blocks_removed: u64,
    /// Stored blocks whose parent was unknown.
    pub orphan_blocks: u64,
    /// Removals of blocks not held.
    pub unknown_removals: u64,
    /// Events not indexed.
    pub skipped_events: u64,
    /// Blocks evicted by the bound.
    pub evicted_blocks: u64,
    /// Workers dropped.
    pub worker_resets: u64,
    /// (worker, block) entries held.
    pub blocks: u64,
    /// Workers known.
    pub workers: u64,
    /// Distinct keys held.
    pub keys: u64,
    /// Tokens per block; 0 while unknown.
    pub block_size: u32,
    /// Content mode: tokens after each block that its key covers (vLLM's lookahead hashing),
    /// configured or learned; `UINT32_MAX` while unknown (0 is a value: no lookahead), and always
    /// in engine mode (the engine spec's `lookahead` applies there).
    pub lookahead: u32,
}

/// A new index. `options_json`: `{"block_size": n|null, "engine_spec": {HashSpec fields}|null,
/// "max_blocks": n, "group_idx": n, "lookahead": n|null}`, every field optional (empty = all
/// defaults; `lookahead`, content mode only, learned from the first store when null). A bad
/// option fails with `SC_ERR_KIND_INVALID_ARGUMENT` naming it.
///
/// # Safety
/// `options_json` is borrowed for the call; `out` and `err` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn sc_kv_index_new(
    options_json: sc_str,
    out: *mut *mut sc_kv_index,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(out, "out")?;
        // SAFETY: the caller lends the string for the call.
        let options = Options::from_json(unsafe { read_str(options_json, "options_json")? })?;
        let inner = SharedIndex::new(options);
        // SAFETY: the caller promises `out` is writable (checked non-NULL above).
        unsafe { write_handle(out, sc_kv_index { inner }) }
    })
}

/// Frees an index. NULL is a no-op. Not while any other call on the handle is running.
///
/// # Safety
/// `index` must be NULL or a handle from `sc_kv_index_new`, not yet freed and not in use.
#[no_mangle]
pub unsafe extern "C" fn sc_kv_index_free(index: *mut sc_kv_index) {
    // SAFETY: the caller passes NULL or a handle nobody uses any more.
    unsafe { free_handle(index) };
    trim_allocator();
}

/// Decodes `payload` (`encoding`: `SC_KV_PAYLOAD_ENGINE` or `_NORMALIZED`) and
/// applies its events as published by `worker`. A malformed payload fails with
/// `SC_ERR_KIND_INVALID_ARGUMENT` (message starting `payload:`) and changes nothing.
///
/// # Safety
/// `index` must be a live handle; `worker` and `payload` (`len` bytes, NULL when 0) are
/// borrowed for the call; `err` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_kv_index_apply(
    index: *const sc_kv_index,
    worker: sc_str,
    payload: *const u8,
    len: usize,
    encoding: i32,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes a live handle and lends the arguments for the call.
        let index = unsafe { read_handle(index, "index")? };
        // SAFETY: as above.
        let worker = unsafe { read_str(worker, "worker")? };
        // SAFETY: as above.
        let payload = unsafe { read_slice(payload, len, "payload")? };
        let encoding = read_encoding(encoding)?;
        let applied = index.inner.apply(worker, payload, encoding);
        trim_allocator();
        applied
    })
}

/// Applies `count` payloads in order, as `count` calls of `sc_kv_index_apply` would, in one
/// call (what a consumer reading many small messages at once saves is the cost of a call per
/// message). Item `i` is the payload `payloads[payload_ends[i - 1]..payload_ends[i]]` (from 0
/// for the first) published by the worker named `names[name_ends[i - 1]..name_ends[i]]`
/// (UTF-8). The index's lock is taken per payload, so scoring threads wait no longer than with
/// separate calls. Stops at the first payload that fails: returns its status and error, with
/// `*applied` = the payloads applied before it (it changed nothing). `*applied` = `count` on
/// success. Ends that decrease or pass their buffer, or a name that is not UTF-8, fail with
/// `SC_ERR_KIND_INVALID_ARGUMENT` before anything is applied.
///
/// # Safety
/// `index` must be a live handle; `names` (`names_len` bytes), `payloads` (`payloads_len`
/// bytes), `name_ends` and `payload_ends` (`count` values each) are borrowed for the call (NULL
/// when empty); `applied` and `err` must be NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn sc_kv_index_apply_many(
    index: *const sc_kv_index,
    names: *const u8,
    names_len: usize,
    name_ends: *const u64,
    payloads: *const u8,
    payloads_len: usize,
    payload_ends: *const u64,
    count: usize,
    encoding: i32,
    applied: *mut usize,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(applied, "applied")?;
        // SAFETY: the caller passes a live handle and lends the arguments for the call.
        let index = unsafe { read_handle(index, "index")? };
        // SAFETY: as above.
        let names = unsafe { read_slice(names, names_len, "names")? };
        // SAFETY: as above.
        let name_ends = unsafe { read_slice(name_ends, count, "name_ends")? };
        // SAFETY: as above.
        let payloads = unsafe { read_slice(payloads, payloads_len, "payloads")? };
        // SAFETY: as above.
        let payload_ends = unsafe { read_slice(payload_ends, count, "payload_ends")? };
        let encoding = read_encoding(encoding)?;
        let names = split_at_ends(names, name_ends, "name_ends")?
            .into_iter()
            .enumerate()
            .map(|(i, name)| {
                std::str::from_utf8(name)
                    .map_err(|_| Error::invalid_argument(format!("names: item {i} is not UTF-8")))
            })
            .collect::<crate::error::Result<Vec<&str>>>()?;
        let payloads = split_at_ends(payloads, payload_ends, "payload_ends")?;
        let outcome = index
            .inner
            .apply_many(names.into_iter().zip(payloads), encoding);
        trim_allocator();
        let (done, result) = match outcome {
            Ok(done) => (done, Ok(())),
            Err((done, e)) => (done, Err(e)),
        };
        // SAFETY: checked non-null above; the caller promises it is writable.
        unsafe { write_out(applied, done, "applied")? };
        result
    })
}

/// `blob` cut at `ends` (each the end of one item, the first starting at 0).
fn split_at_ends<'a>(
    blob: &'a [u8],
    ends: &[u64],
    field: &str,
) -> crate::error::Result<Vec<&'a [u8]>> {
    let mut start = 0usize;
    let mut items = Vec::with_capacity(ends.len());
    for (i, &end) in ends.iter().enumerate() {
        let end = usize::try_from(end).unwrap_or(usize::MAX);
        if end < start || end > blob.len() {
            return Err(Error::invalid_argument(format!(
                "{field}: item {i} ends at {end}, outside {start}..={}",
                blob.len()
            )));
        }
        items.push(&blob[start..end]);
        start = end;
    }
    Ok(items)
}

/// An `SC_KV_PAYLOAD_*` value.
fn read_encoding(encoding: i32) -> crate::error::Result<Encoding> {
    match encoding {
        SC_KV_PAYLOAD_ENGINE => Ok(Encoding::Engine),
        SC_KV_PAYLOAD_NORMALIZED => Ok(Encoding::Normalized),
        other => Err(Error::invalid_argument(format!(
            "encoding: unknown {other}"
        ))),
    }
}

/// Applies a batch given as a header and two side arrays, as published by `worker`: the header
/// is `SC_KV_PAYLOAD_NORMALIZED` with each event's `block_hashes` and `token_ids` a count of
/// values taken in order from `hashes` and `tokens` (every event's, concatenated), which must
/// all be named. A bad header or count fails with `SC_ERR_KIND_INVALID_ARGUMENT` (message
/// starting `payload:`) and changes nothing.
///
/// # Safety
/// `index` must be a live handle; `worker`, `header` (`header_len` bytes), `hashes`
/// (`n_hashes` values) and `tokens` (`n_tokens` values) are borrowed for the call (NULL when
/// empty); `err` must be NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn sc_kv_index_apply_columns(
    index: *const sc_kv_index,
    worker: sc_str,
    header: *const u8,
    header_len: usize,
    hashes: *const u64,
    n_hashes: usize,
    tokens: *const u32,
    n_tokens: usize,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes a live handle and lends the arguments for the call.
        let index = unsafe { read_handle(index, "index")? };
        // SAFETY: as above.
        let worker = unsafe { read_str(worker, "worker")? };
        // SAFETY: as above.
        let header = unsafe { read_slice(header, header_len, "header")? };
        // SAFETY: as above.
        let hashes = unsafe { read_slice(hashes, n_hashes, "hashes")? };
        // SAFETY: as above.
        let tokens = unsafe { read_slice(tokens, n_tokens, "tokens")? };
        let applied = index
            .inner
            .apply_columns(worker, header, Columns { hashes, tokens });
        trim_allocator();
        applied
    })
}

/// Forgets everything `worker` holds (engine restart, unrecoverable gap, silence); `*dropped`
/// tells whether the worker was known.
///
/// # Safety
/// `index` must be a live handle; `worker` is borrowed for the call; `dropped` and `err` must be
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_kv_index_drop_worker(
    index: *const sc_kv_index,
    worker: sc_str,
    dropped: *mut bool,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes a live handle and lends the string for the call.
        let index = unsafe { read_handle(index, "index")? };
        // SAFETY: as above.
        let worker = unsafe { read_str(worker, "worker")? };
        require_out(dropped, "dropped")?;
        let was_known = index.inner.drop_worker(worker);
        trim_allocator();
        // SAFETY: the caller promises `dropped` is writable.
        unsafe { write_out(dropped, was_known, "dropped") }
    })
}

/// Counters and sizes as of the last update (never waits for a thread applying events).
///
/// # Safety
/// `index` must be a live handle; `out` and `err` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_kv_index_status(
    index: *const sc_kv_index,
    out: *mut sc_kv_status,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes a live handle.
        let index = unsafe { read_handle(index, "index")? };
        require_out(out, "out")?;
        let s = index.inner.status();
        let status = sc_kv_status {
            events: s.stats.events,
            blocks_stored: s.stats.blocks_stored,
            blocks_removed: s.stats.blocks_removed,
            orphan_blocks: s.stats.orphan_blocks,
            unknown_removals: s.stats.unknown_removals,
            skipped_events: s.stats.skipped_events,
            evicted_blocks: s.stats.evicted_blocks,
            worker_resets: s.stats.worker_resets,
            blocks: s.blocks,
            workers: s.workers,
            keys: s.keys,
            block_size: s.block_size,
            lookahead: s.lookahead.unwrap_or(u32::MAX),
        };
        // SAFETY: the caller promises `out` is writable.
        unsafe { write_out(out, status, "out") }
    })
}

/// Bytes the index's tables hold (RSS adds the allocator's slack).
///
/// # Safety
/// `index` must be a live handle; `out` and `err` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_kv_index_allocated_bytes(
    index: *const sc_kv_index,
    out: *mut u64,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes a live handle.
        let index = unsafe { read_handle(index, "index")? };
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_out(out, index.inner.allocated_bytes(), "out") }
    })
}

/// The workers' names, sorted, as a JSON array of strings.
///
/// # Safety
/// `index` must be a live handle; `out` and `err` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_kv_index_workers(
    index: *const sc_kv_index,
    out: *mut sc_bytes,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes a live handle.
        let index = unsafe { read_handle(index, "index")? };
        let names = serde_json::Value::from(index.inner.workers());
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { super::buf::write_json(out, &names) }
    })
}

/// Blocks `worker` holds (0 when unknown).
///
/// # Safety
/// `index` must be a live handle; `worker` is borrowed for the call; `out` and `err` must be
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_kv_index_worker_blocks(
    index: *const sc_kv_index,
    worker: sc_str,
    out: *mut u64,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes a live handle and lends the string for the call.
        let index = unsafe { read_handle(index, "index")? };
        // SAFETY: as above.
        let worker = unsafe { read_str(worker, "worker")? };
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_out(out, index.inner.worker_blocks(worker), "out") }
    })
}

/// Events applied per second over the last `window_s` seconds (at most the last 4096 events).
///
/// # Safety
/// `index` must be a live handle; `out` and `err` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_kv_index_events_per_second(
    index: *const sc_kv_index,
    window_s: f64,
    out: *mut f64,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes a live handle.
        let index = unsafe { read_handle(index, "index")? };
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_out(out, index.inner.events_per_second(window_s), "out") }
    })
}

/// The whole index state as a compact binary snapshot (see `crate::index::snapshot`).
///
/// # Safety
/// `index` must be a live handle; `out` and `err` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_kv_index_snapshot(
    index: *const sc_kv_index,
    out: *mut sc_bytes,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(out, "out")?;
        // SAFETY: the caller passes a live handle.
        let index = unsafe { read_handle(index, "index")? };
        let bytes = index.inner.snapshot();
        // SAFETY: the caller promises `out` is writable.
        unsafe { write_out(out, sc_bytes::from_vec(bytes), "out") }
    })
}

/// Replaces the state with a snapshot's. A corrupt snapshot fails with
/// `SC_ERR_KIND_INVALID_ARGUMENT`, one from an index of another mode, spec, group or block size
/// with `SC_ERR_KIND_FAILED_PRECONDITION`; either way nothing changes.
///
/// # Safety
/// `index` must be a live handle; `data` (`len` bytes, NULL when 0) is borrowed for the call;
/// `err` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_kv_index_restore(
    index: *const sc_kv_index,
    data: *const u8,
    len: usize,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes a live handle and lends the bytes for the call.
        let index = unsafe { read_handle(index, "index")? };
        // SAFETY: as above.
        let data = unsafe { read_slice(data, len, "data")? };
        let restored = index.inner.restore(data);
        trim_allocator();
        restored
    })
}
