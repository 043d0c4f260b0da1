//! `muse` (Muse Spark) and `muse_glimmer`: channel-scoped messages, each addressed to a recipient,
//! calls written in ATEM elements inside the messages addressed to a tool:
//!
//! ```text
//! <|start|>assistant to=self<|message|>...reasoning...<|eom|>
//! <|start|>assistant to=functions.f<|message|><atem:function_calls>
//! <atem:invoke name="functions.f">
//! <atem:parameter name="k">v</atem:parameter>
//! </atem:invoke>
//! </atem:function_calls><|eom|>
//! <|start|>assistant to=user<|message|>...answer...<|eot|>
//! ```
//!
//! A header is `<|start|>assistant`, an optional ` to=RECIPIENT`, then `<|message|>`; the first
//! message of a turn may lack `<|start|>assistant` (the prompt ends with it), and a bare
//! `<|message|>` has no recipient. A message ends at `<|eom|>`, `<|eot|>` or the next
//! `<|start|>`. By recipient (see [`MuseSpec`]) a body is reasoning, content, dropped (framing),
//! or a tool channel read as ATEM blocks by [`invoke`](super::invoke) (text there outside blocks
//! is content). Values are JSON when they parse, else strings (Muse Spark keeps a parameter whose
//! schema type is `string` as written). Headers and message ends are framing; text outside
//! messages is content.

use crate::parse::out::{Channel, Out};
use crate::parse::pacing::Pacer;
use crate::parse::schema::Tools;
use crate::parse::text::{scan, Markers, Scan, SegBuf};
use crate::parse::tools::invoke::{InvokeCalls, InvokeSpec, ValueTypes};
use crate::parse::Stage;

/// The markers this format uses.
pub(crate) const MARKERS: &[&str] = &["<|start|>", "<|message|>", "<|eom|>", "<|eot|>"];

/// Which recipients are which channel.
pub(crate) struct MuseSpec {
    /// Reasoning recipients (`None`: a bare `<|message|>`).
    reasoning: &'static [Option<&'static str>],
    content: &'static [Option<&'static str>],
    /// Recipients whose messages are neither calls nor shown.
    dropped: &'static [&'static str],
    atem: &'static InvokeSpec,
}

const ATEM: InvokeSpec = InvokeSpec {
    block_open: "<atem:function_calls>",
    block_close: "</atem:function_calls>",
    invoke_open: "<atem:invoke name=\"",
    invoke_close: "</atem:invoke>",
    param_open: "<atem:parameter name=\"",
    param_close: "</atem:parameter>",
    types: ValueTypes::Json,
    json_calls: false,
    cdata: false,
    trim_values: false,
    doubled_names: true,
};

/// Muse Spark: string-typed parameters are kept as written.
const ATEM_SPARK: InvokeSpec = InvokeSpec {
    types: ValueTypes::JsonUnlessString,
    ..ATEM
};

const SPARK: MuseSpec = MuseSpec {
    reasoning: &[None, Some("self")],
    content: &[Some("user"), Some("commentary")],
    dropped: &["developer"],
    atem: &ATEM_SPARK,
};

const GLIMMER: MuseSpec = MuseSpec {
    reasoning: &[Some("self")],
    content: &[None, Some("user")],
    dropped: &[],
    atem: &ATEM,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reasoning,
    Content,
    Dropped,
    Tool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Outside,
    /// The input starts with a possible header (`<|start|>`, ` to=` or `<|message|>`).
    Header,
    Body(Kind),
}

/// The parser (see the module docs).
pub(crate) struct Muse {
    spec: &'static MuseSpec,
    start: String,
    message: String,
    eom: String,
    eot: String,
    state: State,
    markers: Markers,
    tools: Tools,
    /// The current tool channel's body, read by `calls`.
    body: SegBuf,
    /// When `calls` is fed again while it waits on `body`.
    body_pacer: Pacer,
    /// The next feed of `calls` is not paced (see [`Stage::read_nested_waits`]).
    force_body: bool,
    calls: Option<InvokeCalls>,
}

fn build_with(spec: &'static MuseSpec, markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    let p = |i: usize| markers.pattern(MARKERS[i]);
    Box::new(Muse {
        spec,
        start: p(0),
        message: p(1),
        eom: p(2),
        eot: p(3),
        state: State::Outside,
        markers: markers.clone(),
        tools: tools.clone(),
        body: SegBuf::default(),
        body_pacer: Pacer::default(),
        force_body: false,
        calls: None,
    })
}

/// `muse` (registry constructor).
pub(crate) fn build(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    build_with(&SPARK, markers, tools)
}

/// `muse_glimmer` (registry constructor).
pub(crate) fn build_glimmer(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    build_with(&GLIMMER, markers, tools)
}

fn is_recipient_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

