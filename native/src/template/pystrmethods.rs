//! Python `str` methods with Python's arguments, where minijinja-contrib's `pycompat` lacks the
//! method (`rsplit`, `partition`, `index`, `zfill`, `center`, `removeprefix`, `casefold`, ...) or
//! its argument forms (`split(maxsplit=1)`, `find(x, start, end)`, `startswith(x, start)`).
//!
//! Positions count characters, as Python's do; `start`/`end` are adjusted as CPython adjusts them
//! (`ADJUST_INDICES`: negative from the end, clamped at 0, `end` clamped at the length, `start` not).
//! A method whose result can be far larger than its input (`center`, `zfill`, `expandtabs`) refuses
//! a result that alone would pass the render's output limit before building it.

use minijinja::value::{from_args, Kwargs, Tuple, ValueKind};
use minijinja::{Error, ErrorKind, Value};

use super::pyformat::type_name;
use super::pystr;

fn type_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.into())
}

/// A method's arguments as Python takes them: at least `required` and at most `names.len()`
/// positional ones, and keywords (by these names) only when the method accepts them.
pub(crate) fn method_args(
    method: &str,
    args: &[Value],
    names: &[&str],
    required: usize,
    keywords: bool,
) -> Result<Vec<Option<Value>>, Error> {
    let (positional, kwargs): (&[Value], Kwargs) = from_args(args)?;
    if !keywords && kwargs.args().next().is_some() {
        return Err(type_error(format!("{method}() takes no keyword arguments")));
    }
    if positional.len() > names.len() {
        return Err(Error::new(
            ErrorKind::TooManyArguments,
            format!(
                "{method}() takes at most {} arguments ({} given)",
                names.len(),
                positional.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        // A keyword given as none is none, not absent (`split(maxsplit=none)` fails).
        let by_name = match keywords && kwargs.has(name) {
            true => Some(kwargs.get::<Value>(name)?),
            false => None,
        };
        out.push(match (positional.get(i), by_name) {
            (Some(_), Some(_)) => {
                return Err(type_error(format!(
                    "argument for {method}() given by name ('{name}') and position ({})",
                    i + 1
                )))
            }
            (Some(v), None) => Some(v.clone()),
            (None, v) => v,
        });
    }
    kwargs.assert_all_used()?;
    if out.iter().take(required).any(Option::is_none) {
        return Err(Error::new(
            ErrorKind::MissingArgument,
            format!("{method}() takes at least {required} argument(s)"),
        ));
    }
    Ok(out)
}

/// An argument Python reads with `__index__` (an int or a bool); out of `i64` is Python's
/// OverflowError.
pub(crate) fn index_arg(value: &Value) -> Result<i64, Error> {
    match value.kind() {
        ValueKind::Bool => Ok(value.is_true() as i64),
        ValueKind::Number if value.is_integer() => i64::try_from(value.clone())
            .map_err(|_| type_error("Python int too large to convert to C ssize_t")),
        _ => Err(type_error(format!(
            "'{}' object cannot be interpreted as an integer",
            type_name(value)
        ))),
    }
}

/// A `start`/`end` argument: none (or absent) is no bound.
fn slice_arg(value: Option<&Value>) -> Result<Option<i64>, Error> {
    match value {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => match v.kind() {
            ValueKind::Bool => Ok(Some(v.is_true() as i64)),
            // Python clamps huge slice indices instead of failing.
            ValueKind::Number if v.is_integer() => Ok(Some(
                i128::try_from(v.clone())
                    .map(|n| n.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
                    .unwrap_or(i64::MAX),
            )),
            _ => Err(type_error(
                "slice indices must be integers or None or have an __index__ method",
            )),
        },
    }
}

/// A `str` argument.
fn str_arg<'a>(method: &str, value: &'a Value) -> Result<&'a str, Error> {
    match value.as_str() {
        Some(s) if value.kind() == ValueKind::String => Ok(s),
        _ => Err(type_error(format!(
            "{method}(): must be str, not {}",
            type_name(value)
        ))),
    }
}

/// A separator for `split`, `partition` and the like: a non-empty `str`.
fn separator<'a>(method: &str, value: &'a Value) -> Result<&'a str, Error> {
    let Some(sep) = value.as_str().filter(|_| value.kind() == ValueKind::String) else {
        let or_none = if method.ends_with("split") {
            " or None"
        } else {
            ""
        };
        return Err(type_error(format!(
            "must be str{or_none}, not {}",
            type_name(value)
        )));
    };
    if sep.is_empty() {
        return Err(type_error("ValueError: empty separator"));
    }
    Ok(sep)
}

