//! KV-event payloads decoded in native code: exactly what `router_adapter/events.py` accepts,
//! refusing the same payloads (see shared/docs/kv-hashing.md sections 1.7 and 2).
//!
//! - A batch is `[ts, events, dp_rank?, ...]`: `ts` a float or an int, `dp_rank` an int or nil,
//!   later elements ignored, nothing after the batch.
//! - An event is a map tagged by `"type"` (vLLM >= 0.24, SGLang; the tag may come anywhere and
//!   every `"type"` must name the same class) or an array `[tag, fields in declaration order...]`
//!   (vLLM <= 0.23; trailing elements ignored). Fields the classes do not declare are skipped
//!   without checks other than well-formedness; declared fields are type-checked as msgspec
//!   does, `Any`-typed ones (`extra_keys`, the array form's `kv_cache_spec_*`) included.
//! - Block hashes are unsigned or signed 64-bit integers (two's complement kept) or digests of at
//!   least 8 bytes (their last 8, big-endian). For a field given twice the last one counts.
//!
//! [`decode_batch`] also reads the msgspec encoding of `router_adapter.events.Batch` (maps keyed
//! by field name, events untagged), and [`decode_columns`] the same with each event's hashes and
//! token ids as counts of values in two side arrays: the Python `apply_batch` path hands
//! already-decoded events over that way instead of one Python object per field.
//!
//! Token ids are kept as `u32`; an event with a token id outside that range records where, and
//! the index skips it when that token falls in a block it would hash (the Python index raises).
//! A store's `token_ids` may instead be all pairs `[t_i, t_i+1]` (SGLang with EAGLE speculative
//! decoding publishes bigram pages): the pairs' first elements are kept, and the store is marked
//! [`Stored::bigram`]. The plain list is read first (the fast path); only a list whose first
//! element is an array is read again as pairs, and a list mixing ints and pairs is refused.
//!
//! An event whose tag names no class this decoder knows (a newer engine's event type) is left
//! out and counted ([`Batch::unknown`]): the tag is the first `"type"` of a map (keys before it
//! strings, the value a string) or an array's first element, a string; the rest of such an event
//! need only be well-formed. Everything else that is not an event of a known class refuses the
//! batch.

use super::content::MmKey;
use super::msgpack::{Check, Kind, Reader};
use crate::error::{Error, Result};

/// Events reserved up front at most: a declared count is checked against the bytes left, but an
/// event takes one byte of input and far more as an `Event`, so a larger batch grows as it is read.
const EVENTS_RESERVED: usize = 1024;

/// The medium of events that name none (engines stored on GPU before the field existed).
pub const DEFAULT_MEDIUM: &str = "GPU";

/// A decoded batch; events refer to ranges of `hashes` and `tokens` and borrow the payload.
#[derive(Debug, Default)]
pub struct Batch<'a> {
    /// The events, in order.
    pub events: Vec<Event<'a>>,
    /// Block hashes of every event, concatenated.
    pub hashes: Vec<u64>,
    /// Token ids of every event, concatenated.
    pub tokens: Vec<u32>,
    /// Events of a class this decoder does not know, left out of `events`.
    pub unknown: u64,
    /// Multimodal keys of every store, concatenated (see [`Stored::mm`]).
    pub mm: Vec<MmKey>,
    /// Every store's `lookahead_token_ids` lists, concatenated (see [`Stored::lookahead`]).
    pub lookahead: Vec<u32>,
}

/// One event.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<'a> {
    /// Blocks a worker now holds.
    Stored(Stored<'a>),
    /// Blocks a worker evicted from one medium.
    Removed(Removed<'a>),
    /// The worker dropped its whole cache.
    Cleared,
}

/// A `BlockStored`, normalized like `events.BlockStored` plus what the index derives from it.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored<'a> {
    /// Range of `Batch::hashes`.
    pub hashes: (usize, usize),
    /// The parent block's hash; None at the start of a sequence.
    pub parent: Option<u64>,
    /// Range of `Batch::tokens`.
    pub tokens: (usize, usize),
    /// The first token (relative to the range) outside 0..2^32, if any.
    pub wide_token: Option<usize>,
    /// As published (any integer).
    pub block_size: i128,
    /// The medium (`"GPU"` when the event names none).
    pub medium: &'a str,
    /// The LoRA adapter's name; empty for the base model.
    pub lora_name: &'a str,
    /// The cache salt of a store that starts a sequence (`events.cache_salt_of`).
    pub salt: &'a str,
    /// Range of `Batch::mm`: the `[identifier, offset]` pairs of each block's `extra_keys`
    /// (`events.mm_keys_of`), by block. (32-bit: a pair takes 4 bytes of payload at least, and
    /// 32 bits keep the event the size it was.)
    pub mm: (u32, u32),
    /// The KV-cache group; None when not published.
    pub group_idx: Option<i128>,
    /// Whether `locality` is `"REMOTE"`.
    pub remote: bool,
    /// Published as bigram pairs (SGLang with EAGLE); `tokens` are the pairs' first elements.
    pub bigram: bool,
    /// `lookahead_token_ids` (vLLM >= 0.33 with lookahead hashing: per block, the tokens after it
    /// that its hash covers); None when the event has none (absent or nil).
    pub lookahead: Option<Lookahead>,
}

