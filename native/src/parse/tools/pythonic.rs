//! `pythonic` (Llama 3.2/4 pythonic, OLMo, LFM2 bodies): a Python list of calls with keyword
//! arguments, `[get_weather(city='Paris', days=3), get_time()]`, optionally between
//! `<|python_start|>` and `<|python_end|>` (framing). Values are Python literals (strings with
//! `'`/`"` and `r` prefixes, numbers, `True`/`False`/`None`, lists, tuples, dicts with string
//! keys) converted to JSON.
//!
//! A list may appear anywhere in the text (text around it is content). A call is made once it is
//! known to be one: its first keyword argument is complete (the character after the value
//! arrived) or it closed (`name()`); until then `[name(key=` may still be prose, and if it never
//! becomes a call the `[` and everything after it are content, byte for byte. Arguments stream one
//! complete keyword argument at a time. A list cut off by the end of the output keeps its calls:
//! the last one, if made, stays incomplete (its arguments are never closed) and owns the rest of
//! the text; a call not yet made and anything after broken syntax are content. Not supported:
//! positional arguments, `\N{...}` escapes, implicit string concatenation, non-decimal numbers.
//!
//! The family's other formats are [`PythonicSpec`]s of the same parser: LFM2 reads a list only
//! after its start marker (the marker is content when no call follows), OLMo 3 reads calls one per
//! line between `<function_calls>` and `</function_calls>` without brackets.

use super::pythonic_value::{read_value, Open, Res, P};
use crate::parse::json::push_json_string;
use crate::parse::out::{Channel, Out};
use crate::parse::schema::Tools;
use crate::parse::text::{leading_ws, Markers, SegBuf};
use crate::parse::Stage;

/// The markers this format uses.
pub(crate) const MARKERS: &[&str] = &["<|python_start|>", "<|python_end|>"];

/// A call read from a list so far.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ParsedCall {
    pub(crate) name: String,
    /// Complete keyword arguments: (key, JSON value).
    pub(crate) members: Vec<(String, String)>,
    pub(crate) closed: bool,
    /// Bytes of the list text through the call's last complete piece: its `)` when closed, else
    /// its last complete argument.
    pub(crate) end: usize,
}

impl ParsedCall {
    /// Whether the text is known to be a call: it closed, or an argument is complete. Until then
    /// `[name(key=` may still turn out to be prose.
    pub(crate) fn decided(&self) -> bool {
        self.closed || !self.members.is_empty()
    }
}

/// How far a list parse got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListStatus {
    /// More text is needed.
    Wait,
    /// This is not a call list.
    NotAList,
    /// The list ended after this many bytes.
    Done(usize),
    /// Syntax broke at this byte (after at least one call began).
    Broken(usize),
}

/// How calls are written around their `name(key=value)` syntax.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Syntax<'a> {
    /// `None`: a Python list `[f(..), g(..)]`. `Some(close)`: calls separated by newlines (or
    /// commas) without brackets, up to this end marker (OLMo 3's `</function_calls>`).
    pub(crate) close: Option<&'a str>,
    /// Accept JSON's `true`, `false`, `null` too.
    pub(crate) json_literals: bool,
}

impl P<'_> {
    /// `name(` followed by `)` or `key=`: the call's name, or why not.
    fn call_head(&mut self) -> Res<String> {
        let name = self.ident()?.to_string();
        self.ws();
        match self.peek() {
            None => return Err(true),
            Some('(') => self.i += 1,
            _ => return Err(false),
        }
        self.ws();
        let save = self.i;
        match self.peek() {
            None => Err(true),
            Some(')') => Ok(name),
            _ => {
                self.ident()?;
                self.ws();
                match self.peek() {
                    None => Err(true),
                    Some('=') if !self.s[self.i + 1..].starts_with('=') => {
                        self.i = save;
                        Ok(name)
                    }
                    _ => Err(false),
                }
            }
        }
    }
}

/// How a stop inside a call reads: more input needed, else broken at `at` (not a list when no call
/// began).
fn stop(calls: &[ParsedCall], more: bool, at: usize) -> ListStatus {
    if more {
        ListStatus::Wait
    } else if calls.is_empty() {
        ListStatus::NotAList
    } else {
        ListStatus::Broken(at)
    }
}

