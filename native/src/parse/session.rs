//! One request's parse state: decoder, stop strings, reasoning split and tool parser, fed once
//! per decode step. A non-streaming parse is one [`Session::feed`] with every token and `end`.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::cancel::Cancel;
use crate::detok::{Anchor, Detokenizer, StopFilter, TextSink};
use crate::error::{Error, Result};
use crate::parse::json::is_sentinel;
use crate::parse::ledger::Ledger;
use crate::parse::model::ParseModel;
use crate::parse::out::{CallDelta, Channel, Out, Span};
use crate::parse::pacing::Pacer;
use crate::parse::reasoning::ThinkSplitter;
use crate::parse::registry::{self, Build, IdStyle, Kind, Parser, WholeBuild};
use crate::parse::rtpl::TemplateStage;
use crate::parse::schema::Tools;
use crate::parse::text::{escape_literals, restore_literals, Markers, SegBuf};
use crate::parse::{Passthrough, Stage};

/// Prompt ids the decoder is primed with (the end of the prompt): enough for any decoder state
/// (a partial character, a byte-fallback run, whether text has started).
pub const PRIME_DETOK_IDS: usize = 32;
/// How far back the reasoning split looks in the prompt for its last marker.
pub const PRIME_PARSER_IDS: usize = 512;
/// A step longer than this is fed in parts of this many ids, with cancellation checked between
/// them (a few milliseconds of work each).
pub const STEP_CHECK_IDS: usize = 1 << 15;

/// How a request is parsed (the `OpenRequest` fields that matter here, with the model's defaults
/// and the server's limits applied). The server sends it as JSON when it opens a request; a
/// missing field keeps its default and an unknown field is refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionConfig {
    /// Tool parser name; empty or `none` for none.
    pub tool_parser: String,
    /// Reasoning parser name; empty or `none` for none.
    pub reasoning_parser: String,
    /// The request's tools as JSON text (OpenAI shape); empty for none.
    pub tools_json: String,
    /// The request's `chat_template_kwargs` as JSON text; empty for none.
    pub chat_template_kwargs_json: String,
    /// Drop special tokens from text.
    pub skip_special_tokens: bool,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Keep a matched stop string in the output.
    pub include_stop_str_in_output: bool,
    /// Limit on bytes held back (undecided text); exceeding it fails the request.
    pub max_held_bytes: usize,
    /// Keep the decoded stream and attributions for [`Session::trace`] (tests).
    pub trace: bool,
    /// Seed for generated call ids; 0 = random.
    pub id_seed: u64,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            tool_parser: String::new(),
            reasoning_parser: String::new(),
            tools_json: String::new(),
            chat_template_kwargs_json: String::new(),
            skip_special_tokens: true,
            stop: Vec::new(),
            include_stop_str_in_output: false,
            max_held_bytes: 1 << 20,
            trace: false,
            id_seed: 0,
        }
    }
}

/// What one step produced for a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delta {
    /// New visible text.
    pub content: String,
    /// New reasoning text.
    pub reasoning: String,
    /// New tool-call fragments.
    pub calls: Vec<CallDelta>,
    /// Tokens attributed to reasoning so far.
    pub reasoning_tokens: u32,
    /// Output tokens seen so far.
    pub completion_tokens: u32,
    /// The request is done.
    pub finished: bool,
    /// `"stop"`, `"tool_calls"` or empty.
    pub finish_reason: &'static str,
    /// The stop string that matched.
    pub matched_stop: Option<String>,
}

/// The trace a session keeps when asked (tests check attribution with it).
#[derive(Debug, Default)]
struct Trace {
    source: String,
    anchors: Vec<(u64, Anchor)>,
    spans: Vec<Span>,
}

/// One request's parser (see the module docs).
pub struct Session {
    model: Arc<ParseModel>,
    markers: Arc<Markers>,
    skip_special: bool,
    detok: Detokenizer,
    stop: StopFilter,
    stop_strings: Vec<String>,
    reasoning: Box<dyn Stage>,
    tools: Box<dyn Stage>,
    buf1: SegBuf,
    buf2: SegBuf,
    /// When each stage is fed again while it waits (see `parse::pacing`).
    pace1: Pacer,
    pace2: Pacer,
    out: Out,
    ledger: Ledger,
    /// Whether tokens need attributing (a reasoning split exists, or a trace is kept).
    attribute: bool,
    /// The step's decoded text, reused across steps.
    sink: TextSink,
    /// (token, anchor offset) of the step's tokens, kept only when there are stop strings (see
    /// [`Session::count_through_stop`]).
    stop_anchors: Vec<(u64, u64)>,
    stream_len: u64,
    tokens: u64,
    finished: bool,
    max_held: usize,
    /// Bytes the request may hold given what the other requests of its stream hold
    /// (`--parse-max-stream-held-mb`); set by the stream before each step.
    stream_room: usize,
    trace: Option<Trace>,
}

