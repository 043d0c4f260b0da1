//! Python's spelling of values: `repr(float)` and `json.dumps`, as transformers' `tojson` filter
//! produces them.
//!
//! transformers replaces Jinja's `tojson` with `json.dumps(x, ensure_ascii=False, indent=indent,
//! separators=separators, sort_keys=sort_keys)`, so a tool schema in the prompt is spelled exactly
//! as Python spells it: `", "` and `": "` separators, floats as `repr` writes them (`1e-07`, `1.0`,
//! `1e+100`), non-ASCII kept, no HTML escaping. Every byte of that spelling reaches the token ids.

use std::fmt::Write;

use minijinja::value::{ObjectRepr, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// `repr(x)` of a Python float: the shortest digits that round-trip, in fixed notation when the
/// decimal exponent is in [-4, 16), in scientific notation (`1e-07`, `1.5e+16`) otherwise.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    // Rust's `{:e}` gives the same shortest round-trip digits Python uses, e.g. "1.5e16".
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci
        .split_once('e')
        .expect("LowerExp always writes an exponent");
    let exp: i32 = exp.parse().expect("LowerExp writes an integer exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if x.is_sign_negative() { "-" } else { "" };
    // Python's rule (float_repr_style 'short'): scientific when the decimal point would sit more
    // than 16 digits right of the first digit or more than 4 left of it.
    let point = exp + 1;
    if !(-3..=16).contains(&point) {
        let mut m = digits[..1].to_string();
        if digits.len() > 1 {
            m.push('.');
            m.push_str(&digits[1..]);
        }
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{m}e{esign}{:02}", exp.abs());
    }
    let n = digits.len() as i32;
    let body = if point <= 0 {
        format!("0.{}{digits}", "0".repeat((-point) as usize))
    } else if point >= n {
        format!("{digits}{}.0", "0".repeat((point - n) as usize))
    } else {
        format!(
            "{}.{}",
            &digits[..point as usize],
            &digits[point as usize..]
        )
    };
    format!("{sign}{body}")
}

/// `str(value)` where minijinja's own spelling differs from Python's: floats, and lists and dicts
/// (whose items minijinja writes with Rust's float spelling). Other values keep minijinja's
/// display, which already follows Python for `True`, `None` and strings.
pub fn py_str(value: &Value) -> String {
    if needs_python_str(value) {
        let mut out = String::new();
        py_repr(value, &mut out, 0);
        out
    } else {
        value.to_string()
    }
}

/// Whether [`py_str`] spells `value` differently from minijinja's display.
pub fn needs_python_str(value: &Value) -> bool {
    float_of(value).is_some() || matches!(value.kind(), ValueKind::Seq | ValueKind::Map)
}

/// Python's `repr`: strings and floats as Python writes them, containers item by item.
fn py_repr(value: &Value, out: &mut String, depth: usize) {
    if depth > MAX_DEPTH {
        out.push_str("...");
        return;
    }
    if let Some(x) = float_of(value) {
        out.push_str(&float_repr(x));
        return;
    }
    match value.kind() {
        ValueKind::Seq => {
            let tuple = value.is_tuple();
            out.push(if tuple { '(' } else { '[' });
            let items: Vec<Value> = value.try_iter().map(|it| it.collect()).unwrap_or_default();
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(item, out, depth + 1);
            }
            if tuple && items.len() == 1 {
                out.push(',');
            }
            out.push(if tuple { ')' } else { ']' });
        }
        ValueKind::Map if is_plain_map(value) => {
            // Jinja2's Namespace prints as `<Namespace {...}>` around its attributes.
            let namespace = !super::pydict::is_dict(value) && !value.is_kwargs();
            if namespace {
                out.push_str("<Namespace ");
            }
            out.push('{');
            for (i, key) in value.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(&key, out, depth + 1);
                out.push_str(": ");
                py_repr(&value.get_item(&key).unwrap_or_default(), out, depth + 1);
            }
            out.push('}');
            if namespace {
                out.push('>');
            }
        }
        // minijinja quotes strings as Python does but writes unprintable characters raw; Python
        // escapes them (`'\u200d'`), and Gemma 4 and Apriel print message lists with `{{ }}`.
        ValueKind::String => super::pystr::write_repr(value.as_str().unwrap_or_default(), out),
        _ => {
            let _ = write!(out, "{value:?}");
        }
    }
}

