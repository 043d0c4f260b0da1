//! The bytes CPython's C pickler writes for `pickle.dumps(obj, protocol=5)`, for the value shapes
//! vLLM hashes: `(parent_digest, tuple_of_token_ids, extra_keys)` and the NONE_HASH seed string.
//!
//! vLLM's default block hash is SHA-256 over these bytes, so a non-Python caller must reproduce
//! them exactly, including three details that are easy to miss:
//! - Framing (protocol >= 4): the pickle is cut into frames of at least 64 KiB. The C pickler
//!   checks the frame size at the *start* of saving each object, so a tuple's closing opcode stays
//!   in the frame of its last element; a frame shorter than 4 bytes is written without a header;
//!   a str/bytes payload of 64 KiB or more is written outside any frame.
//! - The memo: every str, bytes and non-empty tuple is followed by MEMOIZE, and a second
//!   occurrence of the *same object* becomes a BINGET. Objects are the same when CPython shares
//!   them: the tag literals of vLLM's extra keys (`"mm"`, `"lora"`, ...) are interned constants,
//!   and the empty string and one-character Latin-1 strings are singletons. Other strings built at
//!   run time are distinct objects even when equal, so they are written again.
//! - Integers use the smallest of BININT1 / BININT2 / BININT / LONG1.

use super::value::Value;

const FRAME_SIZE_TARGET: usize = 64 * 1024;
const FRAME_SIZE_MIN: usize = 4;
const FRAME_HEADER_SIZE: usize = 9;
/// The longest pickle of a token id: LONG1, its length, and 5 bytes for ids of 2^31 and above.
const MAX_TOKEN_BYTES: usize = 7;

const PROTO: u8 = 0x80;
const FRAME: u8 = 0x95;
const STOP: u8 = b'.';
const NONE: u8 = b'N';
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const BININT: u8 = b'J';
const LONG1: u8 = 0x8a;
const SHORT_BINBYTES: u8 = b'C';
const BINBYTES: u8 = b'B';
const BINBYTES8: u8 = 0x8e;
const SHORT_BINUNICODE: u8 = 0x8c;
const BINUNICODE: u8 = b'X';
const BINUNICODE8: u8 = 0x8d;
const EMPTY_TUPLE: u8 = b')';
const MARK: u8 = b'(';
const TUPLE: u8 = b't';
const TUPLE1: u8 = 0x85;
const TUPLE2: u8 = 0x86;
const TUPLE3: u8 = 0x87;
const MEMOIZE: u8 = 0x94;
const BINGET: u8 = b'h';
const LONG_BINGET: u8 = b'j';

/// Appends `pickle.dumps(value, protocol=5)` to `out` (which may hold other data before).
pub fn dumps_into(value: &Value<'_>, out: &mut Vec<u8>) {
    let mut p = Pickler::start(out);
    p.save(value);
    p.finish();
}

/// Appends `pickle.dumps((parent, tuple(tokens), extra), protocol=5)` to `out`: vLLM's block tuple,
/// without building a `Value` for it (this is the hot path of block hashing).
pub fn dumps_block_into(parent: &[u8], tokens: &[u32], extra: &Value<'_>, out: &mut Vec<u8>) {
    if *extra == Value::None
        && parent.len() < 256
        && !tokens.is_empty()
        && MAX_TOKEN_BYTES * tokens.len() + 64 < FRAME_SIZE_TARGET
    {
        dumps_plain_block_into(parent, tokens, out);
        return;
    }
    let mut p = Pickler::start(out);
    p.boundary();
    p.save(&Value::Bytes(parent));
    p.boundary();
    p.save_tokens(tokens);
    p.save(extra);
    p.write(&[TUPLE3]);
    p.memoize();
    p.finish();
}

/// The common case of [`dumps_block_into`]: no extra keys and one frame, written straight out
/// (memo: parent 0, tokens 1, outer tuple 2).
fn dumps_plain_block_into(parent: &[u8], tokens: &[u32], out: &mut Vec<u8>) {
    out.reserve(32 + parent.len() + MAX_TOKEN_BYTES * tokens.len());
    let base = out.len();
    out.extend_from_slice(&[
        PROTO,
        5,
        FRAME,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        SHORT_BINBYTES,
        parent.len() as u8,
    ]);
    out.extend_from_slice(parent);
    out.push(MEMOIZE);
    let short = tokens.len() <= 3;
    if !short {
        out.push(MARK);
    }
    extend_u32_ints(out, tokens);
    out.push(if short {
        [TUPLE1, TUPLE2, TUPLE3][tokens.len() - 1]
    } else {
        TUPLE
    });
    out.extend_from_slice(&[MEMOIZE, NONE, TUPLE3, MEMOIZE, STOP]);
    let frame_len = (out.len() - base - 2 - FRAME_HEADER_SIZE) as u64;
    out[base + 3..base + 3 + 8].copy_from_slice(&frame_len.to_le_bytes());
}

