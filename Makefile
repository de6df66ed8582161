# VRAM Planner: set-up, build and tests. Each target installs only what is missing (at the
# version pinned here or in Cargo.lock), so running it again is cheap. Nothing is fetched from
# GitHub: only the Rust crate, npm and Debian package registries are used.
#
#   make serve   the app at http://127.0.0.1:8080 with live reload
#   make test    formatting and lints, native tests, wasm component tests in headless Chromium,
#                browser end-to-end tests
#   make lint    cargo fmt --check and clippy -D warnings, native and wasm32
#   make dist    release build into dist/ (works under any sub-path)
#   make size    every dist/ file with raw and gzip bytes; fails above the weight budget
#   make fuzz    each fuzz target for FUZZ_SECONDS (default 600): executions and crashes per target
#   make fuzz-smoke  each fuzz target for FUZZ_SMOKE_SECONDS (default 25) from the committed seeds

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
# Beside the clone: an offline copy of the wasm32 standard library, used if rustup refuses.
SHARED := $(abspath $(ROOT)/../shared)
CARGO_BIN := $(or $(CARGO_HOME),$(HOME)/.cargo)/bin
export PATH := $(ROOT)/node_modules/.bin:$(CARGO_BIN):$(PATH)
export TRUNK_SKIP_VERSION_CHECK := true

WASM_TARGET := wasm32-unknown-unknown
TRUNK_VERSION := 0.21.14
# Splits the page's wasm at its split points into lazily fetched chunks.
WASM_SPLIT_VERSION := 0.2.4
# wasm-bindgen-cli must equal the wasm-bindgen crate the build links (Trunk.toml pins the same).
WASM_BINDGEN_VERSION := $(shell awk '$$0 == "name = \"wasm-bindgen\"" { getline; gsub(/[^0-9.]/, ""); print; exit }' $(ROOT)/Cargo.lock)
CHROMIUM ?= /usr/bin/chromium
CHROMEDRIVER ?= /usr/bin/chromedriver
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
# The budget for the first load: all of dist/ gzipped but the lazily fetched chunks and the PNG
# icons, which no first visit waits for (the service worker caches them once the page runs; a
# phone asks for them when the page is added to its home screen). The e2e run checks the files a
# first visit really fetches, at five window sizes, against the same budget.
SIZE_BUDGET_BYTES := 200000

DIST_INPUTS := index.html Trunk.toml Cargo.toml Cargo.lock scripts/split-wasm.sh scripts/short-imports.mjs scripts/seal.mjs $(shell find $(ROOT)/src $(ROOT)/style $(ROOT)/public -type f -not -name '*.py' 2>/dev/null)

.PHONY: help serve test dist size fuzz fuzz-smoke cargo-fuzz tools browser wasm-target trunk wasm-bindgen wasm-split split-wasm node-tools fetch lint test-native test-wasm test-e2e

help:
	@sed -n 's/^#   //p' $(MAKEFILE_LIST)

# --- tools ---------------------------------------------------------------------------------

tools: wasm-target trunk wasm-bindgen wasm-split node-tools

wasm-target:
	@sysroot="$$(rustc --print sysroot)"; \
	if [ -d "$$sysroot/lib/rustlib/$(WASM_TARGET)/lib" ]; then exit 0; fi; \
	echo "==> rustup target add $(WASM_TARGET)"; \
	if ! rustup target add $(WASM_TARGET); then \
	  archive="$(SHARED)/toolchain/rust-std-$(WASM_TARGET)-$$(rustc --version | cut -d' ' -f2).tgz"; \
	  if [ ! -f "$$archive" ]; then echo "rustup refused the target and $$archive is missing" >&2; exit 1; fi; \
	  echo "==> unpacking $$archive"; \
	  tar -xzf "$$archive" -C "$$sysroot/lib/rustlib"; \
	fi

trunk:
	@if trunk --version 2>/dev/null | grep -qx 'trunk $(TRUNK_VERSION)'; then exit 0; fi; \
	echo "==> cargo install trunk $(TRUNK_VERSION) (about 9 minutes on 2 cores)"; \
	cargo install --locked trunk --version $(TRUNK_VERSION)

# Without --locked: the CLI's own lock file names a webpki-roots release the registry lacks.
wasm-bindgen:
	@if wasm-bindgen --version 2>/dev/null | grep -qx 'wasm-bindgen $(WASM_BINDGEN_VERSION)' \
	  && wasm-bindgen-test-runner --version 2>/dev/null | grep -q '$(WASM_BINDGEN_VERSION)'; then exit 0; fi; \
	echo "==> cargo install wasm-bindgen-cli $(WASM_BINDGEN_VERSION)"; \
	cargo install wasm-bindgen-cli --version $(WASM_BINDGEN_VERSION)

