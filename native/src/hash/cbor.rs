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
            extend_uint32s(out, ids);
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

/// Head byte and payload width of an unsigned int >= 24 by its number of significant bytes (0..=4).
const UINT_HEAD: [u8; 5] = [24, 24, 25, 26, 26];
const UINT_WIDTH: [u32; 5] = [1, 1, 2, 4, 4];

/// Appends `head(MAJOR_UINT, id)` for each id: the hot loop of CBOR block hashing.
///
/// As in the pickle encoder, the width comes from a table instead of a branch per id (random ids
/// mispredict it): each id writes its head and four big-endian bytes, shifted so that the bytes it
/// needs come first, into a stack chunk, then advances by what it used.
fn extend_uint32s(out: &mut Vec<u8>, ids: &[u32]) {
    const CHUNK: usize = 64;
    let mut buf = [0u8; CHUNK * 5];
    for chunk in ids.chunks(CHUNK) {
        let mut pos = 0;
        for &id in chunk {
            let significant = (4 - id.leading_zeros() / 8) as usize;
            let immediate = id < 24;
            let width = if immediate {
                0
            } else {
                UINT_WIDTH[significant]
            };
            buf[pos] = if immediate {
                id as u8
            } else {
                UINT_HEAD[significant]
            };
            let payload = ((u64::from(id) << (32 - 8 * width)) as u32).to_be_bytes();
            buf[pos + 1..pos + 5].copy_from_slice(&payload);
            pos += 1 + width as usize;
        }
        out.extend_from_slice(&buf[..pos]);
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
