"""Records the prompts vLLM 0.33.0 builds for the conversations of tests/data/render/vllm_roles
(developer messages, Claude Code's billing header) into tests/data/render/vllm_roles/expected.json.

    .venv/bin/python tests/render/generate_vllm_roles.py --vllm DIR --pythonpath LIB

Unlike tests/render/generate_expected.py, which normalizes with the sidecar's own reference
normalizer, this runs vLLM's code: DIR is the `vllm` package of the vLLM 0.33.0 wheel, unzipped
(`unzip vllm-0.33.0-*.whl 'vllm/*'`); LIB is a folder where the `openai` package that vLLM's types
import is installed (`pip install --target LIB openai`), unless the environment has it. Nothing
else of vLLM is imported (it needs torch and a GPU build): the files below are loaded on their own,
with the few vLLM modules they import replaced by stand-ins that play no part for text messages.

Each conversation goes through:
1. the request model's "before" validator (entrypoints/openai/chat_completion/protocol.py: a
   message's `reasoning_content` becomes `reasoning`), then the message types of
   renderers/chat_utils/types.py (pydantic validation, as the request model does);
2. renderers/chat_utils/chat_message.py: `parse_chat_message_content` on each message (where the
   billing header is stripped) and `_postprocess_messages`, with the content format vLLM detects
   for the template (`_detect_content_format` of renderers/hf.py);
3. renderers/hf.py, as `safe_apply_chat_template` does: when a message is a developer message and
   `_detect_developer_role_support` says the template does not name the role,
   `_convert_developer_to_system` then `_consolidate_system_messages`;
4. transformers' `apply_chat_template(tokenize=False)` with that conversation, `strftime_now`
   pinned to tests/render/support.py's FIXED_TIME. A failure is recorded as `error` (its type and
   message), as generate_expected.py records it.

The targets are listed in TARGETS (ids of tests/render/support.py's `targets`): templates that do
not name the developer role (the model's own and per-request ones), and some that do.
"""

from __future__ import annotations

import __future__
import argparse
import ast
import copy
import functools
import importlib.util
import json
import logging
import sys
import tempfile
import types
from collections import deque
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

import tests.render.support as rs  # noqa: E402
from tests.conftest import SHARED_MODELS as SHARED  # noqa: E402
from tests.render.generate_expected import Transformers, pin_clock  # noqa: E402

DATA = rs.DATA / "vllm_roles"
EXPECTED = DATA / "expected.json"

#: Templates that do not name the developer role (qwen3, llama3, mistral-nemo, gemma3 and a Mistral
#: Small given per request), then templates that do (gpt-oss, DeepSeek V3.2, Gemma 4).
TARGETS = [
    "qwen3/default", "llama3/default", "mistral-nemo/default", "gemma3/default",
    "mistral-nemo/Mistral-Small-3.2-24B-Instruct-2506", "qwen3/qwen3-coder",
    "gpt-oss/default", "deepseek-v3/deepseek-v3.2", "gemma3/google-gemma-4-31B-it",
]

#: The renderers/hf.py functions used, taken out of the file one by one (the module imports torch).
HF_FUNCTIONS = (
    "_is_var_access", "_is_attr_access", "_is_var_or_elems_access", "_attr_dotted_name",
    "_iter_nodes_assign_var_or_elems", "_iter_nodes_assign_messages_item", "_iter_nodes_assign_content_item",
    "_try_extract_ast", "_detect_content_format", "_detect_developer_role_support",
    "_convert_developer_to_system", "_consolidate_system_messages",
)


