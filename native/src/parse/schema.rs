//! The request's tools, as far as parsers need them: each function's parameter types, used to
//! turn the raw text values of XML-style formats (`qwen3_coder`, GLM, MiniMax) into typed JSON.
//!
//! Conversion, given the parameter's allowed types, tries in this order: `null` (the text
//! `null` in any case, no whitespace around it), integer (what Python's `int()` reads), number
//! (what Python's `float()` reads, when finite: written as an integer when integral, else as
//! Python writes the float), boolean (`true`/`false` in any case, `1`/`0`), object and array (JSON
//! text of that kind), string; when none applies the value stays a string. A parameter without a
//! known type is a string. A failed conversion never drops the call. This is vLLM's
//! `coerce_to_schema_type`, which its `qwen3_coder`, `glm47` and `minimax_m2` parsers share, except
//! that vLLM's last resort (`json.loads` of a value no declared type took) is not taken.
//! [`retype_json`] retypes a JSON value by a property schema (vLLM's DSML typing).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::parse::json::{canonical, push_json_string, valid_number};
use crate::parse::rtpl::content::dumps;
use crate::template::pyjson::float_repr;
use crate::template::pynum::{ascii_number, parse_float, without_underscores};

/// A set of JSON-schema types.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TypeSet(u8);

impl TypeSet {
    const NULL: u8 = 1;
    const INTEGER: u8 = 2;
    const NUMBER: u8 = 4;
    const BOOLEAN: u8 = 8;
    const OBJECT: u8 = 16;
    const ARRAY: u8 = 32;
    const STRING: u8 = 64;
    /// Any JSON value written as JSON text (DSML `string="false"`), else the raw string.
    const JSON: u8 = 128;

    /// Plain strings.
    pub(crate) fn string() -> TypeSet {
        TypeSet(Self::STRING)
    }

    /// Any JSON value.
    pub(crate) fn json() -> TypeSet {
        TypeSet(Self::JSON)
    }

    /// The types one written type name means (`integer`, `str`, `list`, ...; none when unknown).
    pub(crate) fn named(name: &str) -> TypeSet {
        let mut set = TypeSet::default();
        set.add_name(name);
        set
    }

    fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }

    /// These types when they are exactly one scalar type (null, integer, number or boolean),
    /// else plain strings (Step-3 types only such values).
    pub(crate) fn single_scalar(self) -> TypeSet {
        match self.0 {
            Self::NULL | Self::INTEGER | Self::NUMBER | Self::BOOLEAN => self,
            _ => TypeSet::string(),
        }
    }

    /// Whether a string is among the types (as it is when none is known).
    pub(crate) fn allows_string(self) -> bool {
        self.0 == 0 || self.has(Self::STRING)
    }

    /// Whether values are plain strings (streamable as they arrive).
    pub(crate) fn is_string(self) -> bool {
        self.0 == 0 || self.0 == Self::STRING
    }

    fn add_name(&mut self, name: &str) {
        self.0 |= match name.to_ascii_lowercase().as_str() {
            "null" | "none" => Self::NULL,
            "integer" | "int" => Self::INTEGER,
            "number" | "float" | "double" => Self::NUMBER,
            "boolean" | "bool" => Self::BOOLEAN,
            "object" | "dict" => Self::OBJECT,
            "array" | "list" | "tuple" => Self::ARRAY,
            "string" | "str" | "text" => Self::STRING,
            _ => 0,
        };
    }

    /// The types a property schema allows (`type`, `anyOf`/`oneOf` members, `nullable`).
    pub(crate) fn of_schema(schema: &Value) -> TypeSet {
        let mut set = TypeSet::default();
        match schema.get("type") {
            Some(Value::String(t)) => set.add_name(t),
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .for_each(|t| set.add_name(t)),
            _ => {}
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(members)) = schema.get(key) {
                for m in members {
                    set.0 |= TypeSet::of_schema(m).0;
                }
            }
        }
        if schema.get("nullable") == Some(&Value::Bool(true)) {
            set.0 |= Self::NULL;
        }
        set
    }
}

