//! The one table of parsers: every tool-call and reasoning parser name that vLLM 0.33 and SGLang
//! 0.5.23 register, one row per format (`tool_rows.rs`, `reasoning_rows.rs`).
//!
//! A row holds the format's canonical name (vLLM's; SGLang's for the few formats only SGLang has),
//! every other name either engine registers for it, its markers, how its parser is built (or that it
//! is not implemented yet), how its call ids are made, how a model's default is recognised from its
//! chat template and special tokens, and for reasoning formats the start-state rule. The session
//! builds its stages from the rows, `OpenRequest` resolves names through them, and
//! [`export_json`] gives the same table to Python (`sidecar/parsers.json`, committed and compared
//! with this table by a test), where `ListParsers`, the model defaults and the tests read it.
//!
//! Names are looked up in this order: canonical names, the other vLLM names, then SGLang's and the
//! project's older names. An SGLang name that vLLM uses for a different format of the same kind
//! (SGLang `muse` is vLLM's `muse_glimmer`, vLLM has its own `muse`) means vLLM's format here; the
//! export lists it as `shadowed`.

mod reasoning_rows;
mod tool_rows;

use serde_json::{json, Value};

use crate::error::{quoted, Error, Result};
use crate::parse::reasoning::ThinkSpec;
use crate::parse::schema::Tools;
use crate::parse::text::Markers;
use crate::parse::Stage;

/// Which side of the output a parser reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Tool calls in the visible text.
    Tool,
    /// Reasoning versus visible text.
    Reasoning,
}

impl Kind {
    /// `tool` or `reasoning`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Tool => "tool",
            Kind::Reasoning => "reasoning",
        }
    }

    /// The `OpenRequest` field naming a parser of this kind.
    pub fn field(self) -> &'static str {
        match self {
            Kind::Tool => "tool_parser",
            Kind::Reasoning => "reasoning_parser",
        }
    }

    fn other(self) -> Kind {
        match self {
            Kind::Tool => Kind::Reasoning,
            Kind::Reasoning => Kind::Tool,
        }
    }
}

/// How call ids are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdStyle {
    /// `call_` + 24 random alphanumerics (OpenAI's shape).
    OpenAi,
    /// 9 random alphanumerics (Mistral's templates require exactly this), or the model's own.
    Mistral,
    /// The format writes the id (Kimi's `functions.NAME:IDX`); random as `OpenAi` when it does not.
    Format,
}

impl IdStyle {
    fn name(self) -> &'static str {
        match self {
            IdStyle::OpenAi => "openai",
            IdStyle::Mistral => "mistral",
            IdStyle::Format => "format",
        }
    }
}

/// Whether a reasoning parser's output starts inside reasoning. The rule is the same for every
/// format (see [`StartRule::decide`]); the row gives its data, read off vLLM's own parsers by the
/// oracle (`start_state_observed` in `tests/data/parse_oracle/registry.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartRule {
    /// Output starts in reasoning when neither the prompt nor a flag decides (vLLM: plain output
    /// is reasoning).
    pub default_reasoning: bool,
    /// The `chat_template_kwargs` flags the format honours, in order: the first one present
    /// decides. `key`: a boolean (`true`: reasoning, `false`: content); `key=value`: a string,
    /// reasoning when it equals `value` (MiniMax M3's `thinking_mode=enabled`); `key!=value`: a
    /// string, reasoning unless it equals `value` (Hunyuan's `reasoning_effort!=no_think`).
    pub flags: &'static [&'static str],
    /// Split only when thinking is on (by the prompt, a flag or the default); otherwise all text is
    /// visible, markers included (DeepSeek-V3's reasoning parser is the identity without thinking).
    pub needs_thinking: bool,
}

impl StartRule {
    /// Output starts as content; no flag honoured.
    pub const CONTENT: StartRule = StartRule {
        default_reasoning: false,
        flags: &[],
        needs_thinking: false,
    };

    /// The flag that decides, from the request's `chat_template_kwargs` (a JSON object).
    pub fn flag(&self, kwargs: &serde_json::Map<String, Value>) -> Option<bool> {
        self.flags.iter().find_map(|spec| flag_value(spec, kwargs))
    }

