//! The `<arg_key>`/`<arg_value>` family: a call is a name followed by key/value elements, values
//! raw text typed by the request's tool schema. One reader, one [`KeyedSpec`] per format:
//! - `glm45` / `glm47` (GLM-4.5/4.6/4.7), `ling3`, `poolside_v1`:
//!   `<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>...</tool_call>`, GLM-4.5/4.6
//!   with a newline after the name and between elements, 4.7 without; one parser reads both.
//!   `iquest_q1` writes the same inside `<iquest_tool_call>`.
//! - `hy_v3` (Hunyuan): `<tool_calls><tool_call>NAME<tool_sep><arg_key>k</arg_key>
//!   <arg_value>v</arg_value></tool_call>...</tool_calls>`: calls only inside the section, the
//!   name ends at `<tool_sep>`.
//! - `k2_horizon`: `<ifm|tool_calls><ifm|tool_call>NAME<ifm|arg_key>k</ifm|arg_key>
//!   [<ifm|arg_type>t</ifm|arg_type>]<ifm|arg_value>v</ifm|arg_value></ifm|tool_call>...`: a
//!   written type overrides the schema's.
//!
//! A call starts when its name is complete; `<tool_call>` followed by something that is not a name
//! (JSON, a cut-off stream) is content. A section begins only with a call: a section tag not
//! followed by one (prose mentioning it, a cut-off stream) is content; once a call began it,
//! stray text inside the section is framing (as in a DeepSeek or Kimi section). A key never closed
//! before the call's end is dropped.

use crate::parse::json::is_sentinel;
use crate::parse::out::{Channel, Out};
use crate::parse::schema::{Tools, TypeSet};
use crate::parse::text::{ascii_trim, could_become, leading_ws, scan, Markers, Scan, SegBuf};
use crate::parse::tools::json_call::{CallEvent, JsonCall};
use crate::parse::tools::xml_args::{stray_len, ArgsBuilder, ValueEnd};
use crate::parse::Stage;

/// A format of the family: indexes into its `markers` (see the module docs).
pub(crate) struct KeyedSpec {
    pub(crate) markers: &'static [&'static str],
    /// The section wrapping the calls (open, close), when the format has one: calls only inside.
    section: Option<[usize; 2]>,
    /// A call's open and close tags.
    call: [usize; 2],
    /// The tag ending the name; without one the name ends at a newline, a key or the call's end.
    name_sep: Option<usize>,
    key: [usize; 2],
    /// Optional tags between key and value naming the value's type.
    arg_type: Option<[usize; 2]>,
    value: [usize; 2],
    /// A call's body may be a JSON object `{"name": ..., "arguments": {...}}` instead.
    json_body: bool,
}

/// The markers of GLM-4.5/4.7, `ling3` and `poolside_v1`.
pub(crate) const MARKERS: &[&str] = &[
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
];

/// GLM-4.5/4.7, `ling3`, `poolside_v1`.
pub(crate) const GLM: KeyedSpec = KeyedSpec {
    markers: MARKERS,
    section: None,
    call: [0, 1],
    name_sep: None,
    key: [2, 3],
    arg_type: None,
    value: [4, 5],
    json_body: false,
};

/// The markers of IQuest-Q1 (`iquest_q1`).
pub(crate) const IQUEST_MARKERS: &[&str] = &[
    "<iquest_tool_call>",
    "</iquest_tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
];

/// IQuest-Q1: GLM-4.7's elements inside `<iquest_tool_call>`.
pub(crate) const IQUEST: KeyedSpec = KeyedSpec {
    markers: IQUEST_MARKERS,
    ..GLM
};

