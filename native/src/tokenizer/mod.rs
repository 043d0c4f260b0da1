//! Tokenization: text to token ids and back, identical to Hugging Face `tokenizers`.
//!
//! A [`Tokenizer`] always holds a `tokenizers` crate tokenizer, which is the reference: it computes
//! offsets and token strings, decodes, and encodes whenever the fast encoder is not proven exact.
//! Where the `fastokens` encoder loads the same `tokenizer.json` and agrees with `tokenizers` on a
//! probe corpus at load time (see [`fast`]), id-only encodes go through it instead. The choice is
//! made once per model and reported by [`Tokenizer::encoder`].
//!
//! A `Tokenizer` is immutable after loading, `Send + Sync`, and shared by every thread.

mod chunks;
mod fast;
mod load;
mod pieces;
mod segments;
mod tiktoken;
mod words;

use rayon::prelude::*;
use tokenizers::TruncationDirection;

use crate::cancel::Cancel;
use crate::error::{Error, ErrorKind, Result};
use chunks::Chunker;

pub use load::TokenizerFormat;
pub(crate) use pieces::PieceKind;
pub use pieces::{PieceTable, Pieces};
pub use segments::{CacheStats, SegmentCache};

/// Which end of a too-long encoding is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TruncationSide {
    /// Keep the first tokens.
    #[default]
    Right,
    /// Keep the last tokens.
    Left,
}

/// How to encode one text.
#[derive(Debug, Clone, Default)]
pub struct EncodeOptions<'a> {
    /// Let the post-processor add its special tokens (BOS/EOS), as `encode(add_special_tokens=True)`.
    pub add_special_tokens: bool,
    /// Compute [start, end) character offsets.
    pub return_offsets: bool,
    /// Compute token strings.
    pub return_tokens: bool,
    /// At most this many tokens, special tokens included.
    pub max_length: Option<usize>,
    /// Which end truncation cuts.
    pub truncation_side: TruncationSide,
    /// When to stop early (deadline, cancellation): checked before each text and each chunk of a
    /// long text.
    pub cancel: Cancel<'a>,
    /// Refuse a text with a run of one character class longer than this (see [`words`]).
    pub max_word_chars: Option<usize>,
}

/// The encoding of one text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Encoded {
    /// Token ids.
    pub ids: Vec<u32>,
    /// Flattened [start, end) character offsets (two per token) when asked for, else empty.
    pub offsets: Vec<u32>,
    /// Token strings when asked for, else empty.
    pub tokens: Vec<String>,
    /// Whether `max_length` cut tokens off.
    pub truncated: bool,
}

/// An added (or special) token of the vocabulary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedToken {
    /// Token id.
    pub id: u32,
    /// Token text.
    pub content: String,
    /// Whether the token is special (dropped by `skip_special_tokens`).
    pub special: bool,
}

/// Why an id is refused: `id N is not in the vocabulary (size V)`, and when the model's output
/// size is known, that the id is not below it either. Callers prefix the field.
pub(crate) fn unknown_id(id: u32, vocab_size: usize, output_size: usize) -> String {
    if output_size == 0 {
        format!("id {id} is not in the vocabulary (size {vocab_size})")
    } else {
        format!(
            "id {id} is not in the vocabulary (size {vocab_size}) nor below the model's output size \
             ({output_size})"
        )
    }
}

/// A loaded tokenizer (see the module docs).
pub struct Tokenizer {
    hf: tokenizers::Tokenizer,
    fast: Option<fastokens::Tokenizer>,
    /// Why `fast` is `None`, for `ListModels` and logs.
    fast_rejection: Option<String>,
    format: TokenizerFormat,
    /// Ids the post-processor puts before and after a single sequence when adding special tokens.
    special_prefix: Vec<u32>,
    special_suffix: Vec<u32>,
    /// `known_ids[id]` is true when `id` has a vocabulary entry (ids can have holes).
    known_ids: Vec<bool>,
    added_tokens: Vec<AddedToken>,
    /// Precomputed decoding for byte-level and SentencePiece vocabularies (see [`pieces`]).
    pieces: Option<Pieces>,
    /// Where prompts may be cut for the segment cache.
    boundaries: segments::Boundaries,
    /// Where long texts may be cut so that an encode can stop between pieces.
    chunker: Chunker,
    /// Rows of the model's output layer (its `config.json` `vocab_size`), 0 when unknown. Models
    /// pad it past the tokenizer's ids (Qwen: 151,936 rows for 151,669 ids) and an engine can
    /// sample an id in the gap; see [`Tokenizer::accepts_id`].
    output_size: usize,
}

