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
//! it is on. Output without any harmony markup is content.
//! The prompt, which ends with `<|start|>assistant`, primes the parser; without a prompt it starts
//! in a header.

use crate::parse::json::{is_sentinel, JsonRelay};
use crate::parse::out::{Channel, Out};
use crate::parse::text::{leading_ws, scan, Markers, Scan, SegBuf};
use crate::parse::tools::stream_json_args;
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
    /// A function call's JSON body.
    Call { index: u32 },
    /// After a call body's JSON, up to the message end.
    CallTail,
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
}

/// What a header asks for: the body's channel, or a call to a function (with the channel its
/// body goes to when it is not a JSON object).
enum Route {
    Text(Channel),
    Function(String, Channel),
}

/// Reads a header (`assistant<|channel|>commentary to=functions.f <|constrain|>json`, sentinels
/// standing for the markers).
fn route_of(header: &str, channel_marker: &str) -> Route {
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
    match recipient {
        Some(r) => match r.strip_prefix("functions.") {
            Some(name) if !name.is_empty() => Route::Function(name.to_string(), text),
            _ => Route::Text(Channel::Reasoning),
        },
        None if channel == "analysis" => Route::Text(Channel::Reasoning),
        None => Route::Text(Channel::Content),
    }
}

impl Harmony {
    pub(crate) fn new(markers: &Markers) -> Self {
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
pub(crate) fn build(markers: &Markers) -> Box<dyn Stage> {
    Box::new(Harmony::new(markers))
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
                    self.state = State::Call { index };
                } else {
                    // Not a JSON object: the body is text, not a call.
                    self.state = State::Text(fallback);
                }
            }
            State::Call { index } => {
                if !stream_json_args(&mut self.relay, index, input, out, end) {
                    return None;
                }
                self.state = State::CallTail;
            }
            State::CallTail => {
                let ends = self.ends();
                let index = out.route_until(input, &ends, Channel::Framing, end)?;
                self.after_body(input, out, index);
            }
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
                let route = route_of(header, &self.channel);
                out.route(input, at + self.message.len(), Channel::Framing);
                self.seen_markup = true;
                self.state = match route {
                    Route::Text(channel) => State::Text(channel),
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
            route_of("assistant<|channel|>analysis", ch),
            Route::Text(Channel::Reasoning)
        ));
        assert!(matches!(
            route_of("assistant<|channel|>final", ch),
            Route::Text(Channel::Content)
        ));
        assert!(matches!(
            route_of("assistant<|channel|>commentary", ch),
            Route::Text(Channel::Content)
        ));
        assert!(
            matches!(route_of("assistant<|channel|>commentary to=functions.get_weather <|constrain|>json", ch),
            Route::Function(n, Channel::Content) if n == "get_weather")
        );
        assert!(
            matches!(route_of("assistant to=functions.math.sum<|channel|>commentary json", ch),
            Route::Function(n, Channel::Content) if n == "math.sum")
        );
        assert!(matches!(
            route_of("assistant<|channel|>analysis to=browser.search", ch),
            Route::Text(Channel::Reasoning)
        ));
    }
}