wasm-split:
	@if wasm-split-cli --help >/dev/null 2>&1 && [ "$$(cat $(CARGO_BIN)/.wasm-split-version 2>/dev/null)" = $(WASM_SPLIT_VERSION) ]; then exit 0; fi; \
	echo "==> cargo install wasm_split_cli_support $(WASM_SPLIT_VERSION) (wasm-split-cli)"; \
	cargo install --locked wasm_split_cli_support --version $(WASM_SPLIT_VERSION) --features build-binary; \
	echo $(WASM_SPLIT_VERSION) > $(CARGO_BIN)/.wasm-split-version

node-tools: node_modules/.installed

node_modules/.installed: package.json package-lock.json
	@command -v npm >/dev/null || { echo "==> apt-get install nodejs npm"; $(SUDO) apt-get update; $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y nodejs npm; }
	@echo "==> npm ci (binaryen's wasm-opt, playwright-core)"
	npm ci --no-audit --no-fund
	@touch $@

CARGO_FUZZ_VERSION := 0.13.2
cargo-fuzz:
	@if [ "$$(cargo fuzz --version 2>/dev/null)" = "cargo-fuzz $(CARGO_FUZZ_VERSION)" ]; then exit 0; fi; \
	echo "==> cargo install cargo-fuzz $(CARGO_FUZZ_VERSION) (about 3 minutes on 2 cores)"; \
	cargo install --locked cargo-fuzz --version $(CARGO_FUZZ_VERSION)

# Debian's Chromium and its driver: no browser download from anywhere else.
browser:
	@if [ -x $(CHROMIUM) ] && [ -x $(CHROMEDRIVER) ]; then exit 0; fi; \
	echo "==> apt-get install chromium chromium-driver"; \
	$(SUDO) apt-get update; \
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver

fetch:
	@cargo fetch --locked

# --- build ---------------------------------------------------------------------------------

# Serves a debug build from target/serve, so dist/ only ever holds release builds.
serve: tools fetch
	trunk serve --offline --dist target/serve

dist: dist/index.html

dist/index.html: $(DIST_INPUTS) | tools fetch
	trunk build --release --offline
	@touch $@

# Trunk's post-build hook (Trunk.toml): splits the wasm into the first load and lazily fetched
# chunks (scripts/split-wasm.sh says how).
split-wasm:
	@bash $(ROOT)/scripts/split-wasm.sh

size: dist
	@printf '%-44s %10s %10s\n' file raw gzip; \
	total_raw=0; total_gz=0; lazy_gz=0; \
	while IFS= read -r f; do \
	  raw=$$(stat -c %s "$$f"); gz=$$(gzip -9 -c "$$f" | wc -c); \
	  case "$${f#dist/}" in \
	    split_*|chunk_*) lazy_gz=$$((lazy_gz + gz)); printf '%-44s %10d %10d  (lazy: fetched on first use)\n' "$${f#dist/}" "$$raw" "$$gz";; \
	    *.png) printf '%-44s %10d %10d  (later: cached by the service worker)\n' "$${f#dist/}" "$$raw" "$$gz";; \
	    *) total_raw=$$((total_raw + raw)); total_gz=$$((total_gz + gz)); printf '%-44s %10d %10d\n' "$${f#dist/}" "$$raw" "$$gz";; \
	  esac; \
	done < <(find dist -type f | LC_ALL=C sort); \
	printf '%-44s %10d %10d\n' "first load (all but lazy chunks and icons)" "$$total_raw" "$$total_gz"; \
	printf '%-44s %10s %10d\n' "lazy chunks" "" "$$lazy_gz"; \
	if [ "$$total_gz" -gt $(SIZE_BUDGET_BYTES) ]; then \
	  echo "FAIL: $$total_gz gzip bytes exceed the budget of $(SIZE_BUDGET_BYTES)" >&2; exit 1; \
	fi; \
	echo "ok: $$total_gz of $(SIZE_BUDGET_BYTES) gzip bytes"

# --- tests ---------------------------------------------------------------------------------

test: lint test-native test-wasm test-e2e size fuzz-smoke

# rustfmt's default style; clippy with every warning an error, for the native crate (library,
# CLI, tests, benchmark) and for the page's wasm32 build (library, binary and its browser tests,
# with and without the lazy chunks).
lint: wasm-target fetch
	@echo "==> lint: cargo fmt --check, cargo clippy -D warnings (native and wasm32)"
	cargo fmt --all --check
	cargo clippy --locked --offline --all-targets -- -D warnings
	cargo clippy --locked --offline --target $(WASM_TARGET) --lib --bins --test web --test web_panels -- -D warnings
	cargo clippy --locked --offline --target $(WASM_TARGET) --features lazy-chunks --lib --bins -- -D warnings

