"""Runs one vLLM 0.33 parser the way vLLM's chat-completions server does.

Non-streaming: `Parser.parse` then `assemble_chat_message_fields` (serving.py).
Streaming: one `ChatStreamProcessor` per choice, `step` once per delta, the finish reason on the
last delta (stream_processor.py). Both modes give the parser the prompt token ids first.
"""
from types import SimpleNamespace

from vllm.entrypoints.openai.chat_completion.message_assembly import assemble_chat_message_fields
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.chat_completion.stream_processor import ChatStreamProcessor
from vllm.parser import ParserManager

ENGINE = "vllm"


def _request(case, stream):
    body = {
        "model": "oracle",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": stream,
    }
    if case.get("tools"):
        body["tools"] = case["tools"]
        body["tool_choice"] = "auto"
    if case.get("chat_template_kwargs") is not None:
        body["chat_template_kwargs"] = case["chat_template_kwargs"]
    if case.get("reasoning_effort") is not None:
        body["reasoning_effort"] = case["reasoning_effort"]
    return ChatCompletionRequest(**body)


def parser_class(tool, reasoning, tokenizer, harmony=False):
    """The class vLLM's server composes for --tool-call-parser / --reasoning-parser."""
    return ParserManager.get_parser(tool_parser_name=tool, reasoning_parser_name=reasoning,
                                    enable_auto_tools=True, model_name="oracle",
                                    is_harmony=harmony, tokenizer=tokenizer)


def _model_config(case):
    model_type = case.get("model_type")
    if not model_type:
        return None
    hf = SimpleNamespace(model_type=model_type)
    return SimpleNamespace(hf_config=hf, hf_text_config=hf, hf_overrides=None)


def _make(cls, tokenizer, request, case):
    return cls(tokenizer, request.tools, chat_template_kwargs=request.chat_template_kwargs or {},
               model_config=_model_config(case))


def _calls(tool_calls):
    out = []
    for call in tool_calls or []:
        fn = call.function
        out.append({"id": call.id, "name": fn.name, "arguments": fn.arguments})
    return out


def _adjusted(cls, tokenizer, case, prompt_ids, stream):
    """The request as the renderer leaves it: a throwaway parser instance's `adjust_request`
    (online_renderer.py) may set skip_special_tokens, structured outputs, ..."""
    request = _request(case, stream=stream)
    probe = _make(cls, tokenizer, request, case)
    probe.set_prompt_token_ids(prompt_ids)
    return probe.adjust_request(request=request)


def run_non_stream(cls, tokenizer, case, prompt_ids, output_ids):
    request = _adjusted(cls, tokenizer, case, prompt_ids, stream=False)
    parser = _make(cls, tokenizer, request, case)
    parser.set_prompt_token_ids(prompt_ids)
    reasoning, content, calls = parser.parse(case["text"], request, enable_auto_tools=True,
                                             model_output_token_ids=output_ids)
    fields = assemble_chat_message_fields(request, reasoning, content, calls,
                                          enable_auto_tools=True, parser_cls=cls)
    return {"content": fields.content, "reasoning": fields.reasoning,
            "tool_calls": _calls(fields.tool_calls)}


def run_stream(cls, tokenizer, case, prompt_ids, chunks, finish_reason):
    """`chunks` is a list of (delta_text, delta_ids); the last carries the finish reason."""
    request = _adjusted(cls, tokenizer, case, prompt_ids, stream=True)
    parser = _make(cls, tokenizer, request, case)
    processor = ChatStreamProcessor(request, parser, enable_auto_tools=True, parser_cls=cls)
    content, reasoning, calls = [], [], {}
    for i, (text, ids) in enumerate(chunks):
        last = i == len(chunks) - 1
        step = processor.step(text, list(ids), finish_reason if last else None, prompt_ids)
        delta = step.delta
        if delta is None:
            continue
        if delta.content:
            content.append(delta.content)
        if getattr(delta, "reasoning", None):
            reasoning.append(delta.reasoning)
        for tc in delta.tool_calls or []:
            slot = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": "",
                                               "name_deltas": 0})
            if tc.id:
                slot["id"] = slot["id"] or tc.id
            fn = tc.function
            if fn is not None and fn.name:
                slot["name"] = (slot["name"] or "") + fn.name
                slot["name_deltas"] += 1
            if fn is not None and fn.arguments:
                slot["arguments"] += fn.arguments
    ordered = [calls[k] for k in sorted(calls)]
    return {"content": "".join(content) if content else None,
            "reasoning": "".join(reasoning) if reasoning else None,
            "tool_calls": ordered}