/// A store's `lookahead_token_ids`: its lists, concatenated in `Batch::lookahead`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lookahead {
    /// Where the lists start in `Batch::lookahead`.
    pub start: usize,
    /// How many lists (one per block hash in a store the index can key).
    pub lists: usize,
    /// The length of the first list (0 without lists).
    pub width: usize,
    /// Whether the lists are not all of one length.
    pub ragged: bool,
    /// The first token (relative to `start`) outside 0..2^32, if any.
    pub wide_token: Option<usize>,
}

/// A `BlockRemoved`.
#[derive(Debug, Clone, PartialEq)]
pub struct Removed<'a> {
    /// Range of `Batch::hashes`.
    pub hashes: (usize, usize),
    /// The medium (`"GPU"` when the event names none).
    pub medium: &'a str,
    /// The KV-cache group; None when not published.
    pub group_idx: Option<i128>,
    /// Whether `locality` is `"REMOTE"`.
    pub remote: bool,
}

/// Which encoding a buffer is in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Encoding {
    /// A payload as an engine publishes it.
    Engine,
    /// `msgspec.msgpack.encode(router_adapter.events.Batch)`.
    Normalized,
    /// [`Encoding::Normalized`] with each event's `block_hashes` and `token_ids` given as a
    /// count of values taken in order from two side arrays ([`Columns`], see
    /// [`decode_columns`]): the Python `apply_batch` fills them from its lists with
    /// `array.fromlist`, and nothing encodes or copies them one integer at a time.
    Columns,
}

/// The side arrays of an [`Encoding::Columns`] batch: every event's block hashes, then every
/// event's token ids, concatenated in event order.
#[derive(Clone, Copy, Debug, Default)]
pub struct Columns<'s> {
    /// Block hashes (as 64-bit patterns).
    pub hashes: &'s [u64],
    /// Token ids.
    pub tokens: &'s [u32],
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Stored,
    Removed,
    Cleared,
}

impl Class {
    fn from_tag(tag: &[u8]) -> Option<Class> {
        if same(tag, b"BlockStored") {
            return Some(Class::Stored);
        }
        match tag {
            b"BlockRemoved" => Some(Class::Removed),
            b"AllBlocksCleared" => Some(Class::Cleared),
            _ => None,
        }
    }
}

/// The strings of `extra_keys[0]` that `cache_salt_of` looks at: how many, the first, the last.
/// Byte-string equality for keys and tags: 4 to 24 bytes compare as two or three overlapping
/// words (what every field name and tag is), where `==` calls `memcmp` once per key of every event.
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if (4..8).contains(&n) {
        let word =
            |s: &[u8], at: usize| u32::from_ne_bytes([s[at], s[at + 1], s[at + 2], s[at + 3]]);
        return word(a, 0) == word(b, 0) && word(a, n - 4) == word(b, n - 4);
    }
    if !(8..=24).contains(&n) {
        return a == b;
    }
    let word = |s: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_ne_bytes(w)
    };
    let mid = (n - 8).min(8);
    word(a, 0) == word(b, 0) && word(a, mid) == word(b, mid) && word(a, n - 8) == word(b, n - 8)
}

/// A field an event may carry, named once from its key (then matched as a number, where a
/// chain of byte-string comparisons per key cost more than decoding the key's value).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Field {
    BlockHashes,
    ParentBlockHash,
    TokenIds,
    BlockSize,
    LoraId,
    Medium,
    LoraName,
    CacheSalt,
    ExtraKeys,
    GroupIdx,
    Locality,
    /// `events.BlockStored.bigram`: read in the normalized encodings only (an engine's event
    /// with such a key has it skipped, as any field its class does not declare).
    Bigram,
    /// `lookahead_token_ids` (vLLM >= 0.33; map-encoded stores only).
    LookaheadTokenIds,
    /// Any other key (skipped).
    Other,
}

impl Field {
    #[cfg(test)]
    const ALL: [Field; 13] = [
        Field::BlockHashes,
        Field::ParentBlockHash,
        Field::TokenIds,
        Field::BlockSize,
        Field::LoraId,
        Field::Medium,
        Field::LoraName,
        Field::CacheSalt,
        Field::ExtraKeys,
        Field::GroupIdx,
        Field::Locality,
        Field::Bigram,
        Field::LookaheadTokenIds,
    ];

