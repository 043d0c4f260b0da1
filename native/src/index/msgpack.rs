//! A small MessagePack reader over a borrowed buffer, with the checks msgspec applies.
//!
//! Typed reads (`int`, `str`, `array`, ...) consume the next value only when it has that type and
//! return `None` otherwise, so callers can report "expected X, got Y at PATH". `skip` walks any
//! value without recursion (an explicit stack, so a hostile nesting depth cannot overflow the
//! thread's stack) and, in [`Check::Any`] mode, applies what msgspec checks when it decodes a
//! value typed `Any`: valid UTF-8 strings, valid timestamp extensions, hashable map keys.

use crate::error::{Error, Result};

#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(all(test, target_arch = "x86_64"))]
mod differential_tests;

/// Containers nested deeper than this are refused (msgspec fails near Python's recursion limit).
pub(crate) const MAX_DEPTH: usize = 1000;
/// Seconds range of a Python `datetime` (years 1 to 9999), which a timestamp must fit.
const TIMESTAMP_MIN: i64 = -62_135_596_800;
const TIMESTAMP_MAX: i64 = 253_402_300_799;
const NANOS_MAX: u64 = 999_999_999;

/// The type of a MessagePack value, named as msgspec names it in errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Nil,
    Bool,
    Int,
    Float,
    Str,
    Bin,
    Array,
    Map,
    Ext,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Nil => "null",
            Kind::Bool => "bool",
            Kind::Int => "int",
            Kind::Float => "float",
            Kind::Str => "str",
            Kind::Bin => "bytes",
            Kind::Array => "array",
            Kind::Map => "object",
            Kind::Ext => "ext",
        }
    }

    /// The kind a marker byte starts (None: 0xc1, never used): one load from a table built at
    /// compile time, since a peek precedes nearly every read.
    #[inline(always)]
    fn of(marker: u8) -> Option<Kind> {
        KIND_OF[marker as usize]
    }

    const fn classify(marker: u8) -> Option<Kind> {
        Some(match marker {
            0x00..=0x7f | 0xcc..=0xd3 | 0xe0..=0xff => Kind::Int,
            0x80..=0x8f | 0xde | 0xdf => Kind::Map,
            0x90..=0x9f | 0xdc | 0xdd => Kind::Array,
            0xa0..=0xbf | 0xd9..=0xdb => Kind::Str,
            0xc0 => Kind::Nil,
            0xc2 | 0xc3 => Kind::Bool,
            0xc4..=0xc6 => Kind::Bin,
            0xc7..=0xc9 | 0xd4..=0xd8 => Kind::Ext,
            0xca | 0xcb => Kind::Float,
            0xc1 => return None,
        })
    }
}

static KIND_OF: [Option<Kind>; 256] = {
    let mut table = [None; 256];
    let mut marker = 0;
    while marker < 256 {
        table[marker] = Kind::classify(marker as u8);
        marker += 1;
    }
    table
};

/// What `skip` verifies besides well-formedness.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Structure only (a value msgspec keeps raw or ignores).
    WellFormed,
    /// Also what decoding into `Any` checks (see the module docs).
    Any,
}

/// The reader.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

pub(crate) fn malformed(what: impl std::fmt::Display) -> Error {
    Error::invalid_argument(format!("MessagePack data is malformed: {what}"))
}

// The error constructors are cold and out of line, so that the typed reads around them (called
// a few dozen times per event) inline into their callers.
#[cold]
#[inline(never)]
fn truncated() -> Error {
    Error::invalid_argument("input data was truncated")
}

#[cold]
#[inline(never)]
fn invalid_opcode(marker: u8, pos: usize) -> Error {
    malformed(format_args!(
        "invalid opcode '\\x{marker:02x}' (byte {pos})"
    ))
}

