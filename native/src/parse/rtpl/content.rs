//! The content parsers of a response_template field (`text`, `int`, `float`, `bool`, `json`,
//! `xml-inline`, `kv-lines`), its `transform`, schema coercion of tool-call arguments and the
//! `json.dumps` text of the result: what vLLM 0.33's `chat_parsing/content_parsers.py` and
//! `response_parser.py` compute, in Python's value semantics (`str.strip`, `int()`, `float()`,
//! float `repr`).

use serde_json::{Map, Number, Value};

use super::delim::Delim;
use crate::parse::json::push_json_string;

/// A field's content parser with its arguments, compiled.
pub(crate) enum Content {
    Text {
        strip: bool,
    },
    Int {
        strip: bool,
    },
    Float {
        strip: bool,
    },
    Bool {
        strip: bool,
    },
    Json(JsonArgs),
    XmlInline {
        tag: Box<Delim>,
        value: Option<Box<Content>>,
        merge: bool,
    },
    KvLines {
        line_sep: String,
        kv_sep: String,
        strip: bool,
        value: Option<Box<Content>>,
    },
}

/// The `json` parser's dialect options.
pub(crate) struct JsonArgs {
    strip: bool,
    unquoted_keys: bool,
    string_delims: Vec<(String, String)>,
    allow_non_json: bool,
}

fn arg_bool(args: &Map<String, Value>, key: &str, default: bool) -> bool {
    args.get(key).and_then(Value::as_bool).unwrap_or(default)
}

fn arg_str(args: &Map<String, Value>, key: &str, default: &str) -> String {
    args.get(key)
        .and_then(Value::as_str)
        .unwrap_or(default)
        .to_string()
}

impl Content {
    /// Compiles parser `name` with `args` (a field's `content` / `content_args`, or a
    /// `value_parser`'s `name` / `args`).
    pub(crate) fn new(name: &str, args: &Map<String, Value>) -> Result<Content, String> {
        let strip = arg_bool(args, "strip", true);
        Ok(match name {
            "text" => Content::Text { strip },
            "int" => Content::Int { strip },
            "float" => Content::Float { strip },
            "bool" => Content::Bool { strip },
            "json" => Content::Json(JsonArgs {
                strip,
                unquoted_keys: arg_bool(args, "unquoted_keys", false),
                string_delims: string_delims(args)?,
                allow_non_json: arg_bool(args, "allow_non_json", false),
            }),
            "xml-inline" => {
                let pattern = args.get("tag_pattern").and_then(Value::as_str);
                let pattern = pattern.ok_or("xml-inline: 'tag_pattern' content_arg is required")?;
                let tag =
                    Delim::new(pattern).map_err(|e| format!("xml-inline tag_pattern: {e}"))?;
                if !tag.group_names().iter().any(|n| n == "key") {
                    return Err(format!(
                        "xml-inline: tag_pattern must have a named group 'key': {pattern}"
                    ));
                }
                Content::XmlInline {
                    tag: Box::new(tag),
                    value: value_parser(args)?,
                    merge: arg_bool(args, "merge_duplicates", false),
                }
            }
            "kv-lines" => Content::KvLines {
                line_sep: arg_str(args, "line_sep", "\n"),
                kv_sep: arg_str(args, "kv_sep", ":"),
                strip,
                value: value_parser(args)?,
            },
            other => return Err(format!("unknown content parser {other:?}")),
        })
    }

    /// Parses a region's text.
    pub(crate) fn parse(&self, text: &str) -> Result<Value, String> {
        match self {
            Content::Text { strip } => Ok(Value::String(maybe_strip(text, *strip).to_string())),
            Content::Int { strip } => py_int(maybe_strip(text, *strip)).map(Value::from),
            Content::Float { strip } => py_float(maybe_strip(text, *strip)).and_then(float_value),
            Content::Bool { strip } => {
                let t = maybe_strip(text, *strip).to_lowercase();
                Ok(Value::Bool(t == "true" || t == "1"))
            }
            Content::Json(args) => parse_json(text, args),
            Content::XmlInline { tag, value, merge } => {
                xml_inline(text, tag, value.as_deref(), *merge)
            }
            Content::KvLines {
                line_sep,
                kv_sep,
                strip,
                value,
            } => kv_lines(text, line_sep, kv_sep, *strip, value.as_deref()),
        }
    }
}

