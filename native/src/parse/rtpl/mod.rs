//! vLLM 0.33's `hf` and `beam` parsers (both kinds): an interpreter of the `response_template` a
//! checkpoint ships in its tokenizer configuration, built per model from that data. The output is
//! cut into regions by the template's delimiters: `thinking` is reasoning, `content` is content,
//! and a `tool_calls` region is parsed when it closes (content parser, transform, schema typing)
//! into whole calls. `beam` parses as `hf` does; it differs only in the grammar vLLM imposes on
//! generation (reasoning required unless `enable_thinking` is false), which a parser cannot see.
//!
//! Deliberate differences from vLLM (docs/parse_stream.md): a tool region that does not parse
//! into calls is content, delimiters included (vLLM drops it), and text outside every region of a
//! template without a sink field is content (vLLM drops it): no character is lost.

pub(crate) mod content;
mod delim;
mod spec;
mod value;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use serde_json::{Map, Value};

pub(crate) use spec::Template;

use crate::parse::out::{Channel, Out};
use crate::parse::schema::Tools;
use crate::parse::text::SegBuf;
use crate::parse::Stage;
use delim::Hit;
use spec::{THINKING, TOOL_CALLS};

/// A model's response template as loaded: absent, refused (why), or ready.
pub(crate) enum ModelTemplate {
    Absent,
    Invalid(String),
    Ready(Arc<Template>),
}

impl ModelTemplate {
    /// Loads the `response_template` JSON a model's tokenizer configuration carries.
    pub(crate) fn load(spec: Option<&Value>) -> ModelTemplate {
        match spec {
            None | Some(Value::Null) => ModelTemplate::Absent,
            Some(v) => match Template::load(v) {
                Ok(t) => ModelTemplate::Ready(Arc::new(t)),
                Err(e) => ModelTemplate::Invalid(e),
            },
        }
    }

    /// What `ParseModel::info` reports: `{"state": "absent" | "invalid" | "ready", "fields": [...],
    /// "error": why}` (the server makes `hf` a default from the fields, as SGLang does).
    pub(crate) fn info(&self) -> serde_json::Value {
        match self {
            ModelTemplate::Absent => serde_json::json!({"state": "absent", "fields": []}),
            ModelTemplate::Invalid(why) => {
                serde_json::json!({"state": "invalid", "fields": [], "error": why})
            }
            ModelTemplate::Ready(t) => serde_json::json!({
                "state": "ready",
                "fields": t.fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
            }),
        }
    }

    /// The template a request naming `parser` of `kind` can use, or why it cannot (the
    /// `FAILED_PRECONDITION` message).
    pub(crate) fn for_parser(
        &self,
        field: &str,
        parser: &str,
        needs: &str,
    ) -> Result<Arc<Template>, String> {
        let t = match self {
            ModelTemplate::Ready(t) => t,
            ModelTemplate::Absent => return Err(absent(field, parser)),
            ModelTemplate::Invalid(why) => return Err(invalid(field, parser, why)),
        };
        if t.field(needs).is_none() {
            return Err(format!(
                "{field}: {parser:?} needs a response_template with a {needs} field"
            ));
        }
        Ok(Arc::clone(t))
    }
}

fn absent(field: &str, parser: &str) -> String {
    format!(
        "{field}: {parser:?} parses with the model's response_template, and this model's \
         tokenizer_config.json has none"
    )
}

fn invalid(field: &str, parser: &str, why: &str) -> String {
    format!("{field}: {parser:?}: the model's response_template is not usable: {why}")
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Open,
    Close,
}

/// A delimiter to commit: its kind, field and byte range in the text read.
type Commit = (Kind, usize, usize, usize);

/// The streaming interpreter of one request.
pub(crate) struct TemplateStage {
    tpl: Arc<Template>,
    tools: Tools,
    /// A reasoning parser was named: `thinking` is reasoning (else content).
    reasoning: bool,
    /// A tool parser was named: `tool_calls` regions become calls (else content as written).
    parse_tools: bool,
    /// The open region (a field index); `None` is the sink of a template without one.
    current: Option<usize>,
    captures: Vec<(String, String)>,
    /// A held tool region: input bytes `0..cursor` are read into it, its body starting at
    /// `body_from`; outside one `cursor` is 0 (everything read is routed).
    cursor: usize,
    body_from: usize,
    /// The open region has begun: opened by its delimiter, or (the sink) given text.
    opened: bool,
    /// The output has begun (a closer is completed only after some output).
    output: bool,
    /// Prompt text left undecided (a delimiter the output may complete, an open tool region): read
    /// before the input, never output (positions count from its start).
    carry: String,
}

impl TemplateStage {
    pub(crate) fn new(
        tpl: Arc<Template>,
        tools: Tools,
        reasoning: bool,
        parse_tools: bool,
    ) -> Self {
        let current = tpl.implicit;
        TemplateStage {
            tpl,
            tools,
            reasoning,
            parse_tools,
            current,
            captures: Vec::new(),
            cursor: 0,
            body_from: 0,
            opened: false,
            output: false,
            carry: String::new(),
        }
    }