/// Byte positions one pre-pass of [`unsigned_run`] classifies: larger windows spread the cost
/// of starting one, smaller ones waste less past the end of a short list (an engine publishes
/// one block of 16 ids per block filled while decoding).
const WINDOW: usize = 256;
const SMALL_WINDOW: usize = 64;
/// Bytes a window reads past its last position: the widths of the id after a pair's first (at
/// most 5 on) and 4-byte reads of values ending there.
const WINDOW_SLACK: usize = 16;
/// Bytes a window reads before its first position: a value is read as the 4 bytes that end with
/// its last one (and masked), which for a fixint starts 3 bytes before it.
const WINDOW_BACK: usize = 4;
/// Bytes a window of `W` positions reads.
const fn span(w: usize) -> usize {
    WINDOW_BACK + w + WINDOW_SLACK
}
/// The mask of an unsigned id's value bits by its width (see [`unsigned_width`]).
const VALUE_MASK: [u32; 8] = [0, 0xff, 0xff, 0xffff, 0, u32::MAX, 0, 0];

/// Width in bytes of a msgpack positive fixint, uint8, uint16 or uint32 by its marker, 0 for any
/// other marker. Comparisons only, so a loop of it over bytes becomes vector code.
#[inline(always)]
fn unsigned_width(marker: u8) -> u8 {
    ((marker as i8 >= 0) as u8)
        | (((marker == 0xcc) as u8) * 2)
        | (((marker == 0xcd) as u8) * 3)
        | (((marker == 0xce) as u8) * 5)
}

/// The value of the unsigned id of width `width` that ends right before `end`.
#[inline(always)]
fn value_before<const N: usize>(bytes: &[u8; N], end: usize, width: usize) -> u32 {
    let word = u32::from_be_bytes(bytes[end - 4..end].try_into().expect("4 bytes"));
    word & VALUE_MASK[width & 7]
}

/// [`unsigned_run_portable`], in vector code where the CPU has it (checked once per process).
#[inline]
fn unsigned_run(buf: &[u8], pos: &mut usize, ids: &mut [u32]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if let Some(done) = avx512::unsigned_run(buf, pos, ids) {
        return done;
    }
    unsigned_run_portable(buf, pos, ids)
}

/// Reads the leading run of unsigned integers of at most 32 bits into `ids`, starting at
/// `*pos`; returns how many it read (the caller reads the rest, and anything else, the general
/// way).
///
/// Where each id starts is a serial chain (its start depends on the width of the one before),
/// which bounds the speed: a plain loop waits, per id, on a load of its marker and then on its
/// width. So a pre-pass over a window of bytes classifies every byte position as if an id
/// started there (independent work, vector code): `pair[p]` is the width of the id at `p` plus
/// that of the id after it, 0 unless both are unsigned ints of at most 32 bits. The chain is then
/// one small load and an add per two ids, and the values are read off it. An odd last id, and
/// any after one the windows stop at, go one at a time.
///
/// This is the portable form, and the reference the vector form ([`avx512`]) must equal.
#[inline]
fn unsigned_run_portable(buf: &[u8], pos: &mut usize, ids: &mut [u32]) -> usize {
    let mut at = *pos;
    let mut done = 0;
    while ids.len() - done >= 2 && at >= WINDOW_BACK && at < buf.len() {
        // Ids take at least 3 bytes in the main (151k-id) vocabularies.
        let (rel, whole) = if (ids.len() - done) * 3 >= WINDOW {
            unsigned_window::<WINDOW, { span(WINDOW) }>(buf, at, ids, &mut done)
        } else {
            unsigned_window::<SMALL_WINDOW, { span(SMALL_WINDOW) }>(buf, at, ids, &mut done)
        };
        at += rel;
        if !whole {
            break;
        }
    }
    let last = buf.len().saturating_sub(8);
    for slot in ids[done..].iter_mut() {
        if at > last || buf.len() < 8 {
            break;
        }
        let word = u64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"));
        let width = unsigned_width((word >> 56) as u8) as usize;
        if width == 0 {
            break;
        }
        // The value sits in the low bytes of the word's first `width`.
        *slot = (word >> (64 - 8 * width)) as u32 & VALUE_MASK[width];
        at += width;
        done += 1;
    }
    *pos = at;
    done
}

