//! The protobuf wire format of the ParseStream messages the native core reads and writes, so a
//! decode step crosses the FFI as one buffer each way (no per-request Python objects).
//!
//! Reads `ParseStreamRequest` (`step`, `cancel`; `open` is left to the server, which resolves the
//! model) and writes `ParseStreamResponse.deltas` entries. Field numbers follow
//! `protos/sidecar/v1/preprocessor.proto`.

use crate::error::{Error, Result};
use crate::parse::session::Delta;

/// A decoded client message.
#[derive(Debug)]
pub(crate) enum Request<'a> {
    Open,
    Step(Vec<StepTokens<'a>>),
    Cancel(&'a str),
    Empty,
}

/// One request's tokens in a step.
#[derive(Debug, Default)]
pub(crate) struct StepTokens<'a> {
    pub(crate) request_id: &'a str,
    pub(crate) token_ids: Vec<u32>,
    pub(crate) finished: bool,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos).ok_or_else(truncated)?;
            self.pos += 1;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Error::invalid_argument(
            "malformed ParseStreamRequest: varint too long",
        ))
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let len = self.varint()? as usize;
        let end = self
            .pos
            .checked_add(len)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(truncated)?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// Skips the value of field `key` (an unknown field).
    fn skip(&mut self, key: u64) -> Result<()> {
        match key & 7 {
            3 => self.skip_group(key >> 3),
            4 => Err(Error::invalid_argument(
                "malformed ParseStreamRequest: end of a group that was not started",
            )),
            wire => self.skip_value(wire),
        }
    }

    fn skip_value(&mut self, wire: u64) -> Result<()> {
        match wire {
            0 => {
                self.varint()?;
            }
            1 => self.pos += 8,
            2 => {
                self.bytes()?;
            }
            5 => self.pos += 4,
            _ => {
                return Err(Error::invalid_argument(format!(
                    "malformed ParseStreamRequest: wire type {wire}"
                )))
            }
        }
        if self.pos > self.buf.len() {
            return Err(truncated());
        }
        Ok(())
    }

    /// Skips a group (protobuf's deprecated wire types 3 and 4, still valid in unknown fields) up
    /// to its end tag, nested groups included; a stack, not recursion, so depth costs no stack.
    fn skip_group(&mut self, field: u64) -> Result<()> {
        let mut open = vec![field];
        while let Some(&top) = open.last() {
            let key = self.varint()?;
            match key & 7 {
                3 => open.push(key >> 3),
                4 if key >> 3 == top => {
                    open.pop();
                }
                4 => {
                    return Err(Error::invalid_argument(
                        "malformed ParseStreamRequest: a group ends with another field's tag",
                    ))
                }
                wire => self.skip_value(wire)?,
            }
        }
        Ok(())
    }
}

fn truncated() -> Error {
    Error::invalid_argument("malformed ParseStreamRequest: truncated")
}

fn utf8<'a>(b: &'a [u8], field: &str) -> Result<&'a str> {
    std::str::from_utf8(b).map_err(|_| Error::invalid_argument(format!("{field}: not valid UTF-8")))
}

/// Decodes a `ParseStreamRequest`.
pub(crate) fn decode_request(buf: &[u8]) -> Result<Request<'_>> {
    let mut r = Reader::new(buf);
    let mut request = Request::Empty;
    while !r.done() {
        let key = r.varint()?;
        match (key >> 3, key & 7) {
            (1, 2) => {
                r.bytes()?;
                request = Request::Open;
            }
            (2, 2) => request = Request::Step(decode_step(r.bytes()?)?),
            (3, 2) => request = Request::Cancel(decode_cancel(r.bytes()?)?),
            _ => r.skip(key)?,
        }
    }
    Ok(request)
}

fn decode_step(buf: &[u8]) -> Result<Vec<StepTokens<'_>>> {
    let mut r = Reader::new(buf);
    let mut items = Vec::new();
    while !r.done() {
        let key = r.varint()?;
        match (key >> 3, key & 7) {
            (1, 2) => items.push(decode_step_tokens(r.bytes()?)?),
            _ => r.skip(key)?,
        }
    }
    Ok(items)
}

fn decode_step_tokens(buf: &[u8]) -> Result<StepTokens<'_>> {
    let mut r = Reader::new(buf);
    let mut item = StepTokens::default();
    while !r.done() {
        let key = r.varint()?;
        match (key >> 3, key & 7) {
            (1, 2) => item.request_id = utf8(r.bytes()?, "step.items.request_id")?,
            (2, 2) => {
                let mut packed = Reader::new(r.bytes()?);
                while !packed.done() {
                    item.token_ids.push(packed.varint()? as u32);
                }
            }
            (2, 0) => item.token_ids.push(r.varint()? as u32),
            (3, 0) => item.finished = r.varint()? != 0,
            _ => r.skip(key)?,
        }
    }
    Ok(item)
}

