//! Status codes, error kinds and the owned `sc_error` record.

use std::any::Any;
use std::cell::RefCell;
use std::sync::Once;

use serde_json::json;

use super::buf::{sc_bytes, write_json};
use super::guard;
use crate::error::{grpc_code, ErrorKind};

/// The call succeeded; out-parameters are written.
pub const SC_STATUS_OK: i32 = 0;
/// The call failed; `*err` (when given) describes why. Out-parameters are untouched.
pub const SC_STATUS_ERROR: i32 = 1;
/// The native core panicked (a bug); `*err` carries the panic message. The process is unharmed.
pub const SC_STATUS_PANIC: i32 = 2;

/// Malformed input; the message names the field. gRPC `INVALID_ARGUMENT`.
pub const SC_ERR_KIND_INVALID_ARGUMENT: i32 = 1;
/// Something named does not exist. gRPC `NOT_FOUND`.
pub const SC_ERR_KIND_NOT_FOUND: i32 = 2;
/// A limit was hit. gRPC `RESOURCE_EXHAUSTED`.
pub const SC_ERR_KIND_RESOURCE_EXHAUSTED: i32 = 3;
/// Not possible in the current state. gRPC `FAILED_PRECONDITION`.
pub const SC_ERR_KIND_FAILED_PRECONDITION: i32 = 4;
/// The deadline passed. gRPC `DEADLINE_EXCEEDED`.
pub const SC_ERR_KIND_DEADLINE_EXCEEDED: i32 = 5;
/// An invariant did not hold. gRPC `INTERNAL`.
pub const SC_ERR_KIND_INTERNAL: i32 = 6;
/// A panic was caught. gRPC `INTERNAL`.
pub const SC_ERR_KIND_PANIC: i32 = 7;
/// The caller withdrew the call (see `sc_cancel_flag`). gRPC `CANCELLED`.
pub const SC_ERR_KIND_CANCELLED: i32 = 8;

/// An error returned by a failed call; free with `sc_error_free`.
#[repr(C)]
pub struct sc_error {
    /// One of `SC_ERR_KIND_*`.
    pub kind: i32,
    /// UTF-8 message, NUL-terminated for C callers; `message_len` excludes the NUL.
    pub message: *mut u8,
    /// Message length in bytes.
    pub message_len: usize,
}

pub(crate) fn kind_code(kind: ErrorKind) -> i32 {
    match kind {
        ErrorKind::InvalidArgument => SC_ERR_KIND_INVALID_ARGUMENT,
        ErrorKind::NotFound => SC_ERR_KIND_NOT_FOUND,
        ErrorKind::ResourceExhausted => SC_ERR_KIND_RESOURCE_EXHAUSTED,
        ErrorKind::FailedPrecondition => SC_ERR_KIND_FAILED_PRECONDITION,
        ErrorKind::DeadlineExceeded => SC_ERR_KIND_DEADLINE_EXCEEDED,
        ErrorKind::Cancelled => SC_ERR_KIND_CANCELLED,
        ErrorKind::Internal => SC_ERR_KIND_INTERNAL,
    }
}

/// Every `SC_ERR_KIND_*` with its name and gRPC status code ([`ErrorKind::grpc_code`]; a caught
/// panic is `INTERNAL`).
fn status_table() -> serde_json::Value {
    let mut rows: Vec<_> = ErrorKind::ALL
        .iter()
        .map(|&k| json!({"kind": kind_code(k), "name": k.name(), "grpc_code": k.grpc_code()}))
        .collect();
    rows.push(
        json!({"kind": SC_ERR_KIND_PANIC, "name": "panic", "grpc_code": grpc_code::INTERNAL}),
    );
    json!(rows)
}

/// The status table as JSON: `[{"kind": SC_ERR_KIND_*, "name": "invalid_argument", "grpc_code":
/// 3}, ...]`, one entry per error kind a call can fail with. Python raises each kind as the error
/// of its gRPC code, so this is the one place that mapping is decided.
///
/// # Safety
/// `out` and `err` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn sc_error_kinds(out: *mut sc_bytes, err: *mut *mut sc_error) -> i32 {
    guard(err, || {
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_json(out, &status_table()) }
    })
}

pub(crate) fn write_error(err: *mut *mut sc_error, kind: i32, message: &str) {
    if err.is_null() {
        return;
    }
    let mut bytes = Vec::with_capacity(message.len() + 1);
    bytes.extend_from_slice(message.as_bytes());
    bytes.push(0);
    let message_len = message.len();
    let message = Box::into_raw(bytes.into_boxed_slice()) as *mut u8;
    let record = Box::into_raw(Box::new(sc_error {
        kind,
        message,
        message_len,
    }));
    // SAFETY: `err` is non-null and the caller promises it is valid for a pointer write.
    unsafe { err.write(record) };
}

/// Frees an error returned by any call. NULL is a no-op.
///
/// # Safety
/// `err` must be NULL or a pointer returned through an `err` out-parameter, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn sc_error_free(err: *mut sc_error) {
    if err.is_null() {
        return;
    }
    // SAFETY: allocated by `write_error` with Box; ownership comes back here exactly once.
    let record = unsafe { Box::from_raw(err) };
    let len = record.message_len + 1;
    // SAFETY: `message` is the boxed slice of `message_len + 1` bytes made in `write_error`.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(record.message, len)) });
}

thread_local! {
    /// Where the panic hook leaves the location of the last panic on this thread.
    static LAST_PANIC_LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Replaces the default hook (which prints to stderr of the host process) with one that records
/// the location for the error message; the message itself comes from the payload.
pub(crate) fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let location = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()));
            LAST_PANIC_LOCATION.with(|slot| *slot.borrow_mut() = location);
        }));
    });
}

pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    let text = if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_owned()
    };
    match LAST_PANIC_LOCATION.with(|slot| slot.borrow_mut().take()) {
        Some(location) => format!("{text} (at {location})"),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lists_every_kind_once_with_its_status() {
        let table = status_table();
        let rows = table.as_array().expect("an array");
        let mut kinds: Vec<i64> = rows
            .iter()
            .map(|r| r["kind"].as_i64().expect("kind"))
            .collect();
        kinds.sort_unstable();
        assert_eq!(
            kinds,
            (1..=8).collect::<Vec<i64>>(),
            "SC_ERR_KIND_* 1..8, each once"
        );
        for kind in ErrorKind::ALL {
            let row = rows
                .iter()
                .find(|r| r["kind"] == kind_code(kind))
                .expect("listed");
            assert_eq!(row["grpc_code"], kind.grpc_code(), "{kind:?}");
            assert_eq!(row["name"], kind.name());
        }
        let panic = rows
            .iter()
            .find(|r| r["kind"] == SC_ERR_KIND_PANIC)
            .expect("panic");
        assert_eq!(panic["grpc_code"], grpc_code::INTERNAL);
    }
}
