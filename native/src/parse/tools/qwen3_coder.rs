//! `qwen3_coder` (Qwen3-Coder, also `qwen3_xml`) and the formats that share its grammar (Step-3.5,
//! Step-5, MiMo, Seed-OSS, each a [`CoderSpec`]):
//!
//! ```text
//! <tool_call>
//! <function=NAME>
//! <parameter=KEY>
//! VALUE
//! </parameter>
//! ...
//! </function>
//! </tool_call>
//! ```
//!
//! Values are raw text typed by the request's tool schema (see [`super::xml_args`]); one leading
//! and one trailing newline of each value are template framing (MiMo: values are verbatim). A missing `</parameter>` is closed
//! by the next `<parameter=`, `</function>` or `</tool_call>`; `<function=` is also accepted
//! without `<tool_call>`. A call starts when its name's `>` arrives; text that turns out not to be
//! a call (no `<function=` after `<tool_call>`, a name cut off) is content.

use crate::parse::json::is_sentinel;
use crate::parse::out::{Channel, Out};
use crate::parse::schema::Tools;
use crate::parse::text::{ascii_trim, could_become, leading_ws, Markers, SegBuf};
use crate::parse::tools::xml_args::{stray_len, ArgsBuilder, ValueEnd};
use crate::parse::Stage;

/// The markers this format uses.
pub(crate) const MARKERS: &[&str] = &["<tool_call>", "</tool_call>"];
/// The markers of Seed-OSS.
pub(crate) const SEED_MARKERS: &[&str] = &["<seed:tool_call>", "</seed:tool_call>"];

/// What differs between the formats of this grammar.
pub(crate) struct CoderSpec {
    /// The block's opening and closing markers.
    pub(crate) markers: &'static [&'static str],
    /// One leading and one trailing newline of each value are framing.
    pub(crate) strip_newlines: bool,
}

/// Qwen3-Coder (also Step-3.5 and Step-5, whose differences from it are in text around calls
/// only, which is content here anyway).
pub(crate) const QWEN3: CoderSpec = CoderSpec {
    markers: MARKERS,
    strip_newlines: true,
};

/// MiMo: values are verbatim (a value's newlines are part of it).
pub(crate) const MIMO: CoderSpec = CoderSpec {
    markers: MARKERS,
    strip_newlines: false,
};

/// Seed-OSS: the Qwen3 grammar inside `<seed:tool_call>` blocks.
pub(crate) const SEED_OSS: CoderSpec = CoderSpec {
    markers: SEED_MARKERS,
    strip_newlines: true,
};

const FUNCTION: &str = "<function=";
const FUNCTION_END: &str = "</function>";
const PARAMETER: &str = "<parameter=";
const PARAMETER_END: &str = "</parameter>";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Content,
    /// After `<tool_call>` (already routed as framing when `marker_len` is 0).
    Block {
        marker_len: usize,
    },
    /// Reading `NAME>`; the input starts with `block` bytes of `<tool_call>` and whitespace, then
    /// `<function=` (`prefix` bytes in all).
    Name {
        block: usize,
        prefix: usize,
    },
    Params,
    ParamName,
    Value,
    AfterFunction,
}

/// The parser (see the module docs).
pub(crate) struct Qwen3Coder {
    open: String,
    close: String,
    state: State,
    tools: Tools,
    function: String,
    args: ArgsBuilder,
}

impl Qwen3Coder {
    pub(crate) fn new(spec: &CoderSpec, markers: &Markers, tools: &Tools) -> Self {
        Qwen3Coder {
            open: markers.pattern(spec.markers[0]),
            close: markers.pattern(spec.markers[1]),
            state: State::Content,
            tools: tools.clone(),
            function: String::new(),
            args: ArgsBuilder::new(spec.strip_newlines),
        }
    }
}

/// `qwen3_coder`, `step3p5`, `step5` (registry constructor).
pub(crate) fn build(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(Qwen3Coder::new(&QWEN3, markers, tools))
}

/// `mimo` (registry constructor).
pub(crate) fn build_mimo(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(Qwen3Coder::new(&MIMO, markers, tools))
}

/// `seed_oss` (registry constructor).
pub(crate) fn build_seed_oss(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(Qwen3Coder::new(&SEED_OSS, markers, tools))
}

