//! The vector form of the unsigned-id run ([`avx512`]) against the portable one, and both against
//! a plain reading, on random buffers: every width and its boundary values, foreign values at
//! random places, lists cut at every byte near their end, and slices that end right at the list
//! (so a read past the input fails its bounds check).

use super::tests::encode_unsigned;
use super::*;
use crate::test_support::Rng;

/// The values at which an encoding stops fitting.
const EDGES: [u64; 8] = [0, 127, 128, 255, 256, 65_535, 65_536, u32::MAX as u64];

/// An unsigned id of at most 32 bits in a random one of the encodings that can hold it.
fn push_unsigned(rng: &mut Rng, out: &mut Vec<u8>) {
    let v = match rng.below(6) {
        0 => EDGES[rng.below(8) as usize],
        1 => rng.below(0x80),
        2 => rng.below(0x100),
        3 => rng.below(0x1_0000),
        4 => rng.below(0x1_0000_0000),
        _ => rng.below(151_000),
    };
    let choice = rng.below(4);
    encode_unsigned(out, v, choice);
}

/// A value that is no unsigned id of at most 32 bits.
fn push_foreign(rng: &mut Rng, out: &mut Vec<u8>) {
    // (marker, bytes after it): uint64, int8/16/32/64, nil, empty str, empty array, float64.
    const FOREIGN: [(u8, usize); 10] = [
        (0xcf, 8),
        (0xd0, 1),
        (0xd1, 2),
        (0xd2, 4),
        (0xd3, 8),
        (0xc0, 0),
        (0xa0, 0),
        (0x90, 0),
        (0xe0, 0), // a negative fixint, its low bits drawn below
        (0xcb, 8),
    ];
    let (marker, len) = FOREIGN[rng.below(10) as usize];
    if marker == 0xe0 {
        out.push(marker | rng.below(32) as u8);
        return;
    }
    out.push(marker);
    out.extend((0..len).map(|_| rng.next() as u8));
}

/// The run read plainly: the values of the leading unsigned ids of at most 32 bits from `from`
/// (at most `n`, each ending within `buf`) and where each one ends (`ends[0]` is `from`).
fn plain_run(buf: &[u8], from: usize, n: usize) -> (Vec<u32>, Vec<usize>) {
    let mut values = Vec::new();
    let mut ends = vec![from];
    while values.len() < n {
        let at = *ends.last().expect("from");
        let Some(&marker) = buf.get(at) else { break };
        let width = unsigned_width(marker) as usize;
        if width == 0 || at + width > buf.len() {
            break;
        }
        let value = match width {
            1 => marker as u32,
            _ => buf[at + 1..at + width]
                .iter()
                .fold(0, |v, &b| (v << 8) | b as u32),
        };
        values.push(value);
        ends.push(at + width);
    }
    (values, ends)
}

const UNTOUCHED: u32 = 0xdead_beef;

/// Checks one form of the run: it reads a prefix of the plain run (all of it when `exact`),
/// leaves `*pos` at that prefix's end, and writes no slot after it.
fn check_run(
    name: &str,
    run: impl Fn(&[u8], &mut usize, &mut [u32]) -> usize,
    buf: &[u8],
    from: usize,
    n: usize,
    exact: bool,
) {
    let (values, ends) = plain_run(buf, from, n);
    let mut ids = vec![UNTOUCHED; n];
    let mut pos = from;
    let done = run(buf, &mut pos, &mut ids);
    let case = || format!("{name}: from {from} n {n} len {} {buf:02x?}", buf.len());
    assert!(done <= values.len(), "{}", case());
    if exact {
        assert_eq!(done, values.len(), "{}", case());
    }
    assert_eq!(ids[..done], values[..done], "{}", case());
    assert_eq!(pos, ends[done], "{}", case());
    assert!(ids[done..].iter().all(|&v| v == UNTOUCHED), "{}", case());
}

type ListRead = (
    Result<std::result::Result<Option<usize>, (usize, Kind)>>,
    Vec<u32>,
    usize,
);

fn list_with(
    buf: &[u8],
    from: usize,
    n: usize,
    run: impl Fn(&[u8], &mut usize, &mut [u32]) -> usize,
) -> ListRead {
    let mut reader = Reader::new(buf);
    reader.seek(from);
    let mut out = vec![3];
    let got = reader.u32_list_with(n, &mut out, run);
    (got, out, reader.pos())
}

