//! Tool-call parsers: each reads the visible text (reasoning already split off) and turns calls
//! into OpenAI-style deltas, keeping all other text as content.

mod hermes;
mod json_call;

use crate::error::{Error, Result};
use crate::parse::text::Markers;
use crate::parse::Stage;

/// The markers tool parser `name` looks for; `None` for an unknown name.
pub(crate) fn markers(name: &str) -> Option<&'static [&'static str]> {
    Some(match name {
        "hermes" => hermes::MARKERS,
        _ => return None,
    })
}

/// Builds tool parser `name` (known, see [`markers`]).
pub(crate) fn build(name: &str, markers: &Markers, _tools: &crate::parse::schema::Tools) -> Result<Box<dyn Stage>> {
    Ok(match name {
        "hermes" => Box::new(hermes::Hermes::new(markers)),
        _ => return Err(Error::invalid_argument(format!("tool_parser: unknown parser {name:?}"))),
    })
}