    /// The field a key names: its length and first byte single out one candidate (no two names
    /// share both), which the whole key must then equal.
    #[inline]
    fn of(key: &[u8]) -> Field {
        let candidate = match (key.len(), key.first()) {
            (12, Some(b'b')) => Field::BlockHashes,
            (17, Some(b'p')) => Field::ParentBlockHash,
            (9, Some(b't')) => Field::TokenIds,
            (10, Some(b'b')) => Field::BlockSize,
            (7, Some(b'l')) => Field::LoraId,
            (6, Some(b'm')) => Field::Medium,
            (9, Some(b'l')) => Field::LoraName,
            (10, Some(b'c')) => Field::CacheSalt,
            (10, Some(b'e')) => Field::ExtraKeys,
            (9, Some(b'g')) => Field::GroupIdx,
            (8, Some(b'l')) => Field::Locality,
            (6, Some(b'b')) => Field::Bigram,
            (19, Some(b'l')) => Field::LookaheadTokenIds,
            _ => return Field::Other,
        };
        if same(key, candidate.name().as_bytes()) {
            candidate
        } else {
            Field::Other
        }
    }

    fn name(self) -> &'static str {
        match self {
            Field::BlockHashes => "block_hashes",
            Field::ParentBlockHash => "parent_block_hash",
            Field::TokenIds => "token_ids",
            Field::BlockSize => "block_size",
            Field::LoraId => "lora_id",
            Field::Medium => "medium",
            Field::LoraName => "lora_name",
            Field::CacheSalt => "cache_salt",
            Field::ExtraKeys => "extra_keys",
            Field::GroupIdx => "group_idx",
            Field::Locality => "locality",
            Field::Bigram => "bigram",
            Field::LookaheadTokenIds => "lookahead_token_ids",
            Field::Other => "",
        }
    }
}

#[derive(Default, Clone, Copy)]
struct SaltHints<'a> {
    count: usize,
    first: &'a str,
    last: &'a str,
}

/// The declared fields of an event as read so far.
#[derive(Default)]
struct Fields<'a> {
    hashes: Option<(usize, usize)>,
    short_hash: Option<usize>,
    parent: Option<u64>,
    short_parent: Option<usize>,
    tokens: Option<(usize, usize)>,
    wide_token: Option<usize>,
    bigram: bool,
    block_size: Option<i128>,
    medium: Option<&'a str>,
    lora_name: Option<&'a str>,
    cache_salt: Option<&'a str>,
    salt_hints: Option<SaltHints<'a>>,
    /// Range of `Batch::mm` (empty: none).
    mm: (u32, u32),
    group_idx: Option<i128>,
    locality: Option<&'a str>,
    lookahead: Option<Lookahead>,
}

/// Decodes a whole buffer; any error refuses all of it (nothing is half-applied).
pub fn decode_batch(payload: &[u8], encoding: Encoding) -> Result<Batch<'_>> {
    if encoding == Encoding::Columns {
        return Err(Error::invalid_argument(
            "encoding: the columns encoding comes with its side arrays (decode_columns)",
        ));
    }
    decode(payload, encoding, Columns::default())
}

/// Decodes an [`Encoding::Columns`] header with its side arrays; every value of both arrays
/// must be named by exactly one event.
pub fn decode_columns<'a>(header: &'a [u8], columns: Columns<'_>) -> Result<Batch<'a>> {
    let batch = decode(header, Encoding::Columns, columns)?;
    for (what, named, given) in [
        ("hashes", batch.hashes.len(), columns.hashes.len()),
        ("tokens", batch.tokens.len(), columns.tokens.len()),
    ] {
        if named != given {
            return Err(Error::invalid_argument(format!(
                "{what}: {given} values given, the events name {named}"
            )));
        }
    }
    Ok(batch)
}

fn decode<'a>(payload: &'a [u8], encoding: Encoding, columns: Columns<'_>) -> Result<Batch<'a>> {
    let mut batch = Batch::default();
    batch.hashes.reserve(columns.hashes.len());
    batch.tokens.reserve(columns.tokens.len());
    let mut r = Reader::new(payload);
    match encoding {
        Encoding::Engine => wire_batch(&mut r, &mut batch)?,
        Encoding::Normalized | Encoding::Columns => {
            normalized_batch(&mut r, &mut batch, encoding, columns)?
        }
    }
    if !r.is_done() {
        return Err(at_batch(super::msgpack::malformed(format_args!(
            "trailing characters (byte {})",
            r.pos()
        ))));
    }
    Ok(batch)
}

fn at_batch(e: Error) -> Error {
    e.context("batch")
}

fn expected(what: &str, got: Kind, path: &str) -> Error {
    Error::invalid_argument(format!(
        "expected `{what}`, got `{}` - at `{path}`",
        got.name()
    ))
}

