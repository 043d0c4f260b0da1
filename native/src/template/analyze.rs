//! What a template's syntax tree tells us before rendering: which content format it wants (vLLM's
//! detection), and the names Jinja2 would refuse at compile time.
//!
//! Content format: vLLM parses the template and looks for a loop over a message's content
//! (`{% for part in message['content'] %}`; inside a macro, over a parameter that a call fills with
//! a message's content; outside macros, over a variable named `content`), where `message` is a loop
//! variable over `messages` or over a name assigned from it (`{% set loop_messages = messages[1:] %}`,
//! or a namespace alias `ns.rest`). If there is one the template gets content as a list
//! of parts ("openai"), else as a string. The walk below visits statements in the order Jinja2's
//! `find_all` does and fails the same way vLLM's asserts do (falling back to "string").
//!
//! Compile-time names: Jinja2 refuses an unknown filter or test when it compiles the template
//! (except inside an `if`, where it waits until the name is used), and a `{% do %}` tag
//! (transformers does not enable that extension). Such a template then fails on every request;
//! minijinja would only fail when the code runs, so the check is made here, against Jinja2's lists.

use minijinja::machinery::ast::{BinOpKind, CallArg, Expr, Stmt};
use minijinja::machinery::parse;
use minijinja::syntax::SyntaxConfig;

use super::normalize::ContentFormat;
use super::pydict;

/// Filters Jinja2 3.1 knows (`jinja2.filters.FILTERS`), plus transformers' `tojson`.
const JINJA2_FILTERS: &[&str] = &[
    "abs",
    "attr",
    "batch",
    "capitalize",
    "center",
    "count",
    "d",
    "default",
    "dictsort",
    "e",
    "escape",
    "filesizeformat",
    "first",
    "float",
    "forceescape",
    "format",
    "groupby",
    "indent",
    "int",
    "items",
    "join",
    "last",
    "length",
    "list",
    "lower",
    "map",
    "max",
    "min",
    "pprint",
    "random",
    "reject",
    "rejectattr",
    "replace",
    "reverse",
    "round",
    "safe",
    "select",
    "selectattr",
    "slice",
    "sort",
    "string",
    "striptags",
    "sum",
    "title",
    "tojson",
    "trim",
    "truncate",
    "unique",
    "upper",
    "urlencode",
    "urlize",
    "wordcount",
    "wordwrap",
    "xmlattr",
];

/// Tests Jinja2 3.1 knows (`jinja2.tests.TESTS`).
const JINJA2_TESTS: &[&str] = &[
    "!=",
    "<",
    "<=",
    "==",
    ">",
    ">=",
    "boolean",
    "callable",
    "defined",
    "divisibleby",
    "eq",
    "equalto",
    "escaped",
    "even",
    "false",
    "filter",
    "float",
    "ge",
    "greaterthan",
    "gt",
    "in",
    "integer",
    "iterable",
    "le",
    "lessthan",
    "lower",
    "lt",
    "mapping",
    "ne",
    "none",
    "number",
    "odd",
    "sameas",
    "sequence",
    "string",
    "test",
    "true",
    "undefined",
    "upper",
];

/// The result of analyzing a template source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Analysis {
    /// The content format vLLM would detect.
    pub content_format: ContentFormat,
    /// Why Jinja2 would refuse to compile the template, if it would.
    pub compile_error: Option<String>,
    /// The template adds to lists (`{% set ns.items = ns.items + [x] %}`): minijinja charges
    /// fuel for such a concatenation once, not for the copies a growing chain of them costs, so
    /// a loop of them is quadratic work fuel does not see (GigaChat3 with a tool `enum` of 2,057
    /// values: 18 ms for a 15 KB request). Its renders never run on the event loop.
    pub accumulates_lists: bool,
    /// The template reads a dict method as an attribute without calling it (`x.items`): Jinja2
    /// gives the method there, whatever keys `x` holds, so request dicts are given as
    /// `PyDict` (`pydict.rs`), which costs every attribute read a dynamic lookup.
    pub reads_dict_methods: bool,
}

