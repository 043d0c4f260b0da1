//! Stop strings: the output ends where the first of them is complete.
//!
//! Text that could be the start of a stop string is held back until it cannot be, so nothing
//! past a stop string is ever sent. "First" is vLLM's rule (since 0.33): the stop string that
//! completes earliest in the text wins, ties going to the one listed first. That is what feeding
//! the text one character at a time finds, so the result does not depend on how the tokens were
//! split into steps, and a match is accepted at the byte that completes it.
//!
//! A request's stop strings are compiled once, when it opens, into one Aho-Corasick automaton over
//! bytes ([`StopAutomaton`]), and the automaton's state is carried from step to step: a step costs
//! time in proportion to its new text, whatever the number of stop strings (a request with 20,000
//! of them steps as fast as one with two).

use std::collections::VecDeque;

/// A request's stop strings and the text held back for them.
#[derive(Debug, Default)]
pub struct StopFilter {
    automaton: Option<StopAutomaton>,
    include: bool,
    held: String,
    /// Stream offset of `held[0]`.
    held_base: u64,
    /// The automaton's state after every byte fed so far.
    state: u32,
    /// Stream offset just past the last byte fed to the automaton.
    scanned: u64,
}

/// A stop string match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopMatch {
    /// Index into the request's stop strings.
    pub index: usize,
    /// Stream offset just past the stop string (where vLLM stops counting output tokens).
    pub end: u64,
}

impl StopFilter {
    /// A filter for `stops` (empty strings are ignored); `include` keeps the matched string in the
    /// released text.
    pub fn new(stops: &[String], include: bool) -> Self {
        let stops: Vec<&str> = stops
            .iter()
            .map(String::as_str)
            .filter(|s| !s.is_empty())
            .collect();
        StopFilter {
            automaton: (!stops.is_empty()).then(|| StopAutomaton::new(&stops)),
            include,
            ..StopFilter::default()
        }
    }

    /// Whether there are stop strings at all.
    pub fn is_active(&self) -> bool {
        self.automaton.is_some()
    }

    /// Bytes held back.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Adds `text` (at stream offset `base`) and releases, through `emit(text, offset)`, all text
    /// that is decided. `end` means no more text follows. On a match, the text up to it (and the
    /// stop string itself when included) is released and the rest dropped.
    pub fn feed(
        &mut self,
        text: &str,
        base: u64,
        end: bool,
        emit: impl FnMut(&str, u64),
    ) -> Option<StopMatch> {
        self.feed_seen(text, text, base, end, emit)
    }

    /// [`StopFilter::feed`] matching the stop strings against `seen` instead of `text`: the same
    /// length, and the same bytes except where the caller stands some characters in for others
    /// (the parse session's escaped noncharacters); `text` is what is released.
    pub fn feed_seen(
        &mut self,
        text: &str,
        seen: &str,
        base: u64,
        end: bool,
        mut emit: impl FnMut(&str, u64),
    ) -> Option<StopMatch> {
        debug_assert_eq!(text.len(), seen.len());
        let Some(automaton) = &self.automaton else {
            emit(text, base);
            return None;
        };
        if self.held.is_empty() {
            self.held_base = base;
        }
        self.held.push_str(text);
        self.scanned = base;
        for &byte in seen.as_bytes() {
            self.state = automaton.next(self.state, byte);
            self.scanned += 1;
            if let Some(index) = automaton.first_match(self.state) {
                // Every stop string completing later loses, whatever its start.
                let end = self.scanned;
                let cut = if self.include {
                    end
                } else {
                    end - automaton.len_of(index) as u64
                };
                emit(
                    &self.held[..(cut - self.held_base) as usize],
                    self.held_base,
                );
                self.held.clear();
                return Some(StopMatch { index, end });
            }
        }
        if end {
            let n = self.held.len();
            self.release(n, &mut emit);
        } else {
            // Everything before the earliest text that may still become a stop string is decided.
            let partial = self.scanned - automaton.partial_len(self.state) as u64;
            self.release((partial - self.held_base) as usize, &mut emit);
        }
        None
    }

    fn release(&mut self, n: usize, emit: &mut impl FnMut(&str, u64)) {
        if n == 0 {
            return;
        }
        emit(&self.held[..n], self.held_base);
        self.held.drain(..n);
        self.held_base += n as u64;
    }
}