fn string_delims(args: &Map<String, Value>) -> Result<Vec<(String, String)>, String> {
    let Some(list) = args.get("string_delims") else {
        return Ok(Vec::new());
    };
    let pairs = list
        .as_array()
        .ok_or("json: string_delims must be a list of [open, close]")?;
    pairs
        .iter()
        .map(|p| match p.as_array().map(Vec::as_slice) {
            Some([Value::String(o), Value::String(c)]) => Ok((o.clone(), c.clone())),
            _ => Err("json: string_delims must be a list of [open, close] strings".to_string()),
        })
        .collect()
}

fn value_parser(args: &Map<String, Value>) -> Result<Option<Box<Content>>, String> {
    let Some(spec) = args.get("value_parser") else {
        return Ok(None);
    };
    let spec = spec.as_object().ok_or("value_parser must be an object")?;
    let name = spec.get("name").and_then(Value::as_str).unwrap_or("text");
    let empty = Map::new();
    let sub = spec
        .get("args")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    Content::new(name, sub).map(|c| Some(Box::new(c)))
}

/// Python's `str.isspace`.
pub(crate) fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

fn maybe_strip(text: &str, strip: bool) -> &str {
    if strip {
        text.trim_matches(py_space)
    } else {
        text
    }
}

/// Digits with single underscores between them, as Python's `int()` and `float()` take them.
fn without_underscores(s: &str) -> Option<String> {
    let b = s.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if c == b'_' {
            let ok =
                i > 0 && i + 1 < b.len() && b[i - 1].is_ascii_digit() && b[i + 1].is_ascii_digit();
            if !ok {
                return None;
            }
        }
    }
    Some(s.replace('_', ""))
}

/// Python's `int(text)` (base 10, within 64 bits).
pub(crate) fn py_int(text: &str) -> Result<i64, String> {
    let t = text.trim_matches(py_space);
    let bad = || format!("invalid literal for int() with base 10: {text:?}");
    let plain = without_underscores(t).ok_or_else(bad)?;
    let digits = plain.strip_prefix(['+', '-']).unwrap_or(&plain);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    plain
        .trim_start_matches('+')
        .parse::<i64>()
        .map_err(|_| bad())
}

/// Python's `float(text)`.
pub(crate) fn py_float(text: &str) -> Result<f64, String> {
    let t = text.trim_matches(py_space);
    let bad = || format!("could not convert string to float: {text:?}");
    let lower = t.to_ascii_lowercase();
    let body = lower.strip_prefix(['+', '-']).unwrap_or(&lower);
    let negative = lower.starts_with('-');
    let special = match body {
        "inf" | "infinity" => Some(f64::INFINITY),
        "nan" => Some(f64::NAN),
        _ => None,
    };
    if let Some(v) = special {
        return Ok(if negative { -v } else { v });
    }
    let plain = without_underscores(t).ok_or_else(bad)?;
    let ok = plain
        .bytes()
        .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
        && plain.bytes().any(|b| b.is_ascii_digit());
    if !ok {
        return Err(bad());
    }
    plain.parse::<f64>().map_err(|_| bad())
}

fn float_value(f: f64) -> Result<Value, String> {
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| format!("{f} has no JSON value here (NaN and infinities are not supported)"))
}

const LAX_OPEN: char = '\u{1}';
const LAX_CLOSE: char = '\u{2}';

fn parse_json(text: &str, args: &JsonArgs) -> Result<Value, String> {
    if !args.string_delims.is_empty() && text.contains([LAX_OPEN, LAX_CLOSE]) {
        return Err("json: input contains reserved sentinel characters (\\x01/\\x02)".into());
    }
    let mut working = text.to_string();
    let mut captured: Vec<String> = Vec::new();
    for (open, close) in &args.string_delims {
        working = extract_delimited(&working, open, close, &mut captured);
    }
    if args.unquoted_keys {
        working = quote_bare_keys(&working);
    }
    for (i, s) in captured.iter().enumerate() {
        let mut lit = String::new();
        push_json_string(s, &mut lit);
        working = working.replace(&format!("{LAX_OPEN}{i}{LAX_CLOSE}"), &lit);
    }
    match serde_json::from_str::<Value>(&working) {
        Ok(v) => Ok(v),
        Err(_) if args.allow_non_json => {
            Ok(Value::String(maybe_strip(text, args.strip).to_string()))
        }
        Err(e) => Err(format!("json parser could not parse region as JSON: {e}")),
    }
}