/// Analyzes `source` (already passed through [`super::compat::rewrite`]). A source minijinja
/// cannot parse gets the "string" format; rendering reports the syntax error.
pub fn analyze(source: &str) -> Analysis {
    let Ok(root) = parse(source, "chat_template", SyntaxConfig::default()) else {
        return Analysis {
            content_format: ContentFormat::String,
            compile_error: None,
            accumulates_lists: false,
            reads_dict_methods: false,
        };
    };
    let mut nodes = Nodes::default();
    collect(&root, false, &mut nodes);
    Analysis {
        content_format: detect_content_format(&nodes).unwrap_or(ContentFormat::String),
        compile_error: nodes.compile_error,
        accumulates_lists: nodes.accumulates_lists,
        reads_dict_methods: nodes.reads_dict_methods,
    }
}

/// The statements the detection looks at, in Jinja2 `find_all` order.
#[derive(Default)]
struct Nodes<'a, 'n> {
    /// `{% set target = expr %}`
    assigns: Vec<(&'n Expr<'a>, &'n Expr<'a>)>,
    /// `{% for target in iter %}`
    loops: Vec<Loop<'a, 'n>>,
    /// `{% macro name(params) %}`: its name and parameter names.
    macros: Vec<(&'a str, Vec<&'a str>)>,
    /// Every call, in expressions and `{% call %}` blocks: the callee and its arguments.
    calls: Vec<(&'n Expr<'a>, &'n [CallArg<'a>])>,
    /// The macros the walk is inside (indices into `macros`, outermost first).
    open_macros: Vec<usize>,
    compile_error: Option<String>,
    /// A `+` with a list literal on either side.
    accumulates_lists: bool,
    /// `x.items` (and the other dict methods `pydict` answers) read, not called.
    reads_dict_methods: bool,
}

/// A `for` loop and the macros it sits in (indices into `Nodes::macros`, outermost first).
struct Loop<'a, 'n> {
    target: &'n Expr<'a>,
    iter: &'n Expr<'a>,
    macros: Vec<usize>,
}

/// Walks statements in Jinja2 `find_all` order. `soft` mirrors Jinja2's "soft frame": inside an
/// `if` (or an inline `x if c else y`), an unknown filter or test only fails when it runs; a new
/// scope (loop body, macro, block, ...) is a fresh frame again.
fn collect<'a, 'n>(stmt: &'n Stmt<'a>, soft: bool, nodes: &mut Nodes<'a, 'n>) {
    let body = |stmts: &'n [Stmt<'a>], soft: bool, nodes: &mut Nodes<'a, 'n>| {
        stmts.iter().for_each(|s| collect(s, soft, nodes))
    };
    match stmt {
        Stmt::Template(t) => body(&t.children, false, nodes),
        Stmt::EmitExpr(e) => check_expr(&e.expr, soft, nodes),
        Stmt::EmitRaw(_) | Stmt::Continue(_) | Stmt::Break(_) => {}
        Stmt::ForLoop(f) => {
            nodes.loops.push(Loop {
                target: &f.target,
                iter: &f.iter,
                macros: nodes.open_macros.clone(),
            });
            check_expr(&f.iter, soft, nodes);
            if let Some(e) = &f.filter_expr {
                check_expr(e, false, nodes);
            }
            body(&f.body, false, nodes);
            body(&f.else_body, false, nodes);
        }
        Stmt::IfCond(i) => {
            check_expr(&i.expr, true, nodes);
            body(&i.true_body, true, nodes);
            body(&i.false_body, true, nodes);
        }
        Stmt::WithBlock(w) => {
            for (_, value) in &w.assignments {
                check_expr(value, soft, nodes);
            }
            body(&w.body, false, nodes);
        }
        Stmt::Set(s) => {
            nodes.assigns.push((&s.target, &s.expr));
            check_expr(&s.expr, soft, nodes);
        }
        Stmt::SetBlock(s) => {
            body(&s.body, false, nodes);
            if let Some(f) = &s.filter {
                check_expr(f, false, nodes);
            }
        }
        Stmt::AutoEscape(a) => body(&a.body, soft, nodes),
        Stmt::FilterBlock(f) => {
            body(&f.body, false, nodes);
            check_expr(&f.filter, false, nodes);
        }
        Stmt::Block(b) => body(&b.body, false, nodes),
        Stmt::Macro(m) => {
            m.defaults.iter().for_each(|d| check_expr(d, false, nodes));
            let params = m.args.iter().filter_map(name_of).collect();
            nodes.macros.push((m.name, params));
            nodes.open_macros.push(nodes.macros.len() - 1);
            body(&m.body, false, nodes);
            nodes.open_macros.pop();
        }
        Stmt::CallBlock(c) => {
            // The block's body is the caller, which Jinja2 does not parse as a macro.
            nodes.calls.push((&c.call.expr, &c.call.args));
            check_expr(&c.call.expr, soft, nodes);
            check_call_args(&c.call.args, soft, nodes);
            body(&c.macro_decl.body, false, nodes);
        }
        Stmt::Do(_) => refuse(nodes, "Encountered unknown tag 'do'".into()),
        Stmt::Import(_) | Stmt::FromImport(_) | Stmt::Extends(_) | Stmt::Include(_) => {}
    }
}

