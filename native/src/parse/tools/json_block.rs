//! The JSON-call family: a start marker, then one call object or a JSON list of call objects,
//! then (for most formats) an end marker. One parser, parametrised by a [`BlockSpec`]: Hermes
//! (`<tool_call>{...}</tool_call>`), Jamba (`<tool_calls>[...]</tool_calls>`), Phi-4-mini
//! (`functools[...]`), Granite 20B FC (`<function_call> {...}`, no end marker), Apertus
//! (`[{"NAME": {...}}]`), Cohere (`{"tool_name", "parameters"}`), ... (`json_formats`).
//!
//! A call is decided when its name is read: before that the text since the start marker is held,
//! and if it turns out not to be a call object (bad JSON, no name, end of output) it is content,
//! markers and all. Inside a list, `,` and `]` are framing; after the body, everything up to the
//! end marker is framing (a format without one goes back to content), except another object where
//! the body is one object (Hermes' `<tool_call>{...}\n{...}</tool_call>`): it is read as another
//! call, and if it turns out not to be one, as content up to the end marker (never dropped). A
//! start marker followed by anything but the body's first bracket is content.

use crate::parse::out::{Channel, Out};
use crate::parse::text::{leading_ws, Markers, SegBuf};
use crate::parse::tools::json_call::{CallEvent, CallShape, JsonCall};
use crate::parse::Stage;

/// What follows the start marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Body {
    /// One call object.
    Object,
    /// A JSON list of call objects.
    List,
    /// Either (Mistral's array form, or one object without the brackets).
    Either,
}

/// One format of the family.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockSpec {
    /// The start, alternatives; each a sequence of markers written back to back
    /// (`<|action_start|><|plugin|>`).
    pub(crate) opens: &'static [&'static [&'static str]],
    /// The end marker, when the format has one.
    pub(crate) close: Option<&'static str>,
    pub(crate) body: Body,
    pub(crate) shape: CallShape,
    /// A body at the very start of the output counts without a start marker (xLAM).
    pub(crate) at_start: bool,
    /// Without an end marker: markers that are framing when they follow the body (after
    /// whitespace), such as xLAM's closing code fence; anything else after the body is content.
    pub(crate) trailers: &'static [&'static str],
    /// Markers that stay content but after which a body counts as at the start (xLAM after
    /// `</think>`); used with `at_start`.
    pub(crate) restarts: &'static [&'static str],
    /// Markers that are framing wherever they appear in content (Cohere's answer wrapper
    /// `<|START_RESPONSE|>`...`<|END_RESPONSE|>`).
    pub(crate) framing: &'static [&'static str],
}

impl BlockSpec {
    /// The base of a spec: one `{"name", "arguments"}` object, no end marker.
    pub(crate) const PLAIN: BlockSpec = BlockSpec {
        opens: &[],
        close: None,
        body: Body::Object,
        shape: CallShape::NAME_ARGS,
        at_start: false,
        trailers: &[],
        restarts: &[],
        framing: &[],
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing read yet (`at_start` specs): a body here needs no start marker.
    Start,
    Content,
    /// The input starts with a start marker of `marker` bytes, not yet routed.
    Opened {
        marker: usize,
    },
    /// Reading an object not yet known to be a call: the first `prefix` bytes (marker, `[`,
    /// whitespace) are framing if it is one and content if not; `cursor` bytes read. `list`: an
    /// element of a list. `again`: an object after the body in the same block (the prefix is
    /// framing either way, and if it is no call it is content up to the end marker).
    Undecided {
        prefix: usize,
        cursor: usize,
        list: bool,
        again: bool,
    },
    InCall {
        index: u32,
        list: bool,
    },
    /// In a list after an element: `,` or `]`.
    ListNext,
    /// In a list after `,`: the next element.
    ListItem,
    /// Right after the body: whitespace so far (framing); in a one-object body a `{` here starts
    /// another object, anything else is `Trailing`.
    AfterBody,
    /// After the body and something other than whitespace: framing through the end marker.
    Trailing,
    /// An object after the body that is no call: content up to the end marker (framing).
    Stray,
}

/// The parser (see the module docs).
pub(crate) struct JsonBlock {
    spec: &'static BlockSpec,
    opens: Vec<String>,
    close: Option<String>,
    trailers: Vec<String>,
    restarts: Vec<String>,
    framing: Vec<String>,
    state: State,
    call: JsonCall,
}

impl JsonBlock {
    pub(crate) fn new(spec: &'static BlockSpec, markers: &Markers) -> Self {
        let opens = spec
            .opens
            .iter()
            .map(|seq| seq.iter().map(|m| markers.pattern(m)).collect())
            .collect();
        JsonBlock {
            spec,
            opens,
            close: spec.close.map(|m| markers.pattern(m)),
            trailers: spec.trailers.iter().map(|m| markers.pattern(m)).collect(),
            restarts: spec.restarts.iter().map(|m| markers.pattern(m)).collect(),
            framing: spec.framing.iter().map(|m| markers.pattern(m)).collect(),
            state: if spec.at_start {
                State::Start
            } else {
                State::Content
            },
            call: JsonCall::shaped(spec.shape),
        }
    }

