//! Stop strings: the output ends at the first occurrence of any of them.
//!
//! Text that could be the start of a stop string is held back until it cannot be, so nothing
//! past a stop string is ever sent. "First" means the earliest start in the text; a match is
//! only accepted once no other stop string could still complete at an earlier start, so the result
//! does not depend on how the tokens were split into steps.

/// A request's stop strings and the text held back for them.
#[derive(Debug, Default)]
pub struct StopFilter {
    stops: Vec<String>,
    include: bool,
    held: String,
    /// Stream offset of `held[0]`.
    held_base: u64,
    longest: usize,
}

/// A stop string match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopMatch {
    /// Index into the request's stop strings.
    pub index: usize,
}

impl StopFilter {
    /// A filter for `stops` (empty strings are ignored); `include` keeps the matched string in the
    /// released text.
    pub fn new(stops: &[String], include: bool) -> Self {
        let stops: Vec<String> = stops.iter().filter(|s| !s.is_empty()).cloned().collect();
        let longest = stops.iter().map(String::len).max().unwrap_or(0);
        StopFilter {
            stops,
            include,
            held: String::new(),
            held_base: 0,
            longest,
        }
    }

    /// Whether there are stop strings at all.
    pub fn is_active(&self) -> bool {
        !self.stops.is_empty()
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
        mut emit: impl FnMut(&str, u64),
    ) -> Option<StopMatch> {
        if self.stops.is_empty() {
            emit(text, base);
            return None;
        }
        if self.held.is_empty() {
            self.held_base = base;
        }
        self.held.push_str(text);
        let earliest = self.earliest_match();
        let pending = if end {
            None
        } else {
            self.earliest_partial(earliest.map(|(at, _)| at))
        };
        match (earliest, pending) {
            (Some((at, index)), None) => {
                let cut = if self.include {
                    at + self.stops[index].len()
                } else {
                    at
                };
                emit(&self.held[..cut], self.held_base);
                self.held.clear();
                Some(StopMatch { index })
            }
            (_, Some(p)) => {
                // Everything before a possible (earlier) match start is decided.
                self.release(p, &mut emit);
                None
            }
            (None, None) => {
                let n = self.held.len();
                self.release(n, &mut emit);
                None
            }
        }
    }

    fn release(&mut self, n: usize, emit: &mut impl FnMut(&str, u64)) {
        if n == 0 {
            return;
        }
        emit(&self.held[..n], self.held_base);
        self.held.drain(..n);
        self.held_base += n as u64;
    }

    /// The earliest complete occurrence: (start, stop index); the shortest on a tie, since it
    /// completes first.
    fn earliest_match(&self) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize)> = None;
        for (i, s) in self.stops.iter().enumerate() {
            if let Some(at) = self.held.find(s.as_str()) {
                let better = match best {
                    None => true,
                    Some((b_at, b_i)) => {
                        at < b_at || (at == b_at && s.len() < self.stops[b_i].len())
                    }
                };
                if better {
                    best = Some((at, i));
                }
            }
        }
        best
    }

    /// The earliest start (before `limit`, if given) of a suffix that is a proper prefix of some
    /// stop string; a match found at `limit` must wait for it.
    fn earliest_partial(&self, limit: Option<usize>) -> Option<usize> {
        let from = self
            .held
            .len()
            .saturating_sub(self.longest.saturating_sub(1));
        let to = limit.unwrap_or(self.held.len());
        (from..to).find(|&at| {
            self.held.is_char_boundary(at) && {
                let tail = &self.held[at..];
                self.stops
                    .iter()
                    .any(|s| s.len() > tail.len() && s.starts_with(tail))
            }
        })
    }
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
    fn earliest_start_wins_in_any_chunking() {
        let text = "xxabcdyy";
        for split in 1..text.len() {
            let (out, m) = run(&["bc", "abcd"], false, &[&text[..split], &text[split..]]);
            assert_eq!((out.as_str(), m), ("xx", Some(1)), "split {split}");
        }
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
    fn end_releases_partials() {
        assert_eq!(run(&["STOP"], false, &["abST"]), ("abST".to_string(), None));
    }
}