    /// Whether output starts in reasoning: the prompt's last reasoning marker when its tail has one
    /// (`prompt`: `Some(true)` opened, `Some(false)` closed), else the honoured flag, else the
    /// format's default. Without prompt ids the prompt says nothing, so flag and default decide.
    pub fn decide(&self, prompt: Option<bool>, flag: Option<bool>) -> bool {
        prompt.or(flag).unwrap_or(self.default_reasoning)
    }
}

/// What one flag of [`StartRule::flags`] says about `kwargs`, when it is present with its type.
fn flag_value(spec: &str, kwargs: &serde_json::Map<String, Value>) -> Option<bool> {
    if let Some((key, value)) = spec.split_once("!=") {
        return kwargs.get(key)?.as_str().map(|v| v != value);
    }
    if let Some((key, value)) = spec.split_once('=') {
        return kwargs.get(key)?.as_str().map(|v| v == value);
    }
    kwargs.get(spec).and_then(Value::as_bool)
}

/// A builder of a tool-call stage.
pub(crate) type ToolBuild = fn(&Markers, &Tools) -> Box<dyn Stage>;

/// A builder of a stage that reads reasoning and tool calls together.
pub(crate) type WholeBuild = fn(&Markers, &Tools) -> Box<dyn Stage>;

/// How a row's parser is built.
#[derive(Clone, Copy)]
pub(crate) enum Build {
    /// Registered by the engines, not implemented here yet: `OpenRequest` answers
    /// `FAILED_PRECONDITION` naming it.
    Missing,
    /// A tool-call parser reading the visible text.
    Tool(ToolBuild),
    /// A start/end-marker reasoning splitter.
    Think(ThinkSpec),
    /// One stage reading reasoning and tool calls together (Harmony): the tool row and the
    /// reasoning row of one `family` build the same stage, and neither combines with another row.
    Whole {
        family: &'static str,
        build: WholeBuild,
    },
    /// An interpreter of the model's `response_template` (vLLM's `hf` and `beam`): built per
    /// model from that data, reading reasoning and tool calls together; the tool row and the
    /// reasoning row combine with each other only.
    Template,
}

/// One condition of a [`Detect`] signature.
#[derive(Debug, Clone, Copy)]
pub enum Sig {
    /// The model's chat template sources contain this text.
    Template(&'static str),
    /// The model has an added token spelled exactly this.
    Token(&'static str),
}

/// How a model's default parser is recognised: every group holds (a group holds when one of its
/// conditions does) and no `unless` text is in the templates. Among all signatures of one kind,
/// the lowest `rank` that holds wins, so specific markers rank before generic ones (`<tool_call>`).
#[derive(Debug, Clone, Copy)]
pub struct Detect {
    /// Order among all signatures of the kind (lower first).
    pub rank: u16,
    /// Groups of alternatives, all required.
    pub all: &'static [&'static [Sig]],
    /// Template texts that rule the signature out.
    pub unless: &'static [&'static str],
}

/// One parser: a format and every name it is registered under.
#[derive(Clone, Copy)]
pub struct Parser {
    /// The canonical name (vLLM's; SGLang's when only SGLang has the format).
    pub name: &'static str,
    /// Tool-call or reasoning.
    pub kind: Kind,
    /// Every vLLM 0.33 name of this format (the canonical name first), empty when vLLM has none.
    pub vllm: &'static [&'static str],
    /// Every SGLang 0.5.23 name of this format.
    pub sglang: &'static [&'static str],
    /// Names this project accepted before the registry (kept for existing clients).
    pub legacy: &'static [&'static str],
    /// The marker texts the parser looks for (implemented rows: exactly what it matches; the
    /// others: the oracle's description of the format).
    pub markers: &'static [&'static str],
    pub(crate) build: Build,
    /// How call ids are made (tool rows).
    pub ids: IdStyle,
    /// Whether output starts inside reasoning (reasoning rows).
    pub start: StartRule,
    /// How a model's default is recognised; empty when it cannot be (or is not yet).
    pub detect: &'static [Detect],
    /// Tool rows: the reasoning row the engine's parser always splits with, used when the request
    /// names no reasoning parser (vLLM's Cohere parser reads both sides whichever one is named).
    pub pairs_with: &'static str,
    /// One line about the format.
    pub about: &'static str,
}

