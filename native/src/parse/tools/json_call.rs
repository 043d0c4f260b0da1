//! A tool call written as one JSON object, `{"name": "f", "arguments": {...}}` (Hermes, Llama 3,
//! Mistral's array form): reads the name, streams the arguments through a [`JsonRelay`].
//!
//! Arguments that arrive before the name are held until the name is known (a call's first delta
//! carries its name). Arguments written as a JSON string holding an object are decoded and
//! emitted whole. Other members are skipped. A [`CallShape`] says which keys hold the name and the
//! arguments (Cohere's `tool_name`/`parameters`), or that the object is `{"NAME": {...}}` (Apertus).

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
    Id,
    Skip,
}

/// What one read of [`JsonCall::step`] did.
enum Step {
    /// Consumed this many bytes; go on.
    Advance(usize),
    /// Consumed this many bytes and stopped at an event.
    Stop(usize, CallEvent),
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

/// Which members of a call object hold its name and its arguments.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallShape {
    /// Keys whose (string) value is the function name; the first one read counts.
    pub(crate) name_keys: &'static [&'static str],
    /// Keys whose value is the arguments object (or a JSON string holding one).
    pub(crate) arg_keys: &'static [&'static str],
    /// `{"NAME": {...}}`: the first key is the name and its value, which must be an object, the
    /// arguments (Apertus); `name_keys` and `arg_keys` are not used.
    pub(crate) keyed: bool,
    /// Keys whose (string) value is the call id the model wrote (Cohere's `tool_call_id`), kept
    /// when it comes before the name.
    pub(crate) id_keys: &'static [&'static str],
}

impl CallShape {
    /// `{"name": ..., "arguments" | "parameters": {...}}`, the common shape.
    pub(crate) const NAME_ARGS: CallShape = CallShape {
        name_keys: &["name"],
        arg_keys: &["arguments", "parameters"],
        keyed: false,
        id_keys: &[],
    };
}

/// The reader (see the module docs).
pub(crate) struct JsonCall {
    state: State,
    relay: JsonRelay,
    scratch: String,
    key: String,
    shape: CallShape,
    /// The function name, once read.
    pub(crate) name: Option<String>,
    /// The call id the model wrote, when read before the name.
    id: Option<String>,
    /// Arguments text not yet sent to the call.
    args: String,
    args_started: bool,
    args_seen: bool,
    args_done: bool,
}

