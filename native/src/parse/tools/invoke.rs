//! Calls written as `invoke` elements inside a block (MiniMax-M2 and DeepSeek-V3.2 DSML):
//!
//! ```text
//! <minimax:tool_call>                         <｜DSML｜function_calls>
//! <invoke name="f">                           <｜DSML｜invoke name="f">
//! <parameter name="k">v</parameter>           <｜DSML｜parameter name="k" string="true">v</｜DSML｜parameter>
//! </invoke>                                   </｜DSML｜invoke>
//! </minimax:tool_call>                        </｜DSML｜function_calls>
//! ```
//!
//! Values are raw text. MiniMax values are typed by the request's tool schema; DSML's `string`
//! attribute decides when written (`true`: the text is the string; `false`: the text is JSON, kept
//! as a string when it does not parse), the schema when not. A call starts at its name's closing `">`; a missing `</parameter>` is
//! closed by the next parameter, the invoke's end or the block's end. Inside a block, text outside
//! elements is framing; outside blocks it is content.

use crate::parse::json::is_sentinel;
use crate::parse::out::{Channel, Out};
use crate::parse::schema::{Tools, TypeSet};
use crate::parse::text::{could_become, leading_ws, Markers, SegBuf};
use crate::parse::tools::xml_args::{stray_len, ArgsBuilder, ValueEnd};
use crate::parse::Stage;

/// The tags of one dialect.
pub(crate) struct InvokeSpec {
    pub(crate) block_open: &'static str,
    pub(crate) block_close: &'static str,
    pub(crate) invoke_open: &'static str,
    pub(crate) invoke_close: &'static str,
    pub(crate) param_open: &'static str,
    pub(crate) param_close: &'static str,
    /// Types come from a `string="true|false"` attribute instead of the schema.
    pub(crate) string_attr: bool,
}

/// MiniMax-M2.
pub(crate) const MINIMAX: InvokeSpec = InvokeSpec {
    block_open: "<minimax:tool_call>",
    block_close: "</minimax:tool_call>",
    invoke_open: "<invoke name=\"",
    invoke_close: "</invoke>",
    param_open: "<parameter name=\"",
    param_close: "</parameter>",
    string_attr: false,
};

/// DeepSeek-V3.2 DSML.
pub(crate) const DSML: InvokeSpec = InvokeSpec {
    block_open: "<｜DSML｜function_calls>",
    block_close: "</｜DSML｜function_calls>",
    invoke_open: "<｜DSML｜invoke name=\"",
    invoke_close: "</｜DSML｜invoke>",
    param_open: "<｜DSML｜parameter name=\"",
    param_close: "</｜DSML｜parameter>",
    string_attr: true,
};

/// The markers (block tags) of MiniMax-M2.
pub(crate) const MINIMAX_MARKERS: &[&str] = &["<minimax:tool_call>", "</minimax:tool_call>"];
/// The markers (block tags) of DSML.
pub(crate) const DSML_MARKERS: &[&str] = &["<｜DSML｜function_calls>", "</｜DSML｜function_calls>"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Content,
    Block,
    /// The input starts with the invoke tag (`prefix` bytes); reading `name">`.
    InvokeName {
        prefix: usize,
    },
    Params,
    ParamHeader,
    Value,
}

/// The parser (see the module docs).
pub(crate) struct InvokeCalls {
    spec: &'static InvokeSpec,
    block_open: String,
    block_close: String,
    state: State,
    tools: Tools,
    function: String,
    args: ArgsBuilder,
}

/// Reads `"key" attr="v" ...>` (the part after `name="`): the key, the attributes text and the
/// length through `>`; `None` when `>` has not arrived.
fn element_header(s: &str) -> Option<(&str, &str, usize)> {
    let quote = s.find('"')?;
    let close = s[quote..].find('>')? + quote;
    Some((&s[..quote], &s[quote + 1..close], close + 1))
}

impl InvokeCalls {
    pub(crate) fn new(spec: &'static InvokeSpec, markers: &Markers, tools: &Tools) -> Self {
        InvokeCalls {
            spec,
            block_open: markers.pattern(spec.block_open),
            block_close: markers.pattern(spec.block_close),
            state: State::Content,
            tools: tools.clone(),
            function: String::new(),
            args: ArgsBuilder::new(false),
        }
    }
}

/// `minimax_m2` (registry constructor).
pub(crate) fn build_minimax(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(InvokeCalls::new(&MINIMAX, markers, tools))
}

/// `deepseek_v32` (registry constructor).
pub(crate) fn build_dsml(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(InvokeCalls::new(&DSML, markers, tools))
}

