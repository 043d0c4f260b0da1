//! Chat templates: an OpenAI-style chat request in, the prompt text out, byte for byte what
//! transformers' `apply_chat_template` renders after vLLM's message normalization.
//!
//! A [`ChatTemplates`] belongs to one model: its named templates (`default`, `tool_use`, `rag`,
//! ...), compiled once, the special-token variables of its `tokenizer_config.json`, the limits and
//! a small cache of compiled per-request templates keyed by their text. It is immutable apart
//! from that cache, `Send + Sync`, and shared by all threads. See `COMPATIBILITY.md` for every
//! rule followed and every known difference.

mod analyze;
pub mod compat;
mod env;
mod html_entities;
pub mod json;
mod normalize;
mod pprint;
mod pydict;
mod pyfilters;
mod pyformat;
mod pyhtml;
pub mod pyjson;
mod pymethods;
// `int()` and `float()` text rules, also how typed tool-call values are read (`parse::schema`).
pub(crate) mod pynum;
mod pystr;
mod pystrformat;
mod pystrmethods;
mod pytests;
mod roles;
mod textwrap;
mod unicode_tables;

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};

use minijinja::{Environment, ErrorKind as JinjaErrorKind, Value};

pub use analyze::{analyze, Analysis};
pub use env::{Clock, Limits, RaisedByTemplate};
use json::Json;
pub use normalize::ContentFormat;

use crate::cancel::Cancel;
use crate::error::{quoted, Error, ErrorKind, Result};

/// transformers appends this to the final message and cuts the prompt at it.
const CONTINUE_TAG: &str = "CONTINUE_FINAL_MESSAGE_TAG ";

/// Request templates kept compiled per model.
const REQUEST_TEMPLATE_CACHE: usize = 32;

/// Names a request may not pass in `chat_template_kwargs`: they are request fields of their own,
/// and transformers would fail (or silently take them) as duplicate arguments.
const RESERVED_KWARGS: &[&str] = &[
    "messages",
    "tools",
    "documents",
    "add_generation_prompt",
    "continue_final_message",
    "chat_template",
    "tokenize",
];

/// Fuel a render on the caller's thread may spend ([`ChatTemplates::render_inline`]); a render
/// that needs more runs again on a worker with the full limit.
pub(crate) const INLINE_FUEL: u64 = 100_000;

/// A compiled template and what its source says about it.
pub struct CompiledTemplate {
    env: Environment<'static>,
    /// The same template with [`INLINE_FUEL`]: what a render on the caller's thread may spend.
    inline_env: Environment<'static>,
    analysis: Analysis,
    /// transformers refuses `continue_final_message` unless the source mentions the field.
    mentions_content: bool,
    /// vLLM turns developer messages into system messages unless the source names the role.
    names_developer: bool,
}

impl CompiledTemplate {
    /// Compiles `source`; a syntax error, or a name Jinja2 refuses at compile time, is an error
    /// whose message starts with "chat_template: ".
    pub fn compile(source: &str, limits: Limits, clock: Clock) -> Result<Self> {
        let rewritten = compat::rewrite(source);
        let analysis = analyze::analyze(&rewritten);
        if let Some(reason) = &analysis.compile_error {
            return Err(Error::invalid_argument(format!(
                "chat_template: Jinja2 cannot compile this template: {reason}"
            )));
        }
        let guarded = compat::guard_none_iteration(&rewritten).into_owned();
        let env = env::build(guarded, limits, clock)
            .map_err(|e| Error::invalid_argument(format!("chat_template: {e}")))?;
        let mut inline_env = env.clone();
        inline_env.set_fuel(Some(INLINE_FUEL.min(limits.fuel)));
        Ok(CompiledTemplate {
            env,
            inline_env,
            analysis,
            mentions_content: source.contains("content"),
            names_developer: roles::names_developer(source),
        })
    }

    /// How the template wants message content.
    pub fn content_format(&self) -> ContentFormat {
        self.analysis.content_format
    }
}

