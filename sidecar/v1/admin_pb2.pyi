from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReloadModelsRequest(_message.Message):
    __slots__ = ("models", "force")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedScalarFieldContainer[str]
    force: bool
    def __init__(self, models: _Optional[_Iterable[str]] = ..., force: _Optional[bool] = ...) -> None: ...

class ModelReload(_message.Message):
    __slots__ = ("model", "outcome", "previous_fingerprint", "fingerprint", "error", "seconds")
    class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OUTCOME_UNSPECIFIED: _ClassVar[ModelReload.Outcome]
        OUTCOME_UNCHANGED: _ClassVar[ModelReload.Outcome]
        OUTCOME_RELOADED: _ClassVar[ModelReload.Outcome]
        OUTCOME_FAILED: _ClassVar[ModelReload.Outcome]
        OUTCOME_SKIPPED: _ClassVar[ModelReload.Outcome]
    OUTCOME_UNSPECIFIED: ModelReload.Outcome
    OUTCOME_UNCHANGED: ModelReload.Outcome
    OUTCOME_RELOADED: ModelReload.Outcome
    OUTCOME_FAILED: ModelReload.Outcome
    OUTCOME_SKIPPED: ModelReload.Outcome
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    model: str
    outcome: ModelReload.Outcome
    previous_fingerprint: str
    fingerprint: str
    error: str
    seconds: float
    def __init__(self, model: _Optional[str] = ..., outcome: _Optional[_Union[ModelReload.Outcome, str]] = ..., previous_fingerprint: _Optional[str] = ..., fingerprint: _Optional[str] = ..., error: _Optional[str] = ..., seconds: _Optional[float] = ...) -> None: ...

class ReloadModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelReload]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelReload, _Mapping]]] = ...) -> None: ...
