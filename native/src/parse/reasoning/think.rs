//! `<think>`-style reasoning: text between a start and an end marker is reasoning.
//!
//! The state at the start of generation comes from the prompt: the session primes the splitter
//! with the prompt's tail (after its last special token), so a template that opened `<think>`
//! leaves it reasoning and one that wrote `<think></think>` leaves it in content. Without a marker
//! in the prompt the parser's default holds, and a `chat_template_kwargs` flag
//! (`enable_thinking`, `thinking`) overrides both.
//!
//! Reasoning that was only assumed (by default or by a flag, never opened by a marker) ends at a
//! tool-call start for formats whose models skip `</think>` when they do not think (Qwen3, GLM,
//! Kimi). Reasoning opened by a marker ends only at its end marker: a tool call written inside it
//! is reasoning text.

use crate::parse::out::{Channel, Out};
use crate::parse::text::{Markers, SegBuf};
use crate::parse::Stage;

/// A think-tag parser's markers and defaults.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ThinkSpec {
    pub(crate) start: &'static [&'static str],
    pub(crate) end: &'static [&'static str],
    /// Tool-call starts that end assumed reasoning (the marker is left for the tool parser).
    pub(crate) implicit_end: &'static [&'static str],
    /// Whether generation starts in reasoning when neither prompt nor flag says.
    pub(crate) default_reasoning: bool,
    /// Split only when thinking is on (flag true, or the prompt opened reasoning); otherwise all
    /// text is visible, markers included.
    pub(crate) needs_flag: bool,
}

impl ThinkSpec {
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
    Reasoning { explicit: bool },
    Content { explicit: bool },
}

/// The splitter (see the module docs).
pub(crate) struct ThinkSplitter {
    start: Vec<String>,
    end: Vec<String>,
    /// Patterns searched in reasoning: end markers, start markers, then implicit ends.
    in_reasoning: Vec<String>,
    state: State,
    needs_flag: bool,
    enabled: bool,
}

impl ThinkSplitter {
    pub(crate) fn new(spec: &ThinkSpec, markers: &Markers) -> Self {
        let patterns = |list: &[&str]| list.iter().map(|m| markers.pattern(m)).collect();
        let state = if spec.default_reasoning {
            State::Reasoning { explicit: false }
        } else {
            State::Content { explicit: false }
        };
        let start: Vec<String> = patterns(spec.start);
        let end: Vec<String> = patterns(spec.end);
        let implicit_end: Vec<String> = patterns(spec.implicit_end);
        let in_reasoning = end
            .iter()
            .chain(&start)
            .chain(&implicit_end)
            .cloned()
            .collect();
        ThinkSplitter {
            start,
            end,
            in_reasoning,
            state,
            needs_flag: spec.needs_flag,
            enabled: true,
        }
    }
}

impl Stage for ThinkSplitter {
    fn primed(&mut self, thinking_flag: Option<bool>) {
        let opened_by_prompt = matches!(self.state, State::Reasoning { explicit: true });
        match thinking_flag {
            Some(true) if !matches!(self.state, State::Reasoning { .. }) => {
                self.state = State::Reasoning { explicit: false };
            }
            Some(false) => self.state = State::Content { explicit: false },
            _ => {}
        }
        if self.needs_flag {
            self.enabled =
                thinking_flag == Some(true) || (thinking_flag.is_none() && opened_by_prompt);
        }
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        if !self.enabled {
            return out.route_all(input, Channel::Visible);
        }
        loop {
            if input.is_empty() {
                return;
            }
            match self.state {
                State::Reasoning { explicit } => {
                    let n_closing = self.end.len();
                    let n_opening = self.start.len();
                    let n = if explicit {
                        n_closing + n_opening
                    } else {
                        self.in_reasoning.len()
                    };
                    let mut buf = [""; 8];
                    for (slot, p) in buf.iter_mut().zip(&self.in_reasoning[..n]) {
                        *slot = p.as_str();
                    }
                    let patterns = &buf[..n.min(8)];
                    let Some(index) = out.route_until(input, patterns, Channel::Reasoning, end)
                    else {
                        return;
                    };
                    let len = patterns[index].len();
                    if index < n_closing {
                        out.route(input, len, Channel::Framing);
                        self.state = State::Content { explicit: true };
                    } else if index < n_closing + n_opening {
                        // A (repeated) opening marker inside reasoning is framing.
                        out.route(input, len, Channel::Framing);
                        self.state = State::Reasoning { explicit: true };
                    } else {
                        // The tool-call start stays in the input for the tool parser.
                        self.state = State::Content { explicit: false };
                    }
                }
                State::Content { .. } => {
                    let mut buf = [""; 4];
                    for (slot, p) in buf.iter_mut().zip(&self.start) {
                        *slot = p.as_str();
                    }
                    let patterns = &buf[..self.start.len().min(4)];
                    let Some(index) = out.route_until(input, patterns, Channel::Visible, end)
                    else {
                        return;
                    };
                    out.route(input, patterns[index].len(), Channel::Framing);
                    self.state = State::Reasoning { explicit: true };
                }
            }
        }
    }
}
