//! `glm45` / `glm47` (GLM-4.5/4.6/4.7): `<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>...</tool_call>`,
//! GLM-4.5/4.6 with a newline after the name and between elements, 4.7 without; one parser reads
//! both. Values are raw text typed by the request's tool schema. A call starts when its name is
//! complete; `<tool_call>` followed by something that is not a name (JSON, a cut-off stream) is
//! content.

use crate::parse::json::is_sentinel;
use crate::parse::out::{Channel, Out};
use crate::parse::schema::Tools;
use crate::parse::text::{could_become, leading_ws, scan, Markers, Scan, SegBuf};
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

impl Stage for Glm {
    fn held(&self) -> usize {
        self.args.held() + self.key.len()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        loop {
            match self.state {
                State::Content => {
                    if out
                        .route_until(input, &[&self.open], Channel::Content, end)
                        .is_none()
                    {
                        return;
                    }
                    self.state = State::Name;
                }
                State::Name => {
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
                                && (could_become(after, &self.key_open)
                                    || could_become(after, &self.close))))
                    {
                        return;
                    } else {
                        out.route(input, self.open.len(), Channel::Content);
                        self.state = State::Content;
                    }
                }
                State::Args => {
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
                        return;
                    } else {
                        // Stray text is skipped even at the end of the output: elements may follow.
                        out.route(input, ws + stray_len(after), Channel::Tool);
                    }
                }
                State::Key => match scan(input.as_str(), &[&self.key_close]) {
                    Scan::Found { at, .. } => {
                        self.key = input.as_str()[..at]
                            .trim_matches(|c: char| c.is_ascii_whitespace())
                            .to_string();
                        out.route(input, at + self.key_close.len(), Channel::Tool);
                        self.state = State::BeforeValue;
                    }
                    _ if !end => return,
                    _ => {
                        self.args.cut_off(input, out);
                        self.state = State::Content;
                        return;
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
                        return;
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
                        ValueEnd::Pending => return,
                        ValueEnd::Cut => {
                            self.state = State::Content;
                            return;
                        }
                    }
                }
            }
        }
    }
}
