//! Exports for tests and benchmarks only: built with the cargo feature `testing` (which `make test`
//! and `make bench` turn on), left out of the user build, and declared in the header only under
//! `#if defined(SIDECAR_TESTING)`.

use std::sync::Arc;

use super::buf::{read_handle, read_ids, read_str, sc_ids, sc_str, write_handle};
use super::parse::sc_parse_model;
use super::status::sc_error;
use super::tokenizer::sc_tokenizer;
use super::{guard, write_out};
use crate::parse::SessionConfig;
use crate::tokenizer::{Tokenizer, TokenizerFormat};

/// Panics inside the guard; lets tests prove a panic becomes `SC_STATUS_PANIC`, not an abort.
///
/// # Safety
/// `err` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn sc_test_panic(err: *mut *mut sc_error) -> i32 {
    guard(err, || {
        panic!("deliberate panic requested by sc_test_panic")
    })
}

/// Builds a tokenizer from `tokenizer.json` text (tests of the C ABI build small vocabularies
/// in memory).
///
/// # Safety
/// `json` is borrowed for the call; `out` and `err` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn sc_tokenizer_from_json(
    json: sc_str,
    out: *mut *mut sc_tokenizer,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller lends `json` for the call.
        let json = unsafe { read_str(json, "json")? };
        let inner = Tokenizer::from_json_text(json, TokenizerFormat::TokenizerJson)?;
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_handle(out, sc_tokenizer::new(inner)) }
    })
}

/// Benchmark helper: runs `ids` through a fresh session `iterations` times, `per_step` ids per
/// feed, and writes the mean nanoseconds per token (detokenize + stop strings + parse; no FFI
/// or protobuf) to `*ns_per_token`.
///
/// # Safety
/// `model` must be a live handle; strings and ids are borrowed for the call; `ns_per_token` and
/// `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_parse_bench(
    model: *const sc_parse_model,
    config_json: sc_str,
    prompt_ids: sc_ids,
    ids: sc_ids,
    per_step: usize,
    iterations: usize,
    ns_per_token: *mut f64,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes a live handle and lends the arguments for the call.
        let model = Arc::clone(unsafe { read_handle(model, "model")? }.model());
        // SAFETY: as above.
        let (config, prompt, ids) = unsafe {
            (
                read_str(config_json, "config_json")?,
                read_ids(prompt_ids, "prompt_ids")?,
                read_ids(ids, "ids")?,
            )
        };
        let cfg: SessionConfig = crate::settings::from_json_or_default(config, "config_json")?;
        let ns =
            crate::parse::bench::ns_per_token(&model, &cfg, prompt, ids, per_step, iterations)?;
        // SAFETY: the caller promises the pointer is NULL or writable.
        unsafe { write_out(ns_per_token, ns, "ns_per_token") }
    })
}
