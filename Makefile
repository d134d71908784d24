# vetto — build, test, benchmark. Two commands matter on a fresh machine:
#   make demo   builds vetto and sandboxes a real command with the default policy
#   make test   runs the whole test suite (what CI runs)
SHELL := /bin/bash
PREFIX ?= /usr/local
CARGO ?= cargo
RELEASE_BIN := target/release/vetto
DEBUG_BIN := target/debug/vetto

.PHONY: build release install test unit integration bench lint demo man completions deps clean

build:
	$(CARGO) build --workspace

release:
	$(CARGO) build --release -p vetto

install: release
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(RELEASE_BIN) $(DESTDIR)$(PREFIX)/bin/vetto

# Unit tests, then the end-to-end tests (they run the real binary, as root and as an
# unprivileged user).
test: build
	set -o pipefail; $(CARGO) test --workspace --no-fail-fast 2>&1 | tee target/test.log
	@awk '/^test result:/ { p += $$4; f += $$6 } END { printf "all tests: %d passed, %d failed\n", p, f }' target/test.log

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

demo: release
	bash scripts/demo.sh $(RELEASE_BIN)

bench: release
	bash scripts/bench.sh $(RELEASE_BIN)

man: build
	$(DEBUG_BIN) man --out target/man

completions: build
	mkdir -p target/completions
	for s in bash zsh fish; do $(DEBUG_BIN) completions $$s > target/completions/vetto.$$s; done

# System packages the tests and benchmarks use (Debian).
deps:
	bash scripts/deps.sh

clean:
	$(CARGO) clean
