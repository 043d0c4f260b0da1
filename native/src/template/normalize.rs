//! Turning an OpenAI chat request's messages into what the template sees, as vLLM and then
//! transformers do before rendering. Every rule is listed in COMPATIBILITY.md; the reference
//! backend (`sidecar/reference/normalize.py`) implements the same list.
//!
//! vLLM (`parse_chat_messages`): each message is rebuilt from the fields vLLM knows (role, content,
//! tool_calls, reasoning, tool_call_id, name, task, developer tools); content becomes a string
//! (text parts joined with "\n") for templates that print content, or a list of `{"type": "text"}`
//! parts for templates that loop over parts; tool results made only of text parts become a string;
//! tool-call `arguments` given as JSON text become the parsed object (`{}` when empty, invalid or
//! not an object). System messages lose Claude Code's billing header line, and developer messages
//! become system messages for templates that do not name the role (`roles`).
//! transformers (`apply_chat_template`): keys whose value is null are dropped, and reasoning is
//! copied to `thinking` and `reasoning_content`.
//!
//! Tools (`tools`): each is rebuilt as vLLM passes it to the template, the `model_dump()` of its
//! tool model (see the function's doc).

use super::json::{self, Json};
use super::roles;
use crate::error::{quoted, Error, Result};

/// How a template wants message content (vLLM's "content format").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentFormat {
    /// Content is a string; text parts are joined with "\n".
    String,
    /// Content is a list of parts (`{"type": "text", "text": ...}`).
    OpenAi,
}

impl ContentFormat {
    /// The name vLLM uses.
    pub fn name(self) -> &'static str {
        match self {
            ContentFormat::String => "string",
            ContentFormat::OpenAi => "openai",
        }
    }
}

/// Part types that carry media; Render is text-only (the engine expands media itself).
const MEDIA_PART_TYPES: &[&str] = &[
    "image_url",
    "input_image",
    "image_embeds",
    "audio_embeds",
    "prompt_embeds",
    "image_pil",
    "audio_url",
    "input_audio",
    "video_url",
];

/// Keys that mark a media part when `type` is missing.
const MEDIA_PART_KEYS: &[&str] = &[
    "image_url",
    "image_pil",
    "image_embeds",
    "audio_embeds",
    "prompt_embeds",
    "audio_url",
    "input_audio",
    "video_url",
];

/// Normalizes the parsed `messages_json` array; `names_developer` is whether the template's
/// source names the developer role ([`roles::names_developer`]).
pub fn messages(parsed: Json, format: ContentFormat, names_developer: bool) -> Result<Vec<Json>> {
    let Json::Array(items) = parsed else {
        return Err(Error::invalid_argument(format!(
            "messages_json: expected an array of messages, got {}",
            parsed.type_name()
        )));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, message) in items.into_iter().enumerate() {
        out.push(message_for_vllm(message, format, i)?);
    }
    for (i, message) in out.iter_mut().enumerate() {
        normalize_tool_calls(message, i)?;
    }
    // vLLM's last step before transformers, on the content as the template's format shaped it.
    let is_developer = |m: &Json| m.get("role").and_then(Json::as_str) == Some("developer");
    if !names_developer && out.iter().any(is_developer) {
        out = roles::developer_as_system(out);
    }
    for message in &mut out {
        drop_null_keys(message);
        alias_reasoning(message);
    }
    Ok(out)
}

/// Normalizes the tools of `tools_json` (already checked to be an array of objects) as vLLM 0.33
/// does (`tool.model_dump()` of `ChatCompletionToolsParam`): `type` ("function"), then `function`
/// with `name`, `description` and `parameters` (null when missing), `strict` and `defer_loading`
/// when set (the tool's `defer_loading` when the function has none); then the tool's own
/// `defer_loading` when set. Other keys are dropped; `parameters` is kept as written.
pub fn tools(parsed: Json) -> Result<Json> {
    let Json::Array(items) = parsed else {
        return Ok(parsed);
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, tool) in items.into_iter().enumerate() {
        out.push(tool_for_vllm(tool, i)?);
    }
    Ok(Json::Array(out))
}

