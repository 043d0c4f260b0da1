//! Jinja2's `wordwrap` filter, which minijinja lacks: each line of the text (Python's
//! `splitlines`) wrapped by Python's `textwrap.wrap(line, width, expand_tabs=False,
//! replace_whitespace=False, break_long_words, break_on_hyphens)`, the pieces joined with
//! `wrapstring` (`"\n"`).
//!
//! `textwrap` cuts a line into chunks with a regular expression (`TextWrapper.wordsep_re`, or
//! `wordsep_simple_re` without `break_on_hyphens`) that needs look-behind, which Rust's regex
//! crates lack; [`chunks`] walks the same alternatives by hand. Then chunks fill lines greedily
//! (`_wrap_chunks`), whitespace chunks dropped at line ends, and a chunk longer than the width is
//! cut (`_handle_long_word`, after its last hyphen that fits when `break_on_hyphens`).

use minijinja::value::{Rest, ValueKind, ValueOrKwargs};
use minijinja::{Error, ErrorKind, State, Value};

use super::pyfilters::params;
use super::pystr;

/// `textwrap._whitespace`: the only characters `textwrap` splits at.
fn is_ws(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\x0b' | '\x0c' | '\r' | ' ')
}

/// `[^\d\W]`: a word character that is not a digit.
fn is_letter(c: char) -> bool {
    pystr::is_word(c) && !pystr::is_decimal(c)
}

/// `[\w!"\'&.,?]`.
fn is_word_punct(c: char) -> bool {
    pystr::is_word(c) || matches!(c, '!' | '"' | '\'' | '&' | '.' | ',' | '?')
}

/// `-{2,}\w` at `at` (the hyphen run taken whole, as the greedy regex ends up doing).
fn em_dash_at(t: &[char], at: usize) -> Option<usize> {
    let run = t[at..].iter().take_while(|&&c| c == '-').count();
    (run >= 2 && t.get(at + run).is_some_and(|&c| pystr::is_word(c))).then_some(run)
}

/// `TextWrapper._split(text)`: whitespace runs and words, with `break_on_hyphens` also an em-dash
/// (`--` between words) and the pieces of hyphenated words (`well-` `known`).
fn chunks(t: &[char], break_on_hyphens: bool) -> Vec<&[char]> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if is_ws(t[i]) {
            let end = i + t[i..].iter().take_while(|&&c| is_ws(c)).count();
            out.push(&t[i..end]);
            i = end;
            continue;
        }
        if !break_on_hyphens {
            let end = i + t[i..].iter().take_while(|&&c| !is_ws(c)).count();
            out.push(&t[i..end]);
            i = end;
            continue;
        }
        // `(?<=wp) -{2,} (?=\w)`
        if t[i] == '-' && i > 0 && is_word_punct(t[i - 1]) {
            if let Some(run) = em_dash_at(t, i) {
                out.push(&t[i..i + run]);
                i += run;
                continue;
            }
        }
        // `nws+?` followed by a hyphen inside a word, the end of the word, or an em-dash.
        let mut j = i + 1;
        let end = loop {
            let hyphen_in_word = t.get(j) == Some(&'-')
                && ((j >= 2 && is_letter(t[j - 2]) && is_letter(t[j - 1]))
                    || (j >= 3 && is_letter(t[j - 3]) && t[j - 2] == '-' && is_letter(t[j - 1])))
                && t.get(j + 1).is_some_and(|&c| is_letter(c))
                && (t.get(j + 2).is_some_and(|&c| is_letter(c))
                    || (t.get(j + 2) == Some(&'-') && t.get(j + 3).is_some_and(|&c| is_letter(c))));
            if hyphen_in_word {
                break j + 1;
            }
            if j == t.len() || is_ws(t[j]) {
                break j;
            }
            if is_word_punct(t[j - 1]) && em_dash_at(t, j).is_some() {
                break j;
            }
            j += 1;
        };
        out.push(&t[i..end]);
        i = end;
    }
    out
}

fn is_blank(chunk: &[char]) -> bool {
    chunk.iter().all(|&c| pystr::is_space(c))
}