fn refuse(nodes: &mut Nodes<'_, '_>, message: String) {
    nodes.compile_error.get_or_insert(message);
}

/// Records unknown filter and test names inside an expression (outside soft frames).
fn check_expr<'a, 'n>(expr: &'n Expr<'a>, soft: bool, nodes: &mut Nodes<'a, 'n>) {
    match expr {
        Expr::Var(_) | Expr::Const(_) => {}
        Expr::Slice(s) => {
            check_expr(&s.expr, soft, nodes);
            for e in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                check_expr(e, soft, nodes);
            }
        }
        Expr::UnaryOp(u) => check_expr(&u.expr, soft, nodes),
        Expr::BinOp(b) => {
            if matches!(b.op, BinOpKind::Add)
                && [&b.left, &b.right]
                    .iter()
                    .any(|e| matches!(e, Expr::List(_)))
            {
                nodes.accumulates_lists = true;
            }
            check_expr(&b.left, soft, nodes);
            check_expr(&b.right, soft, nodes);
        }
        Expr::Compare(c) => {
            check_expr(&c.expr, soft, nodes);
            c.ops
                .iter()
                .for_each(|op| check_expr(&op.expr, soft, nodes));
        }
        Expr::IfExpr(i) => {
            check_expr(&i.test_expr, true, nodes);
            check_expr(&i.true_expr, true, nodes);
            if let Some(e) = &i.false_expr {
                check_expr(e, true, nodes);
            }
        }
        Expr::Filter(f) => {
            if !soft && !JINJA2_FILTERS.contains(&f.name) {
                refuse(nodes, format!("No filter named '{}'.", f.name));
            }
            if let Some(e) = &f.expr {
                check_expr(e, soft, nodes);
            }
            check_call_args(&f.args, soft, nodes);
        }
        Expr::Test(t) => {
            if !soft && !JINJA2_TESTS.contains(&t.name) {
                refuse(nodes, format!("No test named '{}'.", t.name));
            }
            check_expr(&t.expr, soft, nodes);
            check_call_args(&t.args, soft, nodes);
        }
        Expr::GetAttr(g) => {
            if pydict::is_method_name(g.name) {
                nodes.reads_dict_methods = true;
            }
            check_expr(&g.expr, soft, nodes)
        }
        Expr::GetItem(g) => {
            check_expr(&g.expr, soft, nodes);
            check_expr(&g.subscript_expr, soft, nodes);
        }
        Expr::Call(c) => {
            nodes.calls.push((&c.expr, &c.args));
            match &c.expr {
                // A method call (`x.items()`) reads the same under either lookup.
                Expr::GetAttr(g) => check_expr(&g.expr, soft, nodes),
                callee => check_expr(callee, soft, nodes),
            }
            check_call_args(&c.args, soft, nodes);
        }
        Expr::List(l) => l.items.iter().for_each(|e| check_expr(e, soft, nodes)),
        Expr::Tuple(t) => t.items.iter().for_each(|e| check_expr(e, soft, nodes)),
        Expr::Map(m) => m
            .keys
            .iter()
            .chain(&m.values)
            .for_each(|e| check_expr(e, soft, nodes)),
    }
}