fn wire_batch<'a>(r: &mut Reader<'a>, batch: &mut Batch<'a>) -> Result<()> {
    let got = r.peek().map_err(at_batch)?;
    let n = r.array().map_err(at_batch)?;
    let n = n.ok_or_else(|| at_batch(expected("array", got, "$")))?;
    if n < 2 {
        return Err(at_batch(Error::invalid_argument(format!(
            "expected `array` of at least length 2, got {n}"
        ))));
    }
    let got = r.peek().map_err(at_batch)?;
    if r.float().map_err(at_batch)?.is_none() {
        return Err(at_batch(expected("float", got, "$[0]")));
    }
    let got = r.peek().map_err(at_batch)?;
    let events = r.array().map_err(at_batch)?;
    let events = events.ok_or_else(|| at_batch(expected("array", got, "$[1]")))?;
    batch.events.reserve(events.min(EVENTS_RESERVED));
    for i in 0..events {
        match wire_event(r, batch).map_err(|e| e.context(format_args!("events[{i}]")))? {
            Some(event) => batch.events.push(event),
            None => batch.unknown += 1,
        }
    }
    if n >= 3 {
        let got = r.peek().map_err(at_batch)?;
        if !r.nil().map_err(at_batch)? && r.int().map_err(at_batch)?.is_none() {
            return Err(at_batch(expected("int | null", got, "$[2]")));
        }
    }
    for _ in 3..n {
        r.skip(Check::WellFormed).map_err(at_batch)?;
    }
    Ok(())
}

/// One event; None for one of a class this decoder does not know (skipped, well-formed).
fn wire_event<'a>(r: &mut Reader<'a>, batch: &mut Batch<'a>) -> Result<Option<Event<'a>>> {
    match r.peek()? {
        Kind::Map => map_event(r, batch),
        Kind::Array => array_event(r, batch),
        other => Err(expected("array", other, "$")),
    }
}

/// The class named by the first `"type"` of a map (msgspec looks the tag up before the fields).
fn find_tag<'a>(r: &mut Reader<'a>, pairs: usize) -> Result<&'a [u8]> {
    for _ in 0..pairs {
        let got = r.peek()?;
        let key = r
            .str_bytes()?
            .ok_or_else(|| expected("str", got, "key in $"))?;
        if key == b"type" {
            let got = r.peek()?;
            return r.str_bytes()?.ok_or_else(|| expected("str", got, "$.type"));
        }
        r.skip(Check::WellFormed)?;
    }
    Err(Error::invalid_argument(
        "object missing required field `type`",
    ))
}

fn map_event<'a>(r: &mut Reader<'a>, batch: &mut Batch<'a>) -> Result<Option<Event<'a>>> {
    let pairs = r.map()?.unwrap_or(0);
    let start = r.pos();
    let tag = find_tag(r, pairs)?;
    r.seek(start);
    let Some(class) = Class::from_tag(tag) else {
        for _ in 0..pairs {
            r.skip(Check::WellFormed)?;
            r.skip(Check::WellFormed)?;
        }
        return Ok(None);
    };
    let mut fields = Fields::default();
    for _ in 0..pairs {
        let got = r.peek()?;
        let key = r
            .str_bytes()?
            .ok_or_else(|| expected("str", got, "key in $"))?;
        if key == b"type" {
            let got = r.peek()?;
            let value = r
                .str_bytes()?
                .ok_or_else(|| expected("str", got, "$.type"))?;
            if !same(value, tag) {
                return Err(invalid_tag(value));
            }
        } else if let Some(field) = declared(class, Field::of(key)).filter(|&f| f != Field::Bigram)
        {
            read_field(r, batch, &mut fields, field, None, None)?;
        } else {
            r.skip(Check::WellFormed)?;
        }
    }
    finish(class, fields, Encoding::Engine).map(Some)
}

fn invalid_tag(tag: &[u8]) -> Error {
    Error::invalid_argument(format!(
        "invalid value '{}' - at `$.type`",
        String::from_utf8_lossy(tag)
    ))
}

/// The field when the map-encoded class declares it (other keys are skipped unchecked).
#[inline]
fn declared(class: Class, field: Field) -> Option<Field> {
    let declared = match class {
        Class::Stored => field != Field::Other,
        Class::Removed => matches!(
            field,
            Field::BlockHashes | Field::Medium | Field::GroupIdx | Field::Locality
        ),
        Class::Cleared => false,
    };
    declared.then_some(field)
}

/// Fields of the positional (vLLM <= 0.23) encodings, after the tag (`Other`: read as `Any`
/// and dropped, like `kv_cache_spec_kind` and `kv_cache_spec_sliding_window`).
const ARRAY_STORED: [Field; 12] = [
    Field::BlockHashes,
    Field::ParentBlockHash,
    Field::TokenIds,
    Field::BlockSize,
    Field::LoraId,
    Field::Medium,
    Field::LoraName,
    Field::ExtraKeys,
    Field::GroupIdx,
    Field::Other,
    Field::Other,
    Field::Locality,
];
const ARRAY_REMOVED: [Field; 4] = [
    Field::BlockHashes,
    Field::Medium,
    Field::GroupIdx,
    Field::Locality,
];