/// How a tokenizer is loaded beyond its files (JSON from the server; empty = the defaults).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TokenizerOptions {
    /// The model's output size (see [`Tokenizer::output_size`]); 0 = unknown.
    pub output_size: u64,
}

/// Encoding cost per byte relative to the fast encoder on a byte-level vocabulary (see
/// [`Tokenizer::encode_cost`]).
const FAST_SENTENCEPIECE_ENCODE_COST: usize = 4;
const REFERENCE_ENCODE_COST: usize = 8;

/// Batches whose total text is smaller than this are encoded on the calling thread: splitting them
/// over threads costs more than it saves.
const PARALLEL_BATCH_MIN_BYTES: usize = 32 * 1024;

/// Texts longer than this are encoded in pieces of about this size where the tokenizer allows
/// exact cuts: the most uninterruptible work one piece costs is tens of milliseconds on the slowest
/// encoder path (`tokenizers` with offsets, about 1.4 us per character).
pub const CHUNK_BYTES: usize = 48 * 1024;

/// Runs `one` over `items` in parallel and answers what the sequential loop would: every result,
/// or the error of the first failing item in order. (rayon's `collect` into a `Result` keeps
/// whichever error a thread met first, so a batch with two bad texts would name either.) Items
/// after a failed one are skipped; those before it still run, as one of them may fail first.
fn parallel_first_error<S: Sync, T: Send>(
    items: &[S],
    one: impl Fn((usize, &S)) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let first_failed = std::sync::atomic::AtomicUsize::new(usize::MAX);
    let results: Vec<Option<Result<T>>> = items
        .par_iter()
        .enumerate()
        .map(|(i, item)| {
            if i > first_failed.load(std::sync::atomic::Ordering::Relaxed) {
                return None;
            }
            let result = one((i, item));
            if result.is_err() {
                first_failed.fetch_min(i, std::sync::atomic::Ordering::Relaxed);
            }
            Some(result)
        })
        .collect();
    // Every item before the first failure ran, so the first `None` comes after an error.
    results.into_iter().map_while(|r| r).collect()
}

impl Tokenizer {
    /// Loads the tokenizer of a Hugging Face model directory: `tokenizer.json`, or a tiktoken file
    /// (`*.tiktoken`, `tiktoken.model`) with its special tokens from `tokenizer_config.json`.
    pub fn from_dir(dir: &std::path::Path) -> Result<Self> {
        let (json, format) = load::tokenizer_json_from_dir(dir)?;
        Self::from_json_text(&json, format)
    }

    /// Builds a tokenizer from `tokenizer.json` text.
    ///
    /// The `tokenizers` and `fastokens` parses run in parallel, and the fast encoder's probe runs on
    /// a short-lived thread: `tokenizers`' BPE keeps a per-thread cache keyed by instance that is
    /// never removed when the instance is dropped, so probing on a thread that then exits keeps
    /// repeated load/free cycles from accumulating dead caches.
    pub fn from_json_text(json: &str, format: TokenizerFormat) -> Result<Self> {
        let (reference, fast) = std::thread::scope(|scope| {
            let fast_load = scope.spawn(|| fast::load(json));
            let reference = Self::reference_only(json, format);
            let fast = fast_load
                .join()
                .unwrap_or_else(|_| Err("fastokens panicked while loading".into()));
            (reference, fast)
        });
        let mut tokenizer = reference?;
        tokenizer.chunker = tokenizer.load_chunker(json);
        let verdict = fast.and_then(|fast| {
            std::thread::scope(|scope| scope.spawn(|| fast::verify(&fast, &tokenizer)).join())
                .unwrap_or_else(|_| Err("fastokens panicked on the probe".into()))
                .map(|()| fast)
        });
        match verdict {
            Ok(fast) => tokenizer.fast = Some(fast),
            Err(reason) => tokenizer.fast_rejection = Some(reason),
        }
        Ok(tokenizer)
    }

