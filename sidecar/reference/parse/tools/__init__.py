"""Reference tool-call parsers, by name. Each holds a call's text until it is complete (or the
output ends) and then reads it whole; the native parsers stream the same result."""

from __future__ import annotations

from sidecar.reference.parse.tools import deepseek, glm, hermes, invoke, kimi, llama3_json, mistral, pythonic, qwen3_coder

#: name -> (markers, factory(markers, tools))
PARSERS = {
    "hermes": (hermes.MARKERS, lambda markers, tools: hermes.Hermes(markers)),
    "qwen3_coder": (qwen3_coder.MARKERS, qwen3_coder.Qwen3Coder),
    "qwen3_xml": (qwen3_coder.MARKERS, qwen3_coder.Qwen3Coder),
    "llama3_json": (llama3_json.MARKERS, lambda markers, tools: llama3_json.Llama3Json(markers)),
    "llama4_json": (llama3_json.MARKERS, lambda markers, tools: llama3_json.Llama3Json(markers)),
    "mistral": (mistral.MARKERS, lambda markers, tools: mistral.Mistral(markers)),
    "deepseek_v3": (deepseek.MARKERS, lambda markers, tools: deepseek.DeepSeek(markers, v31=False)),
    "deepseek_v31": (deepseek.MARKERS, lambda markers, tools: deepseek.DeepSeek(markers, v31=True)),
    "deepseek_v32": (invoke.DSML_MARKERS, lambda markers, tools: invoke.InvokeCalls(invoke.DSML, markers, tools)),
    "minimax_m2": (invoke.MINIMAX_MARKERS, lambda markers, tools: invoke.InvokeCalls(invoke.MINIMAX, markers, tools)),
    "glm45": (glm.MARKERS, glm.Glm),
    "glm47": (glm.MARKERS, glm.Glm),
    "kimi_k2": (kimi.MARKERS, lambda markers, tools: kimi.Kimi(markers)),
    "pythonic": (pythonic.MARKERS, lambda markers, tools: pythonic.Pythonic(markers)),
}
