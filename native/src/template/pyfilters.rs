//! Jinja2 filters whose minijinja versions answer differently: `trim` and `wordcount` (Python's
//! whitespace and `\w`), `dictsort` and `sort` (Jinja2 compares `str.lower()` values, minijinja
//! Unicode case folding, so `ß` sorts as `ss`), and `escape` (markupsafe writes `&#39;` and
//! `&#34;`, minijinja `&#x27;` and `&quot;`, and escapes `/` too), and `format` (Python's `%`,
//! see `pyformat`).

use std::cmp::Ordering;

use minijinja::value::{from_args, Kwargs, Rest, ValueKind, ValueOrKwargs};
use minijinja::{Error, ErrorKind, State, Value};

use super::pyformat::{self, Operand};
use super::{pyjson, pystr};

/// Positional-or-keyword parameters, as a Python function takes them: positional arguments fill
/// `names` in order, keywords fill any of them, and an argument given both ways is an error
/// (Python's `TypeError: f() got multiple values for argument 'x'`).
pub fn params(
    filter: &str,
    names: &[&str],
    args: Rest<ValueOrKwargs>,
) -> Result<Vec<Option<Value>>, Error> {
    let args = args.into_values();
    let (positional, kwargs): (&[Value], Kwargs) = from_args(&args)?;
    if positional.len() > names.len() {
        return Err(Error::new(
            ErrorKind::TooManyArguments,
            format!("{filter} takes at most {} arguments", names.len()),
        ));
    }
    let mut out = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let by_name: Option<Value> = kwargs.get(name)?;
        out.push(match (positional.get(i), by_name) {
            (Some(_), Some(_)) => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("{filter}() got multiple values for argument '{name}'"),
                ))
            }
            (Some(v), None) => Some(v.clone()),
            (None, v) => v,
        });
    }
    kwargs.assert_all_used()?;
    Ok(out)
}

/// `soft_str(value)`: strings as they are, anything else as Python's `str()`.
fn soft_str(value: &Value) -> String {
    match value.as_str() {
        Some(s) if value.kind() == ValueKind::String => s.to_string(),
        _ => pyjson::py_str(value),
    }
}

/// `do_trim(value, chars=None)`: `str(value).strip(chars)`.
pub fn trim(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let chars = params("trim", &["chars"], args)?.remove(0);
    let text = soft_str(value);
    let out = match chars.as_ref().filter(|c| !c.is_none()) {
        None => pystr::strip(&text).to_string(),
        Some(c) => {
            let set: Vec<char> = soft_str(c).chars().collect();
            text.trim_matches(&set[..]).to_string()
        }
    };
    // Jinja2 keeps a Markup string Markup.
    Ok(if value.is_safe() {
        Value::from_safe_string(out)
    } else {
        Value::from(out)
    })
}

/// `do_wordcount(s)`: the number of `\w+` matches.
pub fn wordcount(value: &Value) -> Value {
    Value::from(pystr::word_count(&soft_str(value)))
}

/// markupsafe's `escape`: `&`, `<`, `>`, `'`, `"` as `&amp;`, `&lt;`, `&gt;`, `&#39;`, `&#34;`;
/// a Markup (safe) string stays as it is.
pub fn escape(value: &Value) -> Value {
    if value.is_safe() {
        return value.clone();
    }
    let text = soft_str(value);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&#39;"),
            '"' => out.push_str("&#34;"),
            c => out.push(c),
        }
    }
    Value::from_safe_string(out)
}

/// Jinja2's `ignore_case`: `str.lower()` for strings.
fn ignore_case(value: Value) -> Value {
    match value.as_str() {
        Some(s) if value.kind() == ValueKind::String => Value::from(s.to_lowercase()),
        _ => value,
    }
}

/// Python's `<` on sort keys: strings by code point (minijinja's string order), the rest by
/// minijinja's order (where Python would raise on mixed types).
fn compare(a: &[Value], b: &[Value]) -> Ordering {
    a.iter().cmp(b.iter())
}