/// Reads a call list at the start of `s` (which starts with `[`).
#[cfg(test)]
pub(crate) fn parse_list(s: &str) -> (Vec<ParsedCall>, ListStatus) {
    parse_calls(s, Syntax::default())
}

/// Reads calls written in `syntax` at the start of `s` (a list starts with its `[`; lines start
/// with the first call). `Done` counts the closing `]` or end marker.
#[cfg(test)]
pub(crate) fn parse_calls(s: &str, syntax: Syntax<'_>) -> (Vec<ParsedCall>, ListStatus) {
    let mut reader = CallReader::default();
    let status = reader.read(s, syntax);
    (reader.calls, status)
}

/// Calls read from a text that grows between reads. Reading resumes after the last complete
/// argument or closed call, or inside an argument's value the text ended in (in a string, nested
/// in lists, tuples and dicts or not): nothing read before such a point depends on what follows,
/// so resuming there gives what reading the whole text again would, and a step reads only the new
/// text (and the last piece of an open string).
#[derive(Debug, Default)]
pub(crate) struct CallReader {
    /// The calls read, with the open one (possibly not yet decided) last.
    pub(crate) calls: Vec<ParsedCall>,
    /// Where the next read resumes, and how many calls were read by then; `None`: at the start.
    resume: Option<(usize, usize)>,
    /// The argument of the last call the text ended in (inside its value, or after it); the next
    /// read continues it.
    open: Option<OpenArg>,
    /// Where the last read started: it read at most the text from there on (tests bound the
    /// work of a step with it).
    pub(crate) read_from: usize,
}

/// An argument cut off by the end of the text, as far as it is known.
#[derive(Debug)]
struct OpenArg {
    key: String,
    /// Where the argument starts (a break is reported there).
    at: usize,
    /// Where reading continues.
    i: usize,
    value: OpenValue,
}

#[derive(Debug)]
enum OpenValue {
    /// Being read: what is open in it, innermost last (empty: not started).
    Reading(Vec<Open>),
    /// The value is complete (JSON text); what follows it (`,` or `)`) is not here yet.
    Done(String),
}

impl CallReader {
    /// Reads calls written in `syntax` at the start of `s` (a list starts with its `[`; lines
    /// start with the first call), `s` extending the text of the previous read. `Done` counts
    /// the closing `]` or end marker.
    pub(crate) fn read(&mut self, s: &str, syntax: Syntax<'_>) -> ListStatus {
        let (at, kept) = self
            .resume
            .unwrap_or((usize::from(syntax.close.is_none()), 0));
        self.calls.truncate(kept);
        let mut p = P {
            s,
            i: self.open.as_ref().map_or(at, |open| open.i),
            json_literals: syntax.json_literals,
        };
        self.read_from = p.i;
        if self.calls.last().is_some_and(|c| !c.closed) {
            if let Err(status) = self.arguments(&mut p) {
                return status;
            }
        }
        loop {
            p.ws();
            if self.calls.is_empty() {
                let empty = match syntax.close {
                    None => p.peek() == Some(']'),
                    Some(close) => s[p.i..].starts_with(close),
                };
                if empty {
                    return ListStatus::NotAList;
                }
            } else if let Some(status) = between_calls(&mut p, syntax) {
                return status;
            }
            let at = p.i;
            let name = match p.call_head() {
                Ok(name) => name,
                Err(more) => return stop(&self.calls, more, at),
            };
            self.calls.push(ParsedCall {
                name,
                ..ParsedCall::default()
            });
            if let Err(status) = self.arguments(&mut p) {
                return status;
            }
        }
    }

