# vetto — build, test, benchmark. Two commands matter on a fresh machine:
#   make demo   builds vetto and sandboxes a real command with the default policy
#   make test   runs the whole test suite (what CI runs)
SHELL := /bin/bash
PREFIX ?= /usr/local
CARGO ?= cargo
RELEASE_BIN := target/release/vetto
DEBUG_BIN := target/debug/vetto

SHIM_RELEASE := target/release/vetto-shim
SHIM_DEBUG := target/debug/vetto-shim

.PHONY: layout build release install deb e2e-deb e2e-agents install-docker-runtime test e2e e2e-systemd e2e-cri escape escape-docs fuzz conformance crictl unit integration bench lint demo man completions deps clean

build:
	$(CARGO) build --workspace

release:
	$(CARGO) build --release -p vetto

# The binaries, man pages and completions under $(PREFIX); /etc/vetto/shim.toml.example;
# and, where AppArmor is present (/etc/apparmor.d), vetto's profile (it grants `userns` for
# Ubuntu's restriction of unprivileged user namespaces), loaded where AppArmor is enabled.
install: release
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	  $(DESTDIR)$(PREFIX)/share/bash-completion/completions $(DESTDIR)/etc/vetto
	install -m 0755 $(RELEASE_BIN) $(DESTDIR)$(PREFIX)/bin/vetto
	install -m 0755 $(SHIM_RELEASE) $(DESTDIR)$(PREFIX)/bin/vetto-shim
	$(RELEASE_BIN) man --out $(DESTDIR)$(PREFIX)/share/man/man1 >/dev/null
	$(RELEASE_BIN) completions bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/vetto
	install -m 0644 packaging/shim.toml.example $(DESTDIR)/etc/vetto/shim.toml.example
	@if [ -d /etc/apparmor.d ]; then \
	  install -d $(DESTDIR)/etc/apparmor.d && \
	  install -m 0644 packaging/apparmor/vetto $(DESTDIR)/etc/apparmor.d/vetto && \
	  echo "installed /etc/apparmor.d/vetto"; \
	  if [ -z "$(DESTDIR)" ] && [ "$$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" = Y ]; then \
	    apparmor_parser -r /etc/apparmor.d/vetto && echo "loaded vetto's AppArmor profile"; \
	  fi; \
	fi

# The Debian package (target/deb/vetto_VERSION_ARCH.deb): both binaries, man pages,
# completions, the AppArmor profile, /etc/vetto/shim.toml.example.
deb: release
	bash packaging/deb/build.sh target/release target/deb

# Build, parse-check (AppArmor 4), install, use and purge the package (also part of `make test`).
e2e-deb: release
	bash tests/deb/e2e.sh target/release

# Installs vetto-shim and registers it with the local dockerd as the runtimes "vetto"
# (hardened with the default profile) and "vetto-plain" (no policy unless the container's
# dev.vetto.policy annotation names one); then `docker run --runtime vetto ...`.
install-docker-runtime: install
	python3 scripts/docker-runtime.py $(DESTDIR)$(PREFIX)/bin/vetto-shim /etc/docker/daemon.json
	@if pidof dockerd >/dev/null; then kill -HUP $$(pidof dockerd) && echo "dockerd reloaded"; else echo "start dockerd to use it"; fi