    fn is_tool(&self, field: Option<usize>) -> bool {
        field.is_some_and(|f| self.tpl.fields[f].name == TOOL_CALLS)
    }

    fn in_tool_region(&self) -> bool {
        self.parse_tools && self.is_tool(self.current)
    }

    /// Where text of the open region goes.
    fn channel(&self) -> Channel {
        match self.current.map(|f| self.tpl.fields[f].name.as_str()) {
            Some(THINKING) if self.reasoning => Channel::Reasoning,
            _ => Channel::Content,
        }
    }

    /// Where a delimiter of `field` goes (a tool region's, when tools are not parsed, stays text).
    fn delimiter_channel(&self, field: Option<usize>) -> Channel {
        if self.is_tool(field) {
            Channel::Content
        } else {
            Channel::Framing
        }
    }

    /// The delimiters that matter now: the open region's close, or every opener and the sink's
    /// close.
    fn watch(&self) -> Vec<(Kind, usize)> {
        if let Some(f) = self.current.filter(|&f| Some(f) != self.tpl.implicit) {
            return self.tpl.fields[f]
                .close
                .as_ref()
                .map(|_| (Kind::Close, f))
                .into_iter()
                .collect();
        }
        let mut watch: Vec<(Kind, usize)> = (0..self.tpl.fields.len())
            .filter(|&f| self.tpl.fields[f].open.is_some())
            .map(|f| (Kind::Open, f))
            .collect();
        if let Some(f) = self
            .tpl
            .implicit
            .filter(|&f| self.tpl.fields[f].close.is_some())
        {
            watch.push((Kind::Close, f));
        }
        watch
    }

