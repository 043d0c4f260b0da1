//! Protobuf wire-format primitives for the hand-written codecs: a bounds-checked reader and the
//! few writers they need.

use crate::error::{Error, Result};

/// Wire type of varint fields.
pub(crate) const VARINT: u64 = 0;
/// Wire type of length-delimited fields (strings, bytes, messages, packed repeated scalars).
pub(crate) const LEN: u64 = 2;

/// Reads one message's fields from a buffer; errors name `what` (the message being read).
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }

    pub(crate) fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// Where the next field starts (a field's raw bytes are the buffer between two positions).
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// The next field's (number, wire type).
    pub(crate) fn key(&mut self) -> Result<(u64, u64)> {
        let key = self.varint()?;
        Ok((key >> 3, key & 7))
    }

    pub(crate) fn varint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos).ok_or_else(|| self.truncated())?;
            self.pos += 1;
            // The tenth byte holds bit 63 alone: more would be silently dropped (prost refuses it).
            if shift == 63 && b > 1 {
                return Err(self.malformed("varint overflows 64 bits"));
            }
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.malformed("varint too long"))
    }

    /// A varint as protobuf's own parser reads it: a tenth byte above 1 is accepted and its extra
    /// bits dropped (`varint` refuses it). The flag says whether bits were dropped.
    pub(crate) fn varint_truncating(&mut self) -> Result<(u64, bool)> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos).ok_or_else(|| self.truncated())?;
            self.pos += 1;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok((value, shift == 63 && b > 1));
            }
        }
        Err(self.malformed("varint too long"))
    }

    pub(crate) fn bytes(&mut self) -> Result<&'a [u8]> {
        let len = usize::try_from(self.varint()?).map_err(|_| self.truncated())?;
        let end = self
            .pos
            .checked_add(len)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| self.truncated())?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// A length-delimited UTF-8 string; `field` names it in the error.
    pub(crate) fn str(&mut self, field: &str) -> Result<&'a str> {
        std::str::from_utf8(self.bytes()?)
            .map_err(|_| Error::invalid_argument(format!("{field}: not valid UTF-8")))
    }

    /// Skips field `field` of wire type `wire`, which this reader does not use (unknown fields are
    /// allowed, as in protobuf, including groups: deprecated wire types 3 and 4, still valid there).
    pub(crate) fn skip(&mut self, field: u64, wire: u64) -> Result<()> {
        match wire {
            3 => self.skip_group(field),
            4 => Err(self.malformed("end of a group that was not started")),
            _ => self.skip_value(wire),
        }
    }

    fn skip_value(&mut self, wire: u64) -> Result<()> {
        match wire {
            VARINT => {
                self.varint()?;
            }
            1 => self.pos += 8,
            LEN => {
                self.bytes()?;
            }
            5 => self.pos += 4,
            _ => return Err(self.malformed(&format!("wire type {wire}"))),
        }
        if self.pos > self.buf.len() {
            return Err(self.truncated());
        }
        Ok(())
    }

    /// Skips a group up to its end tag, nested groups included; a stack, not recursion, so a deep
    /// nesting costs no call stack.
    fn skip_group(&mut self, field: u64) -> Result<()> {
        let mut open = vec![field];
        while let Some(&top) = open.last() {
            let (inner, wire) = self.key()?;
            match wire {
                3 => open.push(inner),
                4 if inner == top => {
                    open.pop();
                }
                4 => return Err(self.malformed("a group ends with another field's tag")),
                _ => self.skip_value(wire)?,
            }
        }
        Ok(())
    }

    fn truncated(&self) -> Error {
        self.malformed("truncated")
    }

    fn malformed(&self, why: &str) -> Error {
        Error::invalid_argument(format!("malformed {}: {why}", self.what))
    }
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes `v` takes as a varint.
pub(crate) fn varint_len(v: u64) -> usize {
    // 1 byte per started group of 7 bits, at least one.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

pub(crate) fn put_key(out: &mut Vec<u8>, field: u64, wire: u64) {
    put_varint(out, field << 3 | wire);
}

/// A string or bytes field; left out when empty (proto3).
pub(crate) fn put_bytes(out: &mut Vec<u8>, field: u64, b: &[u8]) {
    if b.is_empty() {
        return;
    }
    put_key(out, field, LEN);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// An unsigned or bool field; left out when zero (proto3).
pub(crate) fn put_uint(out: &mut Vec<u8>, field: u64, v: u64) {
    if v == 0 {
        return;
    }
    put_key(out, field, VARINT);
    put_varint(out, v);
}

/// A packed `repeated uint32` field; left out when empty. A prompt's ids are the bulk of a
/// `RenderResponse`, so the body is written in place with room for the longest length prefix and
/// moved back over the unused prefix bytes once its length is known (no separate sizing pass).
pub(crate) fn put_packed(out: &mut Vec<u8>, field: u64, values: &[u32]) {
    if values.is_empty() {
        return;
    }
    put_key(out, field, LEN);
    let prefix_at = out.len();
    // A u32 varint takes at most 5 bytes; the body is at most 5 bytes per value.
    let body_room = 5 * values.len();
    let max_prefix = varint_len(body_room as u64);
    out.resize(prefix_at + max_prefix + body_room, 0);
    let body = &mut out[prefix_at + max_prefix..];
    let mut len = 0;
    for &v in values {
        let slot: &mut [u8; 5] = (&mut body[len..len + 5]).try_into().expect("room for 5");
        len += write_varint32(slot, v);
    }
    let mut prefix = [0u8; 10];
    let prefix_len = write_varint64(&mut prefix, len as u64);
    out[prefix_at..prefix_at + prefix_len].copy_from_slice(&prefix[..prefix_len]);
    let body_at = prefix_at + max_prefix;
    out.copy_within(body_at..body_at + len, prefix_at + prefix_len);
    out.truncate(prefix_at + prefix_len + len);
}

/// Writes `v` as a varint into `slot` and returns its length (token ids and offsets are mostly
/// under 2^21: three bytes or fewer).
fn write_varint32(slot: &mut [u8; 5], v: u32) -> usize {
    if v < 1 << 7 {
        slot[0] = v as u8;
        1
    } else if v < 1 << 14 {
        slot[0] = v as u8 | 0x80;
        slot[1] = (v >> 7) as u8;
        2
    } else if v < 1 << 21 {
        slot[0] = v as u8 | 0x80;
        slot[1] = (v >> 7) as u8 | 0x80;
        slot[2] = (v >> 14) as u8;
        3
    } else {
        let mut wide = [0u8; 10];
        let n = write_varint64(&mut wide, u64::from(v));
        slot[..n].copy_from_slice(&wide[..n]);
        n
    }
}

fn write_varint64(buf: &mut [u8; 10], mut v: u64) -> usize {
    let mut n = 0;
    while v >= 0x80 {
        buf[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    buf[n] = v as u8;
    n + 1
}

/// A nested message field: `body` writes the message into `out`, whose length prefix is patched in
/// afterwards (no buffer per nested message). The prefix is reserved as one byte and the body
/// moved when it turns out longer than 127 bytes.
pub(crate) fn put_message(out: &mut Vec<u8>, field: u64, body: impl FnOnce(&mut Vec<u8>)) {
    put_key(out, field, LEN);
    let at = out.len();
    out.push(0);
    body(out);
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
        return;
    }
    let mut prefix = Vec::with_capacity(varint_len(len as u64));
    put_varint(&mut prefix, len as u64);
    out.splice(at..=at, prefix);
}
