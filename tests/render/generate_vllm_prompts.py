"""Records what vLLM 0.33.0 hands the chat template, and the prompt transformers renders from it, for
the cases in tests/data/render/vllm/cases.json; and vLLM's content format for every template in
../shared/models (tests/data/render/vllm/content_formats.json). Read by tests/render/test_vllm_prompts.py.

Provenance: everything here runs vLLM's own code from its 0.33.0 wheel (unzipped; not a project
dependency, so this script is run by hand):
- request validation: `ChatCompletionRequest`'s `messages` field and its two message validators,
  taken from the wheel's entrypoints/openai/chat_completion/protocol.py, on the wheel's
  `OpenAIBaseModel` (extra keys allowed, which carries into the message TypedDicts);
- renderers/chat_utils/chat_message.py: `parse_chat_message_content` and `_postprocess_messages`
  (media parsing stubbed out: the cases are text only);
- renderers/hf.py: `_detect_content_format`.
Then transformers (the project's venv) renders the resulting conversation with the real template.

    .venv/bin/python tests/render/generate_vllm_prompts.py --vllm DIR --pylib DIR

`--vllm` is the unzipped wheel's `vllm` package directory; `--pylib` directories holding the
packages vLLM's types import: openai, pydantic (>= 2.12), oss-harmony (`openai_harmony`), e.g.
`pip install --target DIR openai pydantic oss-harmony`. `_meta` in each output records the versions.
"""

from __future__ import annotations

import argparse
import ast
import collections
import copy
import importlib.metadata
import importlib.util
import json
import logging
import sys
import tempfile
import types
from functools import lru_cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

import tests.render.support as rs  # noqa: E402
from tests.conftest import SHARED_MODELS as SHARED  # noqa: E402
from tests.render.generate_expected import Transformers, pin_clock  # noqa: E402

OUT = rs.DATA / "vllm"


def _module(name: str, **attrs: Any) -> types.ModuleType:
    m = sys.modules.get(name) or types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m
    spec.loader.exec_module(m)
    return m


