//! Source rewrites where Jinja2 (as transformers runs it) and minijinja differ, each named after
//! the templates that need it. The reference backend applies the same rewrites
//! (`sidecar/reference/template_analysis.py`); a test checks both produce the same text for every
//! template in ../shared/models.
//!
//! Line breaks: Jinja2's lexer splits the whole source at `\r\n`, `\r` and `\n` and joins it with
//! `\n` before it reads a token, so template text, string literals, raw blocks and tags all see
//! `\n` (an escaped `'\r'` in a literal is decoded later and stays a carriage return). minijinja
//! keeps the source's bytes: a template saved with Windows line endings rendered `\r\n` where
//! transformers writes `\n`, and lstrip_blocks did not strip after a lone `\r`. The source is
//! normalized the same way first; it is left alone (borrowed) when it holds no `\r`.
//!
//! `{% generation %}...{% endgeneration %}`: transformers registers this tag to find the assistant's
//! tokens for training masks; rendering just emits the body. Templates that use it: LFM2.5,
//! poolside Laguna, and others in llama.cpp's collection. The tag pair becomes
//! `{% if true %}...{% endif %}`, keeping each delimiter's whitespace control (`-`, `+`), which
//! trims exactly as the original block tags do under trim_blocks and lstrip_blocks.
//!
//! `{% for x in EXPR %}` over `none`: Python raises `TypeError: 'NoneType' object is not iterable`,
//! minijinja loops zero times. Tool-use templates (Hermes 2 Pro / 3, Command R+) loop over `tools`
//! unconditionally, so transformers refuses a request without tools while minijinja would render a
//! prompt with an empty tool list. Each loop becomes
//! `{% for x in ((EXPR) if (EXPR) is not none else sidecar_none_is_not_iterable()) %}`, so that
//! undefined values still loop zero times, as they do in Jinja2.

use std::borrow::Cow;

/// The function the loop guard calls when a loop runs over `none`; it fails like Python does.
pub const NONE_ITERATION_FUNCTION: &str = "sidecar_none_is_not_iterable";

/// Rewrites `source` when it needs it (line breaks, then generation blocks); borrows it unchanged
/// otherwise.
pub fn rewrite(source: &str) -> Cow<'_, str> {
    match normalize_newlines(source) {
        Cow::Borrowed(s) => generation_blocks(s),
        Cow::Owned(s) => match generation_blocks(&s) {
            Cow::Owned(rewritten) => Cow::Owned(rewritten),
            Cow::Borrowed(_) => Cow::Owned(s),
        },
    }
}

/// `\r\n` and a lone `\r` as `\n`, as Jinja2's lexer reads the source (see the module docs).
pub fn normalize_newlines(source: &str) -> Cow<'_, str> {
    if memchr::memchr(b'\r', source.as_bytes()).is_none() {
        return Cow::Borrowed(source);
    }
    Cow::Owned(source.replace("\r\n", "\n").replace('\r', "\n"))
}

/// `{% generation %}`/`{% endgeneration %}` as `{% if true %}`/`{% endif %}` (see the module docs).
fn generation_blocks(source: &str) -> Cow<'_, str> {
    if !source.contains("generation") {
        return Cow::Borrowed(source);
    }
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    let mut changed = false;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        match generation_tag(tag) {
            Some((len, replacement)) => {
                out.push_str(&replacement);
                rest = &tag[len..];
                changed = true;
            }
            None => {
                out.push_str("{%");
                rest = &tag[2..];
            }
        }
    }
    out.push_str(rest);
    if changed {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(source)
    }
}

/// If `tag` starts with a `generation` or `endgeneration` block tag, its length and replacement.
fn generation_tag(tag: &str) -> Option<(usize, String)> {
    let bytes = tag.as_bytes();
    let mut i = 2;
    let open_ws = match bytes.get(i) {
        Some(c @ (b'-' | b'+')) => {
            i += 1;
            Some(*c as char)
        }
        _ => None,
    };
    while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    let (word, replacement) = if tag[i..].starts_with("endgeneration") {
        ("endgeneration", "endif")
    } else if tag[i..].starts_with("generation") {
        ("generation", "if true")
    } else {
        return None;
    };
    i += word.len();
    let name_end = i;
    while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    // `{% generationfoo %}` is another tag.
    if name_end == i && !matches!(bytes.get(i), Some(b'-' | b'+' | b'%')) {
        return None;
    }
    let close_ws = match bytes.get(i) {
        Some(c @ (b'-' | b'+')) => {
            i += 1;
            Some(*c as char)
        }
        _ => None,
    };
    if !tag[i..].starts_with("%}") {
        return None;
    }
    let open = open_ws.map(String::from).unwrap_or_default();
    let close = close_ws.map(String::from).unwrap_or_default();
    Some((i + 2, format!("{{%{open} {replacement} {close}%}}")))
}

