//! The live recency stamps of one worker, as a bitmap kept with every change.
//!
//! Eviction needs the `n`-th oldest stamp of a worker. Without this, every eviction round read
//! the whole worker table once to find it (and a second time to remove): a bitmap rebuilt per
//! round. Kept up to date, a bit set per store and cleared per re-store or removal, it answers
//! with a count of bits over `range / 64` words, a few hundred for a worker of 10,000 blocks.
//!
//! The bitmap spans `base..next` where `base` is the smallest live stamp rounded down to a
//! word: leading empty words are dropped as soon as they empty. Its width is
//! `next - base`, which re-stores and removals can widen past the number of live stamps; the
//! worker renumbers its stamps when the width passes [`StampBits::too_wide`] (see
//! `Worker::stamp`), so the bitmap stays within a few bits per entry.

use std::collections::VecDeque;

/// Bits a bitmap may span beyond four per live stamp before a renumbering (small workers never
/// renumber for width). Unit tests use a small floor so that they renumber often.
#[cfg(not(test))]
const WIDTH_FLOOR: usize = 1 << 16;
#[cfg(test)]
const WIDTH_FLOOR: usize = 256;

/// See the module docs.
#[derive(Clone, Default)]
pub(crate) struct StampBits {
    /// The stamp of bit 0 of `words[0]` (a multiple of 64).
    base: u32,
    words: VecDeque<u64>,
}

impl StampBits {
    /// All stamps `0..count`, live (after a renumbering).
    pub fn dense(count: u32) -> Self {
        let mut bits = StampBits::default();
        let full = count as usize / 64;
        bits.words.extend(std::iter::repeat_n(u64::MAX, full));
        let rest = count % 64;
        if rest > 0 {
            bits.words.push_back((1u64 << rest) - 1);
        }
        bits
    }

    /// Marks `stamp` live (stamps only grow, and `stamp` is not below a live one's word).
    #[inline]
    pub fn set(&mut self, stamp: u32) {
        if self.words.is_empty() {
            self.base = stamp & !63;
        }
        debug_assert!(stamp >= self.base, "a stamp below the bitmap");
        let i = (stamp - self.base) as usize;
        let w = i / 64;
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << (i % 64);
    }

    /// Marks a live `stamp` gone.
    #[inline]
    pub fn clear(&mut self, stamp: u32) {
        let i = stamp.wrapping_sub(self.base) as usize;
        if let Some(word) = self.words.get_mut(i / 64) {
            debug_assert!(*word & (1 << (i % 64)) != 0, "clearing a stamp not live");
            *word &= !(1 << (i % 64));
        }
        self.trim();
    }

    /// Marks every stamp up to `last` (included) gone: what eviction removed.
    pub fn clear_through(&mut self, last: u32) {
        while let Some(&front) = self.words.front() {
            if self.base as u64 + 63 <= last as u64 {
                self.words.pop_front();
                self.base += 64;
                continue;
            }
            if last >= self.base {
                let keep = !((2u64 << (last - self.base)) - 1);
                self.words[0] = front & keep;
            }
            break;
        }
        self.trim();
    }

    /// Forgets every stamp.
    pub fn reset(&mut self) {
        self.words.clear();
        self.base = 0;
    }

    /// Drops leading empty words, so `base` follows the oldest live stamp.
    #[inline]
    fn trim(&mut self) {
        while self.words.front() == Some(&0) {
            self.words.pop_front();
            self.base += 64;
        }
        if self.words.is_empty() {
            self.base = 0;
        }
    }

    /// The `n`-th smallest live stamp (0-based); None when fewer are live.
    pub fn nth(&self, n: usize) -> Option<u32> {
        let mut left = n;
        for (w, &word) in self.words.iter().enumerate() {
            let ones = word.count_ones() as usize;
            if left < ones {
                let mut word = word;
                for _ in 0..left {
                    word &= word - 1;
                }
                return Some(self.base + (w * 64) as u32 + word.trailing_zeros());
            }
            left -= ones;
        }
        None
    }

    /// Whether a bitmap ending at `next` (exclusive) for `live` stamps is wide enough to
    /// renumber: more than four bits per live stamp, past a floor that spares small workers.
    #[inline]
    pub fn too_wide(&self, next: u32, live: usize) -> bool {
        (next - self.base.min(next)) as usize > 4 * live + WIDTH_FLOOR
    }

    /// Whether `live` stamps of a snapshot, spread over `span`, are too wide a bitmap to restore
    /// as they are: as [`StampBits::too_wide`], with a floor of at most 64 bits per stamp, so
    /// that a snapshot of many small workers cannot ask for a floor's bitmap each.
    pub fn too_wide_to_restore(span: usize, live: usize) -> bool {
        span > 4 * live + WIDTH_FLOOR.min(64 * live)
    }

    /// The rank of each live stamp among the live ones, as a function (for renumbering in
    /// one pass, in order).
    pub fn ranks(&self) -> impl Fn(u32) -> u32 + '_ {
        let mut before = Vec::with_capacity(self.words.len());
        let mut total = 0u32;
        for &word in &self.words {
            before.push(total);
            total += word.count_ones();
        }
        move |stamp| {
            let i = (stamp - self.base) as usize;
            let below = self.words[i / 64] & ((1u64 << (i % 64)) - 1);
            before[i / 64] + below.count_ones()
        }
    }

    /// Bytes held.
    pub fn allocated_bytes(&self) -> usize {
        self.words.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::Rng;
    use std::collections::BTreeSet;

    #[test]
    fn agrees_with_a_sorted_set() {
        let mut bits = StampBits::default();
        let mut model = BTreeSet::new();
        let mut next = 0u32;
        let mut rng = Rng(0x9e37_79b9_u64);
        for step in 0..200_000 {
            match rng.below(10) {
                0..=5 => {
                    next += 1 + (rng.below(3) == 0) as u32 * rng.below(200) as u32;
                    bits.set(next);
                    model.insert(next);
                }
                6 | 7 if !model.is_empty() => {
                    let k = rng.below(model.len() as u64) as usize;
                    let stamp = *model.iter().nth(k).unwrap();
                    bits.clear(stamp);
                    model.remove(&stamp);
                }
                8 if !model.is_empty() => {
                    let k = rng.below(model.len().min(300) as u64) as usize;
                    let last = *model.iter().nth(k).unwrap();
                    bits.clear_through(last);
                    model.retain(|&s| s > last);
                }
                _ => {}
            }
            let probe = rng.below(model.len() as u64 + 2) as usize;
            assert_eq!(
                bits.nth(probe),
                model.iter().nth(probe).copied(),
                "step {step}"
            );
            assert_eq!(
                bits.base,
                model.first().map_or(0, |&s| s & !63),
                "step {step}"
            );
            if step % 997 == 0 {
                let rank = bits.ranks();
                for (r, &s) in model.iter().enumerate() {
                    assert_eq!(rank(s), r as u32);
                }
            }
        }
        let dense = StampBits::dense(130);
        assert_eq!(dense.nth(129), Some(129));
        assert_eq!(dense.nth(130), None);
    }
}