def _functions(path: Path, names: set[str], ns: dict) -> dict:
    """Executes the named top-level functions of `path` in `ns`."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            exec(compile(ast.Module([node], []), str(path), "exec", dont_inherit=True), ns)  # noqa: S102
    return ns


class Vllm:
    """vLLM 0.33's message pipeline and content-format detection, from the wheel at `root`."""

    def __init__(self, root: Path) -> None:
        from pydantic import model_validator

        class _PilImage:
            pass

        _module("PIL", Image=_module("PIL.Image", Image=_PilImage))

        class VLLMValidationError(ValueError):
            def __init__(self, msg: str, **_: Any) -> None:
                super().__init__(msg)

        for name in ("vllm", "vllm.entrypoints", "vllm.entrypoints.serve", "vllm.entrypoints.serve.engine",
                     "vllm.renderers", "vllm.renderers.chat_utils"):
            _module(name)
        _module("vllm.logger", init_logger=logging.getLogger)
        _module("vllm.utils", random_uuid=lambda: "0")
        _module("vllm.config", ModelConfig=object)
        _module("vllm.exceptions", VLLMValidationError=VLLMValidationError)
        self.refusals: tuple[type, ...] = (VLLMValidationError,)
        _module("vllm.inputs", MultiModalDataDict=dict, MultiModalUUIDDict=dict)
        _module("vllm.renderers.chat_utils.content_parser", MODALITY_PLACEHOLDERS_MAP={},
                PROMPT_EMBEDS_PLACEHOLDER_TOKEN="<pe>", BaseMultiModalContentParser=object,
                make_prompt_embeds_placeholder=lambda i: "")
        _module("vllm.renderers.chat_utils.item_tracker", AsyncMultiModalItemTracker=object,
                BaseMultiModalItemTracker=object, MultiModalItemTracker=object)
        engine = _load("vllm.entrypoints.serve.engine.protocol", root / "entrypoints/serve/engine/protocol.py")
        vtypes = _load("vllm.renderers.chat_utils.types", root / "renderers/chat_utils/types.py")
        self.chat = _load("vllm.renderers.chat_utils.chat_message", root / "renderers/chat_utils/chat_message.py")

        # The request model reduced to `messages` and the validators that touch it.
        protocol = root / "entrypoints/openai/chat_completion/protocol.py"
        cls = next(n for n in ast.parse(protocol.read_text()).body
                   if isinstance(n, ast.ClassDef) and n.name == "ChatCompletionRequest")
        cls.body = [n for n in cls.body
                    if (isinstance(n, ast.AnnAssign) and n.target.id == "messages")
                    or (isinstance(n, ast.FunctionDef)
                        and n.name in ("_normalize_messages_before", "_materialize_tool_calls_after"))]
        assert len(cls.body) == 3, "protocol.py changed shape"
        ns = {"OpenAIBaseModel": engine.OpenAIBaseModel, "ChatCompletionMessageParam": vtypes.ChatCompletionMessageParam,
              "model_validator": model_validator, "Any": Any}
        exec(compile(ast.Module([cls], []), str(protocol), "exec", dont_inherit=True), ns)  # noqa: S102
        self.request = ns["ChatCompletionRequest"]
        import pydantic

        # What vLLM's server answers with 400.
        self.refusals += (pydantic.ValidationError,)

        import jinja2
        import jinja2.nodes

        self.hf = _functions(root / "renderers/hf.py", {
            "_is_var_access", "_is_attr_access", "_is_var_or_elems_access", "_attr_dotted_name",
            "_iter_nodes_assign_var_or_elems", "_iter_nodes_assign_messages_item", "_iter_nodes_assign_content_item",
            "_try_extract_ast", "_detect_content_format",
        }, {"jinja2": jinja2, "deque": collections.deque, "lru_cache": lru_cache,
            "logger": logging.getLogger("vllm"), "ChatTemplateContentFormat": str})

    def content_format(self, template: str) -> str:
        return self.hf["_detect_content_format"](template, default="string")

    def conversation(self, messages: list, content_format: str) -> list[dict]:
        """The messages vLLM passes to `apply_chat_template`; raises where vLLM answers 400."""
        class Parser:
            class model_config:  # noqa: N801
                enable_prompt_embeds = False

            def mm_placeholder_storage(self) -> dict:
                return {}

        class Tracker:
            def create_parser(self, **_: Any) -> Parser:
                return Parser()

        validated = self.request.model_validate({"messages": copy.deepcopy(messages)}).messages
        conversation = []
        for m in validated:
            conversation += self.chat.parse_chat_message_content(m, Tracker(), content_format, interleave_strings=False)
        self.chat._postprocess_messages(conversation)
        return conversation


def versions() -> dict:
    return {p: importlib.metadata.version(p) for p in ("openai", "pydantic", "oss-harmony", "transformers", "jinja2")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm", type=Path, required=True, help="the unzipped vLLM 0.33.0 wheel's vllm/ directory")
    ap.add_argument("--pylib", type=Path, nargs="+", required=True, help="directories with openai, pydantic, oss-harmony")
    args = ap.parse_args()
    sys.path[:0] = [str(p) for p in args.pylib]
    logging.disable(logging.CRITICAL)
    vllm = Vllm(args.vllm)
    pin_clock()
    scratch = Path(tempfile.mkdtemp())
    tf = Transformers(scratch)
    targets = {t.id: t for t in rs.targets(SHARED)}

    def source_of(target: rs.Target) -> str:
        if target.source is not None:
            return target.source
        return tf.tokenizer(target.model).get_chat_template()

    formats = {tid: vllm.content_format(source_of(t)) for tid, t in sorted(targets.items())}
    meta = {"vllm": "0.33.0", **versions()}
    (OUT / "content_formats.json").write_text(json.dumps({"_meta": meta, "formats": formats}, indent=1) + "\n")

    spec = json.loads((OUT / "cases.json").read_text())
    for case in spec["cases"]:
        case["expected"] = {}
        for tid in case["templates"]:
            target = targets[tid]
            try:
                conversation = vllm.conversation(case["messages"], formats[tid])
            except vllm.refusals as e:
                case["expected"][tid] = {"vllm_refuses": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
                continue
            tok = tf.tokenizer(target.model)
            text = tok.apply_chat_template(conversation, tokenize=False, chat_template=target.source,
                                           add_generation_prompt=True)
            case["expected"][tid] = {"text": text}
    spec["_meta"] = meta
    (OUT / "cases.json").write_text(json.dumps(spec, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
