"""ListModels: what this server hosts."""

from __future__ import annotations

import grpc

from sidecar.registry import Model
from sidecar.rpc import Call
from sidecar.runtime import Runtime
from sidecar.v1 import preprocessor_pb2 as pb


def model_info(model: Model) -> pb.ModelInfo:
    tok = model.tokenizer
    return pb.ModelInfo(
        name=model.name,
        fingerprint=model.fingerprint,
        vocab_size=tok.vocab_size,
        special_tokens=[pb.SpecialToken(id=t.id, content=t.content) for t in tok.added_tokens if t.special],
        stop_token_ids=model.stop_token_ids,
        bos_token=model.config.bos_token or "",
        eos_token=model.config.eos_token or "",
        default_tool_parser=model.parse_defaults.tool_parser,
        default_reasoning_parser=model.parse_defaults.reasoning_parser,
        chat_templates=sorted(model.config.chat_templates),
        encoder=tok.encoder,
        tokenizer_format=tok.format,
        backend=model.backend,
        model_max_length=model.config.model_max_length,
        source=model.source,
    )


class ModelsServicer:
    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def ListModels(
        self, request: pb.ListModelsRequest, context: grpc.aio.ServicerContext, call: Call
    ) -> pb.ListModelsResponse:
        return pb.ListModelsResponse(models=[model_info(m) for m in self._runtime.registry])
