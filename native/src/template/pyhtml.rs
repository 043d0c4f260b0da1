//! Jinja2's HTML and URL filters, which follow markupsafe and Python's `html` and `urllib`:
//!
//! - `escape`/`e`: markupsafe writes `&#39;` and `&#34;`, minijinja `&#x27;` and `&quot;`, and
//!   minijinja escapes `/` too; `forceescape` (missing in minijinja) escapes Markup as well.
//! - `striptags`: markupsafe removes `<!--...-->` and `<...>` (an unclosed one ends the removal),
//!   joins Python's whitespace runs with one space, then `html.unescape`s every HTML5 named and
//!   numeric reference. minijinja-contrib's state machine drops the text after an unclosed `<`
//!   (`'a < b'` became `'a'`) and knows four named references.
//! - `xmlattr` and `urlencode` (missing in minijinja): markupsafe-escaped `key="value"` pairs;
//!   `urllib.parse.quote` of the UTF-8 bytes (`/` kept in a string, `+` for spaces in a query).

use std::fmt::Write as _;

use minijinja::value::{Rest, ValueKind, ValueOrKwargs};
use minijinja::{Error, ErrorKind, Value};

use super::html_entities::{HTML5, INVALID_CHARREFS, INVALID_CODEPOINTS};
use super::pyfilters::{params, soft_str};
use super::pystr;

/// markupsafe's `escape` of a text: `&`, `<`, `>`, `'`, `"` as `&amp;`, `&lt;`, `&gt;`, `&#39;`,
/// `&#34;`.
fn escape_text(text: &str) -> String {
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
    out
}

/// markupsafe's `escape`: a Markup (safe) string stays as it is, anything else is `str()`ed and
/// escaped.
pub fn escape(value: &Value) -> Value {
    if value.is_safe() {
        return value.clone();
    }
    Value::from_safe_string(escape_text(&soft_str(value)))
}

/// `do_forceescape(value)`: escaped even when already Markup.
pub fn forceescape(value: &Value) -> Value {
    let text = match value.as_str() {
        Some(s) if value.kind() == ValueKind::String => s.to_string(),
        _ => soft_str(value),
    };
    Value::from_safe_string(escape_text(&text))
}

/// `do_striptags(value)`: `Markup(str(value)).striptags()` (markupsafe 3).
pub fn striptags(value: &Value) -> Value {
    let text = soft_str(value);
    let mut kept = String::with_capacity(text.len());
    let mut pos = 0;
    while let Some(start) = text[pos..].find('<').map(|i| pos + i) {
        let end = if text[start..].starts_with("<!--") {
            text[start + 4..].find("-->").map(|i| start + 4 + i + 3)
        } else {
            text[start..].find('>').map(|i| start + i + 1)
        };
        let Some(end) = end else {
            break;
        };
        kept.push_str(&text[pos..start]);
        pos = end;
    }
    kept.push_str(&text[pos..]);
    let collapsed = pystr::split_whitespace(&kept, -1).join(" ");
    Value::from(unescape(&collapsed))
}