impl JsonCall {
    /// A reader accepting `arg_keys` (for example `["arguments", "parameters"]`) for arguments.
    pub(crate) fn new(arg_keys: &'static [&'static str]) -> Self {
        JsonCall::shaped(CallShape {
            arg_keys,
            ..CallShape::NAME_ARGS
        })
    }

    /// A reader of call objects of `shape`.
    pub(crate) fn shaped(shape: CallShape) -> Self {
        JsonCall {
            state: State::Open,
            relay: JsonRelay::new(),
            scratch: String::new(),
            key: String::new(),
            shape,
            name: None,
            id: None,
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
            match self.step(&input[pos..]) {
                Step::Advance(n) => pos += n,
                Step::Stop(n, event) => return (pos + n, event),
            }
        }
        (input.len(), CallEvent::More)
    }

    /// Reads at the start of `rest` (not empty) as far as the current state goes.
    fn step(&mut self, rest: &str) -> Step {
        let c = rest.chars().next().expect("non-empty");
        let between = matches!(
            self.state,
            State::Open | State::Key { .. } | State::Colon | State::Next
        );
        if between && c.is_ascii_whitespace() {
            return Step::Advance(1);
        }
        match self.state {
            State::Done => Step::Stop(0, CallEvent::Done),
            State::Open if c == '{' => {
                self.state = State::Key { first: true };
                Step::Advance(1)
            }
            State::Key { first: true } if c == '}' => self.close_object(),
            State::Key { .. } if c == '"' => {
                self.state = State::InKey;
                self.relay = JsonRelay::new();
                self.scratch.clear();
                Step::Advance(0)
            }
            State::InKey => self.in_key(rest),
            State::Colon if c == ':' => {
                self.state = State::Value(self.member());
                self.relay = JsonRelay::new();
                self.scratch.clear();
                Step::Advance(1)
            }
            State::Value(member) => self.in_value(member, rest),
            State::Next if c == ',' => {
                self.state = State::Key { first: false };
                Step::Advance(1)
            }
            State::Next if c == '}' => self.close_object(),
            _ => Step::Stop(0, CallEvent::Broken),
        }
    }

    fn close_object(&mut self) -> Step {
        self.state = State::Done;
        Step::Stop(1, CallEvent::Done)
    }

    fn in_key(&mut self, rest: &str) -> Step {
        match self.relay.feed(rest, &mut self.scratch) {
            Relay::More => Step::Stop(rest.len(), CallEvent::More),
            Relay::Done(n) => {
                self.key = decode_canonical_string(&self.scratch).unwrap_or_default();
                self.state = State::Colon;
                Step::Advance(n)
            }
            // Up to the offending byte, as for values: a key read over several steps was
            // consumed as it came, so a whole-output read must consume it too.
            Relay::Error(n) => Step::Stop(n, CallEvent::Broken),
        }
    }

    /// What the member whose key was just read holds.
    fn member(&mut self) -> Member {
        let key = self.key.as_str();
        if self.shape.keyed {
            // The first member is the call; later ones are not read.
            if self.args_seen {
                return Member::Skip;
            }
            self.args_seen = true;
            return Member::Args;
        }
        if self.shape.name_keys.contains(&key) && self.name.is_none() {
            Member::Name
        } else if self.shape.id_keys.contains(&key) && self.id.is_none() && self.name.is_none() {
            Member::Id
        } else if self.shape.arg_keys.contains(&key) && !self.args_seen {
            self.args_seen = true;
            Member::Args
        } else {
            Member::Skip
        }
    }

    fn in_value(&mut self, member: Member, rest: &str) -> Step {
        let c = rest.chars().next().expect("non-empty");
        let member = if member == Member::Args && !self.relay.started() {
            // The first byte decides how the arguments are written.
            match c {
                c if c.is_ascii_whitespace() => return Step::Advance(c.len_utf8()),
                // Keyed: the key was the name, known to be a call once its object begins.
                // (An empty name is no function's: not a call.)
                '{' if self.shape.keyed && self.name.is_none() && !self.key.is_empty() => {
                    self.name = Some(std::mem::take(&mut self.key));
                    return Step::Stop(0, CallEvent::Named);
                }
                _ if self.shape.keyed && self.name.is_none() => {
                    return Step::Stop(0, CallEvent::Broken)
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
        let result = self.relay.feed(rest, target);
        if member == Member::Args && self.relay.started() {
            self.args_started = true;
        }
        match result {
            Relay::More => Step::Stop(rest.len(), CallEvent::More),
            // Broken arguments stay as read: never closed.
            Relay::Error(n) => Step::Stop(n, CallEvent::Broken),
            Relay::Done(n) => {
                self.state = State::Next;
                self.value_done(member, n)
            }
        }
    }

    fn value_done(&mut self, member: Member, n: usize) -> Step {
        match member {
            Member::Name => {
                // A name that is not a string, or is empty, is no function's: not a call (a
                // call's first delta must name it).
                let Some(name) = decode_canonical_string(&self.scratch).filter(|n| !n.is_empty())
                else {
                    return Step::Stop(n, CallEvent::Broken);
                };
                self.name = Some(name);
                return Step::Stop(n, CallEvent::Named);
            }
            Member::Args => self.args_done = true,
            // An id that is not a string is not the model's id.
            Member::Id => self.id = decode_canonical_string(&self.scratch),
            Member::ArgsString => {
                let inner = decode_canonical_string(&self.scratch).and_then(|s| canonical(&s));
                if let Some(obj) = inner.filter(|o| o.starts_with('{')) {
                    self.args.push_str(&obj);
                    self.args_started = true;
                    self.args_done = true;
                }
            }
            Member::Skip => {}
        }
        Step::Advance(n)
    }

    /// Starts the call once its name is read: its first delta carries the name and the arguments
    /// read so far. Returns the call's index.
    pub(crate) fn start(&mut self, out: &mut Out) -> u32 {
        let index = out.start_call(self.name.as_deref().unwrap_or_default(), self.id.take());
        self.send_args(index, out);
        index
    }

    /// Reads the rest of call `index` at the start of `input`, sending its arguments as they
    /// arrive: `None` while the object goes on, else the event that ended it (see
    /// [`Self::conclude`]).
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
        self.conclude(index, out, event);
        Some(event)
    }

    /// Ends call `index` after `event`: complete when its arguments object closed, or when the call
    /// object closed without one (arguments `{}`); otherwise (cut off, broken) the arguments stay
    /// what was read.
    pub(crate) fn conclude(&mut self, index: u32, out: &mut Out, event: CallEvent) {
        let no_args = event == CallEvent::Done && !self.args_started;
        if no_args {
            self.args.push_str("{}");
        }
        self.send_args(index, out);
        if self.args_done || no_args {
            out.end_call(index);
        }
    }

    fn send_args(&mut self, index: u32, out: &mut Out) {
        out.call_args(index, &self.args);
        self.args.clear();
    }
}
