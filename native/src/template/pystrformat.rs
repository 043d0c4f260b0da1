//! `str.format` fields minijinja's formatter refuses: conversions (`{!r}`, `{!s}`, `{!a}`) and the
//! percentage type (`{:.1%}`). minijinja parses neither, so a format string holding one is taken
//! apart here as Python's `string.Formatter` does: every field's argument is looked up (automatic
//! or manual numbering, keywords, `.attr` and `[key]`), converted, and a `%` field formatted; what
//! is left goes to minijinja as `{N:spec}` fields over the resolved values. Format strings without
//! such a field go to minijinja untouched.

use minijinja::value::{from_args, Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

use super::{pyformat, pyjson};

fn value_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.into())
}

/// One replacement field: its name, conversion and spec, as written.
struct Field<'a> {
    name: &'a str,
    conversion: Option<char>,
    spec: &'a str,
}

enum Piece<'a> {
    Literal(String),
    Field(Field<'a>),
}

/// The format string's literal text (braces unescaped) and fields, as `MarkupIterator` reads it.
fn parse(text: &str) -> Result<Vec<Piece<'_>>, Error> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        match c {
            '{' if rest[1..].starts_with('{') => {
                literal.push('{');
                rest = &rest[2..];
            }
            '}' if rest[1..].starts_with('}') => {
                literal.push('}');
                rest = &rest[2..];
            }
            '}' => return Err(value_error("Single '}' encountered in format string")),
            '{' => {
                // The field ends at the brace that closes it; specs may nest fields.
                let mut depth = 0;
                let mut end = None;
                for (i, ch) in rest.char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = Some(i);
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                let Some(end) = end else {
                    return Err(value_error("expected '}' before end of string"));
                };
                pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                pieces.push(Piece::Field(field(&rest[1..end])?));
                rest = &rest[end + 1..];
            }
            c => {
                literal.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    pieces.push(Piece::Literal(literal));
    Ok(pieces)
}

/// `name[!conversion][:spec]`; a `[key]` in the name may hold `!` and `:`.
fn field(inner: &str) -> Result<Field<'_>, Error> {
    let mut in_key = false;
    let mut name_end = inner.len();
    for (i, c) in inner.char_indices() {
        match c {
            '[' => in_key = true,
            ']' => in_key = false,
            '!' | ':' if !in_key => {
                name_end = i;
                break;
            }
            _ => {}
        }
    }
    let name = &inner[..name_end];
    let rest = &inner[name_end..];
    let (conversion, spec) = match rest.strip_prefix('!') {
        Some(after) => {
            let mut chars = after.chars();
            let c = chars.next().ok_or_else(|| {
                value_error("end of string while looking for conversion specifier")
            })?;
            let tail = chars.as_str();
            let spec = match tail.strip_prefix(':') {
                Some(spec) => spec,
                None if tail.is_empty() => "",
                None => return Err(value_error("expected ':' after conversion specifier")),
            };
            (Some(c), spec)
        }
        None => (None, rest.strip_prefix(':').unwrap_or("")),
    };
    Ok(Field {
        name,
        conversion,
        spec,
    })
}

/// Whether a spec's type is `%` (the last character, after any nested field).
fn is_percent(spec: &str) -> bool {
    spec.ends_with('%') && !spec.contains('{')
}

/// `s.format(*args, **kwargs)` when `s` has a field minijinja cannot format; `None` otherwise.
pub fn format(text: &str, args: &[Value]) -> Option<Result<Value, Error>> {
    if !text.contains('!') && !text.contains('%') {
        return None;
    }
    let pieces = parse(text).ok()?;
    let needed = pieces
        .iter()
        .any(|p| matches!(p, Piece::Field(f) if f.conversion.is_some() || is_percent(f.spec)));
    needed.then(|| rewrite(pieces, args))
}

