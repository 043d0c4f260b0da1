//! `mistral`: calls after `[TOOL_CALLS]`, in the dialect the model's tokenizer version uses:
//!
//! - array (pre-v11, Mistral NeMo): `[TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]`;
//! - name form (v11+): `[TOOL_CALLS]f{...}`, `[TOOL_CALLS]f[ARGS]{...}` or
//!   `[TOOL_CALLS]f[CALL_ID]abc123XYZ[ARGS]{...}`, repeated per call.
//!
//! The dialect is read from the text after the marker. Call ids are 9 alphanumerics (Mistral's
//! templates require that shape) unless the model wrote one after `[CALL_ID]`. A marker followed by
//! anything else is content.

use crate::parse::json::JsonRelay;
use crate::parse::out::{Channel, Out};
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
    /// Inside `[...]`: before an element (`first`) or after one.
    ArrayItem {
        first: bool,
    },
    ArrayNext,
    /// Reading an element object not yet known to be a call.
    ArrayUndecided {
        cursor: usize,
    },
    ArrayCall {
        index: u32,
    },
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

impl Mistral {
    pub(crate) fn new(markers: &Markers) -> Self {
        Mistral {
            tag: markers.pattern(MARKERS[0]),
            args_tag: markers.pattern(MARKERS[1]),
            id_tag: markers.pattern(MARKERS[2]),
            state: State::Content,
            call: JsonCall::new(ARG_KEYS),
            relay: JsonRelay::new(),
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

impl Stage for Mistral {
    fn held(&self) -> usize {
        self.call.held() + self.relay.held()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        loop {
            match self.state {
                State::Content => {
                    if out
                        .route_until(input, &[&self.tag], Channel::Content, end)
                        .is_none()
                    {
                        return;
                    }
                    self.state = State::AfterTag {
                        marker: self.tag.len(),
                    };
                }
                State::AfterTag { marker } => {
                    let s = &input.as_str()[marker..];
                    let ws = leading_ws(s);
                    let after = &s[ws..];
                    if let Some(inner) = after.strip_prefix('[') {
                        let inner = &inner[leading_ws(inner)..];
                        match inner.chars().next() {
                            Some('{' | ']') => {
                                out.route(input, marker + ws + 1, Channel::Framing);
                                self.state = State::ArrayItem { first: true };
                            }
                            None if !end => return,
                            _ => {
                                out.route(input, marker, Channel::Content);
                                self.state = State::Content;
                            }
                        }
                    } else if after.starts_with(is_name_char) {
                        self.state = State::Header { marker };
                    } else if after.is_empty() && !end {
                        return;
                    } else {
                        out.route(input, marker, Channel::Content);
                        self.state = State::Content;
                    }
                }
                State::Header { marker } => {
                    let s = &input.as_str()[marker..];
                    match self.header(s, end) {
                        None => return,
                        Some(Err(())) => {
                            out.route(input, marker, Channel::Content);
                            self.state = State::Content;
                        }
                        Some(Ok((name, id, len))) => {
                            let index = out.start_call(&name, id);
                            out.route(input, marker, Channel::Framing);
                            out.route(input, len, Channel::Tool);
                            self.relay = JsonRelay::new();
                            self.state = State::Args { index };
                        }
                    }
                }
                State::Args { index } => {
                    if !stream_json_args(&mut self.relay, index, input, out, end) {
                        return;
                    }
                    self.state = State::Content;
                }
                State::ArrayItem { first } => {
                    let s = input.as_str();
                    let ws = leading_ws(s);
                    let after = &s[ws..];
                    if after.starts_with('{') {
                        self.call = JsonCall::new(ARG_KEYS);
                        self.state = State::ArrayUndecided { cursor: 0 };
                    } else if first && after.starts_with(']') {
                        out.route(input, ws + 1, Channel::Framing);
                        self.state = State::Content;
                    } else if after.is_empty() && !end {
                        return;
                    } else {
                        self.state = State::Content;
                    }
                }
                State::ArrayUndecided { cursor } => {
                    let (n, event) = self.call.feed(&input.as_str()[cursor..]);
                    let cursor = cursor + n;
                    match event {
                        CallEvent::Named => {
                            let index = self.call.start(out);
                            out.route(input, cursor, Channel::Tool);
                            self.state = State::ArrayCall { index };
                        }
                        CallEvent::More if !end => {
                            self.state = State::ArrayUndecided { cursor };
                            return;
                        }
                        _ => self.state = State::Content,
                    }
                }
                State::ArrayCall { index } => {
                    let Some(event) = self.call.stream(index, input, out, end) else {
                        return;
                    };
                    self.state = if event == CallEvent::Done {
                        State::ArrayNext
                    } else {
                        State::Content
                    };
                }
                State::ArrayNext => {
                    let s = input.as_str();
                    let ws = leading_ws(s);
                    let after = &s[ws..];
                    if after.starts_with(',') {
                        out.route(input, ws + 1, Channel::Framing);
                        self.state = State::ArrayItem { first: false };
                    } else if after.starts_with(']') {
                        out.route(input, ws + 1, Channel::Framing);
                        self.state = State::Content;
                    } else if after.is_empty() && !end {
                        return;
                    } else {
                        self.state = State::Content;
                    }
                }
            }
        }
    }
}