    /// One state's work: `None` to wait for more input.
    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Start => {
                let s = input.as_str();
                let ws = leading_ws(s);
                if ws == s.len() && !end {
                    return None;
                }
                let first = s[ws..].chars().next();
                self.state = State::Content;
                if first.is_some_and(|c| self.opens_body(c)) {
                    out.route(input, ws, Channel::Content);
                    self.state = State::Opened { marker: 0 };
                }
            }
            State::Content => {
                let patterns: Vec<&str> = self
                    .opens
                    .iter()
                    .chain(&self.restarts)
                    .chain(&self.framing)
                    .map(String::as_str)
                    .collect();
                let index = out.route_until(input, &patterns, Channel::Content, end)?;
                if let Some(open) = self.opens.get(index) {
                    self.state = State::Opened { marker: open.len() };
                } else if index >= self.opens.len() + self.restarts.len() {
                    out.route(input, patterns[index].len(), Channel::Framing);
                } else {
                    out.route(input, patterns[index].len(), Channel::Content);
                    self.state = State::Start;
                }
            }
            State::Opened { marker } => self.opened(marker, input, out, end)?,
            State::Undecided { .. } => self.undecided(input, out, end)?,
            State::InCall { index, list } => {
                let event = self.call.stream(index, input, out, end)?;
                self.state = if event == CallEvent::Done && list {
                    State::ListNext
                } else {
                    State::AfterBody
                };
            }
            State::ListNext => self.list_next(input, out, end)?,
            State::ListItem => {
                let s = input.as_str();
                let after = &s[leading_ws(s)..];
                if after.is_empty() && !end {
                    return None;
                }
                self.state = if after.starts_with('{') {
                    self.begin(0, true, false)
                } else {
                    State::AfterBody
                };
            }
            State::AfterBody => self.after_body(input, out, end)?,
            State::Trailing => {
                let patterns = self.closing_patterns();
                let index = out.route_until(input, &patterns, Channel::Framing, end)?;
                self.close_or_reopen(index, input, out);
            }
            State::Stray => {
                let patterns = self.closing_patterns();
                let index = out.route_until(input, &patterns, Channel::Content, end)?;
                self.close_or_reopen(index, input, out);
            }
        }
        Some(())
    }

    /// Whether a body begins with `c`.
    fn opens_body(&self, c: char) -> bool {
        match self.spec.body {
            Body::Object => c == '{',
            Body::List => c == '[',
            Body::Either => c == '{' || c == '[',
        }
    }

    fn begin(&mut self, prefix: usize, list: bool, again: bool) -> State {
        self.call = JsonCall::shaped(self.spec.shape);
        State::Undecided {
            prefix,
            cursor: prefix,
            list,
            again,
        }
    }

    /// After the start marker: the body's first bracket, else the marker is content.
    fn opened(
        &mut self,
        marker: usize,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<()> {
        let s = &input.as_str()[marker..];
        let ws = leading_ws(s);
        let after = &s[ws..];
        let lists = self.spec.body != Body::Object;
        let objects = self.spec.body != Body::List;
        if let Some(inner) = after.strip_prefix('[').filter(|_| lists) {
            let ws2 = leading_ws(inner);
            match inner[ws2..].chars().next() {
                Some('{') => self.state = self.begin(marker + ws + 1 + ws2, true, false),
                Some(']') => {
                    out.route(input, marker + ws + 1 + ws2 + 1, Channel::Framing);
                    self.state = State::AfterBody;
                }
                None if !end => return None,
                _ => self.not_a_call(marker, input, out),
            }
        } else if after.starts_with('{') && objects {
            self.state = self.begin(marker + ws, false, false);
        } else if after.is_empty() && !end {
            return None;
        } else {
            self.not_a_call(marker, input, out);
        }
        Some(())
    }

    fn not_a_call(&mut self, prefix: usize, input: &mut SegBuf, out: &mut Out) {
        out.route(input, prefix, Channel::Content);
        self.state = State::Content;
    }

    /// The `Undecided` state's work (its fields are read from the state).
    fn undecided(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let State::Undecided {
            prefix,
            cursor,
            list,
            again,
        } = self.state
        else {
            unreachable!("called in the Undecided state")
        };
        let (n, event) = self.call.feed(&input.as_str()[cursor..]);
        let cursor = cursor + n;
        match event {
            CallEvent::Named => {
                let index = self.call.start(out);
                out.route(input, prefix, Channel::Framing);
                out.route(input, cursor - prefix, Channel::Tool);
                self.state = State::InCall { index, list };
            }
            CallEvent::More if !end => {
                self.state = State::Undecided {
                    prefix,
                    cursor,
                    list,
                    again,
                };
                return None;
            }
            _ if again => {
                out.route(input, prefix, Channel::Framing);
                self.state = State::Stray;
            }
            // Not a call: what was held is content, and what follows is read as content.
            _ => self.not_a_call(prefix, input, out),
        }
        Some(())
    }

    fn list_next(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let s = input.as_str();
        let ws = leading_ws(s);
        match s[ws..].chars().next() {
            Some(',') => {
                out.route(input, ws + 1, Channel::Framing);
                self.state = State::ListItem;
            }
            Some(']') => {
                out.route(input, ws + 1, Channel::Framing);
                self.state = State::AfterBody;
            }
            None if !end => return None,
            _ => self.state = State::AfterBody,
        }
        Some(())
    }

    /// Whitespace right after the body is framing; in a one-object body a `{` right after it
    /// starts another object. Anything else goes to `Trailing`: framing through the end marker, or
    /// a new start marker (the end one missing) starts over. A `{` after other text stays framing
    /// (deciding it only right after the body keeps the result the same however the input is cut).
    fn after_body(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        if self.close.is_none() {
            return self.trailer(input, out, end);
        }
        if self.spec.body == Body::Object {
            let ws = leading_ws(input.as_str());
            out.route(input, ws, Channel::Framing);
            if input.is_empty() {
                return None;
            }
            if input.as_str().starts_with('{') {
                self.state = self.begin(0, false, true);
                return Some(());
            }
        }
        self.state = State::Trailing;
        Some(())
    }

    /// The end marker, then the start markers (a new block with the end marker missing).
    fn closing_patterns(&self) -> Vec<&str> {
        let mut patterns: Vec<&str> = self.close.iter().map(String::as_str).collect();
        patterns.extend(self.opens.iter().map(String::as_str));
        patterns
    }

    /// At pattern `index` of `closing_patterns`: the end marker is framing; either way what
    /// follows is read as content.
    fn close_or_reopen(&mut self, index: usize, input: &mut SegBuf, out: &mut Out) {
        if index == 0 {
            let close = self.close.as_ref().map_or(0, String::len);
            out.route(input, close, Channel::Framing);
        }
        self.state = State::Content;
    }
}

