//! Source rewrites for Jinja2 syntax minijinja does not have, each named after the templates that
//! need it.
//!
//! `{% generation %}...{% endgeneration %}`: transformers registers this tag to find the assistant's
//! tokens for training masks; rendering just emits the body. Templates that use it: LFM2.5,
//! poolside Laguna, and others in llama.cpp's collection. The tag pair becomes
//! `{% if true %}...{% endif %}`, keeping each delimiter's whitespace control (`-`, `+`), which
//! trims exactly as the original block tags do under trim_blocks and lstrip_blocks.

use std::borrow::Cow;

/// Rewrites `source` when it needs it; borrows it unchanged otherwise.
pub fn rewrite(source: &str) -> Cow<'_, str> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_generation_blocks_keeping_whitespace_control() {
        assert_eq!(
            rewrite("a{%- generation -%}b{% endgeneration %}c{%+generation%}"),
            "a{%- if true -%}b{% endif %}c{%+ if true %}"
        );
        assert_eq!(rewrite("{{ add_generation_prompt }}{% generations %}"), "{{ add_generation_prompt }}{% generations %}");
        assert!(matches!(rewrite("{% if x %}{% endif %}"), Cow::Borrowed(_)));
    }
}
