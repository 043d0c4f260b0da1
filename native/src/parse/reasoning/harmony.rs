//! gpt-oss Harmony (`openai` as reasoning and tool parser): the output is a sequence of messages
//! `<|start|>ROLE<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>TYPE]<|message|>BODY<|end|>`,
//! the last one ended by `<|call|>` (a tool call) or `<|return|>`. The recipient may also follow
//! the role (`<|start|>assistant to=functions.f<|channel|>commentary ...`).
//!
//! Routing by header: a `functions.NAME` recipient makes the body the JSON arguments of a call to
//! NAME, on any channel (gpt-oss also calls from `analysis`); another recipient (built-in tools
//! such as `browser.search`, `python`) makes it reasoning; channel `analysis` is reasoning; `final`
//! and `commentary` without a recipient (preambles) are content. Headers and markers are framing.
//! A call starts at the `{` of its body; a body that is not a JSON object is text of the channel
//! it is on, and so is text after the object (the call, broken, stays incomplete). A request
//! without tools drops every call body (framing), as vLLM's chat layer drops the calls its Harmony
//! parser extracted for such a request. Output without any harmony markup is content.
//!
//! `reasoning_tokens` counts as vLLM's `HarmonyParser` does: the body tokens of a message on
//! `analysis`, or on `commentary` to any recipient (call arguments included), whatever channel
//! their text went to; header and marker tokens never count.
//! The prompt, which ends with `<|start|>assistant`, primes the parser; without a prompt it starts
//! in a header.

use crate::parse::json::{is_sentinel, JsonRelay, Relay};
use crate::parse::out::{Channel, Out};
use crate::parse::schema::Tools;
use crate::parse::text::{leading_ws, scan, Markers, Scan, SegBuf};
use crate::parse::Stage;

/// The markers (all single tokens in gpt-oss's vocabulary).
pub(crate) const MARKERS: &[&str] = &[
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|call|>",
    "<|return|>",
    "<|constrain|>",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Collecting a header (the input holds it) up to `<|message|>`.
    Header,
    /// A body routed to a text channel.
    Text(Channel),
    /// A function call's body before its first byte: `{` starts the call (the name is in
    /// `name`); anything else makes the body text of `fallback`.
    CallStart { fallback: Channel },
    /// A function call's JSON body (`fallback`: the channel of text after it).
    Call { index: u32, fallback: Channel },
    /// After a call body's JSON object (`complete`: it closed), up to the message end: only
    /// whitespace may come before the end marker for the call to be complete.
    CallTail {
        index: u32,
        fallback: Channel,
        complete: bool,
    },
    /// Between messages: framing up to the next `<|start|>` / `<|channel|>`.
    Between,
}

/// The parser (see the module docs).
pub(crate) struct Harmony {
    start: String,
    channel: String,
    message: String,
    end: String,
    call: String,
    ret: String,
    state: State,
    relay: JsonRelay,
    /// The function a header addressed.
    name: String,
    /// Whether any harmony markup was read (output without any is plain content).
    seen_markup: bool,
    /// Whether the request declared tools: without, call bodies are dropped.
    tools: bool,
}

/// What a header asks for: the body's channel, or a call to a function (with the channel its
/// body goes to when it is not a JSON object).
enum Route {
    Text(Channel),
    Function(String, Channel),
}

/// Reads a header (`assistant<|channel|>commentary to=functions.f <|constrain|>json`, sentinels
/// standing for the markers): the route of its body and whether the body's tokens count as
/// reasoning (vLLM's `_is_reasoning_token`: channel `analysis`, or `commentary` with a recipient).
fn route_of(header: &str, channel_marker: &str) -> (Route, bool) {
    // Markers matched as text (a vocabulary without harmony tokens) separate words too.
    let spaced;
    let header = if channel_marker.chars().count() > 1 {
        spaced = header
            .replace(channel_marker, &format!(" {channel_marker} "))
            .replace("<|constrain|>", " ");
        spaced.as_str()
    } else {
        header
    };
    let recipient = header
        .split(|c: char| c.is_ascii_whitespace() || is_sentinel(c))
        .find_map(|w| w.strip_prefix("to="))
        .filter(|r| !r.is_empty());
    let channel = header
        .split_once(channel_marker)
        .map(|(_, rest)| {
            rest.split(|c: char| c.is_ascii_whitespace() || is_sentinel(c))
                .find(|w| !w.is_empty())
                .unwrap_or("")
        })
        .unwrap_or("");
    let text = if channel == "analysis" {
        Channel::Reasoning
    } else {
        Channel::Content
    };
    let counts = channel == "analysis" || (channel == "commentary" && recipient.is_some());
    let route = match recipient {
        Some(r) => match r.strip_prefix("functions.") {
            Some(name) if !name.is_empty() => Route::Function(name.to_string(), text),
            _ => Route::Text(Channel::Reasoning),
        },
        None if channel == "analysis" => Route::Text(Channel::Reasoning),
        None => Route::Text(Channel::Content),
    };
    (route, counts)
}