/// Parameter types per function name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tools {
    functions: HashMap<String, HashMap<String, TypeSet>>,
    /// Each function's `parameters.properties` schema, for formats with nested values.
    properties: Arc<HashMap<String, Value>>,
    /// `tools_json` is a non-empty array.
    declared: bool,
}

impl Tools {
    /// Reads `tools_json` (a JSON array of OpenAI tools; empty = none).
    pub(crate) fn parse(tools_json: &str) -> Result<Tools> {
        if tools_json.trim().is_empty() {
            return Ok(Tools::default());
        }
        let value: Value = serde_json::from_str(tools_json)
            .map_err(|e| Error::invalid_argument(format!("tools_json: not valid JSON: {e}")))?;
        let Value::Array(items) = value else {
            return Err(Error::invalid_argument(
                "tools_json: expected a JSON array of tools",
            ));
        };
        let mut functions = HashMap::new();
        let mut properties = HashMap::new();
        for item in &items {
            let function = item.get("function").unwrap_or(item);
            let Some(name) = function.get("name").and_then(Value::as_str) else {
                continue;
            };
            let mut params = HashMap::new();
            if let Some(props @ Value::Object(map)) = function.pointer("/parameters/properties") {
                for (key, schema) in map {
                    params.insert(key.clone(), TypeSet::of_schema(schema));
                }
                properties.insert(name.to_string(), props.clone());
            }
            functions.insert(name.to_string(), params);
        }
        Ok(Tools {
            functions,
            properties: Arc::new(properties),
            declared: !items.is_empty(),
        })
    }

    /// Whether the request declared any tool (`tools_json` a non-empty array).
    pub(crate) fn declared(&self) -> bool {
        self.declared
    }

    /// Whether the request declared `function`.
    pub(crate) fn declares(&self, function: &str) -> bool {
        self.functions.contains_key(function)
    }

    /// `function`'s `parameters.properties` schema object, when the request declared one.
    pub(crate) fn properties(&self, function: &str) -> Option<&Value> {
        self.properties.get(function)
    }

    /// The types of `function`'s parameter `param` (empty when unknown).
    pub(crate) fn param_types(&self, function: &str, param: &str) -> TypeSet {
        self.functions
            .get(function)
            .and_then(|p| p.get(param))
            .copied()
            .unwrap_or_default()
    }
}

/// Canonical JSON for the raw text `value` of a parameter allowing `types` (see the module docs).
pub(crate) fn coerce(value: &str, types: TypeSet) -> String {
    convert(value, types).unwrap_or_else(|| {
        let mut out = String::with_capacity(value.len() + 2);
        push_json_string(value, &mut out);
        out
    })
}

/// [`coerce`], `None` where it falls back to the string though `types` do not allow one.
fn convert(value: &str, types: TypeSet) -> Option<String> {
    let t = value.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r'));
    if types.has(TypeSet::JSON) {
        if let Some(c) = canonical(t) {
            return Some(c);
        }
    } else if !types.is_string() {
        // vLLM compares the value as the format gives it (no whitespace trimmed), in any case.
        if types.has(TypeSet::NULL) && value.eq_ignore_ascii_case("null") {
            return Some("null".into());
        }
        if types.has(TypeSet::INTEGER) {
            if let Some(i) = integer(value) {
                return Some(i);
            }
        }
        if types.has(TypeSet::NUMBER) {
            if let Some(n) = python_number(value) {
                return Some(n);
            }
        }
        if types.has(TypeSet::BOOLEAN) {
            // vLLM: `value.lower().strip()`, and `str.strip()` is Python's whitespace.
            match value.trim_matches(py_space).to_ascii_lowercase().as_str() {
                "true" | "1" => return Some("true".into()),
                "false" | "0" => return Some("false".into()),
                _ => {}
            }
        }
        if types.has(TypeSet::OBJECT) || types.has(TypeSet::ARRAY) {
            if let Some(c) = canonical(t) {
                let kind_ok = (c.starts_with('{') && types.has(TypeSet::OBJECT))
                    || (c.starts_with('[') && types.has(TypeSet::ARRAY));
                if kind_ok {
                    return Some(c);
                }
            }
        }
    }
    types.allows_string().then(|| {
        let mut out = String::with_capacity(value.len() + 2);
        push_json_string(value, &mut out);
        out
    })
}