/// One window of `W` positions at `at` (`S` is [`span`]`(W)`): reads pairs of ids into
/// `ids[*done..]`; returns how far it went and whether it went through the whole window (else
/// what stopped it, or the last id, is for one-at-a-time reading).
#[inline(always)]
fn unsigned_window<const W: usize, const S: usize>(
    buf: &[u8],
    at: usize,
    ids: &mut [u32],
    done: &mut usize,
) -> (usize, bool) {
    let from = at - WINDOW_BACK;
    let rel = match buf.get(from..from + S) {
        Some(bytes) => {
            let bytes = bytes.try_into().expect("window");
            unsigned_pairs::<W, S>(bytes, S, ids, done)
        }
        None => {
            // The last bytes, padded with a marker that is never an id (width 0).
            let mut padded = [0xc1; S];
            let end = buf.len() - from;
            padded[..end].copy_from_slice(&buf[from..]);
            unsigned_pairs::<W, S>(&padded, end, ids, done)
        }
    };
    (rel, rel >= W)
}

/// The pairs of one window: `bytes` starts [`WINDOW_BACK`] before the window and holds data up
/// to `end` (the rest is padding). Reads pairs of ids into `ids[*done..]` while both are unsigned
/// ints of at most 32 bits that end by `end`; returns how far it went from the window's start.
#[inline(always)]
fn unsigned_pairs<const W: usize, const S: usize>(
    bytes: &[u8; S],
    end: usize,
    ids: &mut [u32],
    done: &mut usize,
) -> usize {
    const { assert!(S == span(W)) };
    // `width[WINDOW_BACK + p]` is the width of an id at `p`.
    let mut width = [0u8; S];
    for (w, &b) in width.iter_mut().zip(bytes) {
        *w = unsigned_width(b);
    }
    let mut pair = [0u8; W];
    for (p, slot) in pair.iter_mut().enumerate() {
        let at = WINDOW_BACK + p;
        let w = width[at];
        let next = ((w == 1) as u8 * width[at + 1])
            | ((w == 2) as u8 * width[at + 2])
            | ((w == 3) as u8 * width[at + 3])
            | ((w == 5) as u8 * width[at + 5]);
        *slot = if next == 0 { 0 } else { w + next };
    }
    let end = end - WINDOW_BACK;
    let mut rel = 0;
    while rel < W && ids.len() - *done >= 2 {
        // The chain: nothing else waits on `rel` but this load and add.
        let two = pair[rel] as usize;
        if two == 0 || rel + two > end {
            break;
        }
        let first = (width[WINDOW_BACK + rel] & 7) as usize;
        // Indices in `bytes` are WINDOW_BACK on: the first id ends at `rel + first`.
        ids[*done] = value_before(bytes, WINDOW_BACK + rel + first, first);
        ids[*done + 1] = value_before(bytes, WINDOW_BACK + rel + two, two - first);
        rel += two;
        *done += 2;
    }
    rel
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn seek(&mut self, pos: usize) {
        self.pos = pos;
    }

    pub fn is_done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(truncated)?;
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    #[inline]
    fn byte(&mut self) -> Result<u8> {
        let b = *self.buf.get(self.pos).ok_or_else(truncated)?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    fn be<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn be_len(&mut self, width: usize) -> Result<usize> {
        Ok(match width {
            1 => self.byte()? as usize,
            2 => u16::from_be_bytes(self.be()?) as usize,
            _ => u32::from_be_bytes(self.be()?) as usize,
        })
    }

    /// The type of the next value (an invalid marker or the end of input is an error).
    #[inline(always)]
    pub fn peek(&self) -> Result<Kind> {
        let marker = *self.buf.get(self.pos).ok_or_else(truncated)?;
        Kind::of(marker).ok_or_else(|| invalid_opcode(marker, self.pos))
    }

    /// Consumes a nil.
    #[inline]
    pub fn nil(&mut self) -> Result<bool> {
        if self.peek()? == Kind::Nil {
            self.pos += 1;
            return Ok(true);
        }
        Ok(false)
    }

    /// A bool; `None` (nothing consumed) for another type.
    #[inline]
    pub fn bool(&mut self) -> Result<Option<bool>> {
        match self.peek()? {
            Kind::Bool => Ok(Some(self.byte()? == 0xc3)),
            _ => Ok(None),
        }
    }

    /// An integer of either sign (as msgspec's `int`: not a bool, not a float).
    #[inline]
    pub fn int(&mut self) -> Result<Option<i128>> {
        let marker = *self.buf.get(self.pos).ok_or_else(truncated)?;
        let value = match marker {
            0x00..=0x7f => {
                self.pos += 1;
                return Ok(Some(marker as i128));
            }
            0xe0..=0xff => {
                self.pos += 1;
                return Ok(Some(marker as i8 as i128));
            }
            0xcc..=0xd3 => {
                self.pos += 1;
                match marker {
                    0xcc => self.byte()? as i128,
                    0xcd => u16::from_be_bytes(self.be()?) as i128,
                    0xce => u32::from_be_bytes(self.be()?) as i128,
                    0xcf => u64::from_be_bytes(self.be()?) as i128,
                    0xd0 => self.byte()? as i8 as i128,
                    0xd1 => i16::from_be_bytes(self.be()?) as i128,
                    0xd2 => i32::from_be_bytes(self.be()?) as i128,
                    _ => i64::from_be_bytes(self.be()?) as i128,
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(value))
    }

    /// An integer as its 64-bit two's complement pattern (what a published block hash means);
    /// `None` (nothing consumed) for another type.
    #[inline]
    pub fn int_bits(&mut self) -> Result<Option<u64>> {
        let buf = self.buf;
        let at = self.pos;
        let marker = *buf.get(at).ok_or_else(truncated)?;
        let (value, width) = match marker {
            0x00..=0x7f => (marker as u64, 1),
            0xe0..=0xff => (marker as i8 as i64 as u64, 1),
            0xcc..=0xce if at + 5 <= buf.len() => {
                // uint8/16/32 as in `u32_list`, without a branch on the width.
                let bytes = 1usize << (marker - 0xcc);
                let mut b = [0u8; 4];
                b.copy_from_slice(&buf[at + 1..at + 5]);
                (
                    (u32::from_be_bytes(b) >> (32 - 8 * bytes)) as u64,
                    1 + bytes,
                )
            }
            0xcf | 0xd3 if at + 9 <= buf.len() => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&buf[at + 1..at + 9]);
                (u64::from_be_bytes(b), 9)
            }
            _ => return Ok(self.int()?.map(|v| v as u64)),
        };
        self.pos = at + width;
        Ok(Some(value))
    }

    /// `n` array elements read as `u32` token ids into `out`. Returns the index of the first
    /// integer outside `u32` (pushed as 0), and `Err((index, kind))` for an element that is not
    /// an integer.
    pub fn u32_list(
        &mut self,
        n: usize,
        out: &mut Vec<u32>,
    ) -> Result<std::result::Result<Option<usize>, (usize, Kind)>> {
        self.u32_list_with(n, out, unsigned_run)
    }

    /// [`Reader::u32_list`] with the leading run read by `run` (tests pick the form).
    #[inline(always)]
    fn u32_list_with(
        &mut self,
        n: usize,
        out: &mut Vec<u32>,
        run: impl Fn(&[u8], &mut usize, &mut [u32]) -> usize,
    ) -> Result<std::result::Result<Option<usize>, (usize, Kind)>> {
        let buf = self.buf;
        let mut pos = self.pos;
        let mut wide = None;
        // Sized first and written in place: a push per id cost more than its decoding.
        let start = out.len();
        out.resize(start + n, 0);
        let ids = &mut out[start..];
        let done = run(buf, &mut pos, ids);
        for (i, slot) in ids.iter_mut().enumerate().skip(done) {
            if let Some(window) = buf.get(pos..pos + 5) {
                let marker = window[0];
                if marker < 0x80 {
                    *slot = marker as u32;
                    pos += 1;
                    continue;
                }
                if (0xcc..=0xce).contains(&marker) {
                    // uint8/16/32 without a branch on which: token ids of one vocabulary mix
                    // widths at random, and a branch per width would be mispredicted half the
                    // time.
                    let bytes = 1usize << (marker - 0xcc);
                    let word = u32::from_be_bytes([window[1], window[2], window[3], window[4]]);
                    *slot = word >> (32 - 8 * bytes);
                    pos += 1 + bytes;
                    continue;
                }
            }
            self.pos = pos;
            let kind = self.peek()?;
            match self.int()? {
                Some(v) => match u32::try_from(v) {
                    Ok(t) => *slot = t,
                    Err(_) => {
                        wide.get_or_insert(i);
                    }
                },
                None => return Ok(Err((i, kind))),
            }
            pos = self.pos;
        }
        self.pos = pos;
        Ok(Ok(wide))
    }

    /// A float, or an integer read as one (msgspec's `float` accepts both).
    pub fn float(&mut self) -> Result<Option<f64>> {
        match self.peek()? {
            Kind::Float => {
                let marker = self.byte()?;
                Ok(Some(if marker == 0xca {
                    f32::from_be_bytes(self.be()?) as f64
                } else {
                    f64::from_be_bytes(self.be()?)
                }))
            }
            Kind::Int => Ok(self.int()?.map(|v| v as f64)),
            _ => Ok(None),
        }
    }

    /// The raw bytes of a string (not checked for UTF-8: see [`Reader::text`]).
    #[inline]
    pub fn str_bytes(&mut self) -> Result<Option<&'a [u8]>> {
        let marker = *self.buf.get(self.pos).ok_or_else(truncated)?;
        let len = match marker {
            0xa0..=0xbf => {
                self.pos += 1;
                (marker & 0x1f) as usize
            }
            0xd9..=0xdb => {
                self.pos += 1;
                self.be_len(1 << (marker - 0xd9))?
            }
            _ => return Ok(None),
        };
        self.take(len).map(Some)
    }

    /// A string, checked for UTF-8.
    pub fn text(&mut self) -> Result<Option<&'a str>> {
        match self.str_bytes()? {
            None => Ok(None),
            Some(bytes) => std::str::from_utf8(bytes)
                .map(Some)
                .map_err(|_| Error::invalid_argument("invalid UTF-8 encoded string")),
        }
    }

    /// A byte string.
    pub fn bin(&mut self) -> Result<Option<&'a [u8]>> {
        let marker = *self.buf.get(self.pos).ok_or_else(truncated)?;
        if !(0xc4..=0xc6).contains(&marker) {
            return Ok(None);
        }
        self.pos += 1;
        let len = self.be_len(1 << (marker - 0xc4))?;
        self.take(len).map(Some)
    }

    /// An array header: the element count.
    #[inline]
    pub fn array(&mut self) -> Result<Option<usize>> {
        self.container(0x90, 0xdc)
    }

    /// A map header: the pair count.
    pub fn map(&mut self) -> Result<Option<usize>> {
        self.container(0x80, 0xde)
    }

    fn container(&mut self, fix: u8, wide: u8) -> Result<Option<usize>> {
        let marker = *self.buf.get(self.pos).ok_or_else(truncated)?;
        let len = if marker & 0xf0 == fix {
            self.pos += 1;
            (marker & 0x0f) as usize
        } else if marker == wide || marker == wide + 1 {
            self.pos += 1;
            self.be_len(if marker == wide { 2 } else { 4 })?
        } else {
            return Ok(None);
        };
        // Every element takes at least one byte: a count beyond the input is a truncation, and
        // refusing it here keeps callers from reserving memory for a lie.
        if len > self.buf.len() - self.pos {
            return Err(truncated());
        }
        Ok(Some(len))
    }

    /// Skips one value (see [`Check`]).
    pub fn skip(&mut self, check: Check) -> Result<()> {
        let any = check == Check::Any;
        // (values left, inside a map, inside a map key)
        let mut stack: Vec<(usize, bool, bool)> = Vec::new();
        let mut in_key = false;
        loop {
            self.skip_one(any, in_key, &mut stack)?;
            loop {
                match stack.last_mut() {
                    None => return Ok(()),
                    Some(top) if top.0 == 0 => {
                        stack.pop();
                    }
                    Some(top) => {
                        // In a map, values alternate key, value: a key comes when an even
                        // number of values is left.
                        in_key = top.2 || (top.1 && top.0 % 2 == 0);
                        top.0 -= 1;
                        break;
                    }
                }
            }
        }
    }

    fn skip_one(
        &mut self,
        any: bool,
        in_key: bool,
        stack: &mut Vec<(usize, bool, bool)>,
    ) -> Result<()> {
        let at = self.pos;
        let kind = self.peek()?;
        match kind {
            Kind::Array | Kind::Map => {
                let is_map = kind == Kind::Map;
                let n = if is_map { self.map()? } else { self.array()? }.unwrap_or(0);
                if any && is_map && in_key {
                    return Err(malformed(format_args!(
                        "map keys must be hashable (byte {at})"
                    )));
                }
                if n > 0 {
                    if stack.len() >= MAX_DEPTH {
                        return Err(malformed(format_args!("nested deeper than {MAX_DEPTH}")));
                    }
                    stack.push((if is_map { 2 * n } else { n }, is_map, in_key));
                }
            }
            Kind::Str => {
                let bytes = self.str_bytes()?.unwrap_or_default();
                if any && std::str::from_utf8(bytes).is_err() {
                    return Err(Error::invalid_argument("invalid UTF-8 encoded string"));
                }
            }
            Kind::Bin => {
                self.bin()?;
            }
            Kind::Ext => self.skip_ext(any, in_key, at)?,
            Kind::Nil | Kind::Bool => self.pos += 1,
            Kind::Int => {
                self.int()?;
            }
            Kind::Float => {
                self.float()?;
            }
        }
        Ok(())
    }

    fn skip_ext(&mut self, any: bool, in_key: bool, at: usize) -> Result<()> {
        let marker = self.byte()?;
        let len = match marker {
            0xd4..=0xd8 => 1usize << (marker - 0xd4),
            0xc7 => self.be_len(1)?,
            0xc8 => self.be_len(2)?,
            _ => self.be_len(4)?,
        };
        let ext_type = self.byte()? as i8;
        let data = self.take(len)?;
        if !any {
            return Ok(());
        }
        if ext_type == -1 {
            return check_timestamp(data);
        }
        if in_key {
            return Err(malformed(format_args!(
                "map keys must be hashable (byte {at})"
            )));
        }
        Ok(())
    }
}