impl JsonBlock {
    /// After a body without an end marker: whitespace and a trailer are framing.
    fn trailer(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let s = input.as_str();
        let ws = leading_ws(s);
        let rest = &s[ws..];
        if let Some(t) = self.trailers.iter().find(|t| rest.starts_with(t.as_str())) {
            out.route(input, ws + t.len(), Channel::Framing);
        } else if !end && self.trailers.iter().any(|t| t.starts_with(rest)) {
            return None;
        }
        // Another body right after this one needs no start marker either.
        self.state = if self.spec.at_start {
            State::Start
        } else {
            State::Content
        };
        Some(())
    }
}

/// Driving the reader from a parser that finds the start marker itself and reads other forms
/// beside the JSON body (Mistral's name form).
impl JsonBlock {
    /// Reads the body after a start marker of `marker` bytes at the start of the input.
    pub(crate) fn enter(&mut self, marker: usize) {
        self.state = State::Opened { marker };
    }

    /// Reads one state's worth: `None` to wait for more input, `Some(true)` once the body and
    /// what follows it are read (or the text turned out to be content).
    pub(crate) fn advance(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<bool> {
        self.step(input, out, end)?;
        Some(self.state == State::Content)
    }

    /// Whether the reader must go on with no input left.
    pub(crate) fn busy(&self, end: bool) -> bool {
        matches!(self.state, State::InCall { .. }) || (end && self.state != State::Content)
    }
}

impl Stage for JsonBlock {
    fn held(&self) -> usize {
        self.call.held()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        while self.step(input, out, end).is_some() {
            if input.is_empty() && !self.busy(end) {
                return;
            }
        }
    }
}
