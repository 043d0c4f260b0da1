//! Canonical CBOR (RFC 8949 core deterministic encoding), the bytes `cbor2.dumps(obj,
//! canonical=True)` writes for the value shapes vLLM hashes with `sha256_cbor` / `xxhash_cbor`:
//! tuples become definite-length arrays, integers take the shortest head, `None` is `0xf6`.
//! No maps or floats occur, so key ordering and float shortening never apply.

use super::value::Value;

const MAJOR_UINT: u8 = 0;
const MAJOR_NEGINT: u8 = 1;
const MAJOR_BYTES: u8 = 2;
const MAJOR_TEXT: u8 = 3;
const MAJOR_ARRAY: u8 = 4;
const SIMPLE_NULL: u8 = 0xf6;

/// Appends the canonical CBOR encoding of `value` to `out`.
pub fn encode_into(value: &Value<'_>, out: &mut Vec<u8>) {
    match value {
        Value::None => out.push(SIMPLE_NULL),
        Value::Int(x) if *x >= 0 => head(MAJOR_UINT, *x as u64, out),
        // -1 - x, computed without overflow for i64::MIN.
        Value::Int(x) => head(MAJOR_NEGINT, !(*x as u64), out),
        Value::Bytes(b) => {
            head(MAJOR_BYTES, b.len() as u64, out);
            out.extend_from_slice(b);
        }
        Value::Str(s) | Value::Tag(s) => {
            head(MAJOR_TEXT, s.len() as u64, out);
            out.extend_from_slice(s.as_bytes());
        }
        Value::Tokens(ids) => {
            head(MAJOR_ARRAY, ids.len() as u64, out);
            out.reserve(5 * ids.len());
            for &id in *ids {
                push_uint32(out, id);
            }
        }
        Value::Tuple(items) => {
            head(MAJOR_ARRAY, items.len() as u64, out);
            for item in items {
                encode_into(item, out);
            }
        }
    }
}

/// Appends the canonical CBOR of `(parent, tuple(tokens), extra)` (vLLM's block tuple) to `out`.
pub fn encode_block_into(parent: &[u8], tokens: &[u32], extra: &Value<'_>, out: &mut Vec<u8>) {
    out.push((MAJOR_ARRAY << 5) | 3);
    encode_into(&Value::Bytes(parent), out);
    encode_into(&Value::Tokens(tokens), out);
    encode_into(extra, out);
}

/// The canonical CBOR encoding of `value`.
pub fn encode(value: &Value<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(value, &mut out);
    out
}

/// `head(MAJOR_UINT, id)` for a token id, with plain pushes (the hot loop of block hashing).
#[inline]
fn push_uint32(out: &mut Vec<u8>, id: u32) {
    let b = id.to_be_bytes();
    if id < 24 {
        out.push(id as u8);
    } else if id <= 0xff {
        out.push(24);
        out.push(b[3]);
    } else if id <= 0xffff {
        out.push(25);
        out.push(b[2]);
        out.push(b[3]);
    } else {
        out.push(26);
        out.push(b[0]);
        out.push(b[1]);
        out.push(b[2]);
        out.push(b[3]);
    }
}

fn head(major: u8, n: u64, out: &mut Vec<u8>) {
    let m = major << 5;
    if n < 24 {
        out.push(m | n as u8);
    } else if n <= 0xff {
        out.extend_from_slice(&[m | 24, n as u8]);
    } else if n <= 0xffff {
        out.push(m | 25);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else if n <= 0xffff_ffff {
        out.push(m | 26);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(m | 27);
        out.extend_from_slice(&n.to_be_bytes());
    }
}
