//! Reasoning parsers: split the output into reasoning and visible text before any tool parsing,
//! so a tool call written inside reasoning is never a tool call.

mod harmony;
mod think;

pub(crate) use harmony::{Harmony, MARKERS as HARMONY_MARKERS};
pub(crate) use think::{ThinkSpec, ThinkSplitter};

/// The reasoning parsers by name.
pub(crate) fn think_spec(name: &str) -> Option<ThinkSpec> {
    const THINK: &[&str] = &["<think>"];
    const UNTHINK: &[&str] = &["</think>"];
    let spec = |start, end, implicit_end, default_reasoning, needs_flag| ThinkSpec {
        start,
        end,
        implicit_end,
        default_reasoning,
        needs_flag,
    };
    Some(match name {
        // DeepSeek-R1: the template opens `<think>`; output without `</think>` is all reasoning.
        "deepseek_r1" => spec(THINK, UNTHINK, &[], true, false),
        // Qwen3 / GLM-4.5: thinking unless the request turns it off; a tool call started while
        // reasoning was only assumed (no `<think>` seen) ends it.
        "qwen3" | "glm45" => spec(THINK, UNTHINK, &["<tool_call>"], true, false),
        "kimi_k2" => spec(
            THINK,
            UNTHINK,
            &[
                "<|tool_calls_section_begin|>",
                "<|tool_call_section_begin|>",
            ],
            true,
            false,
        ),
        // MiniMax-M2 writes no opening tag: output starts in reasoning.
        "minimax_m2" => spec(THINK, UNTHINK, &[], true, false),
        // Mistral reasoning models: `[THINK]`...`[/THINK]`, off until opened.
        "mistral" => spec(&["[THINK]"], &["[/THINK]"], &[], false, false),
        // DeepSeek-V3.x: R1 behaviour only when thinking is on (request flag or prompt).
        "deepseek_v3" => spec(THINK, UNTHINK, &[], false, true),
        _ => return None,
    })
}