/// The stages a request's parsers build, from their registry rows.
struct Plan {
    tool: Option<&'static Parser>,
    reasoning: Option<&'static Parser>,
    /// The one stage that reads reasoning and tool calls together, when a row is of that kind.
    whole: Option<WholeBuild>,
    /// The rows interpret the model's response template (`hf`, `beam`).
    template: bool,
}

impl Plan {
    /// Resolves the configured names; a `Whole` row (Harmony) combines only with its own family.
    fn new(cfg: &SessionConfig) -> Result<Plan> {
        let tool = registry::resolve(Kind::Tool, &cfg.tool_parser)?;
        let mut reasoning = registry::resolve(Kind::Reasoning, &cfg.reasoning_parser)?;
        if let Some(pair) = tool.map(|t| t.pairs_with).filter(|p| !p.is_empty()) {
            reasoning = reasoning.or(registry::resolve(Kind::Reasoning, pair)?);
        }
        let whole = match (tool.and_then(whole_of), reasoning.and_then(whole_of)) {
            (None, None) => None,
            (Some((a, build)), Some((b, _))) if a == b => Some(build),
            (Some((_, build)), None) if reasoning.is_none() => Some(build),
            (None, Some((_, build))) if tool.is_none() => Some(build),
            _ => return Err(incompatible(tool, reasoning)),
        };
        let is_template =
            |row: Option<&'static Parser>| row.map(|r| matches!(r.build, Build::Template));
        let template = match (is_template(tool), is_template(reasoning)) {
            (Some(true), Some(true)) if tool.map(|t| t.name) == reasoning.map(|r| r.name) => true,
            (Some(true), None) | (None, Some(true)) => true,
            (Some(true), _) | (_, Some(true)) => return Err(template_mix(tool, reasoning)),
            _ => false,
        };
        Ok(Plan {
            tool,
            reasoning,
            whole,
            template,
        })
    }

    /// The response-template stage, or why the model cannot serve it (`FAILED_PRECONDITION`).
    fn template_stage(&self, model: &ParseModel, schema: &Tools) -> Result<Option<Box<dyn Stage>>> {
        if !self.template {
            return Ok(None);
        }
        let mut tpl = None;
        for (row, kind, needs) in [
            (self.reasoning, Kind::Reasoning, "thinking"),
            (self.tool, Kind::Tool, "tool_calls"),
        ] {
            if let Some(row) = row {
                let found = model.template.for_parser(kind.field(), row.name, needs);
                tpl = Some(found.map_err(Error::failed_precondition)?);
            }
        }
        let tpl = tpl.ok_or_else(|| Error::internal("a template plan without a template row"))?;
        let stage = TemplateStage::new(
            tpl,
            schema.clone(),
            self.reasoning.is_some(),
            self.tool.is_some(),
        );
        Ok(Some(Box::new(stage)))
    }

    fn markers(&self, model: &ParseModel, skip: bool) -> Markers {
        let mut markers = Markers::with_suffix(model.token_suffix());
        let lookup = |text: &str| model.marker_token(text, skip);
        for row in self.reasoning.iter().chain(self.tool.iter()) {
            row.markers.iter().for_each(|&m| markers.add(m, lookup));
        }
        markers
    }

    fn reasoning_stage(&self, markers: &Markers, schema: &Tools) -> Box<dyn Stage> {
        if let Some(build) = self.whole {
            return build(markers, schema);
        }
        match self.reasoning.map(|r| (r.build, r.start)) {
            Some((Build::Think(spec), start)) => {
                Box::new(ThinkSplitter::new(&spec, start, markers))
            }
            _ => Box::new(Passthrough(Channel::Visible)),
        }
    }

