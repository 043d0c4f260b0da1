"""Padded vocabularies: a model's output layer has more rows than its tokenizer has ids (Qwen3:
151,936 rows, `config.json` `vocab_size`, for 151,669 ids), so an engine can sample an id the
tokenizer does not define (vllm-project/vllm#13175). Hugging Face `decode` drops such an id, vLLM's
detokenizer yields no text for it and the request goes on; the sidecar must too, in ParseStream
and Detokenize, on both backends. Ids past both the tokenizer and the output size stay refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sidecar.backend import ParseLimits, ParseOpenConfig
from sidecar.errors import InvalidArgument
from sidecar.factory import get_backend
from sidecar.model_config import ModelConfig
from sidecar.registry import ModelRegistry, ModelSpec
from sidecar.v1 import preprocessor_pb2 as pb
from tests.conftest import require_shared_models
from tests.parse.harness import absorb, byte_ids, chunkings, hf_tokenizer, Result, step_message

pytestmark = pytest.mark.models

#: Qwen3's tokenizer defines ids 0..151668; its checkpoints have 151,936 output rows.
QWEN3_IDS, QWEN3_ROWS = 151_669, 151_936
#: mistral-v3-spm (SentencePiece with byte fallback) defines 32,768 ids; a padded model of it.
SPM_IDS, SPM_ROWS = 32_768, 33_024
HELLO, WORLD = 9707, 1879


def padded_dir(tmp: Path, model: str, config: dict | None) -> Path:
    """A copy of a shared model's tokenizer files with `config` as its config.json."""
    src = require_shared_models() / model
    folder = tmp / model
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src / name, folder / name)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("padded")
    return {
        "qwen3": padded_dir(tmp, "qwen3", {"architectures": ["Qwen3ForCausalLM"], "vocab_size": QWEN3_ROWS}),
        # A multimodal config: the language model's size is in text_config (vLLM reads it there).
        "mistral-v3-spm": padded_dir(tmp, "mistral-v3-spm", {"vocab_size": 1, "text_config": {"vocab_size": SPM_ROWS}}),
    }


@pytest.fixture(scope="module")
def models(dirs: dict[str, Path]) -> dict[str, object]:
    registry = ModelRegistry(get_backend("native"))
    return {name: registry.load(ModelSpec(name, folder)) for name, folder in dirs.items()}


def parse(model, ids: list[list[int]], prompt: list[int] = ()) -> Result:  # noqa: ANN001
    """Feeds the chunks (the last finishing the request) with no parsers: content is the decoder's."""
    mux = get_backend("native").new_parse_mux(ParseLimits())
    mux.open(model.parse_model, "r", "fp", ParseOpenConfig(tool_parser="none", reasoning_parser="none"), list(prompt))
    result = Result()
    for k, chunk in enumerate(ids):
        if result.finished:
            break
        for d in pb.ParseStreamResponse.FromString(mux.handle(step_message("r", chunk, k == len(ids) - 1))).deltas:
            absorb(result, d)
    mux.close()
    return result


def test_the_output_size_is_read_from_config_json(dirs: dict[str, Path], models: dict) -> None:
    assert ModelConfig.from_dir(dirs["qwen3"]).output_size == QWEN3_ROWS
    assert ModelConfig.from_dir(dirs["mistral-v3-spm"]).output_size == SPM_ROWS
    assert ModelConfig.from_dir(require_shared_models() / "qwen3").output_size == 0  # no config.json
    assert models["qwen3"].tokenizer.output_size == QWEN3_ROWS
    assert models["qwen3"].tokenizer.vocab_size == QWEN3_IDS


@pytest.mark.parametrize("name", ["qwen3", "mistral-v3-spm"])
def test_padded_ids_decode_to_nothing_in_every_chunking(name: str, models: dict) -> None:
    """Ids between the tokenizer's last id and the output size add no text, in any chunking, also
    inside an unfinished character (one token per byte) and inside a byte-fallback run, which
    `decode` does not end for them (it drops them before its decoder runs)."""
    first, rows = (QWEN3_IDS, QWEN3_ROWS) if name == "qwen3" else (SPM_IDS, SPM_ROWS)
    hf = hf_tokenizer(name)
    gap = [first, first + 31, rows - 1]
    text = "Hello 漢字 wörld 🤔!"
    plain = hf.encode(text, add_special_tokens=False).ids
    per_byte = byte_ids({"model": name, "output": text}) or plain
    streams = {
        "between tokens": [x for i, t in enumerate(plain) for x in ([t, gap[i % 3]] if i % 2 else [t])],
        "inside characters": [x for i, t in enumerate(per_byte) for x in ([gap[i % 3], t] if i % 3 else [t])],
        "only padded": gap,
        "padded first and last": [gap[0], *plain, gap[2]],
    }
    for label, ids in streams.items():
        want = hf.decode(ids, skip_special_tokens=True)
        for how, chunks in chunkings(ids).items():
            result = parse(models[name], chunks)
            assert result.error is None, (label, how, result.error)
            assert result.finished and result.content == want, (label, how, result.content, want)
            assert result.completion_tokens == len(ids), (label, how)


