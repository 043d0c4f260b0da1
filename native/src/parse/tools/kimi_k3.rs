//! `kimi_k3` (Kimi K3, XTML channels): `<|open|>HEAD<|sep|>` ... `<|close|>NAME<|sep|>`, where the
//! `response` channel holds the reply and the `tools` channel the calls:
//! `<|open|>tools<|sep|><|open|>call tool="f" index="0"<|sep|><|open|>argument key="k"
//! type="string"<|sep|>v<|close|>argument<|sep|>...<|close|>call<|sep|><|close|>tools<|sep|>`.
//!
//! The channel tags are framing and the response's text is content; any other tag outside the
//! tools channel is content. A call starts at its `call` tag (with a `tool` attribute); values of
//! `type="string"` (or no type) are raw text, other types JSON text (a string when not JSON), as
//! the template writes them; attribute values are unescaped (`&quot;`, `&amp;`). Stray text
//! inside the tools channel is framing.

use crate::parse::out::{Channel, Out};
use crate::parse::schema::{Tools, TypeSet};
use crate::parse::text::{scan, Markers, Scan, SegBuf};
use crate::parse::tools::xml_args::{ArgsBuilder, ValueEnd};
use crate::parse::Stage;

/// The markers this format uses.
pub(crate) const MARKERS: &[&str] = &["<|open|>", "<|sep|>", "<|close|>"];

/// A tag head longer than this is no tag (bounds what is held back).
const MAX_HEAD: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctx {
    Content,
    Tools,
    Call,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Text of the context, up to the next tag.
    Text,
    /// The input starts with `<|open|>` or `<|close|>`.
    Tag,
    Value,
    /// After a value's `<|close|>`: its `argument<|sep|>`.
    ValueTail,
}

/// The parser (see the module docs).
struct KimiK3 {
    open: String,
    sep: String,
    close: String,
    ctx: Ctx,
    state: State,
    args: ArgsBuilder,
}

/// The parser of a request (registry constructor).
pub(crate) fn build(markers: &Markers, _tools: &Tools) -> Box<dyn Stage> {
    let p = |i: usize| markers.pattern(MARKERS[i]);
    Box::new(KimiK3 {
        open: p(0),
        sep: p(1),
        close: p(2),
        ctx: Ctx::Content,
        state: State::Text,
        args: ArgsBuilder::new(false),
    })
}

/// `name="value"` attributes of a tag head, unescaped.
fn attr(head: &str, name: &str) -> Option<String> {
    let at = head.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = head[at..].find('"')?;
    Some(
        head[at..at + len]
            .replace("&quot;", "\"")
            .replace("&amp;", "&"),
    )
}

impl KimiK3 {
    fn text_channel(&self) -> Channel {
        match self.ctx {
            Ctx::Content => Channel::Content,
            Ctx::Tools => Channel::Framing,
            Ctx::Call => Channel::Tool,
        }
    }

    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Text => {
                let channel = self.text_channel();
                out.route_until(input, &[&self.open, &self.close], channel, end)?;
                self.state = State::Tag;
            }
            State::Tag => self.tag(input, out, end)?,
            State::Value => {
                let ends = [self.close.as_str(), self.open.as_str()];
                match self.args.value(input, out, &ends, end) {
                    ValueEnd::Closed => self.state = State::ValueTail,
                    ValueEnd::Pending | ValueEnd::Cut => return None,
                }
            }
            State::ValueTail => {
                let tail = format!("argument{}", self.sep);
                let s = input.as_str();
                if s.starts_with(&tail) {
                    out.route(input, tail.len(), Channel::Tool);
                } else if !end && tail.starts_with(s) {
                    return None;
                }
                self.state = State::Text;
            }
        }
        Some(())
    }

    /// A tag at the start of the input: what it means depends on the context.
    fn tag(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let s = input.as_str();
        let opening = s.starts_with(self.open.as_str());
        let marker = if opening {
            self.open.len()
        } else {
            self.close.len()
        };
        let head = match scan(&s[marker..], &[&self.sep, &self.open, &self.close]) {
            Scan::Found { at, index: 0 } if at <= MAX_HEAD => Some(&s[marker..marker + at]),
            Scan::None | Scan::Partial { .. } if !end && s.len() - marker <= MAX_HEAD => {
                return None
            }
            _ => None,
        };
        let Some(head) = head else {
            // No tag: the marker is text of the context (a cut-off call stays as read).
            let channel = self.text_channel();
            out.route(input, marker, channel);
            self.state = State::Text;
            return Some(());
        };
        let head = head.to_string();
        let len = marker + head.len() + self.sep.len();
        let word = head.split(' ').next().unwrap_or_default();
        match (self.ctx, opening, word) {
            (Ctx::Content, _, "response") => out.route(input, len, Channel::Framing),
            (Ctx::Content, true, "tools") => {
                out.route(input, len, Channel::Framing);
                self.ctx = Ctx::Tools;
            }
            (Ctx::Tools, false, "tools") => {
                out.route(input, len, Channel::Framing);
                self.ctx = Ctx::Content;
            }
            (Ctx::Tools, true, "call") => match attr(&head, "tool").filter(|t| !t.is_empty()) {
                Some(name) => {
                    let index = out.start_call(&name, None);
                    out.route(input, len, Channel::Tool);
                    self.args.start(index, out);
                    self.ctx = Ctx::Call;
                }
                None => out.route(input, len, Channel::Framing),
            },
            (Ctx::Call, true, "argument") => {
                let key = attr(&head, "key").unwrap_or_default();
                let types = match attr(&head, "type").as_deref() {
                    None | Some("string") => TypeSet::string(),
                    Some(_) => TypeSet::json(),
                };
                out.route(input, len, Channel::Tool);
                self.args.begin(&key, types);
                self.state = State::Value;
                return Some(());
            }
            (Ctx::Call, false, "call") => {
                out.route(input, len, Channel::Framing);
                self.args.finish(out);
                self.ctx = Ctx::Tools;
            }
            (Ctx::Content, _, _) => out.route(input, marker, Channel::Content),
            _ => {
                let channel = self.text_channel();
                out.route(input, len, channel);
            }
        }
        self.state = State::Text;
        Some(())
    }
}

impl Stage for KimiK3 {
    fn held(&self) -> usize {
        self.args.held()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        while self.step(input, out, end).is_some() {
            if input.is_empty() && !(end && self.state == State::ValueTail) {
                return;
            }
        }
    }
}
