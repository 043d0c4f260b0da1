from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TruncationSide(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRUNCATION_SIDE_UNSPECIFIED: _ClassVar[TruncationSide]
    TRUNCATION_SIDE_RIGHT: _ClassVar[TruncationSide]
    TRUNCATION_SIDE_LEFT: _ClassVar[TruncationSide]
TRUNCATION_SIDE_UNSPECIFIED: TruncationSide
TRUNCATION_SIDE_RIGHT: TruncationSide
TRUNCATION_SIDE_LEFT: TruncationSide

class MultimodalItem(_message.Message):
    __slots__ = ("identifier", "offset", "length")
    IDENTIFIER_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    identifier: str
    offset: int
    length: int
    def __init__(self, identifier: _Optional[str] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class BlockHashing(_message.Message):
    __slots__ = ("algorithm", "block_size", "seed", "cache_salt", "lora_name", "lora_path", "vllm_extra_keys", "namespace", "mm_items", "sglang_extra_key", "sglang_event_format", "sequence_hashes", "vllm_lookahead")
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    LORA_NAME_FIELD_NUMBER: _ClassVar[int]
    LORA_PATH_FIELD_NUMBER: _ClassVar[int]
    VLLM_EXTRA_KEYS_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    MM_ITEMS_FIELD_NUMBER: _ClassVar[int]
    SGLANG_EXTRA_KEY_FIELD_NUMBER: _ClassVar[int]
    SGLANG_EVENT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_HASHES_FIELD_NUMBER: _ClassVar[int]
    VLLM_LOOKAHEAD_FIELD_NUMBER: _ClassVar[int]
    algorithm: str
    block_size: int
    seed: str
    cache_salt: str
    lora_name: str
    lora_path: str
    vllm_extra_keys: str
    namespace: str
    mm_items: _containers.RepeatedCompositeFieldContainer[MultimodalItem]
    sglang_extra_key: str
    sglang_event_format: str
    sequence_hashes: bool
    vllm_lookahead: int
    def __init__(self, algorithm: _Optional[str] = ..., block_size: _Optional[int] = ..., seed: _Optional[str] = ..., cache_salt: _Optional[str] = ..., lora_name: _Optional[str] = ..., lora_path: _Optional[str] = ..., vllm_extra_keys: _Optional[str] = ..., namespace: _Optional[str] = ..., mm_items: _Optional[_Iterable[_Union[MultimodalItem, _Mapping]]] = ..., sglang_extra_key: _Optional[str] = ..., sglang_event_format: _Optional[str] = ..., sequence_hashes: _Optional[bool] = ..., vllm_lookahead: _Optional[int] = ...) -> None: ...

class BlockHashSpec(_message.Message):
    __slots__ = ("algorithm", "block_size", "seed", "event_value", "vllm_extra_keys", "vllm_lookahead")
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    EVENT_VALUE_FIELD_NUMBER: _ClassVar[int]
    VLLM_EXTRA_KEYS_FIELD_NUMBER: _ClassVar[int]
    VLLM_LOOKAHEAD_FIELD_NUMBER: _ClassVar[int]
    algorithm: str
    block_size: int
    seed: str
    event_value: str
    vllm_extra_keys: str
    vllm_lookahead: int
    def __init__(self, algorithm: _Optional[str] = ..., block_size: _Optional[int] = ..., seed: _Optional[str] = ..., event_value: _Optional[str] = ..., vllm_extra_keys: _Optional[str] = ..., vllm_lookahead: _Optional[int] = ...) -> None: ...

class TokenizeRequest(_message.Message):
    __slots__ = ("model", "texts", "add_special_tokens", "return_offsets", "return_tokens", "max_length", "truncation_side", "block_hashing")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    ADD_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RETURN_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    RETURN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_LENGTH_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_SIDE_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHING_FIELD_NUMBER: _ClassVar[int]
    model: str
    texts: _containers.RepeatedScalarFieldContainer[str]
    add_special_tokens: bool
    return_offsets: bool
    return_tokens: bool
    max_length: int
    truncation_side: TruncationSide
    block_hashing: BlockHashing
    def __init__(self, model: _Optional[str] = ..., texts: _Optional[_Iterable[str]] = ..., add_special_tokens: _Optional[bool] = ..., return_offsets: _Optional[bool] = ..., return_tokens: _Optional[bool] = ..., max_length: _Optional[int] = ..., truncation_side: _Optional[_Union[TruncationSide, str]] = ..., block_hashing: _Optional[_Union[BlockHashing, _Mapping]] = ...) -> None: ...

class Encoding(_message.Message):
    __slots__ = ("token_ids", "offsets", "tokens", "block_hashes", "truncated")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    offsets: _containers.RepeatedScalarFieldContainer[int]
    tokens: _containers.RepeatedScalarFieldContainer[str]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    truncated: bool
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., offsets: _Optional[_Iterable[int]] = ..., tokens: _Optional[_Iterable[str]] = ..., block_hashes: _Optional[_Iterable[int]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class TokenizeResponse(_message.Message):
    __slots__ = ("encodings", "fingerprint", "block_hash_spec")
    ENCODINGS_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASH_SPEC_FIELD_NUMBER: _ClassVar[int]
    encodings: _containers.RepeatedCompositeFieldContainer[Encoding]
    fingerprint: str
    block_hash_spec: BlockHashSpec
    def __init__(self, encodings: _Optional[_Iterable[_Union[Encoding, _Mapping]]] = ..., fingerprint: _Optional[str] = ..., block_hash_spec: _Optional[_Union[BlockHashSpec, _Mapping]] = ...) -> None: ...

class TokenIds(_message.Message):
    __slots__ = ("token_ids",)
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class DetokenizeRequest(_message.Message):
    __slots__ = ("model", "sequences", "skip_special_tokens")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    SKIP_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: str
    sequences: _containers.RepeatedCompositeFieldContainer[TokenIds]
    skip_special_tokens: bool
    def __init__(self, model: _Optional[str] = ..., sequences: _Optional[_Iterable[_Union[TokenIds, _Mapping]]] = ..., skip_special_tokens: _Optional[bool] = ...) -> None: ...

class DetokenizeResponse(_message.Message):
    __slots__ = ("texts", "fingerprint")
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    fingerprint: str
    def __init__(self, texts: _Optional[_Iterable[str]] = ..., fingerprint: _Optional[str] = ...) -> None: ...

class RenderRequest(_message.Message):
    __slots__ = ("model", "messages_json", "tools_json", "documents_json", "chat_template_kwargs_json", "chat_template", "add_generation_prompt", "continue_final_message", "add_special_tokens", "return_text", "return_token_ids", "return_offsets", "block_hashing", "bypass_cache")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_JSON_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    ADD_GENERATION_PROMPT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_FINAL_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ADD_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RETURN_TEXT_FIELD_NUMBER: _ClassVar[int]
    RETURN_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    RETURN_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHING_FIELD_NUMBER: _ClassVar[int]
    BYPASS_CACHE_FIELD_NUMBER: _ClassVar[int]
    model: str
    messages_json: str
    tools_json: str
    documents_json: str
    chat_template_kwargs_json: str
    chat_template: str
    add_generation_prompt: bool
    continue_final_message: bool
    add_special_tokens: bool
    return_text: bool
    return_token_ids: bool
    return_offsets: bool
    block_hashing: BlockHashing
    bypass_cache: bool
    def __init__(self, model: _Optional[str] = ..., messages_json: _Optional[str] = ..., tools_json: _Optional[str] = ..., documents_json: _Optional[str] = ..., chat_template_kwargs_json: _Optional[str] = ..., chat_template: _Optional[str] = ..., add_generation_prompt: _Optional[bool] = ..., continue_final_message: _Optional[bool] = ..., add_special_tokens: _Optional[bool] = ..., return_text: _Optional[bool] = ..., return_token_ids: _Optional[bool] = ..., return_offsets: _Optional[bool] = ..., block_hashing: _Optional[_Union[BlockHashing, _Mapping]] = ..., bypass_cache: _Optional[bool] = ...) -> None: ...

class RenderResponse(_message.Message):
    __slots__ = ("text", "token_ids", "offsets", "block_hashes", "fingerprint", "block_hash_spec")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASH_SPEC_FIELD_NUMBER: _ClassVar[int]
    text: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    offsets: _containers.RepeatedScalarFieldContainer[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    fingerprint: str
    block_hash_spec: BlockHashSpec
    def __init__(self, text: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., offsets: _Optional[_Iterable[int]] = ..., block_hashes: _Optional[_Iterable[int]] = ..., fingerprint: _Optional[str] = ..., block_hash_spec: _Optional[_Union[BlockHashSpec, _Mapping]] = ...) -> None: ...

class Status(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class OpenRequest(_message.Message):
    __slots__ = ("request_id", "model", "tool_parser", "reasoning_parser", "tools_json", "prompt_token_ids", "chat_template_kwargs_json", "skip_special_tokens", "stop", "include_stop_str_in_output")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOOL_PARSER_FIELD_NUMBER: _ClassVar[int]
    REASONING_PARSER_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    SKIP_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STOP_STR_IN_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    tool_parser: str
    reasoning_parser: str
    tools_json: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    chat_template_kwargs_json: str
    skip_special_tokens: bool
    stop: _containers.RepeatedScalarFieldContainer[str]
    include_stop_str_in_output: bool
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., tool_parser: _Optional[str] = ..., reasoning_parser: _Optional[str] = ..., tools_json: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., chat_template_kwargs_json: _Optional[str] = ..., skip_special_tokens: _Optional[bool] = ..., stop: _Optional[_Iterable[str]] = ..., include_stop_str_in_output: _Optional[bool] = ...) -> None: ...

class StepTokens(_message.Message):
    __slots__ = ("request_id", "token_ids", "finished")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    finished: bool
    def __init__(self, request_id: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., finished: _Optional[bool] = ...) -> None: ...

class Step(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[StepTokens]
    def __init__(self, items: _Optional[_Iterable[_Union[StepTokens, _Mapping]]] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class ParseStreamRequest(_message.Message):
    __slots__ = ("open", "step", "cancel")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    open: OpenRequest
    step: Step
    cancel: CancelRequest
    def __init__(self, open: _Optional[_Union[OpenRequest, _Mapping]] = ..., step: _Optional[_Union[Step, _Mapping]] = ..., cancel: _Optional[_Union[CancelRequest, _Mapping]] = ...) -> None: ...

class ToolCallDelta(_message.Message):
    __slots__ = ("index", "id", "name", "arguments")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    index: int
    id: str
    name: str
    arguments: str
    def __init__(self, index: _Optional[int] = ..., id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class RequestDelta(_message.Message):
    __slots__ = ("request_id", "content", "reasoning", "tool_calls", "reasoning_tokens", "completion_tokens", "finished", "finish_reason", "matched_stop", "error", "fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    REASONING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    MATCHED_STOP_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    content: str
    reasoning: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCallDelta]
    reasoning_tokens: int
    completion_tokens: int
    finished: bool
    finish_reason: str
    matched_stop: str
    error: Status
    fingerprint: str
    def __init__(self, request_id: _Optional[str] = ..., content: _Optional[str] = ..., reasoning: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCallDelta, _Mapping]]] = ..., reasoning_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., finished: _Optional[bool] = ..., finish_reason: _Optional[str] = ..., matched_stop: _Optional[str] = ..., error: _Optional[_Union[Status, _Mapping]] = ..., fingerprint: _Optional[str] = ...) -> None: ...

class ParseStreamResponse(_message.Message):
    __slots__ = ("deltas",)
    DELTAS_FIELD_NUMBER: _ClassVar[int]
    deltas: _containers.RepeatedCompositeFieldContainer[RequestDelta]
    def __init__(self, deltas: _Optional[_Iterable[_Union[RequestDelta, _Mapping]]] = ...) -> None: ...

class MultiplexCall(_message.Message):
    __slots__ = ("id", "timeout_us", "tokenize", "detokenize", "render")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_US_FIELD_NUMBER: _ClassVar[int]
    TOKENIZE_FIELD_NUMBER: _ClassVar[int]
    DETOKENIZE_FIELD_NUMBER: _ClassVar[int]
    RENDER_FIELD_NUMBER: _ClassVar[int]
    id: int
    timeout_us: int
    tokenize: TokenizeRequest
    detokenize: DetokenizeRequest
    render: RenderRequest
    def __init__(self, id: _Optional[int] = ..., timeout_us: _Optional[int] = ..., tokenize: _Optional[_Union[TokenizeRequest, _Mapping]] = ..., detokenize: _Optional[_Union[DetokenizeRequest, _Mapping]] = ..., render: _Optional[_Union[RenderRequest, _Mapping]] = ...) -> None: ...

class MultiplexRequest(_message.Message):
    __slots__ = ("calls", "cancel")
    CALLS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[MultiplexCall]
    cancel: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, calls: _Optional[_Iterable[_Union[MultiplexCall, _Mapping]]] = ..., cancel: _Optional[_Iterable[int]] = ...) -> None: ...

class MultiplexResult(_message.Message):
    __slots__ = ("id", "tokenize", "detokenize", "render", "error")
    ID_FIELD_NUMBER: _ClassVar[int]
    TOKENIZE_FIELD_NUMBER: _ClassVar[int]
    DETOKENIZE_FIELD_NUMBER: _ClassVar[int]
    RENDER_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: int
    tokenize: TokenizeResponse
    detokenize: DetokenizeResponse
    render: RenderResponse
    error: Status
    def __init__(self, id: _Optional[int] = ..., tokenize: _Optional[_Union[TokenizeResponse, _Mapping]] = ..., detokenize: _Optional[_Union[DetokenizeResponse, _Mapping]] = ..., render: _Optional[_Union[RenderResponse, _Mapping]] = ..., error: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class MultiplexResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[MultiplexResult]
    def __init__(self, results: _Optional[_Iterable[_Union[MultiplexResult, _Mapping]]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SpecialToken(_message.Message):
    __slots__ = ("id", "content")
    ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    id: int
    content: str
    def __init__(self, id: _Optional[int] = ..., content: _Optional[str] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "fingerprint", "vocab_size", "special_tokens", "stop_token_ids", "bos_token", "eos_token", "default_tool_parser", "default_reasoning_parser", "chat_templates", "encoder", "tokenizer_format", "backend", "model_max_length", "source", "model_vocab_size")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    BOS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EOS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TOOL_PARSER_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_REASONING_PARSER_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATES_FIELD_NUMBER: _ClassVar[int]
    ENCODER_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FORMAT_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    MODEL_MAX_LENGTH_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    MODEL_VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    fingerprint: str
    vocab_size: int
    special_tokens: _containers.RepeatedCompositeFieldContainer[SpecialToken]
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    bos_token: str
    eos_token: str
    default_tool_parser: str
    default_reasoning_parser: str
    chat_templates: _containers.RepeatedScalarFieldContainer[str]
    encoder: str
    tokenizer_format: str
    backend: str
    model_max_length: int
    source: str
    model_vocab_size: int
    def __init__(self, name: _Optional[str] = ..., fingerprint: _Optional[str] = ..., vocab_size: _Optional[int] = ..., special_tokens: _Optional[_Iterable[_Union[SpecialToken, _Mapping]]] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., bos_token: _Optional[str] = ..., eos_token: _Optional[str] = ..., default_tool_parser: _Optional[str] = ..., default_reasoning_parser: _Optional[str] = ..., chat_templates: _Optional[_Iterable[str]] = ..., encoder: _Optional[str] = ..., tokenizer_format: _Optional[str] = ..., backend: _Optional[str] = ..., model_max_length: _Optional[int] = ..., source: _Optional[str] = ..., model_vocab_size: _Optional[int] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...

class ListParsersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ParserAlias(_message.Message):
    __slots__ = ("name", "engine")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    name: str
    engine: str
    def __init__(self, name: _Optional[str] = ..., engine: _Optional[str] = ...) -> None: ...

class ParserInfo(_message.Message):
    __slots__ = ("name", "kind", "implemented", "aliases", "markers", "id_style", "shadowed", "about")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    IMPLEMENTED_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    MARKERS_FIELD_NUMBER: _ClassVar[int]
    ID_STYLE_FIELD_NUMBER: _ClassVar[int]
    SHADOWED_FIELD_NUMBER: _ClassVar[int]
    ABOUT_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    implemented: bool
    aliases: _containers.RepeatedCompositeFieldContainer[ParserAlias]
    markers: _containers.RepeatedScalarFieldContainer[str]
    id_style: str
    shadowed: _containers.RepeatedScalarFieldContainer[str]
    about: str
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., implemented: _Optional[bool] = ..., aliases: _Optional[_Iterable[_Union[ParserAlias, _Mapping]]] = ..., markers: _Optional[_Iterable[str]] = ..., id_style: _Optional[str] = ..., shadowed: _Optional[_Iterable[str]] = ..., about: _Optional[str] = ...) -> None: ...

class ListParsersResponse(_message.Message):
    __slots__ = ("parsers", "engines")
    class EnginesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PARSERS_FIELD_NUMBER: _ClassVar[int]
    ENGINES_FIELD_NUMBER: _ClassVar[int]
    parsers: _containers.RepeatedCompositeFieldContainer[ParserInfo]
    engines: _containers.ScalarMap[str, str]
    def __init__(self, parsers: _Optional[_Iterable[_Union[ParserInfo, _Mapping]]] = ..., engines: _Optional[_Mapping[str, str]] = ...) -> None: ...
