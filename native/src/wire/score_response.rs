//! `ScoreResponse` (KvRouter.Score's answer) in protobuf wire format, written straight from the
//! index's score, so the server answers a `token_ids` Score without building a Python object per
//! worker, medium or block hash (building the message in Python cost about as much as the
//! score itself: 2048 hashes and 64 workers' media maps took ~155 us, this takes a few).
//!
//! The fields only the server knows (fingerprint, warming, the serialized `BlockHashSpec`) are
//! passed in. The tests in `wire::score_response_tests` decode every field back with the
//! generated type.

use super::codec::{put_bytes, put_key, put_message, put_uint, put_varint, varint_len, LEN};

/// `ScoreResponse` fields.
const WORKERS: u64 = 1;
const BLOCK_HASHES: u64 = 2;
const BLOCK_SIZE: u64 = 3;
const MODE: u64 = 4;
const BLOCK_HASH_SPEC: u64 = 5;
const NUM_TOKENS: u64 = 6;
const FINGERPRINT: u64 = 7;
const WARMING: u64 = 8;

/// `WorkerScore` fields.
const WORKER: u64 = 1;
const BLOCKS: u64 = 2;
const TOKENS: u64 = 3;
const BLOCKS_BY_MEDIUM: u64 = 4;

/// Map entry fields.
const MAP_KEY: u64 = 1;
const MAP_VALUE: u64 = 2;

/// A `ScoreResponse`'s fields other than its workers.
#[derive(Debug, Clone, Copy)]
pub struct ScoreFields<'a> {
    /// Tokens per block (0 while unknown).
    pub block_size: u32,
    /// The request's block keys.
    pub block_hashes: &'a [u64],
    /// "content" or "engine".
    pub mode: &'a str,
    /// A serialized `BlockHashSpec`; `Some` writes the field even when empty (it is set).
    pub block_hash_spec: Option<&'a [u8]>,
    /// Tokens in the request.
    pub num_tokens: u32,
    /// The model's fingerprint when the server tokenized the request, else empty.
    pub fingerprint: &'a str,
    /// Whether the model's view is catching up.
    pub warming: bool,
    /// The media names `WorkerRow::by_medium` counts are of, in order.
    pub media: &'a [String],
}

/// One `WorkerScore`.
#[derive(Debug, Clone, Copy)]
pub struct WorkerRow<'a> {
    /// The worker's name.
    pub name: &'a str,
    /// Leading blocks held in any medium.
    pub blocks: u32,
    /// Leading blocks held in each medium of [`ScoreFields::media`] (empty when none is known).
    pub by_medium: &'a [u32],
}

/// `ScoreResponse` in wire format: `workers` in the order given (best first), then the other
/// fields; empty fields left out, as proto3 writes them.
pub fn score_response<'a>(
    fields: &ScoreFields<'_>,
    workers: impl IntoIterator<Item = WorkerRow<'a>>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + 10 * fields.block_hashes.len());
    for w in workers {
        put_message(&mut out, WORKERS, |out| {
            put_bytes(out, WORKER, w.name.as_bytes());
            put_uint(out, BLOCKS, u64::from(w.blocks));
            put_uint(
                out,
                TOKENS,
                u64::from(w.blocks) * u64::from(fields.block_size),
            );
            for (medium, &depth) in fields.media.iter().zip(w.by_medium) {
                put_message(out, BLOCKS_BY_MEDIUM, |entry| {
                    put_bytes(entry, MAP_KEY, medium.as_bytes());
                    put_uint(entry, MAP_VALUE, u64::from(depth));
                });
            }
        });
    }
    put_packed_u64(&mut out, BLOCK_HASHES, fields.block_hashes);
    put_uint(&mut out, BLOCK_SIZE, u64::from(fields.block_size));
    put_bytes(&mut out, MODE, fields.mode.as_bytes());
    if let Some(spec) = fields.block_hash_spec {
        put_key(&mut out, BLOCK_HASH_SPEC, LEN);
        put_varint(&mut out, spec.len() as u64);
        out.extend_from_slice(spec);
    }
    put_uint(&mut out, NUM_TOKENS, u64::from(fields.num_tokens));
    put_bytes(&mut out, FINGERPRINT, fields.fingerprint.as_bytes());
    put_uint(&mut out, WARMING, u64::from(fields.warming));
    out
}

/// A packed `repeated uint64` field; left out when empty. Its length is summed first (hashes are
/// 9 or 10 bytes each, so no fixed room fits them well).
fn put_packed_u64(out: &mut Vec<u8>, field: u64, values: &[u64]) {
    if values.is_empty() {
        return;
    }
    let len: usize = values.iter().map(|&v| varint_len(v)).sum();
    put_key(out, field, LEN);
    put_varint(out, len as u64);
    out.reserve(len);
    for &v in values {
        put_varint(out, v);
    }
}