impl std::fmt::Debug for Parser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parser")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("implemented", &self.implemented())
            .finish()
    }
}

impl Parser {
    /// The base of a tool row (fields a row does not set).
    pub(crate) const TOOL: Parser = Parser {
        name: "",
        kind: Kind::Tool,
        vllm: &[],
        sglang: &[],
        legacy: &[],
        markers: &[],
        build: Build::Missing,
        ids: IdStyle::OpenAi,
        start: StartRule::CONTENT,
        detect: &[],
        pairs_with: "",
        about: "",
    };

    /// The base of a reasoning row.
    pub(crate) const REASONING: Parser = Parser {
        kind: Kind::Reasoning,
        ..Parser::TOOL
    };

    /// Whether this build implements the parser.
    pub fn implemented(&self) -> bool {
        !matches!(self.build, Build::Missing)
    }

    /// Every name that selects this row, canonical first (shadowed SGLang names left out).
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = vec![self.name];
        for &n in self.vllm.iter().chain(self.sglang).chain(self.legacy) {
            if !names.contains(&n) && !is_shadowed(self, n) {
                names.push(n);
            }
        }
        names
    }

    /// SGLang names of this format that mean another format here (vLLM's name wins).
    fn shadowed(&self) -> Vec<&'static str> {
        self.sglang
            .iter()
            .copied()
            .filter(|n| is_shadowed(self, n))
            .collect()
    }

    fn json(&self) -> Value {
        let names = self.names();
        let start = (self.kind == Kind::Reasoning).then(|| {
            json!({
                "default_reasoning": self.start.default_reasoning,
                "flags": self.start.flags,
                "needs_thinking": self.start.needs_thinking,
            })
        });
        json!({
            "name": self.name,
            "kind": self.kind.name(),
            "implemented": self.implemented(),
            "aliases": &names[1..],
            "vllm_names": self.vllm,
            "sglang_names": self.sglang,
            "legacy_names": self.legacy,
            "shadowed": self.shadowed(),
            "markers": self.markers,
            "id_style": (self.kind == Kind::Tool).then(|| self.ids.name()),
            "start": start,
            "detect": self.detect.iter().map(detect_json).collect::<Vec<_>>(),
            "about": self.about,
        })
    }
}

fn detect_json(d: &Detect) -> Value {
    let groups: Vec<Vec<Value>> = d
        .all
        .iter()
        .map(|group| {
            group
                .iter()
                .map(|sig| match sig {
                    Sig::Template(t) => json!({ "template": t }),
                    Sig::Token(t) => json!({ "token": t }),
                })
                .collect()
        })
        .collect();
    json!({ "rank": d.rank, "all": groups, "unless": d.unless })
}

/// An SGLang name is shadowed when a vLLM name of the same kind in another row is spelled alike.
fn is_shadowed(row: &Parser, name: &str) -> bool {
    !row.vllm.contains(&name)
        && row.name != name
        && rows(row.kind)
            .iter()
            .any(|other| other.name != row.name && other.vllm.contains(&name))
}

/// The rows of one kind.
pub fn rows(kind: Kind) -> &'static [Parser] {
    match kind {
        Kind::Tool => tool_rows::ROWS,
        Kind::Reasoning => reasoning_rows::ROWS,
    }
}

/// Every row, tool rows first.
pub fn all() -> impl Iterator<Item = &'static Parser> {
    tool_rows::ROWS.iter().chain(reasoning_rows::ROWS)
}

/// The row `name` selects among parsers of `kind`, whether implemented or not.
pub fn find(kind: Kind, name: &str) -> Option<&'static Parser> {
    let rows = rows(kind);
    rows.iter()
        .find(|p| p.name == name)
        .or_else(|| rows.iter().find(|p| p.vllm.contains(&name)))
        .or_else(|| {
            rows.iter()
                .find(|p| p.sglang.contains(&name) || p.legacy.contains(&name))
        })
}

