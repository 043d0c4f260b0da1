//! One Multiplex request, run exactly as the unary RPC of its kind runs it: the same defaults for
//! unset fields, the same checks in the same order with the same messages, the same core calls.
//! The unary path is `sidecar/servicers/{tokenize,detokenize,render}.py`; the end-to-end tests
//! compare the two transports' answers on the parity inputs.

use prost::Message;

use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::hash;
use crate::render::{Inline, RenderOptions};
use crate::template::RenderRequest;
use crate::tokenizer::{CacheStats, EncodeOptions, TruncationSide};
use crate::wire::pb;

use super::hashing::{spec_from_proto, spec_to_proto};
use super::Multiplexer;

/// Bytes of text per token in a Detokenize's cost (as the unary servicer sizes it).
const BYTES_PER_TOKEN: usize = 4;
/// What one item of a request (a text, an id sequence) costs on top of its bytes, as the
/// server's `ITEM_COST` counts it: 5,400 one-character texts in one 16 KB Tokenize took 11 ms.
pub(super) const ITEM_COST: usize = 64;

/// How far past the inline bound a request that started on the caller's thread may go once its
/// real cost shows (a rendered prompt, the ids to hash) before it stops and is run again on a
/// worker: a request just under the bound whose template adds a little still finishes.
const INLINE_SLACK: usize = 2;

/// What a request that starts on the caller's thread under an inline bound of `inline_bytes` may
/// spend once its real cost shows ([`INLINE_SLACK`] times the bound).
pub(super) fn inline_budget(inline_bytes: usize) -> usize {
    inline_bytes.saturating_mul(INLINE_SLACK)
}

/// The work of hashing id sequences of these lengths ([`hash::HashSpec::work`]) when it is past an
/// inline `budget`: the request then stops and runs on a worker.
fn hashing_past(
    spec: Option<&hash::HashSpec>,
    budget: Option<usize>,
    lengths: impl Iterator<Item = usize>,
) -> Option<usize> {
    let (spec, budget) = (spec?, budget?);
    let work = lengths.map(|n| spec.work(n)).fold(0, usize::saturating_add);
    (work > budget).then_some(work)
}

/// A decoded request.
pub(super) enum Request {
    Tokenize(pb::TokenizeRequest),
    Detokenize(pb::DetokenizeRequest),
    Render(pb::RenderRequest),
}

/// A request's response.
pub(super) enum Response {
    Tokenize(pb::TokenizeResponse),
    Detokenize(pb::DetokenizeResponse),
    /// With how the multi-turn cache served it (for the server's metrics).
    Render(pb::RenderResponse, CacheStats),
    /// Not finished: run on the caller's thread, it turned out to cost this much, past the
    /// inline bound (a template's output or loops, block hashing's repeated strings); run it
    /// again on a worker.
    Deferred(usize),
}

impl Request {
    /// What the request costs, in the unit of the server's inline bound (bytes of input): above
    /// it, the request runs on the server's worker pool rather than on the event loop. A request's
    /// own template (when allowed) is code whose cost its size does not bound (a 100-byte loop ran
    /// for a second on the event loop): unbounded, as on the unary path.
    fn cost(&self, allow_request_templates: bool) -> usize {
        match self {
            Request::Render(r) if allow_request_templates && r.chat_template.is_some() => {
                usize::MAX
            }
            Request::Tokenize(r) => {
                r.texts.iter().map(String::len).sum::<usize>()
                    + ITEM_COST * r.texts.len()
                    + r.block_hashing.as_ref().map_or(0, |h| h.encoded_len())
            }
            Request::Detokenize(r) => {
                let ids: usize = r.sequences.iter().map(|s| s.token_ids.len()).sum();
                BYTES_PER_TOKEN * ids + ITEM_COST * r.sequences.len()
            }
            // Every field the template or the hashing reads, and the call itself (325 calls of
            // one short message in a 16 KB message took 2 ms).
            Request::Render(r) => {
                r.messages_json.len()
                    + r.tools_json.len()
                    + r.documents_json.len()
                    + r.chat_template_kwargs_json.len()
                    + r.block_hashing.as_ref().map_or(0, |h| h.encoded_len())
                    + ITEM_COST
            }
        }
    }

