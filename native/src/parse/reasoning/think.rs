//! Start/end-marker reasoning (`<think>`...`</think>`, `[THINK]`...`[/THINK]`): text between the
//! markers is reasoning.
//!
//! Where generation starts follows one rule for every format ([`StartRule::decide`]): the prompt's
//! last reasoning marker when the prompt's tail (after its last special token) has one, else the
//! request's flag when the format honours one, else the format's default. The session primes the
//! splitter with that tail ([`Stage::prime`]).
//!
//! Reasoning that was only assumed (by default or by a flag, never opened by a marker) ends at a
//! tool-call start for formats whose models skip the end marker when they do not think (Qwen3,
//! GLM, Kimi). Reasoning opened by a marker ends only at its end marker: a tool call written
//! inside it is reasoning text. A start marker right where reasoning begins is framing (the model
//! opening the block the template already opened); once reasoning text has begun, a start marker
//! is text, as is an end marker in content: no character of the output is dropped.
//!
//! Some formats write more framing around the block ([`ThinkSpec`]): whitespace padding its
//! inside (Cohere, GLM), a label after the start marker (Gemma 4's `thought\n`), newlines after
//! the end marker (Granite 4.2), or an answer wrapper after it (ERNIE 4.5 `<response>`, Hunyuan
//! `<answer>`). Each is framing only where the format puts it; anywhere else it is text.

use serde_json::{Map, Value};

use crate::parse::out::{Channel, Out};
use crate::parse::registry::StartRule;
use crate::parse::text::{could_become, leading_ws, scan, Markers, Scan, SegBuf};
use crate::parse::Stage;

/// A start/end-marker format's markers and the framing around them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ThinkSpec {
    pub(crate) start: &'static [&'static str],
    pub(crate) end: &'static [&'static str],
    /// Tool-call starts that end assumed reasoning (the marker is left for the tool parser).
    pub(crate) implicit_end: &'static [&'static str],
    /// Whitespace that ends a reasoning block (just before its end marker) is framing: the format's
    /// templates write the reasoning stripped (GLM, Kimi, MiniMax, Mistral).
    pub(crate) trim_end: bool,
    /// Whitespace that begins a reasoning block is framing (Cohere pads the block with newlines).
    pub(crate) trim_start: bool,
    /// Text the format writes right after its start marker, framing there (Gemma 4's `thought\n`).
    pub(crate) label: &'static str,
    /// Newlines right after the end marker are framing (Granite 4.2's template writes
    /// `</think>\n` before the answer).
    pub(crate) trim_after_end: bool,
    /// An answer wrapper after the end marker: an opener that follows it after whitespace only
    /// (empty: the end marker itself opens the answer) and its closer, both framing with the
    /// whitespace before the opener (ERNIE 4.5 `<response>`...`</response>`, Hunyuan `\n</answer>`).
    pub(crate) answer_open: &'static [&'static str],
    pub(crate) answer_close: &'static [&'static str],
    /// Tokens inside multi-token markers (`<|sep|>` of `<|open|>think<|sep|>`): looked for as
    /// markers too, so the longer marker is read by id, whether special tokens are skipped or not.
    /// The session registers them from the row's marker list, which a test holds equal to these.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) pieces: &'static [&'static str],
}

impl ThinkSpec {
    /// The fields a row does not set: no markers, no framing beyond the markers.
    pub(crate) const BASE: ThinkSpec = ThinkSpec {
        start: &[],
        end: &[],
        implicit_end: &[],
        trim_end: false,
        trim_start: false,
        label: "",
        trim_after_end: false,
        answer_open: &[],
        answer_close: &[],
        pieces: &[],
    };

