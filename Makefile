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
# The test build (feature `testing`) has a target directory of its own: a cdylib's file name carries
# no feature hash, so two feature sets in one directory overwrite each other's library while cargo
# still calls both fresh. The Rust tests and the fuzz replay share it, so CI compiles dependencies once.
TEST_TARGET := native/target/testing
TEST_CARGO_FLAGS := $(CARGO_FLAGS) --features testing --target-dir $(TEST_TARGET)
# The Rust client crate; one release build serves the interop test and the benchmark.
CLIENT_FLAGS := --release --features tools --manifest-path router_adapter/rust/Cargo.toml
RUN_ARGS ?= --uds /tmp/sidecar.sock --port 50051 --metrics-port 9400

.DEFAULT_GOAL := help

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

setup: $(SETUP_STAMP) ## Create .venv and install the package with its test and tracing dependencies

$(SETUP_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,tracing]'
	touch $@

native: ## Build the Rust library for users (release, no test exports) and put it next to the Python loader
	cargo build $(CARGO_FLAGS)
	cp native/target/release/libsidecar_native.so $(LIB)

# Cargo calls the test build fresh by its own records, not by the cdylib file, which any other build
# of the library in $(TEST_TARGET) (one without `--features testing`) overwrites: a file without the
# test exports is removed and built again, so test and bench never load the user build by mistake.
TEST_LIB := $(TEST_TARGET)/release/libsidecar_native.so
native-testing: ## The same library plus the test- and bench-only exports (cargo feature `testing`); test and bench use it
	cargo build $(TEST_CARGO_FLAGS)
	@nm -D --defined-only $(TEST_LIB) | grep -q ' sc_test_panic$$' || { \
	  echo "$(TEST_LIB) lacks the test exports (another build wrote it): building it again"; \
	  rm -f $(TEST_LIB) $(TEST_TARGET)/release/deps/libsidecar_native.so && cargo build $(TEST_CARGO_FLAGS); }
	cp $(TEST_LIB) $(LIB)

build: setup native ## Everything `run` needs (the user build of the library)

rust-client: ## Build the Rust client crate (router_adapter/rust), its interop driver and load generator
	cargo build $(CLIENT_FLAGS)