    fn tool_stage(&self, markers: &Markers, schema: &Tools) -> Box<dyn Stage> {
        match self.tool.map(|t| t.build) {
            Some(Build::Tool(build)) if self.whole.is_none() => build(markers, schema),
            _ => Box::new(Passthrough(Channel::Content)),
        }
    }
}

/// The family and builder of a row whose one stage reads reasoning and tool calls together.
fn whole_of(row: &'static Parser) -> Option<(&'static str, WholeBuild)> {
    match row.build {
        Build::Whole { family, build } => Some((family, build)),
        _ => None,
    }
}

/// Why a response-template parser cannot run with another format's parser.
fn template_mix(tool: Option<&'static Parser>, reasoning: Option<&'static Parser>) -> Error {
    let (tool, reasoning) = (
        tool.map_or("", |t| t.name),
        reasoning.map_or("", |r| r.name),
    );
    Error::invalid_argument(format!(
        "tool_parser {tool:?} and reasoning_parser {reasoning:?}: a response_template parser reads \
         reasoning and tool calls itself and combines only with the same parser on the other side \
         (as in vLLM), or `none`"
    ))
}

/// Why a tool and a reasoning parser cannot run together (one of them reads both sides itself).
fn incompatible(tool: Option<&'static Parser>, reasoning: Option<&'static Parser>) -> Error {
    let (Some(tool), Some(reasoning)) = (tool, reasoning) else {
        return Error::internal("incompatible parsers without two parsers");
    };
    let (whole, other, field) = match whole_of(tool) {
        Some(_) => (tool, reasoning, Kind::Reasoning.field()),
        None => (reasoning, tool, Kind::Tool.field()),
    };
    let family = whole_of(whole).map_or("", |(f, _)| f);
    Error::invalid_argument(format!(
        "{field}: {:?} cannot be combined with {:?}, a {family} parser that reads reasoning and tool \
         calls itself; use {family} parsers on both sides (tool {:?}, reasoning {:?}) or `none`",
        other.name,
        whole.name,
        registry::rows(Kind::Tool).iter().find(|r| whole_of(r).is_some_and(|(f, _)| f == family)).map_or("", |r| r.name),
        registry::rows(Kind::Reasoning).iter().find(|r| whole_of(r).is_some_and(|(f, _)| f == family)).map_or("", |r| r.name),
    ))
}

impl Session {
    /// Opens a session. An unknown parser name, bad `tools_json` or kwargs are `InvalidArgument`; a
    /// parser the engines register but this build does not implement is `FailedPrecondition`.
    pub fn new(model: Arc<ParseModel>, cfg: &SessionConfig, prompt: &[u32]) -> Result<Session> {
        let plan = Plan::new(cfg)?;
        let schema = Tools::parse(&cfg.tools_json)?;
        let kwargs = kwargs_object(&cfg.chat_template_kwargs_json)?;
        // The parsers see marker tokens as noncharacters U+FDD0.. (and the model's own as U+FFFD):
        // a stop string holding one would match a marker, not text.
        if let Some(i) = cfg.stop.iter().position(|s| s.chars().any(is_sentinel)) {
            return Err(Error::invalid_argument(format!(
                "stop[{i}]: holds a noncharacter U+FDD0..U+FDEF, which the parser reserves for marker tokens"
            )));
        }
        if let Some(i) = prompt.iter().position(|&id| !model.accepts(id)) {
            return Err(Error::invalid_argument(format!(
                "prompt_token_ids[{i}]: {}",
                model.refusal(prompt[i])
            )));
        }
        // vLLM's response-template parser reads special tokens as text (it turns skipping off).
        let skip = cfg.skip_special_tokens && !plan.template;
        let markers = Arc::new(plan.markers(&model, skip));
        let template_stage = plan.template_stage(&model, &schema)?;
        let id_style = plan.tool.map_or(IdStyle::OpenAi, |t| t.ids);
        let seed = if cfg.id_seed != 0 {
            cfg.id_seed
        } else {
            random_seed()
        };
        let mut session = Session {
            detok: Detokenizer::new(Arc::clone(&model.table), skip),
            stop: StopFilter::new(&cfg.stop, cfg.include_stop_str_in_output),
            stop_strings: cfg.stop.clone(),
            out: Out::new(Arc::clone(&markers), id_style, seed),
            reasoning: template_stage.unwrap_or_else(|| plan.reasoning_stage(&markers, &schema)),
            tools: plan.tool_stage(&markers, &schema),
            model,
            markers,
            skip_special: skip,
            buf1: SegBuf::default(),
            buf2: SegBuf::default(),
            pace1: Pacer::default(),
            pace2: Pacer::default(),
            ledger: Ledger::default(),
            attribute: cfg.trace
                || plan.reasoning.is_some()
                || plan.whole.is_some()
                || plan.template,
            sink: TextSink::default(),
            stop_anchors: Vec::new(),
            stream_len: 0,
            tokens: 0,
            finished: false,
            max_held: cfg.max_held_bytes,
            stream_room: usize::MAX,
            trace: cfg.trace.then(Trace::default),
        };
        session.prime(prompt, &kwargs);
        Ok(session)
    }

