//! Streaming JSON: re-emits a JSON value as canonical JSON text while it arrives, so tool-call
//! arguments can be streamed as they are generated and still concatenate to valid JSON.
//!
//! Canonical means Python's `json.dumps(value, ensure_ascii=False)`: `", "` and `": "` separators,
//! strings re-escaped (`\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`, other controls as `\u00XX`,
//! everything else literal), numbers exactly as the model wrote them. The model's own whitespace
//! and escape spelling do not matter.
//!
//! The relay never emits anything a later byte could invalidate: a member's key and the comma
//! before it wait for the value's first byte, numbers and literals wait for the byte after them.
//! So at any moment the emitted text is a prefix of valid JSON; a truncated or broken value is
//! left as it is, never retracted and never completed.

/// What the relay did with its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Relay {
    /// All input consumed; the value is not complete.
    More,
    /// The value ended after `consumed` bytes of this input.
    Done(usize),
    /// The byte at `consumed` cannot continue the value.
    Error(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctx {
    /// Inside an object: waiting for a key (or `}` when `first`).
    ObjKey { first: bool },
    /// After a key: waiting for `:`.
    ObjColon,
    /// After `:`: waiting for the value.
    ObjValue,
    /// After a member: `,` or `}`.
    ObjNext,
    /// Inside an array: waiting for a value (or `]` when `first`).
    ArrValue { first: bool },
    /// After an element: `,` or `]`.
    ArrNext,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lex {
    /// Between tokens.
    Between,
    /// Inside a string (`key` for an object key).
    Str { key: bool },
    /// After a backslash in a string.
    Escape { key: bool },
    /// Inside `\uXXXX`: digits so far and their value.
    Unicode { key: bool, digits: u8, value: u32 },
    /// Inside a number or literal.
    Scalar,
}

/// The streaming re-emitter (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct JsonRelay {
    stack: Vec<Ctx>,
    lex: Lex,
    /// Text waiting for the next value's first byte: `", "`, a key and `": "`.
    pending: String,
    /// The number or literal being read.
    scalar: String,
    /// A high surrogate waiting for its low half.
    high_surrogate: Option<u32>,
    started: bool,
    done: bool,
    /// Only an object may be the top-level value (tool-call arguments).
    object_only: bool,
}

impl Default for JsonRelay {
    fn default() -> Self {
        Self::new()
    }
}

impl JsonRelay {
    pub(crate) fn new() -> Self {
        JsonRelay {
            stack: Vec::new(),
            lex: Lex::Between,
            pending: String::new(),
            scalar: String::new(),
            high_surrogate: None,
            started: false,
            done: false,
            object_only: false,
        }
    }

    /// A relay whose top-level value must be an object (anything else is an error at its first
    /// byte): tool-call arguments.
    pub(crate) fn object() -> Self {
        JsonRelay {
            object_only: true,
            ..JsonRelay::new()
        }
    }

    /// Whether the top-level value has begun.
    pub(crate) fn started(&self) -> bool {
        self.started
    }

    /// Bytes held back (pending keys, scalars).
    pub(crate) fn held(&self) -> usize {
        self.pending.len() + self.scalar.len()
    }

    /// Feeds `input`, appending canonical text to `out`.
    pub(crate) fn feed(&mut self, input: &str, out: &mut String) -> Relay {
        if self.done {
            return Relay::Done(0);
        }
        for (i, c) in input.char_indices() {
            match self.step(c, out) {
                Step::Continue => {}
                Step::DoneAfter => {
                    self.done = true;
                    return Relay::Done(i + c.len_utf8());
                }
                Step::DoneBefore => {
                    self.done = true;
                    return Relay::Done(i);
                }
                Step::Error => return Relay::Error(i),
            }
        }
        Relay::More
    }

    fn step(&mut self, c: char, out: &mut String) -> Step {
        if is_sentinel(c) {
            // A marker token can never be part of a JSON value, not even of a string.
            return Step::Error;
        }
        match self.lex {
            Lex::Str { key } => self.in_string(c, key, out),
            Lex::Escape { key } => self.in_escape(c, key, out),
            Lex::Unicode { key, digits, value } => self.in_unicode(c, key, digits, value, out),
            Lex::Scalar => {
                if is_scalar_char(c) {
                    self.scalar.push(c);
                    return Step::Continue;
                }
                if !valid_scalar(&self.scalar) {
                    return Step::Error;
                }
                self.started = true;
                self.flush_pending(out);
                out.push_str(&self.scalar);
                self.scalar.clear();
                self.lex = Lex::Between;
                if self.end_value() {
                    return Step::DoneBefore;
                }
                self.between(c, out)
            }
            Lex::Between => self.between(c, out),
        }
    }

    fn between(&mut self, c: char, out: &mut String) -> Step {
        if matches!(c, ' ' | '\t' | '\n' | '\r') {
            return Step::Continue;
        }
        match self.stack.last().copied() {
            None => {
                if self.started || (self.object_only && c != '{') {
                    return Step::Error;
                }
                self.start_value(c, out)
            }
            Some(Ctx::ObjKey { first }) => match c {
                '"' => {
                    self.set_top(Ctx::ObjColon);
                    if !first {
                        self.pending.push_str(", ");
                    }
                    self.pending.push('"');
                    self.lex = Lex::Str { key: true };
                    Step::Continue
                }
                '}' if first => self.close_container(out),
                _ => Step::Error,
            },
            Some(Ctx::ObjColon) => {
                if c != ':' {
                    return Step::Error;
                }
                self.pending.push_str(": ");
                self.set_top(Ctx::ObjValue);
                Step::Continue
            }
            Some(Ctx::ObjValue) => {
                self.set_top(Ctx::ObjNext);
                self.start_value(c, out)
            }
            Some(Ctx::ObjNext) => match c {
                ',' => {
                    self.set_top(Ctx::ObjKey { first: false });
                    Step::Continue
                }
                '}' => self.close_container(out),
                _ => Step::Error,
            },
            Some(Ctx::ArrValue { first }) => {
                if c == ']' && first {
                    return self.close_container(out);
                }
                if !first {
                    self.pending.push_str(", ");
                }
                self.set_top(Ctx::ArrNext);
                self.start_value(c, out)
            }
            Some(Ctx::ArrNext) => match c {
                ',' => {
                    self.set_top(Ctx::ArrValue { first: false });
                    Step::Continue
                }
                ']' => self.close_container(out),
                _ => Step::Error,
            },
        }
    }

    /// `started` is set only once the value has emitted something: a byte that cannot begin a
    /// value, or a number or literal that never completes, emits nothing.
    fn start_value(&mut self, c: char, out: &mut String) -> Step {
        match c {
            '{' => {
                self.started = true;
                self.flush_pending(out);
                out.push('{');
                self.stack.push(Ctx::ObjKey { first: true });
                Step::Continue
            }
            '[' => {
                self.started = true;
                self.flush_pending(out);
                out.push('[');
                self.stack.push(Ctx::ArrValue { first: true });
                Step::Continue
            }
            '"' => {
                self.started = true;
                self.flush_pending(out);
                out.push('"');
                self.lex = Lex::Str { key: false };
                Step::Continue
            }
            c if c == '-' || c.is_ascii_digit() || c.is_ascii_lowercase() => {
                self.scalar.push(c);
                self.lex = Lex::Scalar;
                Step::Continue
            }
            _ => Step::Error,
        }
    }

    fn close_container(&mut self, out: &mut String) -> Step {
        let ctx = self.stack.pop().expect("inside a container");
        self.pending.clear();
        out.push(if is_object(ctx) { '}' } else { ']' });
        if self.end_value() {
            Step::DoneAfter
        } else {
            Step::Continue
        }
    }

    /// A value just ended; true when it was the top-level one.
    fn end_value(&mut self) -> bool {
        self.stack.is_empty()
    }

    fn in_string(&mut self, c: char, key: bool, out: &mut String) -> Step {
        match c {
            '"' => {
                self.flush_surrogate(key, out);
                self.target(key, out).push('"');
                self.lex = Lex::Between;
                if !key && self.end_value() {
                    return Step::DoneAfter;
                }
                Step::Continue
            }
            '\\' => {
                self.lex = Lex::Escape { key };
                Step::Continue
            }
            _ => {
                self.flush_surrogate(key, out);
                push_escaped_char(c, self.target(key, out));
                Step::Continue
            }
        }
    }

    fn in_escape(&mut self, c: char, key: bool, out: &mut String) -> Step {
        let decoded = match c {
            '"' => '"',
            '\\' => '\\',
            '/' => '/',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'u' => {
                self.lex = Lex::Unicode {
                    key,
                    digits: 0,
                    value: 0,
                };
                return Step::Continue;
            }
            _ => return Step::Error,
        };
        self.flush_surrogate(key, out);
        push_escaped_char(decoded, self.target(key, out));
        self.lex = Lex::Str { key };
        Step::Continue
    }

    fn in_unicode(&mut self, c: char, key: bool, digits: u8, value: u32, out: &mut String) -> Step {
        let Some(d) = c.to_digit(16) else {
            return Step::Error;
        };
        let value = value * 16 + d;
        if digits + 1 < 4 {
            self.lex = Lex::Unicode {
                key,
                digits: digits + 1,
                value,
            };
            return Step::Continue;
        }
        self.lex = Lex::Str { key };
        match value {
            0xD800..=0xDBFF => {
                self.flush_surrogate(key, out);
                self.high_surrogate = Some(value);
            }
            0xDC00..=0xDFFF => match self.high_surrogate.take() {
                Some(high) => {
                    let code = 0x10000 + ((high - 0xD800) << 10) + (value - 0xDC00);
                    push_escaped_char(
                        char::from_u32(code).expect("valid pair"),
                        self.target(key, out),
                    );
                }
                None => push_escaped_unit(value, self.target(key, out)),
            },
            _ => {
                self.flush_surrogate(key, out);
                push_escaped_char(
                    char::from_u32(value).expect("not a surrogate"),
                    self.target(key, out),
                );
            }
        }
        Step::Continue
    }

    /// A high surrogate not followed by a low one stays an escape, as Python keeps it.
    fn flush_surrogate(&mut self, key: bool, out: &mut String) {
        if let Some(high) = self.high_surrogate.take() {
            push_escaped_unit(high, self.target(key, out));
        }
    }

    fn target<'a>(&'a mut self, key: bool, out: &'a mut String) -> &'a mut String {
        if key {
            &mut self.pending
        } else {
            out
        }
    }

    fn flush_pending(&mut self, out: &mut String) {
        out.push_str(&self.pending);
        self.pending.clear();
    }

    fn set_top(&mut self, ctx: Ctx) {
        *self.stack.last_mut().expect("inside a container") = ctx;
    }
}

enum Step {
    Continue,
    /// The value ended with this character.
    DoneAfter,
    /// The value ended just before this character (a number or literal).
    DoneBefore,
    Error,
}

fn is_object(ctx: Ctx) -> bool {
    matches!(
        ctx,
        Ctx::ObjKey { .. } | Ctx::ObjColon | Ctx::ObjValue | Ctx::ObjNext
    )
}

fn is_scalar_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '+' | '.')
}

