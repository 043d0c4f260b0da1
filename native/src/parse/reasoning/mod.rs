//! Reasoning parsers: split the output into reasoning and visible text before any tool parsing,
//! so a tool call written inside reasoning is never a tool call. Which parser a name selects is
//! the registry's business (`parse/registry`).

pub(crate) mod harmony;
mod think;

pub(crate) use think::{ThinkSpec, ThinkSplitter};
