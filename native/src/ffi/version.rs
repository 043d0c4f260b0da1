//! Versions the Python loader checks before using the library.

/// Bumped whenever an export's signature or a `#[repr(C)]` layout changes; the Python loader
/// refuses a library whose version differs from the one it was written for.
pub const SC_ABI_VERSION: u32 = 12;

/// The ABI version of this build.
#[no_mangle]
pub extern "C" fn sc_abi_version() -> u32 {
    SC_ABI_VERSION
}

/// The crate version as a NUL-terminated static string (never freed).
#[no_mangle]
pub extern "C" fn sc_version() -> *const u8 {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr()
}
