//! The real tokenizers and templates the targets run on, loaded once per process from
//! `../shared/models` (or `SIDECAR_SHARED_MODELS`), as the library's own tests do. Targets that
//! need a model do nothing when the folder is absent; the replay test skips, or fails under CI.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use sidecar_native::detok::DecodeTable;
use sidecar_native::parse::ParseModel;
use sidecar_native::tokenizer::Tokenizer;

/// The repository root (this crate is `native/fuzz`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The shared models folder when it is there.
pub fn shared_models() -> Option<PathBuf> {
    let dir = std::env::var_os("SIDECAR_SHARED_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared/models"));
    dir.join("SOURCES.md").is_file().then_some(dir)
}

/// Model folders the parser and decoder targets pick from (the folders the parse test cases use,
/// plus a SentencePiece vocabulary with byte fallback): byte-level BPE (qwen3, gpt2, deepseek-v3,
/// llama3, mistral-nemo's tekken), harmony tokens (gpt-oss), SentencePiece (mistral-v3-spm).
pub const PARSE_MODELS: &[&str] = &[
    "qwen3",
    "gpt-oss",
    "mistral-nemo",
    "deepseek-v3",
    "gpt2",
    "llama3",
    "mistral-v3-spm",
];

/// A loaded model: its tokenizer and parsing data.
pub struct Model {
    /// The tokenizer.
    pub tok: Tokenizer,
    /// Parsing data built from it.
    pub parse: Arc<ParseModel>,
    /// Its incremental decoding table.
    pub table: Arc<DecodeTable>,
    /// The generic decoder's table (the path for vocabularies that are neither byte-level nor
    /// SentencePiece), forced on this vocabulary.
    pub generic_table: Arc<DecodeTable>,
}

type Cache = Mutex<HashMap<String, Option<Arc<Model>>>>;

/// The model folder `name`, loaded on first use.
pub fn model(name: &str) -> Option<Arc<Model>> {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    cache
        .entry(name.to_string())
        .or_insert_with(|| {
            let dir = shared_models()?.join(name);
            let tok = Tokenizer::from_dir(&dir).expect("a shared model loads");
            let parse = Arc::new(ParseModel::new(&tok, false).expect("parse model builds"));
            let table = Arc::new(DecodeTable::build(&tok, false).expect("decode table builds"));
            let generic_table =
                Arc::new(DecodeTable::build(&tok, true).expect("generic table builds"));
            Some(Arc::new(Model {
                tok,
                parse,
                table,
                generic_table,
            }))
        })
        .clone()
}

/// Reads a file under the repository, or under the shared models folder for `shared:` paths.
pub fn read_source(path: &str) -> Option<String> {
    let full = match path.strip_prefix("shared:") {
        Some(rest) => shared_models()?.join(rest),
        None => repo_root().join(path),
    };
    std::fs::read_to_string(full).ok()
}

/// The special-token variables (`bos_token`, `eos_token`, ...) of a shared model's
/// `tokenizer_config.json`, where they are plain strings or `{"content": ...}` objects.
pub fn template_variables(model: &str) -> Vec<(String, String)> {
    let Some(text) = read_source(&format!("shared:{model}/tokenizer_config.json")) else {
        return Vec::new();
    };
    let Ok(config) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Vec::new();
    };
    ["bos_token", "eos_token", "unk_token", "pad_token"]
        .iter()
        .filter_map(|key| {
            let v = config.get(*key)?;
            let s = v.as_str().or_else(|| v.get("content")?.as_str())?;
            Some((key.to_string(), s.to_string()))
        })
        .collect()
}

/// GPT-2's byte -> vocabulary character map (the byte-level alphabet): printable Latin-1 bytes map
/// to themselves, the other 68 to U+0100 onwards in byte order.
pub fn byte_level_char(byte: u8) -> char {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    if printable(byte) {
        return byte as char;
    }
    let rank = (0..byte).filter(|&b| !printable(b)).count() as u32;
    char::from_u32(0x100 + rank).expect("in range")
}

/// One token per byte of `text` (byte-level vocabularies): splits every multi-byte character and
/// every text marker. `None` when the vocabulary lacks a byte token, or does not read those
/// tokens as bytes (a SentencePiece vocabulary may hold a piece `ĉ` that is the letter, not a tab).
pub fn byte_tokens(tok: &Tokenizer, text: &str) -> Option<Vec<u32>> {
    text.bytes()
        .map(|b| tok.token_to_id(&byte_level_char(b).to_string()))
        .collect::<Option<Vec<u32>>>()
        .filter(|ids| tok.decode(ids, false).is_ok_and(|d| d == text))
}

/// `text` encoded without special tokens added (added tokens in the text become their ids).
pub fn encode(tok: &Tokenizer, text: &str) -> Vec<u32> {
    tok.hf()
        .encode(text, false)
        .expect("encode")
        .get_ids()
        .to_vec()
}
