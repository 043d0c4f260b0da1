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

use serde_json::{Map, Value};

use crate::parse::out::{Channel, Out};
use crate::parse::registry::StartRule;
use crate::parse::text::{scan, Markers, Scan, SegBuf};
use crate::parse::Stage;

/// A start/end-marker format's markers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ThinkSpec {
    pub(crate) start: &'static [&'static str],
    pub(crate) end: &'static [&'static str],
    /// Tool-call starts that end assumed reasoning (the marker is left for the tool parser).
    pub(crate) implicit_end: &'static [&'static str],
    /// Whitespace that ends a reasoning block (just before its end marker) is framing: the format's
    /// templates write the reasoning stripped (GLM, Kimi, MiniMax, Mistral).
    pub(crate) trim_end: bool,
}

impl ThinkSpec {
    /// Every marker the splitter looks for.
    #[cfg(test)]
    pub(crate) fn markers(&self) -> impl Iterator<Item = &'static str> {
        self.start
            .iter()
            .chain(self.end)
            .chain(self.implicit_end)
            .copied()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// `explicit`: opened by a marker; `started`: reasoning text has begun since.
    Reasoning {
        explicit: bool,
        started: bool,
    },
    Content,
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
    start: Vec<String>,
    end: Vec<String>,
    implicit_end: Vec<String>,
    state: State,
    rule: StartRule,
    trim_end: bool,
    enabled: bool,
}

impl ThinkSplitter {
    pub(crate) fn new(spec: &ThinkSpec, rule: StartRule, markers: &Markers) -> Self {
        let patterns = |list: &[&str]| list.iter().map(|m| markers.pattern(m)).collect();
        ThinkSplitter {
            start: patterns(spec.start),
            end: patterns(spec.end),
            implicit_end: patterns(spec.implicit_end),
            state: State::Content,
            rule,
            trim_end: spec.trim_end,
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

    /// Reads reasoning up to its end; `None` when waiting for more input.
    fn in_reasoning(
        &mut self,
        explicit: bool,
        started: bool,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<()> {
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
        let body = match (self.trim_end, found.map(|i| patterns[i].1)) {
            (true, Some(Found::End)) => text.trim_end_matches(is_ws).len(),
            (true, None) if !end => text.trim_end_matches(is_ws).len(),
            _ => upto,
        };
        let started = started || body > 0;
        out.route(input, body, Channel::Reasoning);
        self.state = State::Reasoning { explicit, started };
        let index = found?;
        let len = texts[index].len();
        match patterns[index].1 {
            Found::End => {
                out.route(input, upto - body, Channel::Framing);
                out.route(input, len, Channel::Framing);
                self.state = State::Content;
            }
            // Text came before it in this very read: the marker is text too.
            Found::Start if started => out.route(input, len, Channel::Reasoning),
            Found::Start => {
                out.route(input, len, Channel::Framing);
                self.state = State::Reasoning {
                    explicit: true,
                    started: false,
                };
            }
            // The tool-call start stays in the input for the tool parser.
            Found::Implicit => self.state = State::Content,
        }
        Some(())
    }

    /// Reads content up to a start marker; `None` when waiting for more input.
    fn in_content(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let texts: Vec<&str> = self.start.iter().map(String::as_str).collect();
        let index = out.route_until(input, &texts, Channel::Visible, end)?;
        out.route(input, texts[index].len(), Channel::Framing);
        self.state = State::Reasoning {
            explicit: true,
            started: false,
        };
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
                State::Content => self.in_content(input, out, end),
            };
            if step.is_none() {
                return;
            }
        }
    }
}
