//! The Python values vLLM feeds its block-hash function, as both encoders (pickle and CBOR) see
//! them.

/// A Python value of the shapes vLLM hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value<'a> {
    /// `None`.
    None,
    /// An `int` (offsets may be negative).
    Int(i64),
    /// A `bytes` object (a parent digest).
    Bytes(&'a [u8]),
    /// A `str` built at run time (a request field): equal strings are distinct objects.
    Str(&'a str),
    /// A `str` literal of vLLM's source (`"mm"`, `"lora"`, ...): interned, so one shared object.
    Tag(&'static str),
    /// A `tuple` of token ids (kept apart from `Tuple` so the hot path allocates nothing).
    Tokens(&'a [u32]),
    /// Any other `tuple`.
    Tuple(Vec<Value<'a>>),
}