/// `pickle.dumps(value, protocol=5)`.
pub fn dumps(value: &Value<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    dumps_into(value, &mut out);
    out
}

struct Pickler<'o, 'v> {
    out: &'o mut Vec<u8>,
    /// Where the current frame's 9-byte header was reserved; None between frames.
    frame_start: Option<usize>,
    framing: bool,
    /// Number of memo entries so far (the next MEMOIZE gets this index).
    memo_len: u32,
    /// Memo indices of the strings CPython shares between occurrences (see module docs).
    shared: Vec<(&'v str, u32)>,
}

impl<'o, 'v> Pickler<'o, 'v> {
    /// Starts a protocol-5 pickle at the end of `out`: the header, then framed opcodes.
    fn start(out: &'o mut Vec<u8>) -> Self {
        out.extend_from_slice(&[PROTO, 5]);
        Pickler {
            out,
            frame_start: None,
            framing: true,
            memo_len: 0,
            shared: Vec::new(),
        }
    }

    /// Ends the pickle: STOP, and the last frame's header filled in.
    fn finish(mut self) {
        self.write(&[STOP]);
        self.commit_frame();
    }

    fn write(&mut self, bytes: &[u8]) {
        if self.framing && self.frame_start.is_none() {
            self.frame_start = Some(self.out.len());
            self.out.extend_from_slice(&[0; FRAME_HEADER_SIZE]);
        }
        self.out.extend_from_slice(bytes);
    }

    fn commit_frame(&mut self) {
        let Some(start) = self.frame_start.take() else {
            return;
        };
        let len = self.out.len() - start - FRAME_HEADER_SIZE;
        if len >= FRAME_SIZE_MIN {
            self.out[start] = FRAME;
            self.out[start + 1..start + FRAME_HEADER_SIZE]
                .copy_from_slice(&(len as u64).to_le_bytes());
        } else {
            self.out.drain(start..start + FRAME_HEADER_SIZE);
        }
    }

    /// The C pickler's opcode boundary: a full frame is committed before the next object starts.
    fn boundary(&mut self) {
        if let Some(start) = self.frame_start {
            if self.out.len() - start - FRAME_HEADER_SIZE >= FRAME_SIZE_TARGET {
                self.commit_frame();
            }
        }
    }

    fn memoize(&mut self) -> u32 {
        self.write(&[MEMOIZE]);
        self.memo_len += 1;
        self.memo_len - 1
    }

    fn save(&mut self, value: &Value<'v>) {
        self.boundary();
        match value {
            Value::None => self.write(&[NONE]),
            Value::Int(x) => self.save_int(*x),
            Value::Bytes(b) => {
                self.save_bytes_like(b, SHORT_BINBYTES, BINBYTES, BINBYTES8);
                self.memoize();
            }
            Value::Str(s) => self.save_str(s, is_singleton_str(s)),
            Value::Tag(s) => self.save_str(s, true),
            Value::Tokens(ids) => self.save_tokens(ids),
            Value::Tuple(items) => {
                if items.is_empty() {
                    self.write(&[EMPTY_TUPLE]);
                    return;
                }
                if items.len() <= 3 {
                    for item in items {
                        self.save(item);
                    }
                    self.write(&[[TUPLE1, TUPLE2, TUPLE3][items.len() - 1]]);
                } else {
                    self.write(&[MARK]);
                    for item in items {
                        self.save(item);
                    }
                    self.write(&[TUPLE]);
                }
                self.memoize();
            }
        }
    }

    fn save_int(&mut self, x: i64) {
        if (0..=0xff).contains(&x) {
            self.write(&[BININT1, x as u8]);
        } else if (0..=0xffff).contains(&x) {
            let b = (x as u16).to_le_bytes();
            self.write(&[BININT2, b[0], b[1]]);
        } else if (i32::MIN as i64..=i32::MAX as i64).contains(&x) {
            let b = (x as i32).to_le_bytes();
            self.write(&[BININT, b[0], b[1], b[2], b[3]]);
        } else {
            // LONG1: little-endian two's complement, as few bytes as keep the sign.
            let bytes = x.to_le_bytes();
            let mut n = 8;
            while n > 1 {
                let top = bytes[n - 1];
                let next_sign = bytes[n - 2] & 0x80;
                if (top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0) {
                    n -= 1;
                } else {
                    break;
                }
            }
            let mut buf = [0u8; 10];
            buf[0] = LONG1;
            buf[1] = n as u8;
            buf[2..2 + n].copy_from_slice(&bytes[..n]);
            self.write(&buf[..2 + n]);
        }
    }