/// Marker tokens appear in parser input as Unicode noncharacters U+FDD0..U+FDEF.
pub(crate) fn is_sentinel(c: char) -> bool {
    ('\u{FDD0}'..='\u{FDEF}').contains(&c)
}

/// Whether `s` is a JSON number or literal.
pub(crate) fn valid_scalar(s: &str) -> bool {
    matches!(s, "true" | "false" | "null") || valid_number(s)
}

/// JSON number grammar: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
pub(crate) fn valid_number(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(c) if c.is_ascii_digit() => {
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
        }
        _ => return false,
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    i == b.len()
}

/// Appends `c` escaped as `json.dumps(ensure_ascii=False)` does.
pub(crate) fn push_escaped_char(c: char, out: &mut String) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        c if (c as u32) < 0x20 => push_escaped_unit(c as u32, out),
        c => out.push(c),
    }
}

fn push_escaped_unit(unit: u32, out: &mut String) {
    use std::fmt::Write;
    let _ = write!(out, "\\u{unit:04x}");
}

/// Appends `s` as a canonical JSON string literal.
pub(crate) fn push_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        push_escaped_char(c, out);
    }
    out.push('"');
}

/// Appends `s` escaped for the inside of a JSON string.
pub(crate) fn push_escaped(s: &str, out: &mut String) {
    for c in s.chars() {
        push_escaped_char(c, out);
    }
}