def test_padded_ids_in_the_prompt_are_accepted(models: dict) -> None:
    prompt = [HELLO, QWEN3_IDS + 5]
    result = parse(models["qwen3"], [[WORLD]], prompt)
    assert result.error is None and result.content == " world"


def test_ids_past_the_output_size_are_refused_naming_the_position(models: dict) -> None:
    result = parse(models["qwen3"], [[HELLO, QWEN3_ROWS - 1], [WORLD, QWEN3_ROWS]])
    assert result.finished and result.error == (
        3, f"step.items: token_ids[1]: id {QWEN3_ROWS} is not in the vocabulary (size {QWEN3_IDS}) nor below the model's "
           f"output size ({QWEN3_ROWS})")
    mux = get_backend("native").new_parse_mux(ParseLimits())
    with pytest.raises(InvalidArgument, match=rf"prompt_token_ids\[1\]: id {QWEN3_ROWS} is not in the vocabulary"):
        mux.open(models["qwen3"].parse_model, "p", "fp", ParseOpenConfig(), [HELLO, QWEN3_ROWS])
    mux.close()


@pytest.mark.parametrize("backend", ["native", "reference"])
def test_detokenize_decodes_padded_ids_to_nothing(backend: str, dirs: dict[str, Path]) -> None:
    registry = ModelRegistry(get_backend(backend))
    tok = registry.load(ModelSpec("q", dirs["qwen3"])).tokenizer
    hf = hf_tokenizer("qwen3")
    seqs = [[HELLO, QWEN3_IDS, WORLD], [QWEN3_ROWS - 1], [], [151643, QWEN3_IDS + 100, HELLO]]
    for skip in (True, False):
        assert tok.decode_batch(seqs, skip) == [hf.decode(s, skip_special_tokens=skip) for s in seqs]
    assert tok.decode_batch(seqs, True)[:2] == ["Hello world", ""]
    with pytest.raises(InvalidArgument) as refused:
        tok.decode_batch([[HELLO], [HELLO, WORLD, QWEN3_ROWS]], True)
    assert refused.value.message == (
        f"sequences[1]: token_ids[2]: id {QWEN3_ROWS} is not in the vocabulary (size {QWEN3_IDS}) nor below "
        f"the model's output size ({QWEN3_ROWS})")


@pytest.mark.parametrize("backend", ["native", "reference"])
def test_the_vocab_size_option_overrides_config_json(backend: str, dirs: dict[str, Path]) -> None:
    registry = ModelRegistry(get_backend(backend))
    smaller = registry.load(ModelSpec.parse(f"a={dirs['qwen3']},vocab_size={QWEN3_IDS + 10}")).tokenizer
    assert smaller.output_size == QWEN3_IDS + 10
    assert smaller.decode_batch([[QWEN3_IDS + 9]], True) == [""]
    with pytest.raises(InvalidArgument, match=f"id {QWEN3_IDS + 10} is not in the vocabulary"):
        smaller.decode_batch([[QWEN3_IDS + 10]], True)
    # 0: unknown, whatever config.json says: every id past the tokenizer is refused, as without one.
    unknown = registry.load(ModelSpec.parse(f"b={dirs['qwen3']},vocab_size=0")).tokenizer
    assert unknown.output_size == 0
    with pytest.raises(InvalidArgument) as refused:
        unknown.decode_batch([[QWEN3_IDS]], True)
    assert refused.value.message == f"sequences[0]: token_ids[0]: id {QWEN3_IDS} is not in the vocabulary (size {QWEN3_IDS})"
    # A directory without config.json: the option alone says it.
    plain = registry.load(ModelSpec.parse(f"c={require_shared_models() / 'qwen3'},vocab_size={QWEN3_ROWS}")).tokenizer
    assert plain.decode_batch([[HELLO, QWEN3_IDS, WORLD]], True) == ["Hello world"]


@pytest.mark.parametrize("value", ["-1", "abc", "1.5", "", str((1 << 32) + 1), "１２"])
def test_a_bad_vocab_size_option_is_refused_by_name(value: str) -> None:
    with pytest.raises(InvalidArgument, match=r"vocab_size="):
        ModelSpec.parse(f"q=/nowhere,vocab_size={value}")


def test_the_fingerprint_follows_the_output_size(dirs: dict[str, Path], tmp_path: Path) -> None:
    """The output size decides which ids are answered, so it is part of the fingerprint; the rest
    of config.json is not (it changes no output)."""
    registry = ModelRegistry(get_backend("native"))
    padded = registry.fingerprint_of(ModelSpec("q", dirs["qwen3"]))
    other = padded_dir(tmp_path, "qwen3", {"vocab_size": QWEN3_ROWS + 64})
    assert registry.fingerprint_of(ModelSpec("q", other)) != padded
    (other / "config.json").write_text(json.dumps({"vocab_size": QWEN3_ROWS, "torch_dtype": "bfloat16"}))
    assert registry.fingerprint_of(ModelSpec("q", other)) == padded
    (other / "config.json").unlink()
    assert registry.fingerprint_of(ModelSpec("q", other)) != padded
