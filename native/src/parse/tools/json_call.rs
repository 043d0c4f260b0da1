//! A tool call written as one JSON object, `{"name": "f", "arguments": {...}}` (Hermes, Llama 3,
//! Mistral's array form): reads the name, streams the arguments through a [`JsonRelay`].
//!
//! Arguments that arrive before the name are held until the name is known (a call's first delta
//! carries its name). Arguments written as a JSON string holding an object are decoded and
//! emitted whole. Other members are skipped.

use crate::parse::json::{canonical, decode_canonical_string, JsonRelay, Relay};
use crate::parse::out::{Channel, Out};
use crate::parse::text::SegBuf;

/// What reading stopped at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallEvent {
    /// All input consumed; the object goes on.
    More,
    /// The name was just read.
    Named,
    /// The object closed.
    Done,
    /// The input is not (or no longer) a call object.
    Broken,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    Name,
    Args,
    /// Arguments given as a JSON string holding the object.
    ArgsString,
    Skip,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Key { first: bool },
    InKey,
    Colon,
    Value(Member),
    Next,
    Done,
}

/// The reader (see the module docs).
pub(crate) struct JsonCall {
    state: State,
    relay: JsonRelay,
    scratch: String,
    key: String,
    arg_keys: &'static [&'static str],
    /// The function name, once read.
    pub(crate) name: Option<String>,
    /// Arguments text not yet sent to the call.
    args: String,
    args_started: bool,
    args_seen: bool,
    args_done: bool,
}

