//! Two role-specific rewrites vLLM 0.33 makes to a conversation before the template sees it,
//! listed in COMPATIBILITY.md ("Message normalization"); `sidecar/reference/roles.py` is the
//! reference backend's copy.
//!
//! - System messages lose Claude Code's billing header line (the first line of a text part that
//!   starts with `x-anthropic-billing-header`). Its `cch` value changes on every request, so a
//!   prompt that kept it would miss the prefix cache from the system prompt on.
//! - When the template never spells the role `developer` as a string literal, developer messages
//!   become system messages, and system messages anywhere but first (or more than one) are then
//!   merged into one first message; templates written before the role existed would otherwise
//!   drop the developer's instructions, print a role the model never saw, or refuse the
//!   conversation because roles do not alternate.

use super::json::Json;

const BILLING_HEADER: &str = "x-anthropic-billing-header";

/// Whether a template's source names the developer role, the test vLLM makes on the text of the
/// template it renders with (`"developer"` or `'developer'` anywhere, comments included).
pub fn names_developer(source: &str) -> bool {
    source.contains("\"developer\"") || source.contains("'developer'")
}

/// A system message's `content` without the billing header line, or `None` when nothing
/// changes. A string content counts as one text part; a part that was only the header line is
/// dropped. Parts are judged before they are checked, as vLLM does, so a dropped part is never
/// refused.
pub fn without_billing_header(content: Option<&Json>) -> Option<Json> {
    match content? {
        Json::Str(s) => {
            let rest = after_header(s)?;
            Some(if rest.is_empty() {
                Json::Array(Vec::new())
            } else {
                Json::Str(rest.to_string())
            })
        }
        Json::Array(items) => {
            if !items
                .iter()
                .any(|p| part_text(p).and_then(after_header).is_some())
            {
                return None;
            }
            let mut out = Vec::with_capacity(items.len());
            for part in items {
                match part_text(part).and_then(after_header) {
                    None => out.push(part.clone()),
                    Some("") => {}
                    Some(rest) => out.push(with_text(part, rest)),
                }
            }
            Some(Json::Array(out))
        }
        _ => None,
    }
}

/// The text of a string part or of a `{"type": "text"}` part with string text.
fn part_text(part: &Json) -> Option<&str> {
    match part {
        Json::Str(s) => Some(s),
        Json::Object(_) if part.get("type").and_then(Json::as_str) == Some("text") => {
            part.get("text").and_then(Json::as_str)
        }
        _ => None,
    }
}

/// What follows the header's line, when `text` starts with the header ("" when there is no
/// second line).
fn after_header(text: &str) -> Option<&str> {
    if !text.starts_with(BILLING_HEADER) {
        return None;
    }
    Some(text.split_once('\n').map_or("", |(_, rest)| rest))
}

fn with_text(part: &Json, text: &str) -> Json {
    match part {
        Json::Object(pairs) => Json::Object(
            pairs
                .iter()
                .map(|(k, v)| {
                    let v = if k == "text" {
                        Json::Str(text.into())
                    } else {
                        v.clone()
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        _ => Json::Str(text.into()),
    }
}

/// Developer messages as system messages (without their `tools`), then the system messages
/// merged into one first message when one is not first or there are several: its content is the
/// non-empty contents joined by a blank line (a list content reduced to its parts' texts joined
/// by "\n"), and it keeps no other key. Messages here are already normalized (content is a
/// string or a list of part objects); the caller checks that a developer message is present.
pub fn developer_as_system(messages: Vec<Json>) -> Vec<Json> {
    let is_system = |m: &Json| m.get("role").and_then(Json::as_str) == Some("system");
    let mut messages: Vec<Json> = messages.into_iter().map(developer_to_system).collect();
    if !messages.iter().skip(1).any(is_system) {
        return messages;
    }
    let mut contents = Vec::new();
    messages.retain(|m| {
        if !is_system(m) {
            return true;
        }
        let text = content_text(m.get("content"));
        if !text.is_empty() {
            contents.push(text);
        }
        false
    });
    let merged = Json::Object(vec![
        ("role".into(), Json::Str("system".into())),
        ("content".into(), Json::Str(contents.join("\n\n"))),
    ]);
    messages.insert(0, merged);
    messages
}

fn developer_to_system(message: Json) -> Json {
    let Json::Object(mut pairs) = message else {
        return message;
    };
    if !pairs
        .iter()
        .any(|(k, v)| k == "role" && v.as_str() == Some("developer"))
    {
        return Json::Object(pairs);
    }
    pairs.retain(|(k, _)| k != "tools");
    for (k, v) in &mut pairs {
        if k == "role" {
            *v = Json::Str("system".into());
        }
    }
    Json::Object(pairs)
}

/// A system message's content as merged text. A text part whose text is null (only from part
/// types vLLM refuses in system messages, such as `input_text` without text) adds nothing.
fn content_text(content: Option<&Json>) -> String {
    match content {
        Some(Json::Str(s)) => s.clone(),
        Some(Json::Array(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                Json::Str(s) => Some(s.as_str()),
                Json::Object(_) => p.get("text").and_then(Json::as_str),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::json;

    fn parse(text: &str) -> Json {
        json::parse(text, "test").unwrap()
    }

    #[test]
    fn header_line_goes_and_the_rest_stays() {
        let strip = |t: &str| without_billing_header(Some(&parse(t)));
        assert_eq!(
            strip(r#""x-anthropic-billing-header: cch=1\nYou are""#),
            Some(Json::Str("You are".into()))
        );
        assert_eq!(
            strip(r#""x-anthropic-billing-header: cch=1""#),
            Some(Json::Array(vec![]))
        );
        assert_eq!(strip(r#""You are\nx-anthropic-billing-header""#), None);
        assert_eq!(
            strip(
                r#"[{"type": "text", "text": "x-anthropic-billing-header: a\nB", "k": 1}, {"type": "input_text", "text": "x-anthropic-billing-header"}, "x-anthropic-billing-header"]"#
            ),
            Some(parse(
                r#"[{"type": "text", "text": "B", "k": 1}, {"type": "input_text", "text": "x-anthropic-billing-header"}]"#
            ))
        );
    }

    #[test]
    fn names_developer_needs_a_quoted_literal() {
        assert!(names_developer("{% if m.role == 'developer' %}"));
        assert!(names_developer(r#"{% if m.role == "developer" %}"#));
        assert!(!names_developer("{# developer #}{{ messages }}"));
    }

    #[test]
    fn one_leading_developer_is_only_renamed() {
        let out = developer_as_system(vec![
            parse(
                r#"{"role": "developer", "content": [{"type": "text", "text": "D"}], "name": "n", "tools": []}"#,
            ),
            parse(r#"{"role": "user", "content": "u"}"#),
        ]);
        assert_eq!(
            out[0],
            parse(r#"{"role": "system", "content": [{"type": "text", "text": "D"}], "name": "n"}"#)
        );
    }

    #[test]
    fn systems_merge_first() {
        let out = developer_as_system(vec![
            parse(
                r#"{"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "name": "s"}"#,
            ),
            parse(r#"{"role": "user", "content": "u"}"#),
            parse(r#"{"role": "developer", "content": ""}"#),
            parse(r#"{"role": "developer", "content": "d"}"#),
        ]);
        assert_eq!(
            out,
            vec![
                parse(r#"{"role": "system", "content": "a\nb\n\nd"}"#),
                parse(r#"{"role": "user", "content": "u"}"#),
            ]
        );
    }
}