/// How a header at the start of `s` reads: `Some(Some((len, recipient)))` for a complete header,
/// `Some(None)` when it may still complete, `None` when it is not one.
fn header<'a>(s: &'a str, start: &str, message: &str) -> Option<Option<(usize, Option<&'a str>)>> {
    let mut rest = s;
    let mut consumed = 0;
    let mut eat = |rest: &mut &'a str, n: usize| {
        consumed += n;
        *rest = &rest[n..];
    };
    if let Some(after) = rest.strip_prefix(start) {
        let ws = after.len() - after.trim_start().len();
        let tail = &after[ws..];
        if tail.len() < "assistant".len() && "assistant".starts_with(tail) {
            return Some(None);
        }
        if !tail.starts_with("assistant") {
            return None;
        }
        eat(&mut rest, start.len() + ws + "assistant".len());
    }
    let spaces = rest.len() - rest.trim_start_matches([' ', '\t']).len();
    eat(&mut rest, spaces);
    let mut recipient = None;
    if let Some(after) = rest.strip_prefix("to=") {
        let n = after.find(|c| !is_recipient_char(c)).unwrap_or(after.len());
        if n == after.len() {
            return Some(None);
        }
        recipient = Some(&after[..n]).filter(|r| !r.is_empty());
        recipient?;
        eat(&mut rest, 3 + n);
    } else if rest.is_empty() || "to=".starts_with(rest) {
        return Some(None);
    }
    if rest.starts_with(message) {
        return Some(Some((consumed + message.len(), recipient)));
    }
    if rest.len() < message.len() && message.starts_with(rest) {
        return Some(None);
    }
    None
}

impl Muse {
    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Outside => {
                let patterns = [self.start.as_str(), self.message.as_str(), " to="];
                out.route_until(input, &patterns, Channel::Content, end)?;
                self.state = State::Header;
            }
            State::Header => self.header(input, out, end)?,
            State::Body(Kind::Tool) => self.tool_body(input, out, end)?,
            State::Body(kind) => {
                let channel = match kind {
                    Kind::Reasoning => Channel::Reasoning,
                    Kind::Content => Channel::Content,
                    _ => Channel::Framing,
                };
                let ends = [self.eom.as_str(), self.eot.as_str(), self.start.as_str()];
                let index = out.route_until(input, &ends, channel, end)?;
                self.end_message(index, input, out);
            }
        }
        Some(())
    }

    /// A header: framing, and the body's kind from its recipient; not a header: one character of
    /// content.
    fn header(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match header(input.as_str(), &self.start, &self.message) {
            Some(Some((len, recipient))) => {
                let kind = self.kind(recipient);
                out.route(input, len, Channel::Framing);
                if kind == Kind::Tool {
                    self.calls = Some(InvokeCalls::new(self.spec.atem, &self.markers, &self.tools));
                    self.body_pacer.restart();
                }
                self.state = State::Body(kind);
            }
            Some(None) if !end => return None,
            _ => {
                let first = input.as_str().chars().next().map_or(0, char::len_utf8);
                out.route(input, first, Channel::Content);
                self.state = State::Outside;
            }
        }
        Some(())
    }

    fn kind(&self, recipient: Option<&str>) -> Kind {
        let spec = self.spec;
        if spec.reasoning.contains(&recipient) {
            Kind::Reasoning
        } else if spec.content.contains(&recipient) {
            Kind::Content
        } else if recipient.is_none_or(|r| spec.dropped.contains(&r)) {
            Kind::Dropped
        } else {
            Kind::Tool
        }
    }

    /// After a body: its end marker is framing (`index` 0 or 1); a `<|start|>` (2) begins the
    /// next header.
    fn end_message(&mut self, index: usize, input: &mut SegBuf, out: &mut Out) {
        match index {
            0 => out.route(input, self.eom.len(), Channel::Framing),
            1 => out.route(input, self.eot.len(), Channel::Framing),
            _ => {
                self.state = State::Header;
                return;
            }
        }
        self.state = State::Outside;
    }

    /// A tool channel's body: handed to the ATEM reader up to the message's end, which ends it.
    fn tool_body(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let ends = [self.eom.as_str(), self.eot.as_str(), self.start.as_str()];
        let (at, found) = match scan(input.as_str(), &ends) {
            Scan::Found { at, index } => (at, Some(index)),
            Scan::Partial { at } if !end => (at, None),
            _ => (input.len(), None),
        };
        let body = &mut self.body;
        input.take(at, |text, from, _| body.push(text, from));
        let calls = self.calls.as_mut()?;
        // The reader's waits are paced as the session paces every stage's (`parse::pacing`): this
        // stage's own input is empty while the body waits in `body`.
        let done = end || found.is_some();
        let force = std::mem::take(&mut self.force_body);
        self.body_pacer.feed(&mut self.body, done, force, |body| {
            calls.feed(body, out, done)
        });
        match found {
            Some(index) => {
                self.calls = None;
                // The reader flushed the body at the message's end; nothing is left but in case.
                out.route_all(&mut self.body, Channel::Content);
                self.end_message(index, input, out);
                Some(())
            }
            None => None,
        }
    }
}

impl Stage for Muse {
    fn held(&self) -> usize {
        self.body.len() + self.calls.as_ref().map_or(0, Stage::held)
    }

    fn read_nested_waits(&mut self) {
        self.force_body = true;
    }

    #[cfg(test)]
    fn nested_handed(&self) -> u64 {
        self.body_pacer.handed()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        while self.step(input, out, end).is_some() {}
    }
}
