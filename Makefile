# sidecar: `make run` starts the server on the embedded default model, `make test` runs everything.
# Both set up what they need first (virtualenv in .venv/, native library via cargo).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SETUP_STAMP := $(VENV)/.setup-stamp
LIB := sidecar/native/libsidecar_native.so
HEADER := native/include/sidecar_native.h
CARGO_FLAGS := --release --manifest-path native/Cargo.toml
# The Rust client crate; one release build serves the interop test and the benchmark.
CLIENT_FLAGS := --release --features tools --manifest-path router_adapter/rust/Cargo.toml
RUN_ARGS ?= --uds /tmp/sidecar.sock --port 50051 --metrics-port 9400

.DEFAULT_GOAL := help

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

setup: $(SETUP_STAMP) ## Create .venv and install the package with its test dependencies

$(SETUP_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

native: ## Build the Rust library (release) and put it next to the Python loader
	cargo build $(CARGO_FLAGS)
	cp native/target/release/libsidecar_native.so $(LIB)

build: setup native ## Everything `run` and `test` need

rust-client: ## Build the Rust client crate (router_adapter/rust), its interop driver and load generator
	cargo build $(CLIENT_FLAGS)

proto: setup ## Regenerate sidecar/v1/*_pb2.py, *_pb2_grpc.py and .pyi from protos/
	$(PY) -m grpc_tools.protoc -Iprotos --python_out=. --grpc_python_out=. --pyi_out=. protos/sidecar/v1/*.proto

check-generated: proto native ## Fail when the committed stubs or C header differ from their sources
	@git diff --exit-code -- sidecar/v1 $(HEADER) || { echo "generated files drifted: commit the output of 'make proto native'"; exit 1; }

run: build ## Start the server on the embedded default model (Qwen3)
	$(VENV)/bin/sidecar serve $(RUN_ARGS)

test: build check-generated rust-client test-rust test-python ## Run every test (Rust, C ABI, parity, end to end)

test-rust: ## cargo test of the native core and of the Rust client library
	cargo test $(CARGO_FLAGS) -q
	cargo test $(CLIENT_FLAGS) --lib -q

test-python: build rust-client ## pytest: unit, C-ABI contract, differential parity, end to end (with the Rust client)
	$(PY) -m pytest -q tests

bench: build rust-client ## Benchmarks; results go to bench/results.md (quoted by the README)
	$(PY) -m bench.run --out bench/results.md

lint: setup ## cargo clippy and fmt check, pyflakes on the Python code
	cargo clippy $(CARGO_FLAGS) -- -D warnings
	cargo fmt --manifest-path native/Cargo.toml --check
	cargo clippy $(CLIENT_FLAGS) --all-targets -- -D warnings
	cargo fmt --manifest-path router_adapter/rust/Cargo.toml --check
	$(PY) -m pyflakes $$(git ls-files '*.py' | grep -v '^sidecar/v1/')

clean: ## Remove build outputs (keeps .venv)
	cargo clean --manifest-path native/Cargo.toml
	cargo clean --manifest-path router_adapter/rust/Cargo.toml
	rm -f $(LIB)

.PHONY: help setup native build rust-client proto check-generated run test test-rust test-python bench lint clean
