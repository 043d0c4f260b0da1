//! Gemma's argument object syntax, read as it streams and written as JSON text:
//! `{key:<|"|>text<|"|>,count:42,flags:{on:true},items:[<|"|>a<|"|>,1]}`. Keys are bare (or
//! quoted); strings sit between a delimiter token (`<|"|>` for Gemma 4, `<escape>` for
//! FunctionGemma); other values are bare text up to `,`, `}` or `]`. A bare value is typed by the
//! request's schema for a top-level parameter that has one; otherwise JSON text (a number, a
//! literal, a string in quotes) is itself and anything else a string.
//!
//! A member's key goes out with its value's first byte, a string's text as it arrives, a bare
//! value once the byte after it arrives. The call's end tag inside the arguments breaks the call.

use crate::parse::json::{canonical, push_escaped, push_json_string};
use crate::parse::schema::{coerce, TypeSet};
use crate::parse::text::{scan, Scan};

/// How reading stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArgsEnd {
    /// All input read (or a partial delimiter held back); the object goes on.
    More,
    /// The top-level object closed after this many bytes.
    Done(usize),
    /// Not Gemma's syntax at this many bytes: the call is broken there.
    Broken(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    Object,
    Array,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Before a member's key (or the object's end).
    Key,
    /// Inside a bare key, up to `:`.
    BareKey,
    /// Inside a quoted key.
    QuotedKey,
    /// After a quoted key, before `:`.
    Colon,
    /// Before a value (or, in an array, the array's end).
    Value,
    String,
    Bare,
}

/// The reader of one call's arguments; the opening `{` has been read and written.
pub(crate) struct GemmaArgs {
    quote: String,
    close: String,
    stack: Vec<(Frame, usize)>,
    at: At,
    /// The current key, held until its value begins.
    key: String,
    /// A bare value, held until the byte after it.
    bare: String,
    /// The top-level key whose value is being read (for its schema type).
    top_key: Option<String>,
}

impl GemmaArgs {
    /// `quote`: the string delimiter's pattern; `close`: the call's end tag's pattern.
    pub(crate) fn new(quote: &str, close: &str) -> Self {
        GemmaArgs {
            quote: quote.to_string(),
            close: close.to_string(),
            stack: vec![(Frame::Object, 0)],
            at: At::Key,
            key: String::new(),
            bare: String::new(),
            top_key: None,
        }
    }

    /// Bytes held (a key or bare value not written yet).
    pub(crate) fn held(&self) -> usize {
        self.key.len() + self.bare.len()
    }

    /// Reads `input`, appending JSON text to `out`; `types(key)` gives a top-level parameter's
    /// schema types. Returns how it stopped and, for `More`, how many bytes were consumed.
    pub(crate) fn feed(
        &mut self,
        input: &str,
        out: &mut String,
        types: &dyn Fn(&str) -> TypeSet,
    ) -> (usize, ArgsEnd) {
        let mut pos = 0;
        while pos < input.len() {
            let rest = &input[pos..];
            let step = match self.at {
                At::String | At::QuotedKey => self.quoted(rest, out),
                _ => self.byte(rest, out, types),
            };
            match step {
                Step::Advance(n) => pos += n,
                Step::Wait => return (pos, ArgsEnd::More),
                Step::Done(n) => return (pos + n, ArgsEnd::Done(pos + n)),
                Step::Broken => return (pos, ArgsEnd::Broken(pos)),
            }
        }
        (pos, ArgsEnd::More)
    }

    /// Inside a quoted string or key: up to the next delimiter (a partial one is held back).
    fn quoted(&mut self, rest: &str, out: &mut String) -> Step {
        let (text, used, closed) = match scan(rest, &[&self.quote, &self.close]) {
            Scan::Found { at, index: 0 } => (&rest[..at], at + self.quote.len(), true),
            Scan::Found { at, .. } => {
                self.string_text(&rest[..at], out);
                return if at == 0 {
                    Step::Broken
                } else {
                    Step::Advance(at)
                };
            }
            Scan::Partial { at: 0 } => return Step::Wait,
            Scan::Partial { at } => (&rest[..at], at, false),
            Scan::None => (rest, rest.len(), false),
        };
        self.string_text(text, out);
        if closed {
            if self.at == At::QuotedKey {
                self.at = At::Colon;
            } else {
                out.push('"');
                self.value_done();
            }
        }
        Step::Advance(used)
    }

    fn string_text(&mut self, text: &str, out: &mut String) {
        if self.at == At::QuotedKey {
            self.key.push_str(text);
        } else {
            push_escaped(text, out);
        }
    }