    /// The `tokenizers` crate tokenizer alone (no fast encoder).
    fn reference_only(json: &str, format: TokenizerFormat) -> Result<Self> {
        let mut hf = tokenizers::Tokenizer::from_bytes(json.as_bytes()).map_err(|e| {
            Error::failed_precondition(format!("tokenizer.json could not be loaded: {e}"))
        })?;
        // transformers (and so vLLM) never applies the truncation or padding saved in
        // tokenizer.json; requests say what they want.
        hf.with_truncation(None)
            .map_err(|e| Error::internal(format!("clearing truncation: {e}")))?;
        hf.with_padding(None);

        let (special_prefix, special_suffix) = special_affixes(&hf)?;
        let known_ids = known_id_table(&hf);
        let mut added_tokens: Vec<AddedToken> = hf
            .get_added_tokens_decoder()
            .into_iter()
            .map(|(id, t)| AddedToken {
                id,
                content: t.content,
                special: t.special,
            })
            .collect();
        added_tokens.sort_by_key(|t| t.id);
        let pieces = Pieces::build(&hf, &known_ids, &added_tokens);
        let boundaries = segments::Boundaries::new(&hf);
        Ok(Tokenizer {
            pieces,
            boundaries,
            chunker: Chunker::disabled("not probed yet"),
            hf,
            fast: None,
            fast_rejection: None,
            format,
            special_prefix,
            special_suffix,
            known_ids,
            added_tokens,
            output_size: 0,
        })
    }

    /// Applies `options` to a loaded tokenizer.
    pub fn with_options(mut self, options: &TokenizerOptions) -> Self {
        self.output_size = usize::try_from(options.output_size).unwrap_or(usize::MAX);
        self
    }

