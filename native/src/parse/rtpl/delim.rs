//! A response_template delimiter (an `open`/`close` literal list or a regex) and how a streaming
//! parser decides on it: a match that no further text can change is committed, a match or prefix
//! of one that more text could still change is pending, and text before the earliest pending start
//! is safe to route.
//!
//! The rule, for literals and regexes alike: from each start position, the pattern's anchored DFA
//! is stepped over the text. Dying after a match commits that match (leftmost-first, as Python's
//! backtracking `regex` prefers); reaching the end of the text alive is pending unless every
//! possible next byte would only confirm a match ending exactly there (a whole literal that no
//! other literal of its list extends: committed at once, as vLLM does) or kill it. vLLM instead
//! holds every regex match that touches the end of the text; both rules are sound (a decision never
//! depends on where the text was cut), so the final result is the same in every chunking.

use regex_automata::dfa::{dense, Automaton};
use regex_automata::meta::Regex;
use regex_automata::util::primitives::StateID;
use regex_automata::{Anchored, Input};

/// What a scan found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hit {
    /// A match at `start..end` that more text cannot change.
    Final { start: usize, end: usize },
    /// Text from `start` on may still be (or become) a match.
    Pending { start: usize },
    /// No match starts in the text.
    None,
}

/// One compiled delimiter.
pub(crate) struct Delim {
    dfa: dense::DFA<Vec<u32>>,
    /// For named captures of the committed match.
    regex: Regex,
}

/// Regex syntax as vLLM compiles it (`re.DOTALL`), with Python's brace rules: a `{` that does not
/// start a counted repetition is a literal, and `{,n}` means `{0,n}`.
fn dotall(pattern: &str) -> String {
    format!("(?s:{})", python_braces(pattern))
}

