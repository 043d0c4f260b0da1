//! Python's `%` string formatting (`printf`-style), which Jinja2's `format` filter is
//! (`soft_str(value) % (kwargs or args)`). minijinja's `format` differs: it refuses `%r`, `%a`,
//! `%u` and `*` widths, refuses `%d` of a float (Python truncates it), pads by bytes instead of
//! characters (`'%5s'|format('é')`), and accepts arguments Python leaves unconverted
//! (`'{}'|format(1)` is a TypeError). The `odd`, `even` and `divisibleby` tests also reach this:
//! `value % 2` on a string formats it.
//!
//! Followed as CPython 3.11 does it (`Objects/unicodeobject.c`, `PyUnicode_Format`): `%%` only
//! right after the `%`; a spec takes its argument before its conversion type is checked; once a
//! `%(key)` spec has read the mapping, no positional argument is left; unused positional arguments
//! are an error unless the operand is a mapping.

use std::fmt::Write as _;

use minijinja::value::ValueKind;
use minijinja::{Error, ErrorKind, Value};

use super::{pyjson, pystr};

/// The right operand of `%`: positional arguments (a tuple's items, or one value) and, when the
/// operand is a mapping, that mapping for `%(key)` specs.
pub struct Operand<'a> {
    /// Arguments taken in order by specs without a key.
    pub positional: &'a [Value],
    /// The mapping `%(key)` specs read.
    pub mapping: Option<&'a Value>,
}

impl<'a> Operand<'a> {
    /// `text % value` for a value that is not a tuple: one argument, or a mapping.
    pub fn single(value: &'a Value) -> Self {
        Operand {
            positional: std::slice::from_ref(value),
            mapping: (value.kind() == ValueKind::Map).then_some(value),
        }
    }
}

fn type_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.into())
}

/// Python's type name of a value, for error messages.
pub(crate) fn type_name(value: &Value) -> &'static str {
    match value.kind() {
        ValueKind::Undefined => "Undefined",
        ValueKind::None => "NoneType",
        ValueKind::Bool => "bool",
        ValueKind::Number if value.is_integer() => "int",
        ValueKind::Number => "float",
        ValueKind::String => "str",
        ValueKind::Seq if value.is_tuple() => "tuple",
        ValueKind::Seq => "list",
        ValueKind::Map => "dict",
        _ => "object",
    }
}

/// A spec's flags, width and precision.
#[derive(Default, Clone, Copy)]
struct Spec {
    left: bool,
    plus: bool,
    space: bool,
    alt: bool,
    zero: bool,
    width: usize,
    precision: Option<usize>,
}

/// `text % operand`.
pub fn format(text: &str, operand: &Operand<'_>) -> Result<String, Error> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 16);
    let mut next_arg = 0usize;
    let mut i = 0;
    let take = |next_arg: &mut usize| -> Result<Value, Error> {
        let arg = operand
            .positional
            .get(*next_arg)
            .cloned()
            .ok_or_else(|| type_error("not enough arguments for format string"))?;
        *next_arg += 1;
        Ok(arg)
    };
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if c != '%' {
            out.push(c);
            continue;
        }
        if chars.get(i) == Some(&'%') {
            out.push('%');
            i += 1;
            continue;
        }
        let start = i - 1;
        let mut keyed: Option<Value> = None;
        if chars.get(i) == Some(&'(') {
            let Some(mapping) = operand.mapping else {
                return Err(type_error("format requires a mapping"));
            };
            let mut depth = 1;
            let key_start = i + 1;
            i += 1;
            while i < chars.len() && depth > 0 {
                match chars[i] {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                i += 1;
            }
            if depth > 0 {
                return Err(type_error("incomplete format key"));
            }
            let key: String = chars[key_start..i - 1].iter().collect();
            let value = mapping.get_item(&Value::from(key.as_str()))?;
            if value.is_undefined() {
                let mut quoted = String::new();
                pystr::write_repr(&key, &mut quoted);
                return Err(type_error(format!("KeyError: {quoted}")));
            }
            keyed = Some(value);
            // CPython: after a key, no positional argument is left.
            next_arg = usize::MAX;
        }
        let mut spec = Spec::default();
        while let Some(&f) = chars.get(i) {
            match f {
                '-' => spec.left = true,
                '+' => spec.plus = true,
                ' ' => spec.space = true,
                '#' => spec.alt = true,
                '0' => spec.zero = true,
                _ => break,
            }
            i += 1;
        }
        if chars.get(i) == Some(&'*') {
            i += 1;
            let w = star_argument(&take(&mut next_arg)?)?;
            if w < 0 {
                spec.left = true;
            }
            spec.width = w.unsigned_abs() as usize;
        } else {
            spec.width = digits(&chars, &mut i)?;
        }
        if chars.get(i) == Some(&'.') {
            i += 1;
            if chars.get(i) == Some(&'*') {
                i += 1;
                spec.precision = Some(star_argument(&take(&mut next_arg)?)?.max(0) as usize);
            } else {
                spec.precision = Some(digits(&chars, &mut i)?);
            }
        }
        while matches!(chars.get(i), Some('h' | 'l' | 'L')) {
            i += 1;
        }
        // A field could never be written past the render's output limit; refuse it before
        // padding it out (`'%*d'|format(10**9, 1)`).
        super::env::check_result_size("format", spec.width.max(spec.precision.unwrap_or(0)))?;
        let Some(&conversion) = chars.get(i) else {
            return Err(type_error("incomplete format"));
        };
        i += 1;
        let arg = match keyed.take() {
            Some(v) => v,
            None => take(&mut next_arg)?,
        };
        convert(&mut out, conversion, &arg, spec, start)?;
    }
    if operand.mapping.is_none() && next_arg < operand.positional.len() {
        return Err(type_error(
            "not all arguments converted during string formatting",
        ));
    }
    Ok(out)
}