/// Hunyuan `hy_v3`; Hy3 checkpoints spell the tags with a token suffix (`<tool_sep:opensource>`).
pub(crate) const HY_V3: KeyedSpec = KeyedSpec {
    markers: &[
        "<tool_calls{sfx}>",
        "</tool_calls{sfx}>",
        "<tool_call{sfx}>",
        "</tool_call{sfx}>",
        "<tool_sep{sfx}>",
        "<arg_key{sfx}>",
        "</arg_key{sfx}>",
        "<arg_value{sfx}>",
        "</arg_value{sfx}>",
    ],
    section: Some([0, 1]),
    call: [2, 3],
    name_sep: Some(4),
    key: [5, 6],
    arg_type: None,
    value: [7, 8],
    json_body: false,
};

/// Hunyuan `hy_v4`: GLM-4.7's compact elements inside a section, every tag spelled with the
/// checkpoint's token suffix (`<tool_calls:6124c78e>`); the name ends at the first key or the
/// call's end (no `<tool_sep>`).
pub(crate) const HY_V4: KeyedSpec = KeyedSpec {
    markers: &[
        "<tool_calls{sfx}>",
        "</tool_calls{sfx}>",
        "<tool_call{sfx}>",
        "</tool_call{sfx}>",
        "<arg_key{sfx}>",
        "</arg_key{sfx}>",
        "<arg_value{sfx}>",
        "</arg_value{sfx}>",
    ],
    section: Some([0, 1]),
    call: [2, 3],
    name_sep: None,
    key: [4, 5],
    arg_type: None,
    value: [6, 7],
    json_body: false,
};

/// K2 Horizon (`k2_horizon`): IFM tags, written types, or a JSON body.
pub(crate) const K2_HORIZON: KeyedSpec = KeyedSpec {
    markers: &[
        "<ifm|tool_calls>",
        "</ifm|tool_calls>",
        "<ifm|tool_call>",
        "</ifm|tool_call>",
        "<ifm|arg_key>",
        "</ifm|arg_key>",
        "<ifm|arg_type>",
        "</ifm|arg_type>",
        "<ifm|arg_value>",
        "</ifm|arg_value>",
    ],
    section: Some([0, 1]),
    call: [2, 3],
    name_sep: None,
    key: [4, 5],
    arg_type: Some([6, 7]),
    value: [8, 9],
    json_body: true,
};

const JSON_ARG_KEYS: &[&str] = &["arguments"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Content,
    /// The input starts with the section's open tag: a section only if a call follows.
    Lead,
    /// Inside the section, between calls.
    Section,
    /// The input starts with the call's open tag; reading the name.
    Name,
    Args,
    Key,
    /// After a key (or its type), before its value.
    BeforeValue,
    Type,
    Value,
    /// A JSON body, before its name is read; `cursor` bytes of input read but not routed.
    JsonName {
        cursor: usize,
    },
    JsonArgs {
        index: u32,
    },
    /// After a JSON body, up to the call's end tag.
    JsonTail,
}

/// The patterns a request matches (markers as sentinels or text).
struct Tags {
    section: Option<[String; 2]>,
    open: String,
    close: String,
    name_sep: Option<String>,
    key_open: String,
    key_close: String,
    arg_type: Option<[String; 2]>,
    value_open: String,
    value_close: String,
}

/// The parser (see the module docs).
pub(crate) struct Keyed {
    tags: Tags,
    state: State,
    tools: Tools,
    function: String,
    key: String,
    /// The type the model wrote for the current value, if any.
    written_type: Option<TypeSet>,
    args: ArgsBuilder,
    json_body: bool,
    json: JsonCall,
    /// Bytes before the call's open tag (a section's open tag and whitespace) that are framing if
    /// the call turns out to be one, else content.
    lead: usize,
}

fn is_name_char(c: char) -> bool {
    !(c.is_ascii_whitespace()
        || matches!(c, '<' | '>' | '{' | '}' | '"' | '[' | ']')
        || is_sentinel(c))
}

