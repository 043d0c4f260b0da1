//! The request's JSON (messages, tools, documents, kwargs), parsed the way Python's `json.loads`
//! parses it, because that is what the template sees in transformers and vLLM.
//!
//! `serde_json` is not used here on purpose: without its `arbitrary_precision` feature it turns
//! integers above `u64::MAX` into floats, and its default float parser may be one ULP off, while
//! Python keeps integers exact and rounds floats correctly. A tool argument `12345678901234567890123`
//! must reach the template as that integer. Object keys keep their request order; a repeated key
//! keeps its first position and its last value, as a Python `dict` does.

use crate::error::{Error, Result};

/// A parsed JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// `null`
    Null,
    /// `true` / `false`
    Bool(bool),
    /// An integer literal (no fraction, no exponent) that fits in `i128`.
    Int(i128),
    /// A float literal, or `NaN` / `Infinity` / `-Infinity` (Python accepts them).
    Float(f64),
    /// A string.
    Str(String),
    /// An array.
    Array(Vec<Json>),
    /// An object, in key order.
    Object(Vec<(String, Json)>),
}

impl Json {
    /// The value of `key` when this is an object that has it.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(pairs) => pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Mutable access to the value of `key`.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Json> {
        match self {
            Json::Object(pairs) => pairs.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Python's name for the type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "boolean",
            Json::Int(_) | Json::Float(_) => "number",
            Json::Str(_) => "string",
            Json::Array(_) => "array",
            Json::Object(_) => "object",
        }
    }
}

/// Nesting deeper than this is refused rather than risking the stack.
const MAX_DEPTH: usize = 256;

/// Parses `text` (the whole of it) as one JSON value; errors name `field` and the position.
pub fn parse(text: &str, field: &str) -> Result<Json> {
    let mut p = Parser {
        s: text.as_bytes(),
        pos: 0,
        text,
    };
    let value = p.value(0).map_err(|msg| p.error(field, &msg))?;
    p.skip_ws();
    if p.pos != p.s.len() {
        return Err(p.error(field, "extra data after the JSON value"));
    }
    Ok(value)
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    text: &'a str,
}

type PResult<T> = std::result::Result<T, String>;