/// A width or precision written out: decimal digits, possibly none.
fn digits(chars: &[char], i: &mut usize) -> Result<usize, Error> {
    let mut n: usize = 0;
    while let Some(d) = chars.get(*i).and_then(|c| c.to_digit(10)) {
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(d as usize))
            .filter(|&n| n <= i32::MAX as usize)
            .ok_or_else(|| type_error("width too big"))?;
        *i += 1;
    }
    Ok(n)
}

/// A `*` width or precision: an int argument.
fn star_argument(arg: &Value) -> Result<i64, Error> {
    match arg.kind() {
        ValueKind::Bool => Ok(arg.is_true() as i64),
        ValueKind::Number if arg.is_integer() => {
            i64::try_from(arg.clone()).map_err(|_| type_error("width too big"))
        }
        _ => Err(type_error("* wants int")),
    }
}

/// An integer argument (`%d` also truncates floats); `None` with the name Python's error uses.
enum Int {
    Small(i128),
    /// The decimal digits of an integral float too large for i128 (`%d` of `1e300`).
    Digits(bool, String),
}

fn int_argument(arg: &Value, conversion: char, accept_float: bool) -> Result<Int, Error> {
    match arg.kind() {
        ValueKind::Bool => return Ok(Int::Small(arg.is_true() as i128)),
        ValueKind::Number if arg.is_integer() => {
            return i128::try_from(arg.clone())
                .map(Int::Small)
                .map_err(|_| type_error("int too large to format"));
        }
        ValueKind::Number if accept_float => {
            let f = f64::try_from(arg.clone()).unwrap_or(f64::NAN);
            if f.is_nan() {
                return Err(type_error("cannot convert float NaN to integer"));
            }
            if f.is_infinite() {
                return Err(type_error("cannot convert float infinity to integer"));
            }
            let t = f.trunc();
            if t.abs() < 1e38 {
                return Ok(Int::Small(t as i128));
            }
            // Rust writes a float's exact decimal expansion, as Python's int() makes it.
            return Ok(Int::Digits(t < 0.0, format!("{:.0}", t.abs())));
        }
        _ => {}
    }
    let what = if accept_float {
        "a real number is required"
    } else {
        "an integer is required"
    };
    Err(type_error(format!(
        "%{conversion} format: {what}, not {}",
        type_name(arg)
    )))
}

fn float_argument(arg: &Value) -> Result<f64, Error> {
    match arg.kind() {
        ValueKind::Bool => Ok(arg.is_true() as i64 as f64),
        ValueKind::Number => {
            f64::try_from(arg.clone()).map_err(|_| type_error("int too large to convert to float"))
        }
        _ => Err(type_error(format!(
            "must be real number, not {}",
            type_name(arg)
        ))),
    }
}

/// `str(value)` as Python writes it.
fn py_str(value: &Value) -> String {
    match value.kind() {
        ValueKind::String => value.as_str().unwrap_or_default().to_string(),
        _ => pyjson::py_str(value),
    }
}

/// `repr(value)` as Python writes it.
pub fn py_repr(value: &Value) -> String {
    match value.kind() {
        ValueKind::String => {
            let mut out = String::new();
            pystr::write_repr(value.as_str().unwrap_or_default(), &mut out);
            out
        }
        ValueKind::Undefined => "Undefined".to_string(),
        _ => pyjson::py_str(value),
    }
}

/// `ascii(value)`: `repr` with non-ASCII characters escaped.
pub(crate) fn py_ascii(value: &Value) -> String {
    let mut out = String::new();
    for c in py_repr(value).chars() {
        match c as u32 {
            0..=0x7f => out.push(c),
            n @ 0x80..=0xff => {
                let _ = write!(out, "\\x{n:02x}");
            }
            n @ 0x100..=0xffff => {
                let _ = write!(out, "\\u{n:04x}");
            }
            n => {
                let _ = write!(out, "\\U{n:08x}");
            }
        }
    }
    out
}

