"""Hot reload of model directories (SIGHUP, or `Admin.ReloadModels` with `--enable-admin`).

A model whose files changed is loaded beside the one serving, on a thread of its own (loading is
hundreds of milliseconds of native work and file hashing: never on the event loop), checked (its
fingerprint, a smoke tokenize, detokenize and render), and swapped into the registry in one step.
Calls in flight finish on the model they started with: they hold it, and its native handles are
freed when the last of them lets go (the handles' leases and `ffi.gc`), which the log records as
`model_released`. A directory that fails to load or to pass the checks leaves the old model serving;
the error is logged, counted and returned. The embedded default model never changes.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

from sidecar import metrics
from sidecar.backend import EncodeOptions, RenderOptions
from sidecar.errors import FailedPrecondition, InvalidArgument, SidecarError, is_expected
from sidecar.logs import get_logger
from sidecar.registry import Model, ModelRegistry, ModelSpec

_log = get_logger("sidecar.reload")
T = TypeVar("T")

UNCHANGED, RELOADED, FAILED, SKIPPED = "unchanged", "reloaded", "failed", "skipped"

_SMOKE_TEXT = "Hello, world! 你好 🙂"
_SMOKE_MESSAGES = '[{"role": "user", "content": "Hello"}]'


@dataclass(frozen=True)
class ReloadResult:
    """What a reload did to one model."""

    model: str
    #: unchanged, reloaded, failed or skipped (the embedded default).
    outcome: str
    previous_fingerprint: str
    #: The fingerprint serving after the reload (the previous one unless reloaded).
    fingerprint: str
    error: str = ""
    seconds: float = 0.0


async def run_on_thread(fn: Callable[[], T]) -> T:
    """Runs `fn` on a fresh daemon thread: not the native pool (requests keep their workers) and not
    the loop's default executor (which the interpreter joins at exit, so a load in progress would
    hold a shutdown)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: object) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)  # type: ignore[arg-type]
        else:
            future.set_exception(value)  # type: ignore[arg-type]

    def target() -> None:
        try:
            value = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting coroutine
            loop.call_soon_threadsafe(settle, False, e)
        else:
            loop.call_soon_threadsafe(settle, True, value)

    threading.Thread(target=target, name="model-reload", daemon=True).start()
    return await future


#: How both renderers begin the message of a template's own `raise_exception`.
_RAISED_BY_TEMPLATE = "chat template error: "


def smoke_check(model: Model) -> None:
    """Raises FailedPrecondition unless the model tokenizes, detokenizes and (with a chat template)
    renders a plain conversation. A template's own refusal of that conversation (`raise_exception`:
    INVALID_ARGUMENT "chat template error: ...") passes: the template compiled and ran. Any other
    failure of it (an unknown function, a division by zero) would fail every Render, blaming the
    client: the reload fails and the old model keeps serving."""
    encoding = model.tokenizer.encode_batch([_SMOKE_TEXT], EncodeOptions(add_special_tokens=False))[0]
    if not encoding.ids:
        raise FailedPrecondition(f"model {model.name!r}: the tokenizer gave no ids for a smoke text")
    model.tokenizer.decode_batch([encoding.ids], True, None)
    if not model.config.chat_templates:
        return
    try:
        model.renderer.render(RenderOptions(messages_json=_SMOKE_MESSAGES, return_text=True))
    except InvalidArgument as e:
        if not e.message.startswith(_RAISED_BY_TEMPLATE):
            raise FailedPrecondition(f"model {model.name!r}: its chat template fails a plain conversation: "
                                     f"{e.message}") from None


def prepare(registry: ModelRegistry, spec: ModelSpec, serving_fingerprint: str, force: bool) -> Model | None:
    """The new model for `spec`, loaded and checked; None when its files are unchanged (and not
    `force`). Runs on a thread."""
    before = registry.fingerprint_of(spec)
    if before == serving_fingerprint and not force:
        return None
    model = registry.build(spec)
    smoke_check(model)
    # The fingerprint must describe exactly what was loaded: files replaced while loading are caught here.
    if not before == model.fingerprint == registry.fingerprint_of(spec):
        raise FailedPrecondition(f"model {spec.name!r}: files in {spec.directory} changed while loading; reload again")
    return model


class Reloader:
    """Reloads the registry's models, one reload at a time."""

    def __init__(self, registry: ModelRegistry) -> None:
        self._registry = registry
        self._lock = asyncio.Lock()

    async def reload(self, names: Sequence[str] = (), force: bool = False) -> list[ReloadResult]:
        """Reloads the named models (all when none are named) whose files changed (all with `force`)."""
        for name in names:
            self._registry.get(name)  # NotFound names the hosted models
        async with self._lock:
            return [await self._reload_one(name, force) for name in (names or [m.name for m in self._registry])]

    async def _reload_one(self, name: str, force: bool) -> ReloadResult:
        current = self._registry.get(name)
        spec = self._registry.spec(name)
        if spec.source.startswith("embedded:"):
            return ReloadResult(name, SKIPPED, current.fingerprint, current.fingerprint,
                                "the embedded default model never changes")
        started = time.perf_counter()
        serving = current.fingerprint  # the loading thread must not hold `current`: it may outlive this call
        try:
            model = await run_on_thread(lambda: prepare(self._registry, spec, serving, force))
        except Exception as e:  # noqa: BLE001 - a broken directory must never take the old model down
            return self._failed(current, e, time.perf_counter() - started)
        seconds = time.perf_counter() - started
        if model is None:
            return ReloadResult(name, UNCHANGED, current.fingerprint, current.fingerprint, seconds=seconds)
        previous = self._registry.swap(model)
        metrics.MODEL_RELOADS.labels(name, RELOADED).inc()
        _log.info("model_reloaded", model=name, previous_fingerprint=previous.fingerprint,
                  fingerprint=model.fingerprint, ms=round(seconds * 1e3, 1), encoder=model.tokenizer.encoder,
                  vocab_size=model.tokenizer.vocab_size)
        weakref.finalize(previous, _log.info, "model_released", model=name, fingerprint=previous.fingerprint)
        return ReloadResult(name, RELOADED, previous.fingerprint, model.fingerprint, seconds=seconds)

    def _failed(self, current: Model, error: Exception, seconds: float) -> ReloadResult:
        message = error.message if isinstance(error, SidecarError) else f"{type(error).__name__}: {error}"
        metrics.MODEL_RELOADS.labels(current.name, FAILED).inc()
        if is_expected(error):
            _log.error("model_reload_failed", model=current.name, fingerprint=current.fingerprint, error=message)
        else:
            _log.exception("model_reload_failed", model=current.name, fingerprint=current.fingerprint, error=message,
                           exc_info=error)
        return ReloadResult(current.name, FAILED, current.fingerprint, current.fingerprint, message, seconds)