    /// Reads the keyword arguments of the last call through its `)`; a complete argument and the
    /// `)` are points to resume at, and so is the end of the text inside or after an argument.
    fn arguments(&mut self, p: &mut P<'_>) -> Result<(), ListStatus> {
        loop {
            let open = match self.open.take() {
                Some(open) => open,
                None => match self.next_argument(p)? {
                    Some(open) => open,
                    None => return Ok(()),
                },
            };
            let (at, key, value) = self.value(p, open)?;
            let value_end = p.i;
            p.ws();
            match p.peek() {
                None => {
                    self.keep_open(OpenArg {
                        key,
                        at,
                        i: value_end,
                        value: OpenValue::Done(value),
                    });
                    return Err(ListStatus::Wait);
                }
                Some(',') => p.i += 1,
                Some(')') => {}
                _ => return Err(ListStatus::Broken(at)),
            }
            let call = self.calls.last_mut().expect("a call");
            call.members.push((key, value));
            call.end = value_end;
            self.resume = Some((p.i, self.calls.len()));
        }
    }

    /// After a call's `(` or an argument's `,`: the next argument through its `=`, its value yet
    /// to read; `None` when the call closed instead.
    fn next_argument(&mut self, p: &mut P<'_>) -> Result<Option<OpenArg>, ListStatus> {
        p.ws();
        match p.peek() {
            None => return Err(ListStatus::Wait),
            Some(')') => {
                p.i += 1;
                let call = self.calls.last_mut().expect("a call");
                call.closed = true;
                call.end = p.i;
                self.resume = Some((p.i, self.calls.len()));
                return Ok(None);
            }
            _ => {}
        }
        let at = p.i;
        let key = p
            .ident()
            .map_err(|more| stop(&self.calls, more, at))?
            .to_string();
        p.ws();
        match p.peek() {
            None => return Err(ListStatus::Wait),
            Some('=') => p.i += 1,
            _ => return Err(ListStatus::Broken(at)),
        }
        p.ws();
        Ok(Some(OpenArg {
            key,
            at,
            i: p.i,
            value: OpenValue::Reading(Vec::new()),
        }))
    }

    /// The value of an argument read so far, continued from `open.i`: the argument's start, key
    /// and JSON value, or the status to stop with (the argument kept open when the text ended
    /// inside a string or container of it).
    fn value(
        &mut self,
        p: &mut P<'_>,
        open: OpenArg,
    ) -> Result<(usize, String, String), ListStatus> {
        p.i = open.i;
        let OpenArg { key, at, value, .. } = open;
        let mut stack = match value {
            OpenValue::Done(value) => return Ok((at, key, value)),
            OpenValue::Reading(stack) => stack,
        };
        match read_value(p, &mut stack) {
            Ok(value) => Ok((at, key, value)),
            // Cut inside a string or container: continue there. (Cut in a scalar or before the
            // value: read it again from the argument's start.)
            Err(true) if !stack.is_empty() => {
                self.keep_open(OpenArg {
                    key,
                    at,
                    i: p.i,
                    value: OpenValue::Reading(stack),
                });
                Err(ListStatus::Wait)
            }
            Err(more) => Err(stop(&self.calls, more, at)),
        }
    }

    /// Keeps an argument the text ended in for the next read, with its call (undecided while it
    /// is the call's first argument).
    fn keep_open(&mut self, open: OpenArg) {
        self.resume = Some((open.at, self.calls.len()));
        self.open = Some(open);
    }
}

/// After a call (whitespace skipped): the end of the calls, or `None` when another one follows.
fn between_calls(p: &mut P<'_>, syntax: Syntax<'_>) -> Option<ListStatus> {
    let close = syntax.close.unwrap_or("]");
    let rest = &p.s[p.i..];
    if rest.starts_with(close) {
        return Some(ListStatus::Done(p.i + close.len()));
    }
    match p.peek() {
        None => return Some(ListStatus::Wait),
        Some(',') => {
            p.i += 1;
            p.ws();
            if p.s[p.i..].starts_with(close) {
                return Some(ListStatus::Done(p.i + close.len()));
            }
        }
        // Lines: the next call, or a prefix of the end marker.
        _ if syntax.close.is_some() => {
            if close.starts_with(rest) {
                return Some(ListStatus::Wait);
            }
        }
        _ => return Some(ListStatus::Broken(p.i)),
    }
    None
}

