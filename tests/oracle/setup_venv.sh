#!/usr/bin/env bash
# Builds the scratch virtualenv in which the engines' own parsers run (vLLM 0.33.0, SGLang 0.5.23).
# Run by hand; `make test` never runs it. PyPI only, no GPU, no model hub.
#   bash tests/oracle/setup_venv.sh [VENV_DIR]     (default /work/oracle-venv, outside the repo)
set -euo pipefail
VENV="${1:-/work/oracle-venv}"
PY="${PYTHON:-python3.11}"

"$PY" -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install -q --upgrade pip

# The engines themselves, without their GPU dependency trees (flashinfer, cutlass, deep-gemm, ...).
"$PIP" install -q --no-deps vllm==0.33.0 sglang==0.5.23

# vLLM pins torch 2.14.0 (SGLang pins 2.14.1; its parsers do not care). The PyPI Linux wheel is the
# CUDA build: installed with its nvidia-* runtime libraries it imports and runs on a CPU-only machine.
"$PIP" install -q torch==2.14.0

# The plain (pure-Python or CPU) dependencies the parser modules import. Versions follow vLLM's pins
# where vLLM and SGLang differ (openai, xgrammar, transformers within both ranges).
"$PIP" install -q \
  regex cachetools psutil sentencepiece numpy requests tqdm blake3 py-cpuinfo \
  'transformers==5.19.0' 'huggingface_hub>=1.31.0' 'tokenizers>=0.23.2' safetensors protobuf \
  'fastapi[standard]>=0.133.0,<0.137.0' 'starlette>=1.0.1' aiohttp 'openai>=2.25.0' 'pydantic>=2.12.0' \
  orjson prometheus_client pillow prometheus-fastapi-instrumentator tiktoken \
  'lm-format-enforcer==0.11.3' 'llguidance>=1.7.0,<1.8.0' 'outlines_core==0.2.14' 'lark==1.2.2' \
  'xgrammar==0.2.8' partial-json-parser 'jsonschema>=4.23.0' pyzmq msgspec 'mistral_common[image]>=1.11.6' \
  pyyaml einops cloudpickle pybase64 cbor2 ijson setproctitle 'oss-harmony>=0.0.11' openai-harmony \
  anthropic python-json-logger watchfiles ipython interegular xxhash uvloop python-multipart \
  py-spy distro easydict packaging scipy 'opencv-python-headless>=4.13.0' blobfile cohere-melody

"$VENV/bin/python" "$(dirname "$0")/check_imports.py"
