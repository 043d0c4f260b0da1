//! Loading a model's `response_template` (version 1): the checks vLLM 0.33 makes when it loads one
//! (`chat_parsing/response_templates.py`) and when it serves with one (`response_template.py`:
//! only the fields `thinking`, `content` and `tool_calls`; `thinking` and `content` plain text;
//! every field optional; a `content` field added as the sink when every field has an opener).

use serde_json::{Map, Value};

use super::content::{check_transform, Content};
use super::delim::{literal_pattern, Delim};

/// The field names serving routes.
pub(crate) const THINKING: &str = "thinking";
pub(crate) const CONTENT: &str = "content";
pub(crate) const TOOL_CALLS: &str = "tool_calls";

/// One field of the template.
pub(crate) struct Field {
    pub(crate) name: String,
    pub(crate) open: Option<Delim>,
    pub(crate) close: Option<Delim>,
    /// The literals of `close` (empty for a pattern): a closer cut by the stop token is completed.
    pub(crate) close_literals: Vec<String>,
    pub(crate) content: Content,
    pub(crate) join: Option<String>,
    pub(crate) transform: Option<Value>,
    pub(crate) transform_each: bool,
}

/// A loaded template.
pub(crate) struct Template {
    pub(crate) start_anchor: Delim,
    /// Fields in the template's order.
    pub(crate) fields: Vec<Field>,
    /// The field without an opener (where unclaimed text goes), if any.
    pub(crate) implicit: Option<usize>,
    /// The literals of `start_anchor` (empty for a pattern).
    pub(crate) start_literals: Vec<String>,
}

const TEMPLATE_KEYS: &[&str] = &[
    "version",
    "defaults",
    "fields",
    "start_anchor",
    "start_anchor_pattern",
];
const FIELD_KEYS: &[&str] = &[
    "open",
    "open_pattern",
    "close",
    "close_pattern",
    "content",
    "content_args",
    "repeats",
    "join",
    "optional",
    "transform",
    "transform_each",
];

impl Template {
    /// Loads `spec` (the `response_template` JSON object) as vLLM serves it.
    pub(crate) fn load(spec: &Value) -> Result<Template, String> {
        let obj = spec
            .as_object()
            .ok_or("response_template must be a JSON object")?;
        let version = obj.get("version").cloned().unwrap_or(Value::from(1));
        if version != 1 {
            return Err(format!("unsupported response_template version {version}"));
        }
        if let Some(k) = obj.keys().find(|k| !TEMPLATE_KEYS.contains(&k.as_str())) {
            return Err(format!("unknown key {k:?} in response_template"));
        }
        let defaults = obj
            .get("defaults")
            .cloned()
            .unwrap_or(Value::Object(Map::new()));
        let defaults = defaults
            .as_object()
            .ok_or("response_template.defaults must be an object")?;
        if let Some(k) = defaults.keys().find(|k| k.as_str() != "role") {
            return Err(format!(
                "response_template.defaults has {k:?}; serving supports only \"role\""
            ));
        }
        let raw = obj
            .get("fields")
            .and_then(Value::as_object)
            .filter(|f| !f.is_empty());
        let raw = raw.ok_or("response_template.fields must be a non-empty object")?;
        let mut fields = Vec::new();
        for (name, field) in raw {
            if ![THINKING, CONTENT, TOOL_CALLS].contains(&name.as_str()) {
                return Err(format!(
                    "field {name:?} is not one serving routes (thinking, content, tool_calls)"
                ));
            }
            fields.push(build_field(name, field)?);
        }
        let all_open = fields.iter().all(|f| f.open.is_some());
        if all_open && !fields.iter().any(|f| f.name == CONTENT) {
            fields.push(plain_field(CONTENT));
        }
        let implicit: Vec<usize> = (0..fields.len())
            .filter(|&i| fields[i].open.is_none())
            .collect();
        if implicit.len() > 1 {
            return Err("at most one field may omit 'open'/'open_pattern'".into());
        }
        let start_anchor = anchor(
            obj,
            "start_anchor",
            "start_anchor_pattern",
            "response_template",
        )?
        .ok_or("response_template must define 'start_anchor' or 'start_anchor_pattern'")?;
        Ok(Template {
            start_literals: literals(obj.get("start_anchor")),
            start_anchor,
            fields,
            implicit: implicit.first().copied(),
        })
    }

