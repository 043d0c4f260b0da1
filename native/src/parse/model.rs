//! What parsing needs from a model, built once and shared by all its requests: the decode table
//! and the added tokens (to find which markers are single tokens).

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;

use crate::detok::DecodeTable;
use crate::error::Result;
use crate::parse::rtpl::ModelTemplate;
use crate::tokenizer::Tokenizer;

/// How a model's parsing data is built (JSON from the server; empty = the defaults).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ParseModelOptions {
    /// Use the generic window decoder even where a table would do (tests).
    pub force_generic: bool,
    /// The model's `response_template` (its tokenizer_config.json key, as vLLM reads it), which
    /// the `hf` and `beam` parsers interpret; absent or null when it has none.
    pub response_template: Option<serde_json::Value>,
}

/// A model's parsing data; immutable, `Send + Sync`.
pub struct ParseModel {
    pub(crate) table: Arc<DecodeTable>,
    /// Added-token content -> id.
    added: HashMap<String, u32>,
    /// See [`ParseModel::token_suffix`].
    token_suffix: String,
    /// The model's response template (`hf`, `beam`).
    pub(crate) template: ModelTemplate,
    /// The tokenizer's [`Tokenizer::output_size`]: ids below it that the vocabulary does not
    /// define are output the engine can sample, decoded to nothing.
    output_size: usize,
}

impl ParseModel {
    /// Builds the parsing data of `tok` as `options` say.
    pub fn with_options(tok: &Tokenizer, options: ParseModelOptions) -> Result<ParseModel> {
        let mut model = Self::new(tok, options.force_generic)?;
        model.template = ModelTemplate::load(options.response_template.as_ref());
        Ok(model)
    }

    /// Builds the parsing data of `tok`; `force_generic` selects the generic decoder (tests).
    pub fn new(tok: &Tokenizer, force_generic: bool) -> Result<ParseModel> {
        let table = Arc::new(DecodeTable::build(tok, force_generic)?);
        let added: HashMap<String, u32> = tok
            .added_tokens()
            .iter()
            .map(|t| (t.content.clone(), t.id))
            .collect();
        let token_suffix = hunyuan_suffix(&added);
        Ok(ParseModel {
            table,
            added,
            token_suffix,
            template: ModelTemplate::Absent,
            output_size: tok.output_size(),
        })
    }

    /// The decoder family: `byte_level`, `sentencepiece` or `generic`.
    pub fn decoder_family(&self) -> &'static str {
        self.table.family()
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.table.vocab_size()
    }

    /// Whether a request may carry `id`: a vocabulary id, or one below the model's output size
    /// (see [`Tokenizer::accepts_id`]).
    pub(crate) fn accepts(&self, id: u32) -> bool {
        self.table.is_known(id) || (id as usize) < self.output_size
    }

    /// Why `id` is refused (the message after the field).
    pub(crate) fn refusal(&self, id: u32) -> String {
        crate::tokenizer::unknown_id(id, self.vocab_size(), self.output_size)
    }

    /// What the server reports about the parse data (JSON): `decoder`, `vocab_size`,
    /// `output_size` (0 = unknown), `tool_parsers`, `reasoning_parsers`.
    pub fn info(&self) -> serde_json::Value {
        serde_json::json!({
            "decoder": self.decoder_family(),
            "vocab_size": self.vocab_size(),
            "output_size": self.output_size,
            "tool_parsers": crate::parse::tool_parsers(),
            "reasoning_parsers": crate::parse::reasoning_parsers(),
            "response_template": self.template.info(),
        })
    }

    /// The id of the added token spelled exactly `text`, with what `decode` shows for it.
    pub(crate) fn marker_token(&self, text: &str, skip_special: bool) -> Option<(u32, String)> {
        let id = *self.added.get(text)?;
        Some((id, self.visible_text(id, skip_special)))
    }

    /// What `decode` shows for `id` alone (empty for a skipped special token).
    pub(crate) fn visible_text(&self, id: u32, skip_special: bool) -> String {
        if skip_special && self.table.is_special(id) {
            return String::new();
        }
        let mut detok = crate::detok::Detokenizer::new(Arc::clone(&self.table), false);
        detok.note_visible_marker(id);
        let mut sink = crate::detok::TextSink::default();
        detok.push(id, 0, &mut sink);
        detok.flush(&mut sink);
        sink.text
    }

    /// The per-checkpoint suffix of Hunyuan's structural tokens (`:6124c78e` of
    /// `<tool_calls:6124c78e>`), empty when the model has none: what a marker's
    /// [`crate::parse::text::SUFFIX_SLOT`] stands for.
    pub(crate) fn token_suffix(&self) -> &str {
        &self.token_suffix
    }

    /// Whether `id` is a special token.
    pub(crate) fn is_special(&self, id: u32) -> bool {
        self.table.is_special(id)
    }
}

/// Hunyuan's token suffix as vLLM's `detect_token_suffix` reads it: the `:...` of an added token
/// `<think:...>`, `<tool_calls:...>`, `<tool_call:...>`, `<arg_key:...>` or `<arg_value:...>`
/// (no whitespace or `>` in it). vLLM takes the first such token its vocabulary lists, suffixed or
/// not, in hash order; here the suffixed token with the lowest id decides, so a vocabulary that
/// also keeps an unsuffixed `<think>` still reads the suffix its structural tokens carry.
fn hunyuan_suffix(added: &HashMap<String, u32>) -> String {
    const STEMS: &[&str] = &[
        "<think",
        "<tool_calls",
        "<tool_call",
        "<arg_key",
        "<arg_value",
    ];
    let suffix_of = |token: &str| -> Option<String> {
        let inner = token.strip_suffix('>')?;
        let rest = STEMS.iter().find_map(|s| inner.strip_prefix(s))?;
        let tail = rest.strip_prefix(':')?;
        let plain = !tail.is_empty() && !tail.contains(|c: char| c.is_whitespace() || c == '>');
        plain.then(|| rest.to_string())
    };
    added
        .iter()
        .filter_map(|(token, &id)| suffix_of(token).map(|s| (id, s)))
        .min()
        .map(|(_, s)| s)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hunyuan_suffix_is_read_off_structural_tokens() {
        let vocab = |tokens: &[(&str, u32)]| -> HashMap<String, u32> {
            tokens.iter().map(|&(t, i)| (t.to_string(), i)).collect()
        };
        assert_eq!(
            hunyuan_suffix(&vocab(&[("<tool_calls:6124c78e>", 7)])),
            ":6124c78e"
        );
        assert_eq!(
            hunyuan_suffix(&vocab(&[
                ("<think>", 1),
                ("</think:ab>", 2),
                ("<think:ab>", 3)
            ])),
            ":ab"
        );
        assert_eq!(
            hunyuan_suffix(&vocab(&[("<think>", 1), ("<tool_call>", 2)])),
            ""
        );
        assert_eq!(
            hunyuan_suffix(&vocab(&[("<tool_sep:x>", 1), ("<think: x>", 2)])),
            ""
        );
    }
}