/// One render request (the JSON fields of `RenderRequest`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RenderRequest<'a> {
    /// JSON array of OpenAI chat messages.
    pub messages_json: &'a str,
    /// JSON array of tools, or empty for none.
    pub tools_json: &'a str,
    /// JSON array of documents, or empty for none.
    pub documents_json: &'a str,
    /// JSON object of extra template variables, or empty.
    pub kwargs_json: &'a str,
    /// A template name the model has, or Jinja source (see `allow_source`).
    pub chat_template: Option<&'a str>,
    /// Whether `chat_template` may be Jinja source.
    pub allow_source: bool,
    /// Append the assistant turn opener.
    pub add_generation_prompt: bool,
    /// End the prompt inside the final message.
    pub continue_final_message: bool,
}

/// The templates and variables of one model (see the module docs).
pub struct ChatTemplates {
    named: Vec<(String, std::result::Result<Arc<CompiledTemplate>, Error>)>,
    variables: Vec<(String, String)>,
    limits: Limits,
    clock: Clock,
    request_templates: Mutex<VecDeque<(String, Arc<CompiledTemplate>)>>,
}

impl ChatTemplates {
    /// `templates` are (name, source) pairs; `variables` the special-token variables
    /// (`bos_token`, ...). A named template that does not compile fails its requests, not the load.
    pub fn new(
        templates: Vec<(String, String)>,
        variables: Vec<(String, String)>,
        limits: Limits,
        clock: Clock,
    ) -> Self {
        let named = templates
            .into_iter()
            .map(|(name, source)| {
                let compiled = CompiledTemplate::compile(&source, limits, clock)
                    .map(Arc::new)
                    .map_err(|e| {
                        Error::failed_precondition(format!(
                            "the model's chat template {name:?} is broken: {}",
                            e.message()
                        ))
                    });
                (name, compiled)
            })
            .collect();
        ChatTemplates {
            named,
            variables,
            limits,
            clock,
            request_templates: Mutex::new(VecDeque::new()),
        }
    }

