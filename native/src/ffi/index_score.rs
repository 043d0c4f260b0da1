//! Exports for scoring with a [`crate::index`] handle (see [`super::index`]): a request's keys,
//! its score as a table, or as the `ScoreResponse` wire bytes the KvRouter RPC answers with.

use serde::Deserialize;

use super::buf::{read_handle, read_ids, read_slice, read_str, sc_bytes, sc_ids, sc_str};
use super::index::sc_kv_index;
use super::status::sc_error;
use super::{guard, require_out, write_out};
use crate::error::Error;
use crate::hash::MmItem;
use crate::index::{RequestFacts, ScoreTable};
use crate::wire;

/// The request arguments shared by `sc_kv_index_request_keys` and `sc_kv_index_score`.
struct Request<'a> {
    ids: &'a [u32],
    lora_name: &'a str,
    lora_path: &'a str,
    cache_salt: &'a str,
    mm_items: Vec<MmItem>,
}

impl Request<'_> {
    fn facts(&self) -> RequestFacts<'_> {
        RequestFacts {
            lora_name: self.lora_name,
            lora_path: self.lora_path,
            cache_salt: self.cache_salt,
            mm_items: &self.mm_items,
        }
    }
}

/// # Safety
/// The arguments must be borrowed for the call, as the exports' contracts say.
unsafe fn read_request<'a>(
    ids: sc_ids,
    lora_name: sc_str,
    lora_path: sc_str,
    cache_salt: sc_str,
    mm_items_json: sc_str,
) -> crate::Result<Request<'a>> {
    // SAFETY: forwarded from the caller.
    let ids = unsafe { read_ids(ids, "token_ids")? };
    // SAFETY: as above.
    let lora_name = unsafe { read_str(lora_name, "lora_name")? };
    // SAFETY: as above.
    let lora_path = unsafe { read_str(lora_path, "lora_path")? };
    // SAFETY: as above.
    let cache_salt = unsafe { read_str(cache_salt, "cache_salt")? };
    // SAFETY: as above.
    let mm_text = unsafe { read_str(mm_items_json, "mm_items")? };
    let mm_items = if mm_text.trim().is_empty() {
        Vec::new()
    } else {
        Vec::<MmItem>::deserialize(&mut serde_json::Deserializer::from_str(mm_text))
            .map_err(|e| Error::invalid_argument(format!("mm_items: {e}")))?
    };
    Ok(Request {
        ids,
        lora_name,
        lora_path,
        cache_salt,
        mm_items,
    })
}

/// The keys of a request's full blocks (content keys, or the engine's hashes in engine mode) as
/// little-endian `uint64_t` values in `*out`. `lora_path`: the adapter's path as the engine was
/// given it (engine mode only: vLLM >= 0.31 hashes it). `mm_items_json`: a JSON array of
/// `{"identifier", "offset", "length"}` or empty (engine mode only; content keys ignore it).
///
/// # Safety
/// `index` must be a live handle; the other inputs are borrowed for the call; `out` and `err`
/// must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_kv_index_request_keys(
    index: *const sc_kv_index,
    ids: sc_ids,
    lora_name: sc_str,
    lora_path: sc_str,
    cache_salt: sc_str,
    mm_items_json: sc_str,
    out: *mut sc_bytes,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(out, "out")?;
        // SAFETY: the caller passes a live handle.
        let index = unsafe { read_handle(index, "index")? };
        // SAFETY: the caller lends the request arguments for the call.
        let r = unsafe { read_request(ids, lora_name, lora_path, cache_salt, mm_items_json)? };
        let keys = index.inner.request_keys(r.ids, &r.facts())?;
        let bytes: Vec<u8> = keys.iter().flat_map(|k| k.to_le_bytes()).collect();
        // SAFETY: the caller promises `out` is writable.
        unsafe { write_out(out, sc_bytes::from_vec(bytes), "out") }
    })
}

/// Scores a request (hashing it as `sc_kv_index_request_keys` does); `*out` receives the result
/// in the layout of [`encode_score`].
///
/// # Safety
/// As `sc_kv_index_request_keys`.
#[no_mangle]
pub unsafe extern "C" fn sc_kv_index_score(
    index: *const sc_kv_index,
    ids: sc_ids,
    lora_name: sc_str,
    lora_path: sc_str,
    cache_salt: sc_str,
    mm_items_json: sc_str,
    out: *mut sc_bytes,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(out, "out")?;
        // SAFETY: the caller passes a live handle.
        let index = unsafe { read_handle(index, "index")? };
        // SAFETY: the caller lends the request arguments for the call.
        let r = unsafe { read_request(ids, lora_name, lora_path, cache_salt, mm_items_json)? };
        let table = index.inner.score(r.ids, &r.facts())?;
        // SAFETY: the caller promises `out` is writable.
        unsafe { write_out(out, sc_bytes::from_vec(encode_score(&table)), "out") }
    })
}

