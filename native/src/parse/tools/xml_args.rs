//! Building a call's JSON arguments from key/value pairs whose values arrive as raw text (the
//! XML-style formats: `qwen3_coder`, GLM, MiniMax, DSML).
//!
//! A value whose parameter is a plain string (by the request's tool schema, or unknown) streams:
//! `"key": "` goes out with its first character, then the text, JSON-escaped as it arrives. Any
//! other type is buffered until the value closes and then converted by the schema (see
//! [`crate::parse::schema`]). Template framing around values (a newline after the opening tag and
//! one before the closing tag, for formats that write them) is stripped: the first newline is
//! dropped when it comes, a trailing newline is held until it is known not to be the last
//! character.

use crate::parse::json::{push_escaped, push_json_string};
use crate::parse::schema::{coerce, TypeSet};

/// The arguments object of one call, built member by member.
#[derive(Debug, Default)]
pub(crate) struct ArgsBuilder {
    members: usize,
    key: String,
    types: TypeSet,
    /// Buffered raw value (typed values), or held trailing newline (string values).
    value: String,
    streaming: bool,
    value_started: bool,
    strip_newlines: bool,
    at_value_start: bool,
    in_member: bool,
    open: bool,
    closed: bool,
}

impl ArgsBuilder {
    /// Starts the object; `strip_newlines` strips one leading and one trailing newline per value.
    pub(crate) fn new(strip_newlines: bool) -> Self {
        ArgsBuilder {
            strip_newlines,
            ..ArgsBuilder::default()
        }
    }

    /// Bytes held back.
    pub(crate) fn held(&self) -> usize {
        self.value.len() + self.key.len()
    }

    /// Emits the opening brace.
    pub(crate) fn open(&mut self, out: &mut String) {
        if !self.open {
            out.push('{');
            self.open = true;
        }
    }

    /// Starts a member whose value has `types`.
    pub(crate) fn begin(&mut self, key: &str, types: TypeSet, out: &mut String) {
        self.open(out);
        self.key = key.to_string();
        self.types = types;
        self.value.clear();
        self.streaming = types.is_string();
        self.value_started = false;
        self.at_value_start = true;
        self.in_member = true;
    }

    /// Adds raw value text.
    pub(crate) fn text(&mut self, s: &str, out: &mut String) {
        let mut s = s;
        if self.at_value_start && !s.is_empty() {
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
        let keep_newline = self.strip_newlines && chunk.ends_with('\n');
        let emit = if keep_newline {
            &chunk[..chunk.len() - 1]
        } else {
            &chunk[..]
        };
        if !emit.is_empty() {
            self.start_string(out);
            push_escaped(emit, out);
        }
        if keep_newline {
            self.value.push('\n');
        }
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
    pub(crate) fn end(&mut self, out: &mut String) {
        if !self.in_member {
            return;
        }
        self.in_member = false;
        if self.streaming {
            // The held trailing newline is the template's framing.
            if !self.strip_newlines {
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
            self.key_prefix(out);
            out.push_str(&coerce(&raw, self.types));
        }
        self.key.clear();
        self.value.clear();
    }

    /// Ends any open member and closes the object (`{}` when no member came).
    pub(crate) fn close(&mut self, out: &mut String) {
        if self.closed {
            return;
        }
        self.end(out);
        self.open(out);
        out.push('}');
        self.closed = true;
    }
}
