"""The models a server hosts: name -> loaded tokenizer, configuration and fingerprint."""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from router_adapter.errors import quoted
from sidecar.backend import Backend, ParseModel, Renderer, RendererSettings, Tokenizer
from sidecar.chat_template import renderer_inputs
from sidecar.errors import InvalidArgument, NotFound
from sidecar.model_config import MAX_OUTPUT_SIZE, ModelConfig
from sidecar.parse_defaults import ParseDefaults, parse_defaults

#: Name of the model served when no `--model` is given.
EMBEDDED_MODEL_NAME = "qwen3"
_EMBEDDED_DIR = Path(__file__).resolve().parent / "embedded" / "qwen3"

#: Options accepted after the directory in `--model NAME=DIR,key=value,...`. `vocab_size` is the
#: model's output size where its directory has no config.json saying it (0 = unknown).
MODEL_OPTION_KEYS = ("tool_parser", "reasoning_parser", "vocab_size")


@dataclass(frozen=True)
class ModelSpec:
    """A model to load: its name, its directory and per-model options."""

    name: str
    directory: Path
    options: dict[str, str] = field(default_factory=dict)
    source: str = ""

    @classmethod
    def parse(cls, text: str) -> ModelSpec:
        """Parses `NAME=DIR[,key=value...]` (the `--model` flag)."""
        name, sep, rest = text.partition("=")
        if not sep or not name or not rest:
            raise InvalidArgument(f"--model {text!r}: expected NAME=DIR[,key=value...]")
        directory, *pairs = rest.split(",")
        options = {}
        for pair in pairs:
            key, eq, value = pair.partition("=")
            if not eq or key not in MODEL_OPTION_KEYS:
                raise InvalidArgument(f"--model {text!r}: unknown option {pair!r}; known: {', '.join(MODEL_OPTION_KEYS)}")
            if key == "vocab_size" and not (value.isascii() and value.isdigit() and int(value) <= MAX_OUTPUT_SIZE):
                raise InvalidArgument(f"--model {text!r}: vocab_size={value!r}: expected an integer in [0, 2^32]")
            options[key] = value
        _check_parser_names(text, options)
        path = Path(directory).expanduser()
        return cls(name, path, options, source=str(path))


def _check_parser_names(text: str, options: dict[str, str]) -> None:
    """An unknown parser name would start fine and fail every ParseStream open that relies on the
    model's default: it is refused at startup instead."""
    from sidecar import parsers

    for kind in ("tool", "reasoning"):
        name = options.get(f"{kind}_parser")
        if name and name != "none" and parsers.find(kind, name) is None:
            known = ", ".join(sorted(p.name for p in parsers.of_kind(kind)))
            raise InvalidArgument(f"--model {text!r}: unknown {kind} parser {name!r}; known: none, {known}")


def embedded_spec() -> ModelSpec:
    """The embedded Qwen3 tokenizer and template, unpacked once into the user cache."""
    return ModelSpec(EMBEDDED_MODEL_NAME, materialize_embedded(), {}, source="embedded:qwen3")


def materialize_embedded() -> Path:
    """Decompresses the embedded model into a content-addressed cache directory (atomically)."""
    packed = _EMBEDDED_DIR / "tokenizer.json.xz"
    digest = hashlib.sha256(packed.read_bytes()).hexdigest()[:16]
    cache_root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sidecar" / "embedded"
    target = cache_root / f"qwen3-{digest}"
    if (target / "tokenizer.json").is_file():
        return target
    cache_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="qwen3-", dir=cache_root))
    try:
        (staging / "tokenizer.json").write_bytes(lzma.decompress(packed.read_bytes()))
        for name in ("tokenizer_config.json", "chat_template.jinja", "LICENSE", "NOTICE"):
            shutil.copyfile(_EMBEDDED_DIR / name, staging / name)
        try:
            staging.rename(target)
        except OSError:
            pass  # another process won the race; its copy is identical
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _fingerprint_defaults(spec: ModelSpec) -> dict[str, Any]:
    return {"options": spec.options, "add_special_tokens": {"tokenize": True, "render": False}}


def output_size(spec: ModelSpec, config: ModelConfig) -> int:
    """The model's output size: the `vocab_size=` option, else its config.json's; 0 = unknown."""
    option = spec.options.get("vocab_size")
    return int(option) if option is not None else config.output_size


def compute_fingerprint(config: ModelConfig, defaults: dict[str, Any]) -> str:
    """`sha256:` + digest over every output-relevant file and default.

    The backend and the encoder are deliberately left out: both are held to identical outputs, so a
    router on the native backend and an engine-side check on the reference backend agree.
    """
    h = hashlib.sha256(b"sidecar.v1\0")
    for path in config.files:
        h.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    # The output size decides which ids decode (padded rows) or are refused. Only config.json's
    # `vocab_size` is hashed, not the whole file (it holds much that changes no output); left out
    # when absent so the fingerprints of directories without one stay as they were.
    if config.output_size:
        h.update(b"output_size\0" + str(config.output_size).encode())
    h.update(json.dumps(defaults, sort_keys=True).encode())
    return "sha256:" + h.hexdigest()[:32]


