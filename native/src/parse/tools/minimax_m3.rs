//! `minimax_m3` (MiniMax-M3): every structural tag is prefixed with the namespace `]<]minimax[>[`,
//! and parameters are elements named after the argument, which may nest:
//!
//! ```text
//! ]<]minimax[>[<tool_call>
//! ]<]minimax[>[<invoke name="create_order">
//! ]<]minimax[>[<user_id>42]<]minimax[>[</user_id>
//! ]<]minimax[>[<items>
//! ]<]minimax[>[<item>]<]minimax[>[<sku>b-1]<]minimax[>[</sku>]<]minimax[>[</item>
//! ]<]minimax[>[</items>
//! ]<]minimax[>[</invoke>
//! ]<]minimax[>[</tool_call>
//! ```
//!
//! An element holding elements is an object, or an array when its schema says so (list items are
//! `<item>`); a repeated name collects into a list; text beside child elements goes to a `$text`
//! member. Leaf text is typed by its schema (see [`crate::parse::schema`]). The arguments are one
//! typed value, as in vLLM: they are read whole and sent when the invoke closes; parameters are
//! read up to the first malformed element. A call starts at its name's `">`; a call cut off by the
//! end of the output has only its opening brace. Inside a block, text outside elements is framing.

use serde_json::Value;

use crate::parse::json::push_json_string;
use crate::parse::out::{Channel, Out};
use crate::parse::schema::{coerce, Tools, TypeSet};
use crate::parse::text::{leading_ws, scan, Markers, Scan, SegBuf};
use crate::parse::tools::invoke::{block_next, invoke_tag, BlockNext, InvokeTag};
use crate::parse::Stage;

/// The markers this format uses.
pub(crate) const MARKERS: &[&str] = &["]<]minimax[>["];

const MAX_DEPTH: usize = 128;
const TEXT_FIELD: &str = "$text";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Content,
    Block,
    /// The input starts with the invoke tag (`prefix` bytes); reading `name">`.
    InvokeName {
        prefix: usize,
    },
    Body {
        index: u32,
    },
}

/// The parser (see the module docs).
pub(crate) struct MinimaxM3 {
    ns: String,
    block_open: String,
    block_close: String,
    invoke_open: String,
    invoke_close: String,
    state: State,
    tools: Tools,
    function: String,
    body: String,
}

/// The parser of a request (registry constructor).
pub(crate) fn build(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    let ns = markers.pattern(MARKERS[0]);
    Box::new(MinimaxM3 {
        block_open: format!("{ns}<tool_call>"),
        block_close: format!("{ns}</tool_call>"),
        invoke_open: format!("{ns}<invoke name=\""),
        invoke_close: format!("{ns}</invoke>"),
        ns,
        state: State::Content,
        tools: tools.clone(),
        function: String::new(),
        body: String::new(),
    })
}