/// Scores a request as `sc_kv_index_score` does and writes the answer as a
/// `sidecar.v1.ScoreResponse` in protobuf wire format into `*out` (workers best first, block
/// hashes, block size, mode, `num_tokens` = the ids' count), with the fields only the caller
/// knows: `fingerprint`, `warming` and, on an engine-mode index, `block_hash_spec` (a serialized
/// `BlockHashSpec`, `spec_len` bytes, NULL when 0; ignored in content mode, where the field is
/// absent). The server answers a token-ids Score with it without a Python object per worker.
///
/// # Safety
/// As `sc_kv_index_request_keys`; `spec` and `fingerprint` are borrowed for the call.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn sc_kv_index_score_response(
    index: *const sc_kv_index,
    ids: sc_ids,
    lora_name: sc_str,
    lora_path: sc_str,
    cache_salt: sc_str,
    mm_items_json: sc_str,
    spec: *const u8,
    spec_len: usize,
    fingerprint: sc_str,
    warming: bool,
    out: *mut sc_bytes,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(out, "out")?;
        // SAFETY: the caller passes a live handle.
        let index = unsafe { read_handle(index, "index")? };
        // SAFETY: the caller lends the request arguments for the call.
        let r = unsafe { read_request(ids, lora_name, lora_path, cache_salt, mm_items_json)? };
        // SAFETY: as above.
        let spec = unsafe { read_slice(spec, spec_len, "block_hash_spec")? };
        // SAFETY: as above.
        let fingerprint = unsafe { read_str(fingerprint, "fingerprint")? };
        let num_tokens = u32::try_from(r.ids.len())
            .map_err(|_| Error::invalid_argument("token_ids: more than 2^32-1 ids"))?;
        let table = index.inner.score(r.ids, &r.facts())?;
        let mode = index.inner.mode();
        let fields = wire::ScoreFields {
            block_size: table.block_size,
            block_hashes: &table.keys,
            mode,
            block_hash_spec: (mode == "engine").then_some(spec),
            num_tokens,
            fingerprint,
            warming,
            media: &table.media,
        };
        let rows = table.workers.iter().map(|w| wire::WorkerRow {
            name: &w.name,
            blocks: w.blocks,
            by_medium: &w.by_medium,
        });
        let bytes = wire::score_response(&fields, rows);
        // SAFETY: the caller promises `out` is writable.
        unsafe { write_out(out, sc_bytes::from_vec(bytes), "out") }
    })
}

/// Scores precomputed keys (`keys`: `len` values, NULL when 0); `*out` as `sc_kv_index_score`.
///
/// # Safety
/// `index` must be a live handle; `keys` is borrowed for the call; `out` and `err` must be NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_kv_index_score_keys(
    index: *const sc_kv_index,
    keys: *const u64,
    len: usize,
    out: *mut sc_bytes,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(out, "out")?;
        // SAFETY: the caller passes a live handle and lends the keys for the call.
        let index = unsafe { read_handle(index, "index")? };
        // SAFETY: as above.
        let keys = unsafe { read_slice(keys, len, "keys")? };
        let table = index.inner.score_keys(keys.to_vec());
        // SAFETY: the caller promises `out` is writable.
        unsafe { write_out(out, sc_bytes::from_vec(encode_score(&table)), "out") }
    })
}

/// A score as bytes, little-endian:
/// `u32 block_size, u32 keys, u32 workers, u32 media`, then `keys x u64` (the request's keys),
/// `workers x u32` (blocks, best first), `workers x media x u32` (blocks per medium, worker
/// major), `media x u32` and `workers x u32` (end offsets of each name in the name bytes), then
/// the name bytes: the media names, then the worker names (UTF-8).
fn encode_score(table: &ScoreTable) -> Vec<u8> {
    let names_len: usize = table.media.iter().map(String::len).sum::<usize>()
        + table.workers.iter().map(|w| w.name.len()).sum::<usize>();
    let (n, m) = (table.workers.len(), table.media.len());
    let mut out =
        Vec::with_capacity(16 + 8 * table.keys.len() + 4 * (n + n * m + m + n) + names_len);
    for header in [
        table.block_size,
        table.keys.len() as u32,
        n as u32,
        m as u32,
    ] {
        out.extend_from_slice(&header.to_le_bytes());
    }
    for key in &table.keys {
        out.extend_from_slice(&key.to_le_bytes());
    }
    for w in &table.workers {
        out.extend_from_slice(&w.blocks.to_le_bytes());
    }
    for w in &table.workers {
        for depth in &w.by_medium {
            out.extend_from_slice(&depth.to_le_bytes());
        }
    }
    let names = table
        .media
        .iter()
        .map(String::as_str)
        .chain(table.workers.iter().map(|w| w.name.as_str()));
    let mut end = 0u32;
    for name in names.clone() {
        end += name.len() as u32;
        out.extend_from_slice(&end.to_le_bytes());
    }
    for name in names {
        out.extend_from_slice(name.as_bytes());
    }
    out
}