fn tool_for_vllm(tool: Json, i: usize) -> Result<Json> {
    let field = format!("tools[{i}]");
    check_function_type(&tool, &field)?;
    let function = match tool.get("function") {
        Some(f @ Json::Object(_)) => f,
        other => return Err(not_a_function_object(&field, other)),
    };
    let ffield = format!("{field}.function");
    let name = match function.get("name") {
        Some(name @ Json::Str(_)) => name.clone(),
        Some(other) => {
            return Err(Error::invalid_argument(format!(
                "{ffield}.name: expected a string, got {}",
                other.type_name()
            )))
        }
        None => return Err(Error::invalid_argument(format!("{ffield}.name: missing"))),
    };
    let description = match function.get("description") {
        None | Some(Json::Null) => Json::Null,
        Some(d @ Json::Str(_)) => d.clone(),
        Some(other) => {
            return Err(Error::invalid_argument(format!(
                "{ffield}.description: expected a string or null, got {}",
                other.type_name()
            )))
        }
    };
    let parameters = match function.get("parameters") {
        None | Some(Json::Null) => Json::Null,
        Some(p @ Json::Object(_)) => p.clone(),
        Some(other) => {
            return Err(Error::invalid_argument(format!(
                "{ffield}.parameters: expected an object or null, got {}",
                other.type_name()
            )))
        }
    };
    let strict = optional_bool(function.get("strict"), &format!("{ffield}.strict"))?;
    let tool_defer = optional_bool(tool.get("defer_loading"), &format!("{field}.defer_loading"))?;
    let defer = optional_bool(
        function.get("defer_loading"),
        &format!("{ffield}.defer_loading"),
    )?
    .or(tool_defer);
    let mut f = vec![
        ("name".to_string(), name),
        ("description".to_string(), description),
        ("parameters".to_string(), parameters),
    ];
    if let Some(s) = strict {
        f.push(("strict".into(), Json::Bool(s)));
    }
    if let Some(d) = defer {
        f.push(("defer_loading".into(), Json::Bool(d)));
    }
    let mut out = vec![
        ("type".to_string(), Json::Str("function".into())),
        ("function".to_string(), Json::Object(f)),
    ];
    if let Some(d) = tool_defer {
        out.push(("defer_loading".into(), Json::Bool(d)));
    }
    Ok(Json::Object(out))
}

/// pydantic's lax `bool | None`: null, a boolean, 0 or 1 (also as 0.0 or 1.0), or one of its words
/// for true and false in any case.
fn optional_bool(value: Option<&Json>, field: &str) -> Result<Option<bool>> {
    let word = |s: &str| match s.to_lowercase().as_str() {
        "1" | "on" | "t" | "true" | "y" | "yes" => Some(true),
        "0" | "off" | "f" | "false" | "n" | "no" => Some(false),
        _ => None,
    };
    let parsed = match value {
        None | Some(Json::Null) => return Ok(None),
        Some(Json::Bool(b)) => Some(*b),
        Some(Json::Int(n)) if *n == 0 || *n == 1 => Some(*n == 1),
        Some(Json::Float(x)) if *x == 0.0 || *x == 1.0 => Some(*x == 1.0),
        Some(Json::Str(s)) => word(s),
        Some(_) => None,
    };
    match (parsed, value) {
        (Some(b), _) => Ok(Some(b)),
        (None, Some(v)) => Err(Error::invalid_argument(format!(
            "{field}: expected a boolean or null, got {}",
            shown(v)
        ))),
        (None, None) => Ok(None),
    }
}

/// A tool's or a tool call's `type`, when given, must be "function" (vLLM's models for both).
fn check_function_type(item: &Json, field: &str) -> Result<()> {
    match item.get("type") {
        None => Ok(()),
        Some(Json::Str(t)) if t == "function" => Ok(()),
        Some(other) => Err(Error::invalid_argument(format!(
            "{field}.type: expected \"function\", got {}",
            shown(other)
        ))),
    }
}

/// The error for a tool's or a tool call's `function` that is missing or not an object.
fn not_a_function_object(field: &str, found: Option<&Json>) -> Error {
    match found {
        Some(other) => Error::invalid_argument(format!(
            "{field}.function: expected an object, got {}",
            other.type_name()
        )),
        None => Error::invalid_argument(format!("{field}.function: missing")),
    }
}

/// A value in an error message: a string as itself in quotes, anything else by its JSON type.
fn shown(value: &Json) -> String {
    match value {
        Json::Str(s) => quoted(s, |s| format!("\"{s}\"")),
        other => other.type_name().to_string(),
    }
}

enum Part {
    Text(Option<String>),
    ToolReference(Option<String>),
}