impl Keyed {
    pub(crate) fn new(spec: &KeyedSpec, markers: &Markers, tools: &Tools) -> Self {
        let p = |i: usize| markers.pattern(spec.markers[i]);
        let tags = Tags {
            section: spec.section.map(|[o, c]| [p(o), p(c)]),
            open: p(spec.call[0]),
            close: p(spec.call[1]),
            name_sep: spec.name_sep.map(p),
            key_open: p(spec.key[0]),
            key_close: p(spec.key[1]),
            arg_type: spec.arg_type.map(|[o, c]| [p(o), p(c)]),
            value_open: p(spec.value[0]),
            value_close: p(spec.value[1]),
        };
        Keyed {
            tags,
            state: State::Content,
            tools: tools.clone(),
            function: String::new(),
            key: String::new(),
            written_type: None,
            args: ArgsBuilder::new(false),
            json_body: spec.json_body,
            json: JsonCall::new(JSON_ARG_KEYS),
            lead: 0,
        }
    }
}

/// The GLM parser of a request (registry constructor).
pub(crate) fn build(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(Keyed::new(&GLM, markers, tools))
}

/// The `k2_horizon` parser of a request (registry constructor).
pub(crate) fn build_k2_horizon(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(Keyed::new(&K2_HORIZON, markers, tools))
}

/// The `iquest_q1` parser of a request (registry constructor).
pub(crate) fn build_iquest(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(Keyed::new(&IQUEST, markers, tools))
}

/// The `hy_v3` parser of a request (registry constructor).
pub(crate) fn build_hy_v3(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(Keyed::new(&HY_V3, markers, tools))
}

/// The `hy_v4` parser of a request (registry constructor).
pub(crate) fn build_hy_v4(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(Keyed::new(&HY_V4, markers, tools))
}