impl Harmony {
    pub(crate) fn new(markers: &Markers, tools: &Tools) -> Self {
        let p = |i: usize| markers.pattern(MARKERS[i]);
        Harmony {
            start: p(0),
            channel: p(1),
            message: p(2),
            end: p(3),
            call: p(4),
            ret: p(5),
            state: State::Header,
            relay: JsonRelay::object(),
            name: String::new(),
            seen_markup: false,
            tools: tools.declared(),
        }
    }

    fn ends(&self) -> [&str; 5] {
        [
            self.end.as_str(),
            self.call.as_str(),
            self.ret.as_str(),
            self.start.as_str(),
            self.channel.as_str(),
        ]
    }

    /// After a message body ends at `which` of [`Self::ends`] (at the start of the input).
    fn after_body(&mut self, input: &mut SegBuf, out: &mut Out, which: usize) {
        // Markers and the next header count by their channel (framing: nowhere).
        out.reasoning_count = None;
        match which {
            0..=2 => {
                let len = self.ends()[which].len();
                out.route(input, len, Channel::Framing);
                self.state = State::Between;
            }
            // A new header begins without an end marker.
            _ => self.state = State::Header,
        }
    }
}

/// The parser of a request (registry constructor, for both the tool and the reasoning row).
pub(crate) fn build(markers: &Markers, tools: &Tools) -> Box<dyn Stage> {
    Box::new(Harmony::new(markers, tools))
}

impl Harmony {
    fn step(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        match self.state {
            State::Header => self.header(input, out, end)?,
            State::Text(channel) => {
                let ends = self.ends();
                let index = out.route_until(input, &ends, channel, end)?;
                self.after_body(input, out, index);
            }
            State::CallStart { fallback } => {
                let s = input.as_str();
                let ws = leading_ws(s);
                if ws == s.len() && !end {
                    return None;
                }
                if s[ws..].starts_with('{') {
                    let index = out.start_call(&self.name, None);
                    self.relay = JsonRelay::object();
                    self.state = State::Call { index, fallback };
                } else {
                    // Not a JSON object: the body is text, not a call.
                    self.state = State::Text(fallback);
                }
            }
            State::Call { index, fallback } => {
                let mut text = String::new();
                let result = self.relay.feed(input.as_str(), &mut text);
                let consumed = match result {
                    Relay::More => input.len(),
                    Relay::Done(n) | Relay::Error(n) => n,
                };
                out.route(input, consumed, Channel::Tool);
                out.call_args(index, &text);
                // Complete only once the message ends after the object (see `CallTail`).
                self.state = match result {
                    Relay::More if !end => return None,
                    Relay::Done(_) => State::CallTail {
                        index,
                        fallback,
                        complete: true,
                    },
                    _ => State::CallTail {
                        index,
                        fallback,
                        complete: false,
                    },
                };
            }
            State::CallTail {
                index,
                fallback,
                complete,
            } => self.call_tail(input, out, end, index, fallback, complete)?,
            State::Between => {
                let patterns = [self.start.as_str(), self.channel.as_str()];
                let index = out.route_until(input, &patterns, Channel::Framing, end)?;
                if index == 0 {
                    out.route(input, self.start.len(), Channel::Framing);
                }
                self.state = State::Header;
            }
        }
        Some(())
    }

