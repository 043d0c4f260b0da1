//! Running a parse session over a chunking and checking what the project promises of every stream
//! (the same invariants tests/parse/harness.py checks on the hand-written cases): the OpenAI delta
//! shape, arguments that concatenate to a JSON object (or, for a call cut off or broken, to an
//! unfinished one, and then no `tool_calls` finish), and first-byte attribution recomputed from
//! the session's trace, which proves that no byte of the decoded stream was lost or duplicated
//! between content, reasoning, tool calls and framing.

use std::ops::Range;
use std::sync::Arc;

use serde_json::Value;
use sidecar_native::parse::{Delta, ParseModel, Session, SessionConfig};
use sidecar_native::template::json::{self, Json};
use sidecar_native::ErrorKind;

/// One call as the client assembles it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Id from the first fragment.
    pub id: String,
    /// Name from the first fragment.
    pub name: String,
    /// Concatenated arguments.
    pub arguments: String,
}

/// What a client saw over the whole stream.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Collected {
    /// Concatenated content.
    pub content: String,
    /// Concatenated reasoning.
    pub reasoning: String,
    /// Calls by index.
    pub calls: Vec<Call>,
    /// The last delta's finish reason.
    pub finish_reason: String,
    /// The matched stop string.
    pub matched_stop: Option<String>,
    /// The error that ended the request, by kind.
    pub error: Option<ErrorKind>,
    /// The last delta's counters.
    pub reasoning_tokens: u32,
    /// The last delta's token count.
    pub completion_tokens: u32,
    /// Whether a delta said finished.
    pub finished: bool,
}

/// Opens a session; `Err` is the clean error a bad configuration gets (checked by the caller).
pub fn open(
    model: &Arc<ParseModel>,
    cfg: &SessionConfig,
    prompt: &[u32],
) -> Result<Session, sidecar_native::Error> {
    Session::new(Arc::clone(model), cfg, prompt)
}

/// Feeds `ids` in `chunks` (the last with `end`), plus an empty final step when `empty_end`, and
/// checks the stream invariants; `trace` must be on in `session`'s config.
pub fn run(
    mut session: Session,
    ids: &[u32],
    chunks: &[Range<usize>],
    empty_end: bool,
) -> Collected {
    let mut got = Collected::default();
    let mut last_tokens = (0u32, 0u32);
    let steps = chunks.len() + usize::from(empty_end);
    let mut fed = 0usize;
    for step in 0..steps {
        let chunk = chunks.get(step).map_or(&ids[0..0], |r| &ids[r.clone()]);
        let end = step + 1 == steps;
        match session.feed(chunk, end) {
            Ok(delta) => {
                if std::env::var_os("FUZZ_DEBUG").is_some() {
                    eprintln!("step {step} {chunk:?} end={end}: {delta:?}");
                }
                fed += chunk.len();
                absorb(&mut got, &delta, &mut last_tokens);
                if delta.matched_stop.is_some() {
                    // vLLM's count: the tokens up to the one completing the stop string.
                    assert!(delta.completion_tokens as usize <= fed, "completion_tokens");
                } else {
                    assert_eq!(delta.completion_tokens as usize, fed, "completion_tokens");
                }
            }
            Err(e) => {
                crate::assert_clean_error(&e, "feed");
                got.error = Some(e.kind());
                return got;
            }
        }
        if got.finished {
            break;
        }
    }
    assert!(
        got.finished,
        "the last step (end = true) did not finish the request"
    );
    let mut incomplete = false;
    for (i, call) in got.calls.iter().enumerate() {
        // JSON as Python's json.loads reads it: what the project's clients and parser vectors use.
        // A call cut off or broken stays incomplete: its arguments are an unfinished object (or
        // nothing), never closed by the parser.
        let args = match python_json(&call.arguments) {
            Ok(args) => args,
            Err(e) => {
                assert!(
                    call.arguments.is_empty() || json_object_prefix(&call.arguments),
                    "call {i} arguments are neither JSON ({e}) nor an unfinished object: {:?}",
                    call.arguments
                );
                incomplete = true;
                continue;
            }
        };
        assert!(
            matches!(args, Json::Object(_)),
            "call {i} arguments are not an object: {:?}",
            call.arguments
        );
    }
    if incomplete {
        assert_ne!(
            got.finish_reason, "tool_calls",
            "finish_reason tool_calls with an incomplete call"
        );
    }
    let trace = session.trace_json().expect("trace is on");
    check_attribution(&got, &trace, fed);
    got
}

