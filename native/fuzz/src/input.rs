//! Reading fuzz bytes: header bytes, NUL-separated fields, and a small deterministic PRNG for
//! chunkings (the same input must always run the same way, or a crash would not reproduce).

/// A cursor over the input; reads past the end give zeros / empty slices.
pub struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Input<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Input { data, pos: 0 }
    }

    /// The next byte, or 0 at the end.
    pub fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos = (self.pos + 1).min(self.data.len());
        b
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        let rest = &self.data[self.pos..];
        self.pos = self.data.len();
        rest
    }
}

/// Splits `body` on NUL into exactly `n` fields (missing ones empty; NULs in the last one kept).
pub fn fields(body: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out: Vec<&[u8]> = body.splitn(n, |&b| b == 0).collect();
    out.resize(n, &[]);
    out
}

/// The bytes as text; invalid UTF-8 becomes U+FFFD (the API takes `&str`).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `name` picked by `b` from `names`, with "none" at index 0.
pub fn pick<'n>(names: &[&'n str], b: u8) -> &'n str {
    let i = b as usize % (names.len() + 1);
    if i == 0 {
        "none"
    } else {
        names[i - 1]
    }
}

/// xorshift64*: chunk sizes for the streaming runs.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from `seed` (never zero).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Cuts `len` items into chunks: one chunk, one item per chunk, or random sizes 0..=4 (empty steps
/// included), by `mode`. Never no chunk: an empty output is still one (empty) final step.
#[allow(clippy::single_range_in_vec_init)] // one chunk holding every item, on purpose
pub fn chunking(len: usize, mode: u8, rng: &mut Rng) -> Vec<std::ops::Range<usize>> {
    if len == 0 {
        return vec![0..0];
    }
    match mode % 3 {
        0 => vec![0..len],
        1 => (0..len).map(|i| i..i + 1).collect(),
        _ => {
            let mut out = Vec::new();
            let mut at = 0;
            while at < len {
                let n = rng.below(5).min(len - at);
                out.push(at..at + n);
                at += n;
            }
            out
        }
    }
}
