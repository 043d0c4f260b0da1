//! `mistral`: calls after `[TOOL_CALLS]`, in the dialect the model's tokenizer version uses:
//!
//! - array (pre-v11, Mistral NeMo): `[TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]`, or
//!   one such object without the brackets;
//! - name form (v11+): `[TOOL_CALLS]f{...}`, `[TOOL_CALLS]f[ARGS]{...}` or
//!   `[TOOL_CALLS]f[CALL_ID]abc123XYZ[ARGS]{...}`, repeated per call.
//!
//! The dialect is read from the text after the marker. Call ids are 9 alphanumerics (Mistral's
//! templates require that shape) unless the model wrote one after `[CALL_ID]`. A marker followed by
//! anything else is content; so are the marker and `[` when the first object is not a call.

use crate::parse::json::JsonRelay;
use crate::parse::out::{Channel, Out};
use crate::parse::schema::Tools;
use crate::parse::text::{could_become, leading_ws, Markers, SegBuf};
use crate::parse::tools::json_block::{BlockSpec, Body, JsonBlock};
use crate::parse::tools::stream_json_args;
use crate::parse::Stage;

/// The markers this format uses.
pub(crate) const MARKERS: &[&str] = &["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"];

/// The array form and the bare object: the JSON-call family's reader, entered after the marker.
const JSON_BODY: BlockSpec = BlockSpec {
    body: Body::Either,
    ..BlockSpec::PLAIN
};

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// A call header: name, the model's call id, and its length up to the arguments.
type Header = (String, Option<String>, usize);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Content,
    /// The input starts with the marker (`marker` bytes), not yet routed.
    AfterTag {
        marker: usize,
    },
    /// The array form or one call object, read by `block`.
    Json,
    /// Reading `name` then `[CALL_ID]id` / `[ARGS]` / `{`; the input starts with the marker.
    Header {
        marker: usize,
    },
    Args {
        index: u32,
    },
}

/// The parser (see the module docs).
pub(crate) struct Mistral {
    tag: String,
    args_tag: String,
    id_tag: String,
    state: State,
    block: JsonBlock,
    relay: JsonRelay,
}

/// The parser of a request (registry constructor).
pub(crate) fn build(markers: &Markers, _tools: &Tools) -> Box<dyn Stage> {
    Box::new(Mistral::new(markers))
}

impl Mistral {
    pub(crate) fn new(markers: &Markers) -> Self {
        Mistral {
            tag: markers.pattern(MARKERS[0]),
            args_tag: markers.pattern(MARKERS[1]),
            id_tag: markers.pattern(MARKERS[2]),
            state: State::Content,
            block: JsonBlock::new(&JSON_BODY, markers),
            relay: JsonRelay::object(),
        }
    }

    /// Reads `name[CALL_ID]id[ARGS]` (or a prefix of it) after the marker: `Some(Ok((name, id,
    /// header length)))` once the arguments' `{` is next, `Some(Err(()))` when this is no header,
    /// `None` to wait.
    fn header(&self, s: &str, end: bool) -> Option<Result<Header, ()>> {
        let name_len = s.find(|c: char| !is_name_char(c)).unwrap_or(s.len());
        if name_len == 0 {
            return Some(Err(()));
        }
        let name = s[..name_len].to_string();
        let mut pos = name_len;
        let mut id = None;
        let rest = &s[pos..];
        if rest.starts_with(self.id_tag.as_str()) {
            pos += self.id_tag.len();
            let id_len = s[pos..]
                .find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(s.len() - pos);
            if pos + id_len == s.len() {
                return if end { Some(Err(())) } else { None };
            }
            id = Some(s[pos..pos + id_len].to_string());
            pos += id_len;
        }
        let rest = &s[pos..];
        if rest.starts_with(self.args_tag.as_str()) {
            pos += self.args_tag.len();
        }
        let rest = &s[pos..];
        let ws = leading_ws(rest);
        match rest[ws..].chars().next() {
            Some('{') => Some(Ok((name, id, pos + ws))),
            None if !end => None,
            Some(_)
                if !end
                    && [self.id_tag.as_str(), self.args_tag.as_str()]
                        .iter()
                        .any(|t| could_become(rest, t)) =>
            {
                None
            }
            _ => Some(Err(())),
        }
    }
}

impl Mistral {
    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Content => {
                out.route_until(input, &[&self.tag], Channel::Content, end)?;
                self.state = State::AfterTag {
                    marker: self.tag.len(),
                };
            }
            State::AfterTag { marker } => self.after_tag(marker, input, end)?,
            State::Header { marker } => self.read_header(marker, input, out, end)?,
            State::Args { index } => {
                if !stream_json_args(&mut self.relay, index, input, out, end) {
                    return None;
                }
                self.state = State::Content;
            }
            State::Json => {
                if self.block.advance(input, out, end)? {
                    self.state = State::Content;
                }
            }
        }
        Some(())
    }

    /// After `[TOOL_CALLS]`: an array of call objects, one call object, or a name header.
    fn after_tag(&mut self, marker: usize, input: &SegBuf, end: bool) -> Option<()> {
        let s = &input.as_str()[marker..];
        let ws = leading_ws(s);
        let after = &s[ws..];
        match after.chars().next() {
            None if !end => return None,
            Some(c) if is_name_char(c) && ws == 0 => self.state = State::Header { marker },
            _ => {
                self.block.enter(marker);
                self.state = State::Json;
            }
        }
        Some(())
    }

    fn read_header(
        &mut self,
        marker: usize,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<()> {
        let s = &input.as_str()[marker..];
        match self.header(s, end)? {
            Err(()) => {
                out.route(input, marker, Channel::Content);
                self.state = State::Content;
            }
            Ok((name, id, len)) => {
                let index = out.start_call(&name, id);
                out.route(input, marker, Channel::Framing);
                out.route(input, len, Channel::Tool);
                self.relay = JsonRelay::object();
                self.state = State::Args { index };
            }
        }
        Some(())
    }
}

impl Stage for Mistral {
    fn held(&self) -> usize {
        self.block.held() + self.relay.held()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        while self.step(input, out, end).is_some() {
            let busy = match self.state {
                State::Json => self.block.busy(end),
                State::Args { .. } => end,
                _ => false,
            };
            if input.is_empty() && !busy {
                return;
            }
        }
    }
}
