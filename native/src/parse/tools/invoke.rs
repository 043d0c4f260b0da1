//! Calls written as `invoke` elements inside a block (MiniMax-M2 and the DeepSeek DSML dialects:
//! V3.2, V4 with `tool_calls` blocks, V4.1 with a space after `｜DSML｜`):
//!
//! ```text
//! <minimax:tool_call>                         <｜DSML｜function_calls>
//! <invoke name="f">                           <｜DSML｜invoke name="f">
//! <parameter name="k">v</parameter>           <｜DSML｜parameter name="k" string="true">v</｜DSML｜parameter>
//! </invoke>                                   </｜DSML｜invoke>
//! </minimax:tool_call>                        </｜DSML｜function_calls>
//! ```
//!
//! and the same shape in other dialects (an [`InvokeSpec`] each): GigaChat-3.5 GCML (DSML under
//! `｜GCML｜`), dots.llm1
//! (`<dots_function_call>`, also holding `{"name", "arguments"}` JSON objects), Step-3
//! (`<steptml:invoke>` inside `<｜tool_calls_begin｜>` sections), MiniCPM-5 (`<function name=...>`
//! with `<param>` and CDATA values, no block).
//!
//! Values are raw text. MiniMax values are typed by the request's tool schema; DSML's `string`
//! attribute decides how a value is read (`true`: the text is the string; otherwise the text is
//! JSON, kept as a string when it does not parse), then the schema retypes it as vLLM does
//! (GigaChat-3.5's GCML, SGLang's only, keeps what the attribute gave, the schema deciding only
//! without one); Step-3 types only scalars (a schema `type` of exactly integer, number or
//! boolean). A call starts at its name's closing `">`; a
//! missing `</parameter>` is closed by the next parameter, the invoke's end or the block's end.
//! Inside a block, text outside elements is framing; outside blocks it is content.

use crate::parse::json::is_sentinel;
use crate::parse::out::{Channel, Out};
use crate::parse::schema::{Tools, TypeSet};
use crate::parse::text::{could_become, leading_ws, Markers, SegBuf};
use crate::parse::tools::json_call::{CallEvent, JsonCall};
use crate::parse::tools::xml_args::{stray_len, ArgsBuilder, ValueEnd};
use crate::parse::Stage;
use serde_json::Value;

/// The tags of one dialect.
pub(crate) struct InvokeSpec {
    pub(crate) block_open: &'static str,
    pub(crate) block_close: &'static str,
    pub(crate) invoke_open: &'static str,
    pub(crate) invoke_close: &'static str,
    pub(crate) param_open: &'static str,
    pub(crate) param_close: &'static str,
    /// Where a value's type comes from.
    pub(crate) types: ValueTypes,
    /// A block may hold `{"name", "arguments"}` JSON objects as calls (dots.llm1).
    pub(crate) json_calls: bool,
    /// A value may be wrapped in `<![CDATA[...]]>` (MiniCPM-5).
    pub(crate) cdata: bool,
    /// Values are trimmed of surrounding whitespace (Step-3, MiniCPM-5 outside CDATA).
    pub(crate) trim_values: bool,
    /// A doubled name `f.f` is the declared tool `f` (Muse: the template renders the recipient of
    /// a bare tool name as `f.*`).
    pub(crate) doubled_names: bool,
}

/// Where a value's type comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueTypes {
    /// The request's tool schema.
    Schema,
    /// A `string="true|false"` attribute when written, else the schema (SGLang's DSML: GCML).
    StringAttr,
    /// vLLM's DSML (`_dsml_arg_converter`, then `_fix_arg_types`): `string="true"` values are
    /// strings, others JSON when they parse (else strings); then every value is retyped by its
    /// property schema (a string converted as the schema formats convert it, objects and arrays
    /// member by member; see [`crate::parse::schema::retype_json`]).
    StringAttrRetyped,
    /// The schema, only when its `type` is exactly one scalar type (Step-3).
    Scalars,
    /// JSON when the text parses, else the string (Muse Glimmer).
    Json,
    /// As `Json`, except a parameter whose schema type is exactly `string` (Muse Spark).
    JsonUnlessString,
}

