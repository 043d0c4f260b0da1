//! Tool-call parsers: each reads the visible text (reasoning already split off) and turns calls
//! into OpenAI-style deltas, keeping all other text as content.

mod deepseek;
mod glm;
mod hermes;
mod invoke;
mod json_call;
mod kimi;
mod llama3_json;
mod mistral;
mod pythonic;
mod qwen3_coder;
mod xml_args;

use crate::error::{Error, Result};
use crate::parse::json::{JsonRelay, Relay};
use crate::parse::out::{Channel, Out};
use crate::parse::text::{Markers, SegBuf};
use crate::parse::Stage;

/// The markers tool parser `name` looks for; `None` for an unknown name.
pub(crate) fn markers(name: &str) -> Option<&'static [&'static str]> {
    Some(match name {
        "hermes" => hermes::MARKERS,
        "qwen3_coder" | "qwen3_xml" => qwen3_coder::MARKERS,
        "llama3_json" | "llama4_json" => llama3_json::MARKERS,
        "mistral" => mistral::MARKERS,
        "deepseek_v3" | "deepseek_v31" => deepseek::MARKERS,
        "deepseek_v32" => invoke::DSML_MARKERS,
        "minimax_m2" => invoke::MINIMAX_MARKERS,
        "glm45" | "glm47" => glm::MARKERS,
        "kimi_k2" => kimi::MARKERS,
        "pythonic" => pythonic::MARKERS,
        _ => return None,
    })
}

/// Builds tool parser `name` (known, see [`markers`]).
pub(crate) fn build(
    name: &str,
    markers: &Markers,
    tools: &crate::parse::schema::Tools,
) -> Result<Box<dyn Stage>> {
    Ok(match name {
        "hermes" => Box::new(hermes::Hermes::new(markers)),
        "qwen3_coder" | "qwen3_xml" => Box::new(qwen3_coder::Qwen3Coder::new(markers, tools)),
        "llama3_json" | "llama4_json" => Box::new(llama3_json::Llama3Json::new(markers)),
        "mistral" => Box::new(mistral::Mistral::new(markers)),
        "deepseek_v3" => Box::new(deepseek::DeepSeek::new(markers, deepseek::Dialect::V3)),
        "deepseek_v31" => Box::new(deepseek::DeepSeek::new(markers, deepseek::Dialect::V31)),
        "deepseek_v32" => Box::new(invoke::InvokeCalls::new(&invoke::DSML, markers, tools)),
        "minimax_m2" => Box::new(invoke::InvokeCalls::new(&invoke::MINIMAX, markers, tools)),
        "glm45" | "glm47" => Box::new(glm::Glm::new(markers, tools)),
        "kimi_k2" => Box::new(kimi::Kimi::new(markers)),
        "pythonic" => Box::new(pythonic::Pythonic::new(markers)),
        _ => {
            return Err(Error::invalid_argument(format!(
                "tool_parser: unknown parser {name:?}"
            )))
        }
    })
}

/// Streams call `index`'s arguments, a JSON value at the start of `input`, through `relay`:
/// `false` while the value goes on; `true` once it ended (complete, broken, or cut off by the end
/// of the output), its arguments then closed (`{}` when no value began).
pub(crate) fn stream_json_args(
    relay: &mut JsonRelay,
    index: u32,
    input: &mut SegBuf,
    out: &mut Out,
    end: bool,
) -> bool {
    let mut text = String::new();
    let result = relay.feed(input.as_str(), &mut text);
    let consumed = match result {
        Relay::More => input.len(),
        Relay::Done(n) | Relay::Error(n) => n,
    };
    out.route(input, consumed, Channel::Tool);
    let done = result != Relay::More || end;
    if done && !relay.close(&mut text) {
        text.push_str("{}");
    }
    out.call_args(index, &text);
    done
}
