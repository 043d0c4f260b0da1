"""What the reference renderer learns from a template's source before rendering, with Jinja2's own
parser (the native side walks minijinja's syntax tree for the same answers, see
`native/src/template/analyze.rs`):

- the content format vLLM detects: "openai" when some loop runs over a message's content (inside
  a macro, over a parameter that a call fills with a message's content; outside macros, over a
  variable named `content`), where the message is a loop variable over `messages` or over a name
  assigned from it (also a namespace alias); "string" otherwise, and when vLLM's own checks would
  fail;
- whether Jinja2 compiles the template at all (unknown filters and tests are compile errors);
- the source rewrites both backends apply (see native/src/template/compat.rs for why): line breaks
  as Jinja2's lexer reads them (`\r\n` and `\r` as `\n`), the `{% generation %}` tag minijinja
  lacks, and the guard that makes a `for` loop over `none` fail as
  it does in Python.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Iterator

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.sandbox

_GENERATION_TAG = re.compile(r"\{%([-+]?)[ \t\n\r\f]*(endgeneration|generation)[ \t\n\r\f]*([-+]?)%\}")


def rewrite(source: str) -> str:
    """`\\r\\n` and `\\r` -> `\\n` (Jinja2's lexer does it to the whole source, literals and raw
    blocks included); `{% generation %}` / `{% endgeneration %}` -> `{% if true %}` / `{% endif %}`,
    keeping `-`/`+`."""
    if "\r" in source:
        source = source.replace("\r\n", "\n").replace("\r", "\n")
    if "generation" not in source:
        return source

    def replace(m: re.Match) -> str:
        open_ws, word, close_ws = m.groups()
        return f"{{%{open_ws} {'endif' if word == 'endgeneration' else 'if true'} {close_ws}%}}"

    return _GENERATION_TAG.sub(replace, source)


#: Called by the loop guard when a loop runs over `none`.
NONE_ITERATION_FUNCTION = "sidecar_none_is_not_iterable"


def guard_none_iteration(source: str) -> str:
    """`{% for x in EXPR %}` -> `{% for x in ((EXPR) if (EXPR) is not none else <fail>()) %}`."""
    if "for" not in source:
        return source
    out: list[str] = []
    copied = 0
    i = 0
    n = len(source)
    while True:
        at = source.find("{", i)
        if at < 0:
            break
        nxt = source[at + 1 : at + 2]
        if nxt == "#":
            e = source.find("#}", at + 2)
            i = n if e < 0 else e + 2
        elif nxt == "{":
            e = _tag_end(source, at + 2, "}}")
            i = n if e is None else e + 2
        elif nxt == "%":
            word, after = _tag_word(source, at + 2)
            if word == "raw":
                end = _raw_end(source, after)
            else:
                e = _tag_end(source, after, "%}")
                end = None if e is None else e + 2
            if end is None:
                break
            if word == "for":
                found = _for_iterable(source, after, end - 2)
                if found is not None:
                    start, stop = found
                    expr = source[start:stop].rstrip(" \t\n\r\f")
                    out.append(source[copied:start])
                    out.append(f"(({expr}) if ({expr}) is not none else {NONE_ITERATION_FUNCTION}())")
                    copied = start + len(expr)
            i = end
        else:
            i = at + 1
    if not out:
        return source
    out.append(source[copied:])
    return "".join(out)


def _is_word(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "_")


def _tag_word(source: str, i: int) -> tuple[str, int]:
    if source[i : i + 1] in ("-", "+") and i < len(source):
        i += 1
    while i < len(source) and source[i] in " \t\n\r\f":
        i += 1
    start = i
    while i < len(source) and _is_word(source[i]):
        i += 1
    return source[start:i], i


def _string_end(source: str, start: int, quote: str) -> int | None:
    i = start + 1
    while i < len(source):
        c = source[i]
        if c == "\\":
            i += 2
        elif c == quote:
            return i + 1
        else:
            i += 1
    return None


def _tag_end(source: str, i: int, close: str) -> int | None:
    while i < len(source):
        c = source[i]
        if c in ("'", '"'):
            e = _string_end(source, i, c)
            if e is None:
                return None
            i = e
        elif source.startswith(close, i):
            return i
        else:
            i += 1
    return None


def _raw_end(source: str, start: int) -> int | None:
    e = _tag_end(source, start, "%}")
    if e is None:
        return None
    i = e + 2
    while True:
        at = source.find("{%", i)
        if at < 0:
            return None
        word, after = _tag_word(source, at + 2)
        e = _tag_end(source, after, "%}")
        if e is None:
            return None
        if word == "endraw":
            return e + 2
        i = e + 2


def _for_iterable(source: str, start: int, close: int) -> tuple[int, int] | None:
    if close > start and source[close - 1] in "-+":
        close -= 1
    depth = 0
    iter_start = None
    i = start
    while i < close:
        c = source[i]
        if c in ("'", '"'):
            e = _string_end(source, i, c)
            if e is None:
                return None
            i = e
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif c.isascii() and (c.isalpha() or c == "_"):
            word_start = i
            while i < close and _is_word(source[i]):
                i += 1
            word = source[word_start:i]
            if depth == 0:
                if iter_start is None and word == "in":
                    s = i
                    while s < close and source[s] in " \t\n\r\f":
                        s += 1
                    iter_start = s
                elif iter_start is not None and word in ("if", "recursive"):
                    return (iter_start, word_start) if word_start > iter_start else None
            continue
        i += 1
    if iter_start is None or close <= iter_start:
        return None
    return iter_start, close


def _environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    # The environment transformers compiles with (its `{% generation %}` tag is rewritten away).
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = lambda x, **kw: x
    return env


_ENV = _environment()


def compile_error(source: str) -> str | None:
    """Why Jinja2 would refuse to compile `source` (already rewritten), or None."""
    try:
        _ENV.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        return e.message or str(e)
    return None


def content_format(source: str) -> str:
    """vLLM's content-format detection on `source` (already rewritten)."""
    try:
        ast = _ENV.parse(source)
    except jinja2.TemplateSyntaxError:
        return "string"
    try:
        next(_loops_over_content(ast))
    except StopIteration:
        return "string"
    except _NotAName:
        return "string"
    return "openai"


