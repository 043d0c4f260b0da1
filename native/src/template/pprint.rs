//! Jinja2's `pprint` filter: Python's `pprint.pformat(value)` (width 80, indent 1, dict keys
//! sorted). minijinja's `pprint` writes Rust-style debug output over several lines
//! (`{\n    'b': 1,\n}`) where Python writes `{'b': 1}`.
//!
//! `pformat` writes `repr(value)` (with every dict's keys sorted) when it fits in the width left;
//! otherwise a dict, list or tuple puts one item per line, indented by one space per level (a
//! dict's value also by its key's width), and a string is cut at whitespace into several literals
//! (in parentheses at the top level). Followed as CPython 3.11's `PrettyPrinter._format` does it.

use std::cmp::Ordering;

use minijinja::value::ValueKind;
use minijinja::{Error, ErrorKind, Value};

use super::{pydict, pyformat, pyjson, pystr};

const WIDTH: usize = 80;

/// Nesting deeper than this is written as `...` (Python would stop at its recursion limit).
const MAX_DEPTH: usize = 512;

/// `pprint.pformat(value)`.
pub fn pprint(value: &Value) -> Result<Value, Error> {
    let mut p = Printer {
        out: String::new(),
        limit: super::env::output_limit(),
    };
    p.format(value, 0, 0, 0)?;
    Ok(Value::from(p.out))
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// Python's `<` between two dict keys where it is defined (numbers with numbers, strings with
/// strings); `None` where Python raises TypeError.
fn python_lt(a: &Value, b: &Value) -> Option<bool> {
    let numeric = |v: &Value| matches!(v.kind(), ValueKind::Number | ValueKind::Bool);
    if (numeric(a) && numeric(b))
        || (a.kind() == ValueKind::String && b.kind() == ValueKind::String)
    {
        return Some(a < b);
    }
    None
}

/// `str(type(value))`, by which `_safe_key` orders keys Python cannot compare.
fn type_name(value: &Value) -> &'static str {
    match value.kind() {
        ValueKind::None => "<class 'NoneType'>",
        ValueKind::Bool => "<class 'bool'>",
        ValueKind::Number if value.is_integer() => "<class 'int'>",
        ValueKind::Number => "<class 'float'>",
        ValueKind::String => "<class 'str'>",
        ValueKind::Seq if value.is_tuple() => "<class 'tuple'>",
        _ => "<class 'object'>",
    }
}

/// `sorted(d.items(), key=_safe_tuple)`'s order of two keys.
fn key_order(a: &Value, b: &Value) -> Ordering {
    let lt = |x: &Value, y: &Value| python_lt(x, y).unwrap_or_else(|| type_name(x) < type_name(y));
    if lt(a, b) {
        Ordering::Less
    } else if lt(b, a) {
        Ordering::Greater
    } else {
        Ordering::Equal
    }
}

/// A dict's items, sorted by key.
fn sorted_items(value: &Value) -> Vec<(Value, Value)> {
    let mut items: Vec<(Value, Value)> = value
        .try_iter()
        .into_iter()
        .flatten()
        .map(|k| {
            let v = value.get_item(&k).unwrap_or_default();
            (k, v)
        })
        .collect();
    items.sort_by(|a, b| key_order(&a.0, &b.0));
    items
}

fn is_dict(value: &Value) -> bool {
    value.kind() == ValueKind::Map && pydict::is_dict(value)
}

/// `PrettyPrinter._safe_repr`: `repr`, with dict keys sorted at every level.
fn safe_repr(value: &Value, out: &mut String, depth: usize) {
    if depth > MAX_DEPTH {
        out.push_str("...");
        return;
    }
    if is_dict(value) {
        out.push('{');
        for (i, (k, v)) in sorted_items(value).iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            safe_repr(k, out, depth + 1);
            out.push_str(": ");
            safe_repr(v, out, depth + 1);
        }
        out.push('}');
        return;
    }
    if value.kind() == ValueKind::Seq {
        let tuple = value.is_tuple();
        let items: Vec<Value> = value.try_iter().into_iter().flatten().collect();
        out.push(if tuple { '(' } else { '[' });
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            safe_repr(item, out, depth + 1);
        }
        if tuple && items.len() == 1 {
            out.push(',');
        }
        out.push(if tuple { ')' } else { ']' });
        return;
    }
    match value.kind() {
        ValueKind::String => pystr::write_repr(value.as_str().unwrap_or_default(), out),
        ValueKind::Number | ValueKind::Bool | ValueKind::None => {
            out.push_str(&pyjson::py_str(value))
        }
        _ => out.push_str(&pyformat::py_repr(value)),
    }
}

fn repr(value: &Value) -> String {
    let mut out = String::new();
    safe_repr(value, &mut out, 0);
    out
}

struct Printer {
    out: String,
    /// The render's output limit: a longer result could never be written.
    limit: usize,
}

