//! Building a call's JSON arguments from key/value pairs whose values arrive as raw text (the
//! XML-style formats: `qwen3_coder`, GLM, MiniMax, DSML), and the reading those formats share.
//!
//! A value whose parameter is a plain string (by the request's tool schema, or unknown) streams:
//! `"key": "` goes out with its first character, then the text, JSON-escaped as it arrives. Any
//! other type is buffered until the value closes and then converted by the schema (see
//! [`crate::parse::schema`]). Template framing around values (a newline after the opening tag and
//! one before the closing tag, for formats that write them) is stripped: the first newline is
//! dropped when it comes, a trailing newline is held until it is known not to be the last
//! character. Formats whose values are trimmed (Step-3, MiniCPM-5) drop leading whitespace and hold
//! trailing whitespace the same way.

use crate::parse::json::{is_sentinel, push_escaped, push_json_string};
use crate::parse::out::{Channel, Out};
use crate::parse::schema::{coerce, retype_json, TypeSet};
use crate::parse::text::{scan, Scan, SegBuf};
use serde_json::Value;

/// How reading a value stopped (see [`ArgsBuilder::value`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueEnd {
    /// At a tag: the member is complete.
    Closed,
    /// The value may go on: wait for more input.
    Pending,
    /// The output ended inside the value: the call stays incomplete.
    Cut,
}

/// Bytes of stray text between elements (at least one character): up to the next `<` or marker.
pub(crate) fn stray_len(s: &str) -> usize {
    let first = s.chars().next().map_or(0, char::len_utf8);
    first
        + s[first..]
            .find(|c| c == '<' || is_sentinel(c))
            .unwrap_or(s.len() - first)
}

/// The arguments object of one call, built member by member and sent to the call as it grows.
#[derive(Debug, Default)]
pub(crate) struct ArgsBuilder {
    /// The call these arguments belong to.
    index: u32,
    members: usize,
    key: String,
    types: TypeSet,
    /// The property schema the converted value is then retyped by (DSML, as vLLM).
    schema: Option<Value>,
    /// Buffered raw value (typed values), or held trailing newline (string values).
    value: String,
    streaming: bool,
    value_started: bool,
    strip_newlines: bool,
    /// Values are trimmed of surrounding whitespace (unless the current one is verbatim).
    trim: bool,
    verbatim: bool,
    at_value_start: bool,
    in_member: bool,
    open: bool,
    closed: bool,
}

impl ArgsBuilder {
    /// A builder for a format whose values are framed by newlines (`strip_newlines`: one leading
    /// and one trailing newline per value are stripped) or not.
    pub(crate) fn new(strip_newlines: bool) -> Self {
        ArgsBuilder {
            strip_newlines,
            ..ArgsBuilder::default()
        }
    }

    /// A builder for a format whose values are trimmed of surrounding whitespace.
    pub(crate) fn trimming() -> Self {
        ArgsBuilder {
            trim: true,
            ..ArgsBuilder::default()
        }
    }

    /// The current value is taken as written, not trimmed (a CDATA section).
    pub(crate) fn verbatim(&mut self) {
        self.verbatim = true;
    }

    fn trims(&self) -> bool {
        self.trim && !self.verbatim
    }

    /// Bytes held back.
    pub(crate) fn held(&self) -> usize {
        self.value.len() + self.key.len()
    }

    /// Starts the arguments of call `index`: a new object, its opening brace sent.
    pub(crate) fn start(&mut self, index: u32, out: &mut Out) {
        *self = ArgsBuilder {
            index,
            open: true,
            trim: self.trim,
            ..ArgsBuilder::new(self.strip_newlines)
        };
        out.call_args(index, "{");
    }

    /// Starts a member whose value has `types`.
    pub(crate) fn begin(&mut self, key: &str, types: TypeSet) {
        self.key = key.to_string();
        self.types = types;
        self.schema = None;
        self.value.clear();
        self.streaming = types.is_string();
        self.value_started = false;
        self.at_value_start = true;
        self.verbatim = false;
        self.in_member = true;
    }

    /// The current member's value, once converted by its types, is retyped by its property
    /// `schema` (see [`retype_json`]); it is buffered until it closes.
    pub(crate) fn retype(&mut self, schema: Value) {
        self.schema = Some(schema);
        self.streaming = false;
    }