    /// One structural character (or a bare key's or value's text).
    fn byte(&mut self, rest: &str, out: &mut String, types: &dyn Fn(&str) -> TypeSet) -> Step {
        let c = rest.chars().next().unwrap_or_default();
        if rest.starts_with(self.close.as_str()) || could_be(rest, &self.close) {
            return if rest.starts_with(self.close.as_str()) {
                Step::Broken
            } else {
                Step::Wait
            };
        }
        let quote = rest.starts_with(self.quote.as_str());
        if !quote && could_be(rest, &self.quote) && matches!(self.at, At::Key | At::Value) {
            return Step::Wait;
        }
        match self.at {
            At::Key => self.at_key(c, quote, out),
            At::BareKey => match c {
                ':' => {
                    self.at = At::Value;
                    Step::Advance(1)
                }
                '}' | '{' | '[' | ']' | ',' => Step::Broken,
                _ => {
                    self.key.push(c);
                    Step::Advance(c.len_utf8())
                }
            },
            At::Colon => match c {
                ':' => {
                    self.at = At::Value;
                    Step::Advance(1)
                }
                _ if c.is_whitespace() => Step::Advance(c.len_utf8()),
                _ => Step::Broken,
            },
            At::Value => self.at_value(c, quote, out),
            At::Bare => match c {
                ',' | '}' | ']' => {
                    self.bare_done(out, types);
                    Step::Advance(0)
                }
                _ => {
                    self.bare.push(c);
                    Step::Advance(c.len_utf8())
                }
            },
            At::String | At::QuotedKey => self.quoted(rest, out),
        }
    }

    fn at_key(&mut self, c: char, quote: bool, out: &mut String) -> Step {
        if quote {
            self.key.clear();
            self.at = At::QuotedKey;
            return Step::Advance(self.quote.len());
        }
        match c {
            ',' => Step::Advance(1),
            _ if c.is_whitespace() => Step::Advance(c.len_utf8()),
            '}' => self.close_frame('}', out),
            ':' | '{' | '[' | ']' => Step::Broken,
            _ => {
                self.key.clear();
                self.at = At::BareKey;
                Step::Advance(0)
            }
        }
    }

    fn at_value(&mut self, c: char, quote: bool, out: &mut String) -> Step {
        let in_array = self.frame() == Frame::Array;
        if c.is_whitespace() || (in_array && c == ',') {
            return Step::Advance(c.len_utf8());
        }
        if in_array && c == ']' {
            return self.close_frame(']', out);
        }
        if quote {
            self.member_prefix(out);
            out.push('"');
            self.at = At::String;
            return Step::Advance(self.quote.len());
        }
        match c {
            '{' | '[' => {
                self.member_prefix(out);
                out.push(c);
                let frame = if c == '{' {
                    Frame::Object
                } else {
                    Frame::Array
                };
                self.stack.push((frame, 0));
                self.at = if c == '{' { At::Key } else { At::Value };
                Step::Advance(1)
            }
            '}' | ']' | ',' | ':' => Step::Broken,
            _ => {
                self.at = At::Bare;
                Step::Advance(0)
            }
        }
    }

    fn frame(&self) -> Frame {
        self.stack.last().map_or(Frame::Object, |f| f.0)
    }

    /// Writes the separator and, in an object, the held key before a value's first byte.
    fn member_prefix(&mut self, out: &mut String) {
        let depth = self.stack.len();
        let Some((frame, count)) = self.stack.last_mut() else {
            return;
        };
        if *count > 0 {
            out.push_str(", ");
        }
        *count += 1;
        if *frame == Frame::Object {
            let key = std::mem::take(&mut self.key);
            // A key may be written as a JSON string.
            let key = key.trim().trim_matches('"').to_string();
            push_json_string(&key, out);
            out.push_str(": ");
            self.top_key = (depth == 1).then_some(key);
        }
    }

    /// A bare value is complete: typed by a top-level parameter's schema, else a JSON number or
    /// literal as written, else a string.
    fn bare_done(&mut self, out: &mut String, types: &dyn Fn(&str) -> TypeSet) {
        let top = self.stack.len() == 1;
        self.member_prefix(out);
        let raw = std::mem::take(&mut self.bare);
        let raw = raw.trim();
        let types = match &self.top_key {
            Some(key) if top => types(key),
            _ => TypeSet::default(),
        };
        if types != TypeSet::default() {
            out.push_str(&coerce(raw, types));
        } else if let Some(json) = canonical(raw) {
            // A number, a literal, or a JSON string written bare.
            out.push_str(&json);
        } else {
            push_json_string(raw, out);
        }
        self.value_done();
    }

    fn value_done(&mut self) {
        self.at = match self.frame() {
            Frame::Object => At::Key,
            Frame::Array => At::Value,
        };
    }

    fn close_frame(&mut self, c: char, out: &mut String) -> Step {
        out.push(c);
        self.stack.pop();
        if self.stack.is_empty() {
            return Step::Done(1);
        }
        self.value_done();
        Step::Advance(1)
    }
}

enum Step {
    Advance(usize),
    Wait,
    Done(usize),
    Broken,
}

/// Whether `s` is a proper prefix of `pattern`.
fn could_be(s: &str, pattern: &str) -> bool {
    s.len() < pattern.len() && pattern.starts_with(s)
}
