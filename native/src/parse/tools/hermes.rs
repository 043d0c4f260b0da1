//! `hermes` (Qwen2.5, Qwen3, Hermes; also vLLM's `granite4` and `ernie45`):
//! `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, repeated; text before, between and
//! after calls is content. The JSON-call family's parser ([`JsonBlock`]) with one object per block.

use crate::parse::schema::Tools;
use crate::parse::text::Markers;
use crate::parse::tools::json_block::{BlockSpec, JsonBlock};
use crate::parse::Stage;

/// The markers this format uses.
pub(crate) const MARKERS: &[&str] = &["<tool_call>", "</tool_call>"];

const SPEC: BlockSpec = BlockSpec {
    opens: &[&[MARKERS[0]]],
    close: Some(MARKERS[1]),
    ..BlockSpec::PLAIN
};

/// The parser of a request (registry constructor).
pub(crate) fn build(markers: &Markers, _tools: &Tools) -> Box<dyn Stage> {
    Box::new(JsonBlock::new(&SPEC, markers))
}