    /// The earliest delimiter that can be committed (longest on a tie, openers first, then by
    /// field name) and where held-back text starts.
    fn scan(&self, hay: &str, eos: bool) -> (Option<Commit>, usize) {
        type Rank<'a> = (usize, std::cmp::Reverse<usize>, u8, &'a str);
        let mut best: Option<(Rank, Commit)> = None;
        let mut hold = hay.len();
        for (kind, f) in self.watch() {
            let field = &self.tpl.fields[f];
            let delim = if kind == Kind::Open {
                &field.open
            } else {
                &field.close
            };
            match delim.as_ref().expect("watched").scan(hay, self.cursor, eos) {
                Hit::Pending { start } => hold = hold.min(start),
                Hit::Final { start, end } => {
                    let key = (
                        start,
                        std::cmp::Reverse(end - start),
                        (kind == Kind::Close) as u8,
                        field.name.as_str(),
                    );
                    if best.as_ref().is_none_or(|(k, _)| key < *k) {
                        best = Some((key, (kind, f, start, end)));
                    }
                }
                Hit::None => {}
            }
        }
        (best.map(|(_, b)| b).filter(|b| b.2 < hold), hold)
    }

    /// The text read: the prompt's carry, then `input`.
    fn hay<'a>(&self, input: &'a SegBuf) -> std::borrow::Cow<'a, str> {
        match self.carry.is_empty() {
            true => std::borrow::Cow::Borrowed(input.as_str()),
            false => std::borrow::Cow::Owned(format!("{}{}", self.carry, input.as_str())),
        }
    }

    /// Routes the first `n` bytes read (the carry's go nowhere: the prompt wrote them).
    fn take(&mut self, input: &mut SegBuf, out: &mut Out, n: usize, channel: Channel) {
        let from_carry = n.min(self.carry.len());
        self.carry.drain(..from_carry);
        out.route(input, n - from_carry, channel);
    }

    /// Reads `input` up to byte `upto` into the open region.
    fn accumulate(&mut self, input: &mut SegBuf, out: &mut Out, upto: usize) {
        self.opened |= self.current.is_some() && upto > self.cursor;
        if self.in_tool_region() {
            self.cursor = upto.max(self.cursor);
        } else {
            let channel = self.channel();
            self.take(input, out, upto, channel);
        }
    }

    /// Commits a delimiter of `len` bytes at the read position.
    fn commit(
        &mut self,
        input: &mut SegBuf,
        out: &mut Out,
        kind: Kind,
        f: usize,
        len: usize,
        eos: bool,
    ) {
        if kind == Kind::Close {
            self.close(input, out, len, false);
            return;
        }
        self.close(input, out, 0, eos);
        let field = &self.tpl.fields[f];
        let open = field.open.as_ref().expect("opener");
        self.captures = open.captures(&self.hay(input), 0, len);
        self.current = Some(f);
        self.opened = true;
        if self.in_tool_region() {
            self.cursor = len;
            self.body_from = len;
        } else {
            let channel = self.delimiter_channel(Some(f));
            self.take(input, out, len, channel);
        }
    }

    /// Ends the open region with a closer of `len` bytes at the read position (`eos`: the output
    /// ended it); a tool region becomes its calls, or content when it holds none.
    fn close(&mut self, input: &mut SegBuf, out: &mut Out, len: usize, eos: bool) {
        if self.in_tool_region() {
            self.finish_tool_region(input, out, len, eos);
        } else {
            let channel = self.delimiter_channel(self.current);
            self.take(input, out, len, channel);
        }
        self.current = self.tpl.implicit;
        self.opened = false;
        self.captures.clear();
        self.cursor = 0;
        self.body_from = 0;
    }

    fn finish_tool_region(&mut self, input: &mut SegBuf, out: &mut Out, len: usize, eos: bool) {
        let f = self.current.expect("tool region");
        let field = &self.tpl.fields[f];
        let body = self.hay(input)[self.body_from..self.cursor].to_string();
        let calls = value::region_value(field, &body, &self.captures, &self.tools)
            .map(|v| value::tool_calls(&v))
            .unwrap_or_default();
        let total = self.cursor + len;
        if calls.is_empty() {
            self.take(input, out, total, Channel::Content);
            return;
        }
        self.take(input, out, total, Channel::Tool);
        // Cut off by the end of the output before its closer: not a completed call.
        let complete = !(eos && self.tpl.fields[f].close.is_some());
        for (name, arguments) in calls {
            let index = out.start_call(&name, None);
            out.call_args(index, &arguments);
            if complete {
                out.end_call(index);
            }
        }
    }

    /// At the end of the output: when the open region's text ends with the start of a literal
    /// closer whose end is the message start anchor, cut by at most that anchor (the stop token
    /// ended the message inside its closer), that text is its closer (vLLM's `_closer_rest`).
    fn complete_cut_closer(&mut self, input: &mut SegBuf, out: &mut Out) -> bool {
        let Some(f) = self.current.filter(|_| self.opened && self.output) else {
            return false;
        };
        let (cut, total) = {
            let hay = self.hay(input);
            let text = &hay[self.body_from..];
            let closers = self.tpl.fields[f].close_literals.iter();
            let cut = closers.into_iter().find_map(|closer| {
                let mut anchors = self.tpl.start_literals.iter();
                anchors.find_map(|anchor| cut_closer(text, closer, anchor))
            });
            (cut, hay.len())
        };
        let Some(len) = cut else {
            return false;
        };
        let start = total - len;
        self.accumulate(input, out, start);
        self.commit(input, out, Kind::Close, f, len, true);
        true
    }

    /// Reads as much of `input` as can be decided.
    fn run(&mut self, input: &mut SegBuf, out: &mut Out, eos: bool) {
        let mut zero_width_at = None;
        loop {
            let (best, hold) = self.scan(&self.hay(input), eos);
            match best {
                Some((kind, f, start, end)) if !(start == end && zero_width_at == Some(start)) => {
                    zero_width_at = (start == end).then_some(start);
                    self.accumulate(input, out, start);
                    let len = end - start;
                    // The delimiter now starts at the read position.
                    self.commit(input, out, kind, f, len, false);
                }
                _ if eos && self.complete_cut_closer(input, out) => {}
                _ if eos => {
                    let n = self.carry.len() + input.len();
                    self.accumulate(input, out, n);
                    self.close(input, out, 0, true);
                    return;
                }
                _ => {
                    self.accumulate(input, out, hold);
                    return;
                }
            }
        }
    }
}

/// The byte length of the cut closer `text` ends with: `closer` without at most all of `anchor`,
/// which it ends with (the longest such start first).
fn cut_closer(text: &str, closer: &str, anchor: &str) -> Option<usize> {
    if anchor.is_empty() || closer == anchor || !closer.ends_with(anchor) {
        return None;
    }
    let chars: Vec<(usize, char)> = closer.char_indices().collect();
    let keep_min = chars.len() - anchor.chars().count();
    (keep_min..chars.len())
        .rev()
        .map(|n| &closer[..chars[n].0])
        .find(|head| !head.is_empty() && text.ends_with(head))
        .map(str::len)
}

impl Stage for TemplateStage {
    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        self.output |= !input.is_empty();
        self.run(input, out, end);
    }

    /// vLLM reads the prompt from after its last start anchor (all of it when there is none) to
    /// know the region the output starts in; text the prompt leaves undecided (an opener whose
    /// pattern may still grow, an open tool region) is read again with the output, never output.
    fn prime(&mut self, prompt: &mut SegBuf, scratch: &mut Out, _kwargs: &Map<String, Value>) {
        let text = prompt.as_str();
        let from = self
            .tpl
            .start_anchor
            .find_all(text)
            .last()
            .map_or(0, |m| m.end);
        scratch.route(prompt, from, Channel::Framing);
        self.run(prompt, scratch, false);
        self.carry = format!("{}{}", self.carry, prompt.as_str());
    }

    fn held(&self) -> usize {
        self.carry.len()
    }

    fn primes_whole_prompt(&self) -> bool {
        true
    }
}