impl MinimaxM3 {
    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Content => {
                out.route_until(input, &[&self.block_open], Channel::Content, end)?;
                out.route(input, self.block_open.len(), Channel::Framing);
                self.state = State::Block;
            }
            State::Block => self.block(input, out, end)?,
            State::InvokeName { prefix } => self.invoke_name(prefix, input, out, end)?,
            State::Body { index } => self.body(index, input, out, end)?,
        }
        Some(())
    }

    /// Inside a block, between invokes: an invoke, the block's end, or stray text (framing).
    fn block(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match block_next(input, out, end, &self.invoke_open, &self.block_close)? {
            BlockNext::Invoke => {
                self.state = State::InvokeName {
                    prefix: self.invoke_open.len(),
                };
            }
            BlockNext::Close => self.state = State::Content,
            BlockNext::Stray { ws } => {
                // Stray text up to the next namespace marker (framing, even at the end of the
                // output: the block may still close and content follow).
                let after = &input.as_str()[ws..];
                let first = after.chars().next().map_or(0, char::len_utf8);
                let stray = match scan(&after[first..], &[&self.ns]) {
                    Scan::Found { at, .. } | Scan::Partial { at } => first + at,
                    Scan::None => after.len(),
                };
                out.route(input, ws + stray, Channel::Framing);
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
        // No attributes: the name runs to the first `">`.
        match invoke_tag(rest, end, |s| s.find("\">").map(|at| (&s[..at], at + 2))) {
            InvokeTag::Named(name, len) => {
                self.function = name.to_string();
                let index = out.start_call(&self.function, None);
                out.route(input, prefix + len, Channel::Tool);
                out.call_args(index, "{");
                self.body.clear();
                self.state = State::Body { index };
            }
            InvokeTag::Wait => return None,
            // A malformed invoke tag is framing.
            _ => {
                out.route(input, prefix, Channel::Framing);
                self.state = State::Block;
            }
        }
        Some(())
    }

    /// The invoke's body, read whole up to its end (or the block's end, which closes it too).
    fn body(&mut self, index: u32, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let ends = [self.invoke_close.as_str(), self.block_close.as_str()];
        let (at, closed) = match scan(input.as_str(), &ends) {
            Scan::Found { at, index } => (at, Some(index)),
            Scan::Partial { at } if !end => (at, None),
            _ => (input.len(), None),
        };
        self.body.push_str(&input.as_str()[..at]);
        out.route(input, at, Channel::Tool);
        match closed {
            Some(which) => {
                if which == 0 {
                    out.route(input, self.invoke_close.len(), Channel::Tool);
                }
                let properties = self.tools.properties(&self.function);
                let args = arguments(&self.body, &self.ns, properties);
                // The opening brace went out when the call started.
                out.call_args(index, &args[1..]);
                out.end_call(index);
                self.body.clear();
                self.state = State::Block;
                Some(())
            }
            // Cut off: the call keeps only its opening brace.
            None if end => {
                self.body.clear();
                self.state = State::Content;
                None
            }
            None => None,
        }
    }
}

impl Stage for MinimaxM3 {
    fn held(&self) -> usize {
        self.body.len() + self.function.len()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        while self.step(input, out, end).is_some() {}
    }
}

/// An element's content: its text, or its child elements (and any text beside them).
enum Element {
    Text(String),
    Children(Vec<(String, Element)>),
}

/// The arguments object (JSON text) of an invoke body: its parameter elements up to the first
/// malformed one, typed by the function's `properties` schema.
fn arguments(body: &str, ns: &str, properties: Option<&Value>) -> String {
    let mut params = Vec::new();
    let mut pos = 0;
    loop {
        pos += leading_ws(&body[pos..]);
        let Some((name, element, next)) = parse_element(body, pos, ns, 1) else {
            break;
        };
        params.push((name, element));
        pos = next;
    }
    object(&params, properties, None)
}

/// Parses the element at `pos` (which must start with `ns<`): its name, content and end.
fn parse_element(
    text: &str,
    pos: usize,
    ns: &str,
    depth: usize,
) -> Option<(String, Element, usize)> {
    let open = format!("{ns}<");
    if depth > MAX_DEPTH || !text[pos..].starts_with(&open) {
        return None;
    }
    let name_start = pos + open.len();
    let name_end = name_start + text[name_start..].find('>')?;
    let name = &text[name_start..name_end];
    if name.starts_with('/') || name.trim().is_empty() {
        return None;
    }
    let close = format!("{ns}</{name}>");
    let mut pos = name_end + 1;
    let mut body_text = String::new();
    let mut children = Vec::new();
    loop {
        let marker = pos + text[pos..].find(ns)?;
        body_text.push_str(&text[pos..marker]);
        if text[marker..].starts_with(&close) {
            pos = marker + close.len();
            break;
        }
        let (child, value, next) = parse_element(text, marker, ns, depth + 1)?;
        children.push((child, value));
        pos = next;
    }
    if children.is_empty() {
        return Some((name.to_string(), Element::Text(body_text), pos));
    }
    if !body_text.trim().is_empty() {
        let mut field = TEXT_FIELD.to_string();
        while children.iter().any(|(n, _)| *n == field) {
            field.insert(0, '$');
        }
        children.push((field, Element::Text(body_text)));
    }
    Some((name.to_string(), Element::Children(children), pos))
}

/// The first array or object alternative of a schema: its kind and the schema holding it.
fn container(schema: &Value) -> Option<(&'static str, &Value)> {
    let types = schema.get("type");
    for kind in ["array", "object"] {
        let listed = match types {
            Some(Value::String(t)) => t == kind,
            Some(Value::Array(ts)) => ts.iter().any(|t| t.as_str() == Some(kind)),
            _ => false,
        };
        if listed {
            return Some((kind, schema));
        }
    }
    if types.is_none() {
        if schema.get("items").is_some() {
            return Some(("array", schema));
        }
        if schema.get("properties").is_some() || schema.get("additionalProperties").is_some() {
            return Some(("object", schema));
        }
    }
    ["anyOf", "oneOf"]
        .iter()
        .filter_map(|k| schema.get(*k).and_then(Value::as_array))
        .flatten()
        .find_map(container)
}

/// An element's value as JSON text, by its schema (none: strings and objects).
fn convert(element: &Element, schema: Option<&Value>) -> String {
    let schema = schema.filter(|s| s.is_object());
    let holder = schema.and_then(container);
    match element {
        Element::Text(text) => {
            let Some(schema) = schema else {
                let mut out = String::new();
                push_json_string(text, &mut out);
                return out;
            };
            let types = TypeSet::of_schema(schema);
            match holder {
                Some((kind, _)) if !types.allows_string() && text.trim().is_empty() => {
                    if kind == "array" { "[]" } else { "{}" }.to_string()
                }
                _ => coerce(text, types),
            }
        }
        Element::Children(children) => match holder {
            Some(("array", s)) => {
                let items: Vec<String> = children
                    .iter()
                    .map(|(_, c)| convert(c, s.get("items")))
                    .collect();
                format!("[{}]", items.join(", "))
            }
            Some((_, s)) => object(children, s.get("properties"), s.get("additionalProperties")),
            None => object(children, None, None),
        },
    }
}

/// Named elements as a JSON object; a repeated name collects its values into a list.
fn object(
    elements: &[(String, Element)],
    properties: Option<&Value>,
    additional: Option<&Value>,
) -> String {
    let mut members: Vec<(&str, Vec<String>)> = Vec::new();
    for (name, element) in elements {
        let schema = properties.and_then(|p| p.get(name.as_str())).or(additional);
        let value = convert(element, schema);
        match members.iter_mut().find(|(n, _)| *n == name.as_str()) {
            Some((_, values)) => values.push(value),
            None => members.push((name.as_str(), vec![value])),
        }
    }
    let mut out = String::from("{");
    for (i, (name, values)) in members.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_json_string(name, &mut out);
        out.push_str(": ");
        if values.len() == 1 {
            out.push_str(&values[0]);
        } else {
            out.push('[');
            out.push_str(&values.join(", "));
            out.push(']');
        }
    }
    out.push('}');
    out
}