/// One format of the pythonic family.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PythonicSpec {
    /// The start marker of a call block; `None`: a `[...]` list anywhere in the text is one.
    pub(crate) open: Option<&'static str>,
    /// The end marker of a call block (framing after the list, or the end of OLMo 3's lines).
    pub(crate) close: Option<&'static str>,
    /// Calls one per line up to `close` instead of a `[...]` list (OLMo 3), JSON literals too.
    pub(crate) lines: bool,
    /// Markers that are framing wherever they stand (Llama 4's `<|python_start|>`).
    pub(crate) framing: &'static [&'static str],
}

const PYTHONIC: PythonicSpec = PythonicSpec {
    open: None,
    close: None,
    lines: false,
    framing: MARKERS,
};

/// `lfm2` (LFM2): `<|tool_call_start|>[f(a=1), g()]<|tool_call_end|>`.
pub(crate) const LFM2_MARKERS: &[&str] = &["<|tool_call_start|>", "<|tool_call_end|>"];

const LFM2: PythonicSpec = PythonicSpec {
    open: Some(LFM2_MARKERS[0]),
    close: Some(LFM2_MARKERS[1]),
    lines: false,
    framing: &[],
};

/// `olmo3` (OLMo 3): `<function_calls>f(a=1)\ng(b="x")</function_calls>`.
pub(crate) const OLMO3_MARKERS: &[&str] = &["<function_calls>", "</function_calls>"];

const OLMO3: PythonicSpec = PythonicSpec {
    open: Some(OLMO3_MARKERS[0]),
    close: Some(OLMO3_MARKERS[1]),
    lines: true,
    framing: &[],
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Content,
    /// The input starts with the start marker (`marker` bytes), not yet routed.
    Opened {
        marker: usize,
    },
    /// The calls start after `prefix` bytes (the start marker and whitespace: framing once a
    /// call is made, content if none is).
    Calls {
        prefix: usize,
    },
    /// After the calls: whitespace and the end marker are framing.
    AfterBody,
}

/// What has been sent of one call.
#[derive(Debug, Clone, Copy)]
struct Sent {
    index: u32,
    members: usize,
    closed: bool,
}

/// The parser (see the module docs).
pub(crate) struct Pythonic {
    spec: &'static PythonicSpec,
    open: Option<String>,
    close: Option<String>,
    framing: Vec<String>,
    state: State,
    reader: CallReader,
    sent: Vec<Sent>,
    /// Input length when the calls were last parsed and more input was needed.
    waited_at: usize,
}

/// The parser of a request (registry constructor): `pythonic`, `llama4_pythonic`.
pub(crate) fn build(markers: &Markers, _tools: &Tools) -> Box<dyn Stage> {
    Box::new(Pythonic::new(&PYTHONIC, markers))
}

/// `lfm2`.
pub(crate) fn build_lfm2(markers: &Markers, _tools: &Tools) -> Box<dyn Stage> {
    Box::new(Pythonic::new(&LFM2, markers))
}

/// `olmo3`.
pub(crate) fn build_olmo3(markers: &Markers, _tools: &Tools) -> Box<dyn Stage> {
    Box::new(Pythonic::new(&OLMO3, markers))
}

impl Pythonic {
    pub(crate) fn new(spec: &'static PythonicSpec, markers: &Markers) -> Self {
        Pythonic {
            spec,
            open: spec.open.map(|m| markers.pattern(m)),
            close: spec.close.map(|m| markers.pattern(m)),
            framing: spec.framing.iter().map(|m| markers.pattern(m)).collect(),
            state: State::Content,
            reader: CallReader::default(),
            sent: Vec::new(),
            waited_at: 0,
        }
    }

    /// Sends what the decided calls read have beyond what was sent; a closed call is complete.
    /// An undecided call (no complete argument yet) is not sent.
    fn emit(&mut self, out: &mut Out) {
        // Calls sent closed are done (they close in order).
        let first = self.sent.partition_point(|s| s.closed);
        let calls = &self.reader.calls;
        for (i, call) in calls
            .iter()
            .enumerate()
            .skip(first)
            .filter(|(_, c)| c.decided())
        {
            if i == self.sent.len() {
                let index = out.start_call(&call.name, None);
                out.call_args(index, "{");
                self.sent.push(Sent {
                    index,
                    members: 0,
                    closed: false,
                });
            }
            let sent = &mut self.sent[i];
            let mut text = String::new();
            for (key, value) in &call.members[sent.members..] {
                if sent.members > 0 {
                    text.push_str(", ");
                }
                push_json_string(key, &mut text);
                text.push_str(": ");
                text.push_str(value);
                sent.members += 1;
            }
            let closes = call.closed && !sent.closed;
            if closes {
                text.push('}');
                sent.closed = true;
            }
            out.call_args(sent.index, &text);
            if closes {
                out.end_call(sent.index);
            }
        }
    }