impl Printer {
    /// `PrettyPrinter._format`.
    fn format(
        &mut self,
        value: &Value,
        indent: usize,
        allowance: usize,
        level: usize,
    ) -> Result<(), Error> {
        if self.out.len() > self.limit {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "pprint: the result passes the rendered prompt's output limit",
            )
            .with_source(super::env::OutputLimitReached));
        }
        let rep = repr(value);
        let fits = chars(&rep) <= WIDTH.saturating_sub(indent + allowance);
        if fits || level > MAX_DEPTH {
            self.out.push_str(&rep);
            return Ok(());
        }
        if is_dict(value) {
            self.out.push('{');
            self.dict_items(&sorted_items(value), indent, allowance + 1, level + 1)?;
            self.out.push('}');
        } else if value.kind() == ValueKind::Seq {
            let items: Vec<Value> = value.try_iter()?.collect();
            if value.is_tuple() {
                let end = if items.len() == 1 { ",)" } else { ")" };
                self.out.push('(');
                self.items(&items, indent, allowance + end.len(), level + 1)?;
                self.out.push_str(end);
            } else {
                self.out.push('[');
                self.items(&items, indent, allowance + 1, level + 1)?;
                self.out.push(']');
            }
        } else if value.kind() == ValueKind::String {
            self.string(
                value.as_str().unwrap_or_default(),
                indent,
                allowance,
                level + 1,
            );
        } else {
            self.out.push_str(&rep);
        }
        Ok(())
    }

    /// `_format_dict_items`.
    fn dict_items(
        &mut self,
        items: &[(Value, Value)],
        indent: usize,
        allowance: usize,
        level: usize,
    ) -> Result<(), Error> {
        let indent = indent + 1;
        for (i, (k, v)) in items.iter().enumerate() {
            let last = i + 1 == items.len();
            let key = repr(k);
            self.out.push_str(&key);
            self.out.push_str(": ");
            self.format(
                v,
                indent + chars(&key) + 2,
                if last { allowance } else { 1 },
                level,
            )?;
            if !last {
                self.newline(indent);
            }
        }
        Ok(())
    }

    /// `_format_items` (not compact).
    fn items(
        &mut self,
        items: &[Value],
        indent: usize,
        allowance: usize,
        level: usize,
    ) -> Result<(), Error> {
        let indent = indent + 1;
        for (i, item) in items.iter().enumerate() {
            let last = i + 1 == items.len();
            if i > 0 {
                self.newline(indent);
            }
            self.format(item, indent, if last { allowance } else { 1 }, level)?;
        }
        Ok(())
    }

    fn newline(&mut self, indent: usize) {
        self.out.push_str(",\n");
        self.out.extend(std::iter::repeat_n(' ', indent));
    }

    /// `_pprint_str`: each line (kept ends) as one literal if it fits, else cut after runs of
    /// whitespace into literals that fit.
    fn string(&mut self, s: &str, mut indent: usize, mut allowance: usize, level: usize) {
        let quote = |t: &str| {
            let mut q = String::new();
            pystr::write_repr(t, &mut q);
            q
        };
        if s.is_empty() {
            self.out.push_str("''");
            return;
        }
        if level == 1 {
            indent += 1;
            allowance += 1;
        }
        let max_width = WIDTH.saturating_sub(indent) as isize;
        let mut max_width1 = max_width;
        let lines = pystr::splitlines(s, true);
        let mut literals: Vec<String> = Vec::new();
        let mut rep = String::new();
        for (i, line) in lines.iter().enumerate() {
            rep = quote(line);
            let last_line = i + 1 == lines.len();
            if last_line {
                max_width1 -= allowance as isize;
            }
            if chars(&rep) as isize <= max_width1 {
                literals.push(rep.clone());
                continue;
            }
            let parts = whitespace_parts(line);
            let mut max_width2 = max_width;
            let mut current = String::new();
            for (j, part) in parts.iter().enumerate() {
                let candidate = format!("{current}{part}");
                if j + 1 == parts.len() && last_line {
                    max_width2 -= allowance as isize;
                }
                if chars(&quote(&candidate)) as isize > max_width2 {
                    if !current.is_empty() {
                        literals.push(quote(&current));
                    }
                    current = part.to_string();
                } else {
                    current = candidate;
                }
            }
            if !current.is_empty() {
                literals.push(quote(&current));
            }
        }
        if literals.len() == 1 {
            // Python writes the last line's repr here (the same text).
            self.out.push_str(&rep);
            return;
        }
        if level == 1 {
            self.out.push('(');
        }
        for (i, literal) in literals.iter().enumerate() {
            if i > 0 {
                self.out.push('\n');
                self.out.extend(std::iter::repeat_n(' ', indent));
            }
            self.out.push_str(literal);
        }
        if level == 1 {
            self.out.push(')');
        }
    }
}

/// `re.findall(r'\S*\s*', line)` without its final empty match: runs of non-whitespace, each with
/// the whitespace after it.
fn whitespace_parts(line: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = line;
    while !rest.is_empty() {
        let word = rest.find(pystr::is_space).unwrap_or(rest.len());
        let space = rest[word..]
            .find(|c: char| !pystr::is_space(c))
            .map_or(rest.len(), |i| word + i);
        parts.push(&rest[..space]);
        rest = &rest[space..];
    }
    parts
}
