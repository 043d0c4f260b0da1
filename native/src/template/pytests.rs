//! Jinja2's tests where minijinja's answer differently, or are missing. Jinja2 defines them on
//! Python's data model, so they ask different questions than minijinja's:
//!
//! - `callable` (missing in minijinja): Python's `callable()`. Functions, macros, bound methods,
//!   `loop` and `joiner()` are callable, and so is an undefined value (Jinja2's `Undefined` class
//!   defines `__call__`, to fail when called).
//! - `sequence`: "has `len()` and `[]`": strings and dicts are sequences too (minijinja: only
//!   lists), and so is an undefined value.
//! - `mapping`, `iterable`: a `namespace()` or a macro is neither (minijinja: both); `loop` is
//!   iterable.
//! - `lower`, `upper`: `str(value).islower()`, Python's rule (a cased character and no uppercase or
//!   titlecase one), on any value (`{'a': 1} is lower` is true); minijinja answers for strings only.
//! - `odd`, `even`, `divisibleby`: `value % n`, which fails for none, lists, dicts and undefined
//!   values (minijinja answers false) and formats a string (`'%s' is odd` is `'2' == 1`, false;
//!   `'abc' is odd` fails).
//!
//! Limits: minijinja's `map`, `select`, ... return lists where Jinja2 returns generators (which
//! are not sequences), and `range()` is not a sequence here.

use minijinja::value::{ObjectRepr, ValueKind};
use minijinja::{Error, ErrorKind, Value};

use super::pyformat::{self, Operand};
use super::{pydict, pyjson, pystr};

/// The Rust type of a minijinja object, for the types Python tells apart and minijinja does not
/// (`namespace()`, `loop` and macros are all mappings to minijinja). The names are minijinja's
/// (private) type names; `minijinja_types_are_recognized` checks them.
fn object_type(value: &Value) -> Option<&'static str> {
    let name = value.as_object()?.type_name();
    ["Namespace", "Loop", "Macro"]
        .into_iter()
        .find(|t| name.strip_suffix(t).is_some_and(|p| p.ends_with("::")))
}

/// `callable(value)`: functions and other plain objects (not a `cycler()`), macros and `loop`
/// (minijinja maps), and undefined values.
pub fn is_callable(value: &Value) -> bool {
    if value.is_undefined() {
        return true;
    }
    let Some(obj) = value.as_object() else {
        return false;
    };
    match obj.repr() {
        ObjectRepr::Plain => !obj.is::<super::env::Cycler>(),
        ObjectRepr::Map => matches!(object_type(value), Some("Loop" | "Macro")),
        _ => false,
    }
}

/// Jinja2's `sequence`: `len(value)` and `value.__getitem__` both exist.
pub fn is_sequence(value: &Value) -> bool {
    match value.kind() {
        ValueKind::Undefined | ValueKind::String | ValueKind::Seq => true,
        ValueKind::Map => pydict::is_dict(value),
        _ => false,
    }
}

/// Jinja2's `mapping`: `isinstance(value, abc.Mapping)`.
pub fn is_mapping(value: &Value) -> bool {
    value.kind() == ValueKind::Map && pydict::is_dict(value)
}

/// Jinja2's `iterable`: whatever `iter()` accepts; `none`, a namespace and a macro are not,
/// `loop` is.
pub fn is_iterable(value: &Value) -> bool {
    match value.kind() {
        ValueKind::None => false,
        ValueKind::Map => pydict::is_dict(value) || object_type(value) == Some("Loop"),
        _ => value.try_iter().is_ok(),
    }
}

/// `str(value)`, borrowing strings.
fn with_str<T>(value: &Value, f: impl FnOnce(&str) -> T) -> T {
    match value.as_str() {
        Some(s) if value.kind() == ValueKind::String => f(s),
        _ => f(&pyjson::py_str(value)),
    }
}

/// Jinja2's `lower`: `str(value).islower()`.
pub fn is_lower(value: &Value) -> bool {
    with_str(value, pystr::is_lower)
}

/// Jinja2's `upper`: `str(value).isupper()`.
pub fn is_upper(value: &Value) -> bool {
    with_str(value, pystr::is_upper)
}

/// `value % n == 0` (`want` 0) or `== 1` (`want` 1) for the values minijinja's own tests answer
/// as Python does (numbers and bools); Python's error or answer for the others.
fn remainder_is(value: &Value, n: &Value, numeric: impl FnOnce() -> bool) -> Result<bool, Error> {
    match value.kind() {
        ValueKind::Number | ValueKind::Bool => Ok(numeric()),
        // `str % n` formats the string; a string never equals a number.
        ValueKind::String => {
            pyformat::format(value.as_str().unwrap_or_default(), &Operand::single(n)).map(|_| false)
        }
        ValueKind::Undefined => Err(Error::new(
            ErrorKind::UndefinedError,
            "the value tested is undefined",
        )),
        _ => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "unsupported operand type(s) for %: '{}' and 'int'",
                python_type(value)
            ),
        )),
    }
}

fn python_type(value: &Value) -> &'static str {
    match value.kind() {
        ValueKind::None => "NoneType",
        ValueKind::Seq if value.is_tuple() => "tuple",
        ValueKind::Seq => "list",
        ValueKind::Map => "dict",
        _ => "object",
    }
}

/// Jinja2's `odd`: `value % 2 == 1`.
pub fn is_odd(value: Value) -> Result<bool, Error> {
    let v = value.clone();
    remainder_is(&value, &Value::from(2), || minijinja::tests::is_odd(v))
}

/// Jinja2's `even`: `value % 2 == 0`.
pub fn is_even(value: Value) -> Result<bool, Error> {
    let v = value.clone();
    remainder_is(&value, &Value::from(2), || minijinja::tests::is_even(v))
}

/// Jinja2's `divisibleby`: `value % num == 0`; a zero divisor fails, as in Python.
pub fn is_divisibleby(value: &Value, num: &Value) -> Result<bool, Error> {
    if value.kind() == ValueKind::Number || value.kind() == ValueKind::Bool {
        if !num.is_true() && matches!(num.kind(), ValueKind::Number | ValueKind::Bool) {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "integer modulo by zero",
            ));
        }
        return Ok(minijinja::tests::is_divisibleby(value, num));
    }
    remainder_is(value, num, || false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minijinja_types_are_recognized() {
        let env = minijinja::Environment::new();
        let out = env
            .render_str(
                "{% macro m() %}{% endmacro %}{% set ns = namespace() %}\
                 {% for x in [1] %}{{ [t(ns), t(loop), t(m), t({}), t([])]|join(',') }}{% endfor %}",
                minijinja::context! { t => Value::from_function(|v: Value| {
                    object_type(&v).unwrap_or("-").to_string()
                }) },
            )
            .unwrap();
        assert_eq!(out, "Namespace,Loop,Macro,-,-");
        // Dicts the template builds are the map type `pydict::is_dict` downcasts to.
        let dict = env.render_str(
            "{{ t({}) }}{{ t(dict(a=1)) }}",
            minijinja::context! {
                t => Value::from_function(|v: Value| pydict::is_dict(&v)),
            },
        );
        assert_eq!(dict.unwrap(), "TrueTrue");
    }
}