impl Parser<'_> {
    fn error(&self, field: &str, msg: &str) -> Error {
        let upto = &self.text.as_bytes()[..self.pos.min(self.s.len())];
        let line = upto.iter().filter(|&&b| b == b'\n').count() + 1;
        let column = upto.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
        Error::invalid_argument(format!(
            "{field}: invalid JSON at line {line} column {column}: {msg}"
        ))
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.pos) {
            self.pos += 1;
        }
    }

    fn value(&mut self, depth: usize) -> PResult<Json> {
        if depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH} levels"));
        }
        self.skip_ws();
        match self.s.get(self.pos) {
            None => Err("expected a value, found the end of the input".into()),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(Json::Str),
            Some(b't') => self.keyword("true", Json::Bool(true)),
            Some(b'f') => self.keyword("false", Json::Bool(false)),
            Some(b'n') => self.keyword("null", Json::Null),
            Some(b'N') => self.keyword("NaN", Json::Float(f64::NAN)),
            Some(b'I') => self.keyword("Infinity", Json::Float(f64::INFINITY)),
            Some(b'-') if self.s[self.pos..].starts_with(b"-Infinity") => {
                self.keyword("-Infinity", Json::Float(f64::NEG_INFINITY))
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(&c) => Err(format!("unexpected character {:?}", c as char)),
        }
    }

    fn keyword(&mut self, word: &str, value: Json) -> PResult<Json> {
        if self.s[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err("expected a value".into())
        }
    }

    fn object(&mut self, depth: usize) -> PResult<Json> {
        self.pos += 1;
        let mut pairs: Vec<(String, Json)> = Vec::new();
        self.skip_ws();
        if self.s.get(self.pos) == Some(&b'}') {
            self.pos += 1;
            return Ok(Json::Object(pairs));
        }
        loop {
            self.skip_ws();
            if self.s.get(self.pos) != Some(&b'"') {
                return Err("expected a string key in double quotes".into());
            }
            let key = self.string()?;
            self.skip_ws();
            if self.s.get(self.pos) != Some(&b':') {
                return Err("expected ':' after an object key".into());
            }
            self.pos += 1;
            let value = self.value(depth + 1)?;
            // A Python dict keeps a repeated key at its first position with its last value.
            match pairs.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = value,
                None => pairs.push((key, value)),
            }
            self.skip_ws();
            match self.s.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Json::Object(pairs));
                }
                _ => return Err("expected ',' or '}' in an object".into()),
            }
        }
    }

    fn array(&mut self, depth: usize) -> PResult<Json> {
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.s.get(self.pos) == Some(&b']') {
            self.pos += 1;
            return Ok(Json::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            match self.s.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err("expected ',' or ']' in an array".into()),
            }
        }
    }

    fn number(&mut self) -> PResult<Json> {
        let start = self.pos;
        if self.s[self.pos] == b'-' {
            self.pos += 1;
        }
        match self.s.get(self.pos) {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err("expected a digit".into()),
        }
        let mut is_float = false;
        if self.s.get(self.pos) == Some(&b'.')
            && matches!(self.s.get(self.pos + 1), Some(b'0'..=b'9'))
        {
            is_float = true;
            self.pos += 1;
            self.digits();
        }
        if let Some(b'e' | b'E') = self.s.get(self.pos) {
            let save = self.pos;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.s.get(self.pos) {
                self.pos += 1;
            }
            if matches!(self.s.get(self.pos), Some(b'0'..=b'9')) {
                is_float = true;
                self.digits();
            } else {
                // Python stops the number before a dangling exponent (and then fails on it).
                self.pos = save;
            }
        }
        let literal = &self.text[start..self.pos];
        if is_float {
            // Rust's parser rounds correctly, as Python's does.
            return literal
                .parse::<f64>()
                .map(Json::Float)
                .map_err(|e| format!("bad number {literal:?}: {e}"));
        }
        literal.parse::<i128>().map(Json::Int).map_err(|_| {
            format!("integer {literal} is outside the supported range (a signed 128-bit integer)")
        })
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.s.get(self.pos) {
            self.pos += 1;
        }
    }

    fn string(&mut self) -> PResult<String> {
        self.pos += 1; // the opening quote
        let mut out = String::new();
        loop {
            let run_start = self.pos;
            // SIMD scan to the next quote or backslash, then one vectorizable pass for the control
            // characters JSON forbids in strings (most strings have neither).
            let rest = &self.s[self.pos..];
            let stop = memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
            let run = match rest[..stop].iter().any(|&b| b < 0x20) {
                true => rest[..stop].iter().position(|&b| b < 0x20).unwrap_or(stop),
                false => stop,
            };
            self.pos += run;
            // Runs end at ASCII bytes, so they are whole UTF-8 sequences of the (valid) input.
            out.push_str(&self.text[run_start..self.pos]);
            match self.s.get(self.pos) {
                None => return Err("unterminated string".into()),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    self.escape(&mut out)?;
                }
                Some(&c) => return Err(format!("invalid control character {c:#04x} in a string")),
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> PResult<()> {
        let c = *self.s.get(self.pos).ok_or("unterminated escape")?;
        self.pos += 1;
        match c {
            b'"' => out.push('"'),
            b'\\' => out.push('\\'),
            b'/' => out.push('/'),
            b'b' => out.push('\u{8}'),
            b'f' => out.push('\u{c}'),
            b'n' => out.push('\n'),
            b'r' => out.push('\r'),
            b't' => out.push('\t'),
            b'u' => {
                let first = self.hex4()?;
                let code = if (0xD800..0xDC00).contains(&first) {
                    if self.s[self.pos..].starts_with(b"\\u") {
                        let save = self.pos;
                        self.pos += 2;
                        let second = self.hex4()?;
                        if (0xDC00..0xE000).contains(&second) {
                            0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                        } else {
                            self.pos = save;
                            return Err(lone_surrogate(first));
                        }
                    } else {
                        return Err(lone_surrogate(first));
                    }
                } else {
                    first
                };
                out.push(char::from_u32(code).ok_or_else(|| lone_surrogate(code))?);
            }
            other => return Err(format!("invalid escape \\{}", other as char)),
        }
        Ok(())
    }

    fn hex4(&mut self) -> PResult<u32> {
        let digits = self
            .s
            .get(self.pos..self.pos + 4)
            .ok_or("truncated \\u escape")?;
        let text = std::str::from_utf8(digits).map_err(|_| "invalid \\u escape".to_string())?;
        let value =
            u32::from_str_radix(text, 16).map_err(|_| format!("invalid \\u escape {text:?}"))?;
        self.pos += 4;
        Ok(value)
    }
}

fn lone_surrogate(code: u32) -> String {
    format!("lone surrogate \\u{code:04x} (not representable as UTF-8)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_exact_ints_and_python_dict_semantics() {
        let v = parse(
            r#"{"b": 1, "a": 123456789012345678901234567890, "b": 2.5e-7}"#,
            "f",
        )
        .unwrap();
        assert_eq!(
            v,
            Json::Object(vec![
                ("b".into(), Json::Float(2.5e-7)),
                ("a".into(), Json::Int(123456789012345678901234567890)),
            ])
        );
    }

    #[test]
    fn escapes_and_surrogate_pairs() {
        let v = parse(r#""a\n\u00e9\ud83d\ude00\/""#, "f").unwrap();
        assert_eq!(v, Json::Str("a\né😀/".into()));
        assert!(parse(r#""\ud800""#, "f")
            .unwrap_err()
            .message()
            .contains("lone surrogate"));
    }

    #[test]
    fn python_extensions_and_errors_name_the_field() {
        assert_eq!(parse("[NaN, -Infinity]", "f").unwrap().type_name(), "array");
        let e = parse("{\"a\": [1, 2}", "messages_json").unwrap_err();
        assert!(
            e.message()
                .starts_with("messages_json: invalid JSON at line 1 column 12"),
            "{e}"
        );
        assert!(parse("\"a\u{1}\"", "f").is_err());
        assert!(parse("1 2", "f").is_err());
        assert!(parse(&"[".repeat(1000), "f")
            .unwrap_err()
            .message()
            .contains("nested deeper"));
    }
}