def _stub(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class VLLM:
    """vLLM 0.33.0's message pipeline, loaded from the unzipped wheel at `root`."""

    def __init__(self, root: Path) -> None:
        import jinja2
        import jinja2.nodes
        from pydantic import BaseModel, TypeAdapter

        # Stand-ins: harmony messages and PIL images are types in unions text messages never
        # match; the tracker and parser only serve media parts, which these conversations lack.
        class HarmonyMessage(BaseModel):
            author: dict

        class VLLMValidationError(ValueError):
            def __init__(self, message: str, **_kw: Any) -> None:
                super().__init__(message)

        _stub("openai_harmony", Message=HarmonyMessage)
        image = _stub("PIL.Image", Image=type("Image", (), {}))
        _stub("PIL", Image=image)
        for name in ("vllm", "vllm.renderers", "vllm.renderers.chat_utils"):
            _stub(name)
        _stub("vllm.config", ModelConfig=object)
        _stub("vllm.exceptions", VLLMValidationError=VLLMValidationError)
        _stub("vllm.inputs", MultiModalDataDict=dict, MultiModalUUIDDict=dict)
        _stub("vllm.logger", init_logger=logging.getLogger)
        _stub("vllm.renderers.chat_utils.content_parser", MODALITY_PLACEHOLDERS_MAP={},
              PROMPT_EMBEDS_PLACEHOLDER_TOKEN="<pe>", BaseMultiModalContentParser=object,
              make_prompt_embeds_placeholder=lambda _i: "")
        _stub("vllm.renderers.chat_utils.item_tracker", AsyncMultiModalItemTracker=object,
              BaseMultiModalItemTracker=object, MultiModalItemTracker=object)
        chat_utils = root / "renderers" / "chat_utils"
        vtypes = _load("vllm.renderers.chat_utils.types", chat_utils / "types.py")
        self.chat_message = _load("vllm.renderers.chat_utils.chat_message", chat_utils / "chat_message.py")
        self.validate = TypeAdapter(list[vtypes.ChatCompletionMessageParam]).validate_python

        class Loud:
            """hf.py logs a template it cannot parse and goes on with a default; here that stops."""

            def exception(self, message: str, *_args: Any, **_kw: Any) -> None:
                raise RuntimeError(message)

        namespace: dict[str, Any] = {
            "jinja2": jinja2, "deque": deque, "lru_cache": functools.lru_cache, "logger": Loud(),
            "Any": Any, "ConversationMessage": dict, "ChatTemplateContentFormat": str,
        }
        tree = ast.parse((root / "renderers" / "hf.py").read_text(encoding="utf-8"))
        found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in HF_FUNCTIONS]
        assert {n.name for n in found} == set(HF_FUNCTIONS), "renderers/hf.py is not vLLM 0.33.0's"
        module = ast.Module(body=found, type_ignores=[])
        exec(compile(module, "renderers/hf.py", "exec", flags=__future__.annotations.compiler_flag), namespace)  # noqa: S102
        self.hf = namespace

    def content_format(self, template: str) -> str:
        return self.hf["_detect_content_format"](template, default="string")

    def conversation(self, messages: list[dict], template: str) -> list[dict]:
        """What vLLM hands transformers for `messages` rendered with `template`."""
        messages = copy.deepcopy(messages)
        for message in messages:
            reasoning = message.pop("reasoning_content", None)
            if reasoning is not None and message.get("reasoning") is None:
                message["reasoning"] = reasoning
        content_format = self.content_format(template)

        class Parser:
            model_config = types.SimpleNamespace(enable_prompt_embeds=False)

            def mm_placeholder_storage(self) -> dict:
                return {}

        tracker = types.SimpleNamespace(create_parser=lambda **_kw: Parser())
        conversation: list[dict] = []
        for message in self.validate(messages):
            conversation.extend(self.chat_message.parse_chat_message_content(
                message, tracker, content_format, interleave_strings=False,
            ))
        self.chat_message._postprocess_messages(conversation)
        if any(m["role"] == "developer" for m in conversation) and not self.hf["_detect_developer_role_support"](template):
            conversation = self.hf["_consolidate_system_messages"](self.hf["_convert_developer_to_system"](conversation))
        return conversation


def expected_for(vllm: VLLM, tf: Transformers, target: rs.Target, conv: rs.Conversation) -> dict:
    tok = tf.tokenizer(target.model)
    template = target.source if target.source is not None else tok.get_chat_template()
    messages, tools, documents, kwargs = conv.python_inputs()
    assert tools is None and documents is None, "tools are normalized by the sidecar's code; keep them out"
    conversation = vllm.conversation(messages, template)
    try:
        text = tok.apply_chat_template(
            conversation, tokenize=False, chat_template=target.source, add_generation_prompt=conv.add_generation_prompt,
            continue_final_message=conv.continue_final_message, **kwargs,
        )
        return {"text": text}
    except Exception as e:  # noqa: BLE001 - any failure is the expected outcome of the case
        return {"error": f"{type(e).__name__}: {e}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vllm", type=Path, required=True, help="the `vllm` folder of the unzipped vLLM 0.33.0 wheel")
    parser.add_argument("--pythonpath", type=Path, help="a folder with the `openai` package, when not installed")
    args = parser.parse_args()
    if args.pythonpath:
        sys.path.append(str(args.pythonpath))
    version = (args.vllm / "_version.py").read_text(encoding="utf-8")
    if "0.33.0" not in version:
        print(f"{args.vllm} is not vLLM 0.33.0", file=sys.stderr)
        return 1
    pin_clock()
    import transformers

    vllm = VLLM(args.vllm)
    conversations = rs.load_conversations(DATA / "conversations")
    targets = {t.id: t for t in rs.targets(SHARED)}
    out: dict = {"_meta": {"vllm": "0.33.0", "transformers": transformers.__version__}}
    with tempfile.TemporaryDirectory() as scratch:
        tf = Transformers(Path(scratch))
        for target_id in TARGETS:
            target = targets[target_id]
            out[target_id] = {c.name: expected_for(vllm, tf, target, c) for c in conversations}
            errors = sum("error" in r for r in out[target_id].values())
            print(f"{target_id}: {len(conversations) - errors} rendered, {errors} errors", file=sys.stderr)
    EXPECTED.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
