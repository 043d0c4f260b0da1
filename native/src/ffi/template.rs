//! Exports for [`crate::template`]: a renderer per model, and Render (chat template + tokenization)
//! in one call.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::json;

use super::buf::{
    free_handle, free_slice, leak_slice, read_handle, read_str, sc_bytes, sc_str, write_handle,
    write_json,
};
use super::status::sc_error;
use super::tokenizer::sc_tokenizer;
use super::{guard, require_out, write_out};
use crate::error::{Error, Result};
use crate::template::{ChatTemplates, Clock, Limits, RenderRequest};
use crate::tokenizer::{CacheStats, EncodeOptions, SegmentCache, Tokenizer};

/// A model's chat templates bound to its tokenizer, with the multi-turn segment cache; immutable
/// apart from its caches and shareable across threads. Free with `sc_renderer_free`.
pub struct sc_renderer {
    templates: ChatTemplates,
    tokenizer: Arc<Tokenizer>,
    cache: Option<SegmentCache>,
}

/// The renderer configuration `sc_renderer_new` reads (JSON).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RendererConfig {
    /// `[name, source]` pairs, in the model's order.
    #[serde(default)]
    templates: Vec<(String, String)>,
    /// Template variables from tokenizer_config.json (`bos_token`, ...), as `[name, value]` pairs.
    #[serde(default)]
    variables: Vec<(String, String)>,
    fuel: Option<u64>,
    recursion_limit: Option<usize>,
    max_output_bytes: Option<usize>,
    /// Seconds since the epoch `strftime_now` reports instead of the current time (tests).
    fixed_time: Option<i64>,
    /// Budget of the multi-turn segment cache in bytes; 0 disables it.
    #[serde(default)]
    cache_bytes: usize,
}

/// One Render request. All strings are borrowed for the call.
#[repr(C)]
pub struct sc_render_request {
    /// JSON array of OpenAI chat messages.
    pub messages_json: sc_str,
    /// JSON array of tools; empty for none.
    pub tools_json: sc_str,
    /// JSON array of documents; empty for none.
    pub documents_json: sc_str,
    /// JSON object of extra template variables; empty for none.
    pub kwargs_json: sc_str,
    /// A template name of the model, or Jinja source; only read when `has_chat_template`.
    pub chat_template: sc_str,
    /// Whether `chat_template` is set.
    pub has_chat_template: bool,
    /// Whether `chat_template` may be Jinja source (the server's `--allow-request-templates`).
    pub allow_request_template: bool,
    /// Append the assistant turn opener.
    pub add_generation_prompt: bool,
    /// End the prompt inside the final message.
    pub continue_final_message: bool,
    /// Let the post-processor add BOS/EOS around the prompt.
    pub add_special_tokens: bool,
    /// Fill `text`.
    pub return_text: bool,
    /// Fill `ids`.
    pub return_ids: bool,
    /// Fill `offsets` (implies tokenizing without the segment cache).
    pub return_offsets: bool,
    /// Reuse segment ids from earlier requests (when the renderer has a cache).
    pub use_cache: bool,
    /// Return text, ids and offsets encoded as a protobuf `sidecar.v1.RenderResponse` (fields 1-3)
    /// in `wire` instead of separate arrays: the server parses it in C without making a Python int
    /// per token.
    pub wire_response: bool,
    /// Give up with `SC_ERR_KIND_DEADLINE_EXCEEDED` after this many microseconds; 0 = never.
    pub timeout_us: u64,
}

/// The result of `sc_renderer_render`; free with `sc_render_result_free`.
#[repr(C)]
pub struct sc_render_result {
    /// The prompt (UTF-8) when asked for, else NULL.
    pub text: *mut u8,
    /// Bytes in `text`.
    pub text_len: usize,
    /// The prompt's token ids when asked for, else NULL.
    pub ids: *mut u32,
    /// Number of ids.
    pub ids_len: usize,
    /// Two [start, end) character offsets per id when asked for, else NULL.
    pub offsets: *mut u32,
    /// Number of offset entries.
    pub offsets_len: usize,
    /// Segments whose ids came from the multi-turn cache.
    pub cache_hit_segments: u64,
    /// Segments that were tokenized.
    pub cache_miss_segments: u64,
    /// Bytes of prompt text in hit segments.
    pub cache_hit_bytes: u64,
    /// Bytes of prompt text in missed segments.
    pub cache_miss_bytes: u64,
    /// The protobuf encoding when `wire_response` was set, else NULL.
    pub wire: *mut u8,
    /// Bytes in `wire`.
    pub wire_len: usize,
}