    /// After a call's object: whitespace up to the message's end completes the call (when the
    /// object closed). Other text breaks it: vLLM then returns the whole body as the arguments,
    /// which are no JSON object; here the call keeps its object and stays incomplete (never
    /// `finish_reason` `tool_calls`), and the text is the message channel's, not lost.
    fn call_tail(
        &mut self,
        input: &mut SegBuf,
        out: &mut Out,
        end: bool,
        index: u32,
        fallback: Channel,
        complete: bool,
    ) -> Option<()> {
        let ws = leading_ws(input.as_str());
        out.route(input, ws, Channel::Framing);
        if input.is_empty() {
            if end {
                // The output ended after the object, before an end marker: the object decides.
                if complete {
                    out.end_call(index);
                }
                self.state = State::Between;
            }
            return None;
        }
        let ends = self.ends();
        match scan(input.as_str(), &ends) {
            Scan::Found {
                at: 0,
                index: which,
            } => {
                if complete {
                    out.end_call(index);
                }
                self.after_body(input, out, which);
            }
            Scan::Partial { at: 0 } if !end => return None,
            _ => self.state = State::Text(fallback),
        }
        Some(())
    }

    /// Collects a header up to `<|message|>` and routes the body by it.
    fn header(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) -> Option<()> {
        let pats = [
            self.message.as_str(),
            self.end.as_str(),
            self.call.as_str(),
            self.ret.as_str(),
        ];
        match scan(input.as_str(), &pats) {
            Scan::Found { at, index: 0 } => {
                let header = &input.as_str()[..at];
                // A header restarts at its last `<|start|>`.
                let header = header
                    .rsplit_once(self.start.as_str())
                    .map_or(header, |(_, h)| h);
                let (route, counts) = route_of(header, &self.channel);
                out.route(input, at + self.message.len(), Channel::Framing);
                out.reasoning_count = Some(counts);
                self.seen_markup = true;
                self.state = match route {
                    Route::Text(channel) => State::Text(channel),
                    // vLLM's chat layer drops the calls of a request without tools (the parser
                    // extracts them, `keeps_tool_calls` is false): neither call nor content.
                    Route::Function(..) if !self.tools => State::Text(Channel::Framing),
                    Route::Function(name, fallback) => {
                        self.name = name;
                        State::CallStart { fallback }
                    }
                };
            }
            Scan::Found { at, index } => {
                out.route(input, at + pats[index].len(), Channel::Framing);
                self.seen_markup = true;
                self.state = State::Between;
            }
            // Output without any harmony markup is plain content.
            _ if end && !self.seen_markup && !input.as_str().contains(self.channel.as_str()) => {
                out.route_all(input, Channel::Content);
                return None;
            }
            _ if end => {
                out.route_all(input, Channel::Framing);
                return None;
            }
            _ => return None,
        }
        Some(())
    }
}

impl Stage for Harmony {
    fn held(&self) -> usize {
        self.relay.held()
    }

    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool) {
        while self.step(input, out, end).is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_route_bodies() {
        let ch = "<|channel|>";
        assert!(matches!(
            route_of("assistant<|channel|>analysis", ch).0,
            Route::Text(Channel::Reasoning)
        ));
        assert!(matches!(
            route_of("assistant<|channel|>final", ch).0,
            Route::Text(Channel::Content)
        ));
        assert!(matches!(
            route_of("assistant<|channel|>commentary", ch).0,
            Route::Text(Channel::Content)
        ));
        assert!(
            matches!(route_of("assistant<|channel|>commentary to=functions.get_weather <|constrain|>json", ch).0,
            Route::Function(n, Channel::Content) if n == "get_weather")
        );
        assert!(
            matches!(route_of("assistant to=functions.math.sum<|channel|>commentary json", ch).0,
            Route::Function(n, Channel::Content) if n == "math.sum")
        );
        assert!(matches!(
            route_of("assistant<|channel|>analysis to=browser.search", ch).0,
            Route::Text(Channel::Reasoning)
        ));
    }

    /// vLLM's `_is_reasoning_token`: `analysis`, or `commentary` with any recipient.
    #[test]
    fn bodies_count_as_reasoning_by_channel_and_recipient() {
        let ch = "<|channel|>";
        let counts = |h: &str| route_of(h, ch).1;
        assert!(counts("assistant<|channel|>analysis"));
        assert!(counts("assistant<|channel|>analysis to=functions.f json"));
        assert!(counts(
            "assistant<|channel|>commentary to=functions.f <|constrain|>json"
        ));
        assert!(counts("assistant to=python<|channel|>commentary"));
        assert!(!counts("assistant<|channel|>commentary"));
        assert!(!counts("assistant<|channel|>final"));
        assert!(!counts("assistant<|channel|>final to=functions.f"));
    }
}