/// The MessagePack timestamp extension, as msgspec validates it when decoding a `datetime`.
fn check_timestamp(data: &[u8]) -> Result<()> {
    let invalid = || Error::invalid_argument("invalid MessagePack timestamp");
    let nanos_out_of_range =
        || Error::invalid_argument("invalid MessagePack timestamp: nanoseconds out of range");
    match data.len() {
        4 => Ok(()),
        8 => {
            let v = u64::from_be_bytes(data.try_into().map_err(|_| invalid())?);
            if v >> 34 > NANOS_MAX {
                return Err(nanos_out_of_range());
            }
            Ok(())
        }
        12 => {
            let nanos = u32::from_be_bytes(data[..4].try_into().map_err(|_| invalid())?);
            let secs = i64::from_be_bytes(data[4..].try_into().map_err(|_| invalid())?);
            if nanos as u64 > NANOS_MAX {
                return Err(nanos_out_of_range());
            }
            if !(TIMESTAMP_MIN..=TIMESTAMP_MAX).contains(&secs) {
                return Err(Error::invalid_argument("timestamp is out of range"));
            }
            Ok(())
        }
        _ => Err(invalid()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::Rng;

    /// One integer in a random one of the encodings that can hold it.
    fn encode(out: &mut Vec<u8>, v: i64, choice: u64) {
        let u = v as u64;
        match choice % 6 {
            0 if (0..0x80).contains(&v) => out.push(v as u8),
            1 if (0..0x100).contains(&v) => out.extend([0xcc, v as u8]),
            2 if (0..0x1_0000).contains(&v) => {
                out.push(0xcd);
                out.extend((v as u16).to_be_bytes());
            }
            3 if (0..0x1_0000_0000).contains(&v) => {
                out.push(0xce);
                out.extend((v as u32).to_be_bytes());
            }
            4 if v >= 0 => {
                out.push(0xcf);
                out.extend(u.to_be_bytes());
            }
            _ => {
                out.push(0xd3);
                out.extend(v.to_be_bytes());
            }
        }
    }

    #[test]
    fn u32_list_reads_every_width_like_int() {
        let mut rng = Rng(0x9e37_79b9_u64);
        for round in 0..2000 {
            let n = (rng.next() % 40) as usize;
            let mut buf = Vec::new();
            let mut values = Vec::new();
            for _ in 0..n {
                let v = match rng.next() % 8 {
                    0 => (rng.next() % 0x80) as i64,
                    1 => (rng.next() % 0x100) as i64,
                    2 => (rng.next() % 0x1_0000) as i64,
                    3 | 4 => (rng.next() % 0x1_0000_0000) as i64,
                    5 if round % 4 == 0 => (rng.next() >> 1) as i64,
                    6 if round % 4 == 1 => -((rng.next() % 1000) as i64) - 1,
                    _ => (rng.next() % 151_000) as i64,
                };
                encode(&mut buf, v, rng.next());
                values.push(v);
            }
            // Sometimes a value that is no integer, and trailing bytes or none.
            let bad = round % 7 == 0 && n > 0;
            let bad_at = if bad {
                (rng.next() % n as u64) as usize
            } else {
                n
            };
            if bad {
                let mut again = Vec::new();
                let mut r = Reader::new(&buf);
                for (i, _) in values.iter().enumerate() {
                    let from = r.pos;
                    r.int().unwrap();
                    if i == bad_at {
                        again.push(0xc3);
                    } else {
                        again.extend_from_slice(&buf[from..r.pos]);
                    }
                }
                buf = again;
            }
            let end = buf.len();
            buf.extend(std::iter::repeat_n(0xc0, (rng.next() % 3) as usize));
            let mut reader = Reader::new(&buf);
            let mut out = vec![7];
            let got = reader.u32_list(n, &mut out).unwrap();
            if bad {
                assert_eq!(got, Err((bad_at, Kind::Bool)));
                continue;
            }
            let wide = values.iter().position(|&v| u32::try_from(v).is_err());
            assert_eq!(got, Ok(wide), "round {round}");
            for (i, &v) in values.iter().enumerate() {
                if let Ok(t) = u32::try_from(v) {
                    assert_eq!(out[1 + i], t, "round {round} index {i}");
                }
            }
            assert_eq!(out[0], 7);
            assert_eq!(reader.pos, end);
        }
    }

    /// An unsigned integer of at most 32 bits as a fixint, uint8, uint16 or uint32: a random one
    /// of those that can hold it.
    pub(super) fn encode_unsigned(out: &mut Vec<u8>, v: u64, choice: u64) {
        let smallest = [0x80, 0x100, 0x1_0000].iter().filter(|&&m| v >= m).count();
        match smallest.max((choice % 4) as usize) {
            0 => out.push(v as u8),
            1 => out.extend([0xcc, v as u8]),
            2 => {
                out.push(0xcd);
                out.extend((v as u16).to_be_bytes());
            }
            _ => {
                out.push(0xce);
                out.extend((v as u32).to_be_bytes());
            }
        }
    }

    /// What `u32_list` answers, the values it read and where it stopped.
    type ListRead = (
        std::result::Result<Option<usize>, (usize, Kind)>,
        Vec<u32>,
        usize,
    );

    /// `u32_list` the general way: `int` per element.
    fn u32_list_by_int(buf: &[u8], from: usize, n: usize) -> Result<ListRead> {
        let mut r = Reader::new(buf);
        r.seek(from);
        let mut out = Vec::new();
        let mut wide = None;
        for i in 0..n {
            let kind = r.peek()?;
            match r.int()? {
                Some(v) => {
                    out.push(u32::try_from(v).unwrap_or(0));
                    if u32::try_from(v).is_err() {
                        wide.get_or_insert(i);
                    }
                }
                None => return Ok((Err((i, kind)), out, r.pos)),
            }
        }
        Ok((Ok(wide), out, r.pos))
    }

    #[test]
    fn u32_list_equals_int_per_element_at_every_cut() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d_u64);
        for round in 0..300 {
            // Long runs (the windowed reader needs some 80 bytes), with every width of unsigned
            // id, and now and then something the general path reads.
            let n = (rng.next() % 160) as usize;
            let odd_rate = [0, 50, 8][round % 3];
            // The list starts after some other values, or at the very start.
            let from = (rng.next() % 7) as usize;
            let mut buf = vec![0xc0; from];
            for _ in 0..n {
                if odd_rate > 0 && rng.next().is_multiple_of(odd_rate) {
                    match rng.next() % 5 {
                        0 => encode(&mut buf, (rng.next() >> 1) as i64, rng.next()),
                        1 => encode(&mut buf, -((rng.next() % 100_000) as i64) - 1, rng.next()),
                        2 => buf.extend([0xcb, 0, 0, 0, 0, 0, 0, 0, 0]),
                        3 => buf.push(0xc3),
                        _ => encode(&mut buf, (rng.next() % 0x80) as i64, 5),
                    }
                    continue;
                }
                let v = match rng.next() % 5 {
                    0 => rng.next() % 0x80,
                    1 => rng.next() % 0x100,
                    2 => rng.next() % 0x1_0000,
                    3 => rng.next() % 0x1_0000_0000,
                    _ => rng.next() % 151_000,
                };
                encode_unsigned(&mut buf, v, rng.next());
            }
            // Cut at every length, the whole buffer included (no slack after the last id).
            let every = if round % 10 == 0 {
                1
            } else {
                1 + buf.len() / 8
            };
            for cut in (from..=buf.len()).rev().step_by(every) {
                let part = &buf[..cut];
                let expected = u32_list_by_int(part, from, n);
                let mut reader = Reader::new(part);
                reader.seek(from);
                let mut out = vec![9];
                let got = reader.u32_list(n, &mut out);
                match expected {
                    Err(e) => assert_eq!(got, Err(e), "round {round} cut {cut}"),
                    Ok((result, values, end)) => {
                        assert_eq!(got, Ok(result), "round {round} cut {cut}");
                        if let Err((i, _)) = result {
                            assert_eq!(out[1..1 + i], values[..i], "round {round} cut {cut}");
                            continue;
                        }
                        assert_eq!(out[1..], values[..], "round {round} cut {cut}");
                        assert_eq!(reader.pos, end, "round {round} cut {cut}");
                    }
                }
            }
        }
    }
}