fn array_event<'a>(r: &mut Reader<'a>, batch: &mut Batch<'a>) -> Result<Option<Event<'a>>> {
    let n = r.array()?.unwrap_or(0);
    if n == 0 {
        return Err(Error::invalid_argument(
            "expected `array` of at least length 1, got 0",
        ));
    }
    let got = r.peek()?;
    let tag = r.str_bytes()?.ok_or_else(|| expected("str", got, "$[0]"))?;
    let Some(class) = Class::from_tag(tag) else {
        for _ in 1..n {
            r.skip(Check::WellFormed)?;
        }
        return Ok(None);
    };
    let (names, required): (&[Field], usize) = match class {
        Class::Stored => (&ARRAY_STORED, 4),
        Class::Removed => (&ARRAY_REMOVED, 1),
        Class::Cleared => (&[], 0),
    };
    if n < 1 + required {
        return Err(Error::invalid_argument(format!(
            "expected `array` of at least length {}, got {n}",
            1 + required
        )));
    }
    let mut fields = Fields::default();
    for i in 1..n {
        match names.get(i - 1) {
            Some(&field) => read_field(r, batch, &mut fields, field, Some(i), None)?,
            None => r.skip(Check::WellFormed)?,
        }
    }
    finish(class, fields, Encoding::Engine).map(Some)
}

/// Reads one declared field into `fields`; `index` is the position in the array encoding.
fn read_field<'a>(
    r: &mut Reader<'a>,
    batch: &mut Batch<'a>,
    fields: &mut Fields<'a>,
    field: Field,
    index: Option<usize>,
    columns: Option<Columns<'_>>,
) -> Result<()> {
    let path = || match index {
        Some(i) => format!("$[{i}]"),
        None => format!("$.{}", field.name()),
    };
    let got = r.peek()?;
    match field {
        Field::BlockHashes if columns.is_some() => {
            let side = columns.map_or(&[][..], |c| c.hashes);
            fields.hashes = Some(take_column(r, &mut batch.hashes, side, &path)?);
            fields.short_hash = None;
        }
        Field::TokenIds if columns.is_some() => {
            let side = columns.map_or(&[][..], |c| c.tokens);
            fields.tokens = Some(take_column(r, &mut batch.tokens, side, &path)?);
            fields.wide_token = None;
            fields.bigram = false;
        }
        Field::BlockHashes => {
            let (range, short) = hash_list(r, &mut batch.hashes, &path)?;
            fields.hashes = Some(range);
            fields.short_hash = short;
        }
        Field::ParentBlockHash => {
            fields.short_parent = None;
            fields.parent = None;
            if !r.nil()? {
                match hash_value(r)? {
                    Some(Ok(h)) => fields.parent = Some(h),
                    Some(Err(len)) => fields.short_parent = Some(len),
                    None => return Err(expected("int | bytes | null", got, &path())),
                }
            }
        }
        Field::TokenIds => {
            let (range, wide, bigram) = token_list(r, &mut batch.tokens, &path)?;
            fields.tokens = Some(range);
            fields.wide_token = wide;
            fields.bigram = bigram;
        }
        Field::Bigram => {
            fields.bigram = r.bool()?.ok_or_else(|| expected("bool", got, &path()))?;
        }
        Field::BlockSize => {
            fields.block_size = Some(r.int()?.ok_or_else(|| expected("int", got, &path()))?);
        }
        Field::LoraId | Field::GroupIdx => {
            let value = if r.nil()? {
                None
            } else {
                Some(
                    r.int()?
                        .ok_or_else(|| expected("int | null", got, &path()))?,
                )
            };
            if field == Field::GroupIdx {
                fields.group_idx = value;
            }
        }
        Field::Medium | Field::LoraName | Field::CacheSalt | Field::Locality => {
            let value = if r.nil()? {
                None
            } else {
                Some(
                    r.text()?
                        .ok_or_else(|| expected("str | null", got, &path()))?,
                )
            };
            match field {
                Field::Medium => fields.medium = value,
                Field::LoraName => fields.lora_name = value,
                Field::CacheSalt => fields.cache_salt = value,
                _ => fields.locality = value,
            }
        }
        Field::ExtraKeys => extra_keys_field(r, batch, fields, got, &path)?,
        Field::LookaheadTokenIds => lookahead_field(r, batch, fields, got, &path)?,
        Field::Other => r.skip(Check::Any)?,
    }
    Ok(())
}

/// A block hash: `Ok(value)`, `Err(length)` for a digest shorter than 8 bytes (refused once the
/// event is complete, so a later repeat of the field can replace it), `None` for another type.
#[inline]
fn hash_value(r: &mut Reader<'_>) -> Result<Option<Result<u64, usize>>> {
    if let Some(v) = r.int()? {
        return Ok(Some(Ok(v as u64)));
    }
    if let Some(bytes) = r.bin()? {
        if bytes.len() < 8 {
            return Ok(Some(Err(bytes.len())));
        }
        let mut last = [0u8; 8];
        last.copy_from_slice(&bytes[bytes.len() - 8..]);
        return Ok(Some(Ok(u64::from_be_bytes(last))));
    }
    Ok(None)
}

type Range = (usize, usize);