    /// The encoder id-only encodes use: `"fastokens"` or `"tokenizers"`.
    pub fn encoder(&self) -> &'static str {
        if self.fast.is_some() {
            "fastokens"
        } else {
            "tokenizers"
        }
    }

    /// Why the fast encoder is not used, if it is not.
    pub fn fast_rejection(&self) -> Option<&str> {
        self.fast_rejection.as_deref()
    }

    /// Where the tokenizer came from.
    pub fn format(&self) -> TokenizerFormat {
        self.format
    }

    /// Vocabulary size including added tokens (one more than the largest id).
    pub fn vocab_size(&self) -> usize {
        self.known_ids.len()
    }

    /// Rows of the model's output layer, 0 when unknown (see [`Tokenizer::accepts_id`]).
    pub fn output_size(&self) -> usize {
        self.output_size
    }

    /// The added tokens, by id.
    pub fn added_tokens(&self) -> &[AddedToken] {
        &self.added_tokens
    }

    /// The id of a token string, if the vocabulary has it.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.hf.token_to_id(token)
    }

    /// The vocabulary string of an id, if the vocabulary has it.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.hf.id_to_token(id)
    }

    /// The underlying `tokenizers` tokenizer (decoding state machines build on it).
    pub fn hf(&self) -> &tokenizers::Tokenizer {
        &self.hf
    }

    /// The vocabulary's decode table, when its decoder is one the tables replay exactly.
    pub fn decode_pieces(&self) -> Option<&Pieces> {
        self.pieces.as_ref()
    }

    /// `flags[id]` is true when `decode(skip_special_tokens=true)` drops `id`.
    pub fn special_flags(&self) -> Vec<bool> {
        pieces::special_flags(&self.hf, self.known_ids.len(), &self.added_tokens)
    }

    /// How many tokens the post-processor adds to one sequence when asked to.
    pub fn num_special_tokens_to_add(&self) -> usize {
        self.special_prefix.len() + self.special_suffix.len()
    }

    /// What the server reports about the tokenizer (JSON): `vocab_size`, `output_size`, `encoder`,
    /// `fast_rejection`, `format`, `num_special_tokens_to_add`, `added_tokens`
    /// (`[{id, content, special}]`).
    pub fn info(&self) -> serde_json::Value {
        let added: Vec<_> = self
            .added_tokens()
            .iter()
            .map(|a| serde_json::json!({"id": a.id, "content": a.content, "special": a.special}))
            .collect();
        serde_json::json!({
            "vocab_size": self.vocab_size(),
            "output_size": self.output_size(),
            "encoder": self.encoder(),
            "fast_rejection": self.fast_rejection(),
            "format": self.format().name(),
            "num_special_tokens_to_add": self.num_special_tokens_to_add(),
            "added_tokens": added,
        })
    }

    /// Why long texts are encoded whole (no exact cuts), if they are.
    pub fn chunking_rejection(&self) -> Option<&str> {
        self.chunker.unsupported.as_deref()
    }

    /// The chunker for `json`, kept only when cut encodings equal whole ones on a probe corpus.
    fn load_chunker(&self, json: &str) -> Chunker {
        let value: serde_json::Value = match serde_json::from_str(json) {
            Ok(v) => v,
            Err(e) => return Chunker::disabled(format!("json: {e}")),
        };
        let added: Vec<String> = self
            .added_tokens
            .iter()
            .map(|t| t.content.clone())
            .collect();
        let chunker = Chunker::for_tokenizer(&value, &added);
        if chunker.unsupported.is_some() {
            return chunker;
        }
        // On a short-lived thread, as the fast encoder's probe (see `from_json_text`).
        let verdict = std::thread::scope(|scope| {
            scope
                .spawn(|| fast::probe_chunking(self, &chunker))
                .join()
                .unwrap_or_else(|_| Err("tokenizers panicked on the chunking probe".into()))
        });
        match verdict {
            Ok(()) => chunker,
            Err(why) => Chunker::disabled(why),
        }
    }

    /// What encoding `bytes` of text costs, in the unit of the server's inline bound (bytes on
    /// the fast encoder of a byte-level vocabulary). Measured on 16 KB of fresh words, median of
    /// five (2026-12-03): the fast encoder 0.63-0.66 ms on Qwen3 and Llama 3, 1.9-2.7 ms on Phi-3
    /// and Gemma 3; the `tokenizers` path (offsets, token strings, or a model the fast encoder is
    /// not proven on) 3.4-5.9 ms on every model.
    pub fn encode_cost(&self, bytes: usize, return_offsets: bool, return_tokens: bool) -> usize {
        let factor = match (&self.fast, &self.pieces) {
            (Some(_), _) if return_offsets || return_tokens => REFERENCE_ENCODE_COST,
            (Some(_), Some(Pieces::ByteLevel(_))) => 1,
            (Some(_), _) => FAST_SENTENCEPIECE_ENCODE_COST,
            (None, _) => REFERENCE_ENCODE_COST,
        };
        bytes.saturating_mul(factor)
    }

    /// Encodes one text.
    pub fn encode(&self, text: &str, opts: &EncodeOptions) -> Result<Encoded> {
        if let Some(limit) = opts.max_word_chars {
            words::check_word_lengths(text, limit)?;
        }
        let n_added = if opts.add_special_tokens {
            self.num_special_tokens_to_add()
        } else {
            0
        };
        let limit = match opts.max_length {
            Some(max) if max < n_added => {
                return Err(Error::invalid_argument(format!(
                    "max_length: {max} is smaller than the {n_added} special tokens the \
                     tokenizer adds; raise it or set add_special_tokens = false"
                )))
            }
            Some(max) => Some(max - n_added),
            None => None,
        };
        match &self.fast {
            Some(fast) if !opts.return_offsets && !opts.return_tokens => {
                self.encode_fast(fast, text, opts, limit)
            }
            _ => self.encode_reference(text, opts, limit),
        }
    }

    fn encode_fast(
        &self,
        fast: &fastokens::Tokenizer,
        text: &str,
        opts: &EncodeOptions,
        limit: Option<usize>,
    ) -> Result<Encoded> {
        let mut raw = self.encode_pieces(text, &opts.cancel, |piece| {
            fast.encode_with_special_tokens(piece, false)
                .map_err(|e| Error::internal(format!("fast encoder failed: {e}")))
        })?;
        let truncated = truncate_ids(&mut raw, limit, opts.truncation_side);
        let ids = if opts.add_special_tokens && self.num_special_tokens_to_add() > 0 {
            let mut ids = Vec::with_capacity(raw.len() + self.num_special_tokens_to_add());
            ids.extend_from_slice(&self.special_prefix);
            ids.extend_from_slice(&raw);
            ids.extend_from_slice(&self.special_suffix);
            ids
        } else {
            raw
        };
        Ok(Encoded {
            ids,
            truncated,
            ..Encoded::default()
        })
    }

    /// The `tokenizers` crate path: exact by construction, with offsets and token strings.
    fn encode_reference(
        &self,
        text: &str,
        opts: &EncodeOptions,
        limit: Option<usize>,
    ) -> Result<Encoded> {
        let mut enc = self.encode_reference_pieces(text, &opts.cancel)?;
        let mut truncated = false;
        if let Some(limit) = limit {
            if enc.len() > limit {
                let direction = match opts.truncation_side {
                    TruncationSide::Right => TruncationDirection::Right,
                    TruncationSide::Left => TruncationDirection::Left,
                };
                enc.truncate(limit, 0, direction);
                truncated = true;
            }
        }
        if opts.add_special_tokens {
            enc = self
                .hf
                .post_process(enc, None, true)
                .map_err(|e| Error::internal(format!("post-processor failed: {e}")))?;
        }
        let mut out = Encoded {
            ids: enc.get_ids().to_vec(),
            truncated,
            ..Encoded::default()
        };
        if opts.return_offsets {
            out.offsets = enc
                .get_offsets()
                .iter()
                .flat_map(|&(start, end)| [start as u32, end as u32])
                .collect();
        }
        if opts.return_tokens {
            out.tokens = enc.get_tokens().to_vec();
        }
        Ok(out)
    }

    /// The model ids of `text` (no special tokens, no truncation) through `encode_piece`, one
    /// exact piece at a time (see [`chunks`]), checking `cancel` before each piece.
    fn encode_pieces(
        &self,
        text: &str,
        cancel: &Cancel<'_>,
        encode_piece: impl Fn(&str) -> Result<Vec<u32>> + Sync,
    ) -> Result<Vec<u32>> {
        let pieces = self.pieces(text);
        if pieces.len() == 1 {
            cancel.check()?;
            return encode_piece(text);
        }
        let parts: Vec<Vec<u32>> = pieces
            .par_iter()
            .map(|piece| {
                cancel.check()?;
                encode_piece(piece)
            })
            .collect::<Result<_>>()?;
        Ok(parts.concat())
    }

    /// `text` split at the chunker's cuts (one piece when it has none).
    fn pieces<'t>(&self, text: &'t str) -> Vec<&'t str> {
        self.chunker.pieces(text, CHUNK_BYTES)
    }

    /// `tokenizers`' encoding of `text` with character offsets, computed piece by piece (see
    /// [`chunks`]) and joined with the offsets of later pieces moved by the characters before them.
    fn encode_reference_pieces(
        &self,
        text: &str,
        cancel: &Cancel<'_>,
    ) -> Result<tokenizers::Encoding> {
        let encode = |piece: &str| {
            self.hf
                .encode_char_offsets(piece, false)
                .map_err(|e| Error::internal(format!("encoder failed: {e}")))
        };
        let pieces = self.pieces(text);
        if pieces.len() == 1 {
            cancel.check()?;
            return encode(text);
        }
        let parts: Vec<(tokenizers::Encoding, usize)> = pieces
            .par_iter()
            .map(|piece| {
                cancel.check()?;
                Ok((encode(piece)?, piece.chars().count()))
            })
            .collect::<Result<_>>()?;
        Ok(join_encodings(parts, self.chunker.drops_cut_space))
    }

    /// Encodes one text to ids exactly as [`Tokenizer::encode`] does (no truncation), reusing the ids
    /// of segments `cache` has seen; see [`segments`] for why the result is identical.
    pub fn encode_with_cache(
        &self,
        text: &str,
        add_special_tokens: bool,
        cache: &SegmentCache,
        cancel: &Cancel<'_>,
        max_word_chars: Option<usize>,
    ) -> Result<(Vec<u32>, CacheStats)> {
        let plain = EncodeOptions {
            cancel: *cancel,
            max_word_chars,
            ..EncodeOptions::default()
        };
        let mut stats = CacheStats::default();
        let mut ids = Vec::with_capacity(text.len() / 3 + 8);
        if add_special_tokens {
            ids.extend_from_slice(&self.special_prefix);
        }
        let mut start = 0;
        let cuts = self.boundaries.cuts(text);
        for end in cuts.into_iter().chain(std::iter::once(text.len())) {
            let segment = &text[start..end];
            start = end;
            if segment.is_empty() {
                continue;
            }
            let hit = cache.get_into(segment, &mut ids);
            if !hit {
                cancel.check()?;
                let encoded = self.encode(segment, &plain)?;
                cache.insert(segment, &encoded.ids);
                ids.extend_from_slice(&encoded.ids);
            }
            stats.add(hit, segment.len());
        }
        if add_special_tokens {
            ids.extend_from_slice(&self.special_suffix);
        }
        Ok((ids, stats))
    }

    /// Encodes a batch; large batches are spread over threads. An error names the text's index.
    pub fn encode_batch<S: AsRef<str> + Sync>(
        &self,
        texts: &[S],
        opts: &EncodeOptions,
    ) -> Result<Vec<Encoded>> {
        let one = |(i, text): (usize, &S)| -> Result<Encoded> {
            opts.cancel.check()?;
            self.encode(text.as_ref(), opts).map_err(|e| {
                // max_length errors are about the request, and stopping is about the call.
                let whole_call =
                    matches!(e.kind(), ErrorKind::Cancelled | ErrorKind::DeadlineExceeded);
                if whole_call || e.message().starts_with("max_length") {
                    e
                } else {
                    e.context(format_args!("texts[{i}]"))
                }
            })
        };
        let total: usize = texts.iter().map(|t| t.as_ref().len()).sum();
        if texts.len() > 1 && total >= PARALLEL_BATCH_MIN_BYTES {
            parallel_first_error(texts, one)
        } else {
            texts.iter().enumerate().map(one).collect()
        }
    }

    /// Checks that every id is one [`Tokenizer::accepts_id`] takes; the error names the position.
    pub fn check_ids(&self, ids: &[u32]) -> Result<()> {
        match ids.iter().position(|&id| !self.accepts_id(id)) {
            None => Ok(()),
            Some(pos) => Err(Error::invalid_argument(format!(
                "token_ids[{pos}]: {}",
                unknown_id(ids[pos], self.vocab_size(), self.output_size)
            ))),
        }
    }

    /// Whether `id` has a vocabulary entry.
    pub fn is_known_id(&self, id: u32) -> bool {
        self.known_ids.get(id as usize).copied().unwrap_or(false)
    }

    /// Whether `id` may be decoded: a vocabulary id, or an id the model can output that the
    /// tokenizer does not define (below [`Tokenizer::output_size`]), which decodes to nothing as
    /// Hugging Face `decode` drops ids it has no entry for.
    pub fn accepts_id(&self, id: u32) -> bool {
        self.is_known_id(id) || (id as usize) < self.output_size
    }

    /// Decodes ids to text as Hugging Face `decode` does. Ids [`Tokenizer::accepts_id`] refuses
    /// are an error.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.decode_cancellable(ids, skip_special_tokens, &Cancel::default())
    }

    /// [`Tokenizer::decode`], checking `cancel` every few ten thousand ids where the decoder
    /// has a table ([`Pieces`]); other decoders run whole.
    pub fn decode_cancellable(
        &self,
        ids: &[u32],
        skip_special_tokens: bool,
        cancel: &Cancel<'_>,
    ) -> Result<String> {
        self.check_ids(ids)?;
        // `decode` drops ids without an entry before its decoder runs (so one does not end a
        // byte-fallback run); the tables index by id, so they never see one.
        let defined: std::borrow::Cow<'_, [u32]> = if ids.iter().all(|&id| self.is_known_id(id)) {
            ids.into()
        } else {
            ids.iter()
                .copied()
                .filter(|&id| self.is_known_id(id))
                .collect()
        };
        if let Some(pieces) = &self.pieces {
            return pieces.decode(&defined, skip_special_tokens, cancel);
        }
        cancel.check()?;
        self.hf
            .decode(&defined, skip_special_tokens)
            .map_err(|e| Error::internal(format!("decoder failed: {e}")))
    }

    /// Decodes a batch; an error names the sequence and position.
    pub fn decode_batch<S: AsRef<[u32]> + Sync>(
        &self,
        seqs: &[S],
        skip_special_tokens: bool,
        cancel: &Cancel<'_>,
    ) -> Result<Vec<String>> {
        let one = |(i, ids): (usize, &S)| -> Result<String> {
            cancel.check()?;
            self.decode_cancellable(ids.as_ref(), skip_special_tokens, cancel)
                .map_err(|e| match e.kind() {
                    ErrorKind::Cancelled | ErrorKind::DeadlineExceeded => e,
                    _ => e.context(format_args!("sequences[{i}]")),
                })
        };
        let total: usize = seqs.iter().map(|s| s.as_ref().len()).sum();
        if seqs.len() > 1 && total >= PARALLEL_BATCH_MIN_BYTES / 4 {
            parallel_first_error(seqs, one)
        } else {
            seqs.iter().enumerate().map(one).collect()
        }
    }
}

