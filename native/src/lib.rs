//! Native core of the sidecar: tokenization, chat templates, incremental decoding, parsers,
//! block hashing and the KV prefix index, behind a C ABI that Python loads through cffi.
//!
//! Capability modules (`tokenizer`, `template`, `render`, `detok`, `parse`, `hash`, `index`, `multiplex`)
//! are plain Rust: `&str` and `&[u32]` in, `Result<T, Error>` out, no FFI types. [`wire`] holds the protobuf
//! messages generated from `protos/`, [`settings`] reads the JSON settings the server passes in,
//! [`error`] the error kinds and their one gRPC status table. Every `extern "C"` export and every
//! `unsafe` block lives in [`ffi`], which only converts; the exceptions are the cache prefetch
//! hint of the index tables (`index::table`), which reads and writes no memory, and the AVX-512
//! readers of token ids (`index::msgpack::avx512` for KV events, `wire::score::avx512` for a
//! Score request's packed ids): calls into code compiled for features the CPU was checked for
//! (`simd::Probe`), and vector loads and stores within arrays and slices they bounds-check.
//!
//! Tests that need the real models of `../shared/models` go through [`test_support`]: they skip
//! with a printed reason when the data is absent and fail when `CI=true`.

#![deny(unsafe_code)]

pub mod cancel;
pub mod detok;
pub mod error;
pub mod ffi;
pub mod hash;
pub mod index;
pub mod multiplex;
pub mod parse;
pub mod render;
pub mod settings;
#[cfg(target_arch = "x86_64")]
mod simd;
pub mod template;
pub mod tokenizer;
pub mod wire;

#[cfg(test)]
pub(crate) mod test_support;

pub use error::{Error, ErrorKind, Result};

/// See the note on `mimalloc` in Cargo.toml: allocation churn is a large share of rendering and
/// encoding time, and no allocation made here is ever freed by another allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
