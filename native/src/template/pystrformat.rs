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
    if !text.contains('{') {
        return None;
    }
    let pieces = parse(text).ok()?;
    // Nested fields in a spec (`{:{w}}`) stay minijinja's (it refuses them).
    let nested = pieces
        .iter()
        .any(|p| matches!(p, Piece::Field(f) if f.spec.contains('{')));
    (!nested).then(|| rewrite(pieces, args))
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
        let mut value = if first.is_empty() && !path.is_empty() {
            // string.Formatter (what Jinja2's sandbox formats with) numbers only an empty field
            // name automatically; `{.a}` looks up the keyword argument ''.
            return Err(value_error("KeyError: ''"));
        } else if first.is_empty() {
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
            Some('s') if value.is_undefined() => Value::from(""),
            Some('r' | 'a') if value.is_undefined() => Value::from("Undefined"),
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
        } else if value.kind() == ValueKind::String {
            value = Value::from(format_text(value.as_str().unwrap_or_default(), &spec)?);
            spec.clear();
        } else if value.is_undefined() {
            // A missing key or attribute (Jinja2's sandboxed formatter looks fields up with the
            // environment's getattr/getitem): Undefined, which formats as "" with no spec.
            if !spec.is_empty() {
                return Err(value_error(
                    "TypeError: unsupported format string passed to Undefined.__format__",
                ));
            }
            value = Value::from("");
        } else if spec.is_empty() {
            // `format(x, '')` is `str(x)`, in Python's spelling (floats, lists, dicts).
            value = Value::from(pyjson::py_str(&value));
        } else {
            check_spec_size(&parse_spec(&spec, super::pyformat::type_name(&value))?)?;
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
            // Jinja2's getattr: a missing (or refused) attribute is Undefined, not an error.
            (
                value.get_attr(&after[..end]).unwrap_or(Value::UNDEFINED),
                &after[end..],
            )
        } else if let Some(after) = path.strip_prefix('[') {
            let end = after
                .find(']')
                .ok_or_else(|| value_error("Missing ']' in format string"))?;
            let key = &after[..end];
            let item = match key.parse::<i64>() {
                Ok(i) if key.bytes().all(|b| b.is_ascii_digit()) => value.get_item(&Value::from(i)),
                _ => value.get_item(&Value::from(key)),
            }
            .unwrap_or(Value::UNDEFINED);
            (item, &after[end + 1..])
        } else {
            return Err(value_error(
                "Only '.' or '[' may follow ']' in format field specifier",
            ));
        };
        if next.is_undefined() {
            // The rest of the path on Undefined is Undefined too.
            return Ok(Value::UNDEFINED);
        }
        value = next;
        path = rest;
    }
    Ok(value)
}

/// A standard format spec: `[[fill]align][sign][z][#][0][width][grouping][.precision][type]`.
struct Spec {
    fill: Option<char>,
    align: Option<char>,
    sign: Option<char>,
    no_negative_zero: bool,
    alternate: bool,
    zero: bool,
    width: usize,
    grouping: Option<char>,
    precision: Option<usize>,
    ty: Option<char>,
}