/// `re.sub(escape(open) + "(.*?)" + escape(close), placeholder, text, flags=DOTALL)`.
fn extract_delimited(text: &str, open: &str, close: &str, captured: &mut Vec<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = (!open.is_empty()).then(|| rest.find(open)).flatten() {
        let after = &rest[at + open.len()..];
        let Some(end) = after.find(close) else { break };
        out.push_str(&rest[..at]);
        out.push(LAX_OPEN);
        out.push_str(&captured.len().to_string());
        out.push(LAX_CLOSE);
        captured.push(after[..end].to_string());
        rest = &after[end + close.len()..];
    }
    out.push_str(rest);
    out
}

/// `re.sub(r"(?<=[{,])(\w+):", r'"\1":', text)`.
fn quote_bare_keys(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut prev: Option<char> = None;
    let mut it = text.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        if matches!(prev, Some('{' | ',')) && is_word(c) {
            let word_end = text[i..]
                .find(|ch: char| !is_word(ch))
                .map_or(text.len(), |n| i + n);
            if text[word_end..].starts_with(':') {
                out.push('"');
                out.push_str(&text[i..word_end]);
                out.push_str("\":");
                while it.peek().is_some_and(|&(j, _)| j <= word_end) {
                    it.next();
                }
                prev = Some(':');
                continue;
            }
        }
        out.push(c);
        prev = Some(c);
    }
    out
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn sub_parse(raw: &str, value: Option<&Content>) -> Result<Value, String> {
    match value {
        None => Ok(Value::String(raw.to_string())),
        Some(parser) => parser.parse(raw),
    }
}

fn insert(out: &mut Map<String, Value>, key: String, value: Value, merge: bool) {
    match out.get_mut(&key) {
        Some(existing) if merge => {
            if !existing.is_array() {
                *existing = Value::Array(vec![existing.take()]);
            }
            existing.as_array_mut().expect("array").push(value);
        }
        _ => {
            out.insert(key, value);
        }
    }
}

fn xml_inline(
    text: &str,
    tag: &Delim,
    value: Option<&Content>,
    merge: bool,
) -> Result<Value, String> {
    let mut out = Map::new();
    for found in tag.find_all(text) {
        let get = |n: &str| {
            found
                .groups
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.clone())
        };
        let key = get("key").ok_or("xml-inline: tag_pattern must have a named group 'key'")?;
        let parsed = sub_parse(&get("value").unwrap_or_default(), value)?;
        insert(&mut out, key, parsed, merge);
    }
    Ok(Value::Object(out))
}

fn kv_lines(
    text: &str,
    line_sep: &str,
    kv_sep: &str,
    strip: bool,
    value: Option<&Content>,
) -> Result<Value, String> {
    let mut out = Map::new();
    if line_sep.is_empty() {
        return Err("kv-lines: empty separator".into());
    }
    for line in text.split(line_sep) {
        let line = maybe_strip(line, strip);
        let Some((k, v)) = line
            .split_once(kv_sep)
            .filter(|_| !line.is_empty() && !kv_sep.is_empty())
        else {
            continue;
        };
        let parsed = sub_parse(maybe_strip(v, strip), value)?;
        out.insert(maybe_strip(k, strip).to_string(), parsed);
    }
    Ok(Value::Object(out))
}

/// Checks a transform template: a string is a whole `{placeholder}` or plain text.
pub(crate) fn check_transform(t: &Value) -> Result<(), String> {
    match t {
        Value::Object(m) => m.values().try_for_each(check_transform),
        Value::Array(a) => a.iter().try_for_each(check_transform),
        Value::String(s) if placeholder(s).is_none() && s.contains('{') && has_placeholder(s) => {
            Err(format!(
                "transform string {s:?} mixes a {{placeholder}} with literal text"
            ))
        }
        _ => Ok(()),
    }
}

/// The dotted path of a whole-string placeholder `{a.b}` (`\w+(\.\w+)*`).
fn placeholder(s: &str) -> Option<&str> {
    let inner = s.strip_prefix('{')?.strip_suffix('}')?;
    let ok = !inner.is_empty()
        && inner
            .split('.')
            .all(|p| !p.is_empty() && p.chars().all(is_word));
    ok.then_some(inner)
}