/// A count of values taken from `side` after those taken so far (see [`Encoding::Columns`]):
/// the next `count` values go to `out`, whose length is where the event's range starts.
fn take_column<T: Copy>(
    r: &mut Reader<'_>,
    out: &mut Vec<T>,
    side: &[T],
    path: &dyn Fn() -> String,
) -> Result<Range> {
    let got = r.peek()?;
    let count = r.int()?.ok_or_else(|| expected("int", got, &path()))?;
    let start = out.len();
    let end = usize::try_from(count)
        .ok()
        .and_then(|n| start.checked_add(n))
        .filter(|&end| end <= side.len())
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "{count} values from {start} on, past the {} given - at `{}`",
                side.len(),
                path()
            ))
        })?;
    out.extend_from_slice(&side[start..end]);
    Ok((start, end))
}

fn hash_list(
    r: &mut Reader<'_>,
    out: &mut Vec<u64>,
    path: &dyn Fn() -> String,
) -> Result<(Range, Option<usize>)> {
    let got = r.peek()?;
    let n = r.array()?.ok_or_else(|| expected("array", got, &path()))?;
    let start = out.len();
    out.reserve(n);
    let mut short = None;
    for i in 0..n {
        if let Some(h) = r.int_bits()? {
            out.push(h);
            continue;
        }
        let got = r.peek()?;
        match hash_value(r)? {
            Some(Ok(h)) => out.push(h),
            Some(Err(len)) => {
                short.get_or_insert(len);
                out.push(0);
            }
            None => {
                return Err(expected("int | bytes", got, &format!("{}[{i}]", path())));
            }
        }
    }
    Ok(((start, out.len()), short))
}

/// A store's token ids: the range in `out`, the first id outside `u32` (relative), and whether
/// the list was of bigram pairs (their first elements kept).
fn token_list(
    r: &mut Reader<'_>,
    out: &mut Vec<u32>,
    path: &dyn Fn() -> String,
) -> Result<(Range, Option<usize>, bool)> {
    let got = r.peek()?;
    let n = r.array()?.ok_or_else(|| expected("array", got, &path()))?;
    let start = out.len();
    match r.u32_list(n, out)? {
        Ok(wide) => Ok(((start, out.len()), wide, false)),
        // The reader stopped at the first element, an array: a bigram list (read again as one).
        Err((0, Kind::Array)) => {
            out.truncate(start);
            let wide = bigram_list(r, n, out, path)?;
            Ok(((start, out.len()), wide, true))
        }
        Err((i, kind)) => Err(expected("int", kind, &format!("{}[{i}]", path()))),
    }
}

/// `n` pairs `[first, second]` of ints (msgspec's `list[tuple[int, int]]`): the first elements
/// appended to `out` (0 for one outside `u32`, whose index is returned, as `u32_list` does).
#[cold]
fn bigram_list(
    r: &mut Reader<'_>,
    n: usize,
    out: &mut Vec<u32>,
    path: &dyn Fn() -> String,
) -> Result<Option<usize>> {
    let mut wide = None;
    out.reserve(n);
    for i in 0..n {
        let got = r.peek()?;
        let len = r
            .array()?
            .ok_or_else(|| expected("array", got, &format!("{}[{i}]", path())))?;
        if len != 2 {
            return Err(Error::invalid_argument(format!(
                "expected `array` of length 2, got {len} - at `{}[{i}]`",
                path()
            )));
        }
        let got = r.peek()?;
        let first = r
            .int()?
            .ok_or_else(|| expected("int", got, &format!("{}[{i}][0]", path())))?;
        let got = r.peek()?;
        if r.int()?.is_none() {
            return Err(expected("int", got, &format!("{}[{i}][1]", path())));
        }
        out.push(u32::try_from(first).unwrap_or_else(|_| {
            wide.get_or_insert(i);
            0
        }));
    }
    Ok(wide)
}

/// Reads `extra_keys` into `fields` and `batch.mm` (out of line: most events have none, and the
/// other fields' reads stay as compact as they were).
#[inline(never)]
fn extra_keys_field<'a>(
    r: &mut Reader<'a>,
    batch: &mut Batch<'a>,
    fields: &mut Fields<'a>,
    got: Kind,
    path: &dyn Fn() -> String,
) -> Result<()> {
    fields.salt_hints = None;
    // A field given twice: the last one counts (the event's keys are the last in `batch.mm`, and
    // are replaced).
    if fields.mm.1 > fields.mm.0 {
        batch.mm.truncate(fields.mm.0 as usize);
    }
    let start = batch.mm.len() as u32;
    fields.mm = (start, start);
    if !r.nil()? {
        if got != Kind::Array {
            return Err(expected("array | null", got, &path()));
        }
        fields.salt_hints = Some(extra_keys(r, &mut batch.mm)?);
        let end = u32::try_from(batch.mm.len())
            .map_err(|_| Error::invalid_argument("extra_keys: more than 2^32 multimodal keys"))?;
        fields.mm = (start, end);
    }
    Ok(())
}