/// The implemented parser `name` selects (`""` and `"none"`: no parser). An unknown name is
/// `INVALID_ARGUMENT` listing the close matches; a registered but unimplemented one is
/// `FAILED_PRECONDITION` naming it.
pub fn resolve(kind: Kind, name: &str) -> Result<Option<&'static Parser>> {
    if name.is_empty() || name == "none" {
        return Ok(None);
    }
    let field = kind.field();
    let Some(row) = find(kind, name) else {
        return Err(Error::invalid_argument(unknown_message(kind, name)));
    };
    if !row.implemented() {
        let also = if row.name == name {
            String::new()
        } else {
            format!(" (the {:?} format)", row.name)
        };
        return Err(Error::failed_precondition(format!(
            "{field}: {name:?}{also} is a {} parser the engines register but this server does not \
             implement yet; ListParsers shows which parsers are implemented",
            kind.name()
        )));
    }
    Ok(Some(row))
}

fn unknown_message(kind: Kind, name: &str) -> String {
    let field = kind.field();
    let shown = quoted(name, |n| format!("{n:?}"));
    let mut message = format!("{field}: unknown {} parser {shown}", kind.name());
    let close = close_matches(kind, name);
    if close.is_empty() {
        message.push_str("; no registered name is close");
    } else {
        message.push_str(&format!("; close matches: {}", close.join(", ")));
    }
    if find(kind.other(), name).is_some() {
        message.push_str(&format!(
            "; {shown} is a {} parser (field {})",
            kind.other().name(),
            kind.other().field()
        ));
    }
    message.push_str("; ListParsers lists every name");
    message
}

/// Registered names of `kind` close to `name`: an edit distance within a third of the length (at
/// least 2, case ignored), or one a prefix of the other; closest first, at most 6.
pub fn close_matches(kind: Kind, name: &str) -> Vec<&'static str> {
    let wanted = name.to_ascii_lowercase();
    let wanted_chars = wanted.chars().count();
    let mut scored: Vec<(usize, &'static str)> = Vec::new();
    for row in rows(kind) {
        for candidate in row.names() {
            let lower = candidate.to_ascii_lowercase();
            let limit = (lower.len().max(wanted.len()) / 3).max(2);
            let prefix =
                wanted.len() >= 3 && (lower.starts_with(&wanted) || wanted.starts_with(&lower));
            // The distance is at least the difference in length, and exactly it when one is a
            // prefix of the other: computing it in full costs the product of the lengths, and a
            // 30 MB name took seconds against the table's names.
            let apart = wanted_chars.abs_diff(lower.chars().count());
            let distance = if apart > limit || prefix {
                apart
            } else {
                edit_distance(&wanted, &lower)
            };
            if (distance <= limit || prefix) && !scored.iter().any(|(_, n)| *n == candidate) {
                scored.push((distance, candidate));
            }
        }
    }
    scored.sort();
    scored.into_iter().take(6).map(|(_, n)| n).collect()
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Canonical names of the implemented parsers of `kind`, in table order.
pub fn implemented(kind: Kind) -> Vec<&'static str> {
    rows(kind)
        .iter()
        .filter(|p| p.implemented())
        .map(|p| p.name)
        .collect()
}

/// Names of the implemented parsers of `kind` (canonical and aliases), in table order.
pub fn implemented_names(kind: Kind) -> Vec<&'static str> {
    rows(kind)
        .iter()
        .filter(|p| p.implemented())
        .flat_map(Parser::names)
        .collect()
}

/// The table as JSON (committed as `sidecar/parsers.json`, read by Python).
pub fn export_json() -> Value {
    json!({
        "about": "Generated from native/src/parse/registry (the test `registry_export_is_committed` \
                  compares it); do not edit by hand.",
        "engines": { "vllm": "0.33.0", "sglang": "0.5.23" },
        "parsers": all().map(Parser::json).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests;
