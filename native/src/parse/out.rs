//! What parsers write to: the step's content, reasoning and tool-call fragments, plus the routing
//! of every input byte to a channel (which is how tokens are attributed).

use std::sync::Arc;

use crate::parse::registry::IdStyle;
use crate::parse::text::{scan, Markers, Scan, SegBuf};

/// Where a stretch of the output stream went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// Visible text (the `content` field).
    Content,
    /// Reasoning text.
    Reasoning,
    /// A tool call (its name or arguments).
    Tool,
    /// Markers and format syntax: shown nowhere.
    Framing,
    /// Handed from the reasoning split to the tool parser (an intermediate channel).
    Visible,
}

impl Channel {
    /// The name used in traces.
    pub fn name(self) -> &'static str {
        match self {
            Channel::Content => "content",
            Channel::Reasoning => "reasoning",
            Channel::Tool => "tool",
            Channel::Framing => "framing",
            Channel::Visible => "visible",
        }
    }
}

/// One tool-call fragment in the OpenAI streaming shape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallDelta {
    /// Position of the call in the message.
    pub index: u32,
    /// The call id, on the first fragment only.
    pub id: String,
    /// The function name, on the first fragment only.
    pub name: String,
    /// The next piece of the JSON arguments.
    pub arguments: String,
}

/// A decided stream range: where its text went, and whether the tokens whose first byte is in it
/// count as reasoning tokens.
pub(crate) type Span = (u64, u64, Channel, bool);

/// The sink parsers write to; one per request, cleared every step.
pub(crate) struct Out {
    pub(crate) markers: Arc<Markers>,
    pub(crate) content: String,
    pub(crate) reasoning: String,
    pub(crate) calls: Vec<CallDelta>,
    /// Stream ranges and where they went, in the order they were decided.
    pub(crate) spans: Vec<Span>,
    /// Whether text routed from now on counts as reasoning (`reasoning_tokens`): `None` = by its
    /// channel (reasoning text counts); `Some` = a stage's own rule. Harmony counts by message, as
    /// vLLM does: a body on `analysis`, or on `commentary` to a recipient (a call's arguments
    /// included), counts whatever channel its text went to; headers and markers never do.
    pub(crate) reasoning_count: Option<bool>,
    /// Text the reasoning split passes on to the tool parser.
    pub(crate) visible: SegBuf,
    /// Calls started so far in this request.
    pub(crate) call_count: u32,
    /// Calls started and not (yet) complete: cut off by the end of the output or broken. Their
    /// arguments are what the model wrote so far, never closed by the parser.
    pub(crate) open_calls: u32,
    id_style: IdStyle,
    id_state: u64,
    /// Ids the model wrote, so far (an id must be unique within a response).
    given_ids: Vec<String>,
    /// Noncharacters the model wrote, replaced in parser input (see `text::escape_literals`),
    /// sorted by stream offset.
    pub(crate) literals: Vec<(u64, char)>,
}

impl Out {
    pub(crate) fn new(markers: Arc<Markers>, id_style: IdStyle, seed: u64) -> Self {
        Out {
            markers,
            content: String::new(),
            reasoning: String::new(),
            calls: Vec::new(),
            spans: Vec::new(),
            reasoning_count: None,
            visible: SegBuf::default(),
            call_count: 0,
            open_calls: 0,
            id_style,
            id_state: seed | 1,
            given_ids: Vec::new(),
            literals: Vec::new(),
        }
    }

    /// Takes the first `n` bytes of `input` and sends them to `channel`.
    pub(crate) fn route(&mut self, input: &mut SegBuf, n: usize, channel: Channel) {
        if n == 0 {
            return;
        }
        let Out {
            markers,
            content,
            reasoning,
            spans,
            visible,
            literals,
            reasoning_count,
            ..
        } = self;
        let counts = reasoning_count.unwrap_or(channel == Channel::Reasoning);
        input.take(n, |text, start, end| {
            match channel {
                Channel::Content => markers.render_at(text, start, literals, content),
                Channel::Reasoning => markers.render_at(text, start, literals, reasoning),
                Channel::Visible => visible.push(text, start),
                Channel::Tool | Channel::Framing => {}
            }
            if channel != Channel::Visible {
                spans.push((start, end, channel, counts));
            }
        });
    }

    /// Sends all of `input` to `channel`.
    pub(crate) fn route_all(&mut self, input: &mut SegBuf, channel: Channel) {
        let n = input.len();
        self.route(input, n, channel);
    }

    /// Sends `input` to `channel` up to the earliest of `patterns`: `Some(index)` when the input
    /// now starts with pattern `index`, `None` when all it could was sent (the rest may still turn
    /// into a pattern, or `end` flushed it too) and the stage waits for more input.
    pub(crate) fn route_until(
        &mut self,
        input: &mut SegBuf,
        patterns: &[&str],
        channel: Channel,
        end: bool,
    ) -> Option<usize> {
        match scan(input.as_str(), patterns) {
            Scan::Found { at, index } => {
                self.route(input, at, channel);
                Some(index)
            }
            Scan::Partial { at } => {
                self.route(input, at, channel);
                if end {
                    self.route_all(input, channel);
                }
                None
            }
            Scan::None => {
                self.route_all(input, channel);
                None
            }
        }
    }

    /// Starts a call; returns its index. `id`: the one the model wrote, kept unless an earlier call
    /// of this response has it (a model repeating `functions.f:0`), else one is made. The call
    /// counts as incomplete until [`Out::end_call`].
    pub(crate) fn start_call(&mut self, name: &str, id: Option<String>) -> u32 {
        let index = self.call_count;
        self.call_count += 1;
        self.open_calls += 1;
        let id = match id {
            Some(id) if !self.given_ids.contains(&id) => {
                self.given_ids.push(id.clone());
                id
            }
            _ => self.new_id(),
        };
        self.calls.push(CallDelta {
            index,
            id,
            name: name.to_string(),
            arguments: String::new(),
        });
        index
    }

    /// Marks call `index` complete: its arguments are a whole JSON object.
    pub(crate) fn end_call(&mut self, _index: u32) {
        self.open_calls = self.open_calls.saturating_sub(1);
    }

    /// Whether every call started so far is complete (and at least one was made).
    pub(crate) fn all_calls_complete(&self) -> bool {
        self.call_count > 0 && self.open_calls == 0
    }

    /// Appends an arguments fragment to call `index`.
    pub(crate) fn call_args(&mut self, index: u32, fragment: &str) {
        if fragment.is_empty() {
            return;
        }
        match self.calls.last_mut() {
            Some(last) if last.index == index => last.arguments.push_str(fragment),
            _ => self.calls.push(CallDelta {
                index,
                arguments: fragment.to_string(),
                ..CallDelta::default()
            }),
        }
    }

    fn new_id(&mut self) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let (prefix, len) = match self.id_style {
            IdStyle::OpenAi | IdStyle::Format => ("call_", 24),
            IdStyle::Mistral => ("", 9),
        };
        let mut id = String::with_capacity(prefix.len() + len);
        id.push_str(prefix);
        for _ in 0..len {
            // xorshift64*: ids need to be unique, not secret; the seed is random per request.
            self.id_state ^= self.id_state >> 12;
            self.id_state ^= self.id_state << 25;
            self.id_state ^= self.id_state >> 27;
            let r = self.id_state.wrapping_mul(0x2545_F491_4F6C_DD1D);
            id.push(ALPHABET[(r >> 58) as usize % ALPHABET.len()] as char);
        }
        id
    }
}