/// One encoding from the encodings of consecutive pieces of a text, each with its length in
/// characters: ids, tokens and attention in order, offsets moved by the characters before. With
/// `drops_cut_space`, a space between pieces was left out of the later one (see [`chunks`]).
fn join_encodings(
    parts: Vec<(tokenizers::Encoding, usize)>,
    drops_cut_space: bool,
) -> tokenizers::Encoding {
    let total: usize = parts.iter().map(|(e, _)| e.len()).sum();
    let mut ids = Vec::with_capacity(total);
    let mut tokens = Vec::with_capacity(total);
    let mut offsets = Vec::with_capacity(total);
    let mut shift = 0;
    for (i, (enc, chars)) in parts.iter().enumerate() {
        let dropped_space = drops_cut_space && i > 0;
        // The space dropped before the piece counts among the characters before it.
        shift += usize::from(dropped_space);
        let first = offsets.len();
        ids.extend_from_slice(enc.get_ids());
        tokens.extend_from_slice(enc.get_tokens());
        offsets.extend(
            enc.get_offsets()
                .iter()
                .map(|&(s, e)| (s + shift, e + shift)),
        );
        if dropped_space && first < offsets.len() {
            // The `▁` prepended to the piece stands for the space before it, where the whole
            // text's encoding puts the first token's start (and its end, when it is that `▁`).
            let space = shift - 1;
            let end = if tokens[first] == "\u{2581}" {
                space + 1
            } else {
                offsets[first].1
            };
            offsets[first] = (space, end);
        }
        shift += chars;
    }
    tokenizers::Encoding::new(
        ids,
        vec![0; total],
        tokens,
        vec![None; total],
        offsets,
        vec![0; total],
        vec![1; total],
        Vec::new(),
        Default::default(),
    )
}