@dataclass(frozen=True)
class Model:
    """A hosted model; every component is built at load, immutable and shared by all requests."""

    name: str
    source: str
    config: ModelConfig
    tokenizer: Tokenizer
    #: The name of the backend that loaded it (reported by ListModels).
    backend: str
    options: dict[str, str]
    fingerprint: str
    #: Its chat templates bound to its tokenizer.
    renderer: Renderer
    #: Its parsing data; None on a backend that does not parse (ParseStream refuses it).
    parse_model: ParseModel | None
    #: The parsers its ParseStream requests get when they name none.
    parse_defaults: ParseDefaults

    @property
    def stop_token_ids(self) -> list[int]:
        ids: list[int] = []
        by_content = {t.content: t.id for t in self.tokenizer.added_tokens}
        eos = self.config.eos_token
        if eos is not None and eos in by_content:
            ids.append(by_content[eos])
        ids.extend(i for i in self.config.generation_eos_ids if i not in ids)
        return ids


class ModelRegistry:
    """Name -> Model. Models are loaded at startup and may be replaced by a reload; lookups are
    lock-free reads of a dict that is never mutated, only replaced (copy on write), so a request sees
    one model from start to end, and a reader iterating the registry never sees it change."""

    def __init__(self, backend: Backend, render_settings: RendererSettings | None = None) -> None:
        self.backend = backend
        self.render_settings = render_settings or RendererSettings()
        self._models: dict[str, Model] = {}
        self._specs: dict[str, ModelSpec] = {}
        self._generation = 0

    @property
    def generation(self) -> int:
        """Changes whenever the hosted models change (a load or a swap), so state derived from
        them (the Multiplex stream's model table) knows when to rebuild."""
        return self._generation

    def load(self, spec: ModelSpec) -> Model:
        """Builds and registers a model (at startup)."""
        if spec.name in self._models:
            raise InvalidArgument(f"--model: model name {spec.name!r} is registered twice")
        model = self.build(spec)
        self._specs = {**self._specs, spec.name: spec}
        self._models = {**self._models, spec.name: model}
        self._generation += 1
        return model

    def fingerprint_of(self, spec: ModelSpec) -> str:
        """The fingerprint the spec's directory has now (reads and hashes its files, loads nothing)."""
        return compute_fingerprint(ModelConfig.from_dir(spec.directory), _fingerprint_defaults(spec))

    def build(self, spec: ModelSpec) -> Model:
        """Loads a model without registering it (a reload builds the new one beside the old)."""
        config = ModelConfig.from_dir(spec.directory)
        tokenizer = self.backend.load_tokenizer(spec.directory, output_size(spec, config))
        defaults = _fingerprint_defaults(spec)
        templates, variables = renderer_inputs(config)
        # Built here, not on the first ParseStream open: it takes ~100 ms per model natively and
        # would stall the event loop under live traffic.
        parse_model = self.backend.load_parse_model(tokenizer, response_template=config.response_template)
        model = Model(
            name=spec.name,
            source=spec.source or str(spec.directory),
            config=config,
            tokenizer=tokenizer,
            backend=self.backend.name,
            options=dict(spec.options),
            fingerprint=compute_fingerprint(config, defaults),
            renderer=self.backend.load_renderer(templates, variables, tokenizer, self.render_settings),
            parse_model=parse_model,
            parse_defaults=parse_defaults(
                config.chat_templates.values(), (t.content for t in tokenizer.added_tokens), spec.options,
                getattr(parse_model, "response_template_fields", ()),
            ),
        )
        return model

    def spec(self, name: str) -> ModelSpec:
        """What the hosted model `name` was loaded from."""
        self.get(name)  # NotFound for an unknown name
        return self._specs[name]

    def swap(self, model: Model) -> Model:
        """Atomically replaces the hosted model of the same name; returns the one it replaced (calls
        in flight keep using that one until they finish)."""
        previous = self.get(model.name)
        self._models = {**self._models, model.name: model}
        self._generation += 1
        return previous

    def get(self, name: str) -> Model:
        model = self._models.get(name)
        if model is None:
            hosted = ", ".join(sorted(self._models)) or "none"
            raise NotFound(f"model: unknown model {quoted(name)}; this server hosts: {hosted}")
        return model

    def __iter__(self) -> Iterator[Model]:
        return iter(self._models.values())

    def __len__(self) -> int:
        return len(self._models)
