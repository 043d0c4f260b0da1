//! Python literals of the pythonic call formats read as JSON text, resumably. A value the text
//! ends in is kept as the stack of what is open in it (containers and the string innermost), so
//! the next read continues it where it stopped: a long string nested in lists or dicts costs each
//! step its new text, not a reread from the value's start.

use crate::parse::json::push_json_string;
use crate::parse::schema::coerce_number;

/// A cursor over the text of a call list.
pub(super) struct P<'a> {
    pub(super) s: &'a str,
    pub(super) i: usize,
    /// `true`/`false`/`null` accepted beside `True`/`False`/`None` (OLMo 3).
    pub(super) json_literals: bool,
}

/// `Err(true)` = need more input, `Err(false)` = syntax error.
pub(super) type Res<T> = Result<T, bool>;

impl<'a> P<'a> {
    pub(super) fn peek(&self) -> Option<char> {
        self.s[self.i..].chars().next()
    }

    pub(super) fn ws(&mut self) {
        while let Some(c) = self.peek() {
            if matches!(c, ' ' | '\t' | '\n' | '\r') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    pub(super) fn expect_more<T>(&self) -> Res<T> {
        if self.i >= self.s.len() {
            Err(true)
        } else {
            Err(false)
        }
    }

    pub(super) fn ident(&mut self) -> Res<&'a str> {
        let start = self.i;
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == '_' || (c == '.' && self.i > start) {
                self.i += 1;
            } else {
                break;
            }
        }
        if self.i == start || self.s.as_bytes()[start].is_ascii_digit() {
            return if self.i == start {
                self.expect_more()
            } else {
                Err(false)
            };
        }
        if self.i == self.s.len() {
            return Err(true);
        }
        Ok(&self.s[start..self.i])
    }

    /// The rest of a string after its opening quote, `text` holding what was decoded before
    /// `self.i`. When the text ends first (`Err(true)`), `self.i` and `text` are left at the start
    /// of the last piece read, a point to continue from once more text arrives: that piece (an
    /// octal escape takes up to three digits) may read differently with what follows.
    pub(super) fn string_rest(&mut self, quote: char, raw: bool, text: &mut String) -> Res<String> {
        let mut last = (self.i, text.len());
        loop {
            if self.i >= self.s.len() {
                self.i = last.0;
                text.truncate(last.1);
                return Err(true);
            }
            last = (self.i, text.len());
            match self.string_piece(quote, raw, text) {
                Ok(true) => {
                    let mut out = String::new();
                    push_json_string(text, &mut out);
                    return Ok(out);
                }
                Ok(false) => {}
                Err(more) => {
                    if more {
                        self.i = last.0;
                        text.truncate(last.1);
                    }
                    return Err(more);
                }
            }
        }
    }