/// Guards every `for` loop's iterable against `none` (see the module docs).
pub fn guard_none_iteration(source: &str) -> Cow<'_, str> {
    if !source.contains("for") {
        return Cow::Borrowed(source);
    }
    let bytes = source.as_bytes();
    let mut out = String::with_capacity(source.len() + 64);
    let mut copied = 0;
    let mut i = 0;
    let mut changed = false;
    while let Some(offset) = source[i..].find('{') {
        let at = i + offset;
        match bytes.get(at + 1) {
            Some(b'#') => i = find_from(source, at + 2, "#}").map_or(source.len(), |e| e + 2),
            Some(b'{') => i = tag_end(source, at + 2, "}}").map_or(source.len(), |e| e + 2),
            Some(b'%') => {
                let (word, after_word) = tag_word(source, at + 2);
                let end = match word {
                    "raw" => raw_end(source, after_word),
                    _ => tag_end(source, after_word, "%}").map(|e| e + 2),
                };
                let Some(end) = end else {
                    break;
                };
                if word == "for" {
                    if let Some((start, stop)) = for_iterable(source, after_word, end - 2) {
                        let expr =
                            source[start..stop].trim_end_matches(|c: char| c.is_ascii_whitespace());
                        let stop = start + expr.len();
                        out.push_str(&source[copied..start]);
                        out.push_str(&format!(
                            "(({expr}) if ({expr}) is not none else {NONE_ITERATION_FUNCTION}())"
                        ));
                        copied = stop;
                        changed = true;
                    }
                }
                i = end;
            }
            _ => i = at + 1,
        }
    }
    if !changed {
        return Cow::Borrowed(source);
    }
    out.push_str(&source[copied..]);
    Cow::Owned(out)
}

fn find_from(source: &str, from: usize, needle: &str) -> Option<usize> {
    source.get(from..)?.find(needle).map(|p| from + p)
}

/// The tag's first word after `{%` and its whitespace control, and where the word ends.
fn tag_word(source: &str, mut i: usize) -> (&str, usize) {
    let bytes = source.as_bytes();
    if matches!(bytes.get(i), Some(b'-' | b'+')) {
        i += 1;
    }
    while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    let start = i;
    while bytes
        .get(i)
        .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
    {
        i += 1;
    }
    (&source[start..i], i)
}

/// Where `close` ends a tag that starts at `i`, skipping string literals.
fn tag_end(source: &str, mut i: usize, close: &str) -> Option<usize> {
    let bytes = source.as_bytes();
    while i < bytes.len() {
        match bytes[i] {
            q @ (b'\'' | b'"') => i = string_end(bytes, i, q)?,
            // Bytes, not `source[i..]`: `i` steps through multi-byte characters one byte at a time.
            _ if bytes[i..].starts_with(close.as_bytes()) => return Some(i),
            _ => i += 1,
        }
    }
    None
}

