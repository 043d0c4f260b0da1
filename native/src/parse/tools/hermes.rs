//! `hermes` (Qwen2.5, Qwen3, Hermes): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`,
//! repeated; text before, between and after calls is content.
//!
//! A call is decided when its name is read: before that the text since `<tool_call>` is held, and
//! if it turns out not to be a call object (bad JSON, no name, end of output) it is content,
//! markers and all. After the object, everything up to `</tool_call>` is framing.

use crate::parse::out::{Channel, Out};
use crate::parse::schema::Tools;
use crate::parse::text::{Markers, SegBuf};
use crate::parse::tools::json_call::{CallEvent, JsonCall};
use crate::parse::Stage;

/// The markers this format uses.
pub(crate) const MARKERS: &[&str] = &["<tool_call>", "</tool_call>"];

const ARG_KEYS: &[&str] = &["arguments", "parameters"];

/// The parser of a request (registry constructor).
pub(crate) fn build(markers: &Markers, _tools: &Tools) -> Box<dyn Stage> {
    Box::new(Hermes::new(markers))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Content,
    /// After `<tool_call>`, before the name; `cursor` bytes of input were read but not routed.
    Undecided {
        cursor: usize,
    },
    InCall {
        index: u32,
    },
    AfterCall,
}

/// The parser (see the module docs).
pub(crate) struct Hermes {
    open: String,
    close: String,
    state: State,
    call: JsonCall,
}

impl Hermes {
    pub(crate) fn new(markers: &Markers) -> Self {
        Hermes {
            open: markers.pattern(MARKERS[0]),
            close: markers.pattern(MARKERS[1]),
            state: State::Content,
            call: JsonCall::new(ARG_KEYS),
        }
    }

    /// One state's work: `None` to wait for more input.
    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Content => {
                out.route_until(input, &[&self.open], Channel::Content, end)?;
                self.state = State::Undecided {
                    cursor: self.open.len(),
                };
                self.call = JsonCall::new(ARG_KEYS);
            }
            State::Undecided { cursor } => self.undecided(cursor, input, out, end)?,
            State::InCall { index } => {
                self.call.stream(index, input, out, end)?;
                self.state = State::AfterCall;
            }
            State::AfterCall => {
                let patterns = [self.close.as_str(), self.open.as_str()];
                let index = out.route_until(input, &patterns, Channel::Framing, end)?;
                // Framing through `</tool_call>`; a new `<tool_call>` starts over.
                if index == 0 {
                    out.route(input, self.close.len(), Channel::Framing);
                }
                self.state = State::Content;
            }
        }
        Some(())
    }

    fn undecided(
        &mut self,
        cursor: usize,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<()> {
        let (n, event) = self.call.feed(&input.as_str()[cursor..]);
        let cursor = cursor + n;
        match event {
            CallEvent::Named => {
                let index = self.call.start(out);
                out.route(input, self.open.len(), Channel::Framing);
                out.route(input, cursor - self.open.len(), Channel::Tool);
                self.state = State::InCall { index };
            }
            CallEvent::More if !end => {
                self.state = State::Undecided { cursor };
                return None;
            }
            // Not a call: the marker is text, and what follows is read as content.
            _ => {
                out.route(input, self.open.len(), Channel::Content);
                self.state = State::Content;
            }
        }
        Some(())
    }
}

impl Stage for Hermes {
    fn held(&self) -> usize {
        self.call.held()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        while self.step(input, out, end).is_some() {
            let waiting = input.is_empty() && !matches!(self.state, State::InCall { .. });
            if waiting && !(end && matches!(self.state, State::Undecided { .. })) {
                return;
            }
        }
    }
}
