//! A closed region's value (content parser, transform, schema coercion) and the tool calls a
//! `tool_calls` value holds, as vLLM's `process_field`, `_coerce_tool_calls` and `_to_tool_calls`.

use serde_json::{Map, Value};

use super::content::{apply_transform, coerce, dumps, schema_types};
use super::spec::Field;
use crate::parse::schema::Tools;

/// The value of a region of `field` whose text is `body`, opened with `captures`.
pub(crate) fn region_value(
    field: &Field,
    body: &str,
    captures: &[(String, String)],
    tools: &Tools,
) -> Result<Value, String> {
    let parsed = field.content.parse(body)?;
    let scope_of = |extra: Map<String, Value>| {
        let mut scope: Map<String, Value> = captures
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        scope.extend(extra);
        scope
    };
    let mut value = match (&field.transform, field.transform_each) {
        (None, _) => parsed,
        (Some(t), true) => {
            let items = parsed
                .as_array()
                .ok_or("transform_each requires the parsed content to be a list")?;
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                let item = item
                    .as_object()
                    .ok_or("transform_each requires each list element to be an object")?;
                out.push(apply_transform(t, &scope_of(item.clone()))?);
            }
            Value::Array(out)
        }
        (Some(t), false) => {
            let mut content = Map::new();
            content.insert("content".into(), parsed);
            apply_transform(t, &scope_of(content))?
        }
    };
    coerce_calls(&mut value, tools);
    if field.join.is_some() && !value.is_string() {
        return Err("'join' requires each match to parse to a string".into());
    }
    Ok(value)
}

/// Casts string arguments of calls to declared tools to their schema types.
fn coerce_calls(value: &mut Value, tools: &Tools) {
    if let Value::Array(items) = value {
        items.iter_mut().for_each(|v| coerce_calls(v, tools));
        return;
    }
    let Some(function) = value.get_mut("function").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(name) = function
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return;
    };
    let Some(properties) = tools.properties(&name).and_then(Value::as_object) else {
        return;
    };
    let Some(arguments) = function.get_mut("arguments").and_then(Value::as_object_mut) else {
        return;
    };
    for (key, argument) in arguments.iter_mut() {
        let types = properties.get(key).map(schema_types).unwrap_or_default();
        if types.is_empty() {
            continue;
        }
        match argument {
            Value::String(s) => *argument = coerce(s, &types),
            Value::Array(list) if !types.iter().any(|t| t == "array") => {
                for item in list.iter_mut() {
                    if let Value::String(s) = item {
                        *item = coerce(s, &types);
                    }
                }
            }
            _ => {}
        }
    }
}

/// `(name, arguments JSON)` of every call in a `tool_calls` value, or nothing when any is not a
/// call (no `function` object, no name, no arguments).
pub(crate) fn tool_calls(value: &Value) -> Vec<(String, String)> {
    let items: Vec<&Value> = match value {
        Value::Array(a) => a.iter().collect(),
        other => vec![other],
    };
    let mut calls = Vec::with_capacity(items.len());
    for item in items {
        let Some(function) = item.get("function").and_then(Value::as_object) else {
            return Vec::new();
        };
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty());
        let arguments = function.get("arguments").filter(|a| !a.is_null());
        let (Some(name), Some(arguments)) = (name, arguments) else {
            return Vec::new();
        };
        let text = match arguments {
            Value::String(s) => s.clone(),
            other => {
                let mut s = String::new();
                dumps(other, &mut s);
                s
            }
        };
        calls.push((name.to_string(), text));
    }
    calls
}
