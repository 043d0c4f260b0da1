//! Exports for [`crate::tokenizer`].

use std::path::Path;
use std::sync::Arc;

use super::buf::{
    free_handle, free_slice, leak_slice, read_cancel_flag, read_handle, read_ids, read_slice,
    read_str, sc_bytes, sc_ids, sc_str, write_handle, write_json,
};
use super::status::sc_error;
use super::{guard, require_out, write_out};
use crate::cancel::Cancel;
use crate::settings::from_json_or_default;
use crate::tokenizer::{EncodeOptions, Tokenizer, TokenizerOptions, TruncationSide};

/// A loaded tokenizer; immutable, shareable across threads. Free with `sc_tokenizer_free`.
pub struct sc_tokenizer {
    // Shared so that handles built on the tokenizer (a renderer) keep it alive on their own.
    inner: Arc<Tokenizer>,
}

impl sc_tokenizer {
    /// A handle owning `tokenizer`.
    pub(crate) fn new(tokenizer: Tokenizer) -> Self {
        sc_tokenizer {
            inner: Arc::new(tokenizer),
        }
    }

    /// The tokenizer inside a handle, for other capability exports (render, decode streams).
    pub(crate) fn tokenizer(&self) -> &Tokenizer {
        &self.inner
    }

    /// A shared reference to the tokenizer, for handles that outlive this one.
    pub(crate) fn shared(&self) -> Arc<Tokenizer> {
        Arc::clone(&self.inner)
    }
}

/// How `sc_tokenizer_encode_batch` encodes.
#[repr(C)]
pub struct sc_encode_options {
    /// Let the post-processor add BOS/EOS.
    pub add_special_tokens: bool,
    /// Fill `offsets`.
    pub return_offsets: bool,
    /// Fill `tokens` and `token_lens`.
    pub return_tokens: bool,
    /// Truncate from the left (keep the end) instead of the right.
    pub truncate_left: bool,
    /// At most this many tokens per text, special tokens included; 0 = no limit.
    pub max_length: u32,
    /// Give up with `SC_ERR_KIND_DEADLINE_EXCEEDED` after this many microseconds; 0 = never.
    pub timeout_us: u64,
    /// The call's cancellation flag (see `sc_cancel_flag` in the README of the C ABI: a `uint32_t`
    /// set to non-zero to stop the call with `SC_ERR_KIND_CANCELLED`); NULL = not cancellable.
    pub cancel: *const u32,
    /// Refuse a text with a run of one character class longer than this many characters
    /// (`SC_ERR_KIND_RESOURCE_EXHAUSTED`); 0 = no limit.
    pub max_word_chars: u64,
}

/// The encodings of a batch, flattened; free with `sc_encodings_free`.
#[repr(C)]
pub struct sc_encodings {
    /// Number of encodings (= texts).
    pub count: usize,
    /// All ids, encoding after encoding.
    pub ids: *mut u32,
    /// Total number of ids.
    pub ids_len: usize,
    /// `count` entries: how many ids each encoding has.
    pub lens: *mut u32,
    /// Two per id ([start, end) character offsets) when asked for, else NULL.
    pub offsets: *mut u32,
    /// Number of offset entries (2 * ids_len or 0).
    pub offsets_len: usize,
    /// All token strings concatenated (UTF-8) when asked for, else NULL.
    pub tokens: *mut u8,
    /// Bytes in `tokens`.
    pub tokens_len: usize,
    /// One per id: byte length of its token string, when asked for, else NULL.
    pub token_lens: *mut u32,
    /// Number of `token_lens` entries (ids_len or 0).
    pub token_lens_len: usize,
    /// `count` entries: 1 when the encoding was truncated.
    pub truncated: *mut u8,
}

/// The decoded texts of a batch, concatenated; free with `sc_texts_free`.
#[repr(C)]
pub struct sc_texts {
    /// Number of texts.
    pub count: usize,
    /// All texts concatenated (UTF-8).
    pub data: *mut u8,
    /// Bytes in `data`.
    pub data_len: usize,
    /// `count` entries: byte length of each text.
    pub lens: *mut usize,
}