fn message_for_vllm(message: Json, format: ContentFormat, i: usize) -> Result<Json> {
    let field = format!("messages[{i}]");
    if !matches!(message, Json::Object(_)) {
        return Err(Error::invalid_argument(format!(
            "{field}: expected an object, got {}",
            message.type_name()
        )));
    }
    let role = match message.get("role") {
        Some(Json::Str(role)) => role.clone(),
        Some(other) => {
            return Err(Error::invalid_argument(format!(
                "{field}.role: expected a string, got {}",
                other.type_name()
            )))
        }
        None => return Err(Error::invalid_argument(format!("{field}.role: missing"))),
    };
    // vLLM strips the billing header by the role as sent (a developer message keeps it), before
    // it reads the parts.
    let stripped = match role.as_str() {
        "system" => roles::without_billing_header(message.get("content")),
        _ => None,
    };
    let parts = content_parts(stripped.as_ref().or(message.get("content")), &field)?;
    let mut content = match format {
        ContentFormat::String => {
            // vLLM keeps only truthy pieces: empty texts vanish from the join.
            let texts: Vec<&str> = parts
                .iter()
                .filter_map(|p| match p {
                    Part::Text(Some(t)) | Part::ToolReference(Some(t)) if !t.is_empty() => {
                        Some(t.as_str())
                    }
                    _ => None,
                })
                .collect();
            Json::Str(texts.join("\n"))
        }
        ContentFormat::OpenAi => Json::Array(
            parts
                .into_iter()
                .map(|p| match p {
                    Part::Text(t) => obj(vec![
                        ("type", Json::Str("text".into())),
                        ("text", opt_str(t)),
                    ]),
                    Part::ToolReference(n) => obj(vec![
                        ("type", Json::Str("tool_reference".into())),
                        ("name", opt_str(n)),
                    ]),
                })
                .collect(),
        ),
    };
    if role == "tool" {
        content = tool_content_as_text(content);
    }
    let mut out: Vec<(String, Json)> = vec![
        ("role".into(), Json::Str(role.clone())),
        ("content".into(), content),
    ];
    match role.as_str() {
        "assistant" => {
            match message.get("tool_calls") {
                None | Some(Json::Null) => {}
                Some(calls @ Json::Array(_)) => out.push(("tool_calls".into(), calls.clone())),
                Some(other) => {
                    return Err(Error::invalid_argument(format!(
                        "{field}.tool_calls: expected an array, got {}",
                        other.type_name()
                    )))
                }
            }
            let reasoning = match message.get("reasoning") {
                None | Some(Json::Null) => message.get("reasoning_content"),
                some => some,
            };
            if let Some(r) = reasoning.filter(|r| !matches!(r, Json::Null)) {
                out.push(("reasoning".into(), r.clone()));
                out.push(("reasoning_content".into(), r.clone()));
            }
        }
        "tool" => {
            if let Some(id) = message.get("tool_call_id") {
                out.push(("tool_call_id".into(), id.clone()));
            }
        }
        _ => {}
    }
    for key in ["name", "task"] {
        if let Some(value @ Json::Str(_)) = message.get(key) {
            out.push((key.into(), value.clone()));
        }
    }
    if role == "developer" {
        out.push((
            "tools".into(),
            message.get("tools").cloned().unwrap_or(Json::Null),
        ));
    }
    Ok(Json::Object(out))
}

fn content_parts(content: Option<&Json>, field: &str) -> Result<Vec<Part>> {
    match content {
        None | Some(Json::Null) => Ok(Vec::new()),
        Some(Json::Str(s)) => Ok(vec![Part::Text(Some(s.clone()))]),
        Some(Json::Array(items)) => {
            let mut parts = Vec::with_capacity(items.len());
            for (j, item) in items.iter().enumerate() {
                if let Some(part) = content_part(item, &format!("{field}.content[{j}]"))? {
                    parts.push(part);
                }
            }
            Ok(parts)
        }
        Some(other) => Err(Error::invalid_argument(format!(
            "{field}.content: expected a string, an array of parts or null, got {}",
            other.type_name()
        ))),
    }
}