/// CPython's `ADJUST_INDICES` for a string of `len` characters.
fn adjust(start: Option<i64>, end: Option<i64>, len: i64) -> (i64, i64) {
    let mut end = end.unwrap_or(len);
    if end > len {
        end = len;
    } else if end < 0 {
        end = (end + len).max(0);
    }
    let mut start = start.unwrap_or(0);
    if start < 0 {
        start = (start + len).max(0);
    }
    (start, end)
}

/// The byte offset of character `n` of `s` (its length past the end).
fn byte_at(s: &str, n: i64) -> usize {
    s.char_indices()
        .nth(n.max(0) as usize)
        .map_or(s.len(), |(b, _)| b)
}

fn char_len(s: &str) -> i64 {
    s.chars().count() as i64
}

/// The characters `start..end` of `s` (already adjusted, `start <= end <= len`).
fn char_slice(s: &str, start: i64, end: i64) -> &str {
    let from = byte_at(s, start);
    let to = from + byte_at(&s[from..], end - start);
    &s[from..to]
}

/// Which of `find`, `rfind`, `index`, `rindex`, `count` runs.
#[derive(Clone, Copy, PartialEq)]
enum Search {
    Find,
    RFind,
    Count,
}

/// `s.find(sub[, start[, end]])` and its relatives: the character index (-1 when absent) or the
/// count of non-overlapping occurrences.
fn search(s: &str, args: &[Option<Value>], method: &str, how: Search) -> Result<i64, Error> {
    let sub = str_arg(method, args[0].as_ref().expect("required"))?;
    let (start, end) = (slice_arg(args[1].as_ref())?, slice_arg(args[2].as_ref())?);
    let (offset, hay) = if start.is_none() && end.is_none() {
        (0, s)
    } else {
        let (start, end) = adjust(start, end, char_len(s));
        if end - start < char_len(sub) {
            return Ok(if how == Search::Count { 0 } else { -1 });
        }
        (start, char_slice(s, start, end))
    };
    let at = |b: Option<usize>| b.map_or(-1, |b| offset + char_len(&hay[..b]));
    Ok(match how {
        Search::Find => at(hay.find(sub)),
        Search::RFind => at(hay.rfind(sub)),
        Search::Count if sub.is_empty() => char_len(hay) + 1,
        Search::Count => hay.matches(sub).count() as i64,
    })
}