    /// The field named `name`.
    pub(crate) fn field(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }
}

/// The literal strings of a literal delimiter (a string or a list), none for anything else.
fn literals(raw: Option<&Value>) -> Vec<String> {
    match raw {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

fn plain_field(name: &str) -> Field {
    Field {
        name: name.to_string(),
        open: None,
        close: None,
        close_literals: Vec::new(),
        content: Content::Text { strip: true },
        join: None,
        transform: None,
        transform_each: false,
    }
}

/// A delimiter given as a literal, a list of literals or a regex.
fn anchor(
    obj: &Map<String, Value>,
    literal: &str,
    pattern: &str,
    scope: &str,
) -> Result<Option<Delim>, String> {
    let compiled = match (obj.get(literal), obj.get(pattern)) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "{scope}: cannot specify both '{literal}' and '{pattern}'"
            ))
        }
        (Some(raw), None) => {
            let list: Vec<String> = match raw {
                Value::String(s) => vec![s.clone()],
                Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_string) => a
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect(),
                _ => {
                    return Err(format!(
                        "{scope}: '{literal}' must be a string or a non-empty list of strings"
                    ))
                }
            };
            if list.iter().any(String::is_empty) {
                return Err(format!("{scope}: '{literal}' literals cannot be empty"));
            }
            Delim::new(&literal_pattern(&list))
        }
        (None, Some(Value::String(p))) => Delim::new(p),
        (None, Some(_)) => return Err(format!("{scope}: '{pattern}' must be a string")),
        (None, None) => return Ok(None),
    };
    compiled
        .map(Some)
        .map_err(|e| format!("{scope}: {pattern} not supported here: {e}"))
}

fn build_field(name: &str, raw: &Value) -> Result<Field, String> {
    let scope = format!("field {name:?}");
    let obj = raw
        .as_object()
        .ok_or_else(|| format!("{scope} must be an object"))?;
    if let Some(k) = obj.keys().find(|k| !FIELD_KEYS.contains(&k.as_str())) {
        return Err(format!("{scope}: unknown key {k:?}"));
    }
    let parser = obj.get("content").and_then(Value::as_str).unwrap_or("text");
    let empty = Map::new();
    let args = obj
        .get("content_args")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let content = Content::new(parser, args).map_err(|e| format!("{scope}: {e}"))?;
    let open = anchor(obj, "open", "open_pattern", &scope)?;
    let close = anchor(obj, "close", "close_pattern", &scope)?;
    let join = match obj.get("join") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(format!("{scope}: 'join' must be a string")),
    };
    let repeats = obj.get("repeats").and_then(Value::as_bool).unwrap_or(false);
    if join.is_some() && !repeats {
        return Err(format!("{scope}: 'join' requires 'repeats': true"));
    }
    let transform = obj.get("transform").filter(|t| !t.is_null()).cloned();
    let transform_each = match obj.get("transform_each") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(format!("{scope}: transform_each must be a bool")),
    };
    if transform_each && transform.is_none() {
        return Err(format!(
            "{scope}: transform_each is set but no transform was provided"
        ));
    }
    match &transform {
        Some(t) => check_transform(t).map_err(|e| format!("{scope}: {e}"))?,
        None => {
            let named: Vec<String> = open
                .iter()
                .chain(close.iter())
                .flat_map(Delim::group_names)
                .collect();
            if !named.is_empty() {
                return Err(format!(
                    "{scope}: named groups {named:?} but no 'transform' to use them"
                ));
            }
        }
    }
    let plain = matches!(content, Content::Text { .. }) && transform.is_none() && join.is_none();
    if (name == THINKING || name == CONTENT) && !plain {
        return Err(format!(
            "{scope} uses semantics that cannot be streamed (only plain text)"
        ));
    }
    Ok(Field {
        name: name.to_string(),
        open,
        close,
        close_literals: literals(obj.get("close")),
        content,
        join,
        transform,
        transform_each,
    })
}