/// A JSON value (canonical text) retyped by its property `schema` as vLLM's `_coerce_value`
/// (`parser_engine.py`, DSML's typing) does: a string is converted as a raw value is (see
/// [`coerce`]); an object's members by the schema's `properties`, an array's items by its
/// `items` (without them they stay as they are); a number, boolean or null by its Python
/// `json.dumps` text, kept when no allowed type takes that text (`true` for an integer stays
/// `true`; for a string it becomes `"true"`).
pub(crate) fn retype_json(text: &str, schema: &Value) -> String {
    let types = TypeSet::of_schema(schema);
    match text.as_bytes().first() {
        Some(b'"') => match serde_json::from_str::<String>(text) {
            Ok(s) => coerce(&s, types),
            Err(_) => text.to_string(),
        },
        Some(b'{' | b'[') => match serde_json::from_str::<Value>(text) {
            Ok(mut value) => {
                retype_value(&mut value, schema);
                let mut out = String::with_capacity(text.len());
                dumps(&value, &mut out);
                out
            }
            Err(_) => text.to_string(),
        },
        _ => python_scalar(text)
            .and_then(|dumped| convert(&dumped, types))
            .unwrap_or_else(|| text.to_string()),
    }
}

/// [`retype_json`] on a parsed value (members and items of an object or array).
fn retype_value(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(members) => {
            if let Some(Value::Object(props)) = schema.get("properties") {
                for (key, member) in members.iter_mut() {
                    if let Some(p @ Value::Object(_)) = props.get(key) {
                        retype_value(member, p);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(p @ Value::Object(_)) = schema.get("items") {
                items.iter_mut().for_each(|item| retype_value(item, p));
            }
        }
        Value::String(s) => {
            let typed = coerce(s, TypeSet::of_schema(schema));
            if let Ok(v) = serde_json::from_str(&typed) {
                *value = v;
            }
        }
        _ => {
            let mut dumped = String::new();
            dumps(value, &mut dumped);
            let typed = convert(&dumped, TypeSet::of_schema(schema));
            if let Some(v) = typed.and_then(|t| serde_json::from_str(&t).ok()) {
                *value = v;
            }
        }
    }
}

/// Python's `json.dumps(json.loads(text))` of a JSON number or literal: integers as integers
/// (`-0` is `0`), other numbers as Python writes the float; `None` for one that is not finite.
fn python_scalar(text: &str) -> Option<String> {
    if matches!(text, "true" | "false" | "null") {
        return Some(text.to_string());
    }
    if !text.contains(['.', 'e', 'E']) {
        let digits = text.strip_prefix('-').unwrap_or(text);
        return Some(if digits.bytes().all(|b| b == b'0') {
            "0".to_string()
        } else {
            text.to_string()
        });
    }
    let f: f64 = text.parse().ok().filter(|f: &f64| f.is_finite())?;
    Some(float_repr(f))
}

/// Python's `str.isspace`, which `str.strip()` removes.
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `int(value)` as JSON: whitespace around, a sign, `_` between digits, digits of any script, any
/// length (Python's integers have no bound, so the digits are kept as text).
fn integer(value: &str) -> Option<String> {
    let t = ascii_number(value);
    let (negative, digits) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t.as_str()),
    };
    let digits = without_underscores(digits, |b| b.is_ascii_digit())?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let trimmed = digits.trim_start_matches('0');
    Some(match (trimmed.is_empty(), negative) {
        (true, _) => "0".to_string(),
        (false, true) => format!("-{trimmed}"),
        (false, false) => trimmed.to_string(),
    })
}