    /// Reads the current member's value at the start of `input` up to the first of `ends`: the
    /// value's own closing tag (`ends[0]`, consumed) or a tag that closes it implicitly (left in
    /// the input). With `end`, a value cut off by the end of the output closes the call.
    pub(crate) fn value(
        &mut self,
        input: &mut SegBuf,
        out: &mut Out,
        ends: &[&str],
        end: bool,
    ) -> ValueEnd {
        let mut text = String::new();
        let stop = match scan(input.as_str(), ends) {
            Scan::Found { at, index } => {
                self.text(&input.as_str()[..at], &mut text);
                out.route(input, at, Channel::Tool);
                self.end(&mut text);
                if index == 0 {
                    out.route(input, ends[0].len(), Channel::Tool);
                }
                ValueEnd::Closed
            }
            Scan::Partial { at } if !end => {
                self.text(&input.as_str()[..at], &mut text);
                out.route(input, at, Channel::Tool);
                ValueEnd::Pending
            }
            _ => {
                self.text(input.as_str(), &mut text);
                out.route_all(input, Channel::Tool);
                if end {
                    // Cut off: the value stays as read, the arguments unclosed.
                    ValueEnd::Cut
                } else {
                    ValueEnd::Pending
                }
            }
        };
        out.call_args(self.index, &text);
        stop
    }

    /// Ends any open member and closes the call's arguments object: the call is complete.
    pub(crate) fn finish(&mut self, out: &mut Out) {
        let mut text = String::new();
        self.close(&mut text);
        out.call_args(self.index, &text);
        out.end_call(self.index);
    }

    /// The output ended inside the call: the rest of the input is the call's, and its arguments
    /// stay as read (the call is incomplete).
    pub(crate) fn cut_off(&mut self, input: &mut SegBuf, out: &mut Out) {
        out.route_all(input, Channel::Tool);
    }

    /// Adds raw value text.
    fn text(&mut self, s: &str, out: &mut String) {
        let mut s = s;
        if self.at_value_start && !s.is_empty() {
            if self.trims() {
                s = s.trim_start_matches(|c: char| c.is_ascii_whitespace());
                if s.is_empty() {
                    return;
                }
            }
            self.at_value_start = false;
            if self.strip_newlines {
                s = s.strip_prefix('\n').unwrap_or(s);
            }
        }
        if s.is_empty() {
            return;
        }
        if !self.streaming {
            self.value.push_str(s);
            return;
        }
        // A held newline is text after all once more text follows it.
        let mut chunk = std::mem::take(&mut self.value);
        chunk.push_str(s);
        // Held back: a last newline (newline framing) or trailing whitespace (trimmed values).
        let held = if self.trims() {
            chunk.len()
                - chunk
                    .trim_end_matches(|c: char| c.is_ascii_whitespace())
                    .len()
        } else {
            usize::from(self.strip_newlines && chunk.ends_with('\n'))
        };
        let emit = &chunk[..chunk.len() - held];
        if !emit.is_empty() {
            self.start_string(out);
            push_escaped(emit, out);
        }
        let tail = chunk[chunk.len() - held..].to_string();
        self.value.push_str(&tail);
    }

    fn start_string(&mut self, out: &mut String) {
        if !self.value_started {
            self.value_started = true;
            self.key_prefix(out);
            out.push('"');
        }
    }

    fn key_prefix(&mut self, out: &mut String) {
        if self.members > 0 {
            out.push_str(", ");
        }
        push_json_string(&self.key, out);
        out.push_str(": ");
        self.members += 1;
    }

    /// Ends the current member (also when the output was cut off inside it).
    fn end(&mut self, out: &mut String) {
        if !self.in_member {
            return;
        }
        self.in_member = false;
        if self.streaming {
            // The held trailing newline is the template's framing.
            if !self.strip_newlines && !self.trims() {
                let held = std::mem::take(&mut self.value);
                if !held.is_empty() {
                    self.start_string(out);
                    push_escaped(&held, out);
                }
            }
            self.start_string(out);
            out.push('"');
        } else {
            let mut raw = std::mem::take(&mut self.value);
            if self.strip_newlines && raw.ends_with('\n') {
                raw.pop();
            }
            if self.trims() {
                raw = raw
                    .trim_end_matches(|c: char| c.is_ascii_whitespace())
                    .to_string();
            }
            self.key_prefix(out);
            let typed = coerce(&raw, self.types);
            match self.schema.take() {
                Some(schema) => out.push_str(&retype_json(&typed, &schema)),
                None => out.push_str(&typed),
            }
        }
        self.key.clear();
        self.value.clear();
    }

    /// Ends any open member and closes the object (`{}` when no member came).
    fn close(&mut self, out: &mut String) {
        if self.closed {
            return;
        }
        self.end(out);
        if !self.open {
            out.push('{');
            self.open = true;
        }
        out.push('}');
        self.closed = true;
    }
}
