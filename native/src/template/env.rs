//! The minijinja environment a chat template runs in: transformers' Jinja2 settings and functions,
//! spelled the way Python spells values.
//!
//! transformers renders with `ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)`
//! plus loop controls, and adds `raise_exception`, `strftime_now` and its own `tojson`. minijinja
//! with Python compatibility (`pycompat` methods, `True`/`None` spelling) covers the language; this
//! module adds those functions and fixes the places where minijinja's spelling still differs from
//! Python's (floats, the `iterable` test). Lists in the template are immutable, as in the sandbox:
//! `list.append` fails in both.

use std::fmt::Write as _;
use std::sync::Arc;

use minijinja::value::{Rest, ValueKind, ValueOrKwargs};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Output, State, Value};

use super::pyjson::{self, DumpOptions};
use super::{pydict, pyfilters, pyhtml, pynum, pystr, pytests, textwrap};

/// The template's name inside its environment (it appears in error locations).
pub const TEMPLATE_NAME: &str = "chat_template";

/// Limits that keep a template from running away.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// minijinja fuel: roughly one unit per instruction executed (and per 64 bytes created).
    pub fuel: u64,
    /// Maximum nesting of macro calls, includes and recursive loops.
    pub recursion: usize,
    /// Maximum rendered prompt size in bytes.
    pub max_output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel: 50_000_000,
            recursion: 100,
            max_output_bytes: 64 << 20,
        }
    }
}

/// What `strftime_now` reads.
#[derive(Debug, Clone, Copy, Default)]
pub enum Clock {
    /// The current local time, as transformers' `datetime.now()`.
    #[default]
    Now,
    /// A fixed instant (seconds since the epoch, shown in UTC so that a test's dates do not depend
    /// on the machine's time zone); tests pin dates with it.
    Fixed(i64),
}

/// Marks the error `raise_exception` produced, so the caller can pass the template's own message on.
#[derive(Debug)]
pub struct RaisedByTemplate(pub String);

impl std::fmt::Display for RaisedByTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedByTemplate {}

/// Marks the error of a filter whose result alone would pass the render's output limit
/// ([`limit_output`]): `tojson(indent=4)` of values nested 250 deep wrote 7.9 MB from a 16 KB
/// request, built whole in memory before the output writer could refuse it.
#[derive(Debug)]
pub struct OutputLimitReached;

impl std::fmt::Display for OutputLimitReached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the rendered prompt passes the output limit")
    }
}

impl std::error::Error for OutputLimitReached {}

thread_local! {
    /// The output limit of the render running on this thread (minijinja renders on the
    /// caller's thread), for filters that build large strings.
    static OUTPUT_LIMIT: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

/// Sets this thread's output limit until the returned guard drops.
pub fn limit_output(bytes: usize) -> OutputLimitScope {
    OutputLimitScope(OUTPUT_LIMIT.with(|limit| limit.replace(bytes)))
}

/// The output limit of the render running on this thread.
pub fn output_limit() -> usize {
    OUTPUT_LIMIT.with(|limit| limit.get())
}

/// Fails with [`OutputLimitReached`] when a filter's result of `len` bytes alone would pass the
/// render's output limit: it could never be written, and building it could exhaust memory
/// (`'x'|center(10**9)`, `'%*d'|format(10**9, 1)`).
pub fn check_result_size(filter: &str, len: usize) -> Result<(), Error> {
    if len > output_limit() {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("{filter}: the result passes the rendered prompt's output limit"),
        )
        .with_source(OutputLimitReached));
    }
    Ok(())
}

/// Filters, tests and globals minijinja (and minijinja-contrib) define and Jinja2 does not. A
/// template that calls one inside an `if` compiles in Jinja2 and fails when the branch runs
/// (outside an `if` the analysis refuses the template); without them minijinja fails the same way.
const NOT_JINJA2_FILTERS: &[&str] = &["split", "lines", "bool", "chain", "zip", "pluralize"];
const NOT_JINJA2_TESTS: &[&str] = &["startingwith", "endingwith", "int", "safe"];
const NOT_JINJA2_GLOBALS: &[&str] = &["debug"];

/// Restores the previous output limit when dropped.
pub struct OutputLimitScope(usize);

impl Drop for OutputLimitScope {
    fn drop(&mut self) {
        OUTPUT_LIMIT.with(|limit| limit.set(self.0));
    }
}