/// Whether `text` is an unfinished JSON object that closing quotes and brackets alone complete.
pub fn json_object_prefix(text: &str) -> bool {
    if !text.starts_with('{') {
        return false;
    }
    let (mut stack, mut strings) = (Vec::new(), JsonStrings::default());
    for c in text.chars() {
        if strings.holds(c) {
            continue;
        }
        match c {
            '{' => stack.push('}'),
            '[' => stack.push(']'),
            '}' | ']' if stack.pop() != Some(c) => return false,
            _ => {}
        }
    }
    let mut closed = text.to_string();
    if strings.in_string {
        closed.push('"');
    }
    closed.extend(stack.iter().rev());
    closed.len() > text.len() && matches!(python_json(&closed), Ok(Json::Object(_)))
}

/// `text` parsed as Python's `json.loads` would: the template JSON parser (Python's rules), with
/// escaped lone surrogates (`\ud83d`, valid JSON text that Python and JavaScript read but no
/// UTF-8 string can hold) read as U+FFFD, and integers beyond its 128 bits (Python's are
/// unbounded) read as 0 (see [`zero_big_integers`]).
pub fn python_json(text: &str) -> Result<Json, String> {
    let first = json::parse(text, "arguments").map_err(|e| e.message().to_string());
    let Err(message) = first else {
        return first;
    };
    // What Python reads and the template parser does not: lone surrogate escapes, and integers
    // past 128 bits (read as 0: only the shape matters to the callers; a float's exponent past
    // any range the parser reads as Python does).
    let text = zero_big_integers(&replace_surrogate_escapes(text));
    json::parse(&text, "arguments").map_err(|_| message)
}

/// Which characters of a JSON text, fed one at a time, belong to its string literals.
#[derive(Default)]
struct JsonStrings {
    in_string: bool,
    escaped: bool,
}

impl JsonStrings {
    /// Feeds `c`; true when it belongs to a string literal (its quotes included).
    fn holds(&mut self, c: char) -> bool {
        if self.in_string {
            match (self.escaped, c) {
                (true, _) => self.escaped = false,
                (false, '\\') => self.escaped = true,
                (false, '"') => self.in_string = false,
                _ => {}
            }
            return true;
        }
        self.in_string = c == '"';
        self.in_string
    }
}

/// `text` with every integer literal of more than 38 digits (outside strings) written as `0`.
fn zero_big_integers(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut strings = JsonStrings::default();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if strings.holds(c) || !(c == '-' || c.is_ascii_digit()) {
            out.push(c);
            continue;
        }
        let mut number = c.to_string();
        while let Some(&d) = chars.peek() {
            if !(d.is_ascii_digit() || matches!(d, '.' | 'e' | 'E' | '+' | '-')) {
                break;
            }
            number.push(d);
            chars.next();
        }
        let digits = number.trim_start_matches('-');
        let integer = !digits.is_empty() && digits.chars().all(|d| d.is_ascii_digit());
        out.push_str(if integer && digits.len() > 38 {
            "0"
        } else {
            &number
        });
    }
    out
}

fn replace_surrogate_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        out.push(c);
        if c != '\\' {
            continue;
        }
        let Some((_, next)) = chars.next() else {
            break;
        };
        let hex = text.get(i + 2..i + 6).filter(|_| next == 'u');
        match hex.and_then(|h| u32::from_str_radix(h, 16).ok()) {
            Some(unit) if (0xD800..0xE000).contains(&unit) => {
                out.push_str("ufffd");
                for _ in 0..4 {
                    chars.next();
                }
            }
            _ => out.push(next),
        }
    }
    out
}

fn absorb(got: &mut Collected, delta: &Delta, last: &mut (u32, u32)) {
    got.content.push_str(&delta.content);
    got.reasoning.push_str(&delta.reasoning);
    for c in &delta.calls {
        let index = c.index as usize;
        if index == got.calls.len() {
            assert!(
                !c.id.is_empty() && !c.name.is_empty(),
                "first fragment of call {index} lacks id or name: {c:?}"
            );
            got.calls.push(Call {
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: String::new(),
            });
        } else {
            assert!(index < got.calls.len(), "call {index} started out of order");
            assert!(
                c.id.is_empty() && c.name.is_empty(),
                "call {index} repeats id or name: {c:?}"
            );
        }
        got.calls[index].arguments.push_str(&c.arguments);
    }
    assert!(
        delta.reasoning_tokens >= last.0,
        "reasoning_tokens went down"
    );
    assert!(
        delta.completion_tokens >= last.1,
        "completion_tokens went down"
    );
    assert!(delta.reasoning_tokens <= delta.completion_tokens);
    *last = (delta.reasoning_tokens, delta.completion_tokens);
    got.reasoning_tokens = delta.reasoning_tokens;
    got.completion_tokens = delta.completion_tokens;
    if delta.finished {
        got.finished = true;
        got.finish_reason = delta.finish_reason.to_string();
        got.matched_stop = delta.matched_stop.clone();
    }
    let mut ids: Vec<&str> = got.calls.iter().map(|c| c.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), got.calls.len(), "duplicate call ids");
}