/// A spec with no block: invokes stand alone in the text.
const NO_BLOCK: &str = "";
const CDATA_OPEN: &str = "<![CDATA[";

/// MiniMax-M2.
pub(crate) const MINIMAX: InvokeSpec = InvokeSpec {
    block_open: "<minimax:tool_call>",
    block_close: "</minimax:tool_call>",
    invoke_open: "<invoke name=\"",
    invoke_close: "</invoke>",
    param_open: "<parameter name=\"",
    param_close: "</parameter>",
    types: ValueTypes::Schema,
    json_calls: false,
    cdata: false,
    trim_values: false,
    doubled_names: false,
};

/// DeepSeek-V3.2 DSML.
pub(crate) const DSML: InvokeSpec = InvokeSpec {
    block_open: "<｜DSML｜function_calls>",
    block_close: "</｜DSML｜function_calls>",
    invoke_open: "<｜DSML｜invoke name=\"",
    invoke_close: "</｜DSML｜invoke>",
    param_open: "<｜DSML｜parameter name=\"",
    param_close: "</｜DSML｜parameter>",
    types: ValueTypes::StringAttrRetyped,
    json_calls: false,
    cdata: false,
    trim_values: false,
    doubled_names: false,
};

/// DeepSeek-V4 DSML: DeepSeek-V3.2's tags inside `tool_calls` blocks.
pub(crate) const DSML_V4: InvokeSpec = InvokeSpec {
    block_open: "<｜DSML｜tool_calls>",
    block_close: "</｜DSML｜tool_calls>",
    ..DSML
};

/// DeepSeek-V4.1 DSML: a space after `｜DSML｜` in every tag name, `calls` blocks.
pub(crate) const DSML_V41: InvokeSpec = InvokeSpec {
    block_open: "<｜DSML｜ calls>",
    block_close: "</｜DSML｜ calls>",
    invoke_open: "<｜DSML｜ invoke name=\"",
    invoke_close: "</｜DSML｜ invoke>",
    param_open: "<｜DSML｜ parameter name=\"",
    param_close: "</｜DSML｜ parameter>",
    ..DSML
};

/// GigaChat-3.5 GCML: DSML's elements and `string` attribute under `｜GCML｜`, `tool_calls` blocks.
pub(crate) const GCML: InvokeSpec = InvokeSpec {
    block_open: "<｜GCML｜tool_calls>",
    block_close: "</｜GCML｜tool_calls>",
    invoke_open: "<｜GCML｜invoke name=\"",
    invoke_close: "</｜GCML｜invoke>",
    param_open: "<｜GCML｜parameter name=\"",
    param_close: "</｜GCML｜parameter>",
    // SGLang's only: no schema retyping.
    types: ValueTypes::StringAttr,
    ..DSML
};

/// dots.llm1: MiniMax's elements inside `<dots_function_call>`, or a JSON call object there.
pub(crate) const DOTS: InvokeSpec = InvokeSpec {
    block_open: "<dots_function_call>",
    block_close: "</dots_function_call>",
    json_calls: true,
    ..MINIMAX
};

/// Step-3: `<steptml:invoke>` inside a `<｜tool_calls_begin｜>` section; the per-call markers
/// around it (`<｜tool_call_begin｜>function<｜tool_sep｜>`, `<｜tool_call_end｜>`) are framing.
pub(crate) const STEP3: InvokeSpec = InvokeSpec {
    block_open: "<｜tool_calls_begin｜>",
    block_close: "<｜tool_calls_end｜>",
    invoke_open: "<steptml:invoke name=\"",
    invoke_close: "</steptml:invoke>",
    param_open: "<steptml:parameter name=\"",
    param_close: "</steptml:parameter>",
    types: ValueTypes::Scalars,
    json_calls: false,
    cdata: false,
    trim_values: true,
    doubled_names: false,
};

/// MiniCPM-5: `<function name="f"><param name="k">v</param></function>`, no block.
pub(crate) const MINICPM5: InvokeSpec = InvokeSpec {
    block_open: NO_BLOCK,
    block_close: NO_BLOCK,
    invoke_open: "<function name=\"",
    invoke_close: "</function>",
    param_open: "<param name=\"",
    param_close: "</param>",
    types: ValueTypes::Schema,
    json_calls: false,
    cdata: true,
    trim_values: true,
    doubled_names: false,
};