    /// Every marker the splitter looks for.
    #[cfg(test)]
    pub(crate) fn markers(&self) -> impl Iterator<Item = &'static str> {
        self.start
            .iter()
            .chain(self.end)
            .chain(self.implicit_end)
            .chain(self.answer_open)
            .chain(self.answer_close)
            .chain(self.pieces)
            .copied()
    }

    /// Whether the end marker leads into a state of its own (answer wrapper, newlines to drop).
    fn after_end(&self) -> State {
        if !self.answer_open.is_empty() || self.trim_after_end {
            State::AfterEnd
        } else if !self.answer_close.is_empty() {
            State::Answer
        } else {
            State::Content
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// `explicit`: opened by a marker; `started`: reasoning text has begun since.
    Reasoning {
        explicit: bool,
        started: bool,
    },
    /// Just after a start marker of a format with a label: the label may follow.
    Label,
    Content,
    /// Just after the end marker: newlines to drop, or whitespace before an answer opener.
    AfterEnd,
    /// Inside the answer wrapper: its closer is framing.
    Answer,
}

/// Which pattern a search in reasoning found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    End,
    Start,
    Implicit,
}

/// The splitter (see the module docs).
pub(crate) struct ThinkSplitter {
    spec: ThinkSpec,
    start: Vec<String>,
    end: Vec<String>,
    implicit_end: Vec<String>,
    answer_open: Vec<String>,
    answer_close: Vec<String>,
    state: State,
    rule: StartRule,
    enabled: bool,
}

const OPENED: State = State::Reasoning {
    explicit: true,
    started: false,
};

impl ThinkSplitter {
    pub(crate) fn new(spec: &ThinkSpec, rule: StartRule, markers: &Markers) -> Self {
        let patterns = |list: &[&str]| list.iter().map(|m| markers.pattern(m)).collect();
        ThinkSplitter {
            spec: *spec,
            start: patterns(spec.start),
            end: patterns(spec.end),
            implicit_end: patterns(spec.implicit_end),
            answer_open: patterns(spec.answer_open),
            answer_close: patterns(spec.answer_close),
            state: State::Content,
            rule,
            enabled: true,
        }
    }

    /// Whether `text` ends inside reasoning by its last marker: `Some(true)` after a start marker,
    /// `Some(false)` after an end marker, `None` without either.
    fn last_marker(&self, text: &str) -> Option<bool> {
        let last = |list: &[String]| list.iter().filter_map(|p| text.rfind(p.as_str())).max();
        match (last(&self.start), last(&self.end)) {
            (Some(s), Some(e)) => Some(s > e),
            (Some(_), None) => Some(true),
            (None, Some(_)) => Some(false),
            (None, None) => None,
        }
    }

    /// The state after a start marker read as framing.
    fn opened(&self) -> State {
        if self.spec.label.is_empty() {
            OPENED
        } else {
            State::Label
        }
    }