/// `startswith`/`endswith(prefix[, start[, end]])`: the prefix is a `str` or a tuple of them.
fn tail_match(s: &str, args: &[Option<Value>], method: &str, at_end: bool) -> Result<bool, Error> {
    let what = args[0].as_ref().expect("required");
    let (start, end) = (slice_arg(args[1].as_ref())?, slice_arg(args[2].as_ref())?);
    let ranged = start.is_some() || end.is_some();
    let one = |p: &str| {
        if !ranged {
            return if at_end {
                s.ends_with(p)
            } else {
                s.starts_with(p)
            };
        }
        let (start, end) = adjust(start, end, char_len(s));
        let plen = char_len(p);
        if end - plen < start {
            return false;
        }
        let window = char_slice(s, start, end);
        if at_end {
            window.ends_with(p)
        } else {
            window.starts_with(p)
        }
    };
    if what.kind() == ValueKind::String {
        return Ok(one(what.as_str().unwrap_or_default()));
    }
    if !what.is_tuple() {
        return Err(type_error(format!(
            "{method} first arg must be str or a tuple of str, not {}",
            type_name(what)
        )));
    }
    for item in what.try_iter()? {
        let Some(p) = item.as_str().filter(|_| item.kind() == ValueKind::String) else {
            return Err(type_error(format!(
                "tuple for {method} must only contain str, not {}",
                type_name(&item)
            )));
        };
        if one(p) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A `maxsplit` argument: absent is -1 (no limit).
fn maxsplit_arg(value: Option<&Value>) -> Result<i64, Error> {
    value.map_or(Ok(-1), index_arg)
}

fn strings(items: impl IntoIterator<Item = impl Into<Value>>) -> Value {
    items.into_iter().map(Into::into).collect()
}

/// A padded result of `len` bytes: refused when it alone would pass the output limit.
fn check_size(method: &str, len: u128) -> Result<(), Error> {
    super::env::check_result_size(method, usize::try_from(len).unwrap_or(usize::MAX))
}

/// `center`/`ljust`/`rjust(width[, fillchar])`.
fn justify(s: &str, args: &[Option<Value>], method: &str) -> Result<String, Error> {
    let width = index_arg(args[0].as_ref().expect("required"))?;
    let fill = match &args[1] {
        None => ' ',
        Some(f) => {
            let Some(f) = f.as_str().filter(|_| f.kind() == ValueKind::String) else {
                return Err(type_error(format!(
                    "The fill character must be a unicode character, not {}",
                    type_name(f)
                )));
            };
            let mut chars = f.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => c,
                _ => {
                    return Err(type_error(
                        "The fill character must be exactly one character long",
                    ))
                }
            }
        }
    };
    let len = char_len(s);
    if width <= len {
        return Ok(s.to_string());
    }
    let margin = width - len;
    check_size(
        method,
        s.len() as u128 + margin as u128 * fill.len_utf8() as u128,
    )?;
    let left = match method {
        "ljust" => 0,
        "rjust" => margin,
        // CPython's `pad` for center: odd margins put the extra character left when width is odd.
        _ => margin / 2 + (margin & width & 1),
    };
    let mut out = String::with_capacity(s.len() + margin as usize * fill.len_utf8());
    out.extend(std::iter::repeat_n(fill, left as usize));
    out.push_str(s);
    out.extend(std::iter::repeat_n(fill, (margin - left) as usize));
    Ok(out)
}

/// `s.zfill(width)`: zeros on the left, after a leading sign.
fn zfill(s: &str, width: i64) -> Result<String, Error> {
    let len = char_len(s);
    if width <= len {
        return Ok(s.to_string());
    }
    let fill = (width - len) as usize;
    check_size("zfill", s.len() as u128 + fill as u128)?;
    let (sign, digits) = match s.as_bytes().first() {
        Some(b'+' | b'-') => s.split_at(1),
        _ => ("", s),
    };
    let mut out = String::with_capacity(s.len() + fill);
    out.push_str(sign);
    out.extend(std::iter::repeat_n('0', fill));
    out.push_str(digits);
    Ok(out)
}

/// `s.expandtabs(tabsize)`: each tab to the next multiple of `tabsize` columns, counted from the
/// last `\n` or `\r`; a tabsize of 0 or less removes tabs.
fn expandtabs(s: &str, tabsize: i64) -> Result<String, Error> {
    let step = |col: u128| -> u128 {
        if tabsize > 0 {
            tabsize as u128 - col % tabsize as u128
        } else {
            0
        }
    };
    let (mut col, mut total) = (0u128, 0u128);
    for c in s.chars() {
        if c == '\t' {
            let n = step(col);
            col += n;
            total += n;
        } else {
            col = if c == '\n' || c == '\r' { 0 } else { col + 1 };
            total += c.len_utf8() as u128;
        }
    }
    check_size("expandtabs", total)?;
    let mut out = String::with_capacity(total as usize);
    let mut col = 0u128;
    for c in s.chars() {
        if c == '\t' {
            let n = step(col);
            col += n;
            out.extend(std::iter::repeat_n(' ', n as usize));
        } else {
            out.push(c);
            col = if c == '\n' || c == '\r' { 0 } else { col + 1 };
        }
    }
    Ok(out)
}

/// The methods [`call`] answers.
const METHODS: &[&str] = &[
    "find",
    "rfind",
    "index",
    "rindex",
    "count",
    "startswith",
    "endswith",
    "split",
    "rsplit",
    "partition",
    "rpartition",
    "center",
    "ljust",
    "rjust",
    "zfill",
    "removeprefix",
    "removesuffix",
    "expandtabs",
    "casefold",
    "swapcase",
    "istitle",
    "islower",
    "isupper",
];

/// `Some` when `method` is one of this module's; `None` hands the call on to `pycompat`.
pub fn call(s: &str, method: &str, args: &[Value]) -> Option<Result<Value, Error>> {
    if !METHODS.contains(&method) {
        return None;
    }
    let p = |names: &[&str], required: usize| method_args(method, args, names, required, false);
    let range = &["sub", "start", "end"];
    Some((|| -> Result<Value, Error> {
        Ok(match method {
            "find" | "rfind" | "index" | "rindex" | "count" => {
                let how = match method {
                    "find" | "index" => Search::Find,
                    "count" => Search::Count,
                    _ => Search::RFind,
                };
                let at = search(s, &p(range, 1)?, method, how)?;
                if at < 0 && method.ends_with("index") {
                    return Err(type_error("ValueError: substring not found"));
                }
                Value::from(at)
            }
            "startswith" | "endswith" => Value::from(tail_match(
                s,
                &p(&["prefix", "start", "end"], 1)?,
                method,
                method == "endswith",
            )?),
            "split" | "rsplit" => {
                let a = method_args(method, args, &["sep", "maxsplit"], 0, true)?;
                let maxsplit = maxsplit_arg(a[1].as_ref())?;
                let limit = usize::try_from(maxsplit).ok().map(|n| n.saturating_add(1));
                match a[0].as_ref().filter(|v| !v.is_none()) {
                    None if method == "split" => strings(pystr::split_whitespace(s, maxsplit)),
                    None => strings(pystr::rsplit_whitespace(s, maxsplit)),
                    Some(sep) => {
                        let sep = separator(method, sep)?;
                        match (method, limit) {
                            ("split", None) => strings(s.split(sep)),
                            ("split", Some(n)) => strings(s.splitn(n, sep)),
                            (_, None) => {
                                strings(s.rsplit(sep).collect::<Vec<_>>().into_iter().rev())
                            }
                            (_, Some(n)) => {
                                strings(s.rsplitn(n, sep).collect::<Vec<_>>().into_iter().rev())
                            }
                        }
                    }
                }
            }
            "partition" | "rpartition" => {
                let a = p(&["sep"], 1)?;
                let sep = separator(method, a[0].as_ref().expect("required"))?;
                let found = if method == "partition" {
                    s.find(sep)
                } else {
                    s.rfind(sep)
                };
                let parts = match found {
                    Some(b) => [&s[..b], sep, &s[b + sep.len()..]],
                    None if method == "partition" => [s, "", ""],
                    None => ["", "", s],
                };
                Value::from(Tuple::from(parts.map(Value::from)))
            }
            "center" | "ljust" | "rjust" => {
                Value::from(justify(s, &p(&["width", "fillchar"], 1)?, method)?)
            }
            "zfill" => Value::from(zfill(
                s,
                index_arg(p(&["width"], 1)?[0].as_ref().expect("required"))?,
            )?),
            "removeprefix" | "removesuffix" => {
                let a = p(&["affix"], 1)?;
                let affix = str_arg(method, a[0].as_ref().expect("required"))?;
                Value::from(if method == "removeprefix" {
                    s.strip_prefix(affix).unwrap_or(s)
                } else {
                    s.strip_suffix(affix).unwrap_or(s)
                })
            }
            "expandtabs" => {
                let a = method_args(method, args, &["tabsize"], 0, true)?;
                Value::from(expandtabs(s, a[0].as_ref().map_or(Ok(8), index_arg)?)?)
            }
            "casefold" | "swapcase" | "istitle" | "islower" | "isupper" => {
                p(&[], 0)?;
                match method {
                    "casefold" => Value::from(pystr::casefold(s)),
                    "swapcase" => Value::from(pystr::swapcase(s)),
                    "istitle" => Value::from(pystr::is_title(s)),
                    "islower" => Value::from(pystr::is_lower(s)),
                    _ => Value::from(pystr::is_upper(s)),
                }
            }
            _ => unreachable!("METHODS lists {method}"),
        })
    })())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values: what CPython 3.11 returns for the same calls (the Python tests compare
    // many more against Python itself).
    fn call_ok(s: &str, method: &str, args: &[Value]) -> String {
        match call(s, method, args) {
            Some(Ok(v)) => super::super::pyjson::py_str(&v),
            other => panic!("{method}: {other:?}"),
        }
    }

    #[test]
    fn methods_are_pythons() {
        assert_eq!(
            call_ok("ééabcabc", "find", &[Value::from("b"), Value::from(4)]),
            "6"
        );
        assert_eq!(
            call_ok("abc", "find", &[Value::from(""), Value::from(4)]),
            "-1"
        );
        assert_eq!(
            call_ok(
                "aaaa",
                "count",
                &[Value::from(""), Value::from(1), Value::from(3)]
            ),
            "3"
        );
        assert_eq!(
            call_ok(
                "abc",
                "endswith",
                &[Value::from("b"), Value::from(0), Value::from(-1)]
            ),
            "True"
        );
        assert_eq!(
            call_ok("abc", "startswith", &[Value::from(""), Value::from(4)]),
            "False"
        );
        assert_eq!(
            call_ok("a,b,c", "rsplit", &[Value::from(","), Value::from(1)]),
            "['a,b', 'c']"
        );
        assert_eq!(
            call_ok("a=b=c", "rpartition", &[Value::from("=")]),
            "('a=b', '=', 'c')"
        );
        assert_eq!(call_ok("-42", "zfill", &[Value::from(6)]), "-00042");
        assert_eq!(
            call_ok("abc", "center", &[Value::from(6), Value::from("-")]),
            "-abc--"
        );
        assert_eq!(
            call_ok("ab", "center", &[Value::from(7), Value::from("*")]),
            "***ab**"
        );
        assert_eq!(
            call_ok("a\tbc\r\tx", "expandtabs", &[Value::from(4)]),
            "a   bc\r    x"
        );
        assert!(call("abc", "upper", &[]).is_none(), "left to pycompat");
    }

    #[test]
    fn bad_arguments_fail_as_in_python() {
        for (method, args) in [
            ("index", vec![Value::from("d")]),
            ("split", vec![Value::from("")]),
            ("partition", vec![Value::from("")]),
            ("find", vec![Value::from(1)]),
            ("find", vec![Value::from("a"), Value::from(1.5)]),
            ("center", vec![Value::from(5), Value::from("ab")]),
            ("zfill", vec![Value::from(2.0)]),
            ("startswith", vec![Value::from(vec![Value::from("a")])]),
        ] {
            assert!(
                matches!(call("abc", method, &args), Some(Err(_))),
                "{method}"
            );
        }
    }

    #[test]
    fn padding_past_the_output_limit_is_refused_before_it_is_built() {
        let _limit = super::super::env::limit_output(1 << 20);
        for method in ["center", "ljust", "rjust", "zfill"] {
            let err = call("x", method, &[Value::from(1i64 << 40)])
                .unwrap()
                .unwrap_err();
            assert!(std::error::Error::source(&err)
                .is_some_and(|s| s.is::<super::super::env::OutputLimitReached>()));
        }
        let err = call("\t\t", "expandtabs", &[Value::from(1i64 << 40)])
            .unwrap()
            .unwrap_err();
        assert!(err.to_string().contains("output limit"), "{err}");
    }
}
