//! Jinja2 filters whose minijinja versions answer differently, or that minijinja lacks:
//!
//! - `trim` and `wordcount` (Python's whitespace and `\w`), `dictsort`, `sort` and `unique`
//!   (Jinja2 compares `str.lower()` values, minijinja Unicode case folding, so `ß` sorts as `ss`;
//!   minijinja's `unique` takes no positional `case_sensitive`);
//! - `default` (minijinja has no `boolean=` keyword), `attr` (Jinja2 reads an attribute only, so
//!   `{'a': 1}|attr('a')` is undefined; minijinja reads the key), `format` (Python's `%`, see
//!   `pyformat`), `filesizeformat` (minijinja-contrib has no `binary=` keyword and keeps a float's
//!   fraction in `'1.5 Bytes'`);
//! - missing in minijinja: `center`, `truncate` (minijinja-contrib's takes keywords only).

use std::cmp::Ordering;

use minijinja::value::{from_args, ArgType, Kwargs, ObjectRepr, Rest, ValueKind, ValueOrKwargs};
use minijinja::{Error, ErrorKind, State, Value};

use super::pyformat::{self, Operand};
use super::{pydict, pyjson, pynum, pystr};

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
pub(super) fn soft_str(value: &Value) -> String {
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
            Some(s) => s.split(',').map(attribute_path).collect(),
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
                let v = follow(&item, path);
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

/// Jinja2's `_prepare_attribute_parts`: a dotted path, parts of digits as indexes.
fn attribute_path(path: &str) -> Vec<Value> {
    path.split('.')
        .map(|part| match part.parse::<i64>() {
            Ok(i) if part.bytes().all(|b| b.is_ascii_digit()) => Value::from(i),
            _ => Value::from(part),
        })
        .collect()
}

/// The item at the end of an attribute path (undefined where a part is missing).
fn follow(item: &Value, path: &[Value]) -> Value {
    let mut v = item.clone();
    for part in path {
        v = v.get_item(part).unwrap_or_default();
    }
    v
}

/// `do_unique(value, case_sensitive=False, attribute=None)`: the first item of each key, keys
/// compared as Python's `set` does (`1`, `1.0` and `True` are one key; lists and dicts cannot be
/// keys).
pub fn unique(state: &State, value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let mut p = params("unique", &["case_sensitive", "attribute"], args)?.into_iter();
    let case_sensitive = flag(p.next().flatten());
    let path = match p.next().flatten().filter(|a| !a.is_none()) {
        None => vec![],
        Some(a) => match a.as_str() {
            Some(s) => attribute_path(s),
            None => vec![a],
        },
    };
    let items: Vec<Value> = value.try_iter()?.collect();
    state.consume_fuel(items.len() as u64)?;
    let mut seen: Vec<Value> = Vec::new();
    let mut out = Vec::new();
    for item in items {
        let mut key = follow(&item, &path);
        if !case_sensitive {
            key = ignore_case(key);
        }
        key = match key.kind() {
            ValueKind::Bool => Value::from(key.is_true() as i64),
            ValueKind::Seq | ValueKind::Map if !key.is_tuple() => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "unhashable type: '{}'",
                        if key.kind() == ValueKind::Map {
                            "dict"
                        } else {
                            "list"
                        }
                    ),
                ))
            }
            _ => key,
        };
        // Quadratic, as the lists a chat template deduplicates are short; fuel bounds the rest.
        state.consume_fuel(seen.len() as u64 / 16)?;
        if !seen.contains(&key) {
            seen.push(key);
            out.push(item);
        }
    }
    Ok(Value::from(out))
}

/// `do_default(value, default_value='', boolean=False)`: the default when the value is undefined,
/// or (with `boolean`) falsy. Templates call it often, so its arguments are taken one by one
/// rather than through [`params`] or a [`Kwargs`] argument: without keywords a call allocates
/// nothing (a `Kwargs` parameter cost 150 ns per call even when empty).
pub fn default(
    value: &Value,
    a: Option<ValueOrKwargs>,
    b: Option<ValueOrKwargs>,
    c: Option<ValueOrKwargs>,
) -> Result<Value, Error> {
    let mut positional: [Option<Value>; 2] = [None, None];
    let mut kwargs: Option<Kwargs> = None;
    for (i, arg) in [a, b, c].into_iter().flatten().enumerate() {
        let arg = arg.into_value();
        if arg.is_kwargs() {
            kwargs = Some(<Kwargs as ArgType>::from_value(Some(&arg))?);
        } else if i < positional.len() {
            positional[i] = Some(arg);
        } else {
            return Err(Error::new(
                ErrorKind::TooManyArguments,
                "default takes at most 2 arguments",
            ));
        }
    }
    let [mut default_value, mut boolean] = positional;
    if let Some(kwargs) = kwargs {
        default_value = keyword_or_positional("default", "default_value", default_value, &kwargs)?;
        boolean = keyword_or_positional("default", "boolean", boolean, &kwargs)?;
        kwargs.assert_all_used()?;
    }
    if value.is_undefined() || (flag(boolean) && !value.is_true()) {
        Ok(default_value.unwrap_or(Value::from("")))
    } else {
        Ok(value.clone())
    }
}

