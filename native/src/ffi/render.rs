//! Exports for [`crate::render`]: a renderer per model, and Render (chat template + tokenization)
//! in one call.

use std::sync::Arc;

use super::buf::sc_bytes;
use super::buf::{
    free_handle, free_slice, leak_slice, read_cancel_flag, read_handle, read_str, sc_str,
    write_handle, write_json,
};
use super::status::sc_error;
use super::tokenizer::sc_tokenizer;
use super::{guard, require_out, write_out};
use crate::cancel::Cancel;
use crate::render::{RenderOptions, Rendered, Renderer};
use crate::template::RenderRequest;

/// A model's chat templates bound to its tokenizer, with the multi-turn segment cache; immutable
/// apart from its caches and shareable across threads. Free with `sc_renderer_free`.
pub struct sc_renderer {
    // Shared so that a Multiplex stream's model table keeps the renderer alive on its own.
    inner: Arc<Renderer>,
}

impl sc_renderer {
    /// A shared reference to the renderer, for handles that outlive this one.
    pub(crate) fn shared(&self) -> Arc<Renderer> {
        Arc::clone(&self.inner)
    }
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
    /// Give up with `SC_ERR_KIND_DEADLINE_EXCEEDED` after this many microseconds; 0 = never.
    pub timeout_us: u64,
    /// The call's cancellation flag (as in `sc_encode_options`); NULL = not cancellable.
    pub cancel: *const u32,
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
        let inner = Renderer::from_json(tokenizer, config)?;
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe {
            write_handle(
                out,
                sc_renderer {
                    inner: Arc::new(inner),
                },
            )
        }
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

/// Describes the renderer as JSON: `templates` (`[{name, content_format}]`) and `cache_bytes`
/// (bytes the multi-turn cache holds now, or null without a cache).
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
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_json(out, &r.inner.info()) }
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
        // SAFETY: every string of the request is borrowed for the call.
        let request = unsafe { read_request(raw)? };
        // SAFETY: the caller lends the flag for the call.
        let flag = unsafe { read_cancel_flag(raw.cancel)? };
        let rendered = r.inner.render(
            &request,
            &read_options(raw, Cancel::after_micros(raw.timeout_us, flag)),
        )?;
        let result = Box::into_raw(Box::new(render_result(rendered)));
        // SAFETY: the caller promises `out` is NULL or writable.
        unsafe { write_out(out, result, "out") }
    })
}

/// The request's JSON fields and template choice.
///
/// # Safety
/// Every string of `raw` must be readable for the call.
unsafe fn read_request(raw: &sc_render_request) -> crate::Result<RenderRequest<'_>> {
    // SAFETY: forwarded from the caller.
    unsafe {
        Ok(RenderRequest {
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
        })
    }
}

fn read_options<'a>(raw: &sc_render_request, cancel: Cancel<'a>) -> RenderOptions<'a> {
    RenderOptions {
        add_special_tokens: raw.add_special_tokens,
        return_text: raw.return_text,
        return_ids: raw.return_ids,
        return_offsets: raw.return_offsets,
        use_cache: raw.use_cache,
        cancel,
    }
}

fn render_result(rendered: Rendered) -> sc_render_result {
    let (text, text_len) = match rendered.text {
        Some(text) => leak_slice(text.into_bytes()),
        None => (std::ptr::null_mut(), 0),
    };
    let (ids, ids_len) = leak_slice(rendered.ids);
    let (offsets, offsets_len) = leak_slice(rendered.offsets);
    sc_render_result {
        text,
        text_len,
        ids,
        ids_len,
        offsets,
        offsets_len,
        cache_hit_segments: rendered.cache.hit_segments,
        cache_miss_segments: rendered.cache.miss_segments,
        cache_hit_bytes: rendered.cache.hit_bytes,
        cache_miss_bytes: rendered.cache.miss_bytes,
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
    }
}