    /// Reads reasoning up to its end; `None` when waiting for more input.
    fn in_reasoning(
        &mut self,
        explicit: bool,
        mut started: bool,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<()> {
        if self.spec.trim_start && !started {
            // Whitespace opening the block is framing, whatever follows.
            out.route(input, leading_ws(input.as_str()), Channel::Framing);
            if input.is_empty() {
                return None;
            }
        }
        let mut patterns: Vec<(&str, Found)> =
            self.end.iter().map(|p| (p.as_str(), Found::End)).collect();
        if !started {
            patterns.extend(self.start.iter().map(|p| (p.as_str(), Found::Start)));
        }
        if !explicit {
            patterns.extend(
                self.implicit_end
                    .iter()
                    .map(|p| (p.as_str(), Found::Implicit)),
            );
        }
        let texts: Vec<&str> = patterns.iter().map(|(p, _)| *p).collect();
        let (upto, found) = match scan(input.as_str(), &texts) {
            Scan::Found { at, index } => (at, Some(index)),
            Scan::Partial { at } if !end => (at, None),
            _ => (input.len(), None),
        };
        // Trailing whitespace waits: it is framing if the end marker follows.
        let text = &input.as_str()[..upto];
        let body = match (self.spec.trim_end, found.map(|i| patterns[i].1)) {
            (true, Some(Found::End)) => text.trim_end_matches(is_ws).len(),
            (true, None) if !end => text.trim_end_matches(is_ws).len(),
            _ => upto,
        };
        started = started || body > 0;
        out.route(input, body, Channel::Reasoning);
        self.state = State::Reasoning { explicit, started };
        let index = found?;
        let len = texts[index].len();
        match patterns[index].1 {
            Found::End => {
                out.route(input, upto - body, Channel::Framing);
                out.route(input, len, Channel::Framing);
                self.state = self.spec.after_end();
            }
            // Text came before it in this very read: the marker is text too.
            Found::Start if started => out.route(input, len, Channel::Reasoning),
            Found::Start => {
                out.route(input, len, Channel::Framing);
                self.state = self.opened();
            }
            // The tool-call start stays in the input for the tool parser.
            Found::Implicit => self.state = State::Content,
        }
        Some(())
    }

    /// Reads the label that may follow a start marker; `None` when waiting for more input.
    fn in_label(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let label = self.spec.label;
        let text = input.as_str();
        if text.starts_with(label) {
            out.route(input, label.len(), Channel::Framing);
        } else if could_become(text, label) && !end {
            return None;
        }
        self.state = OPENED;
        Some(())
    }

    /// Reads what follows the end marker: newlines that are framing, and an answer opener after
    /// whitespace; `None` when waiting for more input.
    fn in_after_end(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        if self.spec.trim_after_end {
            let newlines = input.as_str().len() - input.as_str().trim_start_matches('\n').len();
            out.route(input, newlines, Channel::Framing);
            if input.is_empty() {
                return None;
            }
        }
        if self.answer_open.is_empty() {
            self.state = State::Content;
            return Some(());
        }
        let text = input.as_str();
        let ws = leading_ws(text);
        let rest = &text[ws..];
        if let Some(open) = self
            .answer_open
            .iter()
            .find(|o| rest.starts_with(o.as_str()))
        {
            let len = ws + open.len();
            out.route(input, len, Channel::Framing);
            self.state = State::Answer;
            return Some(());
        }
        let undecided = rest.is_empty() || self.answer_open.iter().any(|o| could_become(rest, o));
        if undecided && !end {
            return None;
        }
        self.state = State::Content;
        Some(())
    }

    /// Reads the wrapped answer up to its closer; `None` when waiting for more input.
    fn in_answer(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let texts: Vec<&str> = self.answer_close.iter().map(String::as_str).collect();
        let index = out.route_until(input, &texts, Channel::Visible, end)?;
        out.route(input, texts[index].len(), Channel::Framing);
        self.state = State::Content;
        Some(())
    }

    /// Reads content up to a start marker; `None` when waiting for more input.
    fn in_content(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let texts: Vec<&str> = self.start.iter().map(String::as_str).collect();
        let index = out.route_until(input, &texts, Channel::Visible, end)?;
        out.route(input, texts[index].len(), Channel::Framing);
        self.state = self.opened();
        Some(())
    }
}

fn is_ws(c: char) -> bool {
    c.is_ascii_whitespace()
}

impl Stage for ThinkSplitter {
    fn prime(&mut self, prompt_tail: &mut SegBuf, _scratch: &mut Out, kwargs: &Map<String, Value>) {
        let prompt = self.last_marker(prompt_tail.as_str());
        let reasoning = self.rule.decide(prompt, self.rule.flag(kwargs));
        self.state = if reasoning {
            State::Reasoning {
                explicit: prompt == Some(true),
                started: false,
            }
        } else {
            State::Content
        };
        self.enabled = !self.rule.needs_thinking || reasoning;
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        if !self.enabled {
            return out.route_all(input, Channel::Visible);
        }
        while !input.is_empty() {
            let step = match self.state {
                State::Reasoning { explicit, started } => {
                    self.in_reasoning(explicit, started, input, out, end)
                }
                State::Label => self.in_label(input, out, end),
                State::Content => self.in_content(input, out, end),
                State::AfterEnd => self.in_after_end(input, out, end),
                State::Answer => self.in_answer(input, out, end),
            };
            if step.is_none() {
                return;
            }
        }
    }
}
