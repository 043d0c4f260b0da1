//! `gemma4` (`<|tool_call>call:NAME{key:<|"|>text<|"|>,n:42}<tool_call|>`) and `functiongemma`
//! (`<start_function_call>call:NAME{key:<escape>text<escape>}<end_function_call>`): one reader,
//! a [`GemmaSpec`] per format; the arguments are Gemma's object syntax
//! ([`crate::parse::tools::gemma_args`]).
//!
//! A call starts at the `{` after `call:NAME` (a name of word characters); an open tag followed by
//! anything else is content. After the arguments' closing `}`, everything up to the end tag is
//! framing.

use crate::parse::out::{Channel, Out};
use crate::parse::schema::Tools;
use crate::parse::text::{could_become, leading_ws, Markers, SegBuf};
use crate::parse::tools::gemma_args::{ArgsEnd, GemmaArgs};
use crate::parse::Stage;

/// A format of the family: its markers (open tag, end tag, string delimiter).
pub(crate) struct GemmaSpec {
    pub(crate) markers: &'static [&'static str],
}

/// Gemma 4.
pub(crate) const GEMMA4: GemmaSpec = GemmaSpec {
    markers: &["<|tool_call>", "<tool_call|>", "<|\"|>"],
};

/// FunctionGemma.
pub(crate) const FUNCTIONGEMMA: GemmaSpec = GemmaSpec {
    markers: &["<start_function_call>", "<end_function_call>", "<escape>"],
};

const CALL: &str = "call:";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Content,
    /// The input starts with the open tag.
    Header,
    Args {
        index: u32,
    },
    /// After the arguments (or a broken call), up to the end tag.
    Tail,
}

/// The parser (see the module docs).
struct Gemma {
    open: String,
    close: String,
    quote: String,
    state: State,
    tools: Tools,
    function: String,
    args: GemmaArgs,
}

fn build_spec(spec: &GemmaSpec, markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    let p = |i: usize| markers.pattern(spec.markers[i]);
    let (open, close, quote) = (p(0), p(1), p(2));
    Box::new(Gemma {
        args: GemmaArgs::new(&quote, &close),
        open,
        close,
        quote,
        state: State::Content,
        tools: tools.clone(),
        function: String::new(),
    })
}

/// The `gemma4` parser of a request (registry constructor).
pub(crate) fn build_gemma4(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    build_spec(&GEMMA4, markers, tools)
}

/// The `functiongemma` parser of a request (registry constructor).
pub(crate) fn build_functiongemma(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    build_spec(&FUNCTIONGEMMA, markers, tools)
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

impl Gemma {
    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Content => {
                out.route_until(input, &[&self.open], Channel::Content, end)?;
                self.state = State::Header;
            }
            State::Header => self.header(input, out, end)?,
            State::Args { index } => {
                let mut text = String::new();
                let tools = &self.tools;
                let function = self.function.as_str();
                let types = |key: &str| tools.param_types(function, key);
                let (used, stop) = self.args.feed(input.as_str(), &mut text, &types);
                out.route(input, used, Channel::Tool);
                out.call_args(index, &text);
                match stop {
                    ArgsEnd::Done(_) => {
                        out.end_call(index);
                        self.state = State::Tail;
                    }
                    ArgsEnd::Broken(_) => self.state = State::Tail,
                    // Cut off: the call stays as read.
                    ArgsEnd::More if end => out.route_all(input, Channel::Tool),
                    ArgsEnd::More => return None,
                }
            }
            State::Tail => {
                let pats = [self.close.as_str(), self.open.as_str()];
                let index = out.route_until(input, &pats, Channel::Framing, end)?;
                if index == 0 {
                    out.route(input, self.close.len(), Channel::Framing);
                }
                self.state = State::Content;
            }
        }
        Some(())
    }

    /// `call:NAME{` after the open tag: the call starts; anything else leaves the tag as content.
    fn header(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let open_len = self.open.len();
        let s = &input.as_str()[open_len..];
        let ws = leading_ws(s);
        let rest = &s[ws..];
        let name_len = rest
            .strip_prefix(CALL)
            .map(|r| r.find(|c| !is_word(c)).unwrap_or(r.len()));
        let decided = match name_len {
            Some(n) if n > 0 && rest[CALL.len() + n..].starts_with('{') => Some(true),
            Some(n) if CALL.len() + n == rest.len() => None,
            None if could_become(rest, CALL) || rest.is_empty() => None,
            _ => Some(false),
        };
        match decided {
            Some(true) => {
                let n = name_len.unwrap_or_default();
                self.function = rest[CALL.len()..CALL.len() + n].to_string();
                let index = out.start_call(&self.function, None);
                out.route(input, open_len, Channel::Framing);
                out.route(input, ws + CALL.len() + n + 1, Channel::Tool);
                out.call_args(index, "{");
                self.args = GemmaArgs::new(&self.quote, &self.close);
                self.state = State::Args { index };
            }
            None if !end => return None,
            _ => {
                out.route(input, open_len, Channel::Content);
                self.state = State::Content;
            }
        }
        Some(())
    }
}

impl Stage for Gemma {
    fn held(&self) -> usize {
        self.args.held()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        while self.step(input, out, end).is_some() {
            if input.is_empty() && !matches!(self.state, State::Header) {
                return;
            }
        }
    }
}