fn pad(out: &mut String, body: &str, spec: Spec) {
    let len = body.chars().count();
    let fill = spec.width.saturating_sub(len);
    if spec.left {
        out.push_str(body);
        out.extend(std::iter::repeat_n(' ', fill));
    } else {
        out.extend(std::iter::repeat_n(' ', fill));
        out.push_str(body);
    }
}

/// A number: sign, prefix and digits, zero-padded between the prefix and the digits when the
/// `0` flag asks (and the field is not left-aligned).
fn pad_number(out: &mut String, negative: bool, prefix: &str, digits: &str, spec: Spec) {
    let sign = if negative {
        "-"
    } else if spec.plus {
        "+"
    } else if spec.space {
        " "
    } else {
        ""
    };
    let len = sign.len() + prefix.len() + digits.chars().count();
    let fill = spec.width.saturating_sub(len);
    if spec.left {
        out.push_str(sign);
        out.push_str(prefix);
        out.push_str(digits);
        out.extend(std::iter::repeat_n(' ', fill));
    } else if spec.zero {
        out.push_str(sign);
        out.push_str(prefix);
        out.extend(std::iter::repeat_n('0', fill));
        out.push_str(digits);
    } else {
        out.extend(std::iter::repeat_n(' ', fill));
        out.push_str(sign);
        out.push_str(prefix);
        out.push_str(digits);
    }
}

fn convert(
    out: &mut String,
    conversion: char,
    arg: &Value,
    spec: Spec,
    at: usize,
) -> Result<(), Error> {
    match conversion {
        's' | 'r' | 'a' => {
            let text = match conversion {
                's' => py_str(arg),
                'r' => py_repr(arg),
                _ => py_ascii(arg),
            };
            let text = match spec.precision {
                Some(p) => text.chars().take(p).collect(),
                None => text,
            };
            pad(out, &text, spec);
        }
        'c' => {
            let c = match arg.kind() {
                ValueKind::String => {
                    let s = arg.as_str().unwrap_or_default();
                    let mut it = s.chars();
                    match (it.next(), it.next()) {
                        (Some(c), None) => c,
                        _ => return Err(type_error("%c requires int or char")),
                    }
                }
                ValueKind::Bool => char::from(arg.is_true() as u8),
                ValueKind::Number if arg.is_integer() => i128::try_from(arg.clone())
                    .ok()
                    .and_then(|n| u32::try_from(n).ok())
                    .and_then(char::from_u32)
                    .ok_or_else(|| type_error("%c arg not in range(0x110000)"))?,
                _ => return Err(type_error("%c requires int or char")),
            };
            pad(out, &c.to_string(), spec);
        }
        'd' | 'i' | 'u' | 'o' | 'x' | 'X' => {
            let decimal = matches!(conversion, 'd' | 'i' | 'u');
            let (negative, mut digits) = match int_argument(arg, conversion, decimal)? {
                Int::Small(n) => {
                    let m = n.unsigned_abs();
                    let digits = match conversion {
                        'o' => format!("{m:o}"),
                        'x' => format!("{m:x}"),
                        'X' => format!("{m:X}"),
                        _ => m.to_string(),
                    };
                    (n < 0, digits)
                }
                Int::Digits(negative, digits) => (negative, digits),
            };
            if let Some(p) = spec.precision {
                if digits.len() < p {
                    digits.insert_str(0, &"0".repeat(p - digits.len()));
                }
            }
            let prefix = match conversion {
                'o' if spec.alt => "0o",
                'x' if spec.alt => "0x",
                'X' if spec.alt => "0X",
                _ => "",
            };
            pad_number(out, negative, prefix, &digits, spec);
        }
        'e' | 'E' | 'f' | 'F' | 'g' | 'G' => {
            let x = float_argument(arg)?;
            let body = format_float(x.abs(), conversion, spec.precision.unwrap_or(6), spec.alt);
            pad_number(out, x.is_sign_negative() && !x.is_nan(), "", &body, spec);
        }
        other => {
            return Err(type_error(format!(
                "unsupported format character '{other}' (0x{:x}) at index {}",
                other as u32,
                at + 1
            )))
        }
    }
    Ok(())
}

/// A non-negative float in `%e`, `%f` or `%g` (upper case for `E`, `F`, `G`), as C's printf
/// writes it: correctly rounded (Rust's and Python's conversions both are), `inf`/`nan`, an
/// exponent with a sign and at least two digits; `#` keeps the point and `%g`'s trailing zeros.
fn format_float(x: f64, conversion: char, precision: usize, alt: bool) -> String {
    let upper = conversion.is_ascii_uppercase();
    let body = if x.is_nan() {
        "nan".to_string()
    } else if x.is_infinite() {
        "inf".to_string()
    } else {
        match conversion.to_ascii_lowercase() {
            'e' => exponent_form(x, precision, alt),
            'f' => {
                let mut s = format!("{x:.precision$}");
                if alt && precision == 0 {
                    s.push('.');
                }
                s
            }
            _ => general_form(x, precision.max(1), alt),
        }
    };
    if upper {
        body.to_ascii_uppercase()
    } else {
        body
    }
}

