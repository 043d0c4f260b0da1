"""Records what transformers' `apply_chat_template` produces for every (template, conversation) pair
of the Render parity suite, into tests/data/render/expected.json.xz.

    .venv/bin/python tests/render/generate_expected.py            # regenerate (about 2 minutes)
    .venv/bin/python tests/render/generate_expected.py --show qwen3/default 14_tool_call_string_arguments

Each conversation is first normalized as vLLM does before it calls transformers (the sidecar's
reference normalizer, whose rules are listed in COMPATIBILITY.md and checked on their own by
tests/render/test_normalize.py), with the content format vLLM detects for the template; its tools
are rebuilt as vLLM's tool model dumps them (COMPATIBILITY.md, "Tools normalization"). Then
transformers renders it (`tokenize=False`) and tokenizes it (`tokenize=True`, ids stored as a digest
and a count), with `strftime_now` pinned to `render_support.FIXED_TIME`. When transformers raises,
the error (type and message) is recorded instead; the sidecar must then fail too.

Loading transformers tokenizers takes seconds each, which is why the tests read this file and only
re-run transformers live on a sample (tests/render/test_parity.py::test_recorded_outputs_are_transformers).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import lzma
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

import tests.render.support as rs  # noqa: E402
from tests.conftest import SHARED_MODELS as SHARED  # noqa: E402 - ../shared/models, or SIDECAR_SHARED_MODELS


def pin_clock() -> None:
    """Makes transformers' `strftime_now` report `FIXED_TIME`."""
    import transformers.utils.chat_template_utils as ctu

    class FixedDatetime(datetime.datetime):
        @classmethod
        def now(cls, tz=None):  # noqa: ANN001, ANN206
            return datetime.datetime.fromtimestamp(rs.FIXED_TIME, tz or datetime.timezone.utc)

    ctu.datetime = FixedDatetime


class Transformers:
    """transformers tokenizers per model, loaded once."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self._tokenizers: dict[str, object] = {}

    def tokenizer(self, model: str):  # noqa: ANN201
        if model not in self._tokenizers:
            from transformers import AutoTokenizer

            self._tokenizers[model] = AutoTokenizer.from_pretrained(str(rs.model_dir(SHARED, model, self.scratch)))
        return self._tokenizers[model]


def expected_for(tf: Transformers, target: rs.Target, conv: rs.Conversation) -> dict:
    """transformers' text and ids (or error) for one case."""
    from sidecar.reference.normalize import normalize_messages, normalize_tools
    from sidecar.reference.roles import names_developer
    from sidecar.reference.template_analysis import content_format, rewrite

    tok = tf.tokenizer(target.model)
    source = target.source if target.source is not None else tok.get_chat_template()
    messages, tools, documents, kwargs = conv.python_inputs()
    messages = normalize_messages(messages, content_format(rewrite(source)), names_developer(source))
    tools = normalize_tools(tools) if tools is not None else None
    args = dict(
        tools=tools, documents=documents, chat_template=target.source,
        add_generation_prompt=conv.add_generation_prompt, continue_final_message=conv.continue_final_message, **kwargs,
    )
    try:
        text = tok.apply_chat_template(copy.deepcopy(messages), tokenize=False, **copy.deepcopy(args))
        record: dict = {"text": text}
        if target.compare_ids:
            ids = tok.apply_chat_template(copy.deepcopy(messages), tokenize=True, return_dict=False, **copy.deepcopy(args))
            record.update(ids=rs.ids_digest(list(ids)), n_ids=len(ids))
        return record
    except Exception as e:  # noqa: BLE001 - any failure is the expected outcome of the case
        return {"error": f"{type(e).__name__}: {e}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--show", nargs=2, metavar=("TARGET", "CONVERSATION"), help="print one case live")
    args = parser.parse_args()
    pin_clock()
    import transformers

    conversations = rs.load_conversations()
    targets = rs.targets(SHARED)
    with tempfile.TemporaryDirectory() as scratch:
        tf = Transformers(Path(scratch))
        if args.show:
            target = next(t for t in targets if t.id == args.show[0])
            conv = next(c for c in conversations if c.name == args.show[1])
            print(json.dumps(expected_for(tf, target, conv), ensure_ascii=False, indent=2))
            return 0
        out: dict = {
            "_meta": {
                "transformers": transformers.__version__,
                "conversations": len(conversations),
                "targets": len(targets),
                "fixed_time": rs.FIXED_TIME,
                # The variables transformers gives every template (tokenizer.special_tokens_map).
                "special_tokens_map": {
                    m: dict(tf.tokenizer(m).special_tokens_map) for m in [*rs.TEMPLATE_MODELS, rs.NEUTRAL]
                },
            }
        }
        for target in targets:
            out[target.id] = {conv.name: expected_for(tf, target, conv) for conv in conversations}
            errors = sum("error" in r for r in out[target.id].values())
            print(f"{target.id}: {len(conversations) - errors} rendered, {errors} errors", file=sys.stderr)
    rs.EXPECTED.write_bytes(lzma.compress(json.dumps(out, ensure_ascii=False, sort_keys=True).encode(), preset=9))
    print(f"wrote {rs.EXPECTED} ({rs.EXPECTED.stat().st_size} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