    /// The names of the model's templates.
    pub fn names(&self) -> Vec<&str> {
        self.named.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The content format of a named template, if it compiles.
    pub fn content_format_of(&self, name: &str) -> Option<ContentFormat> {
        self.named
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, t)| t.as_ref().ok())
            .map(|t| t.content_format())
    }

    /// Renders a request to the prompt text.
    pub fn render(&self, req: &RenderRequest<'_>) -> Result<String> {
        self.render_cancellable(req, &Cancel::default())
    }

    /// [`ChatTemplates::render`] that stops when `cancel` says so while the template writes.
    pub fn render_cancellable(
        &self,
        req: &RenderRequest<'_>,
        cancel: &Cancel<'_>,
    ) -> Result<String> {
        self.render_bounded(req, cancel, None)?
            .ok_or_else(|| Error::internal("a render without an inline bound was deferred"))
    }

    /// A render on the caller's thread (the server's event loop): `None` when the template
    /// needs more than such a render may spend, [`INLINE_FUEL`] or `max_output_bytes` of
    /// prompt, and so has to run again on a worker ([`ChatTemplates::render_cancellable`]). A
    /// request's size does not bound its template's work: a 16 KB request rendered to 7.9 MB
    /// (`tojson(indent=4)` of deep nesting) or walked its 536 messages once per message.
    pub fn render_inline(
        &self,
        req: &RenderRequest<'_>,
        cancel: &Cancel<'_>,
        max_output_bytes: usize,
    ) -> Result<Option<String>> {
        self.render_bounded(req, cancel, Some(max_output_bytes))
    }

    fn render_bounded(
        &self,
        req: &RenderRequest<'_>,
        cancel: &Cancel<'_>,
        inline_output: Option<usize>,
    ) -> Result<Option<String>> {
        if req.continue_final_message && req.add_generation_prompt {
            return Err(Error::invalid_argument(
                "continue_final_message and add_generation_prompt cannot both be true: the first ends the prompt \
                 inside the final message, the second opens a new assistant turn",
            ));
        }
        let tools = optional_json_array(req.tools_json, "tools_json", "tools")?
            .map(normalize::tools)
            .transpose()?;
        let template = self.select(req.chat_template, tools.is_some(), req.allow_source)?;
        if inline_output.is_some() && template.analysis.accumulates_lists {
            return Ok(None);
        }
        let messages = json::parse(req.messages_json, "messages_json")?;
        let mut messages = normalize::messages(
            messages,
            template.content_format(),
            template.names_developer,
        )?;
        if messages.is_empty() {
            return Err(Error::invalid_argument(
                "messages_json: the conversation is empty; send at least one message",
            ));
        }
        let documents = optional_json_array(req.documents_json, "documents_json", "documents")?;
        let kwargs = template_kwargs(req.kwargs_json)?;
        let continued = if req.continue_final_message {
            Some(tag_final_message(&mut messages, &template)?)
        } else {
            None
        };

        let mut context: Vec<(Value, Value)> =
            Vec::with_capacity(self.variables.len() + kwargs.len() + 4);
        for (name, value) in &self.variables {
            if !kwargs.iter().any(|(k, _)| k == name) {
                context.push((Value::from(name.as_str()), Value::from(value.as_str())));
            }
        }
        let py_dicts = template.analysis.reads_dict_methods;
        let to_value = |v| to_value_with(v, py_dicts);
        for (name, value) in kwargs {
            context.push((Value::from(name), to_value(value)));
        }
        context.push((
            Value::from("messages"),
            Value::from(messages.into_iter().map(to_value).collect::<Vec<_>>()),
        ));
        context.push((
            Value::from("tools"),
            tools.map(to_value).unwrap_or(Value::from(())),
        ));
        context.push((
            Value::from("documents"),
            documents.map(to_value).unwrap_or(Value::from(())),
        ));
        context.push((
            Value::from("add_generation_prompt"),
            Value::from(req.add_generation_prompt),
        ));
        let Some(mut text) =
            self.run(template, Value::from_pairs(context), cancel, inline_output)?
        else {
            return Ok(None);
        };
        if let Some(original) = continued {
            cut_at_continue_tag(&mut text, &original)?;
        }
        Ok(Some(text))
    }

    fn select(
        &self,
        requested: Option<&str>,
        has_tools: bool,
        allow_source: bool,
    ) -> Result<Arc<CompiledTemplate>> {
        let named = |name: &str| {
            self.named
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t.clone())
        };
        let available = || {
            let names = self.names();
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        };
        match requested {
            Some(name) if !looks_like_jinja(name) => match named(name) {
                Some(t) => t,
                None => Err(Error::not_found(format!(
                    "chat_template: this model has no template named {}; its templates: {}",
                    quoted(name, |n| format!("{n:?}")),
                    available()
                ))),
            },
            Some(source) => {
                if !allow_source {
                    return Err(Error::failed_precondition(
                        "chat_template: per-request Jinja templates are disabled (templates are code); start the \
                         server with --allow-request-templates, or pass the name of one of the model's templates",
                    ));
                }
                self.request_template(source)
            }
            None => {
                if has_tools {
                    if let Some(t) = named("tool_use") {
                        return t;
                    }
                }
                if let Some(t) = named("default") {
                    return t;
                }
                if self.named.is_empty() {
                    return Err(Error::failed_precondition(
                        "this model has no chat template (tokenizer_config.json has none and there is no \
                         chat_template.jinja); pass one in chat_template if the server allows request templates",
                    ));
                }
                Err(Error::failed_precondition(format!(
                    "this model has several chat templates and none is named 'default'; pick one in chat_template: {}",
                    available()
                )))
            }
        }
    }

    fn request_template(&self, source: &str) -> Result<Arc<CompiledTemplate>> {
        {
            let mut cache = self
                .request_templates
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(pos) = cache.iter().position(|(s, _)| s == source) {
                let entry = cache.remove(pos).expect("position is in range");
                let compiled = entry.1.clone();
                cache.push_front(entry);
                return Ok(compiled);
            }
        }
        // Compiled outside the lock: a slow compile must not stall other requests.
        let compiled = Arc::new(CompiledTemplate::compile(source, self.limits, self.clock)?);
        let mut cache = self
            .request_templates
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        cache.push_front((source.to_string(), compiled.clone()));
        cache.truncate(REQUEST_TEMPLATE_CACHE);
        Ok(compiled)
    }

    /// Runs a template; `None` when a render with an inline bound (`inline_output`) passed it.
    fn run(
        &self,
        template: Arc<CompiledTemplate>,
        context: Value,
        cancel: &Cancel<'_>,
        inline_output: Option<usize>,
    ) -> Result<Option<String>> {
        let env = match inline_output {
            Some(_) => &template.inline_env,
            None => &template.env,
        };
        let tmpl = env
            .get_template(env::TEMPLATE_NAME)
            .map_err(|e| Error::internal(e.to_string()))?;
        let limit = self.limits.max_output_bytes;
        let inline_limit = inline_output.filter(|&bytes| bytes < limit);
        let mut out = LimitedWriter {
            buf: Vec::new(),
            limit: inline_limit.unwrap_or(limit),
            exceeded: false,
            cancel,
            stopped: None,
        };
        let result = {
            let _scope = env::limit_output(out.limit);
            tmpl.render_captured_to(context, &mut out)
        };
        if let Some(stop) = out.stopped {
            return Err(stop);
        }
        out.exceeded |= matches!(&result, Err(e) if std::error::Error::source(e)
            .is_some_and(|s| s.is::<env::OutputLimitReached>()));
        let out_of_inline_fuel = inline_output.is_some()
            && INLINE_FUEL < self.limits.fuel
            && matches!(&result, Err(e) if e.kind() == JinjaErrorKind::OutOfFuel);
        if (out.exceeded && inline_limit.is_some()) || out_of_inline_fuel {
            return Ok(None);
        }
        if out.exceeded {
            return Err(Error::resource_exhausted(format!(
                "chat template: the rendered prompt exceeds the output limit of {} bytes",
                self.limits.max_output_bytes
            )));
        }
        result.map_err(|e| self.template_error(e))?;
        String::from_utf8(out.buf)
            .map(Some)
            .map_err(|e| Error::internal(format!("template output is not UTF-8: {e}")))
    }

    fn template_error(&self, e: minijinja::Error) -> Error {
        if let Some(raised) =
            std::error::Error::source(&e).and_then(|s| s.downcast_ref::<RaisedByTemplate>())
        {
            return Error::invalid_argument(format!("chat template error: {}", raised.0));
        }
        match e.kind() {
            JinjaErrorKind::OutOfFuel => Error::resource_exhausted(format!(
                "chat template: ran out of fuel: the template ran past the server's limit of {} instructions \
                 (--template-fuel); it loops too long for this request",
                self.limits.fuel
            )),
            _ if e.detail().is_some_and(|d| d.contains("recursion limit exceeded")) => Error::resource_exhausted(format!(
                "chat template: recursion deeper than {} levels",
                self.limits.recursion
            )),
            _ => Error::invalid_argument(format!("chat template failed: {e}")),
        }
    }
}

