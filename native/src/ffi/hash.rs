//! Exports for [`crate::hash`].
//!
//! Results go into caller-owned `uint64_t` arrays (one value per full block, so the caller knows
//! the size: `len / block_size`), which keeps these hot calls free of allocations the caller would
//! have to free.

use super::buf::{read_cancel_flag, read_ids, read_slice, read_str, sc_ids, sc_str};
use super::status::sc_error;
use super::{guard, write_out};
use crate::cancel::Cancel;
use crate::error::Error;
use crate::hash::{self, HashSpec};
use crate::index::MmKey;

/// Hashes the full blocks of `ids` as the JSON `spec` says (fields of `HashSpec`: `algorithm`,
/// `block_size`, `seed`, `cache_salt`, `lora_name`, `lora_path`, `extra_keys`, `namespace`,
/// `mm_items`, `sglang_extra_key`, `sglang_event_format`, `sequence_hashes`, `lookahead`) and
/// writes one 64-bit value per block to `out` (with `lookahead` L > 0: per full block followed by
/// at least L tokens, so fewer); `*written` receives the count. A malformed or unreproducible spec,
/// or `out_cap` smaller than the number of full blocks, fails with `SC_ERR_KIND_INVALID_ARGUMENT`.
/// `cancel` is the call's cancellation flag (as in `sc_encode_options`) or NULL, checked every
/// `HASH_CHECK_BLOCKS` blocks.
///
/// # Safety
/// `spec` and `ids` are borrowed for the call; `cancel` NULL or an aligned `uint32_t` valid for
/// the call; `out` must be valid for `out_cap` writes; `written` and `err` must be NULL or valid
/// for writes.
#[no_mangle]
pub unsafe extern "C" fn sc_block_hashes(
    spec: sc_str,
    ids: sc_ids,
    cancel: *const u32,
    out: *mut u64,
    out_cap: usize,
    written: *mut usize,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller lends `spec` and `ids` for the call.
        let spec_text = unsafe { read_str(spec, "spec")? };
        // SAFETY: as above.
        let ids = unsafe { read_ids(ids, "token_ids")? };
        // SAFETY: the caller lends the flag for the call.
        let flag = unsafe { read_cancel_flag(cancel)? };
        let result = hash::block_hashes_cancellable(
            ids,
            &HashSpec::from_json(spec_text)?,
            &Cancel::new(None, flag),
        )?;
        // SAFETY: the caller promises `out` holds `out_cap` writable values.
        unsafe { write_values(&result.values, out, out_cap)? };
        // SAFETY: the caller promises `written` is NULL or writable.
        unsafe { write_out(written, result.values.len(), "written") }
    })
}

/// The router adapter index's own content keys (see `hash::prefix_keys`): Dynamo-style SequenceHash
/// keys of the full blocks of `ids`, chained after `parent` (`has_parent` false = sequence start).
/// `mm_keys_json`: empty, or a JSON array with per block of `ids` null or an array of its
/// multimodal keys as `[identifier, offset]` (the offset an integer in -2^63..2^64, taken as 64
/// bits), in order.
///
/// # Safety
/// `ids`, `lora_name`, `namespace` and `mm_keys_json` are borrowed for the call; `out` must be
/// valid for `out_cap` writes; `written` and `err` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn sc_prefix_keys(
    ids: sc_ids,
    block_size: u32,
    lora_name: sc_str,
    namespace: sc_str,
    has_parent: bool,
    parent: u64,
    mm_keys_json: sc_str,
    out: *mut u64,
    out_cap: usize,
    written: *mut usize,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller lends these for the call.
        let ids = unsafe { read_ids(ids, "token_ids")? };
        // SAFETY: as above.
        let lora_name = unsafe { read_str(lora_name, "lora_name")? };
        // SAFETY: as above.
        let namespace = unsafe { read_str(namespace, "namespace")? };
        // SAFETY: as above.
        let mm_text = unsafe { read_str(mm_keys_json, "mm_keys")? };
        let mm = mm_keys(mm_text)?;
        let keys = hash::prefix_keys(
            ids,
            block_size,
            lora_name,
            namespace,
            has_parent.then_some(parent),
            &mm,
        )?;
        // SAFETY: the caller promises `out` holds `out_cap` writable values.
        unsafe { write_values(&keys, out, out_cap)? };
        // SAFETY: the caller promises `written` is NULL or writable.
        unsafe { write_out(written, keys.len(), "written") }
    })
}

/// The per-block multimodal keys of `sc_prefix_keys`.
fn mm_keys(text: &str) -> crate::Result<Vec<MmKey>> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let blocks: Vec<Option<Vec<(String, i128)>>> =
        serde_json::from_str(text).map_err(|e| Error::invalid_argument(format!("mm_keys: {e}")))?;
    let mut out = Vec::new();
    for (block, keys) in blocks.iter().enumerate() {
        for (identifier, offset) in keys.iter().flatten() {
            if !(i64::MIN as i128..=u64::MAX as i128).contains(offset) {
                return Err(Error::invalid_argument(format!(
                    "mm_keys[{block}]: offset {offset} is not a 64-bit integer"
                )));
            }
            let block = u32::try_from(block)
                .map_err(|_| Error::invalid_argument("mm_keys: more than 2^32 blocks"))?;
            out.push(MmKey::new(block, identifier, *offset));
        }
    }
    Ok(out)
}

/// # Safety
/// `out` must be valid for `out_cap` writes (or NULL with `out_cap` 0).
unsafe fn write_values(values: &[u64], out: *mut u64, out_cap: usize) -> crate::Result<()> {
    if values.len() > out_cap {
        return Err(Error::invalid_argument(format!(
            "out: room for {out_cap} values, {} needed",
            values.len()
        )));
    }
    if values.is_empty() {
        return Ok(());
    }
    // Reuse read_slice's NULL check for the output pointer.
    // SAFETY: checked non-null below; the caller promises room for `out_cap` >= len values.
    unsafe { read_slice(out.cast_const(), values.len(), "out")? };
    // SAFETY: `out` is non-null and valid for `values.len()` writes; the regions cannot overlap
    // because `values` is our own allocation.
    unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), out, values.len()) };
    Ok(())
}
