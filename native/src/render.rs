//! Render: a chat request through the model's chat template, then its tokenizer, in one call.
//!
//! A [`Renderer`] binds a model's [`ChatTemplates`] to its [`Tokenizer`] and owns the multi-turn
//! [`SegmentCache`]; it decides per request which tokenization path runs (the cache when the
//! renderer has one, the request allows it and no offsets are asked for; the plain encoder
//! otherwise) and keeps the request's deadline across both stages.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::json;

use crate::cancel::Cancel;
use crate::error::Result;
use crate::template::{ChatTemplates, Clock, Limits, RenderRequest};
use crate::tokenizer::{CacheStats, EncodeOptions, SegmentCache, Tokenizer};

/// How a renderer is built (JSON from the server).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RendererConfig {
    /// `[name, source]` pairs, in the model's order.
    #[serde(default)]
    pub templates: Vec<(String, String)>,
    /// Template variables from tokenizer_config.json (`bos_token`, ...), as `[name, value]` pairs.
    #[serde(default)]
    pub variables: Vec<(String, String)>,
    /// minijinja fuel per render; None = the default.
    pub fuel: Option<u64>,
    /// Maximum nesting of macro calls and recursive loops; None = the default.
    pub recursion_limit: Option<usize>,
    /// Maximum rendered prompt size in bytes; None = the default.
    pub max_output_bytes: Option<usize>,
    /// Seconds since the epoch `strftime_now` reports instead of the current time (tests).
    pub fixed_time: Option<i64>,
    /// Budget of the multi-turn segment cache in bytes; 0 disables it.
    #[serde(default)]
    pub cache_bytes: usize,
    /// Refuse a prompt with a run of one character class longer than this (the longest word the
    /// tokenizer is given in one piece); None = no limit.
    pub max_word_chars: Option<usize>,
}

/// What a render returns besides the request's JSON fields.
#[derive(Debug, Clone, Copy, Default)]
pub struct RenderOptions<'a> {
    /// Let the post-processor add BOS/EOS around the prompt.
    pub add_special_tokens: bool,
    /// Return the prompt text.
    pub return_text: bool,
    /// Return the prompt's token ids.
    pub return_ids: bool,
    /// Return two [start, end) character offsets per id (tokenizes without the segment cache).
    pub return_offsets: bool,
    /// Reuse segment ids from earlier requests (when the renderer has a cache).
    pub use_cache: bool,
    /// When to stop early: checked while the template writes its output and before each piece
    /// of the prompt is tokenized.
    pub cancel: Cancel<'a>,
}

/// A rendered prompt; fields not asked for are empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendered {
    /// The prompt, when asked for.
    pub text: Option<String>,
    /// The prompt's token ids, when asked for.
    pub ids: Vec<u32>,
    /// Two [start, end) character offsets per id, when asked for.
    pub offsets: Vec<u32>,
    /// How the multi-turn cache was used (all zero when it was not).
    pub cache: CacheStats,
}

/// The outcome of work tried on the caller's thread within a budget.
#[derive(Debug)]
pub enum Inline<T> {
    /// Done within the budget.
    Done(T),
    /// Stopped: it costs at least this much; run it again on a worker.
    Deferred(usize),
}

/// A model's chat templates bound to its tokenizer, with the multi-turn segment cache; immutable
/// apart from its caches and shareable across threads.
pub struct Renderer {
    templates: ChatTemplates,
    tokenizer: Arc<Tokenizer>,
    cache: Option<SegmentCache>,
    max_word_chars: Option<usize>,
}

impl Renderer {
    /// A renderer for `tokenizer` as `config` says (it keeps the tokenizer alive).
    pub fn new(tokenizer: Arc<Tokenizer>, config: RendererConfig) -> Renderer {
        let defaults = Limits::default();
        let limits = Limits {
            fuel: config.fuel.unwrap_or(defaults.fuel),
            recursion: config.recursion_limit.unwrap_or(defaults.recursion),
            max_output_bytes: config.max_output_bytes.unwrap_or(defaults.max_output_bytes),
        };
        let clock = config.fixed_time.map(Clock::Fixed).unwrap_or(Clock::Now);
        let templates = ChatTemplates::new(config.templates, config.variables, limits, clock);
        let cache = (config.cache_bytes > 0).then(|| SegmentCache::new(config.cache_bytes));
        Renderer {
            templates,
            tokenizer,
            cache,
            max_word_chars: config.max_word_chars,
        }
    }

