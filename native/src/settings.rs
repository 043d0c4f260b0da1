//! Settings that enter the core as JSON text from the server (a tokenizer's options, a renderer's
//! templates and limits, a parse model's options, a stream's limits, a request's parse
//! configuration, a hashing spec): each is read once, where it enters, into a struct that refuses
//! unknown fields, so a misspelled or stale field is an error naming the argument rather than a
//! silently ignored value.

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Reads `text` as a `T`; empty (or blank) text is `T::default()`. A malformed value or an
/// unknown field is `InvalidArgument` prefixed with `field`.
pub fn from_json_or_default<T: DeserializeOwned + Default>(text: &str, field: &str) -> Result<T> {
    if text.trim().is_empty() {
        return Ok(T::default());
    }
    from_json(text, field)
}

/// Reads `text` as a `T`; a malformed value or an unknown field is `InvalidArgument` prefixed
/// with `field`.
pub fn from_json<T: DeserializeOwned>(text: &str, field: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| Error::invalid_argument(format!("{field}: {e}")))
}