/// The markers (block tags) of MiniMax-M2.
pub(crate) const MINIMAX_MARKERS: &[&str] = &["<minimax:tool_call>", "</minimax:tool_call>"];
/// The markers (block tags) of DSML.
pub(crate) const DSML_MARKERS: &[&str] = &["<｜DSML｜function_calls>", "</｜DSML｜function_calls>"];
/// The markers (block tags) of DeepSeek-V4 DSML.
pub(crate) const DSML_V4_MARKERS: &[&str] = &["<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>"];
/// The markers (block tags) of GigaChat-3.5 GCML.
pub(crate) const GCML_MARKERS: &[&str] = &["<｜GCML｜tool_calls>", "</｜GCML｜tool_calls>"];
/// The markers (block tags) of dots.llm1.
pub(crate) const DOTS_MARKERS: &[&str] = &["<dots_function_call>", "</dots_function_call>"];
/// The markers of Step-3 (the section's and each call's).
pub(crate) const STEP3_MARKERS: &[&str] = &[
    "<｜tool_calls_begin｜>",
    "<｜tool_calls_end｜>",
    "<｜tool_call_begin｜>",
    "<｜tool_call_end｜>",
    "<｜tool_sep｜>",
];
/// MiniCPM-5 has no marker (its tags are text).
pub(crate) const MINICPM5_MARKERS: &[&str] = &[];
/// The markers (block tags) of DeepSeek-V4.1 DSML.
pub(crate) const DSML_V41_MARKERS: &[&str] = &["<｜DSML｜ calls>", "</｜DSML｜ calls>"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Content,
    Block,
    /// The input starts with the invoke tag (`prefix` bytes); reading `name">`.
    InvokeName {
        prefix: usize,
    },
    /// A JSON call object inside a block; `cursor` bytes read, not routed, name not yet known.
    JsonHead {
        cursor: usize,
    },
    JsonBody {
        index: u32,
    },
    Params,
    ParamHeader,
    /// At a value's start where it may open with `<![CDATA[` (MiniCPM-5).
    ValueStart,
    Value {
        cdata: bool,
    },
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
    json: JsonCall,
    /// Bytes at the start of the input that a JSON object that was not a call already covered
    /// (its text after an invoke or block end written inside it): a `{` there starts no JSON call.
    /// Reading each again would be quadratic, as for the object's inner objects.
    json_read: usize,
    /// Bytes handed to the JSON reader, over the request (tests bound it).
    #[cfg(test)]
    json_handed: u64,
}

/// Reads `"key" attr="v" ...>` (the part after `name="`): the key, the attributes text and the
/// length through `>`; `None` when `>` has not arrived.
fn element_header(s: &str) -> Option<(&str, &str, usize)> {
    let quote = s.find('"')?;
    let close = s[quote..].find('>')? + quote;
    Some((&s[..quote], &s[quote + 1..close], close + 1))
}

/// How the rest of an invoke tag, `name">`, reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InvokeTag<'a> {
    /// The call's name and the tag's length through its `>`.
    Named(&'a str, usize),
    /// More text is needed.
    Wait,
    /// Not a tag: an empty name, or a newline, `<` or marker inside the name.
    Malformed,
}

/// Reads `rest`, the text after an invoke's `name="`, with `header` finding the name and the
/// length through `>` (`None` until `>` arrives).
pub(crate) fn invoke_tag<'a>(
    rest: &'a str,
    end: bool,
    header: impl Fn(&'a str) -> Option<(&'a str, usize)>,
) -> InvokeTag<'a> {
    let bad = rest.find(|c| c == '\n' || c == '<' || is_sentinel(c));
    match header(rest) {
        Some((name, len)) if !name.is_empty() && bad.is_none_or(|b| b > name.len()) => {
            InvokeTag::Named(name, len)
        }
        None if bad.is_none() && !end => InvokeTag::Wait,
        _ => InvokeTag::Malformed,
    }
}

/// What comes next between invokes in a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockNext {
    /// An invoke tag starts the input.
    Invoke,
    /// The block's end was read: what follows is content.
    Close,
    /// Text that is neither follows `ws` bytes of whitespace (not routed).
    Stray { ws: usize },
}