    /// A renderer from the server's JSON configuration (see [`RendererConfig`]).
    pub fn from_json(tokenizer: Arc<Tokenizer>, config_json: &str) -> Result<Renderer> {
        let config = crate::settings::from_json(config_json, "config")?;
        Ok(Renderer::new(tokenizer, config))
    }

    /// Describes the renderer (JSON): `templates` (`[{name, content_format}]`) and `cache_bytes`
    /// (bytes the multi-turn cache holds now, or null without a cache).
    pub fn info(&self) -> serde_json::Value {
        let templates: Vec<_> = self
            .templates
            .names()
            .into_iter()
            .map(|name| {
                let format = self.templates.content_format_of(name).map(|f| f.name());
                json!({"name": name, "content_format": format})
            })
            .collect();
        json!({"templates": templates, "cache_bytes": self.cache.as_ref().map(SegmentCache::bytes)})
    }

    /// Renders `request` with the model's template and tokenizes the prompt as `opts` say.
    pub fn render(&self, request: &RenderRequest<'_>, opts: &RenderOptions) -> Result<Rendered> {
        let text = self.templates.render_cancellable(request, &opts.cancel)?;
        self.finish(text, opts)
    }

    /// [`Renderer::render`] on the caller's thread (the server's event loop), as long as its
    /// work stays within `budget` (the unit of the server's inline bound): the template may write
    /// at most `budget` bytes within its inline fuel, and the prompt's encoding may cost at most
    /// `budget` ([`Tokenizer::encode_cost`]). Past either it stops with what the work costs so
    /// far, to be run again on a worker.
    pub fn render_inline(
        &self,
        request: &RenderRequest<'_>,
        opts: &RenderOptions,
        budget: usize,
    ) -> Result<Inline<Rendered>> {
        let Some(text) = self
            .templates
            .render_inline(request, &opts.cancel, budget)?
        else {
            return Ok(Inline::Deferred(budget.saturating_add(1)));
        };
        if opts.return_ids || opts.return_offsets {
            let cost = self
                .tokenizer
                .encode_cost(text.len(), opts.return_offsets, false);
            if cost > budget {
                return Ok(Inline::Deferred(cost));
            }
        }
        self.finish(text, opts).map(Inline::Done)
    }

    /// Tokenizes a rendered prompt as `opts` say.
    fn finish(&self, text: String, opts: &RenderOptions) -> Result<Rendered> {
        let mut rendered = Rendered::default();
        if opts.return_ids || opts.return_offsets {
            opts.cancel.check()?;
            let (ids, offsets, stats) = self.tokenize(&text, opts)?;
            if opts.return_ids {
                rendered.ids = ids;
            }
            rendered.offsets = offsets;
            rendered.cache = stats;
        }
        if opts.return_text {
            rendered.text = Some(text);
        }
        Ok(rendered)
    }

    /// The prompt's ids (and offsets when asked for) by the cache path or the plain encoder.
    fn tokenize(
        &self,
        text: &str,
        opts: &RenderOptions,
    ) -> Result<(Vec<u32>, Vec<u32>, CacheStats)> {
        match &self.cache {
            Some(cache) if opts.use_cache && !opts.return_offsets => {
                let (ids, stats) = self.tokenizer.encode_with_cache(
                    text,
                    opts.add_special_tokens,
                    cache,
                    &opts.cancel,
                    self.max_word_chars,
                )?;
                Ok((ids, Vec::new(), stats))
            }
            _ => {
                let encode = EncodeOptions {
                    add_special_tokens: opts.add_special_tokens,
                    return_offsets: opts.return_offsets,
                    cancel: opts.cancel,
                    max_word_chars: self.max_word_chars,
                    ..EncodeOptions::default()
                };
                let encoded = self.tokenizer.encode(text, &encode)?;
                Ok((encoded.ids, encoded.offsets, CacheStats::default()))
            }
        }
    }
}