/// `%e`: `d.ddde+XX`.
fn exponent_form(x: f64, precision: usize, alt: bool) -> String {
    let rust = format!("{x:.precision$e}");
    let (mantissa, exponent) = rust.split_once('e').unwrap_or((&rust, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let mut out = mantissa.to_string();
    if alt && precision == 0 {
        out.push('.');
    }
    let sign = if exponent < 0 { '-' } else { '+' };
    let _ = write!(out, "e{sign}{:02}", exponent.unsigned_abs());
    out
}

/// `%g` with `precision` significant digits: fixed notation when the exponent (after rounding) is
/// at least -4 and below the precision, else exponent notation; trailing zeros (and a bare point)
/// removed unless `#`.
fn general_form(x: f64, precision: usize, alt: bool) -> String {
    let rounded = format!("{x:.*e}", precision - 1);
    let exponent: i64 = rounded
        .split_once('e')
        .and_then(|(_, e)| e.parse().ok())
        .unwrap_or(0);
    let mut out = if (-4..precision as i64).contains(&exponent) {
        let decimals = (precision as i64 - 1 - exponent) as usize;
        let mut s = format!("{x:.decimals$}");
        if alt && decimals == 0 {
            s.push('.');
        }
        s
    } else {
        exponent_form(x, precision - 1, alt)
    };
    if !alt {
        let (number, exponent) = match out.find('e') {
            Some(at) => (out[..at].to_string(), out[at..].to_string()),
            None => (out.clone(), String::new()),
        };
        let number = if number.contains('.') {
            number.trim_end_matches('0').trim_end_matches('.')
        } else {
            &number
        };
        out = format!("{number}{exponent}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(text: &str, args: &[Value]) -> Result<String, Error> {
        format(
            text,
            &Operand {
                positional: args,
                mapping: None,
            },
        )
    }

    // Expected values: what `text % args` gives in CPython 3.11 (the Python tests compare many
    // more against Python itself).
    #[test]
    fn formats_as_python() {
        fn v(x: impl Into<Value>) -> Value {
            x.into()
        }
        assert_eq!(fmt("%5s|%-5d|", &[v("é"), v(3)]).unwrap(), "    é|3    |");
        assert_eq!(fmt("%r %a", &[v("é"), v("é")]).unwrap(), "'é' '\\xe9'");
        assert_eq!(
            fmt("%d %i %u", &[v(2.7), v(-3.99), v(1e20)]).unwrap(),
            "2 -3 100000000000000000000"
        );
        assert_eq!(
            fmt("%*d|%-*d|", &[v(4), v(1), v(3), v(2)]).unwrap(),
            "   1|2  |"
        );
        assert_eq!(
            fmt("%#010o|%+#010x", &[v(-8), v(255)]).unwrap(),
            "-0o0000010|+0x00000ff"
        );
        assert_eq!(
            fmt("%08.3d|% 05d", &[v(-5), v(3)]).unwrap(),
            "-0000005| 0003"
        );
        assert_eq!(
            fmt(
                "%g %g %.2g %#g",
                &[v(999999.5), v(1e-5), v(0.000995), v(0.0001)]
            )
            .unwrap(),
            "1e+06 1e-05 0.001 0.000100000"
        );
        assert_eq!(
            fmt(
                "%e|%#.0e|%.0f|%010f",
                &[v(1234.5), v(12345), v(2.5), v(f64::INFINITY)]
            )
            .unwrap(),
            "1.234500e+03|1.e+04|2|0000000inf"
        );
        assert_eq!(fmt("%c%c", &[v(65), v("x")]).unwrap(), "Ax");
        assert!(fmt("{}", &[v(1)]).is_err());
        assert!(fmt("%s %s", &[v(1)]).is_err());
        assert!(fmt("%5%", &[v(1)]).is_err());
        assert_eq!(fmt("%%", &[]).unwrap(), "%");
        assert!(fmt("%x", &[v(2.0)]).is_err());
        let map = Value::from_pairs([("a", 1)]);
        let single = |t: &str| format(t, &Operand::single(&map));
        assert_eq!(single("%(a)s %%").unwrap(), "1 %");
        assert_eq!(single("%s %(a)s").unwrap(), "{'a': 1} 1");
        assert!(single("%(a)s %s").is_err());
        assert_eq!(single("abc").unwrap(), "abc");
    }
}
