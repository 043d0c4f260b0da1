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
use crate::parse::tools::json_call::{CallEvent, JsonCall};
use crate::parse::tools::stream_json_args;
use crate::parse::Stage;

/// The markers this format uses.
pub(crate) const MARKERS: &[&str] = &["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"];

const ARG_KEYS: &[&str] = &["arguments", "parameters"];

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
    /// Reading a call object not yet known to be a call: the first `prefix` bytes (the marker,
    /// `[`, whitespace) are framing if it is one and content if not; `cursor` bytes read.
    /// `array`: an element of `[...]` (more may follow).
    Undecided {
        prefix: usize,
        cursor: usize,
        array: bool,
    },
    /// Inside a call object.
    ObjectCall {
        index: u32,
        array: bool,
    },
    /// Inside `[...]` after an element: `,` or `]`.
    ArrayNext,
    /// Inside `[...]` after `,`: the next element.
    ArrayItem,
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
    call: JsonCall,
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
            call: JsonCall::new(ARG_KEYS),
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
            State::AfterTag { marker } => self.after_tag(marker, input, out, end)?,
            State::Header { marker } => self.read_header(marker, input, out, end)?,
            State::Args { index } => {
                if !stream_json_args(&mut self.relay, index, input, out, end) {
                    return None;
                }
                self.state = State::Content;
            }
            State::Undecided {
                prefix,
                cursor,
                array,
            } => self.undecided(prefix, cursor, array, input, out, end)?,
            State::ObjectCall { index, array } => {
                let event = self.call.stream(index, input, out, end)?;
                self.state = match (event, array) {
                    (CallEvent::Done, true) => State::ArrayNext,
                    _ => State::Content,
                };
            }
            State::ArrayNext => self.array_next(input, out, end)?,
            State::ArrayItem => {
                let s = input.as_str();
                let after = &s[leading_ws(s)..];
                if after.is_empty() && !end {
                    return None;
                }
                self.state = if after.starts_with('{') {
                    self.call = JsonCall::new(ARG_KEYS);
                    State::Undecided {
                        prefix: 0,
                        cursor: 0,
                        array: true,
                    }
                } else {
                    State::Content
                };
            }
        }
        Some(())
    }

    /// After `[TOOL_CALLS]`: an array of call objects, one call object, or a name header.
    fn after_tag(
        &mut self,
        marker: usize,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<()> {
        let s = &input.as_str()[marker..];
        let ws = leading_ws(s);
        let after = &s[ws..];
        let (array, inner) = match after.strip_prefix('[') {
            Some(inner) => (true, inner),
            None => (false, after),
        };
        let ws2 = leading_ws(inner);
        match inner[ws2..].chars().next() {
            Some('{') => {
                self.call = JsonCall::new(ARG_KEYS);
                let prefix = marker + ws + usize::from(array) + ws2;
                self.state = State::Undecided {
                    prefix,
                    cursor: prefix,
                    array,
                };
            }
            Some(']') if array => {
                out.route(input, marker + ws + 1 + ws2 + 1, Channel::Framing);
                self.state = State::Content;
            }
            Some(c) if !array && is_name_char(c) && ws == 0 => {
                self.state = State::Header { marker };
            }
            None if !end => return None,
            _ => {
                out.route(input, marker, Channel::Content);
                self.state = State::Content;
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

    fn undecided(
        &mut self,
        prefix: usize,
        cursor: usize,
        array: bool,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<()> {
        let (n, event) = self.call.feed(&input.as_str()[cursor..]);
        let cursor = cursor + n;
        match event {
            CallEvent::Named => {
                let index = self.call.start(out);
                out.route(input, prefix, Channel::Framing);
                out.route(input, cursor - prefix, Channel::Tool);
                self.state = State::ObjectCall { index, array };
            }
            CallEvent::More if !end => {
                self.state = State::Undecided {
                    prefix,
                    cursor,
                    array,
                };
                return None;
            }
            // Not a call: what was held is content.
            _ => {
                out.route(input, prefix, Channel::Content);
                self.state = State::Content;
            }
        }
        Some(())
    }

    fn array_next(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let s = input.as_str();
        let ws = leading_ws(s);
        let after = &s[ws..];
        if after.starts_with(',') {
            out.route(input, ws + 1, Channel::Framing);
            self.state = State::ArrayItem;
        } else if after.starts_with(']') {
            out.route(input, ws + 1, Channel::Framing);
            self.state = State::Content;
        } else if after.is_empty() && !end {
            return None;
        } else {
            self.state = State::Content;
        }
        Some(())
    }
}

impl Stage for Mistral {
    fn held(&self) -> usize {
        self.call.held() + self.relay.held()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        while self.step(input, out, end).is_some() {
            let busy = matches!(
                self.state,
                State::Undecided { .. } | State::ObjectCall { .. } | State::Args { .. }
            );
            if input.is_empty() && !(busy && end) {
                return;
            }
        }
    }
}