/// One content part; `None` when vLLM skips it (a text or refusal part without text).
fn content_part(part: &Json, field: &str) -> Result<Option<Part>> {
    if let Json::Str(s) = part {
        return Ok(Some(Part::Text(Some(s.clone()))));
    }
    if !matches!(part, Json::Object(_)) {
        return Err(Error::invalid_argument(format!(
            "{field}: expected an object or a string, got {}",
            part.type_name()
        )));
    }
    let has_uuid = !matches!(part.get("uuid"), None | Some(Json::Null));
    let part_type = match part.get("type") {
        Some(Json::Str(t)) if !has_uuid => t.as_str(),
        None | Some(Json::Null) | Some(Json::Str(_)) => {
            if MEDIA_PART_KEYS.iter().any(|k| part.get(k).is_some()) || has_uuid {
                return Err(media_error(field, "media"));
            }
            return Err(Error::invalid_argument(format!("{field}.type: missing")));
        }
        Some(other) => {
            return Err(Error::invalid_argument(format!(
                "{field}.type: expected a string, got {}",
                other.type_name()
            )))
        }
    };
    let text_of = |key: &str| -> Result<Option<String>> {
        match part.get(key) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::Str(s)) => Ok(Some(s.clone())),
            Some(other) => Err(Error::invalid_argument(format!(
                "{field}.{key}: expected a string, got {}",
                other.type_name()
            ))),
        }
    };
    match part_type {
        "text" | "refusal" => {
            let key = if part_type == "text" { "text" } else { "refusal" };
            Ok(text_of(key)?.map(|t| Part::Text(Some(t))))
        }
        "input_text" | "output_text" => Ok(Some(Part::Text(text_of("text")?))),
        "thinking" => Ok(Some(Part::Text(text_of("thinking")?))),
        "tool_reference" => Ok(Some(Part::ToolReference(text_of("name")?))),
        t if MEDIA_PART_TYPES.contains(&t) => Err(media_error(field, t)),
        t => Err(Error::invalid_argument(format!(
            "{field}.type: unsupported content part type {}; Render accepts text, input_text, output_text, \
             refusal, thinking and tool_reference parts",
            quoted(t, |t| format!("{t:?}"))
        ))),
    }
}

fn media_error(field: &str, kind: &str) -> Error {
    Error::invalid_argument(format!(
        "{field}: {kind} parts are not supported: Render produces text prompts; send media to the engine"
    ))
}

/// vLLM turns a tool result made only of text parts into one string (clients such as Claude Code
/// send tool results as parts, and most templates print tool content as a string).
fn tool_content_as_text(content: Json) -> Json {
    let Json::Array(items) = &content else {
        return content;
    };
    let all_text = items.iter().all(|item| {
        !matches!(item, Json::Object(_)) || item.get("type").and_then(Json::as_str) == Some("text")
    });
    if !all_text {
        return content;
    }
    let texts: Vec<String> = items
        .iter()
        .filter(|item| item.get("type").and_then(Json::as_str) == Some("text"))
        .map(|item| match item.get("text") {
            Some(Json::Str(s)) => s.clone(),
            // Python's str.join would fail on None; vLLM never builds such a part from text.
            _ => String::new(),
        })
        .collect();
    Json::Str(texts.join("\n"))
}

fn normalize_tool_calls(message: &mut Json, i: usize) -> Result<()> {
    if message.get("role").and_then(Json::as_str) != Some("assistant") {
        return Ok(());
    }
    let Some(Json::Array(calls)) = message.get_mut("tool_calls") else {
        return Ok(());
    };
    if calls.is_empty() {
        // An empty list would send templates down their tool-call path with nothing to print.
        if let Json::Object(pairs) = message {
            pairs.retain(|(k, _)| k != "tool_calls");
        }
        return Ok(());
    }
    for (j, call) in calls.iter_mut().enumerate() {
        *call = tool_call_for_vllm(call, &format!("messages[{i}].tool_calls[{j}]"))?;
    }
    Ok(())
}