    /// One character or escape of a string (there is input at `self.i`): `true` when it is the
    /// closing quote.
    fn string_piece(&mut self, quote: char, raw: bool, text: &mut String) -> Res<bool> {
        let c = self.peek().expect("input");
        self.i += c.len_utf8();
        if c == quote {
            return Ok(true);
        }
        if c == '\n' {
            return Err(false);
        }
        if c != '\\' {
            text.push(c);
            return Ok(false);
        }
        let Some(e) = self.peek() else {
            return Err(true);
        };
        self.i += e.len_utf8();
        if raw {
            text.push('\\');
            text.push(e);
            return Ok(false);
        }
        match e {
            '\n' => {}
            '\\' | '\'' | '"' => text.push(e),
            'n' => text.push('\n'),
            'r' => text.push('\r'),
            't' => text.push('\t'),
            'b' => text.push('\u{8}'),
            'f' => text.push('\u{c}'),
            'v' => text.push('\u{b}'),
            'a' => text.push('\u{7}'),
            '0'..='7' => {
                let mut value = e.to_digit(8).expect("octal");
                for _ in 0..2 {
                    match self.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            value = value * 8 + d;
                            self.i += 1;
                        }
                        None => break,
                    }
                }
                text.push(char::from_u32(value).ok_or(false)?);
            }
            'x' | 'u' | 'U' => {
                let n = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let digits = self
                    .s
                    .get(self.i..self.i + n)
                    .ok_or(self.i + n > self.s.len())?;
                let value = u32::from_str_radix(digits, 16).map_err(|_| false)?;
                if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(false);
                }
                self.i += n;
                text.push(char::from_u32(value).ok_or(false)?);
            }
            other => {
                text.push('\\');
                text.push(other);
            }
        }
        Ok(false)
    }

    pub(super) fn scalar(&mut self) -> Res<String> {
        let start = self.i;
        while let Some(c) = self.peek() {
            let after_exp = self.i > start && matches!(self.s.as_bytes()[self.i - 1], b'e' | b'E');
            if c.is_ascii_alphanumeric()
                || c == '_'
                || c == '.'
                || (matches!(c, '+' | '-') && (self.i == start || after_exp))
            {
                self.i += 1;
            } else {
                break;
            }
        }
        if self.i == self.s.len() {
            return Err(true);
        }
        let word = &self.s[start..self.i];
        match word {
            "True" => Ok("true".into()),
            "False" => Ok("false".into()),
            "None" => Ok("null".into()),
            "true" | "false" | "null" if self.json_literals => Ok(word.into()),
            _ => coerce_number(&word.replace('_', "")).ok_or(false),
        }
    }
}

/// What is open in a value the text ended in; a stack of them, innermost last, holds the value.
#[derive(Debug)]
pub(super) enum Open {
    /// A string after its opening quote: the text decoded so far.
    Str {
        quote: char,
        raw: bool,
        text: String,
    },
    /// A list or tuple: its JSON so far (`[` and the complete items) and whether an item was the
    /// last thing read (a `,` or the close comes next).
    Seq {
        close: char,
        json: String,
        after_item: bool,
    },
    /// A dict: its JSON so far (`{` and the complete members, then the key of the one being read)
    /// and what comes next.
    Dict { json: String, next: DictNext },
}

/// What a dict reads next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DictNext {
    /// A key (while its string is read, above the dict) or the `}`.
    Key,
    /// The `:` after the key.
    Colon,
    /// The member's value (while it is read, above the dict).
    Value,
    /// A `,` or the `}`.
    After,
}

/// What the reader does next.
enum Step {
    /// Read a new value at the cursor.
    Start,
    /// Continue the innermost open value.
    Continue,
    /// A value is complete (JSON text): it goes to the one around it, or is the result.
    Deliver(String),
}

/// Reads a value at `p.i`, or continues the one `stack` holds from `p.i`: its JSON text. When the
/// text ends first (`Err(true)`), `stack` and `p.i` are a point to continue from once more text
/// arrives (an empty stack: the value's start); nothing before it depends on what follows.
pub(super) fn read_value(p: &mut P<'_>, stack: &mut Vec<Open>) -> Res<String> {
    let mut step = if stack.is_empty() {
        Step::Start
    } else {
        Step::Continue
    };
    loop {
        step = match step {
            Step::Start => start(p, stack)?,
            Step::Continue => continue_open(p, stack)?,
            Step::Deliver(value) => match stack.last_mut() {
                None => return Ok(value),
                Some(open) => {
                    open.take(value);
                    Step::Continue
                }
            },
        };
    }
}