/// Loads the tokenizer of a model directory (`tokenizer.json`, or a tiktoken file plus
/// `tokenizer_config.json`). `options_json`: `{"output_size": n}` (the model's output rows, from
/// its `config.json`; ids below it that the tokenizer does not define decode to nothing) or empty.
///
/// # Safety
/// `dir` and `options_json` are borrowed for the call; `out` and `err` must be NULL or valid for
/// writes.
#[no_mangle]
pub unsafe extern "C" fn sc_tokenizer_new(
    dir: sc_str,
    options_json: sc_str,
    out: *mut *mut sc_tokenizer,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller lends `dir` for the call.
        let dir = unsafe { read_str(dir, "dir")? };
        // SAFETY: as above.
        let options = unsafe { read_str(options_json, "options_json")? };
        let options: TokenizerOptions = from_json_or_default(options, "options_json")?;
        let tokenizer = Tokenizer::from_dir(Path::new(dir))?.with_options(&options);
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_handle(out, sc_tokenizer::new(tokenizer)) }
    })
}

/// Frees a tokenizer. NULL is a no-op.
///
/// # Safety
/// `tok` must be NULL or a handle from `sc_tokenizer_new`, not yet freed and not in use.
#[no_mangle]
pub unsafe extern "C" fn sc_tokenizer_free(tok: *mut sc_tokenizer) {
    // SAFETY: the caller passes NULL or a handle it no longer uses.
    unsafe { free_handle(tok) }
}

/// Describes the tokenizer as JSON: `vocab_size`, `output_size` (0 = unknown), `encoder`,
/// `fast_rejection`, `format`, `num_special_tokens_to_add`, `added_tokens`
/// (`[{id, content, special}]`).
///
/// # Safety
/// `tok` must be a live handle; `out` and `err` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn sc_tokenizer_info(
    tok: *const sc_tokenizer,
    out: *mut sc_bytes,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes a live handle.
        let t = unsafe { read_handle(tok, "tokenizer")? }.tokenizer();
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_json(out, &t.info()) }
    })
}

/// Encodes `count` texts.
///
/// # Safety
/// `tok` must be a live handle; `texts` must be NULL (count 0) or `count` readable `sc_str`s, each
/// borrowed for the call; `opts` must be readable; `out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_tokenizer_encode_batch(
    tok: *const sc_tokenizer,
    texts: *const sc_str,
    count: usize,
    opts: *const sc_encode_options,
    out: *mut *mut sc_encodings,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(out, "out")?;
        // SAFETY: the caller passes a live handle and readable arguments for the call.
        let t = unsafe { read_handle(tok, "tokenizer")? }.tokenizer();
        // SAFETY: as above.
        let raw_opts = unsafe { read_handle(opts, "options")? };
        // SAFETY: the caller lends the flag for the call.
        let flag = unsafe { read_cancel_flag(raw_opts.cancel)? };
        // SAFETY: as above.
        let items = unsafe { read_slice(texts, count, "texts")? };
        let texts: Vec<&str> = items
            .iter()
            .enumerate()
            // SAFETY: each `sc_str` is borrowed for the call.
            .map(|(i, s)| unsafe { read_str(*s, &format!("texts[{i}]")) })
            .collect::<Result<_, _>>()?;
        let options = EncodeOptions {
            add_special_tokens: raw_opts.add_special_tokens,
            return_offsets: raw_opts.return_offsets,
            return_tokens: raw_opts.return_tokens,
            max_length: (raw_opts.max_length > 0).then_some(raw_opts.max_length as usize),
            truncation_side: if raw_opts.truncate_left {
                TruncationSide::Left
            } else {
                TruncationSide::Right
            },
            cancel: Cancel::after_micros(raw_opts.timeout_us, flag),
            max_word_chars: (raw_opts.max_word_chars > 0)
                .then_some(raw_opts.max_word_chars as usize),
        };
        let encodings = t.encode_batch(&texts, &options)?;
        let result = flatten_encodings(encodings, &options);
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_out(out, Box::into_raw(Box::new(result)), "out") }
    })
}