/// The float inside `value`, if it is a float (not an integer).
pub fn float_of(value: &Value) -> Option<f64> {
    if value.kind() == ValueKind::Number && !value.is_integer() {
        f64::try_from(value.clone()).ok()
    } else {
        None
    }
}

/// The arguments of `json.dumps` that transformers' `tojson` exposes.
#[derive(Debug, Clone, Default)]
pub struct DumpOptions {
    /// Escape non-ASCII characters as `\uXXXX`.
    pub ensure_ascii: bool,
    /// `indent`: None for one line, else the string put once per nesting level.
    pub indent: Option<String>,
    /// `(item_separator, key_separator)`; defaults depend on `indent`, as in Python.
    pub separators: Option<(String, String)>,
    /// Sort object keys.
    pub sort_keys: bool,
}

/// `json.dumps(value, **opts)`; values Python cannot serialize are errors with Python's message.
pub fn dumps(value: &Value, opts: &DumpOptions) -> Result<String, Error> {
    let (item_sep, key_sep) = match &opts.separators {
        Some((i, k)) => (i.as_str(), k.as_str()),
        None if opts.indent.is_some() => (",", ": "),
        None => (", ", ": "),
    };
    let mut w = Writer {
        out: String::new(),
        opts,
        item_sep,
        key_sep,
        limit: super::env::output_limit(),
    };
    w.value(value, 0)?;
    Ok(w.out)
}

struct Writer<'a> {
    out: String,
    opts: &'a DumpOptions,
    item_sep: &'a str,
    key_sep: &'a str,
    /// The render's output limit: a longer result could never be written.
    limit: usize,
}

/// Nesting deeper than this is refused (Python would hit its own recursion limit).
const MAX_DEPTH: usize = 512;

impl Writer<'_> {
    fn value(&mut self, value: &Value, depth: usize) -> Result<(), Error> {
        if depth > MAX_DEPTH {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: maximum recursion depth exceeded",
            ));
        }
        if self.out.len() > self.limit {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: the result passes the rendered prompt's output limit",
            )
            .with_source(super::env::OutputLimitReached));
        }
        match value.kind() {
            ValueKind::None => self.out.push_str("null"),
            ValueKind::Bool => self
                .out
                .push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => self.number(value),
            ValueKind::String => self.string(value.as_str().unwrap_or_default()),
            ValueKind::Seq => {
                let items: Vec<Value> = value.try_iter()?.collect();
                self.sequence(&items, depth)?;
            }
            ValueKind::Map if is_plain_map(value) => self.map(value, depth)?,
            _ => return Err(not_serializable(value)),
        }
        Ok(())
    }

    fn number(&mut self, value: &Value) {
        match float_of(value) {
            Some(x) if x.is_nan() => self.out.push_str("NaN"),
            Some(x) if x.is_infinite() => {
                self.out
                    .push_str(if x > 0.0 { "Infinity" } else { "-Infinity" })
            }
            Some(x) => self.out.push_str(&float_repr(x)),
            None => {
                let _ = write!(self.out, "{value}");
            }
        }
    }

    fn newline(&mut self, depth: usize) {
        if let Some(indent) = &self.opts.indent {
            self.out.push('\n');
            for _ in 0..depth {
                self.out.push_str(indent);
            }
        }
    }

    fn sequence(&mut self, items: &[Value], depth: usize) -> Result<(), Error> {
        if items.is_empty() {
            self.out.push_str("[]");
            return Ok(());
        }
        self.out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.out.push_str(self.item_sep);
            }
            self.newline(depth + 1);
            self.value(item, depth + 1)?;
        }
        self.newline(depth);
        self.out.push(']');
        Ok(())
    }

    fn map(&mut self, value: &Value, depth: usize) -> Result<(), Error> {
        let mut pairs: Vec<(String, Value)> = Vec::new();
        for key in value.try_iter()? {
            let item = value.get_item(&key)?;
            pairs.push((key_string(&key)?, item));
        }
        if pairs.is_empty() {
            self.out.push_str("{}");
            return Ok(());
        }
        if self.opts.sort_keys {
            // Python compares str keys by code point, which is UTF-8 byte order.
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
        }
        self.out.push('{');
        for (i, (key, item)) in pairs.iter().enumerate() {
            if i > 0 {
                self.out.push_str(self.item_sep);
            }
            self.newline(depth + 1);
            self.string(key);
            self.out.push_str(self.key_sep);
            self.value(item, depth + 1)?;
        }
        self.newline(depth);
        self.out.push('}');
        Ok(())
    }

    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                '\u{8}' => self.out.push_str("\\b"),
                '\u{c}' => self.out.push_str("\\f"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(self.out, "\\u{:04x}", c as u32);
                }
                // With ensure_ascii Python escapes everything outside ' '..='~', DEL included.
                c if self.opts.ensure_ascii && !(' '..='~').contains(&c) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        let _ = write!(self.out, "\\u{unit:04x}");
                    }
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }
}