class _NotAName(Exception):
    """Where vLLM asserts a name and would fail."""


def _name(node: jinja2.nodes.Node) -> str:
    if not isinstance(node, jinja2.nodes.Name):
        raise _NotAName
    return node.name


def _is_var(node: jinja2.nodes.Node, varname: str) -> bool:
    """`varname` read; a dotted name (`ns.rest`, a namespace alias) matches that attribute read."""
    if isinstance(node, jinja2.nodes.Name):
        return node.ctx == "load" and node.name == varname
    if isinstance(node, jinja2.nodes.Getattr) and "." in varname:
        base, _, attr = varname.rpartition(".")
        return node.attr == attr and _is_var(node.node, base)
    return False


def _is_attr(node: jinja2.nodes.Node, varname: str, key: str) -> bool:
    if isinstance(node, jinja2.nodes.Getitem):
        return _is_var(node.node, varname) and isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == key
    if isinstance(node, jinja2.nodes.Getattr):
        return _is_var(node.node, varname) and node.attr == key
    return False


def _is_var_or_elems(node: jinja2.nodes.Node, varname: str, key: str | None = None) -> bool:
    if isinstance(node, jinja2.nodes.Filter):
        return node.node is not None and _is_var_or_elems(node.node, varname, key)
    if isinstance(node, jinja2.nodes.Test):
        return _is_var_or_elems(node.node, varname, key)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return _is_var_or_elems(node.node, varname, key)
    return _is_attr(node, varname, key) if key else _is_var(node, varname)


def _dotted(node: jinja2.nodes.Node) -> str | None:
    """An attribute assignment target (`ns.rest`) as a dotted name."""
    if isinstance(node, jinja2.nodes.NSRef):
        return f"{node.name}.{node.attr}"
    parts = []
    while isinstance(node, jinja2.nodes.Getattr):
        parts.append(node.attr)
        node = node.node
    if not isinstance(node, jinja2.nodes.Name):
        return None
    return ".".join([node.name, *reversed(parts)])