/// One assistant tool call as vLLM 0.33 hands it to the template. Its request model validates the
/// call as openai's function tool-call TypedDict, which rebuilds it in that type's declared key
/// order, `id`, `function` (`arguments`, `name`), `type`, with any other keys after them in the
/// client's order (the request model allows extra keys). Templates that print a call or its
/// function as JSON, or iterate its items (mistral-nemo), see that order, so it is reproduced.
/// What that validation refuses with a 400 (a missing or non-string `id`, `name` or `arguments`,
/// a missing `type`) is INVALID_ARGUMENT here, with one leniency: `arguments` given as an object,
/// which transformers accepts and vLLM refuses, is kept.
fn tool_call_for_vllm(call: &Json, field: &str) -> Result<Json> {
    let Json::Object(pairs) = call else {
        return Err(Error::invalid_argument(format!(
            "{field}: expected an object, got {}",
            call.type_name()
        )));
    };
    let id = required_str(call, "id", field)?;
    // A custom tool call (`type: "custom"`) passes vLLM's validation and is then refused by its
    // chat handler; both are a 400.
    check_function_type(call, field)?;
    if call.get("type").is_none() {
        return Err(Error::invalid_argument(format!("{field}.type: missing")));
    }
    let function = match call.get("function") {
        Some(f @ Json::Object(_)) => f,
        other => return Err(not_a_function_object(field, other)),
    };
    let ffield = format!("{field}.function");
    // Checked before `arguments` so that a wrong name is reported first, as the key order suggests.
    let name = required_str(function, "name", &ffield)?;
    // As in vLLM 0.33: an object, or JSON text of one, is kept; other text (empty, invalid JSON,
    // JSON of another value) becomes {} rather than failing the request.
    let arguments = match function.get("arguments") {
        Some(Json::Str(text)) => match json::parse(text, "arguments") {
            Ok(value @ Json::Object(_)) => value,
            _ => Json::Object(Vec::new()),
        },
        Some(value @ Json::Object(_)) => value.clone(),
        Some(other) => {
            return Err(Error::invalid_argument(format!(
                "{ffield}.arguments: expected a string (JSON text) or an object, got {}",
                other.type_name()
            )))
        }
        None => {
            return Err(Error::invalid_argument(format!(
                "{ffield}.arguments: missing"
            )))
        }
    };
    let Json::Object(fpairs) = function else {
        unreachable!("checked above")
    };
    let mut f = vec![
        ("arguments".to_string(), arguments),
        ("name".to_string(), name),
    ];
    f.extend(extra_pairs(fpairs, &["arguments", "name"]));
    let mut out = vec![
        ("id".to_string(), id),
        ("function".to_string(), Json::Object(f)),
        ("type".to_string(), Json::Str("function".into())),
    ];
    out.extend(extra_pairs(pairs, &["id", "function", "type"]));
    Ok(Json::Object(out))
}

/// A key that vLLM's request validation requires to be a string.
fn required_str(item: &Json, key: &str, field: &str) -> Result<Json> {
    match item.get(key) {
        Some(value @ Json::Str(_)) => Ok(value.clone()),
        Some(other) => Err(Error::invalid_argument(format!(
            "{field}.{key}: expected a string, got {}",
            other.type_name()
        ))),
        None => Err(Error::invalid_argument(format!("{field}.{key}: missing"))),
    }
}

/// The pairs whose key is not one of `known`, in their order.
fn extra_pairs<'a>(
    pairs: &'a [(String, Json)],
    known: &'a [&str],
) -> impl Iterator<Item = (String, Json)> + 'a {
    pairs
        .iter()
        .filter(|(k, _)| !known.contains(&k.as_str()))
        .cloned()
}

/// transformers drops message keys whose value is None (many templates print "None" otherwise).
fn drop_null_keys(message: &mut Json) {
    if let Json::Object(pairs) = message {
        pairs.retain(|(_, v)| !matches!(v, Json::Null));
    }
}

/// transformers' reasoning aliases: the first of `reasoning_content`, `thinking`, `reasoning` that
/// is set becomes `{"thinking": r, **message, "reasoning_content": r}` (gpt-oss templates read
/// `thinking`, most others `reasoning_content`).
fn alias_reasoning(message: &mut Json) {
    let Json::Object(pairs) = message else {
        return;
    };
    let reasoning = ["reasoning_content", "thinking", "reasoning"]
        .iter()
        .find_map(|key| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()));
    let Some(r) = reasoning else {
        return;
    };
    // `{"thinking": r, **message}` puts `thinking` first, keeping a value the message had.
    let thinking = match pairs.iter().position(|(k, _)| k == "thinking") {
        Some(pos) => pairs.remove(pos).1,
        None => r.clone(),
    };
    pairs.insert(0, ("thinking".into(), thinking));
    match pairs.iter_mut().find(|(k, _)| k == "reasoning_content") {
        Some(slot) => slot.1 = r,
        None => pairs.push(("reasoning_content".into(), r)),
    }
}