/// Between invokes in a block: routes the whitespace before an invoke and the block's end as
/// framing and says what comes next; `None` to wait for more (a prefix of a tag), at the end of the output after
/// routing the rest as framing.
pub(crate) fn block_next(
    input: &mut SegBuf,
    out: &mut Out,
    end: bool,
    invoke_open: &str,
    block_close: &str,
) -> Option<BlockNext> {
    let s = input.as_str();
    let ws = leading_ws(s);
    let after = &s[ws..];
    let (next, framing) = if after.starts_with(invoke_open) {
        (BlockNext::Invoke, ws)
    } else if after.starts_with(block_close) {
        (BlockNext::Close, ws + block_close.len())
    } else if after.is_empty()
        || could_become(after, invoke_open)
        || could_become(after, block_close)
    {
        if end {
            out.route_all(input, Channel::Framing);
        } else {
            out.route(input, ws, Channel::Framing);
        }
        return None;
    } else {
        return Some(BlockNext::Stray { ws });
    };
    out.route(input, framing, Channel::Framing);
    Some(next)
}

const JSON_ARG_KEYS: &[&str] = &["arguments", "parameters"];

impl InvokeCalls {
    pub(crate) fn new(spec: &'static InvokeSpec, markers: &Markers, tools: &Tools) -> Self {
        InvokeCalls {
            spec,
            block_open: markers.pattern(spec.block_open),
            block_close: markers.pattern(spec.block_close),
            state: State::Content,
            tools: tools.clone(),
            function: String::new(),
            args: if spec.trim_values {
                ArgsBuilder::trimming()
            } else {
                ArgsBuilder::new(false)
            },
            json: JsonCall::new(JSON_ARG_KEYS),
            json_read: 0,
            #[cfg(test)]
            json_handed: 0,
        }
    }

    /// Whether invokes stand alone in the text (no block).
    fn blockless(&self) -> bool {
        self.spec.block_open.is_empty()
    }

    /// Where text between elements goes: framing inside a block, content without blocks.
    fn outside_channel(&self) -> Channel {
        if self.blockless() {
            Channel::Content
        } else {
            Channel::Framing
        }
    }

