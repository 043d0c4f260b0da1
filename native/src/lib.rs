//! Native core of the sidecar: tokenization, chat templates, incremental decoding, parsers and
//! block hashing, behind a C ABI that Python loads through cffi.
//!
//! Capability modules (`tokenizer`, ...) are plain Rust: `&str` and `&[u32]` in, `Result<T, Error>`
//! out, no FFI types. Every `extern "C"` export and every `unsafe` block lives in [`ffi`].

#![deny(unsafe_code)]

pub mod detok;
pub mod error;
pub mod ffi;
pub mod hash;
pub mod parse;
pub mod template;
pub mod tokenizer;

pub use error::{Error, ErrorKind, Result};

/// See the note on `mimalloc` in Cargo.toml: allocation churn is a large share of rendering and
/// encoding time, and no allocation made here is ever freed by another allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