fn parse_spec(spec: &str, type_name: &str) -> Result<Spec, Error> {
    let chars: Vec<char> = spec.chars().collect();
    let mut i = 0;
    let (mut fill, mut align) = (None, None);
    if chars.len() >= 2 && "<>=^".contains(chars[1]) {
        (fill, align) = (Some(chars[0]), Some(chars[1]));
        i = 2;
    } else if !chars.is_empty() && "<>=^".contains(chars[0]) {
        align = Some(chars[0]);
        i = 1;
    }
    let flag = |i: &mut usize, set: &str| match chars.get(*i) {
        Some(&c) if set.contains(c) => {
            *i += 1;
            Some(c)
        }
        _ => None,
    };
    let sign = flag(&mut i, "+- ");
    let no_negative_zero = flag(&mut i, "z").is_some();
    let alternate = flag(&mut i, "#").is_some();
    let zero = flag(&mut i, "0").is_some();
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
            .parse::<usize>()
            .ok()
            .filter(|&n| n <= i32::MAX as usize)
            .map(Some)
            .ok_or_else(|| value_error("Too many decimal digits in format string"))
    };
    let width = number(&mut i)?.unwrap_or(0);
    let grouping = flag(&mut i, ",_");
    let precision = if chars.get(i) == Some(&'.') {
        i += 1;
        Some(number(&mut i)?.ok_or_else(|| value_error("Format specifier missing precision"))?)
    } else {
        None
    };
    let ty = chars.get(i).copied();
    if i + ty.is_some() as usize != chars.len() {
        return Err(value_error(format!(
            "Invalid format specifier '{spec}' for object of type '{type_name}'"
        )));
    }
    Ok(Spec {
        fill,
        align,
        sign,
        no_negative_zero,
        alternate,
        zero,
        width,
        grouping,
        precision,
        ty,
    })
}

/// Refuses a spec whose width or precision alone would pass the render's output limit, before
/// anything is built (a width of 10^9 on a number made minijinja allocate 3 GB first).
fn check_spec_size(p: &Spec) -> Result<(), Error> {
    super::env::check_result_size("format", p.width.max(p.precision.unwrap_or(0)))
}

/// `body` (after `sign`) padded to `width` characters; `=` pads between the sign and the body.
fn pad(sign: &str, body: &str, fill: char, align: char, width: usize) -> String {
    let pad = width.saturating_sub(sign.chars().count() + body.chars().count());
    let fills = |n: usize| std::iter::repeat_n(fill, n).collect::<String>();
    match align {
        '<' => format!("{sign}{body}{}", fills(pad)),
        '^' => format!("{}{sign}{body}{}", fills(pad / 2), fills(pad - pad / 2)),
        '=' => format!("{sign}{}{body}", fills(pad)),
        _ => format!("{}{sign}{body}", fills(pad)),
    }
}

/// `format(s, spec)` for a `str`: fill, alignment (left by default), width in characters and
/// precision (a cut); number options are errors, as in Python. minijinja pads by bytes.
fn format_text(text: &str, spec: &str) -> Result<String, Error> {
    let p = parse_spec(spec, "str")?;
    if let Some(ty) = p.ty.filter(|&t| t != 's') {
        return Err(value_error(format!(
            "Unknown format code '{ty}' for object of type 'str'"
        )));
    }
    let refused = if p.sign.is_some() {
        Some("Sign not allowed in string format specifier")
    } else if p.no_negative_zero {
        Some("Negative zero coercion (z) not allowed in string format specifier")
    } else if p.alternate {
        Some("Alternate form (#) not allowed in string format specifier")
    } else if p.align == Some('=') {
        Some("'=' alignment not allowed in string format specifier")
    } else {
        None
    };
    if let Some(message) = refused {
        return Err(value_error(message));
    }
    if let Some(g) = p.grouping {
        return Err(value_error(format!("Cannot specify '{g}' with 's'.")));
    }
    // A field could never be written past the render's output limit; refused before padding. A
    // string's precision only cuts it.
    super::env::check_result_size("format", p.width)?;
    let body: String = match p.precision {
        Some(n) => text.chars().take(n).collect(),
        None => text.to_string(),
    };
    let fill = p.fill.unwrap_or(if p.zero { '0' } else { ' ' });
    Ok(pad("", &body, fill, p.align.unwrap_or('<'), p.width))
}