    fn save_tokens(&mut self, ids: &[u32]) {
        // A tuple of ints; ints are never memoized, so only the tuple itself is.
        if ids.is_empty() {
            self.write(&[EMPTY_TUPLE]);
            return;
        }
        let short = ids.len() <= 3;
        if !short {
            self.write(&[MARK]);
        }
        let frame_len = self
            .frame_start
            .map_or(0, |start| self.out.len() - start - FRAME_HEADER_SIZE);
        if self.frame_start.is_some() && frame_len + MAX_TOKEN_BYTES * ids.len() < FRAME_SIZE_TARGET
        {
            // No frame can fill up inside this tuple: skip the per-element boundary checks.
            extend_u32_ints(self.out, ids);
        } else {
            for &id in ids {
                self.boundary();
                self.save_int(i64::from(id));
            }
        }
        if short {
            self.write(&[[TUPLE1, TUPLE2, TUPLE3][ids.len() - 1]]);
        } else {
            self.write(&[TUPLE]);
        }
        self.memoize();
    }

    fn save_str(&mut self, s: &'v str, shared: bool) {
        if shared {
            if let Some(&(_, index)) = self.shared.iter().find(|(t, _)| *t == s) {
                if index < 256 {
                    self.write(&[BINGET, index as u8]);
                } else {
                    let b = index.to_le_bytes();
                    self.write(&[LONG_BINGET, b[0], b[1], b[2], b[3]]);
                }
                return;
            }
        }
        self.save_bytes_like(s.as_bytes(), SHORT_BINUNICODE, BINUNICODE, BINUNICODE8);
        let index = self.memoize();
        if shared {
            self.shared.push((s, index));
        }
    }

    fn save_bytes_like(&mut self, data: &[u8], short: u8, medium: u8, long: u8) {
        let mut header = [0u8; 9];
        let header_len = if data.len() < 256 {
            header[0] = short;
            header[1] = data.len() as u8;
            2
        } else if data.len() <= u32::MAX as usize {
            header[0] = medium;
            header[1..5].copy_from_slice(&(data.len() as u32).to_le_bytes());
            5
        } else {
            header[0] = long;
            header[1..9].copy_from_slice(&(data.len() as u64).to_le_bytes());
            9
        };
        if data.len() >= FRAME_SIZE_TARGET && self.framing {
            // Large payloads bypass framing: the current frame is closed and the header and data
            // are written unframed.
            self.commit_frame();
            self.framing = false;
            self.write(&header[..header_len]);
            self.write(data);
            self.framing = true;
        } else {
            self.write(&header[..header_len]);
            self.write(data);
        }
    }
}

/// Opcode and payload width of a token id by its number of significant bytes (0..=4).
const INT_OPCODE: [u8; 5] = [BININT1, BININT1, BININT2, BININT, BININT];
const INT_WIDTH: [usize; 5] = [1, 1, 2, 4, 4];

/// Appends each id as CPython pickles an int (BININT1 / BININT2 / BININT, LONG1 above i32::MAX).
///
/// Token ids are effectively random, so choosing the width with branches mispredicts about every
/// other id, and that was most of the cost of pickling a block. Here the width comes from a table
/// indexed by the id's significant bytes: every id writes its opcode and four bytes into a stack
/// chunk and advances by the width it needs.
fn extend_u32_ints(out: &mut Vec<u8>, ids: &[u32]) {
    const CHUNK: usize = 64;
    let mut buf = [0u8; CHUNK * MAX_TOKEN_BYTES];
    for chunk in ids.chunks(CHUNK) {
        let mut pos = 0;
        for &id in chunk {
            let b = id.to_le_bytes();
            if id > i32::MAX as u32 {
                // LONG1 with 5 bytes: the value needs a zero sign byte above its 32 bits.
                buf[pos..pos + 7].copy_from_slice(&[LONG1, 5, b[0], b[1], b[2], b[3], 0]);
                pos += 7;
                continue;
            }
            let significant = (4 - id.leading_zeros() / 8) as usize;
            buf[pos] = INT_OPCODE[significant];
            buf[pos + 1..pos + 5].copy_from_slice(&b);
            pos += 1 + INT_WIDTH[significant];
        }
        out.extend_from_slice(&buf[..pos]);
    }
}

/// Run-time strings CPython nevertheless shares (see module docs): the empty string and
/// one-character Latin-1 strings are singletons.
fn is_singleton_str(s: &str) -> bool {
    let mut chars = s.chars();
    match (chars.next(), chars.next()) {
        (None, _) => true,
        (Some(c), None) => (c as u32) < 256,
        _ => false,
    }
}