    /// Primes the decoder with the end of the prompt and the reasoning split with the prompt's
    /// tail after its last special token.
    fn prime(&mut self, prompt: &[u32], kwargs: &Map<String, Value>) {
        let tail = &prompt[prompt.len().saturating_sub(PRIME_DETOK_IDS)..];
        self.detok.prime(tail);
        let window = &prompt[prompt.len().saturating_sub(PRIME_PARSER_IDS)..];
        let start = match self.reasoning.primes_whole_prompt() {
            true => 0,
            false => window
                .iter()
                .rposition(|&id| {
                    self.model.is_special(id) && self.markers.sentinel_for(id).is_none()
                })
                .map_or(0, |p| p + 1),
        };
        let mut detok = Detokenizer::new(Arc::clone(&self.model.table), self.skip_special);
        let mut sink = TextSink::default();
        // Prompt text that spells a sentinel is escaped as output is (see `feed_into`).
        let (mut escaped, mut ignored) = (0, Vec::new());
        for &id in &window[start..] {
            match self.markers.sentinel_for(id) {
                Some(s) => {
                    detok.flush(&mut sink);
                    escape_literals(&mut sink.text, escaped, 0, &mut ignored);
                    sink.text.push(s);
                    escaped = sink.text.len();
                }
                None => detok.push(id, u64::MAX, &mut sink),
            }
        }
        detok.flush(&mut sink);
        escape_literals(&mut sink.text, escaped, 0, &mut ignored);
        let mut input = SegBuf::default();
        input.push(&sink.text, 0);
        let mut scratch = Out::new(Arc::clone(&self.markers), IdStyle::OpenAi, 1);
        self.reasoning.prime(&mut input, &mut scratch, kwargs);
    }

    /// Whether the request finished (engine said so, a stop string matched, or it failed).
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The held-back bytes past which a step reads everything held (`--parse-max-held-kb`).
    pub fn held_limit(&self) -> usize {
        self.max_held
    }

    /// Sets the bytes this request may hold back in its next steps given what the other requests
    /// of its stream hold; past it (and under its own limit) the step fails the request naming
    /// `--parse-max-stream-held-mb`.
    pub fn set_stream_room(&mut self, room: usize) {
        self.stream_room = room;
    }

    /// The held-back bytes past which this request's next step fails: its own limit or its
    /// stream's room, whichever is smaller.
    pub fn held_cap(&self) -> usize {
        self.max_held.min(self.stream_room)
    }

    /// Bytes currently held back across all stages.
    pub fn held_bytes(&self) -> usize {
        self.detok.held_bytes()
            + self.stop.held()
            + self.buf1.len()
            + self.buf2.len()
            + self.reasoning.held()
            + self.tools.held()
            + self.ledger.held()
    }

    /// Output tokens read so far (tests: how far a failed step got).
    #[cfg(test)]
    pub(crate) fn tokens_read(&self) -> u64 {
        self.tokens
    }

    /// Bytes handed to the two stages and the stages nested in them over the request (their
    /// reading is bounded by it).
    #[cfg(test)]
    pub(crate) fn handed_bytes(&self) -> u64 {
        self.pace1.handed()
            + self.pace2.handed()
            + self.reasoning.nested_handed()
            + self.tools.nested_handed()
    }

    /// Feeds one step's ids; `end` = the engine finished the request (flush everything).
    pub fn feed(&mut self, ids: &[u32], end: bool) -> Result<Delta> {
        let mut delta = Delta::default();
        self.feed_into(ids, end, &mut delta)?;
        Ok(delta)
    }

