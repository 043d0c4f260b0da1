//! `llama3_json` (Llama 3.1/3.2/3.3, also `llama4_json`): calls as JSON objects
//! `{"name": "f", "parameters": {...}}` (or `"arguments"`), after `<|python_tag|>` or as the very
//! start of the output, several separated by `;`.
//!
//! Without the tag, JSON only counts as a call at the start of the output and only once it has
//! both a name and an arguments member (an answer that happens to be a JSON object with a `name`
//! stays content). JSON in the middle of text is content. A tag followed by anything but an object
//! (Llama's built-in `brave_search.call(...)` syntax) leaves that text as content.

use crate::parse::out::{Channel, Out};
use crate::parse::text::{leading_ws, Markers, SegBuf};
use crate::parse::tools::json_call::{CallEvent, JsonCall};
use crate::parse::Stage;

/// The markers this format uses.
pub(crate) const MARKERS: &[&str] = &["<|python_tag|>"];

const ARG_KEYS: &[&str] = &["parameters", "arguments"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing visible yet: a `{` here may start a call.
    Start,
    Content,
    /// After the tag or a `;`: an object here is a call. The input starts with `marker` bytes of
    /// a tag (and whitespace before it) that are content unless a call follows.
    Expect {
        tagged: bool,
        marker: usize,
    },
    /// Reading an object that is not yet known to be a call; `cursor` bytes read, the first
    /// `marker` of them a tag.
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
}

impl Stage for Llama3Json {
    fn held(&self) -> usize {
        self.call.held()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        loop {
            match self.state {
                State::Start | State::Expect { .. } => {
                    let (tagged, marker) = match self.state {
                        State::Expect { tagged, marker } => (tagged, marker),
                        _ => (false, 0),
                    };
                    let s = &input.as_str()[marker..];
                    let ws = leading_ws(s);
                    let after = &s[ws..];
                    if after.starts_with('{') {
                        // Nothing is routed yet: it is all content if this is no call.
                        self.call = JsonCall::new(ARG_KEYS);
                        self.state = State::Undecided {
                            tagged,
                            marker,
                            cursor: marker,
                        };
                    } else if after.is_empty() && !end {
                        return;
                    } else if self.state == State::Start && after.starts_with(self.tag.as_str()) {
                        self.state = State::Expect {
                            tagged: true,
                            marker: ws + self.tag.len(),
                        };
                    } else if self.state == State::Start && !end && self.tag.starts_with(after) {
                        return;
                    } else {
                        out.route(input, marker, Channel::Content);
                        self.state = State::Content;
                    }
                }
                State::Content => {
                    if out
                        .route_until(input, &[&self.tag], Channel::Content, end)
                        .is_none()
                    {
                        return;
                    }
                    self.state = State::Expect {
                        tagged: true,
                        marker: self.tag.len(),
                    };
                }
                State::Undecided {
                    tagged,
                    marker,
                    cursor,
                } => {
                    let mut cursor = cursor;
                    loop {
                        let (n, event) = self.call.feed(&input.as_str()[cursor..]);
                        cursor += n;
                        let decided =
                            self.call.name.is_some() && (tagged || self.call.has_args_key());
                        match event {
                            _ if decided => {
                                let index = self.call.start(out);
                                out.route(input, marker, Channel::Framing);
                                out.route(input, cursor - marker, Channel::Tool);
                                self.state = match event {
                                    CallEvent::Done | CallEvent::Broken => {
                                        self.call.finish(index, out);
                                        State::AfterCall { tagged }
                                    }
                                    _ => State::InCall { index, tagged },
                                };
                                break;
                            }
                            CallEvent::Named => continue,
                            CallEvent::More if !end => {
                                self.state = State::Undecided {
                                    tagged,
                                    marker,
                                    cursor,
                                };
                                return;
                            }
                            // Not a call: the tag and the object are text.
                            _ => {
                                out.route(input, marker, Channel::Content);
                                self.state = State::Content;
                                break;
                            }
                        }
                    }
                }
                State::InCall { index, tagged } => {
                    if self.call.stream(index, input, out, end).is_none() {
                        return;
                    }
                    self.state = State::AfterCall { tagged };
                }
                State::AfterCall { tagged } => {
                    let s = input.as_str();
                    let ws = leading_ws(s);
                    let after = &s[ws..];
                    if after.starts_with(';') {
                        out.route(input, ws + 1, Channel::Framing);
                        self.state = State::Expect { tagged, marker: 0 };
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
