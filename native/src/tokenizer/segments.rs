//! Segment-level reuse of token ids across requests (the multi-turn cache).
//!
//! A conversation sent again with one more turn renders to the previous prompt plus a little; its
//! unchanged segments need not be tokenized again. A prompt is cut before each occurrence of a
//! *boundary token* (a special token such as `<|im_start|>`), each segment's ids are looked up by
//! the segment's text, and only new segments are encoded.
//!
//! Why the ids are identical to encoding the whole text, for a boundary token `B` at byte `p`:
//! - `tokenizers` first splits the raw text on its non-normalized added tokens with one
//!   leftmost-longest Aho-Corasick scan; every later stage (normalizer, pre-tokenizer, model) works
//!   on the pieces between matches independently. A segment starting at a match of the full-text
//!   scan sees the same matches after it (the scan is restartable at a match), and none that
//!   straddles the segment's end (the next cut is itself a match of the same scan).
//! - A token's flags can reach across a cut, so `B` must have none that do: no `lstrip` (it would
//!   swallow whitespace left of `p`), no `single_word` (it looks at the character before `p`), and
//!   its first character must be ASCII punctuation, so that the `rstrip` of a token before the cut
//!   stops at `p` and a `single_word` token ending at `p` sees the same non-word neighbour as at
//!   the end of a segment. A tokenizer set to `encode_special_tokens` matches no special token, so
//!   none is a boundary then.
//! - The only stage that looks at absolute position is Metaspace's `prepend_scheme: first`, which
//!   checks for offset 0. Every segment but the first starts with `B`, so its text after `B` is
//!   never at offset 0; the first segment is at offset 0 in both encodings. A segment that does not
//!   start with `B` can only be a first segment, so looking segments up by text alone is sound.
//!
//! The differential tests check this on every model, every parity conversation and randomly grown
//! conversations, with both encoders.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use ahash::RandomState;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use aho_corasick::{AhoCorasick, MatchKind};

/// Where a text may be cut (see the module docs).
pub(crate) struct Boundaries {
    /// Every non-normalized added token, scanned exactly as `tokenizers` scans them.
    scanner: Option<AhoCorasick>,
    /// Per pattern: may a cut be placed before a match of it.
    is_boundary: Vec<bool>,
}

impl Boundaries {
    pub(crate) fn new(hf: &tokenizers::Tokenizer) -> Self {
        let encode_special = hf.get_encode_special_tokens();
        let mut tokens: Vec<_> = hf
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| !t.normalized)
            .collect();
        tokens.sort_by_key(|(id, _)| *id);
        let patterns: Vec<&str> = tokens.iter().map(|(_, t)| t.content.as_str()).collect();
        let is_boundary: Vec<bool> = tokens
            .iter()
            .map(|(_, t)| {
                let first = t.content.chars().next();
                let reaches_across = t.lstrip || t.single_word || (encode_special && t.special);
                !reaches_across && first.is_some_and(|c| c.is_ascii_punctuation() && c != '_')
            })
            .collect();
        let scanner = if patterns.is_empty() || !is_boundary.iter().any(|b| *b) {
            None
        } else {
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&patterns)
                .ok()
        };
        Boundaries {
            scanner,
            is_boundary,
        }
    }

    /// Byte offsets where segments start, after 0, in increasing order.
    pub(crate) fn cuts(&self, text: &str) -> Vec<usize> {
        let Some(scanner) = &self.scanner else {
            return Vec::new();
        };
        scanner
            .find_iter(text)
            .filter(|m| m.start() > 0 && self.is_boundary[m.pattern().as_usize()])
            .map(|m| m.start())
            .collect()
    }
}

/// How one encode used the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Segments whose ids came from the cache.
    pub hit_segments: u64,
    /// Segments that were encoded.
    pub miss_segments: u64,
    /// Bytes of text in hit segments.
    pub hit_bytes: u64,
    /// Bytes of text in missed segments.
    pub miss_bytes: u64,
}

