//! What the AVX-512 readers (`index::msgpack::avx512`, `wire::score::avx512`) share: a CPU
//! feature check made once per process, and the byte tables both build their permutes from.

use std::sync::atomic::{AtomicU8, Ordering};

/// A CPU feature check made once per process, then one relaxed load per call.
pub(crate) struct Probe {
    /// 0: not probed yet, 1: the CPU lacks a feature, 2: available.
    state: AtomicU8,
    detect: fn() -> bool,
}

impl Probe {
    pub(crate) const fn new(detect: fn() -> bool) -> Self {
        Probe {
            state: AtomicU8::new(0),
            detect,
        }
    }

    /// Whether the CPU has every feature `detect` asks for.
    #[inline]
    pub(crate) fn available(&self) -> bool {
        match self.state.load(Ordering::Relaxed) {
            0 => {
                let yes = (self.detect)();
                self.state.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
                yes
            }
            state => state == 2,
        }
    }
}

/// A 64-byte table whose byte `i` is `$f(i)`, built at compile time.
macro_rules! bytes_by {
    (|$i:ident| $f:expr) => {{
        let mut out = [0u8; 64];
        let mut $i = 0usize;
        while $i < 64 {
            out[$i] = $f;
            $i += 1;
        }
        out
    }};
}
pub(crate) use bytes_by;

/// Byte `i` holds `i`.
pub(crate) const IOTA: [u8; 64] = bytes_by!(|i| i as u8);
/// For byte `b` of u32 lane `j`: `j` (spreads one byte per lane over the lane's four).
pub(crate) const LANE_OF_BYTE: [u8; 64] = bytes_by!(|i| (i / 4) as u8);