/// `TextWrapper._wrap_chunks` with no indents, no line limit and `drop_whitespace`.
fn wrap_chunks(
    mut chunks: Vec<Vec<char>>,
    width: usize,
    break_long_words: bool,
    break_on_hyphens: bool,
) -> Vec<String> {
    let mut lines = Vec::new();
    chunks.reverse();
    while !chunks.is_empty() {
        let mut line: Vec<Vec<char>> = Vec::new();
        let mut len = 0;
        if !lines.is_empty() && chunks.last().is_some_and(|c| is_blank(c)) {
            chunks.pop();
        }
        while let Some(next) = chunks.last() {
            if len + next.len() <= width {
                len += next.len();
                line.push(chunks.pop().expect("just seen"));
            } else {
                break;
            }
        }
        if chunks.last().is_some_and(|c| c.len() > width) {
            // `_handle_long_word`
            let space_left = if width < 1 { 1 } else { width - len };
            if break_long_words {
                let chunk = chunks.pop().expect("just seen");
                let mut end = space_left;
                if break_on_hyphens && chunk.len() > space_left {
                    if let Some(hyphen) = chunk[..space_left].iter().rposition(|&c| c == '-') {
                        if hyphen > 0 && chunk[..hyphen].iter().any(|&c| c != '-') {
                            end = hyphen + 1;
                        }
                    }
                }
                line.push(chunk[..end].to_vec());
                chunks.push(chunk[end..].to_vec());
            } else if line.is_empty() {
                line.push(chunks.pop().expect("just seen"));
            }
        }
        if line.last().is_some_and(|c| is_blank(c)) {
            line.pop();
        }
        if !line.is_empty() {
            lines.push(line.concat().into_iter().collect());
        }
    }
    lines
}

/// `textwrap.wrap(text, width, ...)` as Jinja2's `wordwrap` calls it.
fn wrap(text: &str, width: usize, break_long_words: bool, break_on_hyphens: bool) -> Vec<String> {
    let t: Vec<char> = text.chars().collect();
    let pieces = chunks(&t, break_on_hyphens)
        .into_iter()
        .map(<[char]>::to_vec)
        .collect();
    wrap_chunks(pieces, width, break_long_words, break_on_hyphens)
}

/// `do_wordwrap(s, width=79, break_long_words=True, wrapstring=None, break_on_hyphens=True)`.
pub fn wordwrap(state: &State, value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let names = [
        "width",
        "break_long_words",
        "wrapstring",
        "break_on_hyphens",
    ];
    let mut p = params("wordwrap", &names, args)?.into_iter();
    let width = match p.next().flatten() {
        None => 79,
        Some(w) if w.kind() == ValueKind::Bool => w.is_true() as i64,
        Some(w) if w.is_integer() => i64::try_from(w)?,
        Some(w) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("wordwrap: width must be an int, got {}", w.kind()),
            ))
        }
    };
    let break_long_words = p.next().flatten().is_none_or(|v| v.is_true());
    let wrapstring = match p.next().flatten().filter(|v| !v.is_none()) {
        None => "\n".to_string(),
        Some(w) => w.as_str().map(str::to_string).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidOperation,
                "wordwrap: wrapstring must be a string",
            )
        })?,
    };
    let break_on_hyphens = p.next().flatten().is_none_or(|v| v.is_true());
    let Some(text) = value.as_str().filter(|_| value.kind() == ValueKind::String) else {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("wordwrap: expected a string, got {}", value.kind()),
        ));
    };
    if width <= 0 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("invalid width {width} (must be > 0)"),
        ));
    }
    state.consume_fuel(text.len() as u64 / 16)?;
    let paragraphs: Vec<Vec<String>> = pystr::splitlines(text, false)
        .into_iter()
        .map(|line| wrap(line, width as usize, break_long_words, break_on_hyphens))
        .collect();
    // One `wrapstring` between any two lines: a long one times many lines could pass the
    // output limit (and memory) before the writer could refuse it.
    let lines: usize = paragraphs.iter().map(|p| p.len().max(1)).sum();
    super::env::check_result_size("wordwrap", text.len() + lines * wrapstring.len())?;
    let joined: Vec<String> = paragraphs.iter().map(|p| p.join(&wrapstring)).collect();
    Ok(Value::from(joined.join(&wrapstring)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str) -> Vec<String> {
        let t: Vec<char> = s.chars().collect();
        chunks(&t, true)
            .iter()
            .map(|c| c.iter().collect())
            .collect()
    }

    // Expected values: `TextWrapper()._split(s)` in CPython 3.11.
    #[test]
    fn chunks_as_textwrap_splits() {
        assert_eq!(
            split("Hello there -- you goof-ball, use the -b option!"),
            [
                "Hello", " ", "there", " ", "--", " ", "you", " ", "goof-", "ball,", " ", "use",
                " ", "the", " ", "-b", " ", "option!"
            ]
        );
        assert_eq!(
            split("word--next a-b-c ab-cd-ef x--"),
            ["word", "--", "next", " ", "a-b-c", " ", "ab-", "cd-", "ef", " ", "x--"]
        );
        assert_eq!(split("12-34 a1-b2"), ["12-34", " ", "a1-b2"]);
    }
}