/// Cuts `ids` to `limit` from `side`; returns whether anything was cut.
fn truncate_ids(ids: &mut Vec<u32>, limit: Option<usize>, side: TruncationSide) -> bool {
    match limit {
        Some(limit) if ids.len() > limit => {
            match side {
                TruncationSide::Right => ids.truncate(limit),
                TruncationSide::Left => {
                    ids.drain(..ids.len() - limit);
                }
            }
            true
        }
        _ => false,
    }
}

/// Finds what the post-processor adds around a single sequence, by post-processing a one-token
/// encoding with a sentinel id no vocabulary uses and seeing where the sentinel lands.
fn special_affixes(hf: &tokenizers::Tokenizer) -> Result<(Vec<u32>, Vec<u32>)> {
    const SENTINEL: u32 = u32::MAX;
    let probe = tokenizers::Encoding::new(
        vec![SENTINEL],
        vec![0],
        vec![String::new()],
        vec![None],
        vec![(0, 0)],
        vec![0],
        vec![1],
        vec![],
        Default::default(),
    );
    let processed = hf
        .post_process(probe, None, true)
        .map_err(|e| Error::failed_precondition(format!("post-processor failed: {e}")))?;
    let ids = processed.get_ids();
    let positions: Vec<usize> = ids
        .iter()
        .enumerate()
        .filter(|(_, &id)| id == SENTINEL)
        .map(|(i, _)| i)
        .collect();
    match positions.as_slice() {
        [pos] => Ok((ids[..*pos].to_vec(), ids[pos + 1..].to_vec())),
        _ => Err(Error::failed_precondition(
            "the post-processor does not wrap a single sequence in fixed special tokens",
        )),
    }
}

fn known_id_table(hf: &tokenizers::Tokenizer) -> Vec<bool> {
    let vocab = hf.get_vocab(true);
    let size = vocab
        .values()
        .copied()
        .max()
        .map(|m| m as usize + 1)
        .unwrap_or(0);
    let mut known = vec![false; size];
    for id in vocab.into_values() {
        known[id as usize] = true;
    }
    known
}

#[cfg(test)]
pub(crate) mod tests;