impl CacheStats {
    pub(crate) fn add(&mut self, hit: bool, bytes: usize) {
        if hit {
            self.hit_segments += 1;
            self.hit_bytes += bytes as u64;
        } else {
            self.miss_segments += 1;
            self.miss_bytes += bytes as u64;
        }
    }
}

const SHARDS: usize = 16;
/// Bookkeeping bytes charged per entry on top of its text and ids.
const ENTRY_OVERHEAD: usize = 64;

/// Segment text -> ids, bounded in bytes, least recently used evicted first. Thread-safe.
pub struct SegmentCache {
    shards: Vec<Mutex<Shard>>,
    shard_budget: usize,
    hasher: RandomState,
    clock: AtomicU64,
}

#[derive(Default)]
struct Shard {
    entries: HashMap<u64, Vec<Entry>>,
    bytes: usize,
}

struct Entry {
    text: Box<str>,
    ids: Box<[u32]>,
    last_used: u64,
}

impl Entry {
    fn cost(&self) -> usize {
        self.text.len() + 4 * self.ids.len() + ENTRY_OVERHEAD
    }
}

impl SegmentCache {
    /// A cache holding at most about `budget_bytes` of segment text and ids.
    pub fn new(budget_bytes: usize) -> Self {
        SegmentCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_budget: budget_bytes / SHARDS,
            // Keys only pick a bucket: a hit also compares the segment's text.
            hasher: RandomState::new(),
            clock: AtomicU64::new(0),
        }
    }

    fn key(&self, text: &str) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write(text.as_bytes());
        h.finish()
    }

    fn shard(&self, key: u64) -> std::sync::MutexGuard<'_, Shard> {
        self.shards[(key as usize) % SHARDS]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Appends the cached ids of `text` to `out`; false when absent.
    pub(crate) fn get_into(&self, text: &str, out: &mut Vec<u32>) -> bool {
        let key = self.key(text);
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut shard = self.shard(key);
        let Some(chain) = shard.entries.get_mut(&key) else {
            return false;
        };
        match chain.iter_mut().find(|e| &*e.text == text) {
            Some(entry) => {
                entry.last_used = now;
                out.extend_from_slice(&entry.ids);
                true
            }
            None => false,
        }
    }

    pub(crate) fn insert(&self, text: &str, ids: &[u32]) {
        let entry = Entry {
            text: text.into(),
            ids: ids.into(),
            last_used: self.clock.fetch_add(1, Ordering::Relaxed),
        };
        let cost = entry.cost();
        if cost > self.shard_budget {
            return;
        }
        let key = self.key(text);
        let mut shard = self.shard(key);
        let chain = shard.entries.entry(key).or_default();
        if chain.iter().any(|e| *e.text == *text) {
            return; // another thread got there first
        }
        chain.push(entry);
        shard.bytes += cost;
        if shard.bytes > self.shard_budget {
            shard.evict_to(self.shard_budget * 3 / 4);
        }
    }

    /// Bytes held, for tests and metrics.
    pub fn bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).bytes)
            .sum()
    }
}

impl Shard {
    /// Evicts least recently used entries until at most `target` bytes remain. Runs rarely (it
    /// frees a quarter of the shard), so sorting is fine.
    fn evict_to(&mut self, target: usize) {
        let mut order: Vec<(u64, u64, usize)> = self
            .entries
            .iter()
            .flat_map(|(key, chain)| chain.iter().map(move |e| (e.last_used, *key, e.cost())))
            .collect();
        order.sort_unstable();
        for (stamp, key, cost) in order {
            if self.bytes <= target {
                break;
            }
            if let Some(chain) = self.entries.get_mut(&key) {
                chain.retain(|e| e.last_used != stamp);
                if chain.is_empty() {
                    self.entries.remove(&key);
                }
                self.bytes -= cost;
            }
        }
    }
}
