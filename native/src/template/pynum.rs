//! Jinja2's `int` and `float` filters, which go through Python's `int()` and `float()`:
//! surrounding whitespace, `_` between digits and non-ASCII decimal digits (`'٣'`) are
//! accepted, `"3.7"|int` is 3 through the float fallback, and anything Python cannot convert
//! gives the default (0 / 0.0) instead of an error. Reka Edge reads a `chat_template_kwargs`
//! value through `|int`; minijinja failed the request where transformers renders.

use minijinja::value::{Rest, ValueKind, ValueOrKwargs};
use minijinja::{Error, ErrorKind, Value};

use super::pyfilters::params;
use super::pystr;

/// `do_int(value, default=0, base=10)`: `int(value, base)` for strings, `int(value)` otherwise,
/// then `int(float(value))`, then the default.
pub fn int(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let mut p = params("int", &["default", "base"], args)?.into_iter();
    let default = p.next().flatten().unwrap_or(Value::from(0));
    let base = p.next().flatten();
    let direct = match value.kind() {
        ValueKind::String => {
            let base = match &base {
                None => Some(10),
                Some(b) => i64::try_from(b.clone()).ok(),
            };
            let text = value.as_str().unwrap_or_default();
            match base.map(|b| parse_int(text, b)) {
                Some(Ok(n)) => n.map(Value::from),
                // An integer literal Python reads exactly: the float fallback would round it.
                Some(Err(TooLarge)) => return Err(too_large(text)),
                None => None,
            }
        }
        ValueKind::Bool => Some(Value::from(value.is_true() as i64)),
        ValueKind::Number if value.is_integer() => Some(value.clone()),
        _ => None,
    };
    if let Some(v) = direct {
        return Ok(v);
    }
    match to_float(value) {
        // `int(nan)` raises ValueError and `int(inf)` OverflowError; do_int catches both.
        Some(f) if !f.is_finite() => Ok(default),
        Some(f) => truncate(f),
        None => Ok(default),
    }
}

/// `do_float(value, default=0.0)`: `float(value)`, or the default.
pub fn float(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let mut p = params("float", &["default"], args)?.into_iter();
    let default = p.next().flatten().unwrap_or(Value::from(0.0));
    Ok(to_float(value).map(Value::from).unwrap_or(default))
}

/// `int(f)` for a finite float: truncated toward zero.
fn truncate(f: f64) -> Result<Value, Error> {
    // i128 holds [-2^127, 2^127); both bounds are exact as floats.
    const TWO_127: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;
    let t = f.trunc();
    if t.abs() < 9.2e18 {
        Ok(Value::from(t as i64))
    } else if (-TWO_127..TWO_127).contains(&t) {
        Ok(Value::from(t as i128))
    } else {
        // Python makes the exact integer (`int(1e300)` has 301 digits); minijinja's integers stop
        // at 128 bits, and a number that only prints right would go wrong in arithmetic and
        // comparisons. No template has needed one, so this stays an error.
        Err(too_large(&format!("{f:e}")))
    }
}

/// An integer literal past 128 bits.
struct TooLarge;

fn too_large(what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("int: {what} does not fit in 128 bits (Python would make the exact integer)"),
    )
}

/// `float(value)` where Python accepts it: numbers, bools, and strings in Python's float syntax.
pub(super) fn to_float(value: &Value) -> Option<f64> {
    match value.kind() {
        ValueKind::Bool => Some(value.is_true() as i64 as f64),
        ValueKind::Number => f64::try_from(value.clone()).ok(),
        ValueKind::String => parse_float(value.as_str().unwrap_or_default()),
        _ => None,
    }
}

/// The text `int()` and `float()` parse: decimal digits of any script as ASCII, surrounding
/// whitespace removed. Their whitespace is Unicode White_Space (Rust's `trim`): unlike
/// `str.strip()`, they refuse U+001C..U+001F.
pub(crate) fn ascii_number(s: &str) -> String {
    s.trim()
        .chars()
        .map(|c| {
            if c.is_ascii() {
                return c;
            }
            match pystr::decimal_value(c) {
                Some(digit) => char::from(b'0' + digit as u8),
                None => c,
            }
        })
        .collect()
}

/// `_` is allowed only between two digits (Python's `digitpart`); it is removed.
pub(crate) fn without_underscores(s: &str, is_digit: impl Fn(u8) -> bool) -> Option<String> {
    let b = s.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if c == b'_' && !(i > 0 && is_digit(b[i - 1]) && b.get(i + 1).is_some_and(|&n| is_digit(n)))
        {
            return None;
        }
    }
    Some(s.replace('_', ""))
}

/// Python's `float(str)`: whitespace around, a sign, digits with `_` between them, a point, an
/// exponent, or `inf`/`infinity`/`nan` in any case.
pub(crate) fn parse_float(s: &str) -> Option<f64> {
    let s = ascii_number(s);
    let s = s.as_str();
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let word = unsigned.to_ascii_lowercase();
    if matches!(word.as_str(), "inf" | "infinity" | "nan") {
        return s.parse().ok();
    }
    if !unsigned
        .bytes()
        .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-' | b'_'))
    {
        return None;
    }
    without_underscores(s, |c| c.is_ascii_digit())?.parse().ok()
}