    /// The state after an invoke closed.
    fn after_invoke(&self) -> State {
        if self.blockless() {
            State::Content
        } else {
            State::Block
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

/// `deepseek_v4` (registry constructor).
pub(crate) fn build_dsml_v4(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(InvokeCalls::new(&DSML_V4, markers, tools))
}

/// `deepseek_v41` (registry constructor).
pub(crate) fn build_dsml_v41(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(InvokeCalls::new(&DSML_V41, markers, tools))
}

/// `gigachat35` (registry constructor).
pub(crate) fn build_gcml(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(InvokeCalls::new(&GCML, markers, tools))
}

/// `dots` (registry constructor).
pub(crate) fn build_dots(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(InvokeCalls::new(&DOTS, markers, tools))
}

/// `step3` (registry constructor).
pub(crate) fn build_step3(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(InvokeCalls::new(&STEP3, markers, tools))
}

/// `minicpm5` (registry constructor).
pub(crate) fn build_minicpm5(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(InvokeCalls::new(&MINICPM5, markers, tools))
}

impl InvokeCalls {
    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Content => self.content(input, out, end)?,
            State::Block => self.block(input, out, end)?,
            State::InvokeName { prefix } => self.invoke_name(prefix, input, out, end)?,
            State::JsonHead { cursor } => self.json_head(cursor, input, out, end)?,
            State::JsonBody { index } => {
                self.json.stream(index, input, out, end)?;
                self.state = State::Block;
            }
            State::Params => self.params(input, out, end)?,
            State::ParamHeader => self.param_header(input, out, end)?,
            State::ValueStart => self.cdata_start(input, out, end)?,
            State::Value { cdata } => self.value(cdata, input, out, end)?,
        }
        Some(())
    }

    /// Outside blocks: content up to the block's opening tag (or, without blocks, an invoke).
    fn content(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        if self.blockless() {
            let open = self.spec.invoke_open;
            out.route_until(input, &[open], Channel::Content, end)?;
            self.state = State::InvokeName { prefix: open.len() };
        } else {
            out.route_until(input, &[&self.block_open], Channel::Content, end)?;
            out.route(input, self.block_open.len(), Channel::Framing);
            self.state = State::Block;
        }
        Some(())
    }

    fn param_header(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match element_header(input.as_str()) {
            Some((key, attrs, len)) => {
                let types = self.param_types(key, attrs);
                self.args.begin(key, types);
                if self.spec.types == ValueTypes::StringAttrRetyped && types == TypeSet::json() {
                    let schema = self
                        .tools
                        .properties(&self.function)
                        .and_then(|p| p.get(key));
                    if let Some(schema @ Value::Object(_)) = schema {
                        self.args.retype(schema.clone());
                    }
                }
                out.route(input, len, Channel::Tool);
                self.state = if self.spec.cdata {
                    State::ValueStart
                } else {
                    State::Value { cdata: false }
                };
            }
            None if !end => return None,
            None => {
                self.args.cut_off(input, out);
                self.state = State::Content;
                return None;
            }
        }
        Some(())
    }

    /// At a value's start (MiniCPM-5): `<![CDATA[` is framing of the value, which then ends at
    /// `]]>` before its closing tag.
    fn cdata_start(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let s = input.as_str();
        if s.starts_with(CDATA_OPEN) {
            out.route(input, CDATA_OPEN.len(), Channel::Tool);
            self.args.verbatim();
            self.state = State::Value { cdata: true };
        } else if !end && could_become(s, CDATA_OPEN) {
            return None;
        } else {
            self.state = State::Value { cdata: false };
        }
        Some(())
    }

    fn value(&mut self, cdata: bool, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let spec = self.spec;
        let cdata_close = format!("]]>{}", spec.param_close);
        // Inside CDATA only its end closes the value (tags there are text).
        let ends: Vec<&str> = if cdata {
            vec![cdata_close.as_str()]
        } else {
            [
                spec.param_close,
                spec.param_open,
                spec.invoke_close,
                self.block_close.as_str(),
            ]
            .into_iter()
            .filter(|e| !e.is_empty())
            .collect()
        };
        match self.args.value(input, out, &ends, end) {
            ValueEnd::Closed => self.state = State::Params,
            ValueEnd::Pending => return None,
            ValueEnd::Cut => {
                self.state = State::Content;
                return None;
            }
        }
        Some(())
    }

    /// The name a call is reported under: as written, or a doubled `f.f` as the declared `f`.
    fn tool_name<'a>(&self, name: &'a str) -> &'a str {
        if self.spec.doubled_names && !self.tools.declares(name) {
            if let Some((head, tail)) = name.split_once('.') {
                if head == tail && self.tools.declares(head) {
                    return head;
                }
            }
        }
        name
    }

    /// A value's types (see [`ValueTypes`]).
    fn param_types(&self, key: &str, attrs: &str) -> TypeSet {
        let schema = self.tools.param_types(&self.function, key);
        match self.spec.types {
            ValueTypes::Schema => schema,
            ValueTypes::StringAttr if attrs.contains("string=\"false\"") => TypeSet::json(),
            ValueTypes::StringAttr if attrs.contains("string=\"true\"") => TypeSet::string(),
            ValueTypes::StringAttr => schema,
            // A string is typed by the schema as it is retyped (see `param_header`).
            ValueTypes::StringAttrRetyped if attrs.contains("string=\"true\"") => schema,
            ValueTypes::StringAttrRetyped => TypeSet::json(),
            ValueTypes::Scalars => schema.single_scalar(),
            ValueTypes::JsonUnlessString if schema == TypeSet::string() => schema,
            ValueTypes::Json | ValueTypes::JsonUnlessString => TypeSet::json(),
        }
    }

    /// Inside a block, between invokes: an invoke, a JSON call, the block's end, or stray text
    /// (framing).
    fn block(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let spec = self.spec;
        match block_next(input, out, end, spec.invoke_open, &self.block_close)? {
            BlockNext::Invoke => {
                self.state = State::InvokeName {
                    prefix: spec.invoke_open.len(),
                };
            }
            BlockNext::Close => self.state = State::Content,
            BlockNext::Stray { ws }
                if spec.json_calls
                    && ws >= self.json_read
                    && input.as_str()[ws..].starts_with('{') =>
            {
                out.route(input, ws, Channel::Framing);
                self.json = JsonCall::new(JSON_ARG_KEYS);
                self.state = State::JsonHead { cursor: 0 };
            }
            BlockNext::Stray { ws } => {
                // Stray text is skipped even at the end of the output: the block may still close,
                // and content follow.
                let after = &input.as_str()[ws..];
                let mut stray = stray_len(after);
                if spec.json_calls {
                    // A JSON call may follow the stray text (past what an object already covered).
                    let from = self.json_read.saturating_sub(ws).max(1);
                    let brace = after
                        .get(from..)
                        .and_then(|a| a.find('{'))
                        .map(|b| b + from);
                    stray = stray.min(brace.unwrap_or(stray));
                }
                out.route(input, ws + stray, Channel::Framing);
            }
        }
        Some(())
    }

    /// A JSON call object inside a block (dots.llm1): the call starts once its name is read; an
    /// object that is not a call is framing, as any stray text in a block.
    fn json_head(
        &mut self,
        cursor: usize,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<()> {
        #[cfg(test)]
        {
            self.json_handed += (input.len() - cursor) as u64;
        }
        let (n, event) = self.json.feed(&input.as_str()[cursor..]);
        let cursor = cursor + n;
        match event {
            CallEvent::Named => {
                let index = self.json.start(out);
                out.route(input, cursor, Channel::Tool);
                self.state = State::JsonBody { index };
            }
            CallEvent::More if !end => {
                self.state = State::JsonHead { cursor };
                return None;
            }
            // Not a call (no name, broken, or cut off by the end of the output): the object, as
            // far as it was read, is framing, up to an invoke or the block's end written inside
            // it (a string left open swallows them), which are read as they are outside objects.
            // Its inner objects are not read again as calls: from each `{` of a deep object that
            // would read the rest again, quadratic in its depth.
            _ => {
                let read = &input.as_str()[..cursor.max(1)];
                let marker = [self.spec.invoke_open, self.block_close.as_str()]
                    .iter()
                    .filter(|m| !m.is_empty())
                    .filter_map(|m| read[1..].find(m).map(|at| at + 1))
                    .min();
                let (framing, read_len) = (marker.unwrap_or(read.len()), read.len());
                out.route(input, framing, Channel::Framing);
                // Counted from before the route: `feed` takes off what this step consumed.
                self.json_read = read_len;
                self.state = State::Block;
            }
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
        // Attributes may follow the name.
        let header = |s| element_header(s).map(|(name, _, len)| (name, len));
        match invoke_tag(rest, end, header) {
            InvokeTag::Named(name, len) => {
                self.function = self.tool_name(name).to_string();
                let index = out.start_call(&self.function, None);
                out.route(input, prefix + len, Channel::Tool);
                self.args.start(index, out);
                self.state = State::Params;
            }
            InvokeTag::Wait => return None,
            // A malformed invoke tag is framing in a block, content without blocks.
            _ => {
                out.route(input, prefix, self.outside_channel());
                self.state = self.after_invoke();
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
        let block_close = self.block_close.as_str();
        if after.starts_with(spec.param_open) {
            out.route(input, ws + spec.param_open.len(), Channel::Tool);
            self.state = State::ParamHeader;
        } else if after.starts_with(spec.invoke_close) {
            out.route(input, ws + spec.invoke_close.len(), Channel::Tool);
            self.args.finish(out);
            self.state = self.after_invoke();
        } else if !block_close.is_empty() && after.starts_with(block_close) {
            out.route(input, ws, Channel::Tool);
            self.args.finish(out);
            self.state = State::Block;
        } else if after.is_empty()
            || [spec.param_open, spec.invoke_close, block_close]
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
        self.args.held() + self.function.len() + self.json.held()
    }

    #[cfg(test)]
    fn nested_handed(&self) -> u64 {
        self.json_handed
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        loop {
            let before = input.len();
            let step = self.step(input, out, end);
            // Steps only consume input: what was read moves `json_read` along with it.
            self.json_read = self.json_read.saturating_sub(before - input.len());
            if step.is_none() {
                return;
            }
        }
    }
}