/// A parameter given by position or by keyword, not both (see [`params`]).
fn keyword_or_positional(
    filter: &str,
    name: &str,
    positional: Option<Value>,
    kwargs: &Kwargs,
) -> Result<Option<Value>, Error> {
    let by_name: Option<Value> = kwargs.get(name)?;
    match (positional, by_name) {
        (Some(_), Some(_)) => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("{filter}() got multiple values for argument '{name}'"),
        )),
        (p, k) => Ok(p.or(k)),
    }
}

/// A Python int argument (bools are ints).
fn int_arg(filter: &str, value: Option<Value>, default: i64) -> Result<i64, Error> {
    match value {
        None => Ok(default),
        Some(v) if v.kind() == ValueKind::Bool => Ok(v.is_true() as i64),
        Some(v) if v.is_integer() => i64::try_from(v)
            .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("{filter}: {e}"))),
        Some(v) => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("{filter}: expected an int, got {}", v.kind()),
        )),
    }
}

/// The string a `str` method runs on: a string, or Python's AttributeError.
fn str_receiver<'v>(filter: &str, value: &'v Value) -> Result<&'v str, Error> {
    match value.as_str() {
        Some(s) if value.kind() == ValueKind::String => Ok(s),
        _ => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("{filter}: expected a string, got {}", value.kind()),
        )),
    }
}

/// A string result, Markup (safe) when the input was (Jinja2 runs `str` methods on Markup, which
/// keep it Markup).
fn like(value: &Value, out: String) -> Value {
    if value.is_safe() {
        Value::from_safe_string(out)
    } else {
        Value::from(out)
    }
}

/// `do_center(value, width=80)`: `soft_str(value).center(width)`, the extra space on the right
/// unless the margin and the width are both odd (CPython's `pad`).
pub fn center(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let width = int_arg("center", params("center", &["width"], args)?.remove(0), 80)?;
    let text = soft_str(value);
    let len = text.chars().count() as i64;
    if width <= len {
        return Ok(like(value, text));
    }
    let margin = width - len;
    super::env::check_result_size("center", text.len() + margin as usize)?;
    let left = margin / 2 + (margin & width & 1);
    let mut out = String::with_capacity(text.len() + margin as usize);
    out.extend(std::iter::repeat_n(' ', left as usize));
    out.push_str(&text);
    out.extend(std::iter::repeat_n(' ', (margin - left) as usize));
    Ok(like(value, out))
}

/// `do_truncate(s, length=255, killwords=False, end='...', leeway=None)`: unchanged when at most
/// `length + leeway` (leeway 5) characters; otherwise cut to `length - len(end)` characters, back
/// to the last space unless `killwords`, and `end` appended.
pub fn truncate(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let mut p = params("truncate", &["length", "killwords", "end", "leeway"], args)?.into_iter();
    let length = int_arg("truncate", p.next().flatten(), 255)?;
    let killwords = flag(p.next().flatten());
    let end = match p.next().flatten() {
        None => "...".to_string(),
        Some(e) => str_receiver("truncate", &e)?.to_string(),
    };
    let leeway = int_arg("truncate", p.next().flatten().filter(|l| !l.is_none()), 5)?;
    let end_len = end.chars().count() as i64;
    if length < end_len {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("expected length >= {end_len}, got {length}"),
        ));
    }
    if leeway < 0 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("expected leeway >= 0, got {leeway}"),
        ));
    }
    // `len(s)` works on lists and dicts too; only a string can be cut.
    let len = match value.kind() {
        ValueKind::String => value.as_str().unwrap_or_default().chars().count(),
        ValueKind::Seq | ValueKind::Map => value.len().unwrap_or(0),
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("truncate: object of type {} has no len()", value.kind()),
            ))
        }
    };
    if len as i64 <= length.saturating_add(leeway) {
        return Ok(value.clone());
    }
    let text = str_receiver("truncate", value)?;
    let keep = (length - end_len) as usize;
    let head = match text.char_indices().nth(keep) {
        Some((at, _)) => &text[..at],
        None => text,
    };
    let head = if killwords {
        head
    } else {
        head.rsplit_once(' ').map_or(head, |(before, _)| before)
    };
    Ok(Value::from(format!("{head}{end}")))
}