/// A number literal as JSON (a leading `+`, a bare `.5` or `1.` allowed), or `None`.
pub(crate) fn coerce_number(t: &str) -> Option<String> {
    number(t)
}

/// `float(value)` as vLLM writes it, or `None` when Python cannot read it or the result is not
/// finite (JSON has no infinity or NaN). An integral value is written as `int(value)` would be:
/// every digit of the double (`1e22` is `10000000000000000000000`), `-0.0` as `0`; any other as
/// `repr(float)` (`0.001`, `1e-05`).
fn python_number(value: &str) -> Option<String> {
    let f = parse_float(value).filter(|f| f.is_finite())?;
    Some(if f == 0.0 {
        "0".to_string()
    } else if f.fract() == 0.0 {
        // Fixed notation with no fraction digits prints a double's exact value.
        format!("{f:.0}")
    } else {
        float_repr(f)
    })
}

fn number(t: &str) -> Option<String> {
    let t = t.strip_prefix('+').unwrap_or(t);
    let (sign, body) = match t.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", t),
    };
    let mut body = body.to_string();
    if body.starts_with('.') {
        body.insert(0, '0');
    }
    if let Some(dot) = body.find('.') {
        let after = &body[dot + 1..];
        if after.is_empty() || after.starts_with(['e', 'E']) {
            body.insert(dot + 1, '0');
        }
    }
    let candidate = format!("{sign}{body}");
    valid_number(&candidate).then_some(candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(names: &[&str]) -> TypeSet {
        let mut t = TypeSet::default();
        names.iter().for_each(|n| t.add_name(n));
        t
    }

    #[test]
    fn coerces_by_declared_type() {
        assert_eq!(coerce("03106", types(&["string"])), "\"03106\"");
        assert_eq!(coerce("03106", types(&["integer"])), "3106");
        assert_eq!(coerce(" 5 ", types(&["number"])), "5");
        assert_eq!(coerce("1.", types(&["number"])), "1");
        assert_eq!(coerce(".5", types(&["float"])), "0.5");
        assert_eq!(coerce("140.0", types(&["integer"])), "\"140.0\"");
        assert_eq!(coerce("True", types(&["boolean"])), "true");
        assert_eq!(coerce("null", types(&["string", "null"])), "null");
        assert_eq!(coerce("nil", types(&["string", "null"])), "\"nil\"");
        assert_eq!(coerce("[1,2]", types(&["array"])), "[1, 2]");
        assert_eq!(coerce("{\"a\":1}", types(&["array"])), "\"{\\\"a\\\":1}\"");
        assert_eq!(coerce("inf", types(&["number"])), "\"inf\"");
        assert_eq!(coerce("x\ny", TypeSet::default()), "\"x\\ny\"");
    }

    /// Expected texts: `json.dumps` of vLLM's `coerce_to_schema_type(value, [type])` (Python 3.12:
    /// `int(v)`; `float(v)`, kept as the string when not finite, `int(f)` when integral).
    #[test]
    fn numbers_and_integers_are_read_as_python_reads_them() {
        let cases = [
            ("number", "03106", "3106"),
            ("number", "00.5", "0.5"),
            ("number", "1e400", "\"1e400\""),
            ("number", "-1e999", "\"-1e999\""),
            ("number", "1_000", "1000"),
            ("number", "1e5", "100000"),
            ("number", "1E-5", "1e-05"),
            ("number", "0.1", "0.1"),
            ("number", "2.50", "2.5"),
            ("number", "+.5", "0.5"),
            ("number", "-0", "0"),
            ("number", "-0.0", "0"),
            ("number", "-2.0", "-2"),
            ("number", "1e22", "10000000000000000000000"),
            ("number", "1e300", "1000000000000000052504760255204420248704468581108159154915854115511802457988908195786371375080447864043704443832883878176942523235360430575644792184786706982848387200926575803737830233794788090059368953234970799945081119038967640880074652742780142494579258788820056842838115669472196386865459400540160"),
            ("number", "123456789012345678", "123456789012345680"),
            ("number", "1e-400", "0"),
            ("number", "\u{a0}7\u{3000}", "7"),
            ("number", "\u{663}.\u{665}", "3.5"),
            ("number", "inf", "\"inf\""),
            ("number", "-Infinity", "\"-Infinity\""),
            ("number", "nan", "\"nan\""),
            ("number", "1__0", "\"1__0\""),
            ("number", "_1", "\"_1\""),
            ("number", "0x10", "\"0x10\""),
            ("number", "1\u{1c}", "\"1\\u001c\""),
            ("integer", "1_000", "1000"),
            ("integer", " +7 ", "7"),
            ("integer", "-007", "-7"),
            ("integer", "\u{663}\u{661}", "31"),
            ("integer", "123456789012345678901234567890", "123456789012345678901234567890"),
            ("integer", "1_", "\"1_\""),
            ("integer", "1.0", "\"1.0\""),
        ];
        for (ty, value, want) in cases {
            assert_eq!(coerce(value, types(&[ty])), want, "{ty} {value:?}");
        }
        assert_eq!(coerce(" TRUE\u{1c}", types(&["boolean"])), "true");
    }

    /// Expected texts: `json.dumps` of what vLLM 0.33's `ParserEngine._coerce_value`
    /// (`vllm/parser/engine/parser_engine.py`) makes of `json.loads(text)` under the schema.
    #[test]
    fn json_values_are_retyped_as_vllm_retypes_dsml_values() {
        let schema = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        let cases = [
            (r#""7""#, r#"{"type": ["integer", "null"]}"#, "7"),
            (r#""True""#, r#"{"type": "boolean"}"#, "true"),
            (
                r#"" 42 ""#,
                r#"{"anyOf": [{"type": "integer"}, {"type": "null"}]}"#,
                "42",
            ),
            (r#""1_000.5""#, r#"{"type": "number"}"#, "1000.5"),
            (r#""null""#, r#"{"type": ["integer", "null"]}"#, "null"),
            (r#""x""#, r#"{"type": "integer"}"#, r#""x""#),
            ("7", r#"{"type": "string"}"#, r#""7""#),
            ("7", "{}", r#""7""#),
            ("1e2", r#"{"type": "string"}"#, r#""100.0""#),
            ("1.0", r#"{"type": "number"}"#, "1"),
            ("-0", r#"{"type": "string"}"#, r#""0""#),
            ("true", r#"{"type": "integer"}"#, "true"),
            ("null", r#"{"type": "integer"}"#, "null"),
            ("1", r#"{"type": "boolean"}"#, "true"),
            (
                "123456789012345678901234567890",
                r#"{"type": "integer"}"#,
                "123456789012345678901234567890",
            ),
            (
                r#"{"a": "5", "b": "5"}"#,
                r#"{"type": "object", "properties": {"a": {"type": "integer"}}}"#,
                r#"{"a": 5, "b": "5"}"#,
            ),
            (r#"{"a": "5"}"#, r#"{"type": "object"}"#, r#"{"a": "5"}"#),
            (
                r#"["1", 2, true]"#,
                r#"{"type": "array", "items": {"type": "integer"}}"#,
                "[1, 2, true]",
            ),
            (r#"["1"]"#, r#"{"type": "string"}"#, r#"["1"]"#),
            (
                r#"[{"n": 1.5}]"#,
                r#"{"items": {"properties": {"n": {"type": "string"}}}}"#,
                r#"[{"n": "1.5"}]"#,
            ),
        ];
        for (text, s, want) in cases {
            assert_eq!(retype_json(text, &schema(s)), want, "{text} {s}");
        }
    }

    #[test]
    fn tools_are_declared_by_a_non_empty_array() {
        assert!(!Tools::parse("").unwrap().declared());
        assert!(!Tools::parse(" [ ] ").unwrap().declared());
        assert!(
            Tools::parse(r#"[{"type": "function", "function": {"name": "f"}}]"#)
                .unwrap()
                .declared()
        );
    }
}
