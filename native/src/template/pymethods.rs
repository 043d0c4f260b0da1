//! Python methods where minijinja-contrib's `pycompat` follows Rust's rules instead of Python's or
//! lacks them: `.strip()`, `.lstrip()`, `.rstrip()` without an argument, `.splitlines()`,
//! `.isspace()`, `.title()` and the character-class tests (`.isalpha()`, `.isdecimal()`,
//! `.isidentifier()`... see `pystr`), the `str` methods of `pystrmethods`, `str.format` and
//! `str.format_map` (`pystrformat`), `list.index`, and `dict.copy()` and the dict views
//! (`pydict`). Everything else goes on to `pycompat`.

use minijinja::value::{from_args, Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, State, Value};

use super::{pydict, pyformat, pystr, pystrformat, pystrmethods};

/// The environment's unknown-method callback: these methods first, then `pycompat`'s.
pub fn unknown_method_callback(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(s) = value.as_str().filter(|_| value.kind() == ValueKind::String) {
        if method == "format_map" {
            let mapping = format_map_kwargs(args)?;
            return unknown_method_callback(state, value, "format", &[mapping]);
        }
        if let Some(result) = string_method(s, method, args) {
            return result;
        }
    } else if pydict::is_dict(value) {
        if let Some(result) = pydict::dict_method_call(value, method, args) {
            return result;
        }
    } else if value.kind() == ValueKind::Seq && method == "index" {
        return list_index(value, args);
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// The keyword arguments `s.format_map(mapping)` formats with: Jinja2's sandbox formats
/// `format_map` as `format(**mapping)` (so `{0}` still names a positional argument, of which there
/// are none), after checking that it got exactly one argument.
fn format_map_kwargs(args: &[Value]) -> Result<Value, Error> {
    let type_error = |message: String| Error::new(ErrorKind::InvalidOperation, message);
    let (positional, kwargs): (&[Value], Option<Kwargs>) = from_args(args)?;
    if kwargs.is_some() {
        return Err(type_error(
            "TypeError: format_map() takes no keyword arguments".into(),
        ));
    }
    let [mapping] = positional else {
        return Err(type_error(format!(
            "TypeError: format_map() takes exactly one argument ({} given)",
            positional.len()
        )));
    };
    if mapping.kind() != ValueKind::Map {
        // Python fails at the first field it looks up; this fails for any format string.
        return Err(type_error("TypeError: format_map() needs a mapping".into()));
    }
    // Field names are strings: a key of another type can never be looked up.
    let pairs = mapping.try_iter()?.filter_map(|key| {
        let name = key.as_str()?.to_owned();
        Some((name, mapping.get_item(&key).unwrap_or_default()))
    });
    Ok(Value::from(pairs.collect::<Kwargs>()))
}

/// `Some` when the call is one Python answers differently from `pycompat`.
fn string_method(s: &str, method: &str, args: &[Value]) -> Option<Result<Value, Error>> {
    // `x.strip(None)` strips whitespace too; with characters, `pycompat` already does as Python.
    let no_chars = match args {
        [] => true,
        [a] => a.is_none(),
        _ => false,
    };
    if let Some(answer) = pystr::class_test(method, s) {
        return Some(from_args(args).map(|()| Value::from(answer)));
    }
    Some(match method {
        "strip" if no_chars => Ok(Value::from(pystr::strip(s))),
        "lstrip" if no_chars => Ok(Value::from(pystr::lstrip(s))),
        "rstrip" if no_chars => Ok(Value::from(pystr::rstrip(s))),
        "splitlines" => {
            pystrmethods::method_args("splitlines", args, &["keepends"], 0, true).map(|a| {
                let keepends = a[0].as_ref().is_some_and(Value::is_true);
                pystr::splitlines(s, keepends)
                    .into_iter()
                    .map(Value::from)
                    .collect()
            })
        }
        "title" => from_args(args).map(|()| Value::from(pystr::title(s))),
        "format" => return pystrformat::format(s, args),
        _ => return pystrmethods::call(s, method, args),
    })
}

/// `list.index(x[, start[, stop]])`: the first position from `start` (slice-adjusted) before
/// `stop` holding an item equal to `x`.
fn list_index(list: &Value, args: &[Value]) -> Result<Value, Error> {
    let a = pystrmethods::method_args("index", args, &["value", "start", "stop"], 1, false)?;
    let wanted = a[0].as_ref().expect("required");
    let len = list.len().unwrap_or(0) as i64;
    let bound = |v: &Option<Value>, default: i64| -> Result<i64, Error> {
        let Some(v) = v else { return Ok(default) };
        let n = match pystrmethods::index_arg(v) {
            Ok(n) => n,
            // Beyond i64: Python clamps to the list's bounds.
            Err(_) if v.is_integer() => match i128::try_from(v.clone()) {
                Ok(n) if n < 0 => i64::MIN,
                _ => i64::MAX,
            },
            Err(e) => return Err(e),
        };
        Ok(if n < 0 {
            (n.saturating_add(len)).max(0)
        } else {
            n
        })
    };
    let start = bound(&a[1], 0)?;
    let stop = bound(&a[2], len)?.min(len);
    for (i, item) in list.try_iter()?.enumerate() {
        let i = i as i64;
        if i >= stop {
            break;
        }
        if i >= start && item == *wanted {
            return Ok(Value::from(i));
        }
    }
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("ValueError: {} is not in list", pyformat::py_repr(wanted)),
    ))
}
