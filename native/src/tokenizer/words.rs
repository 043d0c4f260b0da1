//! The word-length bound: the longest piece of text an encoder has to take in one go.
//!
//! Byte-pair encoding works word by word, and one word cannot be split without changing its ids,
//! so a word of megabytes is megabytes of uninterruptible work (seconds of CPU). The
//! pre-tokenizers that split words (byte-level regexes, whitespace and digit splits) keep a word
//! inside one run of characters of a single class (letters with their marks, digits, whitespace,
//! everything else), give or take one leading character, so the longest such run bounds the
//! longest word. A tokenizer that does not split (Metaspace with `split: false`, Mistral v3's) takes
//! a whole text as one word; the chunker cuts it at spaces between ASCII characters where the
//! vocabulary allows (see [`super::chunks`]), and only `--max-text-chars` bounds a text without
//! them (documented with the flag). Measuring runs is one cheap
//! pass that stops at the first run over the limit, so even a 50 MB single word is refused in
//! microseconds.

use crate::error::{Error, Result};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Letter,
    Digit,
    Space,
    Other,
}

impl Class {
    fn of(c: char) -> Class {
        if c.is_ascii() {
            return match c {
                'a'..='z' | 'A'..='Z' => Class::Letter,
                '0'..='9' => Class::Digit,
                ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c' => Class::Space,
                _ => Class::Other,
            };
        }
        if c.is_whitespace() {
            Class::Space
        } else if c.is_numeric() {
            Class::Digit
        } else if c.is_alphabetic() || is_mark(c) {
            Class::Letter
        } else {
            Class::Other
        }
    }

    fn name(self) -> &'static str {
        match self {
            Class::Letter => "letters",
            Class::Digit => "digits",
            Class::Space => "whitespace characters",
            Class::Other => "symbols",
        }
    }
}

/// Combining marks (the common blocks): they extend the letter before them.
fn is_mark(c: char) -> bool {
    matches!(c as u32, 0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
}

/// Fails when `text` has a run of more than `limit` characters of one class, naming where it starts
/// (in characters) and the flag that sets the limit.
pub(crate) fn check_word_lengths(text: &str, limit: usize) -> Result<()> {
    // A text no longer than the limit cannot hold a longer run.
    if text.len() <= limit {
        return Ok(());
    }
    let mut run_class = None;
    let mut run_len = 0usize;
    let mut run_start = 0usize;
    for (chars, c) in text.chars().enumerate() {
        let class = Class::of(c);
        if Some(class) == run_class {
            run_len += 1;
            if run_len > limit {
                return Err(Error::resource_exhausted(format!(
                    "a run of more than {limit} {} starting at character {run_start} is longer than the longest \
                     word the server encodes ({limit} characters, --max-word-chars)",
                    class.name()
                )));
            }
        } else {
            run_class = Some(class);
            run_len = 1;
            run_start = chars;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_run_of_one_class_is_refused_naming_where_it_starts() {
        let text = format!("ab 12 {}", "x".repeat(11));
        let err = check_word_lengths(&text, 10).unwrap_err();
        assert!(
            err.message().contains("starting at character 6"),
            "{}",
            err.message()
        );
        assert!(err.message().contains("--max-word-chars"));
        assert!(check_word_lengths(&text, 11).is_ok());
    }

    #[test]
    fn alternating_classes_never_make_a_long_run() {
        let base64ish = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ/+==".repeat(1000);
        assert!(check_word_lengths(&base64ish, 100).is_ok());
        assert!(check_word_lengths(&"a é ١٢ ".repeat(10_000), 5).is_ok());
        assert!(
            check_word_lengths(&"e\u{301}".repeat(6), 11).is_err(),
            "marks extend letters"
        );
    }
}