    /// [`Session::feed`] into a reused `delta` (its buffers are cleared and refilled), so a
    /// steady stream of steps allocates nothing.
    pub fn feed_into(&mut self, ids: &[u32], end: bool, delta: &mut Delta) -> Result<()> {
        self.feed_part(ids, end, delta, true)
    }

    /// [`Session::feed_into`] for a step of any size that stops when `cancel` says so: a long
    /// step is fed in parts of [`STEP_CHECK_IDS`] ids (the result does not depend on how a stream
    /// is split into steps) with `cancel` checked before each, and the parts' deltas joined. The
    /// held-back bound is checked after every part, as for steps of that size, and the joined
    /// delta may not pass `max_delta` bytes (the room its answer has: `RESOURCE_EXHAUSTED` naming
    /// `--max-message-mb`, the request failed): 16M ids of a 75-byte token in one 30 MiB step
    /// otherwise made 1.2 GB of text before anything looked at it.
    pub fn feed_cancellable(
        &mut self,
        ids: &[u32],
        end: bool,
        delta: &mut Delta,
        cancel: &Cancel<'_>,
        max_delta: usize,
    ) -> Result<()> {
        if ids.len() <= STEP_CHECK_IDS {
            return self.feed_into(ids, end, delta);
        }
        // Checked over the whole step first, so an error names the id's position in the step.
        self.check_known(ids)?;
        let mut joined = Delta::default();
        let mut joined_bytes = 0usize;
        let parts = ids.len().div_ceil(STEP_CHECK_IDS);
        for (i, part) in ids.chunks(STEP_CHECK_IDS).enumerate() {
            cancel.check()?;
            let last = i + 1 == parts;
            self.feed_part(part, end && last, delta, true)?;
            joined_bytes += delta.content.len() + delta.reasoning.len();
            joined_bytes += delta
                .calls
                .iter()
                .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                .sum::<usize>();
            if joined_bytes > max_delta {
                self.finished = true;
                return Err(Error::resource_exhausted(format!(
                    "the request's answer to this step passes {max_delta} bytes, what the server's message \
                     limit leaves it (--max-message-mb); send fewer ids per step"
                )));
            }
            joined.content.push_str(&delta.content);
            joined.reasoning.push_str(&delta.reasoning);
            joined.calls.append(&mut delta.calls);
            if delta.finished {
                // A stop string ended the request: the rest of the step is past the end.
                break;
            }
        }
        std::mem::swap(&mut delta.content, &mut joined.content);
        std::mem::swap(&mut delta.reasoning, &mut joined.reasoning);
        std::mem::swap(&mut delta.calls, &mut joined.calls);
        Ok(())
    }

    fn feed_part(
        &mut self,
        ids: &[u32],
        end: bool,
        delta: &mut Delta,
        check_held: bool,
    ) -> Result<()> {
        if self.finished {
            return Err(Error::failed_precondition("the request already finished"));
        }
        self.check_known(ids)?;
        let mut sink = std::mem::take(&mut self.sink);
        let escaped_before = self.out.literals.len();
        let first_token = self.tokens;
        self.decode(ids, end, &mut sink);
        // Stop strings match what the model wrote (vLLM searches the decoded text), not the
        // U+FFFD that stands in for a noncharacter in the parsers' input.
        let seen = restore_literals(&sink.text, sink.base, &self.out.literals[escaped_before..]);
        let buf1 = &mut self.buf1;
        let matched = self
            .stop
            .feed_seen(&sink.text, &seen, sink.base, end, |text, offset| {
                buf1.push(text, offset)
            });
        drop(seen);
        self.sink = sink;
        if let Some(m) = &matched {
            self.count_through_stop(m.end, first_token);
        }
        let done = end || matched.is_some();
        self.run_stages(done, false);
        if check_held && !done && self.held_bytes() > self.held_cap() {
            // Text a paced stage has not read yet counts as held: read it before failing, so the
            // limit means what it means unpaced.
            self.run_stages(done, true);
            let held = self.held_bytes();
            if held > self.held_cap() {
                self.finished = true;
                return Err(Error::resource_exhausted(self.held_refusal(held)));
            }
        }
        self.fill(delta, done, matched.map(|m| m.index));
        Ok(())
    }

