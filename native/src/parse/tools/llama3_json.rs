//! `llama3_json` (Llama 3.1/3.2/3.3, also `llama4_json`): calls as JSON objects
//! `{"name": "f", "parameters": {...}}` (or `"arguments"`), after `<|python_tag|>` or as the very
//! start of the output, several separated by `;` or whitespace.
//!
//! Without the tag, JSON only counts as a call at the start of the output and only once it has
//! both a name and an arguments member (an answer that happens to be a JSON object with a `name`
//! stays content). JSON in the middle of text is content. A tag followed by anything but an object
//! (Llama's built-in `brave_search.call(...)` syntax) leaves that text as content.

use crate::parse::out::{Channel, Out};
use crate::parse::schema::Tools;
use crate::parse::text::{leading_ws, Markers, SegBuf};
use crate::parse::tools::json_call::{CallEvent, JsonCall};
use crate::parse::Stage;

/// The markers this format uses.
pub(crate) const MARKERS: &[&str] = &["<|python_tag|>"];

const ARG_KEYS: &[&str] = &["parameters", "arguments"];

/// The parser of a request (registry constructor).
pub(crate) fn build(markers: &Markers, _tools: &Tools) -> Box<dyn Stage> {
    Box::new(Llama3Json::new(markers))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing visible yet: a `{` here may start a call.
    Start,
    Content,
    /// After the tag or a call: an object here is a call. The input starts with `marker` bytes (a
    /// tag, a separator, whitespace) that are content unless a call follows.
    Expect {
        tagged: bool,
        marker: usize,
    },
    /// Reading an object that is not yet known to be a call; `cursor` bytes read, the first
    /// `marker` of them a tag or separator.
    Undecided {
        tagged: bool,
        marker: usize,
        cursor: usize,
    },
    InCall {
        index: u32,
        tagged: bool,
    },
    AfterCall {
        tagged: bool,
    },
}

/// The parser (see the module docs).
pub(crate) struct Llama3Json {
    tag: String,
    state: State,
    call: JsonCall,
}

impl Llama3Json {
    pub(crate) fn new(markers: &Markers) -> Self {
        Llama3Json {
            tag: markers.pattern(MARKERS[0]),
            state: State::Start,
            call: JsonCall::new(ARG_KEYS),
        }
    }

    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Start => self.expect(false, 0, input, out, end),
            State::Expect { tagged, marker } => self.expect(tagged, marker, input, out, end),
            State::Content => {
                out.route_until(input, &[&self.tag], Channel::Content, end)?;
                self.state = State::Expect {
                    tagged: true,
                    marker: self.tag.len(),
                };
                Some(())
            }
            State::Undecided {
                tagged,
                marker,
                cursor,
            } => self.undecided(tagged, marker, cursor, input, out, end),
            State::InCall { index, tagged } => {
                self.call.stream(index, input, out, end)?;
                self.state = State::AfterCall { tagged };
                Some(())
            }
            State::AfterCall { tagged } => self.after_call(tagged, input, end),
        }
    }

    /// At a place where an object would be a call (the start, after the tag or a call).
    fn expect(
        &mut self,
        tagged: bool,
        marker: usize,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<()> {
        let at_start = self.state == State::Start;
        let s = &input.as_str()[marker..];
        let after = &s[leading_ws(s)..];
        if after.starts_with('{') {
            // Nothing is routed yet: it is all content if this is no call.
            self.call = JsonCall::new(ARG_KEYS);
            self.state = State::Undecided {
                tagged,
                marker,
                cursor: marker,
            };
        } else if after.is_empty() && !end {
            return None;
        } else if at_start && after.starts_with(self.tag.as_str()) {
            self.state = State::Expect {
                tagged: true,
                marker: leading_ws(s) + self.tag.len(),
            };
        } else if at_start && !end && self.tag.starts_with(after) {
            return None;
        } else {
            out.route(input, marker, Channel::Content);
            self.state = State::Content;
        }
        Some(())
    }

    fn undecided(
        &mut self,
        tagged: bool,
        marker: usize,
        cursor: usize,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<()> {
        let mut cursor = cursor;
        loop {
            let (n, event) = self.call.feed(&input.as_str()[cursor..]);
            cursor += n;
            let decided = self.call.name.is_some() && (tagged || self.call.has_args_key());
            match event {
                _ if decided => {
                    let index = self.call.start(out);
                    out.route(input, marker, Channel::Framing);
                    out.route(input, cursor - marker, Channel::Tool);
                    self.state = match event {
                        CallEvent::Done | CallEvent::Broken => {
                            self.call.conclude(index, out, event);
                            State::AfterCall { tagged }
                        }
                        _ => State::InCall { index, tagged },
                    };
                    return Some(());
                }
                CallEvent::Named => continue,
                CallEvent::More if !end => {
                    self.state = State::Undecided {
                        tagged,
                        marker,
                        cursor,
                    };
                    return None;
                }
                // Not a call: the tag and the object are text.
                _ => {
                    out.route(input, marker, Channel::Content);
                    self.state = State::Content;
                    return Some(());
                }
            }
        }
    }

    /// After a call: `;` or whitespace then another object is the next call; anything else is
    /// content (the separator included, when no call follows).
    fn after_call(&mut self, tagged: bool, input: &mut SegBuf, end: bool) -> Option<()> {
        let s = input.as_str();
        let ws = leading_ws(s);
        let after = &s[ws..];
        if after.is_empty() && !end {
            return None;
        }
        let marker = if after.starts_with(';') { ws + 1 } else { ws };
        let rest = &s[marker..];
        let next = &rest[leading_ws(rest)..];
        if next.is_empty() && !end {
            return None;
        }
        self.state = if next.starts_with('{') {
            State::Expect { tagged, marker }
        } else {
            State::Content
        };
        Some(())
    }
}

impl Stage for Llama3Json {
    fn held(&self) -> usize {
        self.call.held()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        while self.step(input, out, end).is_some() {
            if input.is_empty()
                && !matches!(self.state, State::InCall { .. } | State::Undecided { .. })
            {
                return;
            }
        }
    }
}