/// Objects that behave as mappings. (A `namespace()` does too; Python would refuse it, we write
/// its attributes, which no real template relies on either way.)
fn is_plain_map(value: &Value) -> bool {
    value
        .as_object()
        .is_some_and(|obj| matches!(obj.repr(), ObjectRepr::Map))
}

/// Python's `json.dumps` turns str, int, float, bool and None keys into strings; others fail.
fn key_string(key: &Value) -> Result<String, Error> {
    Ok(match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_string(),
        ValueKind::None => "null".into(),
        ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).into(),
        ValueKind::Number => match float_of(key) {
            Some(x) if x.is_nan() => "NaN".into(),
            Some(x) if x.is_infinite() => (if x > 0.0 { "Infinity" } else { "-Infinity" }).into(),
            Some(x) => float_repr(x),
            None => key.to_string(),
        },
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!(
                    "tojson: keys must be str, int, float, bool or None, not {}",
                    key.kind()
                ),
            ))
        }
    })
}

fn not_serializable(value: &Value) -> Error {
    let type_name = match value.kind() {
        ValueKind::Undefined => "Undefined".to_string(),
        other => other.to_string(),
    };
    Error::new(
        ErrorKind::InvalidOperation,
        format!("tojson: Object of type {type_name} is not JSON serializable"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        // Expected values are what CPython's repr() prints (language facts, not our output).
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (1e-7, "1e-07"),
            (1e100, "1e+100"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5, "-2.5"),
            (-0.0, "-0.0"),
            (0.3, "0.3"),
            (2.675, "2.675"),
            (1.5e-10, "1.5e-10"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
        ];
        for (x, want) in cases {
            assert_eq!(float_repr(x), want, "{x}");
        }
    }

    #[test]
    fn dumps_spelling() {
        let v = crate::template::to_value(
            crate::template::json::parse(r#"{"b": [1, 2.0, null, true], "a": "é\"<\n"}"#, "test")
                .unwrap(),
        );
        assert_eq!(
            dumps(&v, &DumpOptions::default()).unwrap(),
            r#"{"b": [1, 2.0, null, true], "a": "é\"<\n"}"#
        );
        let ascii = DumpOptions {
            ensure_ascii: true,
            sort_keys: true,
            ..Default::default()
        };
        assert_eq!(
            dumps(&v, &ascii).unwrap(),
            r#"{"a": "\u00e9\"<\n", "b": [1, 2.0, null, true]}"#
        );
        let indented = DumpOptions {
            indent: Some("  ".into()),
            ..Default::default()
        };
        assert_eq!(
            dumps(
                &crate::template::to_value(
                    crate::template::json::parse(r#"{"k": [], "m": {}, "l": [1]}"#, "test")
                        .unwrap()
                ),
                &indented
            )
            .unwrap(),
            "{\n  \"k\": [],\n  \"m\": {},\n  \"l\": [\n    1\n  ]\n}"
        );
        assert!(dumps(&Value::UNDEFINED, &DumpOptions::default())
            .unwrap_err()
            .to_string()
            .contains("Undefined"));
    }
}