impl JsonCall {
    /// A reader accepting `arg_keys` (for example `["arguments", "parameters"]`) for arguments.
    pub(crate) fn new(arg_keys: &'static [&'static str]) -> Self {
        JsonCall {
            state: State::Open,
            relay: JsonRelay::new(),
            scratch: String::new(),
            key: String::new(),
            arg_keys,
            name: None,
            args: String::new(),
            args_started: false,
            args_seen: false,
            args_done: false,
        }
    }

    /// Whether an arguments member has begun.
    pub(crate) fn has_args_key(&self) -> bool {
        self.args_seen
    }

    /// Bytes held inside the reader.
    pub(crate) fn held(&self) -> usize {
        self.scratch.len() + self.key.len() + self.args.len() + self.relay.held()
    }

    /// Reads `input` up to the next event; returns the bytes consumed and the event.
    pub(crate) fn feed(&mut self, input: &str) -> (usize, CallEvent) {
        let mut pos = 0;
        while pos < input.len() {
            let rest = &input[pos..];
            let c = rest.chars().next().expect("non-empty");
            match self.state {
                State::Done => return (pos, CallEvent::Done),
                State::Open | State::Key { .. } | State::Colon | State::Next
                    if c.is_ascii_whitespace() =>
                {
                    pos += 1;
                }
                State::Open => {
                    if c != '{' {
                        return (pos, CallEvent::Broken);
                    }
                    self.state = State::Key { first: true };
                    pos += 1;
                }
                State::Key { first } => match c {
                    '}' if first => {
                        self.state = State::Done;
                        return (pos + 1, CallEvent::Done);
                    }
                    '"' => {
                        self.state = State::InKey;
                        self.relay = JsonRelay::new();
                        self.scratch.clear();
                    }
                    _ => return (pos, CallEvent::Broken),
                },
                State::InKey => match self.relay.feed(rest, &mut self.scratch) {
                    Relay::More => return (input.len(), CallEvent::More),
                    Relay::Done(n) => {
                        pos += n;
                        self.key = decode_canonical_string(&self.scratch).unwrap_or_default();
                        self.state = State::Colon;
                    }
                    Relay::Error(_) => return (pos, CallEvent::Broken),
                },
                State::Colon => {
                    if c != ':' {
                        return (pos, CallEvent::Broken);
                    }
                    pos += 1;
                    let member = if self.key == "name" && self.name.is_none() {
                        Member::Name
                    } else if self.arg_keys.contains(&self.key.as_str()) && !self.args_seen {
                        self.args_seen = true;
                        Member::Args
                    } else {
                        Member::Skip
                    };
                    self.relay = JsonRelay::new();
                    self.scratch.clear();
                    self.state = State::Value(member);
                }
                State::Value(member) => {
                    let member = if member == Member::Args && !self.relay.started() {
                        // The first byte decides how the arguments are written.
                        match c {
                            c if c.is_ascii_whitespace() => {
                                pos += c.len_utf8();
                                continue;
                            }
                            '{' => Member::Args,
                            '"' => Member::ArgsString,
                            _ => Member::Skip,
                        }
                    } else {
                        member
                    };
                    self.state = State::Value(member);
                    let target = if member == Member::Args {
                        &mut self.args
                    } else {
                        &mut self.scratch
                    };
                    let started_before = self.relay.started();
                    let result = self.relay.feed(rest, target);
                    if member == Member::Args && !started_before && self.relay.started() {
                        self.args_started = true;
                    }
                    match result {
                        Relay::More => return (input.len(), CallEvent::More),
                        Relay::Error(n) => {
                            if member == Member::Args {
                                self.relay.close(&mut self.args);
                                self.args_done = true;
                            }
                            return (pos + n, CallEvent::Broken);
                        }
                        Relay::Done(n) => {
                            pos += n;
                            self.state = State::Next;
                            match member {
                                Member::Name => {
                                    let Some(name) = decode_canonical_string(&self.scratch) else {
                                        return (pos, CallEvent::Broken);
                                    };
                                    self.name = Some(name);
                                    return (pos, CallEvent::Named);
                                }
                                Member::Args => self.args_done = true,
                                Member::ArgsString => {
                                    let inner = decode_canonical_string(&self.scratch)
                                        .and_then(|s| canonical(&s));
                                    if let Some(obj) = inner.filter(|o| o.starts_with('{')) {
                                        self.args.push_str(&obj);
                                        self.args_started = true;
                                        self.args_done = true;
                                    }
                                }
                                Member::Skip => {}
                            }
                        }
                    }
                }
                State::Next => match c {
                    ',' => {
                        self.state = State::Key { first: false };
                        pos += 1;
                    }
                    '}' => {
                        self.state = State::Done;
                        return (pos + 1, CallEvent::Done);
                    }
                    _ => return (pos, CallEvent::Broken),
                },
            }
        }
        (input.len(), CallEvent::More)
    }

    /// Starts the call once its name is read: its first delta carries the name and the arguments
    /// read so far. Returns the call's index.
    pub(crate) fn start(&mut self, out: &mut Out) -> u32 {
        let index = out.start_call(self.name.as_deref().unwrap_or_default(), None);
        self.send_args(index, out);
        index
    }

    /// Reads the rest of call `index` at the start of `input`, sending its arguments as they
    /// arrive: `None` while the object goes on, else the event that ended it (the arguments are
    /// then complete, see [`Self::finish`]).
    pub(crate) fn stream(
        &mut self,
        index: u32,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<CallEvent> {
        let (n, event) = self.feed(input.as_str());
        out.route(input, n, Channel::Tool);
        if event == CallEvent::More && !end {
            self.send_args(index, out);
            return None;
        }
        self.finish(index, out);
        Some(event)
    }

    /// Completes call `index`'s arguments (`{}` when none came, closers for a cut-off object) and
    /// sends what is left of them.
    pub(crate) fn finish(&mut self, index: u32, out: &mut Out) {
        if !self.args_started {
            self.args.push_str("{}");
            self.args_started = true;
        } else if !self.args_done {
            self.relay.close(&mut self.args);
        }
        self.args_done = true;
        self.send_args(index, out);
    }

    fn send_args(&mut self, index: u32, out: &mut Out) {
        out.call_args(index, &self.args);
        self.args.clear();
    }
}
