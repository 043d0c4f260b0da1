//! [`super::unsigned_run_portable`] in AVX-512 (VBMI) code, for CPUs that have it.
//!
//! The serial chain of the portable form (where an id starts depends on the width of the one
//! before) is replaced by pointer doubling within a window. Windows sit at a fixed stride of
//! [`STRIDE`] bytes, so loading and classifying the next window never waits on this one; the only
//! value carried from window to window is where in it the first id starts (0 to 4 bytes in).
//!
//! Per window, with `T[p]` the position after an id starting at `p` (`p` itself where none can:
//! another marker, or an id cut by the end of the input; and every position at or past the
//! stride, where the next window takes over), the squares `T², T⁴, T⁸, T¹⁶` are byte permutes of
//! themselves. The start of the `j`-th id from `e` is `Tʲ(e)`: one masked permute per bit of `j`,
//! for all 16 lanes at once; where the next window starts is `T¹⁶(e)`, one permute. The values
//! are then gathered from the window's bytes by one permute whose indices count down from each
//! id's last byte (`T` of its start), so no byte swap follows.
//!
//! Only positive fixints, uint8, uint16 and uint32 are read; the run stops at anything else
//! (and at an id cut by the end of the input) exactly where the plain reading does, and the
//! caller reads on from there. Tests hold it to the portable form on random buffers
//! (`differential_tests`).

use core::arch::x86_64::*;

use crate::simd::{bytes_by, Probe, IOTA, LANE_OF_BYTE};

/// Positions a window can start ids at. An id starts at most 4 bytes before it ends, so a window
/// reads at most `STRIDE + 4` bytes, inside one 64-byte vector; and 16 ids of at least 3 bytes
/// (the main vocabularies) never overflow the 16 lanes.
const STRIDE: usize = 48;
/// Ids one window reads at most (u32 lanes of a vector).
const LANES: usize = 16;

/// Whether this CPU runs the vector form.
static AVX512_VBMI: Probe = Probe::new(|| {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vbmi")
        && is_x86_feature_detected!("popcnt")
});

/// Whether this CPU runs the vector form (probed once).
#[inline]
pub(super) fn available() -> bool {
    AVX512_VBMI.available()
}

/// [`super::unsigned_run_portable`]'s contract: reads the leading run of unsigned ids of at most
/// 32 bits from `*pos` into `ids`, moves `*pos` past them and returns how many; `None` (nothing
/// read) where the CPU lacks the features. It stops exactly at the first element that is not such
/// an id (or does not end within `buf`), or after `ids.len()`.
#[inline]
#[allow(unsafe_code)]
pub(super) fn unsigned_run(buf: &[u8], pos: &mut usize, ids: &mut [u32]) -> Option<usize> {
    if !available() {
        return None;
    }
    // SAFETY: `available` confirmed the CPU has every feature `run` is compiled for.
    Some(unsafe { run(buf, pos, ids) })
}

/// Lanes whose index has bit `bit` set.
const fn lanes_with_bit(bit: u32) -> u64 {
    let mut mask = 0;
    let mut i = 0;
    while i < 64 {
        if i >> bit & 1 == 1 {
            mask |= 1 << i;
        }
        i += 1;
    }
    mask
}

/// Widths of the markers 0xcc, 0xcd, 0xce at `marker - 0x80 - 64` (the upper half of a
/// two-register permute indexed by the low 7 bits); every other marker of 0x80 and above is 0.
const UPPER_WIDTHS: [u8; 64] = bytes_by!(|i| match i {
    0x0c => 2,
    0x0d => 3,
    0x0e => 5,
    _ => 0,
});
/// Byte `b` of each u32 lane holds `b + 1`: how far before an id's end its byte `b` (counting
/// from the least significant) is.
const BYTE_BEFORE_END: [u8; 64] = bytes_by!(|i| (i % 4 + 1) as u8);
/// The first byte of each u32 lane.
const LOW_BYTES: u64 = 0x1111_1111_1111_1111;
/// Positions ids can start at in a window.
const IN_STRIDE: u64 = (1 << STRIDE) - 1;

#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,popcnt")]
#[inline]
#[allow(unsafe_code)]
fn load(bytes: &[u8; 64]) -> __m512i {
    // SAFETY: reads the 64 bytes of `bytes` (an unaligned load).
    unsafe { _mm512_loadu_si512(bytes.as_ptr().cast()) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,popcnt")]
#[inline]
#[allow(unsafe_code)]
fn store(v: __m512i) -> [u8; 64] {
    let mut out = [0u8; 64];
    // SAFETY: writes the 64 bytes of `out` (an unaligned store).
    unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), v) };
    out
}

/// The low byte of lane 0.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,popcnt")]
#[inline]
fn first_byte(v: __m512i) -> usize {
    (_mm_cvtsi128_si32(_mm512_castsi512_si128(v)) & 0xff) as usize
}

