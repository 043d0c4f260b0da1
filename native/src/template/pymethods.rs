//! Python `str` methods where minijinja-contrib's `pycompat` follows Rust's rules instead of
//! Python's: `.strip()`, `.lstrip()`, `.rstrip()` and `.split()` without an argument,
//! `.splitlines()`, `.isspace()` and `.title()` (see `pystr`). Everything else goes on to
//! `pycompat`.

use minijinja::value::{from_args, ValueKind};
use minijinja::{Error, State, Value};

use super::pystr;

/// The environment's unknown-method callback: these methods first, then `pycompat`'s.
pub fn unknown_method_callback(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(s) = value.as_str().filter(|_| value.kind() == ValueKind::String) {
        if let Some(result) = string_method(s, method, args) {
            return result;
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// `Some` when the call is one Python answers differently from `pycompat`.
fn string_method(s: &str, method: &str, args: &[Value]) -> Option<Result<Value, Error>> {
    // `x.strip(None)` strips whitespace too; with characters, `pycompat` already does as Python.
    let no_chars = match args {
        [] => true,
        [a] => a.is_none(),
        _ => false,
    };
    Some(match method {
        "strip" if no_chars => Ok(Value::from(pystr::strip(s))),
        "lstrip" if no_chars => Ok(Value::from(pystr::lstrip(s))),
        "rstrip" if no_chars => Ok(Value::from(pystr::rstrip(s))),
        "split" => {
            // Only `split()`, `split(None)` and `split(None, n)`; a separator goes to `pycompat`.
            let (sep, maxsplit): (Option<Value>, Option<i64>) = match from_args(args) {
                Ok(parsed) => parsed,
                Err(_) => return None,
            };
            if sep.as_ref().is_some_and(|v| !v.is_none()) {
                return None;
            }
            Ok(pystr::split_whitespace(s, maxsplit.unwrap_or(-1))
                .into_iter()
                .map(Value::from)
                .collect())
        }
        "splitlines" => from_args(args).map(|(keepends,): (Option<bool>,)| {
            pystr::splitlines(s, keepends.unwrap_or(false))
                .into_iter()
                .map(Value::from)
                .collect()
        }),
        "title" => from_args(args).map(|()| Value::from(pystr::title(s))),
        "isspace" => {
            from_args(args).map(|()| Value::from(!s.is_empty() && s.chars().all(pystr::is_space)))
        }
        _ => return None,
    })
}