/// Spans partition the routed stream; the text of reasoning / content spans (sentinels shown as
/// their tokens' text) is exactly the reasoning / content output; reasoning_tokens counts the
/// tokens whose first byte landed in a span counted as reasoning (reasoning text; Harmony counts
/// by message, and its spans say so).
fn check_attribution(got: &Collected, trace: &Value, fed: usize) {
    let source = trace["source"].as_str().expect("source").as_bytes();
    let sentinels = trace["sentinels"].as_object().expect("sentinels");
    let mut spans: Vec<(u64, u64, String, bool)> = trace["spans"]
        .as_array()
        .expect("spans")
        .iter()
        .map(|s| {
            let n = |i: usize| s[i].as_u64().expect("offset");
            let counts = s[3].as_bool().expect("counts as reasoning");
            (
                n(0),
                n(1),
                s[2].as_str().expect("channel").to_string(),
                counts,
            )
        })
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "overlapping spans {spans:?}");
    }
    let covered: u64 = spans.iter().map(|(s, e, _, _)| e - s).sum();
    assert!(
        covered <= source.len() as u64,
        "spans cover more than the stream"
    );
    // A stop string cuts the stream (its text and what follows are not routed); its finish
    // reason is "tool_calls" instead of "stop" when the output made a call, as vLLM reports it.
    if got.finish_reason != "stop" && got.matched_stop.is_none() {
        assert_eq!(
            covered,
            source.len() as u64,
            "routed {covered} of {} bytes",
            source.len()
        );
    }
    // Characters the model wrote in the sentinel range are U+FFFD in the source (they cannot forge
    // a marker); content and reasoning show the originals.
    let literals: std::collections::HashMap<u64, char> = trace["literals"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|p| {
                    let c = p[1].as_str().and_then(|s| s.chars().next());
                    (p[0].as_u64().expect("offset"), c.expect("a character"))
                })
                .collect()
        })
        .unwrap_or_default();
    let render = |channel: &str| -> String {
        let mut out = String::new();
        for (s, e, _, _) in spans.iter().filter(|(_, _, c, _)| c == channel) {
            let piece = std::str::from_utf8(&source[*s as usize..*e as usize])
                .expect("a span cuts a character");
            for (i, ch) in piece.char_indices() {
                if let Some(&literal) = literals.get(&(s + i as u64)) {
                    out.push(literal);
                    continue;
                }
                match sentinels.get(&ch.to_string()).and_then(Value::as_str) {
                    Some(visible) => out.push_str(visible),
                    None => out.push(ch),
                }
            }
        }
        out
    };
    assert_eq!(
        render("reasoning"),
        got.reasoning,
        "reasoning is not its spans' text"
    );
    assert_eq!(
        render("content"),
        got.content,
        "content is not its spans' text"
    );

    let counts_at = |offset: u64| {
        spans
            .iter()
            .find(|(s, e, _, _)| *s <= offset && offset < *e)
            .map(|(_, _, _, counts)| *counts)
    };
    let anchors = trace["anchors"].as_array().expect("anchors");
    let mut seqs: Vec<u64> = anchors
        .iter()
        .map(|a| a[0].as_u64().expect("seq"))
        .collect();
    seqs.sort_unstable();
    // Every token fed was decoded, those past a stop string included; but a stop ends the
    // request, so the last ones of its step whose bytes the detokenizer still held (a character
    // not complete yet) are never decoded: with a stop, every token through the last one counted
    // has its anchor, and no token has two.
    let n = fed as u64;
    if got.matched_stop.is_some() {
        let kept = seqs.len() as u64;
        assert!(
            seqs.iter().copied().eq(0..kept)
                && kept <= n
                && kept >= u64::from(got.completion_tokens),
            "every token through the stop has exactly one anchor: {seqs:?} ({} counted)",
            got.completion_tokens
        );
    } else {
        assert!(
            seqs.iter().copied().eq(0..n),
            "every token has exactly one anchor: {seqs:?}"
        );
    }
    let mut reasoning = 0u32;
    for a in anchors {
        let (offset, zero) = (
            a[1].as_u64().expect("offset"),
            a[2].as_bool().expect("zero"),
        );
        let mut counts = if zero && offset > 0 {
            counts_at(offset - 1)
        } else {
            counts_at(offset)
        };
        if counts.is_none() && zero {
            counts = counts_at(offset);
        }
        reasoning += u32::from(counts == Some(true));
    }
    assert_eq!(reasoning, got.reasoning_tokens, "reasoning_tokens");
    assert_eq!(
        trace["reasoning_tokens"].as_u64(),
        Some(u64::from(reasoning))
    );
}