    /// Counts the step's tokens only up to the one completing the stop string that ends at
    /// stream offset `stop_end`, as vLLM (0.33) keeps them: a token whose text starts at or past
    /// `stop_end`, or whose text has not landed yet, is not output. So `completion_tokens` does
    /// not depend on how many ids a step carried. (vLLM keeps at least one token of the step; its
    /// text lands token by token, so the completing token is always in the step. Here a held
    /// byte-fallback run lands later, and the step's tokens may all fall past the stop.)
    fn count_through_stop(&mut self, stop_end: u64, first_token: u64) {
        let fed = self.tokens - first_token;
        let kept = self
            .stop_anchors
            .iter()
            .filter(|&&(token, offset)| token >= first_token && offset < stop_end)
            .count() as u64;
        self.tokens = first_token + kept.min(fed);
    }

    /// Why holding `held` bytes fails the request: its own limit, or its stream's. The limit
    /// charges each undecided token's bookkeeping too (memory a wait of tokens holds however
    /// little text they made), so the message says how much of `held` is text and how much that:
    /// saying only the sum, 92 KB of undecided text read as "1072993 bytes of undecided output".
    /// The text is what the stages hold, a copy a stage keeps beside its input (a JSON call
    /// reader's raw text) counted again: that is memory too.
    fn held_refusal(&self, held: usize) -> String {
        let bookkeeping = self.ledger.held();
        let holds = format!(
            "the request holds back {} bytes of undecided text (each copy a parser keeps counted) \
             and {bookkeeping} bytes of bookkeeping for its {} undecided tokens ({held} bytes in all)",
            held.saturating_sub(bookkeeping),
            self.ledger.pending_tokens()
        );
        if held > self.max_held {
            format!(
                "{holds}, more than the limit of {} (--parse-max-held-kb; an unterminated tool call \
                 or value, or tokens with no text waiting for the text before them?)",
                self.max_held
            )
        } else {
            format!(
                "{holds}, more than the {} bytes the other requests of its stream leave of the \
                 stream's limit (--parse-max-stream-held-mb)",
                self.stream_room
            )
        }
    }

    /// Runs the text in `buf1` through both stages, each when its pacer says it is due (`force`:
    /// in any case, nested readers included), and attributes what they decided.
    fn run_stages(&mut self, done: bool, force: bool) {
        if force {
            self.reasoning.read_nested_waits();
            self.tools.read_nested_waits();
        }
        let (reasoning, tools, out) = (&mut self.reasoning, &mut self.tools, &mut self.out);
        self.pace1.feed(&mut self.buf1, done, force, |input| {
            reasoning.feed(input, out, done)
        });
        out.visible.drain_into(&mut self.buf2);
        self.pace2.feed(&mut self.buf2, done, force, |input| {
            tools.feed(input, out, done)
        });
        self.attribute_step(done);
    }

    /// Refuses an id the model cannot output (outside the vocabulary and its output size), naming
    /// its position in `ids`.
    fn check_known(&self, ids: &[u32]) -> Result<()> {
        match ids.iter().position(|&id| !self.model.accepts(id)) {
            None => Ok(()),
            Some(i) => Err(Error::invalid_argument(format!(
                "token_ids[{i}]: {}",
                self.model.refusal(ids[i])
            ))),
        }
    }

    /// Decodes a step's ids into `sink` (marker tokens as sentinels, model text escaped so it
    /// cannot spell one) and records its anchors.
    fn decode(&mut self, ids: &[u32], end: bool, sink: &mut TextSink) {
        sink.text.clear();
        sink.anchors.clear();
        sink.base = self.stream_len;
        // Decoded text is escaped before each sentinel goes in: only the session writes sentinels.
        let mut escaped = 0;
        for &id in ids {
            let seq = self.tokens;
            self.tokens += 1;
            match self.markers.sentinel_for(id) {
                Some(sentinel) => {
                    self.detok.flush(sink);
                    self.detok.note_visible_marker(id);
                    escape_literals(&mut sink.text, escaped, sink.base, &mut self.out.literals);
                    sink.anchors
                        .push((seq, Anchor::Visible(sink.base + sink.text.len() as u64)));
                    sink.text.push(sentinel);
                    escaped = sink.text.len();
                }
                None => self.detok.push(id, seq, sink),
            }
        }
        if end {
            self.detok.flush(sink);
        }
        escape_literals(&mut sink.text, escaped, sink.base, &mut self.out.literals);
        self.stream_len += sink.text.len() as u64;
        if self.stop.is_active() {
            self.stop_anchors.clear();
            self.stop_anchors
                .extend(sink.anchors.iter().map(|&(token, a)| (token, a.offset())));
        }
        if let Some(trace) = &mut self.trace {
            trace.source.push_str(&sink.text);
            trace.anchors.extend_from_slice(&sink.anchors);
        }
        if self.attribute {
            self.ledger.add_anchors(&mut sink.anchors);
        }
    }