    /// The model a request names.
    pub(super) fn model(&self) -> &str {
        match self {
            Request::Tokenize(r) => &r.model,
            Request::Detokenize(r) => &r.model,
            Request::Render(r) => &r.model,
        }
    }
}

impl Multiplexer {
    /// What a Multiplex call costs (see [`Request::cost`]), its encoding priced by the model's
    /// encoder path ([`crate::tokenizer::Tokenizer::encode_cost`]).
    pub(super) fn call_cost(&self, request: &Request) -> usize {
        self.encode_priced(request, request.cost(self.settings.allow_request_templates))
    }

    /// `cost` times what encoding a byte costs for `request` on its model (1 on the fast
    /// encoder of a byte-level vocabulary; offsets and token strings take the slower path).
    pub(super) fn encode_priced(&self, request: &Request, cost: usize) -> usize {
        let (offsets, tokens) = match request {
            Request::Tokenize(r) => (r.return_offsets, r.return_tokens),
            Request::Render(r) => (r.return_offsets, false),
            Request::Detokenize(_) => return cost,
        };
        match self.model(request.model()) {
            Ok(model) => model.tokenizer.encode_cost(cost, offsets, tokens),
            // The call fails at once on the unknown model.
            Err(_) => cost,
        }
    }
}

impl Multiplexer {
    /// Runs one request until it is done, its deadline passes or its flag is set (`cancel`).
    /// With an `inline` budget (the caller is the server's event loop), work that turns out to
    /// cost more than the budget stops as [`Response::Deferred`].
    pub(super) fn execute(
        &self,
        request: Request,
        cancel: Cancel<'_>,
        inline: Option<usize>,
    ) -> Result<Response> {
        match request {
            Request::Tokenize(r) => self.tokenize(r, cancel, inline),
            Request::Detokenize(r) => self.detokenize(r, cancel).map(Response::Detokenize),
            Request::Render(r) => self.render(r, cancel, inline),
        }
    }

    fn tokenize(
        &self,
        request: pb::TokenizeRequest,
        cancel: Cancel<'_>,
        inline: Option<usize>,
    ) -> Result<Response> {
        let model = self.model(&request.model)?;
        let side = match pb::TruncationSide::try_from(request.truncation_side) {
            Ok(pb::TruncationSide::Left) => TruncationSide::Left,
            Ok(_) => TruncationSide::Right,
            Err(_) => {
                return Err(Error::invalid_argument(format!(
                    "truncation_side: unknown value {}",
                    request.truncation_side
                )))
            }
        };
        let spec = request
            .block_hashing
            .as_ref()
            .map(spec_from_proto)
            .transpose()?;
        let opts = EncodeOptions {
            add_special_tokens: request.add_special_tokens.unwrap_or(true),
            return_offsets: request.return_offsets,
            return_tokens: request.return_tokens,
            max_length: (request.max_length > 0).then_some(request.max_length as usize),
            truncation_side: side,
            cancel,
            max_word_chars: (self.settings.max_word_chars > 0)
                .then_some(self.settings.max_word_chars),
        };
        check_text_lengths(&request.texts, self.settings.max_text_chars)?;
        let encoded = model.tokenizer.encode_batch(&request.texts, &opts)?;
        if let Some(work) = hashing_past(spec.as_ref(), inline, encoded.iter().map(|e| e.ids.len()))
        {
            return Ok(Response::Deferred(work));
        }
        let mut encodings = Vec::with_capacity(encoded.len());
        for e in encoded {
            let block_hashes = match &spec {
                Some(spec) => hash::block_hashes_cancellable(&e.ids, spec, &cancel)?.values,
                None => Vec::new(),
            };
            encodings.push(pb::Encoding {
                token_ids: e.ids,
                offsets: e.offsets,
                tokens: e.tokens,
                block_hashes,
                truncated: e.truncated,
            });
        }
        Ok(Response::Tokenize(pb::TokenizeResponse {
            encodings,
            fingerprint: model.fingerprint.clone(),
            block_hash_spec: spec.as_ref().map(spec_to_proto),
        }))
    }

