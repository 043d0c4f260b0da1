//! `kimi_k2`: `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>`
//! (the singular `<|tool_call_section_begin|>` spelling too).
//!
//! The header `functions.NAME:IDX` is Kimi's own call id: it is kept verbatim as the id (clients
//! must echo it back). The name is the header without the `functions.` prefix and the `:IDX`
//! suffix; when the model drops the separators (`functionsexec5`), the `functions` prefix and the
//! trailing digits are removed. A call starts when the `{` of its arguments arrives (arguments that
//! are not an object make no call). Text inside the section outside calls is framing; a section cut
//! off keeps its complete and partial calls.

use crate::parse::json::JsonRelay;
use crate::parse::out::{Channel, Out};
use crate::parse::schema::Tools;
use crate::parse::text::{ascii_trim, leading_ws, scan, Markers, Scan, SegBuf};
use crate::parse::tools::stream_json_args;
use crate::parse::Stage;

/// The markers this format uses.
pub(crate) const MARKERS: &[&str] = &[
    "<|tool_calls_section_begin|>",
    "<|tool_call_section_begin|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_section_end|>",
];

/// The function name in a Kimi call header (see the module docs).
pub(crate) fn name_of(header: &str) -> String {
    if let Some((left, index)) = header.rsplit_once(':') {
        if !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()) {
            return left.strip_prefix("functions.").unwrap_or(left).to_string();
        }
    }
    if let Some(rest) = header.strip_prefix("functions.") {
        return rest.to_string();
    }
    let rest = header
        .strip_prefix("functions")
        .filter(|r| !r.is_empty())
        .unwrap_or(header);
    let trimmed = rest.trim_end_matches(|c: char| c.is_ascii_digit());
    if trimmed.is_empty() {
        rest.to_string()
    } else {
        trimmed.to_string()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Content,
    Section,
    Header,
    Args { index: u32 },
    CallTail,
}

/// The parser (see the module docs).
pub(crate) struct Kimi {
    section_begin: [String; 2],
    call_begin: String,
    arg_begin: String,
    call_end: String,
    section_end: [String; 2],
    state: State,
    relay: JsonRelay,
}

/// The parser of a request (registry constructor).
pub(crate) fn build(markers: &Markers, _tools: &Tools) -> Box<dyn Stage> {
    Box::new(Kimi::new(markers))
}

impl Kimi {
    pub(crate) fn new(markers: &Markers) -> Self {
        let p = |i: usize| markers.pattern(MARKERS[i]);
        Kimi {
            section_begin: [p(0), p(1)],
            call_begin: p(2),
            arg_begin: p(3),
            call_end: p(4),
            section_end: [p(5), p(6)],
            state: State::Content,
            relay: JsonRelay::object(),
        }
    }

    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Content => {
                let pats = [
                    self.section_begin[0].as_str(),
                    self.section_begin[1].as_str(),
                    self.call_begin.as_str(),
                ];
                let index = out.route_until(input, &pats, Channel::Content, end)?;
                out.route(input, pats[index].len(), Channel::Framing);
                self.state = if index == 2 {
                    State::Header
                } else {
                    State::Section
                };
            }
            State::Section | State::CallTail => {
                let pats = [
                    self.call_begin.as_str(),
                    self.section_end[0].as_str(),
                    self.section_end[1].as_str(),
                    self.call_end.as_str(),
                ];
                let index = out.route_until(input, &pats, Channel::Framing, end)?;
                out.route(input, pats[index].len(), Channel::Framing);
                self.state = match index {
                    0 => State::Header,
                    1 | 2 => State::Content,
                    _ => State::Section,
                };
            }
            State::Header => self.header(input, out, end)?,
            State::Args { index } => {
                if !stream_json_args(&mut self.relay, index, input, out, end) {
                    return None;
                }
                self.state = State::CallTail;
            }
        }
        Some(())
    }

    /// `functions.NAME:IDX<|tool_call_argument_begin|>{`: the call starts at the `{` of its
    /// arguments; a header without them (or with arguments that are no object) is framing.
    fn header(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let pats = [
            self.arg_begin.as_str(),
            self.call_end.as_str(),
            self.call_begin.as_str(),
            self.section_end[0].as_str(),
            self.section_end[1].as_str(),
        ];
        let s = input.as_str();
        match scan(s, &pats) {
            Scan::Found { at, index: 0 } => {
                let header = ascii_trim(&s[..at]).to_string();
                let body = at + self.arg_begin.len();
                let ws = leading_ws(&s[body..]);
                match s[body + ws..].chars().next() {
                    Some('{') if !header.is_empty() => {
                        let index = out.start_call(&name_of(&header), Some(header));
                        out.route(input, body + ws, Channel::Tool);
                        self.relay = JsonRelay::object();
                        self.state = State::Args { index };
                    }
                    None if !end => return None,
                    _ => {
                        out.route(input, body, Channel::Framing);
                        self.state = State::CallTail;
                    }
                }
            }
            // A header without arguments is framing.
            Scan::Found { at, .. } => {
                out.route(input, at, Channel::Framing);
                self.state = State::CallTail;
            }
            _ if end => out.route_all(input, Channel::Framing),
            _ => return None,
        }
        Some(())
    }
}

impl Stage for Kimi {
    fn held(&self) -> usize {
        self.relay.held()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        while self.step(input, out, end).is_some() {
            if input.is_empty() && !(end && matches!(self.state, State::Args { .. })) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::name_of;

    #[test]
    fn names_from_headers() {
        assert_eq!(name_of("functions.get_weather:0"), "get_weather");
        assert_eq!(name_of("functions.a.b:12"), "a.b");
        assert_eq!(name_of("get_weather:1"), "get_weather");
        assert_eq!(name_of("functions.search"), "search");
        assert_eq!(name_of("functionsexec5"), "exec");
        assert_eq!(name_of("plain"), "plain");
    }
}
