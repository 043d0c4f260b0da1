//! DeepSeek-V3 and V3.1 tool calls (their markers are single tokens in DeepSeek's vocabulary):
//!
//! - `deepseek_v3`: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>`
//! - `deepseek_v31`: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>`
//!
//! A call starts when its name is complete. Inside the section, text outside calls (the JSON fence,
//! whitespace, anything malformed) is framing; text before and after the section is content. A
//! section or call begin marker missing is tolerated (`<｜tool▁call▁begin｜>` alone opens a
//! section, a new call begin ends the previous call).

use crate::parse::json::{is_sentinel, JsonRelay};
use crate::parse::out::{Channel, Out};
use crate::parse::text::{ascii_trim, could_become, leading_ws, scan, Markers, Scan, SegBuf};
use crate::parse::tools::stream_json_args;
use crate::parse::Stage;

/// The markers both dialects use.
pub(crate) const MARKERS: &[&str] = &[
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>",
];

/// Which header layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// `function<sep>NAME\n```json\n{...}\n````
    V3,
    /// `NAME<sep>{...}`
    V31,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Content,
    Section,
    Header,
    /// v3: after the name, before the arguments' `{`.
    Fence {
        index: u32,
    },
    Args {
        index: u32,
    },
    /// Framing up to the call's end marker.
    CallTail,
}

/// The parser (see the module docs).
pub(crate) struct DeepSeek {
    dialect: Dialect,
    calls_begin: String,
    call_begin: String,
    sep: String,
    call_end: String,
    calls_end: String,
    state: State,
    relay: JsonRelay,
}

impl DeepSeek {
    pub(crate) fn new(markers: &Markers, dialect: Dialect) -> Self {
        let p = |i: usize| markers.pattern(MARKERS[i]);
        DeepSeek {
            dialect,
            calls_begin: p(0),
            call_begin: p(1),
            sep: p(2),
            call_end: p(3),
            calls_end: p(4),
            state: State::Content,
            relay: JsonRelay::new(),
        }
    }
}

impl Stage for DeepSeek {
    fn held(&self) -> usize {
        self.relay.held()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        loop {
            match self.state {
                State::Content => {
                    let patterns = [self.calls_begin.as_str(), self.call_begin.as_str()];
                    let Some(index) = out.route_until(input, &patterns, Channel::Content, end)
                    else {
                        return;
                    };
                    out.route(input, patterns[index].len(), Channel::Framing);
                    self.state = if index == 0 {
                        State::Section
                    } else {
                        State::Header
                    };
                }
                State::Section => {
                    let patterns = [self.call_begin.as_str(), self.calls_end.as_str()];
                    let Some(index) = out.route_until(input, &patterns, Channel::Framing, end)
                    else {
                        return;
                    };
                    out.route(input, patterns[index].len(), Channel::Framing);
                    self.state = if index == 0 {
                        State::Header
                    } else {
                        State::Content
                    };
                }
                State::Header => {
                    let s = input.as_str();
                    // The name ends at the separator (v3.1) or at the end of the line after it (v3).
                    let (name, consumed) = match self.dialect {
                        Dialect::V31 => match scan(
                            s,
                            &[&self.sep, &self.call_end, &self.call_begin, &self.calls_end],
                        ) {
                            Scan::Found { at, index: 0 } => {
                                (Some(ascii_trim(&s[..at]).to_string()), at + self.sep.len())
                            }
                            Scan::Found { at, .. } => (None, at),
                            _ if end => (None, s.len()),
                            _ => return,
                        },
                        // The separator counts only before the call's other markers: a header
                        // cut short by `<｜tool▁call▁end｜>` is malformed, whatever follows.
                        Dialect::V3 => match scan(
                            s,
                            &[&self.sep, &self.call_end, &self.call_begin, &self.calls_end],
                        ) {
                            Scan::Found {
                                at: sep_at,
                                index: 0,
                            } => {
                                let rest = &s[sep_at + self.sep.len()..];
                                match rest
                                    .find(|c: char| matches!(c, '\n' | '`' | '{') || is_sentinel(c))
                                {
                                    Some(at) => {
                                        let eaten = sep_at
                                            + self.sep.len()
                                            + at
                                            + usize::from(rest.as_bytes()[at] == b'\n');
                                        (Some(ascii_trim(&rest[..at]).to_string()), eaten)
                                    }
                                    None if end => (Some(ascii_trim(rest).to_string()), s.len()),
                                    None => return,
                                }
                            }
                            Scan::Found { at, .. } => (None, at),
                            _ if end => (None, s.len()),
                            _ => return,
                        },
                    };
                    match name.filter(|n| !n.is_empty()) {
                        Some(name) => {
                            let index = out.start_call(&name, None);
                            out.route(input, consumed, Channel::Tool);
                            self.relay = JsonRelay::new();
                            self.state = match self.dialect {
                                Dialect::V3 => State::Fence { index },
                                Dialect::V31 => State::Args { index },
                            };
                        }
                        // A malformed header inside the section is framing.
                        None => {
                            out.route(input, consumed, Channel::Framing);
                            self.state = State::CallTail;
                        }
                    }
                }
                State::Fence { index } => {
                    let s = input.as_str();
                    let ws = leading_ws(s);
                    let after = &s[ws..];
                    if !end && could_become(after, "```json") {
                        return;
                    }
                    let fence = ["```json", "```"]
                        .into_iter()
                        .find(|f| after.starts_with(f))
                        .map_or(0, str::len);
                    let after_fence = &after[fence..];
                    let ws2 = leading_ws(after_fence);
                    let rest = &after_fence[ws2..];
                    if rest.starts_with('{') {
                        out.route(input, ws + fence + ws2, Channel::Tool);
                        self.state = State::Args { index };
                    } else if !end && rest.is_empty() {
                        return;
                    } else {
                        out.call_args(index, "{}");
                        self.state = State::CallTail;
                    }
                }
                State::Args { index } => {
                    if !stream_json_args(&mut self.relay, index, input, out, end) {
                        return;
                    }
                    self.state = State::CallTail;
                }
                State::CallTail => {
                    let patterns = [
                        self.call_end.as_str(),
                        self.call_begin.as_str(),
                        self.calls_end.as_str(),
                    ];
                    let Some(index) = out.route_until(input, &patterns, Channel::Framing, end)
                    else {
                        return;
                    };
                    match index {
                        0 => {
                            out.route(input, self.call_end.len(), Channel::Framing);
                            self.state = State::Section;
                        }
                        // The next call's begin marker is read by the section.
                        1 => self.state = State::Section,
                        _ => {
                            out.route(input, self.calls_end.len(), Channel::Framing);
                            self.state = State::Content;
                        }
                    }
                }
            }
        }
    }
}
