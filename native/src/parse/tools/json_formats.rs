//! The formats of the JSON-call family other than Hermes: each is a [`BlockSpec`] (start markers,
//! end marker, one object or a list, the call object's keys) run by [`JsonBlock`]. The `MARKERS`
//! lists are what the registry rows declare (token markers among them are matched by id).

use crate::parse::schema::Tools;
use crate::parse::text::Markers;
use crate::parse::tools::json_block::{BlockSpec, Body, JsonBlock};
use crate::parse::tools::json_call::CallShape;
use crate::parse::Stage;

/// Defines a format: its markers, its spec (built from them) and its registry constructor.
macro_rules! json_format {
    ($(#[$doc:meta])* $markers:ident, $build:ident, [$($m:expr),* $(,)?], |$mk:ident| $spec:expr) => {
        $(#[$doc])*
        pub(crate) const $markers: &[&str] = &[$($m),*];

        $(#[$doc])*
        pub(crate) fn $build(markers: &Markers, _tools: &Tools) -> Box<dyn Stage> {
            const SPEC: BlockSpec = {
                let $mk = $markers;
                $spec
            };
            Box::new(JsonBlock::new(&SPEC, markers))
        }
    };
}

json_format!(
    /// `longcat`: Hermes with `<longcat_tool_call>` ... `</longcat_tool_call>`.
    LONGCAT_MARKERS, build_longcat, ["<longcat_tool_call>", "</longcat_tool_call>"],
    |m| BlockSpec { opens: &[&[m[0]]], close: Some(m[1]), ..BlockSpec::PLAIN }
);

json_format!(
    /// `internlm` (InternLM2/3, SGLang `interns1`): `<|action_start|><|plugin|>{"name",
    /// "parameters"}<|action_end|>`, the two start tokens back to back.
    INTERNLM_MARKERS, build_internlm, ["<|action_start|>", "<|plugin|>", "<|action_end|>"],
    |m| BlockSpec { opens: &[&[m[0], m[1]]], close: Some(m[2]), ..BlockSpec::PLAIN }
);

json_format!(
    /// `granite-20b-fc`: `<function_call> {...}` per call, no end marker.
    GRANITE_20B_FC_MARKERS, build_granite_20b_fc, ["<function_call>"],
    |m| BlockSpec { opens: &[&[m[0]]], close: None, ..BlockSpec::PLAIN }
);

json_format!(
    /// `granite` (Granite 3.0 token `<|tool_call|>`, 3.1 text `<tool_call>`): a JSON list after
    /// the marker, no end marker (the `]` ends it).
    GRANITE_MARKERS, build_granite, ["<|tool_call|>", "<tool_call>"],
    |m| BlockSpec { opens: &[&[m[0]], &[m[1]]], close: None, body: Body::List, ..BlockSpec::PLAIN }
);

json_format!(
    /// `jamba` and `hunyuan_a13b`: `<tool_calls>[{...}, ...]</tool_calls>`.
    JAMBA_MARKERS, build_jamba, ["<tool_calls>", "</tool_calls>"],
    |m| BlockSpec { opens: &[&[m[0]]], close: Some(m[1]), body: Body::List, ..BlockSpec::PLAIN }
);

json_format!(
    /// `phi4_mini_json`: `functools[{...}, ...]` (plain text, the list ends the call block).
    PHI4_MINI_MARKERS, build_phi4_mini, ["functools"],
    |m| BlockSpec { opens: &[&[m[0]]], close: None, body: Body::List, ..BlockSpec::PLAIN }
);

json_format!(
    /// `apertus`: `<|tools_prefix|>[{"NAME": {...}}, ...]<|tools_suffix|>`, the name as the key.
    APERTUS_MARKERS, build_apertus, ["<|tools_prefix|>", "<|tools_suffix|>"],
    |m| BlockSpec {
        opens: &[&[m[0]]],
        close: Some(m[1]),
        body: Body::List,
        shape: CallShape { name_keys: &[], arg_keys: &[], keyed: true, id_keys: &[] },
        ..BlockSpec::PLAIN
    }
);

json_format!(
    /// `gigachat3`: a function-call message `function call<|role_sep|>\n{"name", "arguments"}`,
    /// after the content message's `<|message_sep|>` and a blank line when there is content, or
    /// `<|function_call|>{...}`. No end marker.
    GIGACHAT3_MARKERS, build_gigachat3,
    ["<|message_sep|>", "\n\n", "function call", "<|role_sep|>", "<|function_call|>"],
    |m| BlockSpec {
        opens: &[&[m[0], m[1], m[2], m[3]], &[m[2], m[3]], &[m[4]]],
        close: None,
        ..BlockSpec::PLAIN
    }
);

json_format!(
    /// `xlam` (xLAM): a JSON list of calls at the very start of the output, right after another
    /// list or after `</think>` (which stays content), or after a ```` ```json ```` fence,
    /// `[TOOL_CALLS]` or `<tool_call>`; a closing fence or `</tool_call>` right after the list is
    /// framing.
    XLAM_MARKERS, build_xlam, ["```json", "[TOOL_CALLS]", "<tool_call>", "</think>", "```", "</tool_call>"],
    |m| BlockSpec {
        opens: &[&[m[0]], &[m[1]], &[m[2]]],
        body: Body::List,
        at_start: true,
        trailers: &[m[4], m[5]],
        restarts: &[m[3]],
        ..BlockSpec::PLAIN
    }
);

/// Cohere Command's call objects: `{"tool_call_id": "0", "tool_name": ..., "parameters": {...}}`,
/// the id the model's own (Cohere's templates echo it back).
const COHERE_CALL: CallShape = CallShape {
    name_keys: &["tool_name"],
    arg_keys: &["parameters"],
    keyed: false,
    id_keys: &["tool_call_id"],
};

json_format!(
    /// `cohere_command3` (Command A): `<|START_ACTION|>[{"tool_call_id", "tool_name",
    /// "parameters"}, ...]<|END_ACTION|>`; the `<|START_RESPONSE|>`/`<|END_RESPONSE|>` wrapper
    /// around the answer is framing.
    COHERE3_MARKERS, build_cohere3,
    ["<|START_ACTION|>", "<|END_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>"],
    |m| BlockSpec {
        opens: &[&[m[0]]],
        close: Some(m[1]),
        body: Body::List,
        shape: COHERE_CALL,
        framing: &[m[2], m[3]],
        ..BlockSpec::PLAIN
    }
);

json_format!(
    /// `cohere_command4` (Command A Reasoning, SGLang `cohere_command4`): as `cohere_command3`,
    /// and `<|START_TEXT|>`/`<|END_TEXT|>` wrap the answer too.
    COHERE4_MARKERS, build_cohere4,
    ["<|START_ACTION|>", "<|END_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>"],
    |m| BlockSpec {
        opens: &[&[m[0]]],
        close: Some(m[1]),
        body: Body::List,
        shape: COHERE_CALL,
        framing: &[m[2], m[3], m[4], m[5]],
        ..BlockSpec::PLAIN
    }
);
