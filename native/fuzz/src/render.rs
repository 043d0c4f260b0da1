//! Target `render`: arbitrary messages, tools, documents and kwargs JSON through
//! [`sidecar_native::template::ChatTemplates::render`] with real templates: the embedded Qwen3
//! template the server ships, and templates of other families from `../shared/models`.
//!
//! Layout: `template flags`, then NUL-separated fields `messages \0 tools \0 documents \0 kwargs`.
//! flags bit 0 = add_generation_prompt, bit 1 = continue_final_message, bit 2 = ask for the
//! template by name (`default`) instead of by default.
//!
//! Checks: an error is a clean one (never `Internal`, never a panic); a prompt respects the output
//! limit; rendering is deterministic (the same request twice gives the same answer).

use std::sync::{Arc, OnceLock};

use sidecar_native::template::{ChatTemplates, Clock, Limits, RenderRequest};

use crate::input::{fields, text, Input};
use crate::models;

/// The templates: (label, source path, model whose special-token variables it gets).
/// `shared:` paths are under ../shared/models.
pub const TEMPLATES: &[(&str, &str, &str)] = &[
    (
        "qwen3 (embedded)",
        "sidecar/embedded/qwen3/chat_template.jinja",
        "qwen3",
    ),
    (
        "qwen3-coder",
        "shared:qwen3/chat_template.qwen3-coder.jinja",
        "qwen3",
    ),
    ("llama3", "shared:llama3/chat_template.jinja", "llama3"),
    (
        "deepseek-v3.1",
        "shared:deepseek-v3/chat_template.deepseek-v3.1.jinja",
        "deepseek-v3",
    ),
    ("gpt-oss", "shared:gpt-oss/chat_template.jinja", "gpt-oss"),
    (
        "mistral-small-3.2",
        "shared:mistral-nemo/chat_template.Mistral-Small-3.2-24B-Instruct-2506.jinja",
        "mistral-nemo",
    ),
    (
        "kimi-k2-thinking",
        "shared:kimi-k2/chat_template.Kimi-K2-Thinking.jinja",
        "",
    ),
    ("glm-4.6", "shared:glm-4.5/chat_template.GLM-4.6.jinja", ""),
    ("gemma3", "shared:gemma3/chat_template.jinja", "gemma3"),
    (
        "hermes-3",
        "shared:templates/llama.cpp/NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
        "",
    ),
];

/// A fixed instant (2025-01-15 12:00 UTC, as the render test data) so dates do not vary.
pub const FIXED_TIME: i64 = 1_736_942_400;

fn templates() -> &'static [Option<Arc<ChatTemplates>>] {
    static ALL: OnceLock<Vec<Option<Arc<ChatTemplates>>>> = OnceLock::new();
    ALL.get_or_init(|| {
        TEMPLATES
            .iter()
            .map(|(_, path, vars)| {
                let source = models::read_source(path)?;
                Some(Arc::new(ChatTemplates::new(
                    vec![("default".into(), source)],
                    models::template_variables(vars),
                    Limits::default(),
                    Clock::Fixed(FIXED_TIME),
                )))
            })
            .collect()
    })
}

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let (which, flags) = (input.byte(), input.byte());
    let Some(templates) = &templates()[which as usize % TEMPLATES.len()] else {
        return;
    };
    let parts = fields(input.rest(), 4);
    let (messages, tools, documents, kwargs) = (
        text(parts[0]),
        text(parts[1]),
        text(parts[2]),
        text(parts[3]),
    );
    let request = RenderRequest {
        messages_json: &messages,
        tools_json: &tools,
        documents_json: &documents,
        kwargs_json: &kwargs,
        chat_template: (flags & 4 != 0).then_some("default"),
        allow_source: false,
        add_generation_prompt: flags & 1 != 0,
        continue_final_message: flags & 2 != 0,
    };
    check_render(templates, &request, Limits::default().max_output_bytes);
}

/// Renders `request` twice and checks the answers (shared with `template_source`).
pub fn check_render(templates: &ChatTemplates, request: &RenderRequest<'_>, max_output: usize) {
    let first = templates.render(request);
    match &first {
        Ok(prompt) => assert!(prompt.len() <= max_output, "prompt over the output limit"),
        Err(e) => crate::assert_clean_error(e, "render"),
    }
    let second = templates.render(request);
    match (&first, &second) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "rendering is not deterministic"),
        (Err(a), Err(b)) => {
            assert_eq!(a.kind(), b.kind(), "errors differ: {a:?} / {b:?}");
            assert_eq!(a.message(), b.message(), "error messages differ");
        }
        _ => panic!("one render failed and the other did not: {first:?} / {second:?}"),
    }
}