/// An Aho-Corasick automaton over the bytes of a request's stop strings that also knows, in every
/// state, the longest suffix of the text so far that is a proper prefix of some stop string.
#[derive(Debug)]
pub struct StopAutomaton {
    /// Per state: its first edge in `edges` and how many edges it has (sorted by byte).
    nodes: Vec<Node>,
    edges: Vec<(u8, u32)>,
    lens: Vec<usize>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Node {
    first_edge: u32,
    edge_count: u32,
    fail: u32,
    depth: u32,
    /// The first-listed stop string ending here (this state's or a suffix state's), if any.
    first_match: Option<u32>,
    /// Length of the longest suffix (this state's text or a shorter suffix) that a stop string
    /// continues, i.e. the earliest live partial.
    partial_len: u32,
}

impl StopAutomaton {
    /// Builds the automaton of `stops` (non-empty strings); index `i` reports `stops[i]`.
    pub fn new(stops: &[&str]) -> Self {
        let (trie, terminal) = build_trie(stops);
        let mut nodes = vec![Node::default(); trie.len()];
        let mut edges = Vec::with_capacity(trie.len());
        for (state, children) in trie.iter().enumerate() {
            nodes[state].first_edge = edges.len() as u32;
            nodes[state].edge_count = children.len() as u32;
            edges.extend_from_slice(children);
        }
        let mut automaton = StopAutomaton {
            nodes,
            edges,
            lens: stops.iter().map(|s| s.len()).collect(),
        };
        automaton.link(&terminal);
        automaton
    }

    fn children(&self, state: u32) -> &[(u8, u32)] {
        let n = &self.nodes[state as usize];
        &self.edges[n.first_edge as usize..(n.first_edge + n.edge_count) as usize]
    }

    fn child(&self, state: u32, byte: u8) -> Option<u32> {
        let children = self.children(state);
        children
            .binary_search_by_key(&byte, |&(b, _)| b)
            .ok()
            .map(|i| children[i].1)
    }

    /// Failure links, match and partial lengths, in breadth-first order (a state's failure target
    /// is shallower, so it is done first).
    fn link(&mut self, terminal: &[Option<u32>]) {
        let mut queue = VecDeque::from([0u32]);
        while let Some(state) = queue.pop_front() {
            let children: Vec<(u8, u32)> = self.children(state).to_vec();
            for (byte, child) in children {
                let fail = if state == 0 {
                    0
                } else {
                    let mut f = self.nodes[state as usize].fail;
                    loop {
                        if let Some(next) = self.child(f, byte) {
                            break next;
                        }
                        if f == 0 {
                            break 0;
                        }
                        f = self.nodes[f as usize].fail;
                    }
                };
                let depth = self.nodes[state as usize].depth + 1;
                let inherited = self.nodes[fail as usize];
                let node = &mut self.nodes[child as usize];
                node.fail = fail;
                node.depth = depth;
                node.first_match = match (terminal[child as usize], inherited.first_match) {
                    (Some(own), Some(suffix)) => Some(own.min(suffix)),
                    (own, suffix) => own.or(suffix),
                };
                queue.push_back(child);
            }
            let node = self.nodes[state as usize];
            let own = if node.edge_count > 0 { node.depth } else { 0 };
            let via_fail = if state == 0 {
                0
            } else {
                self.nodes[node.fail as usize].partial_len
            };
            self.nodes[state as usize].partial_len = own.max(via_fail);
        }
    }

    /// The state after `byte`.
    pub fn next(&self, mut state: u32, byte: u8) -> u32 {
        loop {
            if let Some(next) = self.child(state, byte) {
                return next;
            }
            if state == 0 {
                return 0;
            }
            state = self.nodes[state as usize].fail;
        }
    }

    /// The first-listed stop string ending at this state, if any.
    pub fn first_match(&self, state: u32) -> Option<usize> {
        self.nodes[state as usize].first_match.map(|i| i as usize)
    }

    /// Length of the longest suffix a stop string could still continue (0 = none).
    pub fn partial_len(&self, state: u32) -> usize {
        self.nodes[state as usize].partial_len as usize
    }