# Unit tests, then the end-to-end tests (they run the real binary, as root and as an
# unprivileged user), then the OTLP export against a receiver on the official OTLP protobuf
# definitions (tests/otlp/).
test: build
	set -o pipefail; $(CARGO) test --workspace --no-fail-fast 2>&1 | tee target/test.log; \
	  cargo_rc=$$?; \
	  bash tests/oci/e2e.sh $(SHIM_DEBUG) 2>&1 | tee -a target/test.log; \
	  e2e_rc=$$?; \
	  { bash tests/otlp/check.sh && bash tests/otlp/run.sh $(DEBUG_BIN); } 2>&1 | tee -a target/test.log; \
	  otlp_rc=$$?; \
	  $(MAKE) --no-print-directory conformance 2>&1 | tee -a target/test.log; \
	  conf_rc=$$?; \
	  bash tests/systemd-host/e2e.sh $(SHIM_DEBUG) 2>&1 | tee -a target/test.log; \
	  sd_rc=$$?; \
	  bash tests/cri/e2e.sh $(SHIM_DEBUG) 2>&1 | tee -a target/test.log; \
	  cri_rc=$$?; \
	  bash tests/escape/run.sh target/debug 2>&1 | tee -a target/test.log; \
	  esc_rc=$$?; \
	  bash tests/agents/e2e.sh target/debug 2>&1 | tee -a target/test.log; \
	  agents_rc=$$?; \
	  { $(CARGO) build --release -p vetto && bash tests/deb/e2e.sh target/release; } 2>&1 | tee -a target/test.log; \
	  deb_rc=$$?; \
	  bash fuzz/run.sh $${FUZZ_SECONDS:-20} 2>&1 | tee -a target/test.log; \
	  fuzz_rc=$$?; \
	  awk '/^test result:/ { p += $$4; f += $$6 } END { printf "all tests: %d passed, %d failed\n", p, f }' target/test.log; \
	  skips=$$(grep -E '^[a-z0-9 ]+: .*SKIPPED' target/test.log | sort -u); \
	  if [ -n "$$skips" ]; then echo "skipped (not run, so not passed):"; printf '%s\n' "$$skips" | sed 's/^/  /'; \
	  else echo "skipped: none"; fi; \
	  [ $$cargo_rc -eq 0 ] && [ $$e2e_rc -eq 0 ] && [ $$otlp_rc -eq 0 ] && [ $$conf_rc -eq 0 ] && [ $$sd_rc -eq 0 ] && [ $$cri_rc -eq 0 ] && [ $$esc_rc -eq 0 ] && [ $$agents_rc -eq 0 ] && [ $$deb_rc -eq 0 ] && [ $$fuzz_rc -eq 0 ]

# The agents (npm, PyPI) run in vetto without credentials, and cargo/npm/pip through the
# broker with the cache presets (tests/agents/e2e.sh; root).
e2e-agents: build
	bash tests/agents/e2e.sh target/debug

# The OCI runtime-tools validation suite against vetto-shim, crun and runc side by side (built
# from a fetched copy of opencontainers/runtime-tools with its vendored dependencies; exit 77,
# a skip said out loud, where that copy is absent). Fails on any assertion vetto-shim fails
# that crun passes, except the host-caused ones in tests/conformance/known-host-failures.txt.
conformance: build
	bash tests/conformance/runtime-tools.sh --runtime vetto-shim=$(SHIM_DEBUG) \
	  --runtime crun=/usr/bin/crun --runtime runc=/usr/sbin/runc; rc=$$?; \
	  if [ $$rc -eq 77 ]; then echo "conformance: SKIPPED (no runtime-tools source here)"; exit 0; fi; exit $$rc

# vetto-shim under Docker, Podman and containerd on a systemd + cgroup v2 test host (a cached
# Debian 12 VM; see tests/systemd-host/host.sh). Also part of `make test`.
e2e-systemd: build
	bash tests/systemd-host/e2e.sh $(SHIM_DEBUG)

# crictl (cri-tools v1.26.1) from a fetched copy with its vendored dependencies.
crictl:
	bash tests/cri/build-crictl.sh

# vetto-shim behind containerd's CRI plugin, driven by crictl (also part of `make test`).
e2e-cri: build
	bash tests/cri/e2e.sh $(SHIM_DEBUG)

# The escape suite (tests/escape/): the untrusted agent's attacks against `vetto run` as root
# and as nobody, and against vetto-shim under Podman; each case checked on the host afterwards.
# Results in target/escape/; also part of `make test`.
escape: build
	bash tests/escape/run.sh target/debug

# Rerun the escape suite and write its results table into docs/security-tests.md.
escape-docs: escape
	python3 tests/escape/splice.py docs/security-tests.md target/escape/results.md

# Every fuzz target (cargo-fuzz on stable with RUSTC_BOOTSTRAP=1; see fuzz/README.md), for
# FUZZ_SECONDS each (default 20), with AddressSanitizer (FUZZ_SANITIZER=none for a plain
# build). Also part of `make test`, last: a crash fails the run and leaves its input in
# fuzz/artifacts/TARGET/.
fuzz:
	bash fuzz/run.sh $${FUZZ_SECONDS:-20}

# vetto-shim driven by Podman, containerd and dockerd (root; also part of `make test`).
e2e: build
	bash tests/oci/e2e.sh $(SHIM_DEBUG)

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

demo: release
	bash scripts/demo.sh $(RELEASE_BIN)

bench: release
	$(CARGO) build --release -p vetto-broker --example audit_bench --example approval_bench
	bash scripts/bench.sh $(RELEASE_BIN)

# The release binaries' code layout (shim/layout/vetto.order, see shim/build.rs): profiles
# real sessions with perf, writes the list, and links again with it. Run as root.
layout: release
	bash scripts/layout.sh $(RELEASE_BIN)
	$(CARGO) build --release -p vetto

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