/// `sorted(items, key=..., reverse=...)`: stable, and equal keys keep their order when reversed.
fn sorted(mut keyed: Vec<(Vec<Value>, Value)>, reverse: bool) -> Vec<Value> {
    keyed.sort_by(|a, b| {
        let o = compare(&a.0, &b.0);
        if reverse {
            o.reverse()
        } else {
            o
        }
    });
    keyed.into_iter().map(|(_, v)| v).collect()
}

fn flag(value: Option<Value>) -> bool {
    value.is_some_and(|v| v.is_true())
}

/// `do_dictsort(value, case_sensitive=False, by="key", reverse=False)`.
pub fn dictsort(state: &State, value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let mut p = params("dictsort", &["case_sensitive", "by", "reverse"], args)?.into_iter();
    let case_sensitive = flag(p.next().flatten());
    let pos = match p.next().flatten() {
        None => 0,
        Some(by) => match by.as_str() {
            Some("key") => 0,
            Some("value") => 1,
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "You can only sort by either \"key\" or \"value\"",
                ))
            }
        },
    };
    let reverse = flag(p.next().flatten());
    if value.kind() != ValueKind::Map {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "cannot convert value into pair list",
        ));
    }
    let mut keyed = Vec::new();
    for key in value.try_iter()? {
        let item = value.get_item(&key)?;
        let mut sort_key = if pos == 0 { key.clone() } else { item.clone() };
        if !case_sensitive {
            sort_key = ignore_case(sort_key);
        }
        keyed.push((vec![sort_key], Value::from((key, item))));
    }
    state.consume_fuel(keyed.len() as u64)?;
    Ok(Value::from(sorted(keyed, reverse)))
}

/// `do_sort(value, reverse=False, case_sensitive=False, attribute=None)`: the key of an item is
/// the list of its attributes (`"a.0.b, c"`: comma-separated dotted paths, parts not trimmed, as
/// Jinja2 splits them), each lowercased when a string.
pub fn sort(state: &State, value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let mut p = params("sort", &["reverse", "case_sensitive", "attribute"], args)?.into_iter();
    let reverse = flag(p.next().flatten());
    let case_sensitive = flag(p.next().flatten());
    let attribute = p.next().flatten().filter(|a| !a.is_none());
    let paths: Vec<Vec<Value>> = match &attribute {
        None => vec![vec![]],
        Some(a) => match a.as_str() {
            Some(s) => s
                .split(',')
                .map(|path| {
                    path.split('.')
                        .map(|part| match part.parse::<i64>() {
                            Ok(i) => Value::from(i),
                            Err(_) => Value::from(part),
                        })
                        .collect()
                })
                .collect(),
            None => vec![vec![a.clone()]],
        },
    };
    let items: Vec<Value> = value
        .try_iter()
        .map_err(|e| {
            Error::new(ErrorKind::InvalidOperation, "cannot convert value to list").with_source(e)
        })?
        .collect();
    state.consume_fuel(items.len() as u64)?;
    let mut keyed = Vec::with_capacity(items.len());
    for item in items {
        let key = paths
            .iter()
            .map(|path| {
                let mut v = item.clone();
                for part in path {
                    v = v.get_item(part).unwrap_or_default();
                }
                if case_sensitive {
                    v
                } else {
                    ignore_case(v)
                }
            })
            .collect();
        keyed.push((key, item));
    }
    Ok(Value::from(sorted(keyed, reverse)))
}

/// `do_format(value, *args, **kwargs)`: `soft_str(value) % (kwargs or args)` (see `pyformat`).
pub fn format(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let args = args.into_values();
    let (positional, kwargs): (&[Value], Kwargs) = from_args(&args)?;
    let names: Vec<String> = kwargs.args().map(str::to_string).collect();
    let text = soft_str(value);
    let out = if names.is_empty() {
        pyformat::format(
            &text,
            &Operand {
                positional,
                mapping: None,
            },
        )?
    } else {
        if !positional.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "can't handle positional and keyword arguments at the same time",
            ));
        }
        let mut pairs = Vec::with_capacity(names.len());
        for name in names {
            let v: Value = kwargs.get(&name)?;
            pairs.push((Value::from(name), v));
        }
        let mapping = Value::from_pairs(pairs);
        pyformat::format(&text, &Operand::single(&mapping))?
    };
    Ok(Value::from(out))
}