    fn syntax(&self) -> Syntax<'_> {
        Syntax {
            close: self.close.as_deref().filter(|_| self.spec.lines),
            json_literals: self.spec.lines,
        }
    }

    /// Reads the calls after `prefix` bytes of `input`: `None` to wait for more.
    fn calls(&mut self, prefix: usize, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        // Identifier characters appended to text that needed more cannot complete an argument, a
        // call or the list (that takes a delimiter, a quote, a space or a marker), so they wait
        // for the next such character without a read: the result is the same, only a break is
        // noticed a step later.
        let fresh = &input.as_str()[self.waited_at.min(input.len())..];
        if !end
            && self.waited_at > 0
            && fresh
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            self.waited_at = input.len();
            return None;
        }
        self.waited_at = 0;
        let syntax = Syntax {
            close: self.close.as_deref().filter(|_| self.spec.lines),
            json_literals: self.spec.lines,
        };
        let status = self.reader.read(&input.as_str()[prefix..], syntax);
        if matches!(status, ListStatus::Wait) && !end {
            self.emit(out);
            self.waited_at = input.len();
            return None;
        }
        self.emit(out);
        let calls = std::mem::take(&mut self.reader).calls;
        let decided = calls.iter().rposition(ParsedCall::decided);
        self.state = State::Content;
        let body = match (status, decided) {
            (ListStatus::Done(n), _) => {
                self.state = State::AfterBody;
                n
            }
            // The output ended inside a call that was made: the rest is that call's.
            (ListStatus::Wait, Some(last)) if last + 1 == calls.len() => input.len() - prefix,
            // Broken or cut off after calls were made: they keep their text, the rest is content.
            (ListStatus::Wait | ListStatus::Broken(_), Some(last)) => calls[last].end,
            // No call was made: the start marker (or the bare `[`) is text.
            _ => {
                let text = if self.open.is_some() { prefix } else { 1 };
                out.route(input, text, Channel::Content);
                return Some(());
            }
        };
        out.route(input, prefix, Channel::Framing);
        // OLMo 3's end marker closed the lines: it is framing, not the calls' text.
        let close = match (self.state, self.syntax().close) {
            (State::AfterBody, Some(close)) => close.len(),
            _ => 0,
        };
        out.route(input, body - close, Channel::Tool);
        out.route(input, close, Channel::Framing);
        Some(())
    }

    /// After the start marker: the list's `[` (lines: anything), else the marker is content.
    fn opened(
        &mut self,
        marker: usize,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
    ) -> Option<()> {
        let s = &input.as_str()[marker..];
        let ws = leading_ws(s);
        let next = s[ws..].chars().next();
        if next.is_none() && !end {
            return None;
        }
        self.sent.clear();
        self.reader = CallReader::default();
        if self.spec.lines {
            self.state = State::Calls { prefix: marker };
        } else if next == Some('[') {
            self.state = State::Calls {
                prefix: marker + ws,
            };
        } else {
            out.route(input, marker, Channel::Content);
            self.state = State::Content;
        }
        Some(())
    }

    /// Whitespace and the end marker after a list are framing; anything else is content.
    fn after_body(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        self.state = State::Content;
        let Some(close) = self.close.as_deref().filter(|_| !self.spec.lines) else {
            return Some(());
        };
        let s = input.as_str();
        let ws = leading_ws(s);
        let rest = &s[ws..];
        if rest.starts_with(close) {
            out.route(input, ws + close.len(), Channel::Framing);
        } else if !end && close.starts_with(rest) {
            self.state = State::AfterBody;
            return None;
        }
        Some(())
    }

    fn content(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let mut patterns: Vec<&str> = match &self.open {
            Some(open) => vec![open],
            None => vec!["["],
        };
        patterns.extend(self.framing.iter().map(String::as_str));
        let index = out.route_until(input, &patterns, Channel::Content, end)?;
        if index > 0 {
            out.route(input, patterns[index].len(), Channel::Framing);
        } else if self.open.is_some() {
            self.state = State::Opened {
                marker: patterns[0].len(),
            };
        } else {
            self.sent.clear();
            self.reader = CallReader::default();
            self.state = State::Calls { prefix: 0 };
        }
        Some(())
    }
}

