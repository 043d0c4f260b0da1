//! `plamo3` (PLaMo 3): `<|plamo:begin_tool_requests:plamo|>` then per call
//! `<|plamo:begin_tool_request:plamo|><|plamo:begin_tool_name:plamo|>NAME<|plamo:end_tool_name:plamo|>
//! <|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>{...}
//! <|plamo:end_tool_arguments:plamo|><|plamo:end_tool_request:plamo|>`, and
//! `<|plamo:end_tool_requests:plamo|>`.
//!
//! As in a Kimi section: a call starts at the `{` of its arguments (a name without them is no
//! call), the arguments stream through the JSON relay, and text inside the section outside calls
//! is framing. The `<|plamo:constrain|>json<|plamo:msg|>` constraint header is optional.

use crate::parse::json::JsonRelay;
use crate::parse::out::{Channel, Out};
use crate::parse::schema::Tools;
use crate::parse::text::{ascii_trim, could_become, leading_ws, scan, Markers, Scan, SegBuf};
use crate::parse::tools::stream_json_args;
use crate::parse::Stage;

/// The markers this format uses.
pub(crate) const MARKERS: &[&str] = &[
    "<|plamo:begin_tool_requests:plamo|>",
    "<|plamo:end_tool_requests:plamo|>",
    "<|plamo:begin_tool_name:plamo|>",
    "<|plamo:end_tool_name:plamo|>",
    "<|plamo:begin_tool_arguments:plamo|>",
    "<|plamo:constrain|>",
    "<|plamo:msg|>",
    "<|plamo:begin_tool_request:plamo|>",
    "<|plamo:end_tool_arguments:plamo|>",
    "<|plamo:end_tool_request:plamo|>",
];

const SECTION_BEGIN: usize = 0;
const SECTION_END: usize = 1;
const NAME_BEGIN: usize = 2;
const NAME_END: usize = 3;
const ARGS_BEGIN: usize = 4;
const CONSTRAIN: usize = 5;
const MSG: usize = 6;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Content,
    Section,
    /// The input starts with the name's begin tag.
    Header,
    Args {
        index: u32,
    },
}

/// The parser (see the module docs).
struct Plamo3 {
    /// The patterns of [`MARKERS`], in order.
    tags: Vec<String>,
    state: State,
    relay: JsonRelay,
}

/// The parser of a request (registry constructor).
pub(crate) fn build(markers: &Markers, _tools: &Tools) -> Box<dyn Stage> {
    Box::new(Plamo3 {
        tags: MARKERS.iter().map(|m| markers.pattern(m)).collect(),
        state: State::Content,
        relay: JsonRelay::object(),
    })
}

/// How far a header reads: a call whose `{` is at `body`, text that is no call (`framing` bytes),
/// or not decided yet.
enum Header {
    Call { name: String, body: usize },
    NoCall { framing: usize },
    Undecided,
}

impl Plamo3 {
    fn tag(&self, i: usize) -> &str {
        &self.tags[i]
    }

    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Content => {
                let begin = self.tag(SECTION_BEGIN).len();
                out.route_until(input, &[self.tag(SECTION_BEGIN)], Channel::Content, end)?;
                out.route(input, begin, Channel::Framing);
                self.state = State::Section;
            }
            State::Section => {
                let pats = [self.tag(NAME_BEGIN), self.tag(SECTION_END)];
                let index = out.route_until(input, &pats, Channel::Framing, end)?;
                if index == 1 {
                    let n = pats[1].len();
                    out.route(input, n, Channel::Framing);
                    self.state = State::Content;
                } else {
                    self.state = State::Header;
                }
            }
            State::Header => match self.header(input.as_str(), end) {
                Header::Call { name, body } => {
                    let index = out.start_call(&name, None);
                    out.route(input, body, Channel::Tool);
                    self.relay = JsonRelay::object();
                    self.state = State::Args { index };
                }
                Header::NoCall { framing } => {
                    out.route(input, framing, Channel::Framing);
                    self.state = State::Section;
                }
                Header::Undecided => return None,
            },
            State::Args { index } => {
                if !stream_json_args(&mut self.relay, index, input, out, end) {
                    return None;
                }
                self.state = State::Section;
            }
        }
        Some(())
    }

    /// `<begin_tool_name>NAME<end_tool_name><begin_tool_arguments>[<constrain>json<msg>]{`.
    fn header(&self, s: &str, end: bool) -> Header {
        let start = self.tag(NAME_BEGIN).len();
        let stops = [
            self.tag(NAME_END),
            self.tag(SECTION_END),
            self.tag(NAME_BEGIN),
        ];
        let name_end = match scan(&s[start..], &stops) {
            Scan::Found { at, index: 0 } => start + at,
            Scan::Found { at, .. } => {
                return Header::NoCall {
                    framing: start + at,
                }
            }
            _ if end => return Header::NoCall { framing: s.len() },
            _ => return Header::Undecided,
        };
        let name = ascii_trim(&s[start..name_end]).to_string();
        let mut at = name_end + self.tag(NAME_END).len();
        for (i, optional) in [(ARGS_BEGIN, false), (CONSTRAIN, true)] {
            at += leading_ws(&s[at..]);
            let rest = &s[at..];
            if rest.starts_with(self.tag(i)) {
                at += self.tag(i).len();
                if i == CONSTRAIN {
                    // The constraint's kind (`json`) runs up to `<|plamo:msg|>`.
                    match scan(&s[at..], &[self.tag(MSG)]) {
                        Scan::Found { at: kind, .. } => at += kind + self.tag(MSG).len(),
                        _ if end => return Header::NoCall { framing: s.len() },
                        _ => return Header::Undecided,
                    }
                }
            } else if !end && (rest.is_empty() || could_become(rest, self.tag(i))) {
                return Header::Undecided;
            } else if !optional {
                return Header::NoCall { framing: at };
            }
        }
        at += leading_ws(&s[at..]);
        match s[at..].chars().next() {
            Some('{') if !name.is_empty() => Header::Call { name, body: at },
            None if !end => Header::Undecided,
            _ => Header::NoCall { framing: at },
        }
    }
}

impl Stage for Plamo3 {
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