impl InvokeCalls {
    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Content => {
                out.route_until(input, &[&self.block_open], Channel::Content, end)?;
                out.route(input, self.block_open.len(), Channel::Framing);
                self.state = State::Block;
            }
            State::Block => self.block(input, out, end)?,
            State::InvokeName { prefix } => self.invoke_name(prefix, input, out, end)?,
            State::Params => self.params(input, out, end)?,
            State::ParamHeader => match element_header(input.as_str()) {
                Some((key, attrs, len)) => {
                    let types = self.param_types(key, attrs);
                    self.args.begin(key, types);
                    out.route(input, len, Channel::Tool);
                    self.state = State::Value;
                }
                None if !end => return None,
                None => {
                    self.args.cut_off(input, out);
                    self.state = State::Content;
                    return None;
                }
            },
            State::Value => {
                let spec = self.spec;
                let ends = [
                    spec.param_close,
                    spec.param_open,
                    spec.invoke_close,
                    self.block_close.as_str(),
                ];
                match self.args.value(input, out, &ends, end) {
                    ValueEnd::Closed => self.state = State::Params,
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

    /// A value's types: DSML's `string` attribute when written (`true`: the text is the string;
    /// `false`: JSON), else the request's tool schema.
    fn param_types(&self, key: &str, attrs: &str) -> TypeSet {
        if self.spec.string_attr {
            if attrs.contains("string=\"false\"") {
                return TypeSet::json();
            }
            if attrs.contains("string=\"true\"") {
                return TypeSet::string();
            }
        }
        self.tools.param_types(&self.function, key)
    }

    /// Inside a block, between invokes: an invoke, the block's end, or stray text (framing).
    fn block(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let spec = self.spec;
        let s = input.as_str();
        let ws = leading_ws(s);
        let after = &s[ws..];
        if after.starts_with(spec.invoke_open) {
            out.route(input, ws, Channel::Framing);
            self.state = State::InvokeName {
                prefix: spec.invoke_open.len(),
            };
        } else if after.starts_with(self.block_close.as_str()) {
            out.route(input, ws + self.block_close.len(), Channel::Framing);
            self.state = State::Content;
        } else if after.is_empty()
            || could_become(after, spec.invoke_open)
            || could_become(after, &self.block_close)
        {
            if end {
                out.route_all(input, Channel::Framing);
            } else {
                out.route(input, ws, Channel::Framing);
            }
            return None;
        } else {
            // Stray text is skipped even at the end of the output: the block may still close,
            // and content follow.
            out.route(input, ws + stray_len(after), Channel::Framing);
        }
        Some(())
    }

    /// `name">` after the invoke tag: the call starts at the `>`.
    fn invoke_name(
        &mut self,
        prefix: usize,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<()> {
        let rest = &input.as_str()[prefix..];
        let bad = rest.find(|c| c == '\n' || c == '<' || is_sentinel(c));
        match element_header(rest) {
            Some((name, _, len)) if !name.is_empty() && bad.is_none_or(|b| b > name.len()) => {
                self.function = name.to_string();
                let index = out.start_call(&self.function, None);
                out.route(input, prefix + len, Channel::Tool);
                self.args.start(index, out);
                self.state = State::Params;
            }
            None if bad.is_none() && !end => return None,
            // A malformed invoke tag is framing.
            _ => {
                out.route(input, prefix, Channel::Framing);
                self.state = State::Block;
            }
        }
        Some(())
    }

    /// Between parameters: a parameter, the invoke's end, the block's end, or stray text.
    fn params(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let spec = self.spec;
        let s = input.as_str();
        let ws = leading_ws(s);
        let after = &s[ws..];
        if after.starts_with(spec.param_open) {
            out.route(input, ws + spec.param_open.len(), Channel::Tool);
            self.state = State::ParamHeader;
        } else if after.starts_with(spec.invoke_close) {
            out.route(input, ws + spec.invoke_close.len(), Channel::Tool);
            self.args.finish(out);
            self.state = State::Block;
        } else if after.starts_with(self.block_close.as_str()) {
            out.route(input, ws, Channel::Tool);
            self.args.finish(out);
            self.state = State::Block;
        } else if after.is_empty()
            || [
                spec.param_open,
                spec.invoke_close,
                self.block_close.as_str(),
            ]
            .iter()
            .any(|p| could_become(after, p))
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

impl Stage for InvokeCalls {
    fn held(&self) -> usize {
        self.args.held() + self.function.len()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        while self.step(input, out, end).is_some() {}
    }
}