fn check_call_args<'a, 'n>(args: &'n [CallArg<'a>], soft: bool, nodes: &mut Nodes<'a, 'n>) {
    for arg in args {
        match arg {
            CallArg::Pos(e)
            | CallArg::Kwarg(_, e)
            | CallArg::PosSplat(e)
            | CallArg::KwargSplat(e) => check_expr(e, soft, nodes),
        }
    }
}

/// vLLM's detection; `None` where vLLM's asserts would fail (it then falls back to "string").
/// A loop counts when it runs over a message's content; inside a macro, over a parameter that
/// some call of the macro fills with a message's content; outside macros, over a variable named
/// `content` (vLLM 0.33).
fn detect_content_format(nodes: &Nodes<'_, '_>) -> Option<ContentFormat> {
    let messages_vars = vars_assigned_from(nodes, "messages");
    // Loop variables over `messages` (or over variables assigned from it).
    let mut message_vars: Vec<&str> = Vec::new();
    for l in &nodes.loops {
        if messages_vars
            .iter()
            .any(|v| is_var_or_elems_access(l.iter, v, None))
        {
            message_vars.push(name_of(l.target)?);
        }
    }
    let content_params = macro_content_params(nodes, &message_vars);
    for l in &nodes.loops {
        let iter_name = match l.iter {
            Expr::Var(v) => Some(v.id),
            _ => None,
        };
        // Of nested macros, the innermost whose parameters receive content decides.
        let params = l
            .macros
            .iter()
            .rev()
            .map(|&m| &content_params[m])
            .find(|p| !p.is_empty());
        let over_content = message_vars
            .iter()
            .any(|v| is_var_or_elems_access(l.iter, v, Some("content")))
            || iter_name.is_some_and(|n| params.is_some_and(|p| p.contains(&n)))
            || (l.macros.is_empty() && iter_name == Some("content"));
        if over_content {
            name_of(l.target)?;
            return Some(ContentFormat::OpenAi);
        }
    }
    Some(ContentFormat::String)
}

/// For each macro, the parameters that some call of it fills with a message's content, by
/// position (`render(m.content)`) or by keyword (`render(c=m['content'])`).
fn macro_content_params<'a>(nodes: &Nodes<'a, '_>, message_vars: &[&str]) -> Vec<Vec<&'a str>> {
    let is_content = |e: &Expr<'_>| {
        message_vars
            .iter()
            .any(|v| is_var_or_elems_access(e, v, Some("content")))
    };
    let mut out = Vec::with_capacity(nodes.macros.len());
    for (name, params) in &nodes.macros {
        let mut found: Vec<&'a str> = Vec::new();
        for (callee, args) in &nodes.calls {
            if !matches!(callee, Expr::Var(v) if v.id == *name) {
                continue;
            }
            let positional = args.iter().filter_map(|a| match a {
                CallArg::Pos(e) => Some(e),
                _ => None,
            });
            for (param, arg) in params.iter().zip(positional) {
                if is_content(arg) {
                    found.push(param);
                }
            }
            for arg in args.iter() {
                if let CallArg::Kwarg(key, value) = arg {
                    if let Some(param) = params.iter().find(|p| *p == key) {
                        if is_content(value) {
                            found.push(param);
                        }
                    }
                }
            }
        }
        out.push(found);
    }
    out
}

