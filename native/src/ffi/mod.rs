//! The C ABI: every `extern "C"` export and every `unsafe` block of the crate.
//!
//! Conventions (the header `include/sidecar_native.h` is generated from this module):
//! - Every fallible export returns an `int32_t` status (`SC_STATUS_OK`, `SC_STATUS_ERROR`,
//!   `SC_STATUS_PANIC`) and, on failure, writes an owned `sc_error` (kind + message) to its `err`
//!   out-parameter when that is not NULL; free it with `sc_error_free`.
//! - Every export runs inside [`guard`], which catches panics: a bug becomes `SC_STATUS_PANIC` with
//!   the panic message, never an abort of the host process. The release profile keeps
//!   `panic = "unwind"` for that reason.
//! - Inputs are borrowed for the duration of the call only; strings cross as pointer + length
//!   UTF-8 (not NUL-terminated), token ids as `uint32_t*` + length.
//! - Outputs are owned by the caller after a successful call and freed with the matching
//!   `sc_*_free`; handles are opaque pointers created by `sc_<obj>_new` and freed by `sc_<obj>_free`.
//! - Handles built from models (`sc_tokenizer`) are immutable and may be used from many threads at
//!   once; stream handles belong to one request and one thread at a time; an `sc_kv_index` locks
//!   internally and may be used from many threads at once (but freed only when no call runs).
//! - An export only converts: it reads its arguments, calls one function of a core module and
//!   writes that function's result. Decisions (which cache path, which status a kind maps to, how
//!   a message is encoded) live in the core modules.
//! - Exports for tests and benchmarks live in [`testing`], built only with the cargo feature
//!   `testing` and declared in the header under `#if defined(SIDECAR_TESTING)`.
#![allow(unsafe_code)]
#![allow(non_camel_case_types)]

pub mod buf;
pub mod hash;
pub mod index;
pub mod index_score;
pub mod memory;
pub mod multiplex;
pub mod parse;
pub mod render;
pub mod status;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tokenizer;
pub mod version;
pub mod wire;

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::Result;
use status::{sc_error, SC_STATUS_ERROR, SC_STATUS_OK, SC_STATUS_PANIC};

/// Runs an export's body: `Ok` becomes `SC_STATUS_OK`, `Err` an `sc_error` with its kind, and a
/// panic `SC_STATUS_PANIC` with the panic message.
pub(crate) fn guard(err: *mut *mut sc_error, body: impl FnOnce() -> Result<()>) -> i32 {
    status::install_panic_hook();
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => SC_STATUS_OK,
        Ok(Err(e)) => {
            status::write_error(err, status::kind_code(e.kind()), e.message());
            SC_STATUS_ERROR
        }
        Err(payload) => {
            let message = status::panic_message(payload.as_ref());
            status::write_error(
                err,
                status::SC_ERR_KIND_PANIC,
                &format!("panic in native core: {message}"),
            );
            SC_STATUS_PANIC
        }
    }
}

/// Refuses a NULL out-pointer. Exports whose result owns memory call this before doing any
/// work, so a NULL `out` can never leave an allocation behind that nobody can free.
pub(crate) fn require_out<T>(out: *mut T, field: &str) -> Result<()> {
    if out.is_null() {
        return Err(crate::Error::invalid_argument(format!(
            "{field}: null out-pointer"
        )));
    }
    Ok(())
}

/// Writes `value` through an out-pointer, refusing NULL.
///
/// # Safety
/// `out` must be NULL or valid for a write of `T`.
pub(crate) unsafe fn write_out<T>(out: *mut T, value: T, field: &str) -> Result<()> {
    require_out(out, field)?;
    // SAFETY: non-null, and the caller promises it is valid for writes.
    unsafe { out.write(value) };
    Ok(())
}