/// Python's `int(str, base)`: whitespace around, a sign, the base's prefix (`0x`, `0o`, `0b`;
/// required to pick the base when it is 0), digits with single `_` between them (and after a
/// prefix). Base 0 refuses leading zeros in a decimal number, as Python does. `Ok(None)` for text
/// that is no integer literal, [`TooLarge`] for one past 128 bits.
fn parse_int(s: &str, base: i64) -> Result<Option<i128>, TooLarge> {
    if base != 0 && !(2..=36).contains(&base) {
        return Ok(None);
    }
    let s = ascii_number(s);
    let s = s.as_str();
    let (negative, rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let lower = rest.get(..2).map(str::to_ascii_lowercase);
    let prefixed = match lower.as_deref() {
        Some("0x") => Some(16),
        Some("0o") => Some(8),
        Some("0b") => Some(2),
        _ => None,
    };
    let auto = base == 0;
    let (base, digits) = match (base, prefixed) {
        (0, Some(b)) => (b, &rest[2..]),
        (0, None) => (10, rest),
        (b, Some(p)) if b == p => (b, &rest[2..]),
        (b, _) => (b, rest),
    };
    let base = base as u32;
    // After a prefix a leading `_` is allowed (`0x_1f`).
    let digits = if digits.len() < rest.len() {
        digits.strip_prefix('_').unwrap_or(digits)
    } else {
        digits
    };
    let is_digit = |c: u8| (c as char).is_digit(base);
    let Some(clean) = without_underscores(digits, is_digit) else {
        return Ok(None);
    };
    if clean.is_empty() || !clean.bytes().all(is_digit) {
        return Ok(None);
    }
    // Base 0 reads `012` as an error (an octal literal without its prefix); `0` and `00` pass.
    if auto && prefixed.is_none() && clean.starts_with('0') && clean.bytes().any(|c| c != b'0') {
        return Ok(None);
    }
    // Digits that `from_str_radix` refuses now can only be too many: i128::MIN's magnitude is one
    // past i128::MAX, so it is read with its sign.
    let signed = if negative { format!("-{clean}") } else { clean };
    match i128::from_str_radix(&signed, base) {
        Ok(n) => Ok(Some(n)),
        Err(_) => Err(TooLarge),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values: what int(s, base) / float(s) return in CPython 3.11 (None: ValueError).

    #[test]
    fn ints_parse_as_in_python() {
        let cases: &[(&str, i64, Option<i128>)] = &[
            (" 12 ", 10, Some(12)),
            ("\u{3000}-7\n", 10, Some(-7)),
            ("\u{1f}7", 10, None),
            ("٣", 10, Some(3)),
            ("1_000", 10, Some(1000)),
            ("1__0", 10, None),
            ("_1", 10, None),
            ("0x1A", 16, Some(26)),
            ("1a", 16, Some(26)),
            ("0x1A", 10, None),
            ("0x_1f", 0, Some(31)),
            ("0b101", 0, Some(5)),
            ("0o17", 8, Some(15)),
            ("z", 36, Some(35)),
            ("3.7", 10, None),
            ("", 10, None),
            ("+", 10, None),
            ("12", 1, None),
            ("012", 0, None),
            ("00", 0, Some(0)),
            ("012", 10, Some(12)),
        ];
        for &(s, base, want) in cases {
            assert_eq!(
                parse_int(s, base).ok().flatten(),
                want,
                "int({s:?}, {base})"
            );
        }
    }

    #[test]
    fn integers_past_128_bits_fail_cleanly() {
        let env = minijinja::Environment::new();
        let mut env = env;
        env.add_filter("int", int);
        let render = |src: &str| env.render_str(src, ());
        // int(1e38) and int(-1.7e38) fit: exact, as Python's int(float) is (values from CPython 3.11).
        assert_eq!(
            render("{{ '1e38'|int }}|{{ -1.7e38|int }}").unwrap(),
            "99999999999999997748809823456034029568|-169999999999999998061923293023115935744"
        );
        for src in [
            "{{ '1e300'|int }}",
            "{{ '-1e300'|int }}",
            "{{ 1e300|int }}",
            "{{ '170141183460469231731687303715884105728'|int }}",
            "{{ '-170141183460469231731687303715884105729'|int }}",
            "{{ ('f' * 40)|int(base=16) }}",
            "{{ ('9' * 50)|int(7) }}",
        ] {
            let err = render(src).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidOperation, "{src}");
            assert!(
                err.to_string().contains("does not fit in 128 bits"),
                "{src}: {err}"
            );
        }
        // At the edge: i128::MIN and i128::MAX parse exactly.
        assert_eq!(
            render("{{ '-170141183460469231731687303715884105728'|int }}").unwrap(),
            "-170141183460469231731687303715884105728"
        );
    }

    #[test]
    fn floats_parse_as_in_python() {
        let cases: &[(&str, Option<f64>)] = &[
            (" 2.5 ", Some(2.5)),
            ("٣.٥", Some(3.5)),
            ("2.5\u{1c}", None),
            ("1_000.5", Some(1000.5)),
            ("1e3", Some(1000.0)),
            (".5", Some(0.5)),
            ("5.", Some(5.0)),
            ("-Infinity", Some(f64::NEG_INFINITY)),
            ("1_.5", None),
            ("abc", None),
            ("0x10", None),
            ("", None),
        ];
        for &(s, want) in cases {
            assert_eq!(parse_float(s), want, "float({s:?})");
        }
        assert!(parse_float(" nan ").unwrap().is_nan());
    }
}