test-native: fetch
	@echo "==> native: cargo test"
	cargo test --locked --offline --no-fail-fast

test-wasm: tools browser fetch
	@echo "==> wasm: wasm-bindgen-test in headless Chromium"
	@# The runner gives a test 20 s by default; the thousand-rebuild leak check takes 6 s alone and
	@# several times that on a loaded 2-core machine.
	CHROMEDRIVER=$(CHROMEDRIVER) WASM_BINDGEN_TEST_TIMEOUT=180 cargo test --locked --offline --profile wasm-test --target $(WASM_TARGET) --test web --test web_panels

test-e2e: dist browser node-tools
	@echo "==> end-to-end: Playwright against dist/ under /vram-planner/"
	CHROMIUM=$(CHROMIUM) node tests/e2e/run.mjs

# --- fuzzing -------------------------------------------------------------------------------

# libFuzzer through cargo-fuzz (fuzz/, a package of its own). cargo-fuzz passes nightly-only
# rustc flags (-Z sanitizer coverage options); the only toolchain here is stable and no other can
# be fetched, so RUSTC_BOOTSTRAP=1 lets stable rustc accept them. AddressSanitizer would need the
# nightly standard library, hence --sanitizer none: the targets are safe Rust (no unsafe code
# in the planner), so what they look for is panics (an optimised build with overflow checks and
# debug assertions on: -O --debug-assertions), runaway time (-timeout, seconds per input) and memory
# (-rss_limit_mb). Each target reads its committed seeds (fuzz/seeds/<target>, from the tests'
# valid and hostile inputs: fuzz/make_seeds.py) and the plan's keys (fuzz/plan.dict); `fuzz`
# keeps what it finds in fuzz/corpus/<target> (ignored by git), a crash lands in
# fuzz/artifacts/<target>/ and belongs in a regression test under tests/.
FUZZ_TARGETS := plan_json url_query hf_config estimate
FUZZ_SECONDS ?= 600
FUZZ_SMOKE_SECONDS ?= 25
FUZZ_FLAGS := -dict=plan.dict -timeout=5 -rss_limit_mb=2048 -print_final_stats=1
FUZZ_CARGO := env RUSTC_BOOTSTRAP=1 cargo fuzz run -O --debug-assertions --sanitizer none

fuzz: cargo-fuzz
	@cd $(ROOT)/fuzz; mkdir -p artifacts; summary=""; failed=0; \
	for t in $(FUZZ_TARGETS); do \
	  mkdir -p corpus/$$t; \
	  echo "==> fuzz $$t for $(FUZZ_SECONDS) s"; \
	  if $(FUZZ_CARGO) $$t corpus/$$t seeds/$$t -- $(FUZZ_FLAGS) -max_total_time=$(FUZZ_SECONDS) 2>&1 | tee artifacts/$$t.log | grep -E '^(#[0-9]+ +DONE|Done|==[0-9]+==|.*panicked)'; \
	  then status=ok; else status=FAILED; failed=1; fi; \
	  runs=$$(sed -n 's/^stat::number_of_executed_units: *//p' artifacts/$$t.log | tail -1); \
	  crashes=$$(find artifacts/$$t -maxdepth 1 -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \) 2>/dev/null | wc -l); \
	  summary+="$$(printf '%-10s %14s executions %4s crash files  %s' $$t "$${runs:-0}" $$crashes $$status)\n"; \
	done; \
	printf '\n%b' "$$summary"; exit $$failed

# A short run of each target from the committed seeds alone, with a fixed seed: a fresh corpus
# each time, so it finds the same inputs on every machine of the same speed.
fuzz-smoke: cargo-fuzz
	@cd $(ROOT)/fuzz; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; summary=""; failed=0; \
	for t in $(FUZZ_TARGETS); do \
	  mkdir -p $$tmp/$$t; \
	  echo "==> fuzz-smoke $$t for $(FUZZ_SMOKE_SECONDS) s"; \
	  if $(FUZZ_CARGO) $$t $$tmp/$$t seeds/$$t -- $(FUZZ_FLAGS) -seed=1 -max_total_time=$(FUZZ_SMOKE_SECONDS) > $$tmp/$$t.log 2>&1; \
	  then status=ok; else status=FAILED; failed=1; grep -E 'panicked|ERROR|SUMMARY|Test unit written' $$tmp/$$t.log >&2 || tail -20 $$tmp/$$t.log >&2; fi; \
	  runs=$$(sed -n 's/^stat::number_of_executed_units: *//p' $$tmp/$$t.log | tail -1); \
	  summary+="$$(printf '%-10s %12s executions  %s' $$t "$${runs:-0}" $$status)\n"; \
	done; \
	printf '%b' "$$summary"; exit $$failed