fn decode_cancel(buf: &[u8]) -> Result<&str> {
    let mut r = Reader::new(buf);
    let mut id = "";
    while !r.done() {
        let key = r.varint()?;
        match (key >> 3, key & 7) {
            (1, 2) => id = utf8(r.bytes()?, "cancel.request_id")?,
            _ => r.skip(key)?,
        }
    }
    Ok(id)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, field: u64, b: &[u8]) {
    if b.is_empty() {
        return;
    }
    put_varint(out, field << 3 | 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn put_uint(out: &mut Vec<u8>, field: u64, v: u64) {
    if v == 0 {
        return;
    }
    put_varint(out, field << 3);
    put_varint(out, v);
}

/// A per-request error for `RequestDelta.error`.
pub(crate) struct Status<'a> {
    pub(crate) code: i32,
    pub(crate) message: &'a str,
}

/// Appends a `ParseStreamResponse.deltas` entry that fails request `request_id` with `code`.
pub(crate) fn put_error(
    out: &mut Vec<u8>,
    request_id: &str,
    code: i32,
    message: &str,
    fingerprint: &str,
) {
    put_delta(
        out,
        request_id,
        None,
        Some(Status { code, message }),
        fingerprint,
    );
}

/// Appends one `ParseStreamResponse.deltas` entry (field 1) to `out`.
pub(crate) fn put_delta(
    out: &mut Vec<u8>,
    request_id: &str,
    delta: Option<&Delta>,
    error: Option<Status<'_>>,
    fingerprint: &str,
) {
    let mut body = Vec::with_capacity(64);
    put_bytes(&mut body, 1, request_id.as_bytes());
    if let Some(d) = delta {
        put_bytes(&mut body, 2, d.content.as_bytes());
        put_bytes(&mut body, 3, d.reasoning.as_bytes());
        for call in &d.calls {
            let mut c = Vec::with_capacity(16 + call.arguments.len());
            put_uint(&mut c, 1, u64::from(call.index));
            put_bytes(&mut c, 2, call.id.as_bytes());
            put_bytes(&mut c, 3, call.name.as_bytes());
            put_bytes(&mut c, 4, call.arguments.as_bytes());
            put_varint(&mut body, 4 << 3 | 2);
            put_varint(&mut body, c.len() as u64);
            body.extend_from_slice(&c);
        }
        put_uint(&mut body, 5, u64::from(d.reasoning_tokens));
        put_uint(&mut body, 6, u64::from(d.completion_tokens));
        put_uint(&mut body, 7, u64::from(d.finished));
        put_bytes(&mut body, 8, d.finish_reason.as_bytes());
        if let Some(stop) = &d.matched_stop {
            put_bytes(&mut body, 9, stop.as_bytes());
        }
    }
    if let Some(status) = error {
        put_uint(&mut body, 7, 1);
        let mut s = Vec::with_capacity(8 + status.message.len());
        // int32 is encoded as a (sign-extended) varint.
        put_uint(&mut s, 1, status.code as i64 as u64);
        put_bytes(&mut s, 2, status.message.as_bytes());
        put_varint(&mut body, 10 << 3 | 2);
        put_varint(&mut body, s.len() as u64);
        body.extend_from_slice(&s);
    }
    put_bytes(&mut body, 11, fingerprint.as_bytes());
    put_varint(out, 1 << 3 | 2);
    put_varint(out, body.len() as u64);
    out.extend_from_slice(&body);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_unknown_groups() {
        // Found by the parse_wire fuzz target: a valid message with an unknown field in group
        // encoding (wire types 3/4, nested) was refused; protobuf parsers skip it.
        let cancel = [0x0a, 0x01, b'r'];
        let mut msg = vec![0x1a, cancel.len() as u8];
        msg.extend_from_slice(&cancel);
        // Field 9 as a group holding field 10 as a group holding a varint, then the end tags.
        msg.extend_from_slice(&[
            (9 << 3) | 3,
            (10 << 3) | 3,
            0x08,
            0x01,
            (10 << 3) | 4,
            (9 << 3) | 4,
        ]);
        assert!(matches!(decode_request(&msg), Ok(Request::Cancel("r"))));
        assert!(decode_request(&[(9 << 3) | 3, (8 << 3) | 4]).is_err());
        assert!(decode_request(&[(9 << 3) | 4]).is_err());
        assert!(decode_request(&[(9 << 3) | 3]).is_err());
    }
}