fn has_placeholder(s: &str) -> bool {
    s.char_indices().filter(|&(_, c)| c == '{').any(|(i, _)| {
        s[i..]
            .find('}')
            .is_some_and(|j| placeholder(&s[i..=i + j]).is_some())
    })
}

/// Fills a transform template from `scope`.
pub(crate) fn apply_transform(t: &Value, scope: &Map<String, Value>) -> Result<Value, String> {
    Ok(match t {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                out.insert(k.clone(), apply_transform(v, scope)?);
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|v| apply_transform(v, scope))
                .collect::<Result<_, _>>()?,
        ),
        Value::String(s) => match placeholder(s) {
            Some(path) => lookup(path, scope)?,
            None => t.clone(),
        },
        other => other.clone(),
    })
}

fn lookup(path: &str, scope: &Map<String, Value>) -> Result<Value, String> {
    let mut parts = path.split('.');
    let root = parts.next().unwrap_or_default();
    let mut value = scope
        .get(root)
        .ok_or_else(|| format!("transform placeholder '{{{path}}}' is not defined"))?;
    for key in parts {
        let map = value
            .as_object()
            .ok_or_else(|| format!("transform placeholder '{{{path}}}' cannot index at '{key}'"))?;
        value = map
            .get(key)
            .ok_or_else(|| format!("transform placeholder '{{{path}}}' is missing key '{key}'"))?;
    }
    Ok(value.clone())
}

/// The JSON Schema types a property declares (`type`, a type list, `anyOf`/`oneOf`, `nullable`).
pub(crate) fn schema_types(schema: &Value) -> Vec<String> {
    let Some(obj) = schema.as_object() else {
        return Vec::new();
    };
    let mut types: Vec<String> = match obj.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(|t| t.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    for union in ["anyOf", "oneOf"] {
        for choice in obj
            .get(union)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            types.extend(schema_types(choice));
        }
    }
    if obj.get("nullable").is_some_and(truthy) && !types.iter().any(|t| t == "null") {
        types.push("null".into());
    }
    types
}

fn truthy(v: &Value) -> bool {
    !matches!(v, Value::Null | Value::Bool(false)) && v != &Value::from(0) && v != &Value::from("")
}

/// A string argument cast to the first of `types` it reads as (vLLM's `_coerce`); else itself.
pub(crate) fn coerce(raw: &str, types: &[String]) -> Value {
    for t in types {
        let cast = match t.as_str() {
            "integer" => py_int(raw).map(Value::from).ok().or_else(|| {
                py_float(raw)
                    .ok()
                    .filter(|f| f.is_finite() && f.fract() == 0.0 && f.abs() < 9.2e18)
                    .map(|f| Value::from(f as i64))
            }),
            "number" => py_float(raw).ok().filter(|f| f.is_finite()).and_then(|f| {
                if f.fract() == 0.0 && !raw.contains('.') && f.abs() < 9.2e18 {
                    Some(Value::from(f as i64))
                } else {
                    Number::from_f64(f).map(Value::Number)
                }
            }),
            "boolean" => match raw.trim_matches(py_space).to_lowercase().as_str() {
                "true" | "1" => Some(Value::Bool(true)),
                "false" | "0" => Some(Value::Bool(false)),
                _ => None,
            },
            "null" => matches!(raw.trim_matches(py_space), "null" | "None").then_some(Value::Null),
            "object" => serde_json::from_str::<Value>(raw)
                .ok()
                .filter(Value::is_object),
            "array" => serde_json::from_str::<Value>(raw)
                .ok()
                .filter(Value::is_array),
            _ => None,
        };
        if let Some(v) = cast {
            return v;
        }
    }
    Value::String(raw.to_string())
}

/// `json.dumps(value, ensure_ascii=False)`.
pub(crate) fn dumps(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => out.push_str(&i.to_string()),
            (_, Some(u), _) => out.push_str(&u.to_string()),
            (_, _, Some(f)) => out.push_str(&py_float_repr(f)),
            _ => out.push_str(&n.to_string()),
        },
        Value::String(s) => push_json_string(s, out),
        Value::Array(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                dumps(v, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, v)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                push_json_string(k, out);
                out.push_str(": ");
                dumps(v, out);
            }
            out.push('}');
        }
    }
}