/// Python's `html.unescape`: `&name;`, legacy `&name` without `;`, `&#N;` and `&#xN;` (the `;`
/// optional), with HTML5's replacements for invalid numeric references.
pub fn unescape(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        match reference(after) {
            Some((len, replacement)) => {
                out.push_str(&replacement);
                rest = &after[len..];
            }
            None => {
                out.push('&');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The reference after a `&` (`html._charref`): its length and what it becomes.
fn reference(after: &str) -> Option<(usize, String)> {
    let bytes = after.as_bytes();
    if bytes.first() == Some(&b'#') {
        let hex = matches!(bytes.get(1), Some(b'x' | b'X'));
        let start = if hex { 2 } else { 1 };
        let digits = bytes[start..]
            .iter()
            .take_while(|b| {
                if hex {
                    b.is_ascii_hexdigit()
                } else {
                    b.is_ascii_digit()
                }
            })
            .count();
        if digits == 0 {
            // `&#x;` and `&#;`: no reference (the named form excludes `#`).
            return None;
        }
        let mut len = start + digits;
        if bytes.get(len) == Some(&b';') {
            len += 1;
        }
        let radix = if hex { 16 } else { 10 };
        // Python's int is exact; anything past U+10FFFF is U+FFFD, so saturating is enough.
        let num = after[start..start + digits].bytes().fold(0u64, |n, d| {
            n.saturating_mul(radix)
                .saturating_add((d as char).to_digit(radix as u32).unwrap_or(0) as u64)
        });
        return Some((len, numeric_reference(num)));
    }
    // `[^\t\n\f <&#;]{1,32};?`
    let mut end = 0;
    for (count, (i, c)) in after.char_indices().enumerate() {
        if count == 32 || matches!(c, '\t' | '\n' | '\x0c' | ' ' | '<' | '&' | '#' | ';') {
            break;
        }
        end = i + c.len_utf8();
    }
    if end == 0 {
        return None;
    }
    let len = if after[end..].starts_with(';') {
        end + 1
    } else {
        end
    };
    let name = &after[..len];
    if let Some(value) = named(name) {
        return Some((len, value.to_string()));
    }
    // The longest name that is a prefix (at least two characters), the rest kept as text.
    let boundaries: Vec<usize> = name.char_indices().map(|(i, _)| i).skip(2).collect();
    for &cut in boundaries.iter().rev() {
        if let Some(value) = named(&name[..cut]) {
            return Some((len, format!("{value}{}", &name[cut..])));
        }
    }
    None
}

fn named(name: &str) -> Option<&'static str> {
    HTML5
        .binary_search_by(|(n, _)| n.cmp(&name))
        .ok()
        .map(|i| HTML5[i].1)
}

fn numeric_reference(num: u64) -> String {
    if let Ok(i) = INVALID_CHARREFS.binary_search_by(|(n, _)| u64::from(*n).cmp(&num)) {
        return INVALID_CHARREFS[i].1.to_string();
    }
    if (0xD800..=0xDFFF).contains(&num) || num > 0x10FFFF {
        return '\u{fffd}'.to_string();
    }
    if INVALID_CODEPOINTS.binary_search(&(num as u32)).is_ok() {
        return String::new();
    }
    char::from_u32(num as u32)
        .map(String::from)
        .unwrap_or_default()
}

/// `do_xmlattr(d, autospace=True)`: ` key="value"` for each item whose value is neither none nor
/// undefined, both escaped; a key holding ASCII whitespace, `/`, `>` or `=` is an error.
pub fn xmlattr(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let autospace = params("xmlattr", &["autospace"], args)?
        .remove(0)
        .is_none_or(|v| v.is_true());
    if value.kind() != ValueKind::Map {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("xmlattr: expected a mapping, got {}", value.kind()),
        ));
    }
    let mut items = Vec::new();
    for key in value.try_iter()? {
        let item = value.get_item(&key)?;
        if item.is_none() || item.is_undefined() {
            continue;
        }
        let Some(name) = key.as_str().filter(|_| key.kind() == ValueKind::String) else {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "xmlattr: attribute names must be strings",
            ));
        };
        if name.chars().any(|c| {
            matches!(
                c,
                ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c' | '/' | '>' | '='
            )
        }) {
            let mut quoted = String::new();
            pystr::write_repr(name, &mut quoted);
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("Invalid character in attribute name: {quoted}"),
            ));
        }
        let escaped = escape(&item);
        items.push(format!(
            "{}=\"{}\"",
            escape_text(name),
            escaped.as_str().unwrap_or_default()
        ));
    }
    let mut out = items.join(" ");
    if autospace && !out.is_empty() {
        out.insert(0, ' ');
    }
    Ok(Value::from(out))
}

/// Jinja2's `url_quote(obj, for_qs)`: `quote_from_bytes` of `str(obj)` in UTF-8, keeping letters,
/// digits and `_.-~` (and `/` outside a query), with `+` for spaces in a query.
fn url_quote(value: &Value, for_qs: bool) -> String {
    let text = soft_str(value);
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' | b'~' => {
                out.push(b as char)
            }
            b'/' if !for_qs => out.push('/'),
            b' ' if for_qs => out.push('+'),
            b => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

/// `do_urlencode(value)`: a string (or anything not iterable) quoted; a dict's items or an
/// iterable of pairs as `key=value` joined with `&`.
pub fn urlencode(value: &Value) -> Result<Value, Error> {
    let pairs: Vec<(Value, Value)> = match value.kind() {
        ValueKind::String | ValueKind::None | ValueKind::Bool | ValueKind::Number => {
            return Ok(Value::from(url_quote(value, false)))
        }
        ValueKind::Map => value
            .try_iter()?
            .map(|k| {
                let v = value.get_item(&k).unwrap_or_default();
                (k, v)
            })
            .collect(),
        _ => {
            let mut pairs = Vec::new();
            for item in value.try_iter()? {
                // `for k, v in items` unpacks each item.
                let parts: Vec<Value> = item.try_iter()?.collect();
                match <[Value; 2]>::try_from(parts) {
                    Ok([k, v]) => pairs.push((k, v)),
                    Err(parts) => {
                        return Err(Error::new(
                            ErrorKind::InvalidOperation,
                            format!("urlencode: expected pairs, got {} values", parts.len()),
                        ))
                    }
                }
            }
            pairs
        }
    };
    let encoded: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", url_quote(k, true), url_quote(v, true)))
        .collect();
    Ok(Value::from(encoded.join("&")))
}