/// Reads `lookahead_token_ids` (`list[list[int]] | None`) into `fields` and `batch.lookahead`
/// (out of line: only vLLM with a lookahead drafter publishes it, and the other fields' reads
/// stay as they were).
#[inline(never)]
fn lookahead_field<'a>(
    r: &mut Reader<'a>,
    batch: &mut Batch<'a>,
    fields: &mut Fields<'a>,
    got: Kind,
    path: &dyn Fn() -> String,
) -> Result<()> {
    // A field given twice: the last one counts (this event's lists are the last ones read).
    if let Some(previous) = fields.lookahead.take() {
        batch.lookahead.truncate(previous.start);
    }
    if r.nil()? {
        return Ok(());
    }
    let n = r
        .array()?
        .ok_or_else(|| expected("array | null", got, &path()))?;
    let start = batch.lookahead.len();
    let mut read = Lookahead {
        start,
        lists: n,
        width: 0,
        ragged: false,
        wide_token: None,
    };
    for i in 0..n {
        let got = r.peek()?;
        let len = r
            .array()?
            .ok_or_else(|| expected("array", got, &format!("{}[{i}]", path())))?;
        let at = batch.lookahead.len() - start;
        match r.u32_list(len, &mut batch.lookahead)? {
            Ok(wide) => {
                if read.wide_token.is_none() {
                    read.wide_token = wide.map(|w| at + w);
                }
            }
            Err((j, kind)) => {
                return Err(expected("int", kind, &format!("{}[{i}][{j}]", path())));
            }
        }
        if i == 0 {
            read.width = len;
        } else if len != read.width {
            read.ragged = true;
        }
    }
    fields.lookahead = Some(read);
    Ok(())
}

/// Checks `extra_keys` as msgspec decodes `list[Any]`, keeps the strings `cache_salt_of` reads
/// (the string elements of the first element when that is an array) and appends to `mm` the
/// multimodal keys `events.mm_keys_of` reads: in element i (block i) when it is an array, each
/// element that is a 2-array of a string and an integer (vLLM's untagged `(identifier, offset)`).
/// Bare strings are no multimodal key (see `mm_keys_of`).
fn extra_keys<'a>(r: &mut Reader<'a>, mm: &mut Vec<MmKey>) -> Result<SaltHints<'a>> {
    let n = r.array()?.unwrap_or(0);
    let mut hints = SaltHints::default();
    for i in 0..n {
        if r.peek()? != Kind::Array {
            r.skip(Check::Any)?;
            continue;
        }
        let inner = r.array()?.unwrap_or(0);
        for _ in 0..inner {
            match r.peek()? {
                Kind::Str if i == 0 => {
                    let s = r.text()?.unwrap_or_default();
                    if hints.count == 0 {
                        hints.first = s;
                    }
                    hints.last = s;
                    hints.count += 1;
                }
                Kind::Array => mm_pair(r, i, mm)?,
                _ => r.skip(Check::Any)?,
            }
        }
    }
    Ok(hints)
}

/// One array element of block `block`'s extra keys: a multimodal key when it is
/// `[identifier, offset]`, else only checked (as `Any`).
fn mm_pair(r: &mut Reader<'_>, block: usize, mm: &mut Vec<MmKey>) -> Result<()> {
    let at = r.pos();
    if r.array()? == Some(2) && r.peek()? == Kind::Str {
        let identifier = r.text()?.unwrap_or_default();
        if r.peek()? == Kind::Int {
            let offset = r.int()?.unwrap_or_default();
            // More blocks than 2^32 would take more than 4 GiB of payload.
            mm.push(MmKey::new(block as u32, identifier, offset));
            return Ok(());
        }
    }
    r.seek(at);
    r.skip(Check::Any)
}

/// Builds the event from its fields: required fields, short digests, and normalization.
fn finish<'a>(class: Class, f: Fields<'a>, encoding: Encoding) -> Result<Event<'a>> {
    if class == Class::Cleared {
        return Ok(Event::Cleared);
    }
    let hashes = f
        .hashes
        .ok_or_else(|| Error::invalid_argument("object missing required field `block_hashes`"))?;
    if let Some(len) = f.short_hash.or(f.short_parent) {
        return Err(Error::invalid_argument(format!(
            "block hash of {len} bytes; expected a digest of at least 8"
        )));
    }
    // The engine decoder turns a missing or empty medium into GPU (`wire.medium or ...`); the
    // normalized events already went through that and are taken as they are.
    let medium = match (encoding, f.medium) {
        (Encoding::Normalized | Encoding::Columns, Some(m)) => m,
        (_, Some(m)) if !m.is_empty() => m,
        _ => DEFAULT_MEDIUM,
    };
    let remote = f.locality == Some("REMOTE");
    if class == Class::Removed {
        return Ok(Event::Removed(Removed {
            hashes,
            medium,
            group_idx: f.group_idx,
            remote,
        }));
    }
    let lora_name = f.lora_name.unwrap_or("");
    Ok(Event::Stored(Stored {
        hashes,
        parent: f.parent,
        tokens: f.tokens.unwrap_or((0, 0)),
        wide_token: f.wide_token,
        block_size: f.block_size.unwrap_or(0),
        medium,
        lora_name,
        salt: cache_salt(&f, lora_name),
        mm: f.mm,
        group_idx: f.group_idx,
        remote,
        bigram: f.bigram,
        lookahead: f.lookahead,
    }))
}