/// `varname` and every name assigned (transitively) from it or a slice/filter of it, breadth
/// first as vLLM walks them: `{% set x = v %}`, and as namespace aliases
/// `{% set ns = namespace(x=v) %}` and `{% set ns.x = v %}` (the dotted name `ns.x`). Other
/// assignment targets (tuples) are passed over.
fn vars_assigned_from<'a>(nodes: &Nodes<'a, '_>, varname: &str) -> Vec<String> {
    let mut found = vec![varname.to_string()];
    let mut seen = std::collections::HashSet::from([varname.to_string()]);
    let mut queue = std::collections::VecDeque::from([varname.to_string()]);
    while let Some(related) = queue.pop_front() {
        for (target, value) in &nodes.assigns {
            let mut names: Vec<String> = Vec::new();
            match target {
                Expr::Var(lhs) => {
                    if is_var_or_elems_access(value, &related, None) {
                        names.push(lhs.id.to_string());
                    }
                    if let Expr::Call(c) = value {
                        if matches!(&c.expr, Expr::Var(f) if f.id == "namespace") {
                            for arg in &c.args {
                                if let CallArg::Kwarg(key, v) = arg {
                                    if is_var_or_elems_access(v, &related, None) {
                                        names.push(format!("{}.{key}", lhs.id));
                                    }
                                }
                            }
                        }
                    }
                }
                Expr::GetAttr(_) if is_var_or_elems_access(value, &related, None) => {
                    names.extend(dotted_name(target));
                }
                _ => {}
            }
            for name in names {
                if seen.insert(name.clone()) {
                    queue.push_back(name.clone());
                }
                found.push(name);
            }
        }
    }
    found
}

/// An attribute assignment target (`ns.rest`) as a dotted name.
fn dotted_name(expr: &Expr<'_>) -> Option<String> {
    match expr {
        Expr::Var(v) => Some(v.id.to_string()),
        Expr::GetAttr(g) => Some(format!("{}.{}", dotted_name(&g.expr)?, g.name)),
        _ => None,
    }
}

fn name_of<'a>(target: &Expr<'a>) -> Option<&'a str> {
    match target {
        Expr::Var(v) => Some(v.id),
        _ => None,
    }
}

/// vLLM's `_is_var_or_elems_access`: `var`, `var|filter`, `var is test`, `var[a:b]`, or with a
/// key `var.key` / `var['key']` (also under filters, tests and slices).
fn is_var_or_elems_access(expr: &Expr<'_>, varname: &str, key: Option<&str>) -> bool {
    match expr {
        Expr::Filter(f) => f
            .expr
            .as_ref()
            .is_some_and(|e| is_var_or_elems_access(e, varname, key)),
        Expr::Test(t) => is_var_or_elems_access(&t.expr, varname, key),
        Expr::Slice(s) => is_var_or_elems_access(&s.expr, varname, key),
        _ => match key {
            Some(key) => is_attr_access(expr, varname, key),
            None => is_var_access(expr, varname),
        },
    }
}

/// `varname` read; a dotted name (`ns.rest`, a namespace alias) matches that attribute read.
fn is_var_access(expr: &Expr<'_>, varname: &str) -> bool {
    match expr {
        Expr::Var(v) => v.id == varname,
        Expr::GetAttr(g) => varname
            .rsplit_once('.')
            .is_some_and(|(base, attr)| g.name == attr && is_var_access(&g.expr, base)),
        _ => false,
    }
}

