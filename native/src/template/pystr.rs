//! Python's `str` rules where Rust's differ: which characters are whitespace, line breaks,
//! printable or word characters, and how `repr` quotes a string. Templates reach these through
//! `.strip()`, `.split()`, `.splitlines()`, `|trim`, `|wordcount` and lists printed with `{{ }}`;
//! each difference is a different prompt.
//!
//! Whitespace and line breaks are fixed sets (CPython's `_PyUnicode_IsWhitespace` and
//! `_PyUnicode_IsLinebreak`). Printable and word characters come from tables generated from
//! CPython 3.11's Unicode 14.0 data (`unicode_tables.py`): transformers runs on that data, and a
//! character Unicode assigned later is unprintable to it even if Rust knows it.

use std::fmt::Write as _;

use super::unicode_tables::{
    ALPHA, CASED, CASEFOLD, CASE_IGNORABLE, DECIMAL_ZEROS, DIGIT, ID_CONTINUE, ID_START,
    NOT_PRINTABLE, NUMERIC, TITLE, TITLECASE, WORD,
};

/// `str.isspace()`: Unicode White_Space plus U+001C..U+001F, which Python counts (as separators of
/// the bidirectional class B/S) and Rust's `char::is_whitespace` does not.
pub fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `str.splitlines()`'s line boundaries (`\r\n` counts as one, see [`splitlines`]).
pub fn is_line_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r'
            | '\u{b}'
            | '\u{c}'
            | '\u{1c}'
            | '\u{1d}'
            | '\u{1e}'
            | '\u{85}'
            | '\u{2028}'
            | '\u{2029}'
    )
}

fn in_table(table: &[(char, char)], c: char) -> bool {
    table
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// `str.isprintable()` for one character.
pub fn is_printable(c: char) -> bool {
    !in_table(NOT_PRINTABLE, c)
}

/// A character of `\w` in Python's `re` (what Jinja2's `wordcount` counts runs of).
pub fn is_word(c: char) -> bool {
    in_table(WORD, c)
}

/// The value of a decimal digit of any script (`unicodedata.decimal(c)`): its place in one of the
/// runs of ten that start at a zero.
pub fn decimal_value(c: char) -> Option<u32> {
    let zero = DECIMAL_ZEROS.partition_point(|&z| z <= c);
    let offset = (c as u32) - (DECIMAL_ZEROS[zero.checked_sub(1)?] as u32);
    (offset < 10).then_some(offset)
}

/// `str.isdecimal()` for one character (and `\d` in Python's `re`).
pub fn is_decimal(c: char) -> bool {
    decimal_value(c).is_some()
}

/// The `str.is...()` character-class tests Rust answers otherwise (`char::is_alphabetic` takes
/// in combining vowel signs, `char::is_numeric` misses CJK numerals and takes in none of Python's
/// digit/decimal split, `char::is_whitespace` misses U+001C..U+001F), as Python does; `None`
/// for other names.
pub fn class_test(method: &str, s: &str) -> Option<bool> {
    let all = |test: fn(char) -> bool| !s.is_empty() && s.chars().all(test);
    Some(match method {
        "isspace" => all(is_space),
        "isalpha" => all(|c| in_table(ALPHA, c)),
        // `isalnum()` is what `\w` is without the underscore.
        "isalnum" => all(|c| c != '_' && in_table(WORD, c)),
        "isdecimal" => all(is_decimal),
        "isdigit" => all(|c| in_table(DIGIT, c)),
        "isnumeric" => all(|c| in_table(NUMERIC, c)),
        "isprintable" => s.chars().all(is_printable),
        "isidentifier" => {
            let mut chars = s.chars();
            chars.next().is_some_and(|c| in_table(ID_START, c))
                && chars.all(|c| in_table(ID_CONTINUE, c))
        }
        _ => return None,
    })
}

/// `s.strip()` with no argument.
pub fn strip(s: &str) -> &str {
    s.trim_matches(is_space)
}

/// `s.lstrip()` with no argument.
pub fn lstrip(s: &str) -> &str {
    s.trim_start_matches(is_space)
}

/// `s.rstrip()` with no argument.
pub fn rstrip(s: &str) -> &str {
    s.trim_end_matches(is_space)
}

/// `s.split(None, maxsplit)`: runs of whitespace separate, none at either end; after `maxsplit`
/// splits (negative: no limit) the rest is one item with only its leading whitespace removed.
pub fn split_whitespace(s: &str, maxsplit: i64) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = lstrip(s);
    while !rest.is_empty() {
        if maxsplit >= 0 && out.len() as i64 >= maxsplit {
            out.push(rest);
            break;
        }
        match rest.find(is_space) {
            Some(end) => {
                out.push(&rest[..end]);
                rest = lstrip(&rest[end..]);
            }
            None => {
                out.push(rest);
                break;
            }
        }
    }
    out
}