/// The start of a value: a scalar is read whole (a cut one is read again from its start), a
/// string or container is opened.
fn start(p: &mut P<'_>, stack: &mut Vec<Open>) -> Res<Step> {
    p.ws();
    let Some(c) = p.peek() else {
        return Err(true);
    };
    let next = p.s[p.i + c.len_utf8()..].chars().next();
    let open = match c {
        '\'' | '"' => Open::string(c, false),
        'r' | 'R' if matches!(next, Some('\'' | '"')) => {
            p.i += 1;
            Open::string(next.expect("a quote"), true)
        }
        'r' | 'R' if next.is_none() => return Err(true),
        '[' | '(' => Open::Seq {
            close: if c == '[' { ']' } else { ')' },
            json: "[".into(),
            after_item: false,
        },
        '{' => Open::Dict {
            json: "{".into(),
            next: DictNext::Key,
        },
        _ => {
            let at = p.i;
            return p.scalar().map(Step::Deliver).inspect_err(|_| p.i = at);
        }
    };
    p.i += 1;
    stack.push(open);
    Ok(Step::Continue)
}

/// Continues the innermost open value from `p.i`.
fn continue_open(p: &mut P<'_>, stack: &mut Vec<Open>) -> Res<Step> {
    let done = match stack.last_mut().expect("an open value") {
        Open::Str { quote, raw, text } => p.string_rest(*quote, *raw, text)?,
        Open::Seq {
            close, after_item, ..
        } => {
            p.ws();
            let c = p.peek().ok_or(true)?;
            if c != *close {
                if !*after_item {
                    return Ok(Step::Start);
                }
                if c != ',' {
                    return Err(false);
                }
                p.i += 1;
                *after_item = false;
                return Ok(Step::Continue);
            }
            p.i += 1;
            "]".into()
        }
        Open::Dict { next, .. } => {
            let next = *next;
            match dict_step(p, stack, next)? {
                Some(step) => return Ok(step),
                None => "}".into(),
            }
        }
    };
    Ok(Step::Deliver(
        stack.pop().expect("an open value").close(done),
    ))
}

/// One step of the innermost open value, a dict reading `next`: the step after it, or `None`
/// when the dict closed.
fn dict_step(p: &mut P<'_>, stack: &mut Vec<Open>, next: DictNext) -> Res<Option<Step>> {
    if next == DictNext::Value {
        return Ok(Some(Step::Start));
    }
    p.ws();
    let c = p.peek().ok_or(true)?;
    let then = match (next, c) {
        (DictNext::Key | DictNext::After, '}') => {
            p.i += 1;
            return Ok(None);
        }
        (DictNext::Key, '\'' | '"') => {
            p.i += 1;
            stack.push(Open::string(c, false));
            return Ok(Some(Step::Continue));
        }
        (DictNext::Colon, ':') => DictNext::Value,
        (DictNext::After, ',') => DictNext::Key,
        _ => return Err(false),
    };
    p.i += 1;
    if let Some(Open::Dict { next, .. }) = stack.last_mut() {
        *next = then;
    }
    Ok(Some(Step::Continue))
}

impl Open {
    fn string(quote: char, raw: bool) -> Open {
        Open::Str {
            quote,
            raw,
            text: String::new(),
        }
    }

    /// Takes the complete value read inside it: an item, a dict's key or a member's value.
    fn take(&mut self, value: String) {
        match self {
            Open::Seq {
                json, after_item, ..
            } if !*after_item => {
                if json.len() > 1 {
                    json.push_str(", ");
                }
                json.push_str(&value);
                *after_item = true;
            }
            Open::Dict { json, next } => {
                match *next {
                    DictNext::Key if json.len() > 1 => json.push_str(", "),
                    DictNext::Value => json.push_str(": "),
                    _ => {}
                }
                json.push_str(&value);
                *next = match *next {
                    DictNext::Key => DictNext::Colon,
                    _ => DictNext::After,
                };
            }
            _ => unreachable!("only a container takes a value"),
        }
    }

    /// Its JSON text once it is complete: a string's (`text` being its JSON), or a container's
    /// with its closing `close`.
    fn close(self, close: String) -> String {
        match self {
            Open::Str { .. } => close,
            Open::Seq { mut json, .. } | Open::Dict { mut json, .. } => {
                json.push_str(&close);
                json
            }
        }
    }
}
