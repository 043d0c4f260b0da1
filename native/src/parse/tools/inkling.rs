//! `inkling`: typed message blocks, every marker a special token:
//! `<|message_model|><|content_invoke_tool_json|>{"name": "f", "args": {...}}<|end_message|>`,
//! next to `<|message_model|><|content_text|>...<|end_message|>` text blocks.
//!
//! The block markers around text are framing and the text is content; a tool block is a call
//! once its JSON object's name is read (as Hermes: an object that turns out not to be a call
//! leaves the marker and the text as content). After the object, everything up to the block's
//! end is framing. Thinking blocks are the reasoning parser's (`inkling` reasoning row).

use crate::parse::out::{Channel, Out};
use crate::parse::schema::Tools;
use crate::parse::text::{Markers, SegBuf};
use crate::parse::tools::json_call::{CallEvent, JsonCall};
use crate::parse::Stage;

/// The markers this format uses: the tool block's start first, then the framing ones.
pub(crate) const MARKERS: &[&str] = &[
    "<|content_invoke_tool_json|>",
    "<|message_model|>",
    "<|content_text|>",
    "<|end_message|>",
    "<|content_model_end_sampling|>",
];

const ARG_KEYS: &[&str] = &["args"];

/// The parser of a request (registry constructor).
pub(crate) fn build(markers: &Markers, _tools: &Tools) -> Box<dyn Stage> {
    Box::new(Inkling {
        tags: MARKERS.iter().map(|m| markers.pattern(m)).collect(),
        state: State::Content,
        call: JsonCall::new(ARG_KEYS),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Content,
    /// After the tool block's marker, before the name; `cursor` bytes read but not routed.
    Undecided {
        cursor: usize,
    },
    InCall {
        index: u32,
    },
    AfterCall,
}

/// The parser (see the module docs).
struct Inkling {
    /// The patterns of [`MARKERS`], in order.
    tags: Vec<String>,
    state: State,
    call: JsonCall,
}

impl Inkling {
    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Content => {
                let pats: Vec<&str> = self.tags.iter().map(String::as_str).collect();
                let index = out.route_until(input, &pats, Channel::Content, end)?;
                if index == 0 {
                    self.call = JsonCall::new(ARG_KEYS);
                    self.state = State::Undecided {
                        cursor: pats[0].len(),
                    };
                } else {
                    out.route(input, pats[index].len(), Channel::Framing);
                }
            }
            State::Undecided { cursor } => self.undecided(cursor, input, out, end)?,
            State::InCall { index } => {
                self.call.stream(index, input, out, end)?;
                self.state = State::AfterCall;
            }
            State::AfterCall => {
                // Framing through the block's end; a new block starts over.
                let pats = [
                    self.tags[3].as_str(),
                    self.tags[4].as_str(),
                    self.tags[1].as_str(),
                    self.tags[0].as_str(),
                ];
                let index = out.route_until(input, &pats, Channel::Framing, end)?;
                if index < 2 {
                    out.route(input, pats[index].len(), Channel::Framing);
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
        let marker = self.tags[0].len();
        match event {
            CallEvent::Named => {
                let index = self.call.start(out);
                out.route(input, marker, Channel::Framing);
                out.route(input, cursor - marker, Channel::Tool);
                self.state = State::InCall { index };
            }
            CallEvent::More if !end => {
                self.state = State::Undecided { cursor };
                return None;
            }
            // Not a call: the marker is text, and what follows is read as content.
            _ => {
                out.route(input, marker, Channel::Content);
                self.state = State::Content;
            }
        }
        Some(())
    }
}

impl Stage for Inkling {
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