/// `s.rsplit(None, maxsplit)`: as [`split_whitespace`] from the right; the rest is one item
/// with only its trailing whitespace removed.
pub fn rsplit_whitespace(s: &str, maxsplit: i64) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = rstrip(s);
    while !rest.is_empty() {
        if maxsplit >= 0 && out.len() as i64 >= maxsplit {
            out.push(rest);
            break;
        }
        match rest.rfind(is_space) {
            Some(at) => {
                let space = rest[at..].chars().next().map_or(1, char::len_utf8);
                out.push(&rest[at + space..]);
                rest = rstrip(&rest[..at]);
            }
            None => {
                out.push(rest);
                break;
            }
        }
    }
    out.reverse();
    out
}

/// `s.splitlines(keepends)`: splits at every Python line boundary, `\r\n` counting as one.
pub fn splitlines(s: &str, keepends: bool) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if !is_line_break(c) {
            continue;
        }
        let mut end = i + c.len_utf8();
        if c == '\r' {
            if let Some(&(j, '\n')) = chars.peek() {
                chars.next();
                end = j + 1;
            }
        }
        lines.push(&s[start..if keepends { end } else { i }]);
        start = end;
    }
    if start < s.len() {
        lines.push(&s[start..]);
    }
    lines
}

/// Jinja2's `wordcount`: the number of matches of `\w+`.
pub fn word_count(s: &str) -> usize {
    let mut count = 0;
    let mut in_word = false;
    for c in s.chars() {
        let word = is_word(c);
        if word && !in_word {
            count += 1;
        }
        in_word = word;
    }
    count
}

/// `s.islower()`: a cased character, and no uppercase or titlecase one.
pub fn is_lower(s: &str) -> bool {
    all_cased_are(s, char::is_lowercase)
}

/// `s.isupper()`: a cased character, and no lowercase or titlecase one.
pub fn is_upper(s: &str) -> bool {
    all_cased_are(s, char::is_uppercase)
}

/// Whether `s` has a cased character and `want` holds for each (cased is Lowercase, Uppercase or
/// titlecase; the table is CPython's, the Lowercase/Uppercase properties Rust's).
fn all_cased_are(s: &str, want: fn(char) -> bool) -> bool {
    let mut cased = false;
    for c in s.chars().filter(|&c| is_cased(c)) {
        if !want(c) {
            return false;
        }
        cased = true;
    }
    cased
}

fn is_cased(c: char) -> bool {
    in_table(CASED, c)
}

fn is_case_ignorable(c: char) -> bool {
    in_table(CASE_IGNORABLE, c)
}

/// `s.title()`: a character after a cased one is lowercased, any other titlecased (`ǆ` is `ǅ`,
/// `ß` is `Ss`, where Rust has only uppercase). minijinja's `title` capitalizes after any
/// non-alphanumeric character instead (`they're` vs Python's `They'Re`).
pub fn title(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut previous_cased = false;
    for (i, &c) in chars.iter().enumerate() {
        if previous_cased {
            if c == '\u{3a3}' {
                out.push(if final_sigma(&chars, i) { 'ς' } else { 'σ' });
            } else {
                out.extend(c.to_lowercase());
            }
        } else {
            match TITLE.binary_search_by(|(k, _)| k.cmp(&c)) {
                Ok(at) => out.push_str(TITLE[at].1),
                Err(_) => out.extend(c.to_uppercase()),
            }
        }
        previous_cased = is_cased(c);
    }
    out
}

/// `s.casefold()`: the full case folding of CPython's tables where it differs from lowercasing
/// (`ß` is `ss`, `ς` is `σ`), lowercase otherwise; no final-sigma rule, as in Python.
pub fn casefold(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match CASEFOLD.binary_search_by(|(k, _)| k.cmp(&c)) {
            Ok(at) => out.push_str(CASEFOLD[at].1),
            Err(_) => out.extend(c.to_lowercase()),
        }
    }
    out
}

