"""What the reference renderer learns from a template's source before rendering, with Jinja2's own
parser (the native side walks minijinja's syntax tree for the same answers, see
`native/src/template/analyze.rs`):

- the content format vLLM detects: "openai" when some loop runs over a message's content (or over
  a variable named `content`), where the message is a loop variable over `messages` or over a
  variable assigned from it; "string" otherwise, and when vLLM's own checks would fail;
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
    return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == varname


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


def _vars_assigned_from(root: jinja2.nodes.Node, varname: str) -> list[str]:
    found = [varname]
    queue = deque([varname])
    assigns = list(root.find_all(jinja2.nodes.Assign))
    while queue:
        related = queue.popleft()
        for assign in assigns:
            if _is_var_or_elems(assign.node, related):
                name = _name(assign.target)
                found.append(name)
                if name != related:
                    queue.append(name)
        if len(found) > 10_000:  # a cycle of distinct names; vLLM would loop forever
            raise _NotAName
    return found


def _loops_over_content(root: jinja2.nodes.Node) -> Iterator[str]:
    messages_vars = _vars_assigned_from(root, "messages")
    loops = list(root.find_all(jinja2.nodes.For))
    message_vars = [_name(loop.target) for loop in loops if any(_is_var_or_elems(loop.iter, v) for v in messages_vars)]
    for loop in loops:
        over_message_content = any(_is_var_or_elems(loop.iter, v, "content") for v in message_vars)
        over_content_var = isinstance(loop.iter, jinja2.nodes.Name) and loop.iter.name == "content"
        if over_message_content or over_content_var:
            yield _name(loop.target)