impl Qwen3Coder {
    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Content => {
                let patterns = [self.open.as_str(), FUNCTION];
                let index = out.route_until(input, &patterns, Channel::Content, end)?;
                self.state = if index == 0 {
                    State::Block {
                        marker_len: self.open.len(),
                    }
                } else {
                    State::Name {
                        block: 0,
                        prefix: FUNCTION.len(),
                    }
                };
            }
            State::Block { marker_len } => self.block(marker_len, input, out, end)?,
            State::Name { block, prefix } => self.name(block, prefix, input, out, end)?,
            State::Params => self.params(input, out, end)?,
            State::ParamName => match input.as_str().find('>') {
                Some(at) => {
                    let key = ascii_trim(&input.as_str()[..at]);
                    let types = self.tools.param_types(&self.function, key);
                    self.args.begin(key, types);
                    out.route(input, at + 1, Channel::Tool);
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
                let ends = [PARAMETER_END, PARAMETER, FUNCTION_END, self.close.as_str()];
                match self.args.value(input, out, &ends, end) {
                    ValueEnd::Closed => self.state = State::Params,
                    ValueEnd::Pending => return None,
                    ValueEnd::Cut => {
                        self.state = State::Content;
                        return None;
                    }
                }
            }
            State::AfterFunction => self.after_function(input, out, end)?,
        }
        Some(())
    }

    /// After `<tool_call>` (`marker_len` bytes, not routed): `<function=` or an empty block.
    fn block(
        &mut self,
        marker_len: usize,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<()> {
        let rest = &input.as_str()[marker_len..];
        let ws = leading_ws(rest);
        let after = &rest[ws..];
        if after.starts_with(FUNCTION) {
            self.state = State::Name {
                block: marker_len + ws,
                prefix: marker_len + ws + FUNCTION.len(),
            };
        } else if after.starts_with(self.close.as_str()) {
            // An empty block.
            out.route(input, marker_len + ws + self.close.len(), Channel::Framing);
            self.state = State::Content;
        } else if !end
            && (after.is_empty()
                || could_become(after, FUNCTION)
                || could_become(after, &self.close))
        {
            return None;
        } else {
            // Not a call: the marker is text.
            out.route(input, marker_len, Channel::Content);
            self.state = State::Content;
        }
        Some(())
    }

    /// `NAME>` after `<function=`: the call starts at the `>`.
    fn name(
        &mut self,
        block: usize,
        prefix: usize,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<()> {
        let rest = &input.as_str()[prefix..];
        match rest.find(|c| matches!(c, '>' | '\n' | '<') || is_sentinel(c)) {
            Some(at) if rest.as_bytes()[at] == b'>' && !ascii_trim(&rest[..at]).is_empty() => {
                self.function = ascii_trim(&rest[..at]).to_string();
                let index = out.start_call(&self.function, None);
                out.route(input, block, Channel::Framing);
                out.route(input, prefix - block + at + 1, Channel::Tool);
                self.args.start(index, out);
                self.state = State::Params;
            }
            None if !end => return None,
            _ => {
                // Not a function header: `<tool_call>` and `<function=` are text.
                out.route(input, prefix, Channel::Content);
                self.state = State::Content;
            }
        }
        Some(())
    }

    /// Between parameters: `<parameter=`, `</function>`, `</tool_call>`, or stray text (skipped).
    fn params(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let s = input.as_str();
        let ws = leading_ws(s);
        let after = &s[ws..];
        if after.starts_with(PARAMETER) {
            out.route(input, ws + PARAMETER.len(), Channel::Tool);
            self.state = State::ParamName;
        } else if after.starts_with(FUNCTION_END) {
            out.route(input, ws + FUNCTION_END.len(), Channel::Tool);
            self.args.finish(out);
            self.state = State::AfterFunction;
        } else if after.starts_with(self.close.as_str()) {
            out.route(input, ws, Channel::Tool);
            self.args.finish(out);
            self.state = State::AfterFunction;
        } else if after.is_empty()
            || [PARAMETER, FUNCTION_END, self.close.as_str()]
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
            // Stray text between parameters: skip up to the next tag (even at the end of the
            // output: more parameters may follow).
            out.route(input, ws + stray_len(after), Channel::Tool);
        }
        Some(())
    }

    /// After `</function>`: `</tool_call>`, another `<function=`, or content.
    fn after_function(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let s = input.as_str();
        let ws = leading_ws(s);
        let after = &s[ws..];
        if after.starts_with(self.close.as_str()) {
            out.route(input, ws + self.close.len(), Channel::Framing);
            self.state = State::Content;
        } else if after.starts_with(FUNCTION) {
            out.route(input, ws, Channel::Framing);
            self.state = State::Name {
                block: 0,
                prefix: FUNCTION.len(),
            };
        } else if !end
            && (after.is_empty()
                || could_become(after, &self.close)
                || could_become(after, FUNCTION))
        {
            return None;
        } else {
            self.state = State::Content;
        }
        Some(())
    }
}

impl Stage for Qwen3Coder {
    fn held(&self) -> usize {
        self.args.held() + self.function.len()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        while self.step(input, out, end).is_some() {
            let idle = matches!(self.state, State::Content | State::AfterFunction);
            if input.is_empty() && (!end || idle) {
                return;
            }
        }
    }
}