/// Parses a complete JSON value and returns its canonical text, or `None` when `s` (surrounding
/// whitespace allowed) is not exactly one JSON value.
pub(crate) fn canonical(s: &str) -> Option<String> {
    let mut relay = JsonRelay::new();
    let mut out = String::new();
    let trimmed = s.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r'));
    // A trailing space ends a top-level number or literal.
    let mut text = String::with_capacity(trimmed.len() + 1);
    text.push_str(trimmed);
    text.push(' ');
    match relay.feed(&text, &mut out) {
        Relay::Done(n) if text[n..].trim().is_empty() => Some(out),
        _ => None,
    }
}

/// Decodes a canonical JSON string literal (as the relay emits it) back to its text.
pub(crate) fn decode_canonical_string(s: &str) -> Option<String> {
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '"' => out.push('"'),
            '\\' => out.push('\\'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'u' => {
                let hex: String = chars.by_ref().take(4).collect();
                let unit = u32::from_str_radix(&hex, 16).ok()?;
                // Lone surrogates cannot live in a Rust string; names never contain them.
                out.push(char::from_u32(unit).unwrap_or('\u{FFFD}'));
            }
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay_all(chunks: &[&str]) -> (String, Relay) {
        let mut r = JsonRelay::new();
        let mut out = String::new();
        let mut last = Relay::More;
        for c in chunks {
            last = r.feed(c, &mut out);
        }
        (out, last)
    }

    #[test]
    fn canonicalizes_spacing_and_escapes() {
        let (out, st) = relay_all(&["{\"a\":1,\"b\" :[true, null,\"x\\u00e9\\n\"],\"c\":{}}"]);
        assert_eq!(out, "{\"a\": 1, \"b\": [true, null, \"xé\\n\"], \"c\": {}}");
        assert_eq!(st, Relay::Done(44));
    }

    #[test]
    fn same_output_in_any_chunking() {
        let text =
            "{ \"k\\\"ey\" : \"v\\ud83d\\ude00 é\", \"n\": -1.5e+3, \"l\": [1, [2, {}]] }tail";
        let (whole, _) = relay_all(&[text]);
        for split in 0..text.len() {
            if !text.is_char_boundary(split) {
                continue;
            }
            let (out, st) = relay_all(&[&text[..split], &text[split..]]);
            let expect_done = split < text.len() - 4;
            assert_eq!(out, whole, "split at {split}");
            if expect_done {
                assert!(matches!(st, Relay::Done(_)), "split at {split}");
            }
        }
        assert_eq!(
            whole,
            "{\"k\\\"ey\": \"v😀 é\", \"n\": -1.5e+3, \"l\": [1, [2, {}]]}"
        );
    }

    #[test]
    fn never_emits_dangling_keys_or_scalars() {
        let mut r = JsonRelay::new();
        let mut out = String::new();
        assert_eq!(r.feed("{\"a\": 12", &mut out), Relay::More);
        assert_eq!(out, "{");
        r.feed(", \"b\"", &mut out);
        assert_eq!(out, "{\"a\": 12");
    }

    #[test]
    fn a_value_that_never_began_emits_nothing() {
        for input in ["\u{FFFD}call", "call}", "nul"] {
            let mut r = JsonRelay::new();
            let mut out = String::new();
            r.feed(input, &mut out);
            assert_eq!(out, "", "{input:?}");
            assert!(!r.started(), "{input:?}");
        }
        let mut r = JsonRelay::new();
        let mut out = String::new();
        assert_eq!(r.feed("true,", &mut out), Relay::Done(4));
        assert_eq!(out, "true");
    }

    #[test]
    fn arguments_must_be_an_object() {
        // Found by the parse_session fuzz target: Kimi arguments `["a": 1}` went out as `["a"]`.
        let mut out = String::new();
        assert_eq!(
            JsonRelay::object().feed("[\"a\": 1}", &mut out),
            Relay::Error(0)
        );
        assert_eq!(out, "");
        assert_eq!(
            JsonRelay::object().feed(" {\"a\": [1]} ", &mut out),
            Relay::Done(11)
        );
        assert_eq!(out, "{\"a\": [1]}");
    }

    #[test]
    fn reports_errors_at_the_offending_byte() {
        let mut r = JsonRelay::new();
        let mut out = String::new();
        assert_eq!(r.feed("{\"a\": tru}", &mut out), Relay::Error(9));
        assert_eq!(
            JsonRelay::new().feed("{\"a\": @", &mut String::new()),
            Relay::Error(6)
        );
    }

    #[test]
    fn numbers_follow_the_json_grammar() {
        for ok in ["0", "-0", "12", "1.5", "1e5", "1E-5", "-0.0e+1"] {
            assert!(valid_number(ok), "{ok}");
        }
        for bad in ["", "-", "01", "1.", ".5", "1e", "+1", "1.5.2", "0x10"] {
            assert!(!valid_number(bad), "{bad}");
        }
    }

    #[test]
    fn canonical_round_trips() {
        assert_eq!(
            canonical(" {\"a\":[1,2]} ").as_deref(),
            Some("{\"a\": [1, 2]}")
        );
        assert_eq!(canonical("12").as_deref(), Some("12"));
        assert_eq!(canonical("12 13"), None);
        assert_eq!(canonical("{\"a\":"), None);
    }
}