    fn detokenize(
        &self,
        request: pb::DetokenizeRequest,
        cancel: Cancel<'_>,
    ) -> Result<pb::DetokenizeResponse> {
        let model = self.model(&request.model)?;
        let skip = request.skip_special_tokens.unwrap_or(true);
        let sequences: Vec<&[u32]> = request
            .sequences
            .iter()
            .map(|s| s.token_ids.as_slice())
            .collect();
        let count: usize = sequences.iter().map(|s| s.len()).sum();
        if count > self.settings.max_token_ids {
            return Err(Error::resource_exhausted(format!(
                "sequences: {count} token ids is more than the server's limit of {} per request (--max-token-ids)",
                self.settings.max_token_ids
            )));
        }
        let texts = model.tokenizer.decode_batch(&sequences, skip, &cancel)?;
        Ok(pb::DetokenizeResponse {
            texts,
            fingerprint: model.fingerprint.clone(),
        })
    }

    fn render(
        &self,
        request: pb::RenderRequest,
        cancel: Cancel<'_>,
        inline: Option<usize>,
    ) -> Result<Response> {
        let model = self.model(&request.model)?;
        let spec = request
            .block_hashing
            .as_ref()
            .map(spec_from_proto)
            .transpose()?;
        let kwargs_chars = request.chat_template_kwargs_json.chars().count();
        if kwargs_chars > self.settings.max_kwargs_bytes {
            return Err(Error::resource_exhausted(format!(
                "chat_template_kwargs_json: {kwargs_chars} characters is more than the server's limit of {} \
                 (--max-kwargs-bytes)",
                self.settings.max_kwargs_bytes
            )));
        }
        let continue_final = request.continue_final_message;
        let add_generation_prompt = match request.add_generation_prompt {
            Some(true) if continue_final => {
                return Err(Error::invalid_argument(
                    "add_generation_prompt: cannot be true together with continue_final_message (the first opens a \
                     new assistant turn, the second ends the prompt inside the final message)",
                ))
            }
            Some(value) => value,
            // Unset means true, except that continuing the final message implies no new turn.
            None => !continue_final,
        };
        let wants_ids = request.return_token_ids.unwrap_or(true);
        let template_request = RenderRequest {
            messages_json: &request.messages_json,
            tools_json: &request.tools_json,
            documents_json: &request.documents_json,
            kwargs_json: &request.chat_template_kwargs_json,
            chat_template: request.chat_template.as_deref(),
            allow_source: self.settings.allow_request_templates,
            add_generation_prompt,
            continue_final_message: continue_final,
        };
        let opts = RenderOptions {
            add_special_tokens: request.add_special_tokens.unwrap_or(false),
            return_text: request.return_text,
            // Hashing needs the ids even when the caller does not want them back.
            return_ids: wants_ids || spec.is_some(),
            return_offsets: request.return_offsets,
            use_cache: !request.bypass_cache,
            cancel,
        };
        let rendered = match inline {
            None => model.renderer.render(&template_request, &opts)?,
            Some(budget) => match model
                .renderer
                .render_inline(&template_request, &opts, budget)?
            {
                Inline::Done(rendered) => rendered,
                Inline::Deferred(cost) => return Ok(Response::Deferred(cost)),
            },
        };
        if let Some(work) = hashing_past(spec.as_ref(), inline, [rendered.ids.len()].into_iter()) {
            return Ok(Response::Deferred(work));
        }
        let (block_hashes, block_hash_spec) = match &spec {
            Some(spec) => (
                hash::block_hashes_cancellable(&rendered.ids, spec, &cancel)?.values,
                Some(spec_to_proto(spec)),
            ),
            None => (Vec::new(), None),
        };
        let response = pb::RenderResponse {
            text: rendered.text.unwrap_or_default(),
            token_ids: if wants_ids { rendered.ids } else { Vec::new() },
            offsets: rendered.offsets,
            block_hashes,
            fingerprint: model.fingerprint.clone(),
            block_hash_spec,
        };
        Ok(Response::Render(response, rendered.cache))
    }
}

/// Refuses a text of more than `limit` characters (as the unary Tokenize does), naming it and the flag.
fn check_text_lengths(texts: &[String], limit: usize) -> Result<()> {
    for (i, text) in texts.iter().enumerate() {
        // A text of at most `limit` bytes has at most `limit` characters: count only the longer ones.
        if text.len() > limit {
            let chars = text.chars().count();
            if chars > limit {
                return Err(Error::resource_exhausted(format!(
                    "texts[{i}]: {chars} characters is more than the server's limit of {limit} (--max-text-chars)"
                )));
            }
        }
    }
    Ok(())
}