fn obj(pairs: Vec<(&str, Json)>) -> Json {
    Json::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

fn opt_str(s: Option<String>) -> Json {
    s.map(Json::Str).unwrap_or(Json::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(text: &str, format: ContentFormat) -> Result<Vec<Json>> {
        messages(json::parse(text, "messages_json")?, format, true)
    }

    #[test]
    fn parts_join_or_stay_a_list() {
        let text = r#"[{"role": "user", "content": [{"type": "text", "text": "a"}, "b", {"type": "text", "text": ""}]}]"#;
        let s = norm(text, ContentFormat::String).unwrap();
        assert_eq!(s[0].get("content"), Some(&Json::Str("a\nb".into())));
        let o = norm(text, ContentFormat::OpenAi).unwrap();
        assert!(matches!(o[0].get("content"), Some(Json::Array(parts)) if parts.len() == 3));
    }

    #[test]
    fn tool_arguments_become_values() {
        let text = r#"[{"role": "assistant", "content": null, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1.5e-7}"}},
            {"id": "b", "type": "function", "function": {"name": "g", "arguments": ""}},
            {"id": "c", "type": "function", "function": {"name": "h", "arguments": "not json"}}]}]"#;
        let m = norm(text, ContentFormat::String).unwrap();
        let calls = match m[0].get("tool_calls") {
            Some(Json::Array(c)) => c.clone(),
            other => panic!("{other:?}"),
        };
        let args = |c: &Json| c.get("function").unwrap().get("arguments").unwrap().clone();
        assert_eq!(
            args(&calls[0]),
            Json::Object(vec![("x".into(), Json::Float(1.5e-7))])
        );
        assert_eq!(args(&calls[1]), Json::Object(vec![]));
        assert_eq!(args(&calls[2]), Json::Object(vec![]));
        assert_eq!(m[0].get("content"), Some(&Json::Str(String::new())));
    }

    #[test]
    fn tool_calls_take_vllms_key_order() {
        let m = norm(
            r#"[{"role": "assistant", "tool_calls": [{"x": null, "type": "function",
                "function": {"s": 1, "arguments": "{}", "name": "f"}, "id": "c", "index": 0}]}]"#,
            ContentFormat::String,
        )
        .unwrap();
        let keys = |j: &Json| match j {
            Json::Object(p) => p.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
            _ => unreachable!(),
        };
        let call = match m[0].get("tool_calls") {
            Some(Json::Array(c)) => c[0].clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(keys(&call), ["id", "function", "type", "x", "index"]);
        assert_eq!(
            keys(call.get("function").unwrap()),
            ["arguments", "name", "s"]
        );
        for (calls, error) in [
            (
                r#"[{"type": "function", "function": {"name": "f", "arguments": "{}"}}]"#,
                "id: missing",
            ),
            (
                r#"[{"id": "c", "function": {"name": "f", "arguments": "{}"}}]"#,
                "type: missing",
            ),
            (
                r#"[{"id": "c", "type": "function", "function": {"name": "f"}}]"#,
                "function.arguments: missing",
            ),
            (
                r#"[{"id": 1, "type": "function", "function": {"name": "f", "arguments": "{}"}}]"#,
                "id: expected a string, got number",
            ),
        ] {
            let text = format!(r#"[{{"role": "assistant", "tool_calls": {calls}}}]"#);
            let e = norm(&text, ContentFormat::String).unwrap_err();
            assert_eq!(e.message(), format!("messages[0].tool_calls[0].{error}"));
        }
    }

    #[test]
    fn reasoning_is_aliased_in_transformers_order() {
        let m = norm(
            r#"[{"role": "assistant", "content": "x", "reasoning_content": "r", "extra": 1}]"#,
            ContentFormat::String,
        )
        .unwrap();
        let keys: Vec<&str> = match &m[0] {
            Json::Object(p) => p.iter().map(|(k, _)| k.as_str()).collect(),
            _ => unreachable!(),
        };
        assert_eq!(
            keys,
            [
                "thinking",
                "role",
                "content",
                "reasoning",
                "reasoning_content"
            ]
        );
    }

    #[test]
    fn bad_shapes_name_the_field() {
        let e = norm(
            r#"[{"role": "user", "content": "a"}, {"content": "b"}]"#,
            ContentFormat::String,
        )
        .unwrap_err();
        assert_eq!(e.message(), "messages[1].role: missing");
        let e = norm(
            r#"[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]"#,
            ContentFormat::String,
        )
        .unwrap_err();
        assert!(
            e.message()
                .starts_with("messages[0].content[0]: image_url parts are not supported"),
            "{e}"
        );
        let e = norm(
            r#"[{"role": "assistant", "tool_calls": [{"id": "x", "type": "function"}]}]"#,
            ContentFormat::String,
        )
        .unwrap_err();
        assert_eq!(e.message(), "messages[0].tool_calls[0].function: missing");
    }
}