fn rewrite(pieces: Vec<Piece<'_>>, args: &[Value]) -> Result<Value, Error> {
    let (positional, kwargs): (&[Value], Kwargs) = from_args(args)?;
    let mut out = String::new();
    let mut values = Vec::new();
    let mut auto: Option<usize> = None;
    let mut manual = false;
    for piece in pieces {
        let f = match piece {
            Piece::Literal(text) => {
                out.push_str(&text.replace('{', "{{").replace('}', "}}"));
                continue;
            }
            Piece::Field(f) => f,
        };
        let first_end = f.name.find(['.', '[']).unwrap_or(f.name.len());
        let (first, path) = f.name.split_at(first_end);
        let mut value = if first.is_empty() {
            if manual {
                return Err(value_error(
                    "cannot switch from manual field specification to automatic field numbering",
                ));
            }
            let i = auto.map_or(0, |i| i + 1);
            auto = Some(i);
            positional_arg(positional, i)?
        } else if let Ok(i) = first.parse::<usize>() {
            if auto.is_some() {
                return Err(value_error(
                    "cannot switch from automatic field numbering to manual field specification",
                ));
            }
            manual = true;
            positional_arg(positional, i)?
        } else {
            let v: Option<Value> = kwargs.get(first)?;
            v.ok_or_else(|| value_error(format!("KeyError: '{first}'")))?
        };
        value = follow(value, path)?;
        let mut spec = f.spec.to_string();
        value = match f.conversion {
            None => value,
            Some('r') => Value::from(pyformat::py_repr(&value)),
            Some('s') => Value::from(match value.kind() {
                ValueKind::String => value.as_str().unwrap_or_default().to_string(),
                _ => pyjson::py_str(&value),
            }),
            Some('a') => Value::from(pyformat::py_ascii(&value)),
            Some(c) => return Err(value_error(format!("Unknown conversion specifier {c}"))),
        };
        if is_percent(&spec) {
            value = Value::from(percent(&value, &spec)?);
            spec.clear();
        }
        values.push(value);
        out.push('{');
        out.push_str(&(values.len() - 1).to_string());
        if !spec.is_empty() {
            out.push(':');
            out.push_str(&spec);
        }
        out.push('}');
    }
    minijinja::formatting::format(minijinja::formatting::FormatStyle::StrFormat, &out, &values)
        .map(Value::from)
}

fn positional_arg(args: &[Value], i: usize) -> Result<Value, Error> {
    args.get(i).cloned().ok_or_else(|| {
        value_error(format!(
            "IndexError: Replacement index {i} out of range for positional args tuple"
        ))
    })
}

/// `.attr` and `[key]` after a field's first name (`[0]` indexes, `[k]` is the string key).
fn follow(mut value: Value, mut path: &str) -> Result<Value, Error> {
    while !path.is_empty() {
        let (next, rest) = if let Some(after) = path.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            (value.get_attr(&after[..end])?, &after[end..])
        } else if let Some(after) = path.strip_prefix('[') {
            let end = after
                .find(']')
                .ok_or_else(|| value_error("Missing ']' in format string"))?;
            let key = &after[..end];
            let item = match key.parse::<i64>() {
                Ok(i) if key.bytes().all(|b| b.is_ascii_digit()) => {
                    value.get_item(&Value::from(i))?
                }
                _ => value.get_item(&Value::from(key))?,
            };
            (item, &after[end + 1..])
        } else {
            return Err(value_error(
                "Only '.' or '[' may follow ']' in format field specifier",
            ));
        };
        if next.is_undefined() {
            return Err(value_error(format!(
                "no field {path:?} in the format argument"
            )));
        }
        value = next;
        path = rest;
    }
    Ok(value)
}