    /// Length in bytes of stop string `index`.
    pub fn len_of(&self, index: usize) -> usize {
        self.lens[index]
    }
}

/// Per trie state: its (byte, child) edges, sorted by byte.
type TrieEdges = Vec<Vec<(u8, u32)>>;

/// The trie of `stops`: per state its edges, and the stop string that ends exactly there (the
/// first one, for duplicates).
fn build_trie(stops: &[&str]) -> (TrieEdges, Vec<Option<u32>>) {
    let mut trie: TrieEdges = vec![Vec::new()];
    let mut terminal: Vec<Option<u32>> = vec![None];
    for (index, stop) in stops.iter().enumerate() {
        let mut state = 0usize;
        for &byte in stop.as_bytes() {
            state = match trie[state].binary_search_by_key(&byte, |&(b, _)| b) {
                Ok(i) => trie[state][i].1 as usize,
                Err(i) => {
                    let child = trie.len();
                    trie[state].insert(i, (byte, child as u32));
                    trie.push(Vec::new());
                    terminal.push(None);
                    child
                }
            };
        }
        terminal[state].get_or_insert(index as u32);
    }
    (trie, terminal)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], include: bool, chunks: &[&str]) -> (String, Option<usize>) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut f = StopFilter::new(&stops, include);
        let mut out = String::new();
        let mut base = 0;
        for (i, c) in chunks.iter().enumerate() {
            let end = i + 1 == chunks.len();
            if let Some(m) = f.feed(c, base, end, |t, _| out.push_str(t)) {
                return (out, Some(m.index));
            }
            base += c.len() as u64;
        }
        (out, None)
    }

    #[test]
    fn holds_back_possible_starts() {
        let stops = ["STOP"];
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut f = StopFilter::new(&stops, false);
        let mut out = String::new();
        assert!(f.feed("abcST", 0, false, |t, _| out.push_str(t)).is_none());
        assert_eq!(out, "abc");
        assert!(f.feed("x", 5, false, |t, _| out.push_str(t)).is_none());
        assert_eq!(out, "abcSTx");
    }

    #[test]
    fn the_stop_completing_first_wins_in_any_chunking() {
        // vLLM 0.33: "bc" completes before "abcd", which starts earlier.
        let text = "xxabcdyy";
        for split in 1..text.len() {
            let (out, m) = run(&["bc", "abcd"], false, &[&text[..split], &text[split..]]);
            assert_eq!((out.as_str(), m), ("xxa", Some(0)), "split {split}");
        }
    }

    #[test]
    fn stops_completing_together_go_by_list_order() {
        assert_eq!(run(&["bc", "abc"], false, &["abc"]), ("a".into(), Some(0)));
        assert_eq!(run(&["abc", "bc"], false, &["abc"]), ("".into(), Some(0)));
        assert_eq!(
            run(&["x", "abc", "bc"], true, &["ab", "cd"]),
            ("abc".into(), Some(1))
        );
    }

    #[test]
    fn a_match_names_where_the_stop_string_ends() {
        let stops = vec!["lo w".to_string()];
        let mut f = StopFilter::new(&stops, false);
        assert!(f.feed("hel", 10, false, |_, _| {}).is_none());
        let m = f.feed("lo world", 13, false, |_, _| {});
        assert_eq!(m, Some(StopMatch { index: 0, end: 17 }));
    }

    #[test]
    fn include_keeps_the_stop_string() {
        assert_eq!(
            run(&["</s>"], true, &["hi</", "s>more"]),
            ("hi</s>".to_string(), Some(0))
        );
        assert_eq!(
            run(&["</s>"], false, &["hi</", "s>more"]),
            ("hi".to_string(), Some(0))
        );
    }

    #[test]
    fn a_shorter_stop_completing_first_beats_a_longer_one_starting_earlier() {
        for split in 1..8 {
            let text = "xxabcdyy";
            let (out, m) = run(
                &["cd", "abcde", "abc"],
                false,
                &[&text[..split], &text[split..]],
            );
            assert_eq!((out.as_str(), m), ("xx", Some(2)), "split {split}");
        }
    }

    #[test]
    fn matches_equal_a_plain_search_in_every_chunking() {
        // Oracle (vLLM 0.33's `check_stop_strings` over the whole text): the earliest end of any
        // stop's first occurrence, the first listed on a tie.
        let stops = ["ab", "bab", "abc", "c", "bb", "\u{e9}t\u{e9}"];
        let texts = ["xxbabc", "bbab", "zzzz", "aab", "été", "abab", "bé"];
        for text in texts {
            let expected = stops
                .iter()
                .enumerate()
                .filter_map(|(i, s)| text.find(s).map(|at| (at + s.len(), i, at)))
                .min()
                .map(|(_, i, at)| (text[..at].to_string(), Some(i)))
                .unwrap_or((text.to_string(), None));
            for split in (1..text.len()).filter(|&k| text.is_char_boundary(k)) {
                assert_eq!(
                    run(&stops, false, &[&text[..split], &text[split..]]),
                    expected,
                    "{text} at {split}"
                );
            }
        }
    }

    #[test]
    fn end_releases_partials() {
        assert_eq!(run(&["STOP"], false, &["abST"]), ("abST".to_string(), None));
    }
}
