//! `glm45` / `glm47` (GLM-4.5/4.6/4.7): `<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>...</tool_call>`,
//! GLM-4.5/4.6 with a newline after the name and between elements, 4.7 without; one parser reads
//! both. Values are raw text typed by the request's tool schema. A call starts when its name is
//! complete; `<tool_call>` followed by something that is not a name (JSON, a cut-off stream) is
//! content.

use crate::parse::json::is_sentinel;
use crate::parse::out::{Channel, Out};
use crate::parse::schema::Tools;
use crate::parse::text::{ascii_trim, could_become, leading_ws, scan, Markers, Scan, SegBuf};
use crate::parse::tools::xml_args::{stray_len, ArgsBuilder, ValueEnd};
use crate::parse::Stage;

/// The markers this format uses.
pub(crate) const MARKERS: &[&str] = &[
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Content,
    /// The input starts with `<tool_call>`; reading the name.
    Name,
    Args,
    Key,
    /// After a key, before its `<arg_value>`.
    BeforeValue,
    Value,
}

/// The parser (see the module docs).
pub(crate) struct Glm {
    open: String,
    close: String,
    key_open: String,
    key_close: String,
    value_open: String,
    value_close: String,
    state: State,
    tools: Tools,
    function: String,
    key: String,
    args: ArgsBuilder,
}

fn is_name_char(c: char) -> bool {
    !(c.is_ascii_whitespace()
        || matches!(c, '<' | '>' | '{' | '}' | '"' | '[' | ']')
        || is_sentinel(c))
}

impl Glm {
    pub(crate) fn new(markers: &Markers, tools: &Tools) -> Self {
        let p = |i: usize| markers.pattern(MARKERS[i]);
        Glm {
            open: p(0),
            close: p(1),
            key_open: p(2),
            key_close: p(3),
            value_open: p(4),
            value_close: p(5),
            state: State::Content,
            tools: tools.clone(),
            function: String::new(),
            key: String::new(),
            args: ArgsBuilder::new(false),
        }
    }
}

/// The parser of a request (registry constructor).
pub(crate) fn build(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(Glm::new(markers, tools))
}

impl Glm {
    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Content => {
                out.route_until(input, &[&self.open], Channel::Content, end)?;
                self.state = State::Name;
            }
            State::Name => self.name(input, out, end)?,
            State::Args => self.between_args(input, out, end)?,
            State::Key => match scan(input.as_str(), &[&self.key_close, &self.close]) {
                Scan::Found { at, index: 0 } => {
                    self.key = ascii_trim(&input.as_str()[..at]).to_string();
                    out.route(input, at + self.key_close.len(), Channel::Tool);
                    self.state = State::BeforeValue;
                }
                // A key never closed before the call's end: the element is dropped.
                Scan::Found { at, .. } => {
                    out.route(input, at, Channel::Tool);
                    self.state = State::Args;
                }
                _ if !end => return None,
                _ => {
                    self.args.cut_off(input, out);
                    self.state = State::Content;
                    return None;
                }
            },
            State::BeforeValue => {
                let s = input.as_str();
                let ws = leading_ws(s);
                let after = &s[ws..];
                if after.starts_with(self.value_open.as_str()) {
                    out.route(input, ws + self.value_open.len(), Channel::Tool);
                    let types = self.tools.param_types(&self.function, &self.key);
                    self.args.begin(&self.key, types);
                    self.state = State::Value;
                } else if !end && (after.is_empty() || could_become(after, &self.value_open)) {
                    return None;
                } else {
                    // A key without a value is dropped.
                    self.state = State::Args;
                }
            }
            State::Value => {
                let ends = [
                    self.value_close.as_str(),
                    self.key_open.as_str(),
                    self.close.as_str(),
                ];
                match self.args.value(input, out, &ends, end) {
                    ValueEnd::Closed => self.state = State::Args,
                    ValueEnd::Pending => return None,
                    ValueEnd::Cut => {
                        self.state = State::Content;
                        return None;
                    }
                }
            }
        }
        Some(())
    }

    /// `<tool_call>NAME` then a newline, `<arg_key>` or `</tool_call>`: the call starts.
    fn name(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let s = &input.as_str()[self.open.len()..];
        let ws = leading_ws(s);
        let name_len = s[ws..].find(|c| !is_name_char(c)).unwrap_or(s.len() - ws);
        let after = &s[ws + name_len..];
        let ok_end = after.starts_with('\n')
            || after.starts_with(self.key_open.as_str())
            || after.starts_with(self.close.as_str());
        if name_len > 0 && ok_end {
            self.function = s[ws..ws + name_len].to_string();
            let index = out.start_call(&self.function, None);
            out.route(input, self.open.len(), Channel::Framing);
            out.route(input, ws + name_len, Channel::Tool);
            self.args.start(index, out);
            self.state = State::Args;
        } else if !end
            && (after.is_empty()
                || (name_len > 0
                    && (could_become(after, &self.key_open) || could_become(after, &self.close))))
        {
            return None;
        } else {
            out.route(input, self.open.len(), Channel::Content);
            self.state = State::Content;
        }
        Some(())
    }

    /// Between a call's elements: `<arg_key>`, `</tool_call>`, or stray text (skipped).
    fn between_args(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let s = input.as_str();
        let ws = leading_ws(s);
        let after = &s[ws..];
        if after.starts_with(self.key_open.as_str()) {
            out.route(input, ws + self.key_open.len(), Channel::Tool);
            self.state = State::Key;
        } else if after.starts_with(self.close.as_str()) {
            out.route(input, ws + self.close.len(), Channel::Framing);
            self.args.finish(out);
            self.state = State::Content;
        } else if after.is_empty()
            || could_become(after, &self.key_open)
            || could_become(after, &self.close)
        {
            if end {
                self.args.cut_off(input, out);
                self.state = State::Content;
            } else {
                out.route(input, ws, Channel::Tool);
            }
            return None;
        } else {
            // Stray text is skipped even at the end of the output: elements may follow.
            out.route(input, ws + stray_len(after), Channel::Tool);
        }
        Some(())
    }
}

impl Stage for Glm {
    fn held(&self) -> usize {
        self.args.held() + self.key.len()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        while self.step(input, out, end).is_some() {}
    }
}
