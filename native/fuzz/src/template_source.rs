//! Target `template_source`: arbitrary Jinja source as a per-request template (what
//! `--allow-request-templates` lets a client send), under small fuel and output limits.
//!
//! Layout: `source \0 messages \0 kwargs`; empty messages become one user message.
//!
//! Checks: compile and render errors are clean errors (a syntax error, `raise_exception`, running
//! out of fuel or output room), never `Internal` nor a panic; the prompt respects the output limit;
//! a cached compiled template renders as the first compile did.

use std::sync::OnceLock;

use sidecar_native::template::{ChatTemplates, Clock, Limits, RenderRequest};

use crate::input::{fields, text};
use crate::models;
use crate::render::{check_render, FIXED_TIME};

/// Small limits: a runaway template must stop quickly under the fuzzer too.
pub const LIMITS: Limits = Limits {
    fuel: 200_000,
    recursion: 100,
    max_output_bytes: 256 << 10,
};

fn templates() -> &'static ChatTemplates {
    static ONE: OnceLock<ChatTemplates> = OnceLock::new();
    ONE.get_or_init(|| {
        ChatTemplates::new(
            Vec::new(),
            models::template_variables("qwen3"),
            LIMITS,
            Clock::Fixed(FIXED_TIME),
        )
    })
}

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let parts = fields(data, 3);
    let source = text(parts[0]);
    let mut messages = text(parts[1]);
    if messages.is_empty() {
        messages = r#"[{"role": "user", "content": "Hi"}]"#.into();
    }
    let kwargs = text(parts[2]);
    let request = RenderRequest {
        messages_json: &messages,
        kwargs_json: &kwargs,
        chat_template: Some(&source),
        allow_source: true,
        add_generation_prompt: true,
        ..RenderRequest::default()
    };
    check_render(templates(), &request, LIMITS.max_output_bytes);
}