/// Builds a renderer for a tokenizer from a JSON configuration: `templates` (`[[name, source],
/// ...]`), `variables` (`[[name, value], ...]`), optional `fuel`, `recursion_limit`,
/// `max_output_bytes`, `fixed_time` and `cache_bytes` (0 = no multi-turn cache). The renderer keeps
/// the tokenizer alive; the tokenizer handle may be freed first.
///
/// # Safety
/// `tok` must be a live tokenizer handle; `config` is borrowed for the call; `out` and `err` must
/// be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn sc_renderer_new(
    tok: *const sc_tokenizer,
    config: sc_str,
    out: *mut *mut sc_renderer,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes a live handle and lends `config` for the call.
        let tokenizer = unsafe { read_handle(tok, "tokenizer")? }.shared();
        // SAFETY: as above.
        let config = unsafe { read_str(config, "config")? };
        let config: RendererConfig = serde_json::from_str(config)
            .map_err(|e| Error::invalid_argument(format!("config: {e}")))?;
        let defaults = Limits::default();
        let limits = Limits {
            fuel: config.fuel.unwrap_or(defaults.fuel),
            recursion: config.recursion_limit.unwrap_or(defaults.recursion),
            max_output_bytes: config.max_output_bytes.unwrap_or(defaults.max_output_bytes),
        };
        let clock = config.fixed_time.map(Clock::Fixed).unwrap_or(Clock::Now);
        let templates = ChatTemplates::new(config.templates, config.variables, limits, clock);
        let cache = (config.cache_bytes > 0).then(|| SegmentCache::new(config.cache_bytes));
        let handle = sc_renderer {
            templates,
            tokenizer,
            cache,
        };
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_handle(out, handle) }
    })
}

/// Frees a renderer. NULL is a no-op.
///
/// # Safety
/// `r` must be NULL or a handle from `sc_renderer_new`, not yet freed and not in use.
#[no_mangle]
pub unsafe extern "C" fn sc_renderer_free(r: *mut sc_renderer) {
    // SAFETY: the caller passes NULL or a handle it no longer uses.
    unsafe { free_handle(r) }
}

/// Describes the renderer as JSON: `templates` (`[{name, content_format, error}]`) and
/// `cache_bytes` (bytes the multi-turn cache holds now, or null without a cache).
///
/// # Safety
/// `r` must be a live handle; `out` and `err` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn sc_renderer_info(
    r: *const sc_renderer,
    out: *mut sc_bytes,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes a live handle.
        let r = unsafe { read_handle(r, "renderer")? };
        let templates: Vec<_> = r
            .templates
            .names()
            .into_iter()
            .map(|name| {
                let format = r.templates.content_format_of(name).map(|f| f.name());
                json!({"name": name, "content_format": format})
            })
            .collect();
        let info = json!({"templates": templates, "cache_bytes": r.cache.as_ref().map(SegmentCache::bytes)});
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_json(out, &info) }
    })
}

/// Renders a chat request with the model's chat template and tokenizes the prompt, in one call.
///
/// # Safety
/// `r` must be a live handle; `req` must be readable and its strings valid for the call; `out` and
/// `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sc_renderer_render(
    r: *const sc_renderer,
    req: *const sc_render_request,
    out: *mut *mut sc_render_result,
    err: *mut *mut sc_error,
) -> i32 {
    guard(err, || {
        require_out(out, "out")?;
        // SAFETY: the caller passes a live handle and a readable request for the call.
        let r = unsafe { read_handle(r, "renderer")? };
        // SAFETY: as above.
        let raw = unsafe { read_handle(req, "request")? };
        let deadline =
            (raw.timeout_us > 0).then(|| Instant::now() + Duration::from_micros(raw.timeout_us));
        // SAFETY: every string of the request is borrowed for the call.
        let request = unsafe {
            RenderRequest {
                messages_json: read_str(raw.messages_json, "messages_json")?,
                tools_json: read_str(raw.tools_json, "tools_json")?,
                documents_json: read_str(raw.documents_json, "documents_json")?,
                kwargs_json: read_str(raw.kwargs_json, "chat_template_kwargs_json")?,
                chat_template: if raw.has_chat_template {
                    Some(read_str(raw.chat_template, "chat_template")?)
                } else {
                    None
                },
                allow_source: raw.allow_request_template,
                add_generation_prompt: raw.add_generation_prompt,
                continue_final_message: raw.continue_final_message,
            }
        };
        let text = r.templates.render(&request)?;
        let (ids, offsets, stats) = if raw.return_ids || raw.return_offsets {
            past_deadline(deadline)?;
            tokenize(r, &text, raw, deadline)?
        } else {
            (Vec::new(), Vec::new(), CacheStats::default())
        };
        let (wire, wire_len) = if raw.wire_response {
            let text = raw.return_text.then_some(text.as_str());
            let ids: &[u32] = if raw.return_ids { &ids } else { &[] };
            leak_slice(render_response_wire(text, ids, &offsets))
        } else {
            (std::ptr::null_mut(), 0)
        };
        let (text, ids, offsets) = if raw.wire_response {
            (String::new(), Vec::new(), Vec::new())
        } else {
            (text, ids, offsets)
        };
        let (text_ptr, text_len) = if raw.return_text {
            leak_slice(text.into_bytes())
        } else {
            (std::ptr::null_mut(), 0)
        };
        let (ids, ids_len) = if raw.return_ids {
            leak_slice(ids)
        } else {
            (std::ptr::null_mut(), 0)
        };
        let (offsets, offsets_len) = leak_slice(offsets);
        let result = sc_render_result {
            wire,
            wire_len,
            text: text_ptr,
            text_len,
            ids,
            ids_len,
            offsets,
            offsets_len,
            cache_hit_segments: stats.hit_segments,
            cache_miss_segments: stats.miss_segments,
            cache_hit_bytes: stats.hit_bytes,
            cache_miss_bytes: stats.miss_bytes,
        };
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_out(out, Box::into_raw(Box::new(result)), "out") }
    })
}