fn string_end(bytes: &[u8], start: usize, quote: u8) -> Option<usize> {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b if b == quote => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The end of `{% endraw %}` after a raw tag's word.
fn raw_end(source: &str, from: usize) -> Option<usize> {
    let mut i = tag_end(source, from, "%}")? + 2;
    loop {
        let at = find_from(source, i, "{%")?;
        let (word, after) = tag_word(source, at + 2);
        let end = tag_end(source, after, "%}")? + 2;
        if word == "endraw" {
            return Some(end);
        }
        i = end;
    }
}

/// The byte range of a `for` tag's iterable: after the `in` that ends the target, up to a
/// top-level `if` or `recursive`, or the tag's end (before its whitespace control).
fn for_iterable(source: &str, from: usize, close: usize) -> Option<(usize, usize)> {
    let bytes = source.as_bytes();
    let mut close = close;
    if close > from && matches!(bytes[close - 1], b'-' | b'+') {
        close -= 1;
    }
    let mut depth = 0usize;
    let mut iter_start = None;
    let mut i = from;
    while i < close {
        let b = bytes[i];
        match b {
            b'\'' | b'"' => {
                i = string_end(bytes, i, b)?;
                continue;
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b if b.is_ascii_alphabetic() || b == b'_' => {
                let start = i;
                while i < close && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                let word = &source[start..i];
                if depth == 0 {
                    match (iter_start, word) {
                        (None, "in") => {
                            let mut s = i;
                            while s < close && bytes[s].is_ascii_whitespace() {
                                s += 1;
                            }
                            iter_start = Some(s);
                        }
                        (Some(s), "if" | "recursive") => return (start > s).then_some((s, start)),
                        _ => {}
                    }
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    let s = iter_start?;
    (close > s).then_some((s, close))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_generation_blocks_keeping_whitespace_control() {
        assert_eq!(
            rewrite("a{%- generation -%}b{% endgeneration %}c{%+generation%}"),
            "a{%- if true -%}b{% endif %}c{%+ if true %}"
        );
        assert_eq!(
            rewrite("{{ add_generation_prompt }}{% generations %}"),
            "{{ add_generation_prompt }}{% generations %}"
        );
        assert!(matches!(rewrite("{% if x %}{% endif %}"), Cow::Borrowed(_)));
    }

    #[test]
    fn normalizes_line_breaks_as_jinja2_reads_them() {
        // Everywhere in the source, literals and raw blocks included; an escaped `\r` is not a
        // line break in the source.
        assert_eq!(
            rewrite("a\r\nb\rc\n{{ 'x\r\ny' ~ '\\r' }}{% raw %}\r\r\n{% endraw %}"),
            "a\nb\nc\n{{ 'x\ny' ~ '\\r' }}{% raw %}\n\n{% endraw %}"
        );
        assert_eq!(
            rewrite("{% generation %}\r\n{% endgeneration %}"),
            "{% if true %}\n{% endif %}"
        );
        assert!(matches!(rewrite("a\nb\u{2028}c\u{85}"), Cow::Borrowed(_)));
    }

    #[test]
    fn guards_loop_iterables_against_none() {
        let g = |s: &str| guard_none_iteration(s).into_owned();
        let f = NONE_ITERATION_FUNCTION;
        assert_eq!(
            g("{% for t in tools %}x{% endfor %}"),
            format!("{{% for t in ((tools) if (tools) is not none else {f}()) %}}x{{% endfor %}}")
        );
        assert_eq!(
            g("{%- for k, v in m.items() if k != 'a' -%}{% endfor %}"),
            format!("{{%- for k, v in ((m.items()) if (m.items()) is not none else {f}()) if k != 'a' -%}}{{% endfor %}}")
        );
        assert_eq!(
            g("{% for m in messages[1:]|selectattr('role', 'in', ['user']) recursive %}"),
            format!("{{% for m in ((messages[1:]|selectattr('role', 'in', ['user'])) if (messages[1:]|selectattr('role', 'in', ['user'])) is not none else {f}()) recursive %}}")
        );
        // Strings, comments, raw blocks and print tags are left alone.
        let untouched = "{{ 'for x in y' }}{# {% for a in b %} #}{% raw %}{% for a in b %}{% endraw %}{% set s = '%}' %}";
        assert_eq!(g(untouched), untouched);
    }

    #[test]
    fn scans_tags_with_multibyte_characters() {
        // Found by the template_source fuzz target: the tag scanner sliced the source inside a
        // multi-byte character and panicked.
        let source = "{% for m\u{FFFD}in messages %}{{ x\u{FFFD} }}{% endfor %}";
        assert!(guard_none_iteration(source).contains("{{ x\u{FFFD} }}{% endfor %}"));
        let g = guard_none_iteration("{% for m in ms %}é{{ 'é' }}{% endfor %}").into_owned();
        assert!(g.contains("((ms) if (ms) is not none"), "{g}");
    }
}