/// `s.swapcase()`: uppercase characters lowercased (a capital sigma by the final-sigma rule),
/// lowercase ones uppercased (fully: `ß` is `SS`), titlecase and uncased ones kept.
pub fn swapcase(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &c) in chars.iter().enumerate() {
        if !is_cased(c) {
            out.push(c);
        } else if c.is_uppercase() {
            if c == '\u{3a3}' {
                out.push(if final_sigma(&chars, i) { 'ς' } else { 'σ' });
            } else {
                out.extend(c.to_lowercase());
            }
        } else if c.is_lowercase() {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `s.istitle()`: a cased character, every uppercase or titlecase one after an uncased character
/// and every lowercase one after a cased character.
pub fn is_title(s: &str) -> bool {
    let (mut cased, mut previous_cased) = (false, false);
    for c in s.chars() {
        if c.is_uppercase() || in_table(TITLECASE, c) {
            if previous_cased {
                return false;
            }
            previous_cased = true;
            cased = true;
        } else if c.is_lowercase() {
            if !previous_cased {
                return false;
            }
            previous_cased = true;
            cased = true;
        } else {
            previous_cased = false;
        }
    }
    cased
}

/// Python's Final_Sigma test for the `Σ` at `i`: a cased character before it and none after it,
/// looking through case-ignorable characters on both sides.
fn final_sigma(chars: &[char], i: usize) -> bool {
    let before = chars[..i].iter().rev().find(|c| !is_case_ignorable(**c));
    if !before.is_some_and(|c| is_cased(*c)) {
        return false;
    }
    let after = chars[i + 1..].iter().find(|c| !is_case_ignorable(**c));
    !after.is_some_and(|c| is_cased(*c))
}

/// `repr(s)`: single quotes unless the text holds `'` and no `"`; backslash, the quote, `\t`,
/// `\n`, `\r` escaped by name, other unprintable characters as `\xNN`, `\uNNNN` or `\UNNNNNNNN`.
pub fn write_repr(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x7f && c >= ' ' => out.push(c),
            c if (c as u32) < 0x100 && !is_printable(c) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if is_printable(c) => out.push(c),
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values are what CPython 3.11 returns for the same calls (language facts).

    #[test]
    fn whitespace_is_pythons() {
        assert_eq!(strip("\u{1c}\u{1f} a\u{85}\u{3000}"), "a");
        assert_eq!(lstrip("\u{1e}a "), "a ");
        assert_eq!(rstrip(" a\u{1d}"), " a");
        // U+180E and U+200B are not whitespace to Python (nor to Rust).
        assert_eq!(strip("\u{180e}a\u{200b}"), "\u{180e}a\u{200b}");
        assert_eq!(
            split_whitespace(" a\u{1f}b  c\u{a0}d ", -1),
            ["a", "b", "c", "d"]
        );
        assert_eq!(split_whitespace("  a b  c  ", 1), ["a", "b  c  "]);
        assert_eq!(split_whitespace("a b", 0), ["a b"]);
        assert!(split_whitespace(" \u{1c} ", -1).is_empty());
    }

    #[test]
    fn lines_are_pythons() {
        assert_eq!(
            splitlines("a\r\nb\u{1c}c\u{85}d\u{2028}e\u{b}f\r", false),
            ["a", "b", "c", "d", "e", "f"]
        );
        assert_eq!(
            splitlines("a\r\nb\u{1e}\n", true),
            ["a\r\n", "b\u{1e}", "\n"]
        );
        assert!(splitlines("", false).is_empty());
        assert_eq!(splitlines("\n\n", false), ["", ""]);
    }

    #[test]
    fn words_are_pythons() {
        // re.findall(r'\w+', ...) in Python 3.11: combining vowel signs and the virama are not
        // \w, so Devanagari words split; '_' and digits are.
        assert_eq!(word_count("hello, wörld_1 २ foo-bar"), 5);
        assert_eq!(word_count("नमस्ते"), 2);
        assert_eq!(word_count(" \u{1f} "), 0);
    }

    #[test]
    fn title_is_pythons() {
        assert_eq!(
            title("ǆemal they're 1st ßa ﬁsh ΣΑΣ ΣΑΣ. ᾳb <b>x</b>"),
            "ǅemal They'Re 1St Ssa Fish Σας Σας. ᾼb <B>X</B>"
        );
        assert_eq!(title("aΣ'b"), "Aσ'B");
    }

    #[test]
    fn case_rules_are_pythons() {
        assert_eq!(casefold("Straße ΣΑΣ ﬁ ꭰ İ"), "strasse σασ fi Ꭰ i\u{307}");
        assert_eq!(swapcase("ǅemal ΣΑΣ ß Hello"), "ǅEMAL σας SS hELLO");
        assert!(is_title("Hello World ǅemal 1St"));
        assert!(!is_title("HEllo") && !is_title("") && !is_title("1 2"));
        assert_eq!(rsplit_whitespace(" a\u{1f}b  c ", 1), [" a\u{1f}b", "c"]);
        assert_eq!(rsplit_whitespace("a b", 0), ["a b"]);
        assert_eq!(rsplit_whitespace("  a b  c  ", -1), ["a", "b", "c"]);
        assert!(rsplit_whitespace(" \u{1c} ", 3).is_empty());
    }

    #[test]
    fn repr_is_pythons() {
        let r = |s: &str| {
            let mut out = String::new();
            write_repr(s, &mut out);
            out
        };
        assert_eq!(r("it's"), "\"it's\"");
        assert_eq!(r("'\""), "'\\'\"'");
        assert_eq!(r("a\\b\n\t\r"), "'a\\\\b\\n\\t\\r'");
        assert_eq!(
            r("\u{0}\u{1f}\u{7f}\u{85}\u{a0}\u{ad}"),
            "'\\x00\\x1f\\x7f\\x85\\xa0\\xad'"
        );
        assert_eq!(
            r("👨\u{200d}👩 \u{2028}\u{feff}\u{3000}"),
            "'👨\\u200d👩 \\u2028\\ufeff\\u3000'"
        );
        // Private use and unassigned (in Unicode 14) code points, beyond the BMP.
        assert_eq!(r("\u{f0000}\u{e0001}é中"), "'\\U000f0000\\U000e0001é中'");
    }
}
