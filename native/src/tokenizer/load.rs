//! Finding and reading a model directory's tokenizer files.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::tiktoken;
use crate::error::{Error, Result};

/// Where a tokenizer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerFormat {
    /// A Hugging Face `tokenizer.json`.
    TokenizerJson,
    /// A tiktoken rank file plus the special tokens of `tokenizer_config.json`.
    Tiktoken,
}

impl TokenizerFormat {
    /// The name reported in `ListModels`.
    pub fn name(self) -> &'static str {
        match self {
            TokenizerFormat::TokenizerJson => "tokenizer.json",
            TokenizerFormat::Tiktoken => "tiktoken",
        }
    }
}

/// Returns `tokenizer.json` text for `dir`: the file itself when present (it wins, as in
/// transformers), else one converted from the directory's tiktoken file.
pub(crate) fn tokenizer_json_from_dir(dir: &Path) -> Result<(String, TokenizerFormat)> {
    if !dir.is_dir() {
        return Err(Error::not_found(format!(
            "model directory {} does not exist",
            dir.display()
        )));
    }
    let json_path = dir.join("tokenizer.json");
    if json_path.is_file() {
        return Ok((read_text(&json_path)?, TokenizerFormat::TokenizerJson));
    }
    let Some(ranks_path) = find_tiktoken_file(dir)? else {
        return Err(Error::not_found(format!(
            "{} has neither tokenizer.json nor a tiktoken file (*.tiktoken, tiktoken.model)",
            dir.display()
        )));
    };
    let ranks = read_text(&ranks_path)?;
    let config = read_tokenizer_config(dir)?;
    let file_name = ranks_path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let json = tiktoken::tokenizer_json(&ranks, file_name, &config)?;
    Ok((json, TokenizerFormat::Tiktoken))
}

fn find_tiktoken_file(dir: &Path) -> Result<Option<PathBuf>> {
    let model = dir.join("tiktoken.model");
    if model.is_file() {
        return Ok(Some(model));
    }
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::failed_precondition(format!("reading {}: {e}", dir.display())))?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "tiktoken"))
        .collect();
    found.sort();
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(Error::failed_precondition(format!(
            "{} has several *.tiktoken files; keep one",
            dir.display()
        ))),
    }
}

/// `tokenizer_config.json` as JSON, or an empty object when the file is absent.
pub(crate) fn read_tokenizer_config(dir: &Path) -> Result<Value> {
    let path = dir.join("tokenizer_config.json");
    if !path.is_file() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(&read_text(&path)?).map_err(|e| {
        Error::failed_precondition(format!("{} is not valid JSON: {e}", path.display()))
    })
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| Error::failed_precondition(format!("reading {}: {e}", path.display())))
}
