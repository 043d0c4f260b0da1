"""The backend interface: what the servicers need from a tokenizer, a renderer and a parser.

A leaf: types and protocols only, importing nothing of the project. The implementations,
`sidecar.native` (the Rust core, the default) and `sidecar.reference` (pure Python on the PyPI
`tokenizers` package: tokenize and render), import this module; `sidecar.factory` picks one by
name. The differential tests hold the two to identical outputs and identical errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol, Sequence


@dataclass(frozen=True, slots=True)
class EncodeOptions:
    """How to encode a batch (see TokenizeRequest in the proto)."""

    add_special_tokens: bool = True
    return_offsets: bool = False
    return_tokens: bool = False
    max_length: int = 0
    truncate_left: bool = False
    timeout_s: float | None = None
    #: Refuse a text with a run of one character class longer than this (0 = no limit).
    max_word_chars: int = 0


@dataclass(slots=True)
class Encoding:
    """One text's tokens."""

    ids: list[int]
    offsets: list[int] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class AddedToken:
    """An added vocabulary entry."""

    id: int
    content: str
    special: bool


@dataclass(frozen=True, slots=True)
class RenderOptions:
    """One Render request (see RenderRequest in the proto); JSON fields are passed through as text."""

    messages_json: str
    tools_json: str = ""
    documents_json: str = ""
    chat_template_kwargs_json: str = ""
    #: A template name of the model, or Jinja source (only with `allow_request_template`).
    chat_template: str | None = None
    allow_request_template: bool = False
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    return_text: bool = False
    return_token_ids: bool = True
    return_offsets: bool = False
    #: Reuse token ids of unchanged prompt segments from earlier requests (native backend).
    use_cache: bool = True
    timeout_s: float | None = None


@dataclass(frozen=True, slots=True)
class CacheStats:
    """How one Render used the multi-turn segment cache (all zero when it was not used)."""

    hit_segments: int = 0
    miss_segments: int = 0
    hit_bytes: int = 0
    miss_bytes: int = 0


@dataclass(slots=True)
class Rendered:
    """A rendered prompt.

    `ids` and `offsets` are sequences of ints: the native backend returns read-only uint32
    memoryviews (format "I") over the native result, so a caller hands them on (to the protobuf
    encoder, to a hasher) without a Python int per id or a copy; compare with `list(ids)`. The
    reference backend returns lists.
    """

    text: str | None
    ids: Sequence[int]
    offsets: Sequence[int] = field(default_factory=list)
    cache: CacheStats = field(default_factory=CacheStats)


@dataclass(frozen=True, slots=True)
class RendererSettings:
    """Server-wide rendering limits and caches (see `sidecar serve --help`)."""

    #: minijinja fuel per render (roughly instructions executed).
    fuel: int = 50_000_000
    #: Maximum nesting of macro calls and recursive loops.
    recursion_limit: int = 100
    #: Maximum rendered prompt size.
    max_output_bytes: int = 64 << 20
    #: Multi-turn segment cache budget per model; 0 disables it.
    cache_bytes: int = 64 << 20
    #: Seconds since the epoch that `strftime_now` reports (in UTC) instead of now (tests pin dates).
    fixed_time: int | None = None
    #: Refuse a prompt with a run of one character class longer than this (0 = no limit).
    max_word_chars: int = 0


class Renderer(Protocol):
    """A model's chat templates bound to its tokenizer; thread-safe."""

    #: Names of the model's templates (`default`, `tool_use`, ...).
    template_names: list[str]

    def render(self, opts: RenderOptions) -> Rendered:
        """Renders and tokenizes; raises InvalidArgument / NotFound / FailedPrecondition /
        ResourceExhausted / DeadlineExceeded with a message naming the field."""
        ...


class Tokenizer(Protocol):
    """A loaded tokenizer; thread-safe, immutable."""

    #: "fastokens", "tokenizers" (native) or "tokenizers-python" (reference).
    encoder: str
    #: "tokenizer.json" or "tiktoken".
    format: str
    vocab_size: int
    #: Rows of the model's output layer, 0 when unknown: ids below it that the vocabulary does not
    #: define decode to nothing (an engine can sample them), others are refused.
    output_size: int
    added_tokens: list[AddedToken]

    def encode_batch(self, texts: Sequence[str], opts: EncodeOptions) -> list[Encoding]:
        """Encodes texts; raises InvalidArgument / DeadlineExceeded naming the text."""
        ...

    def decode_batch(
        self, seqs: Sequence[Sequence[int]], skip_special_tokens: bool, timeout_s: float | None = None
    ) -> list[str]:
        """Decodes id sequences; an id outside the vocabulary and the output size is InvalidArgument
        naming sequence and position."""
        ...


@dataclass(frozen=True, slots=True)
class ParseLimits:
    """Limits of one ParseStream (see `ServerConfig`)."""

    #: Open requests per stream; one more is RESOURCE_EXHAUSTED.
    max_requests: int = 4096
    #: Finished request ids remembered, so a late step is "already finished", not "unknown".
    remember_finished: int = 4096
    #: Bytes of undecided output one request may hold back; more is RESOURCE_EXHAUSTED.
    max_held_bytes: int = 1 << 20
    #: Token ids of one request in one step; more fails the request with RESOURCE_EXHAUSTED.
    max_step_ids: int = 16 << 20
    #: Bytes of one request's delta in an answer; more fails the request with RESOURCE_EXHAUSTED.
    max_delta_bytes: int = 64 << 20
    #: Bytes of undecided output all open requests may hold back together; the request whose step
    #: passes what the others leave fails with RESOURCE_EXHAUSTED.
    max_stream_held_bytes: int = 256 << 20


