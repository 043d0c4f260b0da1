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

use crate::parse::json::push_json_string;
use crate::parse::out::{Channel, Out};
use crate::parse::schema::coerce_number;
use crate::parse::schema::Tools;
use crate::parse::text::{Markers, SegBuf};
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

struct P<'a> {
    s: &'a str,
    i: usize,
}

/// `Err(true)` = need more input, `Err(false)` = syntax error.
type Res<T> = Result<T, bool>;

impl<'a> P<'a> {
    fn peek(&self) -> Option<char> {
        self.s[self.i..].chars().next()
    }

    fn ws(&mut self) {
        while let Some(c) = self.peek() {
            if matches!(c, ' ' | '\t' | '\n' | '\r') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    fn expect_more<T>(&self) -> Res<T> {
        if self.i >= self.s.len() {
            Err(true)
        } else {
            Err(false)
        }
    }

    fn ident(&mut self) -> Res<&'a str> {
        let start = self.i;
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == '_' || (c == '.' && self.i > start) {
                self.i += 1;
            } else {
                break;
            }
        }
        if self.i == start || self.s.as_bytes()[start].is_ascii_digit() {
            return if self.i == start {
                self.expect_more()
            } else {
                Err(false)
            };
        }
        if self.i == self.s.len() {
            return Err(true);
        }
        Ok(&self.s[start..self.i])
    }

    /// A Python literal as JSON text.
    fn value(&mut self) -> Res<String> {
        self.ws();
        let Some(c) = self.peek() else {
            return Err(true);
        };
        match c {
            '\'' | '"' => self.string(false),
            'r' | 'R' if matches!(self.s[self.i + 1..].chars().next(), Some('\'' | '"')) => {
                self.i += 1;
                self.string(true)
            }
            'r' | 'R' if self.i + 1 == self.s.len() => Err(true),
            '[' | '(' => self.sequence(if c == '[' { ']' } else { ')' }),
            '{' => self.dict(),
            _ => self.scalar(),
        }
    }

    fn string(&mut self, raw: bool) -> Res<String> {
        let quote = self.peek().expect("a quote");
        self.i += 1;
        let mut text = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(true);
            };
            self.i += c.len_utf8();
            if c == quote {
                let mut out = String::new();
                push_json_string(&text, &mut out);
                return Ok(out);
            }
            if c == '\n' {
                return Err(false);
            }
            if c != '\\' {
                text.push(c);
                continue;
            }
            let Some(e) = self.peek() else {
                return Err(true);
            };
            if raw {
                text.push('\\');
                text.push(e);
                self.i += e.len_utf8();
                continue;
            }
            self.i += e.len_utf8();
            match e {
                '\n' => {}
                '\\' | '\'' | '"' => text.push(e),
                'n' => text.push('\n'),
                'r' => text.push('\r'),
                't' => text.push('\t'),
                'b' => text.push('\u{8}'),
                'f' => text.push('\u{c}'),
                'v' => text.push('\u{b}'),
                'a' => text.push('\u{7}'),
                '0'..='7' => {
                    let mut value = e.to_digit(8).expect("octal");
                    for _ in 0..2 {
                        match self.peek().and_then(|d| d.to_digit(8)) {
                            Some(d) => {
                                value = value * 8 + d;
                                self.i += 1;
                            }
                            None => break,
                        }
                    }
                    text.push(char::from_u32(value).ok_or(false)?);
                }
                'x' | 'u' | 'U' => {
                    let n = match e {
                        'x' => 2,
                        'u' => 4,
                        _ => 8,
                    };
                    let digits = self
                        .s
                        .get(self.i..self.i + n)
                        .ok_or(self.i + n > self.s.len())?;
                    let value = u32::from_str_radix(digits, 16).map_err(|_| false)?;
                    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err(false);
                    }
                    self.i += n;
                    text.push(char::from_u32(value).ok_or(false)?);
                }
                other => {
                    text.push('\\');
                    text.push(other);
                }
            }
        }
    }

    fn sequence(&mut self, close: char) -> Res<String> {
        self.i += 1;
        let mut items = Vec::new();
        loop {
            self.ws();
            match self.peek() {
                None => return Err(true),
                Some(c) if c == close => {
                    self.i += 1;
                    return Ok(format!("[{}]", items.join(", ")));
                }
                _ => {}
            }
            items.push(self.value()?);
            self.ws();
            match self.peek() {
                None => return Err(true),
                Some(',') => self.i += 1,
                Some(c) if c == close => {}
                _ => return Err(false),
            }
        }
    }

    fn dict(&mut self) -> Res<String> {
        self.i += 1;
        let mut members = Vec::new();
        loop {
            self.ws();
            match self.peek() {
                None => return Err(true),
                Some('}') => {
                    self.i += 1;
                    return Ok(format!("{{{}}}", members.join(", ")));
                }
                Some('\'' | '"') => {}
                _ => return Err(false),
            }
            let key = self.string(false)?;
            self.ws();
            match self.peek() {
                None => return Err(true),
                Some(':') => self.i += 1,
                _ => return Err(false),
            }
            let value = self.value()?;
            members.push(format!("{key}: {value}"));
            self.ws();
            match self.peek() {
                None => return Err(true),
                Some(',') => self.i += 1,
                Some('}') => {}
                _ => return Err(false),
            }
        }
    }

    fn scalar(&mut self) -> Res<String> {
        let start = self.i;
        while let Some(c) = self.peek() {
            let after_exp = self.i > start && matches!(self.s.as_bytes()[self.i - 1], b'e' | b'E');
            if c.is_ascii_alphanumeric()
                || c == '_'
                || c == '.'
                || (matches!(c, '+' | '-') && (self.i == start || after_exp))
            {
                self.i += 1;
            } else {
                break;
            }
        }
        if self.i == self.s.len() {
            return Err(true);
        }
        let word = &self.s[start..self.i];
        match word {
            "True" => Ok("true".into()),
            "False" => Ok("false".into()),
            "None" => Ok("null".into()),
            _ => coerce_number(&word.replace('_', "")).ok_or(false),
        }
    }

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
pub(crate) fn parse_list(s: &str) -> (Vec<ParsedCall>, ListStatus) {
    let mut p = P { s, i: 1 };
    let mut calls: Vec<ParsedCall> = Vec::new();
    loop {
        p.ws();
        if calls.is_empty() {
            if p.peek() == Some(']') {
                return (calls, ListStatus::NotAList);
            }
        } else {
            match p.peek() {
                None => return (calls, ListStatus::Wait),
                Some(']') => return (calls, ListStatus::Done(p.i + 1)),
                Some(',') => {
                    p.i += 1;
                    p.ws();
                    if p.peek() == Some(']') {
                        return (calls, ListStatus::Done(p.i + 1));
                    }
                }
                _ => return (calls, ListStatus::Broken(p.i)),
            }
        }
        let at = p.i;
        let name = match p.call_head() {
            Ok(name) => name,
            Err(more) => {
                let status = stop(&calls, more, at);
                return (calls, status);
            }
        };
        calls.push(ParsedCall {
            name,
            ..ParsedCall::default()
        });
        if let Err(status) = arguments(&mut p, &mut calls) {
            return (calls, status);
        }
    }
}