    /// Attributes the tokens whose ranges this step decided.
    fn attribute_step(&mut self, done: bool) {
        if self.attribute {
            self.ledger.add_spans(&self.out.spans);
            self.ledger.resolve(done);
        }
        if let Some(trace) = &mut self.trace {
            trace.spans.extend_from_slice(&self.out.spans);
        }
        self.out.spans.clear();
    }

    /// Moves the step's output into `delta`; `stop` is the index of the stop string that matched.
    fn fill(&mut self, delta: &mut Delta, done: bool, stop: Option<usize>) {
        // Swap buffers: the delta takes this step's text, the sink keeps the delta's old capacity.
        delta.content.clear();
        delta.reasoning.clear();
        delta.calls.clear();
        std::mem::swap(&mut delta.content, &mut self.out.content);
        std::mem::swap(&mut delta.reasoning, &mut self.out.reasoning);
        std::mem::swap(&mut delta.calls, &mut self.out.calls);
        delta.reasoning_tokens = self.ledger.reasoning_tokens();
        delta.completion_tokens = self.tokens.min(u32::MAX as u64) as u32;
        delta.finished = done;
        delta.finish_reason = "";
        delta.matched_stop = None;
        if !done {
            return;
        }
        self.finished = true;
        if let Some(index) = stop {
            let strings = self.stop_strings.iter().filter(|s| !s.is_empty());
            delta.matched_stop = Some(strings.clone().nth(index).cloned().unwrap_or_default());
        }
        // Complete calls make it "tool_calls" whatever ended the output, a stop string included
        // (vLLM's chat layer reports it so); a call cut off by the end of the output is not a
        // completed call: the stop string's reason, or the engine's own (length), stands.
        if self.out.all_calls_complete() {
            delta.finish_reason = "tool_calls";
        } else if stop.is_some() {
            delta.finish_reason = "stop";
        }
    }

    /// The trace as JSON (`source`, `sentinels`, `anchors`, `spans` as `[start, end, channel,
    /// counts as reasoning]`, `literals`: the characters the model wrote in the sentinel range,
    /// replaced in `source`), when the session keeps one.
    pub fn trace_json(&self) -> Option<Value> {
        let trace = self.trace.as_ref()?;
        let sentinels: serde_json::Map<String, Value> = self
            .markers
            .sentinels()
            .into_iter()
            .map(|(c, v)| (c.to_string(), Value::String(v)))
            .collect();
        let anchors: Vec<Value> = trace
            .anchors
            .iter()
            .map(|&(seq, a)| {
                let zero = matches!(a, Anchor::ZeroWidth(_));
                serde_json::json!([seq, a.offset(), zero])
            })
            .collect();
        let spans: Vec<Value> = trace
            .spans
            .iter()
            .map(|&(s, e, c, counts)| serde_json::json!([s, e, c.name(), counts]))
            .collect();
        Some(serde_json::json!({
            "source": trace.source,
            "sentinels": sentinels,
            "anchors": anchors,
            "spans": spans,
            "literals": self.out.literals.iter().map(|&(o, c)| serde_json::json!([o, c.to_string()])).collect::<Vec<_>>(),
            "reasoning_tokens": self.ledger.reasoning_tokens(),
        }))
    }
}

/// The request's `chat_template_kwargs` (a JSON object; empty text = none).
fn kwargs_object(kwargs_json: &str) -> Result<Map<String, Value>> {
    if kwargs_json.trim().is_empty() {
        return Ok(Map::new());
    }
    let value: Value = serde_json::from_str(kwargs_json).map_err(|e| {
        Error::invalid_argument(format!("chat_template_kwargs_json: not valid JSON: {e}"))
    })?;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(Error::invalid_argument(
            "chat_template_kwargs_json: expected a JSON object",
        )),
    }
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // RandomState is seeded from the OS once per process; the counter makes every call distinct.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}