fn python_braces(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 4);
    let (mut escaped, mut in_class) = (false, false);
    for (i, c) in pattern.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if in_class {
            in_class = c != ']';
        } else if c == '[' {
            in_class = true;
        } else if c == '{' {
            let rest = &pattern[i + 1..];
            let body = rest.split_once('}').map(|(b, _)| b).unwrap_or("");
            let counted = rest.contains('}')
                && !body.is_empty()
                && body.bytes().all(|b| b.is_ascii_digit() || b == b',')
                && body.matches(',').count() <= 1
                && body != ",";
            match (counted, body.starts_with(',')) {
                (true, true) => out.push_str("{0"),
                (true, false) => out.push('{'),
                (false, _) => out.push_str("\\{"),
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// Python's `re.escape` is not needed: literals are escaped for this engine's syntax.
pub(crate) fn literal_pattern(literals: &[String]) -> String {
    let mut ordered: Vec<&String> = literals.iter().collect();
    // Longest first, so the alternation prefers the longer literal (vLLM's order, stable).
    ordered.sort_by_key(|s| std::cmp::Reverse(s.chars().count()));
    ordered
        .iter()
        .map(|s| regex_syntax_escape(s))
        .collect::<Vec<_>>()
        .join("|")
}

fn regex_syntax_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~ \t\n".contains(c) {
            match c {
                ' ' => out.push_str("\\x20"),
                '\t' => out.push_str("\\t"),
                '\n' => out.push_str("\\n"),
                _ => {
                    out.push('\\');
                    out.push(c);
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Delim {
    /// Compiles `pattern` (this engine's syntax; Python-only features such as look-around are
    /// refused with the engine's message).
    pub(crate) fn new(pattern: &str) -> Result<Delim, String> {
        let full = dotall(pattern);
        // The meta regex first: its error names the syntax problem.
        let regex = Regex::new(&full).map_err(|e| match e.syntax_error() {
            // The syntax error's own text (the construct and where), on one line.
            Some(syntax) => syntax
                .to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
            None => e.to_string(),
        })?;
        let dfa = dense::Builder::new()
            .configure(dense::Config::new().start_kind(regex_automata::dfa::StartKind::Anchored))
            .build(&full)
            .map_err(|e| e.to_string())?;
        Ok(Delim { dfa, regex })
    }

    /// The named groups of the pattern.
    pub(crate) fn group_names(&self) -> Vec<String> {
        self.regex
            .group_info()
            .pattern_names(regex_automata::PatternID::ZERO)
            .flatten()
            .map(str::to_string)
            .collect()
    }

    /// The earliest match or pending start in `hay[from..]`; `eos`: no more text will come.
    pub(crate) fn scan(&self, hay: &str, from: usize, eos: bool) -> Hit {
        for p in from..=hay.len() {
            if !hay.is_char_boundary(p) || (p == hay.len() && !eos) {
                continue;
            }
            match self.walk(hay, p, eos) {
                Walk::Match(end) => return Hit::Final { start: p, end },
                Walk::Pending => return Hit::Pending { start: p },
                Walk::NoMatch => {}
            }
        }
        Hit::None
    }

    fn walk(&self, hay: &str, p: usize, eos: bool) -> Walk {
        let dfa = &self.dfa;
        let input = Input::new(hay).range(p..).anchored(Anchored::Yes);
        let Ok(mut sid) = dfa.start_state_forward(&input) else {
            return Walk::NoMatch;
        };
        let mut last = None;
        for (i, &b) in hay.as_bytes()[p..].iter().enumerate() {
            sid = dfa.next_state(sid, b);
            if dfa.is_match_state(sid) {
                last = Some(p + i);
            } else if dfa.is_dead_state(sid) || dfa.is_quit_state(sid) {
                return last.map_or(Walk::NoMatch, Walk::Match);
            }
        }
        let at_eoi = dfa.is_match_state(dfa.next_eoi_state(sid));
        if eos {
            return match at_eoi {
                true => Walk::Match(hay.len()),
                false => last.map_or(Walk::NoMatch, Walk::Match),
            };
        }
        self.at_edge(sid, at_eoi, last, hay.len())
    }

    /// Decides at the end of the text, without knowing the next byte.
    fn at_edge(&self, sid: StateID, at_eoi: bool, last: Option<usize>, len: usize) -> Walk {
        let dfa = &self.dfa;
        let (mut confirm, mut kill) = (at_eoi, !at_eoi);
        // Match states already found to end there (most bytes lead to the same few states).
        let mut ending: Vec<StateID> = Vec::new();
        for b in 0..=255u8 {
            let next = dfa.next_state(sid, b);
            if dfa.is_dead_state(next) || dfa.is_quit_state(next) {
                confirm = false;
                continue;
            }
            if !dfa.is_match_state(next) {
                return Walk::Pending; // a match could still start to be one
            }
            if !ending.contains(&next) {
                if self.alive_after(next) {
                    return Walk::Pending; // the match could still grow
                }
                ending.push(next);
            }
            kill = false;
        }
        match (confirm, kill) {
            (true, _) => Walk::Match(len),
            (_, true) => last.map_or(Walk::NoMatch, Walk::Match),
            _ => Walk::Pending,
        }
    }

    fn alive_after(&self, sid: StateID) -> bool {
        (0..=255u8).any(|b| {
            let next = self.dfa.next_state(sid, b);
            !self.dfa.is_dead_state(next) && !self.dfa.is_quit_state(next)
        })
    }

    /// The named captures of the match at `start..end` (those that took part).
    pub(crate) fn captures(&self, hay: &str, start: usize, end: usize) -> Vec<(String, String)> {
        let mut caps = self.regex.create_captures();
        let input = Input::new(hay).span(start..end).anchored(Anchored::Yes);
        self.regex.search_captures(&input, &mut caps);
        let names = self.group_names();
        names
            .into_iter()
            .filter_map(|n| {
                caps.get_group_by_name(&n)
                    .map(|s| (n, hay[s.range()].to_string()))
            })
            .collect()
    }

    /// Every non-overlapping match in `hay` (as `finditer`), with its named groups.
    pub(crate) fn find_all(&self, hay: &str) -> Vec<Found> {
        let names = self.group_names();
        self.regex
            .captures_iter(hay)
            .map(|caps| {
                let m = caps.get_match().expect("a match");
                let groups = names
                    .iter()
                    .filter_map(|n| {
                        caps.get_group_by_name(n)
                            .map(|s| (n.clone(), hay[s.range()].to_string()))
                    })
                    .collect();
                Found {
                    end: m.end(),
                    groups,
                }
            })
            .collect()
    }
}

/// A match of [`Delim::find_all`].
pub(crate) struct Found {
    pub(crate) end: usize,
    /// Named groups that took part, by name.
    pub(crate) groups: Vec<(String, String)>,
}

enum Walk {
    Match(usize),
    Pending,
    NoMatch,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(list: &[&str]) -> Delim {
        let v: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        Delim::new(&literal_pattern(&v)).unwrap()
    }

    #[test]
    fn literal_commits_at_edge_unless_extendable() {
        let d = lit(&["<think>"]);
        assert_eq!(
            d.scan("ab<think>", 0, false),
            Hit::Final { start: 2, end: 9 }
        );
        assert_eq!(d.scan("ab<thi", 0, false), Hit::Pending { start: 2 });
        assert_eq!(d.scan("ab<x", 0, false), Hit::None);
        let d = lit(&["<a", "<ab"]);
        assert_eq!(d.scan("x<a", 0, false), Hit::Pending { start: 1 });
        assert_eq!(d.scan("x<ac", 0, false), Hit::Final { start: 1, end: 3 });
        assert_eq!(d.scan("x<a", 0, true), Hit::Final { start: 1, end: 3 });
    }

    #[test]
    fn braces_read_as_python_reads_them() {
        assert_eq!(
            python_braces(r#"{"name": \{x\}[{]a{2}b{,3}c{2,}d{x}"#),
            r#"\{"name": \{x\}[{]a{2}b{0,3}c{2,}d\{x}"#
        );
        let d = Delim::new(r#"<tool_call>\s*{"#).unwrap();
        assert_eq!(
            d.scan("<tool_call> {", 0, false),
            Hit::Final { start: 0, end: 13 }
        );
        let err = Delim::new("(?<=a)b").err().expect("refused");
        assert!(err.contains("look"), "the error names the construct: {err}");
    }

    #[test]
    fn regex_waits_while_it_can_grow() {
        let d = Delim::new(r"<tool_call>\s*").unwrap();
        assert_eq!(d.scan("a<tool_call> ", 0, false), Hit::Pending { start: 1 });
        assert_eq!(
            d.scan("a<tool_call> {", 0, false),
            Hit::Final { start: 1, end: 13 }
        );
        assert_eq!(
            d.scan("a<tool_call> ", 0, true),
            Hit::Final { start: 1, end: 13 }
        );
        let d = Delim::new(r"<call name=(?P<name>\w+)>").unwrap();
        let hay = "x<call name=get_weather>{";
        assert_eq!(d.scan(hay, 0, false), Hit::Final { start: 1, end: 24 });
        assert_eq!(
            d.captures(hay, 1, 24),
            vec![("name".to_string(), "get_weather".to_string())]
        );
    }
}