fn is_attr_access(expr: &Expr<'_>, varname: &str, key: &str) -> bool {
    let is_var = |e: &Expr<'_>| is_var_access(e, varname);
    match expr {
        Expr::GetAttr(g) => is_var(&g.expr) && g.name == key,
        Expr::GetItem(g) => {
            is_var(&g.expr)
                && matches!(&g.subscript_expr, Expr::Const(c) if c.value.as_str() == Some(key))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format_of(src: &str) -> ContentFormat {
        analyze(src).content_format
    }

    #[test]
    fn dict_methods_read_as_attributes() {
        let reads = |src: &str| analyze(src).reads_dict_methods;
        assert!(reads("{{ json_to_type(spec.items) }}"));
        assert!(reads(
            "{% macro f(j) %}{% if j.get %}x{% endif %}{% endmacro %}"
        ));
        assert!(reads("{{ x.pop }}"));
        // Called, filtered or subscripted: the same under either lookup.
        assert!(!reads(
            "{% for k, v in x.items() %}{{ x.get('a') }}{% endfor %}"
        ));
        assert!(!reads("{{ x|items }}{{ x['items'] }}{{ m.content }}"));
    }

    #[test]
    fn detects_loops_over_content() {
        assert_eq!(
            format_of("{% for m in messages %}{{ m.content }}{% endfor %}"),
            ContentFormat::String
        );
        assert_eq!(
            format_of("{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}{% endfor %}"),
            ContentFormat::OpenAi
        );
        assert_eq!(
            format_of(
                "{% set loop_messages = messages[1:] %}{% for m in loop_messages %}\
                 {% for p in m.content|list %}{% endfor %}{% endfor %}"
            ),
            ContentFormat::OpenAi
        );
        // Inside a macro a loop over `content` counts only when a call passes content to it.
        assert_eq!(
            format_of("{% macro r(content) %}{% for i in content %}{% endfor %}{% endmacro %}"),
            ContentFormat::String
        );
        assert_eq!(
            format_of(
                "{% macro r(c) %}{% for i in c %}{% endfor %}{% endmacro %}\
                 {% for m in messages %}{{ r(m.content) }}{% endfor %}"
            ),
            ContentFormat::OpenAi
        );
        assert_eq!(
            format_of(
                "{% macro r(x, c=none) %}{% for i in c %}{% endfor %}{% endmacro %}\
                 {% for m in messages %}{{ r(1, c=m['content']|list) }}{% endfor %}"
            ),
            ContentFormat::OpenAi
        );
        assert_eq!(
            format_of(
                "{% macro r(c) %}{% for i in c %}{% endfor %}{% endmacro %}\
                 {% for m in messages %}{{ r(m.tools) }}{% endfor %}"
            ),
            ContentFormat::String
        );
        // A non-name assignment target is a namespace alias (vLLM 0.33), not a failure.
        assert_eq!(
            format_of("{% set ns = namespace() %}{% set ns.m = messages %}{% for m in messages %}{% for p in m.content %}{% endfor %}{% endfor %}"),
            ContentFormat::OpenAi
        );
        assert_eq!(
            format_of("{% set ns = namespace(rest=messages) %}{% for m in ns.rest %}{% for p in m.content %}{% endfor %}{% endfor %}"),
            ContentFormat::OpenAi
        );
        assert_eq!(
            format_of("{% set ns = namespace() %}{% set ns.rest = messages[1:] %}{% for m in ns.rest %}{% for p in m.content %}{% endfor %}{% endfor %}"),
            ContentFormat::OpenAi
        );
    }

    #[test]
    fn unknown_filters_tests_and_do_are_compile_errors() {
        assert_eq!(
            analyze("{{ x|from_json }}").compile_error.as_deref(),
            Some("No filter named 'from_json'.")
        );
        // Inside an `if` Jinja2 defers the check to run time, except in a new scope such as a loop.
        assert_eq!(
            analyze("{% if x %}{{ x|from_json }}{% endif %}").compile_error,
            None
        );
        assert!(
            analyze("{% if x %}{% for y in x %}{{ y|from_json }}{% endfor %}{% endif %}")
                .compile_error
                .is_some()
        );
        assert_eq!(
            analyze("{{ x is sting }}").compile_error.as_deref(),
            Some("No test named 'sting'.")
        );
        assert!(analyze("{% do x.append(1) %}").compile_error.is_some());
        assert_eq!(
            analyze("{{ x|tojson|trim }}{% if x is not none %}{% endif %}").compile_error,
            None
        );
    }
}