fn vector_run(buf: &[u8], pos: &mut usize, ids: &mut [u32]) -> usize {
    avx512::unsigned_run(buf, pos, ids).expect("checked available")
}

/// Every check on one buffer and list.
fn check_all(buf: &[u8], from: usize, n: usize) {
    let vector = avx512::available();
    check_run("portable", unsigned_run_portable, buf, from, n, false);
    if vector {
        check_run("vector", vector_run, buf, from, n, true);
    }
    let portable = list_with(buf, from, n, unsigned_run_portable);
    assert_eq!(list_with(buf, from, n, unsigned_run), portable);
    if vector {
        let got = list_with(buf, from, n, vector_run);
        assert_eq!(got, portable, "from {from} n {n} {buf:02x?}");
    }
}

#[test]
fn vector_run_equals_portable_run() {
    if !avx512::available() {
        eprintln!("this CPU lacks AVX-512 VBMI: only the portable form is checked");
    }
    let mut rng = Rng(0x51d3_ca11_2026_0001);
    for round in 0..1200 {
        // Every list length up to 199, with no, rare or frequent foreign values.
        let len = round % 200;
        let foreign_rate = [0, 40, 6][round / 200 % 3];
        let from = rng.below(8) as usize;
        let mut buf: Vec<u8> = (0..from).map(|_| rng.next() as u8).collect();
        for _ in 0..len {
            if foreign_rate > 0 && rng.below(foreign_rate) == 0 {
                push_foreign(&mut rng, &mut buf);
            } else {
                push_unsigned(&mut rng, &mut buf);
            }
        }
        let list_end = buf.len();
        // After the list: nothing, random bytes, or more ids.
        match rng.below(3) {
            0 => {}
            1 => buf.extend((0..rng.below(80)).map(|_| rng.next() as u8)),
            _ => (0..rng.below(20)).for_each(|_| push_unsigned(&mut rng, &mut buf)),
        }
        // The count the list claims: its own, fewer, or more (reading into what follows).
        let n = match rng.below(4) {
            0 => len.saturating_sub(rng.below(5) as usize),
            1 => len + rng.below(30) as usize,
            _ => len,
        };
        // Whole, ending right at the list, and cut at every byte of its last ids.
        check_all(&buf, from, n);
        for cut in list_end.saturating_sub(12).max(from)..=list_end {
            check_all(&buf[..cut], from, n);
        }
        let cut = from + rng.below((buf.len() - from + 1) as u64) as usize;
        check_all(&buf[..cut], from, n);
    }
}

#[test]
fn vector_run_reads_long_runs_of_each_width() {
    // One width throughout (16 fixints fill fewer bytes than a window's stride), in lists long
    // enough for many windows, with a foreign value at every place near the end.
    let mut rng = Rng(0x0dd_ba11);
    for width in [1usize, 2, 3, 5] {
        for len in [15, 16, 17, 47, 48, 49, 300] {
            let mut buf = Vec::new();
            // The value cut to the width, and the encoding `encode_unsigned` must then use.
            let (mask, choice) = match width {
                1 => (0x7f, 0),
                2 => (0xff, 1),
                3 => (0xffff, 2),
                _ => (u32::MAX as u64, 3),
            };
            for _ in 0..len {
                let v = rng.next() as u32;
                encode_unsigned(&mut buf, v as u64 & mask, choice);
            }
            check_all(&buf, 0, len);
            check_all(&buf, 0, len + 1);
            for at in (0..buf.len()).rev().take(70) {
                let mut bad = buf.clone();
                bad[at] = 0xc1;
                check_all(&bad, 0, len);
            }
        }
    }
}

#[test]
fn vector_run_equals_portable_run_on_random_bytes() {
    // Bytes drawn mostly from the id markers, so runs form, break and resume at odd places.
    let mut rng = Rng(0xb17e_5eed);
    for _ in 0..3000 {
        let len = rng.below(160) as usize;
        let buf: Vec<u8> = (0..len)
            .map(|_| match rng.below(8) {
                0..=2 => rng.below(0x80) as u8,
                3 => 0xcc,
                4 => 0xcd,
                5 => 0xce,
                _ => rng.next() as u8,
            })
            .collect();
        let from = rng.below(len as u64 + 1) as usize;
        let n = rng.below(70) as usize;
        check_all(&buf, from, n);
        let cut = from + rng.below((len - from + 1) as u64) as usize;
        check_all(&buf[..cut], from, n);
    }
}