/// A chat template name is a plain word; Jinja source has delimiters.
fn looks_like_jinja(s: &str) -> bool {
    s.contains("{{") || s.contains("{%") || s.contains("{#")
}

/// An optional JSON array of objects (tools, documents): empty text or `null` means none.
fn optional_json_array(text: &str, field: &str, what: &str) -> Result<Option<Json>> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    match json::parse(text, field)? {
        Json::Null => Ok(None),
        Json::Array(items) => {
            if let Some((i, bad)) = items
                .iter()
                .enumerate()
                .find(|(_, v)| !matches!(v, Json::Object(_)))
            {
                return Err(Error::invalid_argument(format!(
                    "{field}: {what}[{i}] must be an object, got {}",
                    bad.type_name()
                )));
            }
            Ok(Some(Json::Array(items)))
        }
        other => Err(Error::invalid_argument(format!(
            "{field}: expected an array of {what}, got {}",
            other.type_name()
        ))),
    }
}

fn template_kwargs(text: &str) -> Result<Vec<(String, Json)>> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    match json::parse(text, "chat_template_kwargs_json")? {
        Json::Null => Ok(Vec::new()),
        Json::Object(pairs) => {
            if let Some((key, _)) = pairs
                .iter()
                .find(|(k, _)| RESERVED_KWARGS.contains(&k.as_str()))
            {
                return Err(Error::invalid_argument(format!(
                    "chat_template_kwargs_json: {} is reserved; use the request field of that name",
                    quoted(key, |k| format!("{k:?}"))
                )));
            }
            Ok(pairs)
        }
        other => Err(Error::invalid_argument(format!(
            "chat_template_kwargs_json: expected an object, got {}",
            other.type_name()
        ))),
    }
}

