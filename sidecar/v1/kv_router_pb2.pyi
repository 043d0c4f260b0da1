from sidecar.v1 import preprocessor_pb2 as _preprocessor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScoreRequest(_message.Message):
    __slots__ = ("model", "text", "messages_json", "token_ids", "lora_name", "cache_salt", "mm_items", "add_special_tokens", "tools_json", "chat_template_kwargs_json", "lora_path")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_JSON_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LORA_NAME_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    MM_ITEMS_FIELD_NUMBER: _ClassVar[int]
    ADD_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    LORA_PATH_FIELD_NUMBER: _ClassVar[int]
    model: str
    text: str
    messages_json: str
    token_ids: _preprocessor_pb2.TokenIds
    lora_name: str
    cache_salt: str
    mm_items: _containers.RepeatedCompositeFieldContainer[_preprocessor_pb2.MultimodalItem]
    add_special_tokens: bool
    tools_json: str
    chat_template_kwargs_json: str
    lora_path: str
    def __init__(self, model: _Optional[str] = ..., text: _Optional[str] = ..., messages_json: _Optional[str] = ..., token_ids: _Optional[_Union[_preprocessor_pb2.TokenIds, _Mapping]] = ..., lora_name: _Optional[str] = ..., cache_salt: _Optional[str] = ..., mm_items: _Optional[_Iterable[_Union[_preprocessor_pb2.MultimodalItem, _Mapping]]] = ..., add_special_tokens: _Optional[bool] = ..., tools_json: _Optional[str] = ..., chat_template_kwargs_json: _Optional[str] = ..., lora_path: _Optional[str] = ...) -> None: ...

class WorkerScore(_message.Message):
    __slots__ = ("worker", "blocks", "tokens", "blocks_by_medium")
    class BlocksByMediumEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    WORKER_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_BY_MEDIUM_FIELD_NUMBER: _ClassVar[int]
    worker: str
    blocks: int
    tokens: int
    blocks_by_medium: _containers.ScalarMap[str, int]
    def __init__(self, worker: _Optional[str] = ..., blocks: _Optional[int] = ..., tokens: _Optional[int] = ..., blocks_by_medium: _Optional[_Mapping[str, int]] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("workers", "block_hashes", "block_size", "mode", "block_hash_spec", "num_tokens", "fingerprint", "warming")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASH_SPEC_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    WARMING_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerScore]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    block_size: int
    mode: str
    block_hash_spec: _preprocessor_pb2.BlockHashSpec
    num_tokens: int
    fingerprint: str
    warming: bool
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerScore, _Mapping]]] = ..., block_hashes: _Optional[_Iterable[int]] = ..., block_size: _Optional[int] = ..., mode: _Optional[str] = ..., block_hash_spec: _Optional[_Union[_preprocessor_pb2.BlockHashSpec, _Mapping]] = ..., num_tokens: _Optional[int] = ..., fingerprint: _Optional[str] = ..., warming: _Optional[bool] = ...) -> None: ...

class KvStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class KvWorkerStatus(_message.Message):
    __slots__ = ("worker", "model", "endpoint", "blocks", "batches", "decode_errors", "gaps", "replayed", "resets", "restarts", "aged_out", "duplicates", "lag_seconds", "disconnects")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    DECODE_ERRORS_FIELD_NUMBER: _ClassVar[int]
    GAPS_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    RESETS_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    AGED_OUT_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DISCONNECTS_FIELD_NUMBER: _ClassVar[int]
    worker: str
    model: str
    endpoint: str
    blocks: int
    batches: int
    decode_errors: int
    gaps: int
    replayed: int
    resets: int
    restarts: int
    aged_out: int
    duplicates: int
    lag_seconds: float
    disconnects: int
    def __init__(self, worker: _Optional[str] = ..., model: _Optional[str] = ..., endpoint: _Optional[str] = ..., blocks: _Optional[int] = ..., batches: _Optional[int] = ..., decode_errors: _Optional[int] = ..., gaps: _Optional[int] = ..., replayed: _Optional[int] = ..., resets: _Optional[int] = ..., restarts: _Optional[int] = ..., aged_out: _Optional[int] = ..., duplicates: _Optional[int] = ..., lag_seconds: _Optional[float] = ..., disconnects: _Optional[int] = ...) -> None: ...

class KvModelStatus(_message.Message):
    __slots__ = ("model", "mode", "block_size", "blocks", "events", "events_per_second", "orphan_blocks", "evicted_blocks", "feed_state", "stream_seq", "stream_pending", "snapshot_age_seconds", "skipped_events", "malformed_messages", "consumer_restarts", "lookahead")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    ORPHAN_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    EVICTED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    FEED_STATE_FIELD_NUMBER: _ClassVar[int]
    STREAM_SEQ_FIELD_NUMBER: _ClassVar[int]
    STREAM_PENDING_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_AGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_EVENTS_FIELD_NUMBER: _ClassVar[int]
    MALFORMED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    LOOKAHEAD_FIELD_NUMBER: _ClassVar[int]
    model: str
    mode: str
    block_size: int
    blocks: int
    events: int
    events_per_second: float
    orphan_blocks: int
    evicted_blocks: int
    feed_state: str
    stream_seq: int
    stream_pending: int
    snapshot_age_seconds: float
    skipped_events: int
    malformed_messages: int
    consumer_restarts: int
    lookahead: int
    def __init__(self, model: _Optional[str] = ..., mode: _Optional[str] = ..., block_size: _Optional[int] = ..., blocks: _Optional[int] = ..., events: _Optional[int] = ..., events_per_second: _Optional[float] = ..., orphan_blocks: _Optional[int] = ..., evicted_blocks: _Optional[int] = ..., feed_state: _Optional[str] = ..., stream_seq: _Optional[int] = ..., stream_pending: _Optional[int] = ..., snapshot_age_seconds: _Optional[float] = ..., skipped_events: _Optional[int] = ..., malformed_messages: _Optional[int] = ..., consumer_restarts: _Optional[int] = ..., lookahead: _Optional[int] = ...) -> None: ...

class KvStatusResponse(_message.Message):
    __slots__ = ("models", "workers")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[KvModelStatus]
    workers: _containers.RepeatedCompositeFieldContainer[KvWorkerStatus]
    def __init__(self, models: _Optional[_Iterable[_Union[KvModelStatus, _Mapping]]] = ..., workers: _Optional[_Iterable[_Union[KvWorkerStatus, _Mapping]]] = ...) -> None: ...