/// `format(x, spec)` for a spec of type `%`: `x * 100` in fixed notation (precision 6 by default)
/// and a `%` sign, with fill, alignment (right by default, `=` with `0`), sign, `z`, `#`, width and
/// `,`/`_` grouping as Python's float formatting applies them.
fn percent(value: &Value, spec: &str) -> Result<String, Error> {
    let x = match value.kind() {
        ValueKind::Bool => value.is_true() as i64 as f64,
        ValueKind::Number => f64::try_from(value.clone()).unwrap_or(f64::NAN),
        _ => {
            return Err(value_error(format!(
                "Unknown format code '%' for object of type '{}'",
                super::pyformat::type_name(value)
            )))
        }
    };
    let p = parse_spec(spec, "float")?;
    check_spec_size(&p)?;
    let scaled = x * 100.0;
    let precision = p.precision.unwrap_or(6);
    let mut body = if scaled.is_nan() {
        "nan".to_string()
    } else if scaled.is_infinite() {
        "inf".to_string()
    } else {
        format!("{:.precision$}", scaled.abs())
    };
    let mut negative = scaled.is_sign_negative() && !scaled.is_nan();
    if p.no_negative_zero && negative && body.bytes().all(|b| matches!(b, b'0' | b'.')) {
        negative = false;
    }
    if p.alternate && precision == 0 && scaled.is_finite() {
        body.push('.');
    }
    if let Some(sep) = p.grouping.filter(|_| scaled.is_finite()) {
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
    let sign = match (negative, p.sign) {
        (true, _) => "-",
        (false, Some('+')) => "+",
        (false, Some(' ')) => " ",
        _ => "",
    };
    let fill = p.fill.unwrap_or(if p.zero { '0' } else { ' ' });
    let align = p.align.unwrap_or(if p.zero { '=' } else { '>' });
    Ok(pad(sign, &body, fill, align, p.width))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(text: &str, args: &[Value]) -> Result<String, Error> {
        format(text, args).expect("handled").map(|v| v.to_string())
    }

    // Expected values: what `text.format(*args)` gives in CPython 3.11.
    #[test]
    fn conversions_and_percent_are_pythons() {
        assert_eq!(
            fmt("{0!r}|{0!s}|{0!a}", &[Value::from("é'")]).unwrap(),
            "\"é'\"|é'|\"\\xe9'\""
        );
        assert_eq!(
            fmt("{:%}|{:.1%}", &[Value::from(0.25), Value::from(0.123)]).unwrap(),
            "25.000000%|12.3%"
        );
        assert_eq!(
            fmt("{:*^12%}|{:010.1%}", &[Value::from(0.5), Value::from(-0.1)]).unwrap(),
            "*50.000000%*|-000010.0%"
        );
        assert_eq!(
            fmt("{:,.0%}|{:#.0%}", &[Value::from(12345), Value::from(0.5)]).unwrap(),
            "1,234,500%|50.%"
        );
        assert_eq!(
            fmt("{:<5}|{:.1}|{{}}", &[Value::from("é"), Value::from("ab")]).unwrap(),
            "é    |a|{}"
        );
        assert!(fmt("{:%}", &[Value::from("a")]).is_err());
        assert!(fmt("{!x}", &[Value::from("a")]).is_err());
        assert!(fmt("{}{0}", &[Value::from("a")]).is_err());
        assert!(fmt("{:+}", &[Value::from("a")]).is_err());
        assert!(format("no fields", &[]).is_none());
    }

    #[test]
    fn sizes_are_checked_before_anything_is_built() {
        // A width past the output limit is refused for every kind of value, before minijinja
        // pads (a number or None with a width of 10^9 took 3 GB first); a string's precision
        // only cuts it.
        let _limit = super::super::env::limit_output(1 << 20);
        for value in [
            Value::from(()),
            Value::from(1),
            Value::from(1.5),
            Value::from("a"),
        ] {
            let e = fmt("{:>1000000000}", std::slice::from_ref(&value)).unwrap_err();
            assert!(e.to_string().contains("output limit"), "{e}");
        }
        assert!(fmt("{:.1000000000f}", &[Value::from(1.5)]).is_err());
        assert_eq!(
            fmt(
                "{:.70000000}|{!r:.100000000}",
                &[Value::from("abc"), Value::from("abc")]
            )
            .unwrap(),
            "abc|'abc'"
        );
    }
}