/// Appends transformers' tag to the final message's content; returns the original text.
fn tag_final_message(messages: &mut [Json], template: &CompiledTemplate) -> Result<String> {
    let last = messages.last_mut().expect("checked non-empty");
    let Some(content) = last.get_mut("content") else {
        return Err(Error::invalid_argument(
            "continue_final_message: the final message has no \"content\" to continue",
        ));
    };
    if !template.mentions_content {
        return Err(Error::invalid_argument(
            "continue_final_message: the chat template does not use the \"content\" field",
        ));
    }
    match content {
        Json::Str(text) => {
            let original = text.clone();
            text.push_str(CONTINUE_TAG);
            Ok(original)
        }
        Json::Array(parts) => {
            for part in parts.iter_mut().rev() {
                if let Some(slot) = part.get_mut("text") {
                    let Json::Str(text) = slot else {
                        return Err(Error::invalid_argument(
                            "continue_final_message: the final message's last text part is not a string",
                        ));
                    };
                    let original = text.clone();
                    text.push_str(CONTINUE_TAG);
                    return Ok(original);
                }
            }
            Err(Error::invalid_argument(
                "continue_final_message: the final message has no text part to continue",
            ))
        }
        other => Err(Error::invalid_argument(format!(
            "continue_final_message: the final message's content is a {}, not text",
            other.type_name()
        ))),
    }
}

/// transformers' cut: at the last tag; when the template trimmed the tag's trailing space, the
/// message's own trailing whitespace is trimmed too.
fn cut_at_continue_tag(text: &mut String, original: &str) -> Result<()> {
    let tag = CONTINUE_TAG.trim_end();
    if !text.contains(pystr::strip(original)) || !text.contains(tag) {
        return Err(Error::invalid_argument(
            "continue_final_message: the final message does not appear in the rendered prompt (the chat template \
             changes or drops it), so the prompt cannot end inside it",
        ));
    }
    let at = text.rfind(tag).expect("checked above");
    let keeps_spacing = text[at..].starts_with(CONTINUE_TAG);
    text.truncate(at);
    if !keeps_spacing {
        let kept = pystr::rstrip(text).len();
        text.truncate(kept);
    }
    Ok(())
}

/// A parsed JSON value as the template sees it (maps keep their order).
#[cfg(test)]
pub(crate) fn to_value(json: Json) -> Value {
    to_value_with(json, false)
}

/// [`to_value`], with objects as [`pydict::PyDict`] when `py_dicts` (a template that reads
/// `x.items` and the like without calling them, see `Analysis::reads_dict_methods`): every
/// attribute read of such a dict costs a dynamic lookup (8% of an agentic Qwen3 render), so only
/// templates that need Jinja2's method-first lookup pay it.
pub(crate) fn to_value_with(json: Json, py_dicts: bool) -> Value {
    let to_value = |v| to_value_with(v, py_dicts);
    match json {
        Json::Null => Value::from(()),
        Json::Bool(b) => Value::from(b),
        Json::Int(i) => match i64::try_from(i) {
            Ok(small) => Value::from(small),
            Err(_) => Value::from(i),
        },
        Json::Float(f) => Value::from(f),
        Json::Str(s) => Value::from(s),
        Json::Array(items) => Value::from(items.into_iter().map(to_value).collect::<Vec<_>>()),
        Json::Object(pairs) => {
            let map = Value::from_pairs(
                pairs
                    .into_iter()
                    .map(|(k, v)| (Value::from(k), to_value(v))),
            );
            if py_dicts {
                Value::from_object(pydict::PyDict(map))
            } else {
                map
            }
        }
    }
}

/// Collects template output and stops it at a size limit, or when the call is cancelled (every
/// write checks; a template that loops writes often).
struct LimitedWriter<'c, 'a> {
    buf: Vec<u8>,
    limit: usize,
    exceeded: bool,
    cancel: &'c Cancel<'a>,
    stopped: Option<Error>,
}

impl io::Write for LimitedWriter<'_, '_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if let Err(stop) = self.cancel.check() {
            debug_assert!(matches!(
                stop.kind(),
                ErrorKind::Cancelled | ErrorKind::DeadlineExceeded
            ));
            self.stopped = Some(stop);
            return Err(io::Error::other("the call was stopped"));
        }
        if self.buf.len() + data.len() > self.limit {
            self.exceeded = true;
            return Err(io::Error::other("output limit exceeded"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
