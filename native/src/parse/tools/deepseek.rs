//! DeepSeek-V3 and V3.1 tool calls (their markers are single tokens in DeepSeek's vocabulary):
//!
//! - `deepseek_v3`: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>`
//! - `deepseek_v31`: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>`
//!
//! A call starts when its arguments' `{` arrives (a header without arguments is no call). Inside the section, text outside calls (the JSON fence,
//! whitespace, anything malformed) is framing; text before and after the section is content. A
//! section or call begin marker missing is tolerated (`<｜tool▁call▁begin｜>` alone opens a
//! section, a new call begin ends the previous call).

use crate::parse::json::{is_sentinel, JsonRelay};
use crate::parse::out::{Channel, Out};
use crate::parse::schema::Tools;
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
    /// After the header (`header` bytes of input, the name is in `name`), before the arguments'
    /// `{` (v3: and its fence). The call starts at the `{`.
    ArgsStart {
        header: usize,
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
    name: String,
    relay: JsonRelay,
}

/// `deepseek_v3` (registry constructor).
pub(crate) fn build_v3(markers: &Markers, _tools: &Tools) -> Box<dyn Stage> {
    Box::new(DeepSeek::new(markers, Dialect::V3))
}

/// `deepseek_v31` (registry constructor).
pub(crate) fn build_v31(markers: &Markers, _tools: &Tools) -> Box<dyn Stage> {
    Box::new(DeepSeek::new(markers, Dialect::V31))
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
            name: String::new(),
            relay: JsonRelay::object(),
        }
    }

    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Content => {
                let patterns = [self.calls_begin.as_str(), self.call_begin.as_str()];
                let index = out.route_until(input, &patterns, Channel::Content, end)?;
                out.route(input, patterns[index].len(), Channel::Framing);
                self.state = if index == 0 {
                    State::Section
                } else {
                    State::Header
                };
            }
            State::Section => {
                let patterns = [self.call_begin.as_str(), self.calls_end.as_str()];
                let index = out.route_until(input, &patterns, Channel::Framing, end)?;
                out.route(input, patterns[index].len(), Channel::Framing);
                self.state = if index == 0 {
                    State::Header
                } else {
                    State::Content
                };
            }
            State::Header => self.header(input, out, end)?,
            State::ArgsStart { header } => self.args_start(header, input, out, end)?,
            State::Args { index } => {
                if !stream_json_args(&mut self.relay, index, input, out, end) {
                    return None;
                }
                self.state = State::CallTail;
            }
            State::CallTail => self.call_tail(input, out, end)?,
        }
        Some(())
    }

    /// Reads the call header: `Some((name, bytes))` once the name is complete, `Some((None,
    /// bytes))` for a malformed header, `None` to wait.
    fn read_name(&self, s: &str, end: bool) -> Option<(Option<String>, usize)> {
        // The separator counts only before the call's other markers: a header cut short by
        // `<｜tool▁call▁end｜>` is malformed, whatever follows.
        let patterns = [
            &*self.sep,
            &*self.call_end,
            &*self.call_begin,
            &*self.calls_end,
        ];
        let sep_at = match scan(s, &patterns) {
            Scan::Found { at, index: 0 } => at,
            Scan::Found { at, .. } => return Some((None, at)),
            _ if end => return Some((None, s.len())),
            _ => return None,
        };
        let after = sep_at + self.sep.len();
        match self.dialect {
            Dialect::V31 => Some((Some(ascii_trim(&s[..sep_at]).to_string()), after)),
            // v3: `function<sep>NAME` up to the end of the line.
            Dialect::V3 => {
                let rest = &s[after..];
                match rest.find(|c: char| matches!(c, '\n' | '`' | '{') || is_sentinel(c)) {
                    Some(at) => {
                        let eaten = after + at + usize::from(rest.as_bytes()[at] == b'\n');
                        Some((Some(ascii_trim(&rest[..at]).to_string()), eaten))
                    }
                    None if end => Some((Some(ascii_trim(rest).to_string()), s.len())),
                    None => None,
                }
            }
        }
    }

    fn header(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let (name, consumed) = self.read_name(input.as_str(), end)?;
        match name.filter(|n| !n.is_empty()) {
            Some(name) => {
                // Held until the arguments begin: no call without them.
                self.name = name;
                self.state = State::ArgsStart { header: consumed };
            }
            // A malformed header inside the section is framing.
            None => {
                out.route(input, consumed, Channel::Framing);
                self.state = State::CallTail;
            }
        }
        Some(())
    }

    /// Before the arguments: v3's optional fence, then `{` starts the call.
    fn args_start(
        &mut self,
        header: usize,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<()> {
        let s = &input.as_str()[header..];
        let ws = leading_ws(s);
        let after = &s[ws..];
        if !end && self.dialect == Dialect::V3 && could_become(after, "```json") {
            return None;
        }
        let fence = match self.dialect {
            Dialect::V3 => ["```json", "```"]
                .into_iter()
                .find(|f| after.starts_with(f))
                .map_or(0, str::len),
            Dialect::V31 => 0,
        };
        let after_fence = &after[fence..];
        let skip = ws + fence + leading_ws(after_fence);
        let rest = &s[skip..];
        if rest.starts_with('{') {
            let index = out.start_call(&self.name, None);
            out.route(input, header + skip, Channel::Tool);
            self.relay = JsonRelay::object();
            self.state = State::Args { index };
        } else if rest.is_empty() && !end {
            return None;
        } else {
            // No arguments object: no call; the header and the rest of it are framing.
            out.route(input, header, Channel::Framing);
            self.state = State::CallTail;
        }
        Some(())
    }

    fn call_tail(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let patterns = [
            self.call_end.as_str(),
            self.call_begin.as_str(),
            self.calls_end.as_str(),
        ];
        let index = out.route_until(input, &patterns, Channel::Framing, end)?;
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
        Some(())
    }
}

impl Stage for DeepSeek {
    fn held(&self) -> usize {
        self.relay.held() + self.name.len()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        while self.step(input, out, end).is_some() {
            if input.is_empty() && !(end && matches!(self.state, State::Args { .. })) {
                return;
            }
        }
    }
}