/// An environment holding `source` (already rewritten by `compat`) as [`TEMPLATE_NAME`].
pub fn build(source: String, limits: Limits, clock: Clock) -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    minijinja_contrib::add_to_environment(&mut env);
    env.set_unknown_method_callback(super::pymethods::unknown_method_callback);
    let syntax = env
        .syntax()
        .to_builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()?;
    env.set_syntax(syntax);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_fuel(Some(limits.fuel));
    env.set_recursion_limit(limits.recursion);
    env.set_formatter(python_formatter);
    for name in NOT_JINJA2_FILTERS {
        env.remove_filter(name);
    }
    for name in NOT_JINJA2_TESTS {
        env.remove_test(name);
    }
    for name in NOT_JINJA2_GLOBALS {
        env.remove_global(name);
    }
    env.add_filter("tojson", tojson);
    env.add_filter("string", |value: &Value| Value::from(pyjson::py_str(value)));
    env.add_filter("indent", indent);
    env.add_filter("trim", pyfilters::trim);
    env.add_filter("wordcount", pyfilters::wordcount);
    env.add_filter("dictsort", pyfilters::dictsort);
    env.add_filter("sort", pyfilters::sort);
    env.add_filter("unique", pyfilters::unique);
    env.add_filter("default", pyfilters::default);
    env.add_filter("d", pyfilters::default);
    env.add_filter("attr", pyfilters::attr);
    env.add_filter("center", pyfilters::center);
    env.add_filter("truncate", pyfilters::truncate);
    env.add_filter("filesizeformat", pyfilters::filesizeformat);
    env.add_filter("format", pyfilters::format);
    env.add_filter("pprint", super::pprint::pprint);
    env.add_filter("wordwrap", textwrap::wordwrap);
    env.add_filter("escape", pyhtml::escape);
    env.add_filter("e", pyhtml::escape);
    env.add_filter("forceescape", pyhtml::forceescape);
    env.add_filter("striptags", pyhtml::striptags);
    env.add_filter("xmlattr", pyhtml::xmlattr);
    env.add_filter("urlencode", pyhtml::urlencode);
    env.add_filter("int", pynum::int);
    env.add_filter("float", pynum::float);
    env.add_test("iterable", pytests::is_iterable);
    env.add_test("callable", pytests::is_callable);
    env.add_test("sequence", pytests::is_sequence);
    env.add_test("mapping", pytests::is_mapping);
    env.add_test("lower", pytests::is_lower);
    env.add_test("upper", pytests::is_upper);
    env.add_test("odd", pytests::is_odd);
    env.add_test("even", pytests::is_even);
    env.add_test("divisibleby", pytests::is_divisibleby);
    env.add_function("cycler", Cycler::value);
    env.add_global("dict", pydict::template_dict());
    env.add_function("namespace", pydict::namespace);
    env.add_function("raise_exception", raise_exception);
    env.add_function(
        super::compat::NONE_ITERATION_FUNCTION,
        || -> Result<Value, Error> {
            Err(Error::new(
                ErrorKind::InvalidOperation,
                "'NoneType' object is not iterable",
            ))
        },
    );
    let clock = Arc::new(clock);
    env.add_function("strftime_now", move |format: &str| {
        strftime_now(&clock, format)
    });
    env.add_template_owned(TEMPLATE_NAME, source)?;
    Ok(env)
}