fn flatten_encodings(
    encodings: Vec<crate::tokenizer::Encoded>,
    opts: &EncodeOptions,
) -> sc_encodings {
    let total: usize = encodings.iter().map(|e| e.ids.len()).sum();
    let mut ids = Vec::with_capacity(total);
    let mut lens = Vec::with_capacity(encodings.len());
    let mut truncated = Vec::with_capacity(encodings.len());
    let mut offsets = Vec::with_capacity(if opts.return_offsets { 2 * total } else { 0 });
    let mut tokens = Vec::new();
    let mut token_lens = Vec::with_capacity(if opts.return_tokens { total } else { 0 });
    for e in &encodings {
        ids.extend_from_slice(&e.ids);
        lens.push(e.ids.len() as u32);
        truncated.push(u8::from(e.truncated));
        offsets.extend_from_slice(&e.offsets);
        for token in &e.tokens {
            tokens.extend_from_slice(token.as_bytes());
            token_lens.push(token.len() as u32);
        }
    }
    let count = encodings.len();
    let (ids, ids_len) = leak_slice(ids);
    let (lens, _) = leak_slice(lens);
    let (truncated, _) = leak_slice(truncated);
    let (offsets, offsets_len) = leak_slice(offsets);
    let (tokens, tokens_len) = leak_slice(tokens);
    let (token_lens, token_lens_len) = leak_slice(token_lens);
    sc_encodings {
        count,
        ids,
        ids_len,
        lens,
        offsets,
        offsets_len,
        tokens,
        tokens_len,
        token_lens,
        token_lens_len,
        truncated,
    }
}

/// Frees the result of `sc_tokenizer_encode_batch`. NULL is a no-op.
///
/// # Safety
/// `enc` must be NULL or a result of `sc_tokenizer_encode_batch`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn sc_encodings_free(enc: *mut sc_encodings) {
    if enc.is_null() {
        return;
    }
    // SAFETY: made by Box::into_raw in `sc_tokenizer_encode_batch`; every array came from
    // `leak_slice` with the length recorded next to it.
    unsafe {
        let e = Box::from_raw(enc);
        free_slice(e.ids, e.ids_len);
        free_slice(e.lens, e.count);
        free_slice(e.truncated, e.count);
        free_slice(e.offsets, e.offsets_len);
        free_slice(e.tokens, e.tokens_len);
        free_slice(e.token_lens, e.token_lens_len);
    }
}

/// Decodes `count` id sequences as Hugging Face `decode` does. An id outside the vocabulary fails
/// with `SC_ERR_KIND_INVALID_ARGUMENT` naming the sequence and position. `cancel` is the call's
/// cancellation flag (as in `sc_encode_options`) or NULL.
///
/// # Safety
/// `tok` must be a live handle; `seqs` NULL (count 0) or `count` readable `sc_ids`, each borrowed
/// for the call; `cancel` NULL or an aligned `uint32_t` valid for the call; `out` and `err` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_tokenizer_decode_batch(
    tok: *const sc_tokenizer,
    seqs: *const sc_ids,
    count: usize,
    skip_special_tokens: bool,
    timeout_us: u64,
    cancel: *const u32,
    out: *mut *mut sc_texts,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(out, "out")?;
        // SAFETY: the caller passes a live handle and readable arguments for the call.
        let t = unsafe { read_handle(tok, "tokenizer")? }.tokenizer();
        // SAFETY: as above.
        let items = unsafe { read_slice(seqs, count, "sequences")? };
        let seqs: Vec<&[u32]> = items
            .iter()
            .enumerate()
            // SAFETY: each `sc_ids` is borrowed for the call.
            .map(|(i, s)| unsafe { read_ids(*s, &format!("sequences[{i}]")) })
            .collect::<Result<_, _>>()?;
        // SAFETY: the caller lends the flag for the call.
        let flag = unsafe { read_cancel_flag(cancel)? };
        let texts = t.decode_batch(
            &seqs,
            skip_special_tokens,
            &Cancel::after_micros(timeout_us, flag),
        )?;
        let mut data = Vec::with_capacity(texts.iter().map(String::len).sum());
        let mut lens = Vec::with_capacity(texts.len());
        for text in &texts {
            data.extend_from_slice(text.as_bytes());
            lens.push(text.len());
        }
        let count = texts.len();
        let (data, data_len) = leak_slice(data);
        let (lens, _) = leak_slice(lens);
        let result = Box::into_raw(Box::new(sc_texts {
            count,
            data,
            data_len,
            lens,
        }));
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_out(out, result, "out") }
    })
}

/// Frees the result of `sc_tokenizer_decode_batch`. NULL is a no-op.
///
/// # Safety
/// `texts` must be NULL or a result of `sc_tokenizer_decode_batch`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn sc_texts_free(texts: *mut sc_texts) {
    if texts.is_null() {
        return;
    }
    // SAFETY: made by Box::into_raw in `sc_tokenizer_decode_batch`, arrays by `leak_slice`.
    unsafe {
        let t = Box::from_raw(texts);
        free_slice(t.data, t.data_len);
        free_slice(t.lens, t.count);
    }
}
