"""Runs one SGLang 0.5.23 parser the way SGLang's chat-completions server does (serving_chat.py).

Reasoning first (`ReasoningParser`, `stream_reasoning` on), then the tool-call parser on the
remaining text (`FunctionCallParser`), only when tools are declared. Streaming flushes both
parsers on the last delta and then sends arguments the detector parsed but did not stream, as the
server's `_check_for_unstreamed_tool_args` does.

`force_reasoning` follows `_get_reasoning_from_request` with no template-derived reasoning config
(the oracle has no chat template), i.e. the detector's `reasoning_default` and the request's
`chat_template_kwargs`; a case whose prompt ends inside reasoning (`prompt_in_reasoning`) stands
for a template that opens the reasoning block itself, which SGLang reports as
`template_manager.force_reasoning`.
"""
import json

from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, Tool
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.parser.reasoning_parser import ReasoningParser

ENGINE = "sglang"


def _request(case, stream):
    body = {"model": "oracle", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    if case.get("tools"):
        body["tools"] = case["tools"]
        body["tool_choice"] = "auto"
    if case.get("chat_template_kwargs") is not None:
        body["chat_template_kwargs"] = case["chat_template_kwargs"]
    if case.get("reasoning_effort") is not None:
        body["reasoning_effort"] = case["reasoning_effort"]
    return ChatCompletionRequest(**body)


def _request_forces_reasoning(name, request, tokenizer):
    """`OpenAIServingChat._get_reasoning_from_request` with `reasoning_config` None."""
    kwargs = request.chat_template_kwargs or {}
    if name == "iquest_q1":
        from sglang.srt.parser.reasoning_parser import IQuestQ1ReasoningDetector

        return IQuestQ1ReasoningDetector.thinking_enabled(kwargs)
    if name == "minimax-m3":
        return kwargs.get("thinking_mode") == "enabled"
    if name == "hunyuan":
        return request.reasoning_effort not in (None, "none", "no_think")
    mode = ReasoningParser(model_type=name, stream_reasoning=True,
                           tokenizer=tokenizer).detector.reasoning_default
    if mode is None:
        return False
    if mode == "always":
        return True
    if mode == "mistral":
        return request.reasoning_effort is not None and request.reasoning_effort != "none"
    if mode in ("thinking", "enable_thinking"):
        return not kwargs or kwargs.get(mode) is not False
    if mode in ("explicit_thinking", "explicit_enable_thinking"):
        return kwargs.get(mode.replace("explicit_", "")) is True
    return False


def _reasoning_parser(name, case, request, tokenizer, stream, tools_active):
    force = bool(case.get("prompt_in_reasoning")) or _request_forces_reasoning(name, request,
                                                                              tokenizer)
    return ReasoningParser(model_type=name, stream_reasoning=stream, force_reasoning=force,
                           request=request, tokenizer=tokenizer,
                           tool_call_parser_active=tools_active)


def _tools(request):
    return [Tool(**t.model_dump()) if not isinstance(t, Tool) else t for t in request.tools or []]


def _call_id(tool, item, history=0):
    """`OpenAIServingChat._process_tool_call_id` (no earlier tool calls in the conversation).
    In non-streaming results `tool_index` is the tool's position in the request's tools."""
    if tool == "kimi_k3":
        return f"{item.name}:{history + item.tool_index}"
    if tool != "kimi_k2":
        return "call_" + "0" * 24  # a fresh uuid4 hex in the server: reported as random
    return f"functions.{item.name}:{history + item.tool_index}"


def _tool_parser(tool, request, tokenizer):
    if not tool:
        return None
    tools = _tools(request)
    if tools or FunctionCallParser.ToolCallParserEnum[tool].parses_without_tools():
        return FunctionCallParser(tools, tool, tokenizer=tokenizer)
    return None


def run_non_stream(tool, reasoning_name, tokenizer, case):
    request = _request(case, stream=False)
    text, reasoning, calls = case["text"], None, []
    parser = _tool_parser(tool, request, tokenizer)
    if reasoning_name:
        rparser = _reasoning_parser(reasoning_name, case, request, tokenizer, False, parser is not None)
        reasoning, text = rparser.parse_non_stream(text)
        text = text or ""
    if parser is not None and parser.has_tool_call(text):
        try:
            new_text, items = parser.parse_non_stream(text)
        except Exception as exc:  # the server logs it and answers with the text unparsed
            return {"content": text, "reasoning": reasoning, "tool_calls": [],
                    "server_swallowed_error": f"{type(exc).__name__}: {exc}"}
        text = new_text  # with no complete call the server still keeps the parser's text
        calls = [{"id": _call_id(tool, it), "name": it.name, "arguments": it.parameters} for it in items]
    return {"content": text or "", "reasoning": reasoning, "tool_calls": calls}


def run_stream(tool, reasoning_name, tokenizer, case, chunks):
    request = _request(case, stream=True)
    content, reasoning, calls = [], [], {}
    tparser = _tool_parser(tool, request, tokenizer)
    rparser = None
    if reasoning_name:
        rparser = _reasoning_parser(reasoning_name, case, request, tokenizer, True, tparser is not None)
    for i, (delta, _ids) in enumerate(chunks):
        last = i == len(chunks) - 1
        if rparser is not None:
            r_text, delta = rparser.parse_stream_chunk(delta)
            if last:
                end_r, end_n = rparser.parse_stream_end()
                r_text = (r_text or "") + (end_r or "")
                delta = (delta or "") + (end_n or "")
            if r_text:
                reasoning.append(r_text)
        if tparser is None:
            if delta:
                content.append(delta)
            continue
        normal, items = tparser.parse_stream_chunk(delta or "")
        if last:
            end_text, end_items = tparser.parse_stream_end()
            normal = (normal or "") + end_text
            items = list(items) + list(end_items)
        if normal:
            content.append(normal)
        for it in items:
            slot = calls.setdefault(it.tool_index, {"id": None, "name": None, "arguments": "",
                                                    "name_deltas": 0})
            if it.name:
                slot["id"] = slot["id"] or _call_id(tool, it)
                slot["name"] = (slot["name"] or "") + it.name
                slot["name_deltas"] += 1
            if it.parameters:
                slot["arguments"] += it.parameters
        if last:
            _unstreamed_args(tparser.detector, calls)
    ordered = [calls[k] for k in sorted(calls)]
    return {"content": "".join(content), "reasoning": "".join(reasoning) or None,
            "tool_calls": ordered}


def _unstreamed_args(detector, calls):
    """`OpenAIServingChat._check_for_unstreamed_tool_args`."""
    prev = getattr(detector, "prev_tool_call_arr", None)
    streamed = getattr(detector, "streamed_args_for_tool", None)
    if not prev or not streamed:
        return
    index = len(prev) - 1
    if index < 0 or index >= len(streamed):
        return
    expected = prev[index].get("arguments", {})
    expected = expected if isinstance(expected, str) else json.dumps(expected, ensure_ascii=False)
    actual = streamed[index]
    rest = expected[len(actual):] if expected.startswith(actual) else ""
    if rest:
        slot = calls.setdefault(index, {"id": None, "name": None, "arguments": "", "name_deltas": 0})
        slot["arguments"] += rest