/// `{{ value }}`: Python's `str()` for floats, lists and dicts; minijinja's (already Python-like)
/// display otherwise.
fn python_formatter(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    if pyjson::needs_python_str(value) {
        out.write_str(&pyjson::py_str(value))
            .map_err(|_| Error::new(ErrorKind::WriteFailure, "write failed"))
    } else {
        minijinja::escape_formatter(out, state, value)
    }
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`:
/// positional arguments fill those parameters in order, as they do in Python
/// ([`pyfilters::params`]).
fn tojson(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let names = ["ensure_ascii", "indent", "separators", "sort_keys"];
    let mut p = pyfilters::params("tojson", &names, args)?.into_iter();
    let mut param = || p.next().flatten();
    let ensure_ascii = param().is_some_and(|v| v.is_true());
    let indent = match param() {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) if v.kind() == ValueKind::String => {
            Some(v.as_str().unwrap_or_default().to_string())
        }
        Some(v) => match i64::try_from(v.clone()) {
            // Python: an int indent is that many spaces (none when negative).
            Ok(n) => Some(" ".repeat(n.max(0) as usize)),
            Err(_) => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be an int or a string",
                ))
            }
        },
    };
    let separators = match param() {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => {
            let items: Vec<Value> = v.try_iter()?.collect();
            match items.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => Some((
                    a.as_str().unwrap_or_default().to_string(),
                    b.as_str().unwrap_or_default().to_string(),
                )),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be two strings",
                    ))
                }
            }
        }
    };
    let sort_keys = param().is_some_and(|v| v.is_true());
    let opts = DumpOptions {
        ensure_ascii,
        indent,
        separators,
        sort_keys,
    };
    pyjson::dumps(value, &opts).map(Value::from)
}

/// Jinja2's `indent(s, width=4, first=False, blank=False)`. Unlike minijinja's, it keeps a trailing
/// line break (`'{\n'|indent(4, first=true)` is `'    {\n'`), which Command R's template relies on.
fn indent(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let mut params = pyfilters::params("indent", &["width", "first", "blank"], args)?.into_iter();
    let Some(text) = value.as_str() else {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("indent: expected a string, got {}", value.kind()),
        ));
    };
    let indention = match params.next().flatten() {
        None => "    ".to_string(),
        Some(w) if w.kind() == ValueKind::String => w.as_str().unwrap_or_default().to_string(),
        Some(w) => {
            let width = i64::try_from(w)
                .map_err(|_| {
                    Error::new(
                        ErrorKind::InvalidOperation,
                        "indent: width must be an int or a string",
                    )
                })?
                .max(0) as usize;
            check_result_size("indent", width)?;
            " ".repeat(width)
        }
    };
    let first = params.next().flatten().is_some_and(|v| v.is_true());
    let blank = params.next().flatten().is_some_and(|v| v.is_true());
    // Jinja2 appends a newline before splitting, so a trailing line break survives.
    let padded = format!("{text}\n");
    let lines = pystr::splitlines(&padded, false);
    check_result_size("indent", text.len() + lines.len() * indention.len())?;
    let mut out = String::with_capacity(text.len() + lines.len() * indention.len());
    if blank {
        out.push_str(&lines.join(&format!("\n{indention}")));
    } else if let Some((head, rest)) = lines.split_first() {
        out.push_str(head);
        if !rest.is_empty() {
            out.push('\n');
            let body: Vec<String> = rest
                .iter()
                .map(|line| {
                    if line.is_empty() {
                        String::new()
                    } else {
                        format!("{indention}{line}")
                    }
                })
                .collect();
            out.push_str(&body.join("\n"));
        }
    }
    if first {
        out.insert_str(0, &indention);
    }
    Ok(Value::from(out))
}

/// Jinja2's `cycler(*items)`: `next()` returns the items in turn, `reset()` starts over,
/// `current` is the item `next()` returns. minijinja-contrib's takes one list (`cycler('a', 'b')`
/// failed) and has no `reset` or `current`.
#[derive(Debug)]
pub struct Cycler {
    items: Vec<Value>,
    pos: std::sync::atomic::AtomicUsize,
}

impl Cycler {
    /// `cycler(*items)`: a new cycler, as a template value.
    fn value(items: Rest<Value>) -> Result<Value, Error> {
        if items.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "at least one item has to be provided",
            ));
        }
        Ok(Value::from_object(Cycler {
            items: items.0,
            pos: Default::default(),
        }))
    }

    fn current(&self) -> Value {
        self.items[self.pos.load(std::sync::atomic::Ordering::Relaxed)].clone()
    }
}

impl minijinja::value::Object for Cycler {
    fn repr(self: &Arc<Self>) -> minijinja::value::ObjectRepr {
        minijinja::value::ObjectRepr::Plain
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        (key.as_str() == Some("current")).then(|| self.current())
    }

    fn call_method(
        self: &Arc<Self>,
        _state: &mut State<'_, '_>,
        method: &str,
        args: &[Value],
    ) -> Result<Value, Error> {
        use std::sync::atomic::Ordering::Relaxed;
        let () = minijinja::value::from_args(args)?;
        match method {
            "next" => {
                let current = self.current();
                let pos = self.pos.load(Relaxed);
                self.pos.store((pos + 1) % self.items.len(), Relaxed);
                Ok(current)
            }
            "reset" => {
                self.pos.store(0, Relaxed);
                Ok(Value::from(()))
            }
            _ => Err(Error::from(ErrorKind::UnknownMethod)),
        }
    }
}

fn raise_exception(message: Value) -> Result<Value, Error> {
    let text = pyjson::py_str(&message);
    Err(Error::new(ErrorKind::InvalidOperation, text.clone()).with_source(RaisedByTemplate(text)))
}

fn strftime_now(clock: &Clock, format: &str) -> Result<Value, Error> {
    use chrono::{Local, NaiveDateTime, TimeZone, Utc};
    let now: NaiveDateTime = match *clock {
        Clock::Now => Local::now().naive_local(),
        Clock::Fixed(secs) => Utc
            .timestamp_opt(secs, 0)
            .single()
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    "strftime_now: the fixed clock is out of range",
                )
            })?
            .naive_utc(),
    };
    let mut out = String::new();
    write!(out, "{}", now.format(format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: unsupported format {format:?}"),
        )
    })?;
    Ok(Value::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, ctx: Value) -> Result<String, Error> {
        let env = build(
            src.to_string(),
            Limits::default(),
            Clock::Fixed(1_736_942_400),
        )?;
        let tmpl = env.get_template(TEMPLATE_NAME)?;
        tmpl.render(ctx)
    }

    #[test]
    fn python_spelling_and_functions() {
        let ctx = crate::template::to_value(
            crate::template::json::parse(
                r#"{"f": 1e-7, "t": true, "n": null, "x": {"a": [1.5, "é"]}}"#,
                "test",
            )
            .unwrap(),
        );
        assert_eq!(
            render("{{ f }} {{ t }} {{ n }} {{ f|string }}", ctx.clone()).unwrap(),
            "1e-07 True None 1e-07"
        );
        assert_eq!(render("{{ x|tojson }}|{{ x|tojson(indent=2) }}|{{ x|tojson(true) }}", ctx.clone()).unwrap(),
            "{\"a\": [1.5, \"é\"]}|{\n  \"a\": [\n    1.5,\n    \"é\"\n  ]\n}|{\"a\": [1.5, \"\\u00e9\"]}");
        assert_eq!(
            render(
                "{{ n is iterable }} {{ x is iterable }} {{ ' a '.strip() }}",
                ctx.clone()
            )
            .unwrap(),
            "False True a"
        );
        assert_eq!(
            render("  {% if true %}\nx\n  {% endif %}y", ctx.clone()).unwrap(),
            "x\ny"
        );
        let err = render("{{ raise_exception('no system role') }}", ctx).unwrap_err();
        let raised = std::error::Error::source(&err)
            .and_then(|s| s.downcast_ref::<RaisedByTemplate>())
            .map(|r| r.0.clone());
        assert_eq!(raised.as_deref(), Some("no system role"));
    }

    #[test]
    fn indent_keeps_jinja2_line_handling() {
        let ctx = Value::UNDEFINED;
        assert_eq!(
            render("[{{ '{\n'|indent(4, first=true) }}]", ctx.clone()).unwrap(),
            "[    {\n]"
        );
        assert_eq!(
            render("[{{ 'a\n\nb'|indent(2) }}]", ctx.clone()).unwrap(),
            "[a\n\n  b]"
        );
        assert_eq!(
            render("[{{ 'a\n\nb'|indent(2, blank=true) }}]", ctx.clone()).unwrap(),
            "[a\n  \n  b]"
        );
        assert_eq!(
            render("[{{ 'a\nb'|indent('> ', true) }}]", ctx).unwrap(),
            "[> a\n> b]"
        );
    }

    #[test]
    fn an_argument_given_twice_is_an_error() {
        // Python: TypeError: do_trim() got multiple values for argument 'chars'.
        for (src, name) in [
            ("{{ ' x '|trim(' ', chars=' ') }}", "trim"),
            ("{{ 'a'|indent(2, width=4) }}", "indent"),
            ("{{ 1|tojson(true, ensure_ascii=false) }}", "tojson"),
        ] {
            let err = render(src, Value::UNDEFINED).unwrap_err();
            assert!(
                err.to_string()
                    .contains(&format!("{name}() got multiple values for argument")),
                "{err}"
            );
        }
        assert_eq!(
            render("{{ 'a\nb'|indent(2, first=true) }}", Value::UNDEFINED).unwrap(),
            "  a\n  b"
        );
    }

    #[test]
    fn lists_are_immutable_as_in_the_sandbox() {
        assert!(render("{% set l = [] %}{{ l.append(1) }}", Value::UNDEFINED).is_err());
    }
}
