//! Borrowed inputs, owned output buffers and handles.

use super::{require_out, write_out};
use crate::error::{Error, Result};

/// A borrowed UTF-8 string: pointer + length, not NUL-terminated. `ptr` may be NULL when `len` is 0.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sc_str {
    /// First byte.
    pub ptr: *const u8,
    /// Length in bytes.
    pub len: usize,
}

/// A borrowed run of token ids. `ptr` may be NULL when `len` is 0.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sc_ids {
    /// First id.
    pub ptr: *const u32,
    /// Number of ids.
    pub len: usize,
}

/// An owned byte buffer (UTF-8 text or JSON); free with `sc_bytes_free`.
#[repr(C)]
pub struct sc_bytes {
    /// First byte; NULL when empty.
    pub ptr: *mut u8,
    /// Length in bytes.
    pub len: usize,
}

impl sc_bytes {
    pub(crate) fn from_vec(bytes: Vec<u8>) -> Self {
        let (ptr, len) = leak_slice(bytes);
        sc_bytes { ptr, len }
    }
}

/// Frees a buffer filled by any call. A NULL `ptr` is a no-op; the struct itself is the caller's.
///
/// # Safety
/// `buf` must be NULL or point to an `sc_bytes` filled by this library and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn sc_bytes_free(buf: *mut sc_bytes) {
    if buf.is_null() {
        return;
    }
    // SAFETY: the caller passes a buffer we filled; we reset it so a double free is harmless.
    unsafe {
        free_slice((*buf).ptr, (*buf).len);
        (*buf).ptr = std::ptr::null_mut();
        (*buf).len = 0;
    }
}

/// Hands a vector's memory to the caller as (pointer, length); NULL for an empty vector.
pub(crate) fn leak_slice<T>(v: Vec<T>) -> (*mut T, usize) {
    if v.is_empty() {
        return (std::ptr::null_mut(), 0);
    }
    let len = v.len();
    (Box::into_raw(v.into_boxed_slice()) as *mut T, len)
}

/// Takes back memory handed out by [`leak_slice`].
///
/// # Safety
/// `(ptr, len)` must come from `leak_slice` and not have been freed.
pub(crate) unsafe fn free_slice<T>(ptr: *mut T, len: usize) {
    if ptr.is_null() {
        return;
    }
    // SAFETY: `leak_slice` made this from a boxed slice of exactly `len` elements.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
}

/// Reads a borrowed string argument; `field` names it in errors.
///
/// # Safety
/// `s.ptr` must be NULL or valid for reads of `s.len` bytes for the duration of the call.
pub(crate) unsafe fn read_str<'a>(s: sc_str, field: &str) -> Result<&'a str> {
    // SAFETY: forwarded from the caller.
    let bytes = unsafe { read_slice(s.ptr, s.len, field)? };
    std::str::from_utf8(bytes).map_err(|e| {
        Error::invalid_argument(format!(
            "{field}: not valid UTF-8 (at byte {})",
            e.valid_up_to()
        ))
    })
}

/// Reads a borrowed id run.
///
/// # Safety
/// `ids.ptr` must be NULL or valid for reads of `ids.len` ids for the duration of the call.
pub(crate) unsafe fn read_ids<'a>(ids: sc_ids, field: &str) -> Result<&'a [u32]> {
    // SAFETY: forwarded from the caller.
    unsafe { read_slice(ids.ptr, ids.len, field) }
}

/// Reads a borrowed array of `len` items; NULL is only allowed when `len` is 0.
///
/// # Safety
/// `ptr` must be NULL or valid for reads of `len` items for the duration of the call.
pub(crate) unsafe fn read_slice<'a, T>(ptr: *const T, len: usize, field: &str) -> Result<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Error::invalid_argument(format!(
            "{field}: null pointer with length {len}"
        )));
    }
    if !ptr.is_aligned() {
        return Err(Error::invalid_argument(format!(
            "{field}: pointer not aligned to {} bytes",
            std::mem::align_of::<T>()
        )));
    }
    // SAFETY: non-null, aligned, and valid for `len` reads, as the caller promises.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Reads a handle argument, refusing NULL.
///
/// # Safety
/// `ptr` must be NULL or a live handle of type `T` created by this library.
pub(crate) unsafe fn read_handle<'a, T>(ptr: *const T, field: &str) -> Result<&'a T> {
    if ptr.is_null() {
        return Err(Error::invalid_argument(format!("{field}: null handle")));
    }
    // SAFETY: non-null live handle, as the caller promises.
    Ok(unsafe { &*ptr })
}

/// Hands a new handle to the caller through `out` (the handle is dropped again when `out` is NULL).
///
/// # Safety
/// `out` must be NULL or valid for a write of a pointer.
pub(crate) unsafe fn write_handle<T>(out: *mut *mut T, value: T) -> Result<()> {
    let handle = Box::into_raw(Box::new(value));
    // SAFETY: forwarded from the caller.
    unsafe { write_out(out, handle, "out") }.inspect_err(|_| {
        // SAFETY: we just made `handle` and nobody else has it.
        drop(unsafe { Box::from_raw(handle) });
    })
}

/// Takes back a handle made by [`write_handle`] and drops it; NULL is a no-op.
///
/// # Safety
/// `handle` must be NULL or a handle from `write_handle`, not yet freed and not in use.
pub(crate) unsafe fn free_handle<T>(handle: *mut T) {
    if !handle.is_null() {
        // SAFETY: made by Box::into_raw; ownership returns here exactly once.
        drop(unsafe { Box::from_raw(handle) });
    }
}

/// Writes `value` as JSON through an `sc_bytes` out-pointer.
///
/// # Safety
/// `out` must be NULL or valid for a write of an `sc_bytes`.
pub(crate) unsafe fn write_json(out: *mut sc_bytes, value: &serde_json::Value) -> Result<()> {
    require_out(out, "out")?;
    let bytes = serde_json::to_vec(value).map_err(|e| Error::internal(e.to_string()))?;
    // SAFETY: forwarded from the caller.
    unsafe { write_out(out, sc_bytes::from_vec(bytes), "out") }
}

/// Reads a call's cancellation flag (see `crate::cancel`): a `uint32_t` the caller owns, zero while
/// the call is wanted; the caller sets it to non-zero (a single aligned 32-bit store, from any
/// thread) to make the call stop at its next check with `SC_ERR_KIND_CANCELLED`. NULL = the call
/// cannot be cancelled.
///
/// # Safety
/// `flag` must be NULL or point to a 4-byte-aligned `uint32_t` that stays valid for the call.
pub(crate) unsafe fn read_cancel_flag<'a>(
    flag: *const u32,
) -> Result<Option<&'a std::sync::atomic::AtomicU32>> {
    if flag.is_null() {
        return Ok(None);
    }
    if !(flag as usize).is_multiple_of(std::mem::align_of::<u32>()) {
        return Err(Error::invalid_argument(
            "cancel: the flag is not 4-byte aligned",
        ));
    }
    // SAFETY: non-null, aligned, and valid for the call as the caller promises; every access on
    // our side is atomic.
    Ok(Some(unsafe {
        std::sync::atomic::AtomicU32::from_ptr(flag.cast_mut())
    }))
}