proto: setup ## Regenerate sidecar/v1/*_pb2.py, *_pb2_grpc.py and .pyi from protos/
	$(PY) -m grpc_tools.protoc -Iprotos --python_out=. --grpc_python_out=. --pyi_out=. protos/sidecar/v1/*.proto

# The header is the same for both builds (test exports sit under #if defined(SIDECAR_TESTING)).
CHECK_GENERATED = @git diff --exit-code -- sidecar/v1 $(HEADER) || { echo "generated files drifted: commit the output of 'make proto native'"; exit 1; }

check-generated: proto native ## Fail when the committed stubs or C header differ from their sources
	$(CHECK_GENERATED)

check-generated-testing: proto native-testing
	$(CHECK_GENERATED)

run: build ## Start the server on the embedded default model (Qwen3)
	$(VENV)/bin/sidecar serve $(RUN_ARGS)

# The Rust side and pytest run side by side: pytest keeps about one core busy (its end-to-end tests
# mostly wait on servers), so the cargo test builds and runs fit beside it (about 4 minutes off CI).
# pytest prints as it goes; the Rust side's output is kept in a file and printed in one piece.
NATIVE_TEST_LOG := $(TEST_TARGET)/test-native.log
# `pytest` has no prerequisites of its own: `test` has built everything, and a `cargo build` of
# the library here would wait for the lock the cargo test build beside it holds (a minute of CI).
test: setup check-generated-testing rust-client ## Run every test (Rust, fuzz replay, C ABI, parity, end to end) on the test build
	@$(MAKE) --no-print-directory -j2 test-native-quiet pytest

test-native: test-rust test-fuzz ## The Rust tests and the fuzz replay

# MAKEFLAGS emptied for the sub-makes: they run one recipe at a time, and cargo sees no jobserver
# it cannot reach (make hands its pipe to recursive recipes only) and schedules its own jobs.
test-native-quiet:
	@mkdir -p $(TEST_TARGET) && echo "Rust tests and fuzz replay running beside pytest; output in $(NATIVE_TEST_LOG)"
	@{ MAKEFLAGS= $(MAKE) --no-print-directory test-rust && MAKEFLAGS= $(MAKE) --no-print-directory test-fuzz; } \
	  > $(NATIVE_TEST_LOG) 2>&1; status=$$?; \
	  printf '\n== Rust tests and fuzz replay (exit %s):\n' $$status; cat $(NATIVE_TEST_LOG); exit $$status

test-rust: ## cargo test of the native core and of the Rust client library
	cargo test $(TEST_CARGO_FLAGS) -q
	cargo test $(CLIENT_FLAGS) --lib -q

# Fuzzing (docs/fuzzing.md). `make test` replays the committed corpora plus seeded mutations through
# the fuzz targets as a plain cargo test, sharing $(TEST_TARGET) with the test build (about a
# minute); an instrumented libFuzzer build from clean costs several minutes more than CI can spare,
# so the coverage-guided run is `make fuzz` only.
FUZZ_DIR := native/fuzz
FUZZ_TARGETS ?= parse_session parse_wire json_args detok render template_source kv_events score_split
FUZZ_SECONDS ?= 600
FUZZ_SANITIZER ?= none
FUZZ_ARGS ?=
FUZZ_REPLAY_MUTATIONS ?= 2000
CARGO_FUZZ_VERSION := 0.13.2
CARGO_FUZZ := $(FUZZ_DIR)/.tools/bin/cargo-fuzz

test-fuzz: ## Short fuzz run in make test: corpora + seeded mutations as a cargo test (libFuzzer's build does not fit CI; docs/fuzzing.md)
	FUZZ_REPLAY_MUTATIONS=$(FUZZ_REPLAY_MUTATIONS) cargo test --release --manifest-path $(FUZZ_DIR)/Cargo.toml --target-dir $(TEST_TARGET) -q

$(CARGO_FUZZ):
	cargo install cargo-fuzz --version $(CARGO_FUZZ_VERSION) --locked --root $(FUZZ_DIR)/.tools

fuzz: $(CARGO_FUZZ) ## Coverage-guided libFuzzer run (cargo-fuzz), FUZZ_SECONDS (default 600) per target in FUZZ_TARGETS
	@failed=""; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_DIR)/target/fuzz-corpus/$$t || exit 1; \
	  echo "== fuzz $$t for $(FUZZ_SECONDS) s"; \
	  RUSTC_BOOTSTRAP=1 PATH="$(abspath $(FUZZ_DIR)/.tools/bin):$$PATH" cargo fuzz run --fuzz-dir $(FUZZ_DIR) \
	    --features libfuzzer --sanitizer $(FUZZ_SANITIZER) --debug-assertions $$t \
	    $(FUZZ_DIR)/target/fuzz-corpus/$$t $(FUZZ_DIR)/corpus/$$t -- \
	    -max_total_time=$(FUZZ_SECONDS) -timeout=30 -rss_limit_mb=4096 -max_len=16384 -print_final_stats=1 $(FUZZ_ARGS) \
	    || failed="$$failed $$t"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: findings in:$$failed (inputs in $(FUZZ_DIR)/artifacts/)"; exit 1; fi

soak: build ## Mixed load against a real server for SOAK_SECONDS (default 600); report in bench/soak.md
	$(PY) -m bench.soak --seconds $${SOAK_SECONDS:-600} --out bench/soak.md

# --durations: every CI log names the slowest tests, which is where CI's 20 minutes go.
test-python: setup native-testing rust-client ## pytest: unit, C-ABI contract, parity, end to end (with the Rust client)
	@$(MAKE) --no-print-directory pytest

pytest:
	$(PY) -m pytest -q --durations=25 tests

bench: setup native-testing rust-client ## Benchmarks; results go to bench/results.md (quoted by the README)
	$(PY) -m bench.run --out bench/results.md

lint: setup ## cargo clippy and fmt check, pyflakes on the Python code
	cargo clippy $(CARGO_FLAGS) -- -D warnings
	cargo clippy $(TEST_CARGO_FLAGS) --all-targets -- -D warnings
	cargo fmt --manifest-path native/Cargo.toml --check
	cargo clippy --release --manifest-path $(FUZZ_DIR)/Cargo.toml --target-dir $(TEST_TARGET) --all-targets -- -D warnings
	cargo fmt --manifest-path $(FUZZ_DIR)/Cargo.toml --check
	cargo clippy $(CLIENT_FLAGS) --all-targets -- -D warnings
	cargo fmt --manifest-path router_adapter/rust/Cargo.toml --check
	$(PY) -m pyflakes $$(git ls-files '*.py' | grep -v '^sidecar/v1/')

clean: ## Remove build outputs (keeps .venv)
	cargo clean --manifest-path native/Cargo.toml
	rm -rf $(FUZZ_DIR)/target
	cargo clean --manifest-path router_adapter/rust/Cargo.toml
	rm -f $(LIB)

.PHONY: help setup native native-testing build rust-client proto check-generated check-generated-testing run test test-native test-native-quiet pytest test-rust test-fuzz fuzz soak test-python bench lint clean