impl Stage for Pythonic {
    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        loop {
            let step = match self.state {
                State::Content => self.content(input, out, end),
                State::Opened { marker } => self.opened(marker, input, out, end),
                State::Calls { prefix } => self.calls(prefix, input, out, end),
                State::AfterBody => self.after_body(input, out, end),
            };
            if step.is_none() || (input.is_empty() && self.state == State::Content) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_of_calls() {
        let (calls, status) =
            parse_list("[f(a=1, b='x\\n', c=[True, None, (1, 2.5)], d={'k': -3e2}), g()] tail");
        assert_eq!(status, ListStatus::Done(63));
        assert_eq!(
            calls[0].members[2],
            ("c".into(), "[true, null, [1, 2.5]]".into())
        );
        assert_eq!(calls[0].members[3], ("d".into(), "{\"k\": -3e2}".into()));
        assert_eq!(
            calls[1],
            ParsedCall {
                name: "g".into(),
                members: vec![],
                closed: true,
                end: 62,
            }
        );
        assert_eq!(calls[0].end, 57);
        // Undecided until an argument completes: `[B(x=\t)` never becomes a call.
        let (calls, status) = parse_list("[B(x=\\t)B(y=,\\t");
        assert!(!calls[0].decided());
        assert_eq!(status, ListStatus::Broken(3));
        let (calls, status) = parse_list("[f(a=1), g(b=");
        assert_eq!(status, ListStatus::Wait);
        assert!(calls[0].decided() && !calls[1].decided());
        assert_eq!(calls[0].end, 7);
        assert_eq!(parse_list("[see(this)]").1, ListStatus::NotAList);
        assert_eq!(parse_list("[1, 2]").1, ListStatus::NotAList);
        assert_eq!(parse_list("[f(a=1").1, ListStatus::Wait);
        assert_eq!(parse_list("[f(a=1, 2)]").1, ListStatus::Broken(8));
    }

    /// Reading a growing text from where the last read stopped gives what reading each prefix
    /// whole gives, at every prefix (the incremental reader never differs from a fresh one).
    #[test]
    fn resumed_reads_equal_whole_reads() {
        let texts = [
            "[get_weather(location='San Francisco, CA', unit='celsius', days=3), g(a=[1, {'k': (2, 'x')}], b=r'\\d'), h()] tail",
            "[f(a=1, b==2)]",
            "[B(x=\\t)B(y=,\\t",
            "[f(a=1), g(b=",
            "[f(a='x'), 3]",
            // Strings cut at every byte: escapes (octal ones take up to three digits), raw
            // strings, multi-byte characters, a line continuation, a break inside a string.
            "[f(s='a\\1b\\12c\\123d\\x41\\u00e9\\U0001F600 \\'q\\\\ é😀', t=r\"x\\\"y\\d\" , u=\"\\\nz\" ), g(v='\\7')]",
            "[f(s='ab\ncd')]",
            "[f(a=1, s='ok'  ,t='bad\\x4g')]",
            "[f(s = R'\\' )  , g(a=['x', {'k': 'y'}], b='z'   ) ]",
            // Values nested in lists, tuples and dicts, cut at every byte, and their breaks.
            "[f(files=['a\\'b', \"c\\x41d\", r'\\d\\'', ('t', 'é😀', \"\\u00e9\\U0001F600\")], n=[1, [2, [3, {'k': 'v'}]]]), g(opts={'body': 'x\\ny\\1\\12\\123', \"k2\": {'in': r\"\\\"q\"}, 'l': []}, e={})] tail",
            "[f(a=[{'k': ('x', [\"\\\n\", '\\t'])}, 'é'], b=({}, []), c=[[[[]]]])]",
            "[f(a=(1, 'x',), b={'k': 1,}, c=[True, None, -1.5e3, 1_000, r, R'x'])]",
            "[f(a=[ 'x' , ( ) , { } ] , b=2)]",
            "[f(a={'k': [r'\\', '\\12'], 'j' : \"\\101\"})]",
            "[f(a=['x'] ,b={'k':'v'}  )  , g(c=('x' , ))]",
            "[f(a=['x', 'y\nz'])]",
            "[f(a={'k' 'v'})]",
            "[f(a={r'k': 1})]",
            "[f(a={1: 2})]",
            "[f(a=[1,, 2])]",
            "[f(a=[1 2])]",
            "[f(a={'k': 1 'j': 2})]",
            "[f(a={'k'})]",
            "[f(a=['\\x4g'])]",
            "[f(a=['x'], b=['y'), g()]",
        ];
        for text in texts {
            let mut reader = CallReader::default();
            for cut in (1..=text.len()).filter(|&c| text.is_char_boundary(c)) {
                let prefix = &text[..cut];
                let status = reader.read(prefix, Syntax::default());
                let (calls, whole) = parse_list(prefix);
                assert_eq!((&reader.calls, &status), (&calls, &whole), "{prefix}");
                if status != ListStatus::Wait {
                    reader = CallReader::default();
                }
            }
        }
        let lines = Syntax {
            close: Some("</function_calls>"),
            json_literals: true,
        };
        for text in [
            "f(a=true, b=\"x\\ty\")\ng(c=null, d='\\101')</function_calls>",
            "f(a=[true, {'k': null, 'j': \"x\\ty\"}], b=('\\101', r'\\d'))\ng(c={})</function_calls>",
        ] {
            let mut reader = CallReader::default();
            for cut in 1..=text.len() {
                let status = reader.read(&text[..cut], lines);
                assert_eq!(
                    (reader.calls.clone(), status),
                    parse_calls(&text[..cut], lines)
                );
            }
        }
    }

    /// A long string argument costs each step only its new text: a read starts where the last
    /// one stopped inside the string (less the last piece), not at the argument's start; so
    /// does one nested in lists, tuples and dicts (or a dict's long key).
    #[test]
    fn a_long_string_argument_is_read_once() {
        let body: String = "lorem ipsum \\'dolor\\' sit amet, é 😀 \\n "
            .repeat(600)
            .to_string();
        let lines = Syntax {
            close: Some("</function_calls>"),
            json_literals: true,
        };
        for (text, syntax) in [
            (
                format!("[write(path='a.txt', content='{body}', mode=3)]"),
                Syntax::default(),
            ),
            (
                format!("write(content=\"{body}\")</function_calls>"),
                lines,
            ),
            (
                format!("[write(files=['a.txt', '{body}', ('x', r'{body}')], mode=3), g()]"),
                Syntax::default(),
            ),
            (
                format!("[g(opts={{'body': \"{body}\", 'more': [{{'{body}': 1.5}}, ({{}}, ['{body}'])]}})]"),
                Syntax::default(),
            ),
            (
                format!("write(a=[{{'k': ['{body}', null]}}], b=true)\nf()</function_calls>"),
                lines,
            ),
        ] {
            let mut reader = CallReader::default();
            let mut scanned = 0;
            let mut cuts = 0;
            let mut status = ListStatus::Wait;
            for cut in (1..=text.len()).filter(|&c| text.is_char_boundary(c)) {
                status = reader.read(&text[..cut], syntax);
                scanned += cut - reader.read_from;
                cuts += 1;
            }
            // One byte per step, each step rereads at most the last piece (a 10-byte escape).
            assert!(
                scanned <= cuts * 12,
                "{scanned} bytes read for {} steps",
                cuts
            );
            assert!(matches!(status, ListStatus::Done(_)));
            assert_eq!((reader.calls, status), parse_calls(&text, syntax));
        }
    }
}