def _vars_assigned_from(root: jinja2.nodes.Node, varname: str) -> list[str]:
    """`varname` and every name assigned (transitively) from it or a slice/filter of it, breadth
    first: `{% set x = v %}`, and as namespace aliases `{% set ns = namespace(x=v) %}` (`ns.x`)
    and `{% set ns.x = v %}`. Other assignment targets (tuples) are passed over."""
    found = [varname]
    seen = {varname}
    queue = deque([varname])
    assigns = list(root.find_all(jinja2.nodes.Assign))
    while queue:
        related = queue.popleft()
        for assign in assigns:
            lhs, rhs = assign.target, assign.node
            names = []
            if isinstance(lhs, jinja2.nodes.Name) and _is_var_or_elems(rhs, related):
                names.append(lhs.name)
            if (
                isinstance(lhs, jinja2.nodes.Name)
                and isinstance(rhs, jinja2.nodes.Call)
                and isinstance(rhs.node, jinja2.nodes.Name)
                and rhs.node.name == "namespace"
            ):
                names += [f"{lhs.name}.{kw.key}" for kw in rhs.kwargs if _is_var_or_elems(kw.value, related)]
            elif isinstance(lhs, (jinja2.nodes.Getattr, jinja2.nodes.NSRef)) and _is_var_or_elems(rhs, related):
                dotted = _dotted(lhs)
                names += [dotted] if dotted is not None else []
            for name in names:
                found.append(name)
                if name not in seen:
                    seen.add(name)
                    queue.append(name)
    return found


def _macro_content_params(root: jinja2.nodes.Node, message_vars: list[str]) -> tuple[set[int], dict[int, set[str]]]:
    """The loops inside macros (by id), and for each such loop the parameters of its macro that
    some call of that macro fills with a message's content (`{{ render(m.content) }}`,
    `render(c=m['content'])`). Of nested macros, the innermost with such parameters decides."""
    in_macros: set[int] = set()
    params_by_loop: dict[int, set[str]] = {}
    calls = list(root.find_all(jinja2.nodes.Call))
    for macro in root.find_all(jinja2.nodes.Macro):
        arg_names = [a.name for a in macro.args]
        params: set[str] = set()
        for call in calls:
            if not (isinstance(call.node, jinja2.nodes.Name) and call.node.name == macro.name):
                continue
            for i, arg in enumerate(call.args):
                if i < len(arg_names) and any(_is_var_or_elems(arg, v, "content") for v in message_vars):
                    params.add(arg_names[i])
            for kw in call.kwargs:
                if kw.key in arg_names and any(_is_var_or_elems(kw.value, v, "content") for v in message_vars):
                    params.add(kw.key)
        for loop in macro.find_all(jinja2.nodes.For):
            in_macros.add(id(loop))
            if params:
                params_by_loop[id(loop)] = params
    return in_macros, params_by_loop


def _loops_over_content(root: jinja2.nodes.Node) -> Iterator[str]:
    """vLLM 0.33's content loops: over a message's content; inside a macro, over a parameter that
    a call fills with a message's content; outside macros, over a variable named `content`."""
    messages_vars = _vars_assigned_from(root, "messages")
    loops = list(root.find_all(jinja2.nodes.For))
    message_vars = [_name(loop.target) for loop in loops if any(_is_var_or_elems(loop.iter, v) for v in messages_vars)]
    in_macros, params_by_loop = _macro_content_params(root, message_vars)
    for loop in loops:
        iter_name = loop.iter.name if isinstance(loop.iter, jinja2.nodes.Name) else None
        if (
            any(_is_var_or_elems(loop.iter, v, "content") for v in message_vars)
            or (iter_name is not None and iter_name in params_by_loop.get(id(loop), ()))
            or (iter_name == "content" and id(loop) not in in_macros)
        ):
            yield _name(loop.target)
