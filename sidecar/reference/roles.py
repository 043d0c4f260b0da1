"""Two role-specific rewrites vLLM 0.33 makes to a conversation before the template sees it, the
same as `native/src/template/roles.rs` (listed in COMPATIBILITY.md, "Message normalization").

- System messages lose Claude Code's billing header line (the first line of a text part that starts
  with `x-anthropic-billing-header`): its `cch` value changes on every request, so a prompt that
  kept it would miss the prefix cache from the system prompt on.
- When the template never spells the role `developer` as a string literal, developer messages
  become system messages, and system messages anywhere but first (or more than one) are then merged
  into one first message; templates written before the role existed would otherwise drop the
  developer's instructions, print a role the model never saw, or refuse the conversation because
  roles do not alternate.
"""

from __future__ import annotations

from typing import Any

_BILLING_HEADER = "x-anthropic-billing-header"


def names_developer(source: str) -> bool:
    """Whether a template's source names the developer role, the test vLLM makes on the text of the
    template it renders with (`"developer"` or `'developer'` anywhere, comments included)."""
    return '"developer"' in source or "'developer'" in source


def without_billing_header(content: Any) -> Any:
    """A system message's content without the billing header line. A string content counts as one
    text part; a part that was only the header line is dropped. Parts are judged before they are
    checked, as vLLM does, so a dropped part is never refused."""
    if isinstance(content, str):
        rest = _after_header(content)
        if rest is None:
            return content
        return rest if rest else []
    if not isinstance(content, list):
        return content
    out = []
    for part in content:
        rest = _after_header(_part_text(part))
        if rest is None:
            out.append(part)
        elif rest:
            out.append(rest if isinstance(part, str) else {**part, "text": rest})
    return out


def _part_text(part: Any) -> str | None:
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
        return part["text"]
    return None


def _after_header(text: str | None) -> str | None:
    """What follows the header's line when `text` starts with the header ("" when there is no
    second line), else None."""
    if text is None or not text.startswith(_BILLING_HEADER):
        return None
    return text.partition("\n")[2]


def developer_as_system(messages: list[dict]) -> list[dict]:
    """Developer messages as system messages (without their `tools`), then the system messages
    merged into one first message when one is not first or there are several: its content is the
    non-empty contents joined by a blank line (a list content reduced to its parts' texts joined by
    "\\n"), and it keeps no other key. The messages are already normalized; the caller checks that
    a developer message is present."""
    messages = [
        {**{k: v for k, v in m.items() if k != "tools"}, "role": "system"} if m["role"] == "developer" else m
        for m in messages
    ]
    if not any(m["role"] == "system" for m in messages[1:]):
        return messages
    contents = [text for m in messages if m["role"] == "system" and (text := _content_text(m["content"]))]
    return [{"role": "system", "content": "\n\n".join(contents)}, *(m for m in messages if m["role"] != "system")]


def _content_text(content: Any) -> str:
    """A system message's content as merged text. A text part whose text is null (only from part
    types vLLM refuses in system messages, such as `input_text` without text) adds nothing."""
    if isinstance(content, str):
        return content
    texts = [p if isinstance(p, str) else p.get("text") for p in content if isinstance(p, (str, dict))]
    return "\n".join(t for t in texts if isinstance(t, str))