/// Reads the keyword arguments of the last call of `calls` through its `)`.
fn arguments(p: &mut P<'_>, calls: &mut [ParsedCall]) -> Result<(), ListStatus> {
    loop {
        p.ws();
        match p.peek() {
            None => return Err(ListStatus::Wait),
            Some(')') => {
                p.i += 1;
                let call = calls.last_mut().expect("a call");
                call.closed = true;
                call.end = p.i;
                return Ok(());
            }
            _ => {}
        }
        let at = p.i;
        let key = p.ident().map_err(|more| stop(calls, more, at))?.to_string();
        p.ws();
        match p.peek() {
            None => return Err(ListStatus::Wait),
            Some('=') => p.i += 1,
            _ => return Err(ListStatus::Broken(at)),
        }
        let value = p.value().map_err(|more| stop(calls, more, at))?;
        let value_end = p.i;
        p.ws();
        match p.peek() {
            None => return Err(ListStatus::Wait),
            Some(',') => p.i += 1,
            Some(')') => {}
            _ => return Err(ListStatus::Broken(at)),
        }
        let call = calls.last_mut().expect("a call");
        call.members.push((key, value));
        call.end = value_end;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Content,
    List,
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
    start: String,
    end: String,
    state: State,
    sent: Vec<Sent>,
}

/// The parser of a request (registry constructor).
pub(crate) fn build(markers: &Markers, _tools: &Tools) -> Box<dyn Stage> {
    Box::new(Pythonic::new(markers))
}

impl Pythonic {
    pub(crate) fn new(markers: &Markers) -> Self {
        Pythonic {
            start: markers.pattern(MARKERS[0]),
            end: markers.pattern(MARKERS[1]),
            state: State::Content,
            sent: Vec::new(),
        }
    }

    /// Sends what the decided calls of `calls` have beyond what was sent; a closed call is
    /// complete. An undecided call (no complete argument yet) is not sent.
    fn emit(&mut self, calls: &[ParsedCall], out: &mut Out) {
        for (i, call) in calls.iter().enumerate().filter(|(_, c)| c.decided()) {
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

    /// Reads the list at the start of `input`: `None` to wait for more.
    fn list(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let (calls, status) = parse_list(input.as_str());
        let decided = calls.iter().rposition(ParsedCall::decided);
        match (status, decided) {
            (ListStatus::Wait, _) if !end => {
                self.emit(&calls, out);
                return None;
            }
            (ListStatus::Done(n), _) => {
                self.emit(&calls, out);
                out.route(input, n, Channel::Tool);
            }
            // The output ended inside a call that was made: the rest is that call's.
            (ListStatus::Wait, Some(last)) if last + 1 == calls.len() => {
                self.emit(&calls, out);
                out.route_all(input, Channel::Tool);
            }
            // Broken or cut off after calls were made: they keep their text, the rest is content.
            (ListStatus::Wait | ListStatus::Broken(_), Some(last)) => {
                self.emit(&calls, out);
                out.route(input, calls[last].end, Channel::Tool);
            }
            // No call was made: the `[` is text.
            _ => out.route(input, 1, Channel::Content),
        }
        self.state = State::Content;
        Some(())
    }
}

impl Stage for Pythonic {
    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        loop {
            match self.state {
                State::Content => {
                    let patterns = ["[", self.start.as_str(), self.end.as_str()];
                    let Some(index) = out.route_until(input, &patterns, Channel::Content, end)
                    else {
                        return;
                    };
                    if index == 0 {
                        self.state = State::List;
                        self.sent.clear();
                    } else {
                        out.route(input, patterns[index].len(), Channel::Framing);
                    }
                }
                State::List => {
                    if self.list(input, out, end).is_none() {
                        return;
                    }
                }
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
}
