"""Imports every module the oracle uses, so a broken scratch venv fails at setup, not mid-run."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: F401
import vllm.parser  # noqa: F401
import vllm.reasoning  # noqa: F401
import vllm.tool_parsers  # noqa: F401
from sglang.srt.function_call.function_call_parser import FunctionCallParser  # noqa: F401
from sglang.srt.parser.reasoning_parser import ReasoningParser  # noqa: F401
from vllm.entrypoints.openai.chat_completion.stream_processor import ChatStreamProcessor  # noqa: F401

import vllm
import sglang

entry_points = (FunctionCallParser, ReasoningParser, ChatStreamProcessor)
print("ok:", len(entry_points), "entry points; torch", torch.__version__, "vllm", vllm.__version__, "sglang", sglang.__version__)