/// Python's `repr(float)`: shortest round-trip digits, exponent form below 1e-4 and from 1e16.
pub(crate) fn py_float_repr(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').expect("exponent");
    let exp: i32 = exp.parse().expect("exponent digits");
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if f < 0.0 { "-" } else { "" };
    if !(-4..16).contains(&exp) {
        let (head, tail) = digits.split_at(1);
        let frac = if tail.is_empty() {
            String::new()
        } else {
            format!(".{tail}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{head}{frac}e{esign}{:02}", exp.abs());
    }
    let point = exp + 1; // digits before the decimal point
    let body = if point <= 0 {
        format!("0.{}{digits}", "0".repeat((-point) as usize))
    } else if (point as usize) >= digits.len() {
        format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
    } else {
        let (a, b) = digits.split_at(point as usize);
        format!("{a}.{b}")
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn float_repr_is_pythons() {
        for (f, s) in [
            (0.5, "0.5"),
            (100.0, "100.0"),
            (1e16, "1e+16"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (123456789.125, "123456789.125"),
            (-2.5, "-2.5"),
            (1e22, "1e+22"),
            (0.1 + 0.2, "0.30000000000000004"),
        ] {
            assert_eq!(py_float_repr(f), s);
        }
    }

    #[test]
    fn parsers_follow_python() {
        assert_eq!(py_int(" 1_000 ").unwrap(), 1000);
        assert!(py_int("1.0").is_err());
        assert_eq!(py_float("1e3").unwrap(), 1000.0);
        assert_eq!(coerce("1e3", &["number".into()]), json!(1000));
        assert_eq!(coerce("3.0", &["integer".into()]), json!(3));
        assert_eq!(coerce("x", &["integer".into()]), json!("x"));
        assert_eq!(
            quote_bare_keys("{a: 1,b_2: {c: 2}}"),
            r#"{"a": 1,"b_2": {"c": 2}}"#
        );
        let mut out = String::new();
        dumps(&json!({"a": [1, 2.0, "é\n"], "b": null}), &mut out);
        assert_eq!(out, r#"{"a": [1, 2.0, "é\n"], "b": null}"#);
    }

    /// Expected values: vLLM 0.33's `parse_content` on the same text and arguments.
    #[test]
    fn content_parsers_give_vllms_values() {
        let parse = |name: &str, args: Value, text: &str| {
            let mut out = String::new();
            let c = Content::new(name, args.as_object().unwrap()).unwrap();
            dumps(&c.parse(text).unwrap(), &mut out);
            out
        };
        let dialect = json!({"unquoted_keys": true, "string_delims": [["<<", ">>"]]});
        assert_eq!(
            parse("json", dialect, r#"{name:<<a "q">>,n:1.50,b:[1e2,-1]}"#),
            r#"{"name": "a \"q\"", "n": 1.5, "b": [100.0, -1]}"#
        );
        assert_eq!(
            parse("json", json!({"allow_non_json": true}), " not json "),
            r#""not json""#
        );
        assert_eq!(
            parse("kv-lines", json!({}), "a: 1\nb : x: y\n\nnoline"),
            r#"{"a": "1", "b": "x: y"}"#
        );
        let kv = json!({"line_sep": ";", "kv_sep": "=", "value_parser": {"name": "json"}});
        assert_eq!(parse("kv-lines", kv, "a=1;b=[2]"), r#"{"a": 1, "b": [2]}"#);
        let xml = json!({"tag_pattern": "<(?P<key>k|j)>(?P<value>[^<]*)</(?:k|j)>", "merge_duplicates": true});
        assert_eq!(
            parse("xml-inline", xml, "<k>1</k><k>2</k><j>x</j>"),
            r#"{"k": ["1", "2"], "j": "x"}"#
        );
    }

    #[test]
    fn transforms_fill_whole_placeholders() {
        let t = json!({"function": {"name": "{name}", "arguments": "{content.args}"}, "type": "function"});
        assert!(check_transform(&t).is_ok());
        assert!(check_transform(&json!("x{name}")).is_err());
        let scope = json!({"name": "f", "content": {"args": {"a": 1}}});
        let out = apply_transform(&t, scope.as_object().unwrap()).unwrap();
        assert_eq!(
            out,
            json!({"function": {"name": "f", "arguments": {"a": 1}}, "type": "function"})
        );
    }
}