/// `RenderResponse { text = 1, token_ids = 2 (packed), offsets = 3 (packed) }` in protobuf wire
/// format; empty fields are left out, as proto3 does.
fn render_response_wire(text: Option<&str>, ids: &[u32], offsets: &[u32]) -> Vec<u8> {
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn packed(out: &mut Vec<u8>, field: u8, values: &[u32]) {
        if values.is_empty() {
            return;
        }
        let mut body = Vec::with_capacity(values.len() * 3);
        for &v in values {
            varint(&mut body, u64::from(v));
        }
        out.push((field << 3) | 2);
        varint(out, body.len() as u64);
        out.extend_from_slice(&body);
    }
    let mut out =
        Vec::with_capacity(text.map_or(0, str::len) + ids.len() * 3 + offsets.len() * 2 + 16);
    if let Some(text) = text.filter(|t| !t.is_empty()) {
        out.push((1 << 3) | 2);
        varint(&mut out, text.len() as u64);
        out.extend_from_slice(text.as_bytes());
    }
    packed(&mut out, 2, ids);
    packed(&mut out, 3, offsets);
    out
}

fn past_deadline(deadline: Option<Instant>) -> Result<()> {
    match deadline {
        Some(d) if Instant::now() >= d => Err(Error::new(
            crate::ErrorKind::DeadlineExceeded,
            "the request's deadline passed while rendering",
        )),
        _ => Ok(()),
    }
}

type Tokenized = (Vec<u32>, Vec<u32>, CacheStats);

fn tokenize(
    r: &sc_renderer,
    text: &str,
    raw: &sc_render_request,
    deadline: Option<Instant>,
) -> Result<Tokenized> {
    match &r.cache {
        Some(cache) if raw.use_cache && !raw.return_offsets => {
            let (ids, stats) =
                r.tokenizer
                    .encode_with_cache(text, raw.add_special_tokens, cache, deadline)?;
            Ok((ids, Vec::new(), stats))
        }
        _ => {
            let opts = EncodeOptions {
                add_special_tokens: raw.add_special_tokens,
                return_offsets: raw.return_offsets,
                deadline,
                ..EncodeOptions::default()
            };
            let encoded = r.tokenizer.encode(text, &opts)?;
            Ok((encoded.ids, encoded.offsets, CacheStats::default()))
        }
    }
}

/// Frees the result of `sc_renderer_render`. NULL is a no-op.
///
/// # Safety
/// `res` must be NULL or a result of `sc_renderer_render`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn sc_render_result_free(res: *mut sc_render_result) {
    if res.is_null() {
        return;
    }
    // SAFETY: made by Box::into_raw in `sc_renderer_render`; every array came from `leak_slice`
    // with the length recorded next to it.
    unsafe {
        let r = Box::from_raw(res);
        free_slice(r.text, r.text_len);
        free_slice(r.ids, r.ids_len);
        free_slice(r.offsets, r.offsets_len);
        free_slice(r.wire, r.wire_len);
    }
}