/// `format(x, spec)` for a spec of type `%`: `x * 100` in fixed notation (precision 6 by default)
/// and a `%` sign, with fill, alignment (right by default, `=` after the sign), sign, `z`, `#`,
/// `0`, width and `,`/`_` grouping as Python's float formatting applies them.
fn percent(value: &Value, spec: &str) -> Result<String, Error> {
    let x = match value.kind() {
        ValueKind::Bool => value.is_true() as i64 as f64,
        ValueKind::Number => f64::try_from(value.clone()).unwrap_or(f64::NAN),
        _ => {
            return Err(value_error(format!(
                "Unknown format code '%' for object of type '{}'",
                super::pystrmethods::type_name(value)
            )))
        }
    };
    let bad = || {
        value_error(format!(
            "Invalid format specifier '{spec}' for object of type 'float'"
        ))
    };
    let chars: Vec<char> = spec[..spec.len() - 1].chars().collect();
    let mut i = 0;
    let (mut fill, mut align) = (' ', None);
    if chars.len() >= 2 && "<>=^".contains(chars[1]) {
        (fill, align) = (chars[0], Some(chars[1]));
        i = 2;
    } else if !chars.is_empty() && "<>=^".contains(chars[0]) {
        align = Some(chars[0]);
        i = 1;
    }
    let sign = match chars.get(i) {
        Some(&c @ ('+' | '-' | ' ')) => {
            i += 1;
            c
        }
        _ => '-',
    };
    let mut flag = |c: char| {
        let found = chars.get(i) == Some(&c);
        i += found as usize;
        found
    };
    let no_negative_zero = flag('z');
    let alternate = flag('#');
    if flag('0') && align.is_none() {
        (fill, align) = ('0', Some('='));
    }
    let number = |i: &mut usize| -> Result<Option<usize>, Error> {
        let start = *i;
        while chars.get(*i).is_some_and(char::is_ascii_digit) {
            *i += 1;
        }
        if *i == start {
            return Ok(None);
        }
        let digits: String = chars[start..*i].iter().collect();
        digits
            .parse()
            .map(Some)
            .map_err(|_| value_error("Too many decimal digits in format string"))
    };
    let width = number(&mut i)?.unwrap_or(0);
    let grouping = match chars.get(i) {
        Some(&c @ (',' | '_')) => {
            i += 1;
            Some(c)
        }
        _ => None,
    };
    let precision = if chars.get(i) == Some(&'.') {
        i += 1;
        Some(number(&mut i)?.ok_or_else(|| value_error("Format specifier missing precision"))?)
    } else {
        None
    };
    if i != chars.len() {
        return Err(bad());
    }
    super::env::check_result_size("format", width.max(precision.unwrap_or(0)))?;
    let scaled = x * 100.0;
    let precision = precision.unwrap_or(6);
    let mut body = if scaled.is_nan() {
        "nan".to_string()
    } else if scaled.is_infinite() {
        "inf".to_string()
    } else {
        format!("{:.precision$}", scaled.abs())
    };
    let mut negative = scaled.is_sign_negative() && !scaled.is_nan();
    if no_negative_zero && negative && body.bytes().all(|b| matches!(b, b'0' | b'.')) {
        negative = false;
    }
    if alternate && precision == 0 && scaled.is_finite() {
        body.push('.');
    }
    if let Some(sep) = grouping.filter(|_| scaled.is_finite()) {
        let int_end = body.find('.').unwrap_or(body.len());
        let (int, frac) = body.split_at(int_end);
        let mut grouped = String::new();
        for (n, d) in int.chars().enumerate() {
            if n > 0 && (int.len() - n) % 3 == 0 {
                grouped.push(sep);
            }
            grouped.push(d);
        }
        body = grouped + frac;
    }
    body.push('%');
    let sign = match (negative, sign) {
        (true, _) => "-",
        (false, '+') => "+",
        (false, ' ') => " ",
        _ => "",
    };
    let len = sign.len() + body.chars().count();
    let pad = width.saturating_sub(len);
    let fills = |n: usize| std::iter::repeat_n(fill, n).collect::<String>();
    Ok(match align.unwrap_or('>') {
        '<' => format!("{sign}{body}{}", fills(pad)),
        '^' => format!("{}{sign}{body}{}", fills(pad / 2), fills(pad - pad / 2)),
        '=' => format!("{sign}{}{body}", fills(pad)),
        _ => format!("{}{sign}{body}", fills(pad)),
    })
}