/// `events.cache_salt_of`: the salt field, else (at a sequence start) the last bare string of
/// the first block's extra keys that is not the LoRA name in front.
fn cache_salt<'a>(f: &Fields<'a>, lora_name: &str) -> &'a str {
    if let Some(salt) = f.cache_salt.filter(|s| !s.is_empty()) {
        return salt;
    }
    if f.parent.is_some() {
        return "";
    }
    match f.salt_hints {
        Some(h) if h.count == 0 => "",
        Some(h) if h.count == 1 && !lora_name.is_empty() && h.first == lora_name => "",
        Some(h) => h.last,
        None => "",
    }
}

fn normalized_batch<'a>(
    r: &mut Reader<'a>,
    batch: &mut Batch<'a>,
    encoding: Encoding,
    columns: Columns<'_>,
) -> Result<()> {
    let pairs = r
        .map()?
        .ok_or_else(|| Error::invalid_argument("batch: expected a map"))?;
    for _ in 0..pairs {
        let key = r
            .str_bytes()?
            .ok_or_else(|| Error::invalid_argument("batch: expected string keys"))?;
        if key == b"unknown_events" {
            let got = r.peek()?;
            let n = r
                .int()?
                .ok_or_else(|| expected("int", got, "$.unknown_events"))?;
            batch.unknown = u64::try_from(n)
                .map_err(|_| Error::invalid_argument("batch.unknown_events: negative"))?;
            continue;
        }
        if key != b"events" {
            r.skip(Check::WellFormed)?;
            continue;
        }
        let n = r
            .array()?
            .ok_or_else(|| Error::invalid_argument("batch.events: expected an array"))?;
        batch.events.reserve(n.min(EVENTS_RESERVED));
        for i in 0..n {
            let event = normalized_event(r, batch, encoding, columns)
                .map_err(|e| e.context(format_args!("events[{i}]")))?;
            batch.events.push(event);
        }
    }
    Ok(())
}

/// An untagged event map: BlockStored has `token_ids`, BlockRemoved `block_hashes`,
/// AllBlocksCleared no field at all.
fn normalized_event<'a>(
    r: &mut Reader<'a>,
    batch: &mut Batch<'a>,
    encoding: Encoding,
    columns: Columns<'_>,
) -> Result<Event<'a>> {
    let columns = (encoding == Encoding::Columns).then_some(columns);
    let pairs = r
        .map()?
        .ok_or_else(|| Error::invalid_argument("expected a map"))?;
    let mut fields = Fields::default();
    for _ in 0..pairs {
        let key = r
            .str_bytes()?
            .ok_or_else(|| Error::invalid_argument("expected string keys"))?;
        if let Some(field) = declared(Class::Stored, Field::of(key)) {
            read_field(r, batch, &mut fields, field, None, columns)?;
        } else {
            r.skip(Check::WellFormed)?;
        }
    }
    let class = if fields.tokens.is_some() {
        Class::Stored
    } else if fields.hashes.is_some() {
        Class::Removed
    } else {
        Class::Cleared
    };
    finish(class, fields, encoding)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_named_by_their_whole_key() {
        for field in Field::ALL {
            let name = field.name().as_bytes();
            assert_eq!(Field::of(name), field);
            // Any one byte changed, one dropped or one added: another key.
            for i in 0..name.len() {
                let mut changed = name.to_vec();
                changed[i] ^= 0x20;
                assert_eq!(Field::of(&changed), Field::Other, "{changed:?}");
                let mut dropped = name.to_vec();
                dropped.remove(i);
                assert_eq!(Field::of(&dropped), Field::Other, "{dropped:?}");
            }
            let longer = [name, b"_"].concat();
            assert_eq!(Field::of(&longer), Field::Other);
        }
        for other in [
            &b""[..],
            b"type",
            b"kv_cache_spec_kind",
            b"lora_idx",
            b"mediums",
        ] {
            assert_eq!(Field::of(other), Field::Other);
        }
    }

    #[test]
    fn same_agrees_with_slice_equality() {
        let base: Vec<u8> = (0..30u8).map(|i| b'a' + i % 26).collect();
        for n in 0..base.len() {
            let a = &base[..n];
            assert!(same(a, a));
            for i in 0..n {
                let mut b = a.to_vec();
                b[i] ^= 1;
                assert!(!same(a, &b), "{n} {i}");
            }
            assert!(!same(a, &base[..n + 1]));
        }
    }
}