/// `do_filesizeformat(value, binary=False)`: `float(value)` bytes in decimal (kB, MB, ...) or
/// binary (KiB, MiB, ...) units with one decimal; below one unit, `int()` of it and "Bytes".
pub fn filesizeformat(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let binary = flag(params("filesizeformat", &["binary"], args)?.remove(0));
    let bytes = pynum::to_float(value).ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "filesizeformat: could not convert {} to float",
                value.kind()
            ),
        )
    })?;
    let base: f64 = if binary { 1024.0 } else { 1000.0 };
    let prefixes = if binary {
        ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"]
    } else {
        ["kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"]
    };
    if bytes == 1.0 {
        return Ok(Value::from("1 Byte"));
    }
    if bytes < base {
        // Python's `int(bytes)`: exact digits, truncated toward zero (Rust writes them exactly).
        let t = bytes.trunc();
        let digits = if t == 0.0 {
            "0".to_string()
        } else {
            format!("{t:.0}")
        };
        return Ok(Value::from(format!("{digits} Bytes")));
    }
    let mut unit = base;
    for prefix in &prefixes {
        unit *= base;
        if bytes < unit {
            return Ok(Value::from(format!(
                "{} {prefix}",
                one_decimal(base * bytes / unit)
            )));
        }
    }
    Ok(Value::from(format!(
        "{} {}",
        one_decimal(base * bytes / unit),
        prefixes[prefixes.len() - 1]
    )))
}

/// Python's `f"{x:.1f}"`.
fn one_decimal(x: f64) -> String {
    if x.is_nan() {
        "nan".to_string()
    } else if x.is_infinite() {
        (if x > 0.0 { "inf" } else { "-inf" }).to_string()
    } else {
        format!("{x:.1}")
    }
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

/// Names Python's `str` answers with a method (the sandbox allows them all).
const STR_METHODS: &[&str] = &[
    "capitalize",
    "casefold",
    "center",
    "count",
    "encode",
    "endswith",
    "expandtabs",
    "find",
    "format",
    "format_map",
    "index",
    "isalnum",
    "isalpha",
    "isascii",
    "isdecimal",
    "isdigit",
    "isidentifier",
    "islower",
    "isnumeric",
    "isprintable",
    "isspace",
    "istitle",
    "isupper",
    "join",
    "ljust",
    "lower",
    "lstrip",
    "maketrans",
    "partition",
    "removeprefix",
    "removesuffix",
    "replace",
    "rfind",
    "rindex",
    "rjust",
    "rpartition",
    "rsplit",
    "rstrip",
    "split",
    "splitlines",
    "startswith",
    "strip",
    "swapcase",
    "title",
    "translate",
    "upper",
    "zfill",
];
/// The methods of a list the immutable sandbox leaves visible (a tuple has the last two).
const LIST_METHODS: &[&str] = &["copy", "count", "index"];

/// `do_attr(obj, name)`: `getattr(obj, name)`, never `obj[name]`. A dict answers with its
/// methods only (`{'a': 1}|attr('a')` is undefined), a string or list with its methods (calling
/// one calls the method), a namespace, `loop` or other object with its attribute; an undefined
/// value fails.
pub fn attr(value: &Value, name: &Value) -> Result<Value, Error> {
    let name = soft_str(name);
    let method = |names: &[&'static str]| -> Value {
        match names.iter().find(|m| **m == name) {
            Some(m) => pydict::BoundMethod::value(value.clone(), m),
            None => Value::UNDEFINED,
        }
    };
    Ok(match value.kind() {
        ValueKind::Undefined => {
            return Err(Error::new(
                ErrorKind::UndefinedError,
                format!("attr: the value whose '{name}' is read is undefined"),
            ))
        }
        ValueKind::Map if pydict::is_dict(value) => pydict::dict_method(value, &name),
        ValueKind::String => method(STR_METHODS),
        // A group of `groupby` is a named tuple: `grouper` and `list` are its attributes.
        ValueKind::Seq => match value.get_attr(&name) {
            Ok(v) if !v.is_undefined() => v,
            _ if value.is_tuple() => method(&LIST_METHODS[1..]),
            _ => method(LIST_METHODS),
        },
        _ if value
            .as_object()
            .is_some_and(|o| matches!(o.repr(), ObjectRepr::Map | ObjectRepr::Plain)) =>
        {
            value.get_attr(&name).unwrap_or_default()
        }
        _ => Value::UNDEFINED,
    })
}