impl Keyed {
    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Content => self.content(input, out, end)?,
            State::Lead => self.lead(input, out, end)?,
            State::Section => self.section(input, out, end)?,
            State::Name => self.name(input, out, end)?,
            State::Args => self.between_args(input, out, end)?,
            State::Key => self.key(input, out, end)?,
            State::BeforeValue => self.before_value(input, out, end)?,
            State::Type => self.value_type(input, out, end)?,
            State::JsonName { cursor } => self.json_name(cursor, input, out, end)?,
            State::JsonArgs { index } => {
                self.json.stream(index, input, out, end)?;
                self.state = State::JsonTail;
            }
            State::JsonTail => {
                let close = self.tags.close.as_str();
                out.route_until(input, &[close], Channel::Framing, end)?;
                out.route(input, close.len(), Channel::Framing);
                self.state = self.after_call();
            }
            State::Value => {
                let ends = [
                    self.tags.value_close.as_str(),
                    self.tags.key_open.as_str(),
                    self.tags.close.as_str(),
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

    /// Where a call ends (or turns out not to be one): back in the section, or in content.
    fn after_call(&self) -> State {
        if self.tags.section.is_some() {
            State::Section
        } else {
            State::Content
        }
    }

    fn content(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match &self.tags.section {
            Some([open, _]) => {
                out.route_until(input, &[open], Channel::Content, end)?;
                self.state = State::Lead;
            }
            None => {
                out.route_until(input, &[&self.tags.open], Channel::Content, end)?;
                self.state = State::Name;
            }
        }
        Some(())
    }

    /// A section's open tag: the section begins if a call's open tag follows (after whitespace);
    /// otherwise the tag is content.
    fn lead(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let section_len = self.tags.section.as_ref().map_or(0, |[o, _]| o.len());
        let s = &input.as_str()[section_len..];
        let ws = leading_ws(s);
        let rest = &s[ws..];
        if rest.starts_with(self.tags.open.as_str()) {
            self.lead = section_len + ws;
            self.state = State::Name;
        } else if !end && (rest.is_empty() || could_become(rest, &self.tags.open)) {
            return None;
        } else {
            out.route(input, section_len, Channel::Content);
            self.state = State::Content;
        }
        Some(())
    }

    /// Inside the section: a call, the section's end, or stray text (framing).
    fn section(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let close = self.tags.section.as_ref().map_or("", |[_, c]| c.as_str());
        let pats = [self.tags.open.as_str(), close];
        let index = out.route_until(input, &pats, Channel::Framing, end)?;
        if index == 1 {
            out.route(input, close.len(), Channel::Framing);
            self.state = State::Content;
        } else {
            self.state = State::Name;
        }
        Some(())
    }

    /// `<tool_call>NAME` then what ends a name (the separator tag; or a newline, a key or the
    /// call's end): the call starts.
    fn name(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let open_len = self.tags.open.len();
        let s = &input.as_str()[self.lead + open_len..];
        let ws = leading_ws(s);
        if self.json_body && s[ws..].starts_with('{') {
            self.json = JsonCall::new(JSON_ARG_KEYS);
            self.state = State::JsonName {
                cursor: self.lead + open_len + ws,
            };
            return Some(());
        }
        let name_len = s[ws..].find(|c| !is_name_char(c)).unwrap_or(s.len() - ws);
        let after = &s[ws + name_len..];
        let (ends_name, may_end, tail) = self.name_end(after);
        if name_len > 0 && ends_name {
            self.function = s[ws..ws + name_len].to_string();
            let index = out.start_call(&self.function, None);
            out.route(
                input,
                std::mem::take(&mut self.lead) + open_len,
                Channel::Framing,
            );
            out.route(input, ws + name_len, Channel::Tool);
            out.route(input, tail, Channel::Framing);
            self.args.start(index, out);
            self.state = State::Args;
        } else if !end && (after.is_empty() || (name_len > 0 && may_end)) {
            return None;
        } else {
            self.not_a_call(input, out);
        }
        Some(())
    }

    /// The open tag starts no call: it is content, or framing inside a section. A section that
    /// no call began is no section: its open tag is content.
    fn not_a_call(&mut self, input: &mut SegBuf, out: &mut Out) {
        if self.lead > 0 {
            out.route(input, std::mem::take(&mut self.lead), Channel::Content);
            self.state = State::Content;
            return;
        }
        let channel = match self.tags.section {
            Some(_) => Channel::Framing,
            None => Channel::Content,
        };
        out.route(input, self.tags.open.len(), channel);
        self.state = self.after_call();
    }

    /// A JSON body: the call starts once its name is read.
    fn json_name(
        &mut self,
        cursor: usize,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<()> {
        let (n, event) = self.json.feed(&input.as_str()[cursor..]);
        let cursor = cursor + n;
        match event {
            CallEvent::Named => {
                let index = self.json.start(out);
                let framing = std::mem::take(&mut self.lead) + self.tags.open.len();
                out.route(input, framing, Channel::Framing);
                out.route(input, cursor - framing, Channel::Tool);
                self.state = State::JsonArgs { index };
            }
            CallEvent::More if !end => {
                self.state = State::JsonName { cursor };
                return None;
            }
            _ => self.not_a_call(input, out),
        }
        Some(())
    }

    /// Whether `after` (the text after a name) ends the name, whether it still could, and the
    /// bytes of separator to consume.
    fn name_end(&self, after: &str) -> (bool, bool, usize) {
        match &self.tags.name_sep {
            Some(sep) => {
                let ws = leading_ws(after);
                let rest = &after[ws..];
                let ends = rest.starts_with(sep.as_str());
                (
                    ends,
                    rest.is_empty() || could_become(rest, sep),
                    ws + sep.len(),
                )
            }
            None => {
                // Spaces may pad the name (`<tool_call> f <arg_key>`); they are read as framing
                // before the first key.
                let t = &self.tags;
                let rest = &after[leading_ws(after)..];
                let ends = after.starts_with('\n')
                    || rest.starts_with(t.key_open.as_str())
                    || rest.starts_with(t.close.as_str());
                let may = rest.is_empty()
                    || could_become(rest, &t.key_open)
                    || could_become(rest, &t.close);
                (ends, may, 0)
            }
        }
    }

    /// A key, up to its closing tag; a key never closed before the call's end is dropped.
    fn key(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let close = self.tags.key_close.clone();
        if let Some(key) = self.element_text(&close, input, out, end)? {
            self.key = key;
            self.written_type = None;
            self.state = State::BeforeValue;
        }
        Some(())
    }

    /// After a key: its value's open tag (or a type tag first); anything else drops the key.
    fn before_value(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let s = input.as_str();
        let ws = leading_ws(s);
        let after = &s[ws..];
        let type_open = self.tags.arg_type.as_ref().map(|[o, _]| o.as_str());
        if after.starts_with(self.tags.value_open.as_str()) {
            out.route(input, ws + self.tags.value_open.len(), Channel::Tool);
            let schema = self.tools.param_types(&self.function, &self.key);
            self.args
                .begin(&self.key, self.written_type.unwrap_or(schema));
            self.state = State::Value;
        } else if let Some(open) = type_open.filter(|o| after.starts_with(o)) {
            let n = ws + open.len();
            out.route(input, n, Channel::Tool);
            self.state = State::Type;
        } else if !end
            && (after.is_empty()
                || could_become(after, &self.tags.value_open)
                || type_open.is_some_and(|o| could_become(after, o)))
        {
            return None;
        } else {
            // A key without a value is dropped.
            self.state = State::Args;
        }
        Some(())
    }

    /// The type the model wrote for the value, up to its closing tag.
    fn value_type(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let close = self
            .tags
            .arg_type
            .as_ref()
            .map_or(String::new(), |[_, c]| c.clone());
        if let Some(written) = self.element_text(&close, input, out, end)? {
            let written = TypeSet::named(&written);
            self.written_type = Some(written).filter(|t| *t != TypeSet::default());
            self.state = State::BeforeValue;
        }
        Some(())
    }

    /// The trimmed text of an element (a key or a written type) up to its closing tag `close`,
    /// routed with the tag as the call's text: `Some(Some(text))`. The call's end before `close`
    /// drops the element (`Some(None)`, back to the call's elements); `None` waits for more input,
    /// or, at the output's end, leaves the call cut off.
    fn element_text(
        &mut self,
        close: &str,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<Option<String>> {
        match scan(input.as_str(), &[close, &self.tags.close]) {
            Scan::Found { at, index: 0 } => {
                let text = ascii_trim(&input.as_str()[..at]).to_string();
                out.route(input, at + close.len(), Channel::Tool);
                Some(Some(text))
            }
            Scan::Found { at, .. } => {
                out.route(input, at, Channel::Tool);
                self.state = State::Args;
                Some(None)
            }
            _ if !end => None,
            _ => {
                self.args.cut_off(input, out);
                self.state = State::Content;
                None
            }
        }
    }

    /// Between a call's elements: a key, the call's end, or stray text (skipped).
    fn between_args(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let s = input.as_str();
        let ws = leading_ws(s);
        let after = &s[ws..];
        let (key_open, close) = (self.tags.key_open.as_str(), self.tags.close.as_str());
        if after.starts_with(key_open) {
            out.route(input, ws + key_open.len(), Channel::Tool);
            self.state = State::Key;
        } else if after.starts_with(close) {
            out.route(input, ws + close.len(), Channel::Framing);
            self.args.finish(out);
            self.state = self.after_call();
        } else if after.is_empty() || could_become(after, key_open) || could_become(after, close) {
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

impl Stage for Keyed {
    fn held(&self) -> usize {
        self.args.held() + self.key.len() + self.json.held()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        while self.step(input, out, end).is_some() {
            let waiting = input.is_empty() && !matches!(self.state, State::JsonArgs { .. });
            if waiting && !(end && matches!(self.state, State::JsonName { .. })) {
                return;
            }
        }
    }
}