class ParseModel(Protocol):
    """A model's parsing data, shared by all its requests."""

    #: "byte_level", "sentencepiece" or "generic".
    decoder: str
    tool_parsers: list[str]
    reasoning_parsers: list[str]


@dataclass(frozen=True, slots=True)
class ParseOpenConfig:
    """How one ParseStream request is parsed: its `OpenRequest` with the model's defaults applied
    (built once, where the request enters, by the ParseStream servicer). Parser names are checked
    by the backend against the model's parsers."""

    #: Resolved tool-call parser ("" or "none" = none).
    tool_parser: str = ""
    #: Resolved reasoning parser ("" or "none" = none).
    reasoning_parser: str = ""
    #: The request's tools, OpenAI shape, as JSON text ("" = none).
    tools_json: str = ""
    #: The request's `chat_template_kwargs` as JSON text ("" = none).
    chat_template_kwargs_json: str = ""
    skip_special_tokens: bool = True
    stop: tuple[str, ...] = ()
    include_stop_str_in_output: bool = False
    #: Bytes of undecided output the request may hold back; more fails it (RESOURCE_EXHAUSTED).
    max_held_bytes: int = 1 << 20
    #: Keep the decoded stream and attributions for `ParseMux.trace` (tests).
    trace: bool = False
    #: Seed of generated tool-call ids; 0 = random (tests pin it).
    id_seed: int = 0

    def __post_init__(self) -> None:
        for name in ("tool_parser", "reasoning_parser", "tools_json", "chat_template_kwargs_json"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"ParseOpenConfig.{name}: expected str, got {type(getattr(self, name)).__name__}")
        if not isinstance(self.stop, tuple) or not all(isinstance(s, str) for s in self.stop):
            raise TypeError("ParseOpenConfig.stop: expected a tuple of str")
        if self.max_held_bytes <= 0 or self.id_seed < 0:
            raise ValueError("ParseOpenConfig: max_held_bytes must be > 0 and id_seed >= 0")

    def as_dict(self) -> dict:
        """The fields by name (what the native core reads as JSON)."""
        return {
            "tool_parser": self.tool_parser, "reasoning_parser": self.reasoning_parser, "tools_json": self.tools_json,
            "chat_template_kwargs_json": self.chat_template_kwargs_json,
            "skip_special_tokens": self.skip_special_tokens, "stop": list(self.stop),
            "include_stop_str_in_output": self.include_stop_str_in_output, "max_held_bytes": self.max_held_bytes,
            "trace": self.trace, "id_seed": self.id_seed,
        }


class Deferred(NamedTuple):
    """`ParseMux.handle` of a step that costs more than it was given: nothing was done."""

    #: Bytes the step reads.
    cost: int


class ParseMux(Protocol):
    """The open requests of one ParseStream (used from one thread)."""

    def open(
        self, model: ParseModel, request_id: str, fingerprint: str, config: ParseOpenConfig, prompt_ids: Sequence[int]
    ) -> None:
        """Opens a request; raises InvalidArgument / ResourceExhausted naming the field."""
        ...

    def handle(self, message: bytes, within: int | None = None) -> bytes | Deferred | None:
        """Answers a raw `ParseStreamRequest` step or cancel with raw `ParseStreamResponse` bytes;
        returns None for an `open` (the caller resolves the model and calls `open`). A step that
        would read more than `within` bytes (the message, and the text held back by the requests it
        finishes or may push past their held-back limit) is `Deferred` with that cost, untouched.
        A malformed message raises InvalidArgument."""
        ...

    def trace(self, request_id: str) -> dict | None:
        """The attribution trace of a request opened with `trace` (tests)."""
        ...

    def close(self) -> None:
        """Frees every open request."""
        ...

    def __len__(self) -> int: ...


class Backend(Protocol):
    """Loads models' components."""

    name: str

    def load_tokenizer(self, model_dir: Path, output_size: int = 0) -> Tokenizer:
        """Loads the tokenizer of a model directory, for a model with `output_size` output rows
        (0 = unknown)."""
        ...

    def load_renderer(
        self, templates: list[tuple[str, str]], variables: list[tuple[str, str]], tokenizer: Tokenizer,
        settings: RendererSettings,
    ) -> Renderer:
        """Binds (name, source) chat templates and special-token variables to a loaded tokenizer."""
        ...

    def load_parse_model(self, tokenizer: Tokenizer, force_generic: bool = False,
                         response_template: dict | None = None) -> ParseModel | None:
        """Builds the parsing data of a loaded tokenizer (with the model's `response_template`, which
        the `hf` and `beam` parsers interpret); None on a backend that does not parse."""
        ...

    def new_parse_mux(self, limits: ParseLimits) -> ParseMux:
        """A fresh ParseStream multiplexer; a backend that does not parse raises FailedPrecondition
        saying why (the stream's status)."""
        ...