#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,popcnt")]
#[allow(unsafe_code)]
fn run(buf: &[u8], pos: &mut usize, ids: &mut [u32]) -> usize {
    let iota = load(&IOTA);
    let upper_widths = load(&UPPER_WIDTHS);
    let byte_before_end = load(&BYTE_BEFORE_END);
    let lane_of_byte = load(&LANE_OF_BYTE);
    let one = _mm512_set1_epi8(1);

    if *pos > buf.len() {
        return 0;
    }
    // The next id starts at `base + entry`.
    let mut base = *pos;
    let mut entry = 0;
    let mut done = 0;
    while done < ids.len() {
        let remaining = ids.len() - done;
        // The window's bytes, and a width per position: 1 below 0x80, else by table (0 for
        // what is no id, which leaves a position in place below).
        let window = |bytes| {
            let high = _mm512_movepi8_mask(bytes);
            let upper = _mm512_permutex2var_epi8(_mm512_setzero_si512(), bytes, upper_widths);
            let width = _mm512_mask_blend_epi8(high, one, upper);
            (bytes, _mm512_add_epi8(iota, width))
        };
        // `after[p]`: where an id at `p` ends; `ids_at`: the positions that start one. (`base`
        // never passes the end: it moves to where a read id ends, or a stride on when one ends
        // past that.)
        let (bytes, after, ids_at) = match buf.get(base..base + 64) {
            Some(full) => {
                let (bytes, after) = window(load(full.try_into().expect("64 bytes")));
                (bytes, after, IN_STRIDE)
            }
            None => {
                // The last bytes, padded with a marker that is never an id; an id that ends past
                // them is none.
                let rest = &buf[base..];
                let mut padded = [0xc1; 64];
                padded[..rest.len()].copy_from_slice(rest);
                let (bytes, after) = window(load(&padded));
                let fits = _mm512_cmple_epu8_mask(after, _mm512_set1_epi8(rest.len() as i8));
                (bytes, after, fits & IN_STRIDE)
            }
        };
        let t1 = _mm512_mask_blend_epi8(ids_at, iota, after);
        let t2 = _mm512_permutexvar_epi8(t1, t1);
        let t4 = _mm512_permutexvar_epi8(t2, t2);
        let t8 = _mm512_permutexvar_epi8(t4, t4);
        let t16 = _mm512_permutexvar_epi8(t8, t8);

        let from = _mm512_set1_epi8(entry as i8);
        // Every lane: where the 16th id from `entry` would start, or where the run stops first
        // (at or past the stride, or at something else). The only link to the next window.
        let last = _mm512_permutexvar_epi8(from, t16);
        let exit = first_byte(last);
        // Byte j: the start of the j-th id, where the run stopped after that.
        let mut starts = _mm512_mask_permutexvar_epi8(from, lanes_with_bit(0), from, t1);
        starts = _mm512_mask_permutexvar_epi8(starts, lanes_with_bit(1), starts, t2);
        starts = _mm512_mask_permutexvar_epi8(starts, lanes_with_bit(2), starts, t4);
        starts = _mm512_mask_permutexvar_epi8(starts, lanes_with_bit(3), starts, t8);
        // Starts rise until the run stops, and stay there: the ids are the lanes below it.
        let count = (_mm512_cmplt_epu8_mask(starts, last) & 0xffff).count_ones() as usize;
        // Every byte of u32 lane j: the start of the j-th id.
        let begin = _mm512_permutexvar_epi8(lane_of_byte, starts);

        // Byte b of id j is at its end - 1 - b, while that is past its marker; a fixint (width
        // 1) is its own value. Positions are below 128, so a signed compare sees `at` below 0
        // as before the start.
        let end = _mm512_permutexvar_epi8(begin, t1);
        let at = _mm512_sub_epi8(end, byte_before_end);
        let keep = _mm512_cmpgt_epi8_mask(at, begin) | LOW_BYTES;
        let values = _mm512_maskz_permutexvar_epi8(keep, at, bytes);

        let take = count.min(remaining);
        let out = &mut ids[done..];
        assert!(take <= out.len() && take <= LANES);
        // SAFETY: the mask writes the first `take` u32 lanes, all inside `out` (checked above).
        unsafe {
            _mm512_mask_storeu_epi32(out.as_mut_ptr().cast(), ((1u32 << take) - 1) as u16, values)
        };
        done += take;
        if take == remaining {
            // After the last id read: where the run stopped, or the start of the next one.
            entry = if take == count {
                exit
            } else {
                store(starts)[take] as usize
            };
            break;
        }
        if exit >= STRIDE {
            base += STRIDE;
            entry = exit - STRIDE;
        } else if count == LANES {
            // 16 short ids that end inside the stride: go on from the last one's end.
            base += exit;
            entry = 0;
        } else {
            // Something else starts at `exit`.
            entry = exit;
            break;
        }
    }
    *pos = base + entry;
    done
}
