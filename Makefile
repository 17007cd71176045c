# vgpu-probe build. `make` builds the binary and what `vgpu-probe advise`
# runs programs with (the library, its launcher, the blocking-sync shim)
# under build/; `make test` is what CI runs.
# Parts add their own targets through the Makefile.inc files included below.

GO      ?= go
# `vgpu-probe --version`: the release in the VERSION file and the commit
# built ("-dirty" with uncommitted changes to tracked files).
VERSION ?= $(shell cat VERSION 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

# Where `make install` puts things (GNU conventions; DESTDIR stages a
# package). The unit goes under the prefix, where systemd looks for
# packaged units (/usr/lib and /usr/local/lib/systemd/system), leaving
# /etc/systemd/system to the administrator's own units and drop-ins; for a
# prefix systemd does not search (/opt/...), set UNITDIR=/etc/systemd/system.
PREFIX      ?= /usr/local
BINDIR      ?= $(PREFIX)/bin
# The library's directory: lib64 or lib/x86_64-linux-gnu where the
# distribution wants those.
LIBDIR      ?= $(PREFIX)/lib
MANDIR      ?= $(PREFIX)/share/man
UNITDIR     ?= $(PREFIX)/lib/systemd/system
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR  ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
# The binary, and where generated files (man pages, completions, the
# library) go.
BIN         ?= vgpu-probe
BUILD       ?= build
HS_BUILD    ?= $(BUILD)
# The date in the man pages: the last commit's, so a rebuild is identical.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)

.PHONY: all build parts man completions test bench lint fuzz clean install-bin uninstall-bin

# The parts' prerequisites are named after the includes below, which
# define where the library goes.
all: build parts

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/vgpu-probe

# Man pages and shell completions come from the cobra commands of the
# binary just built, so they always match its flags; they are not committed.
man: build
	rm -rf $(BUILD)/man/man1
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(abspath $(BIN)) man $(BUILD)/man/man1

# Each written whole, then renamed: a failed run leaves no partial script.
completions: build
	@mkdir -p $(BUILD)/completion
	$(abspath $(BIN)) completion bash >$(BUILD)/completion/vgpu-probe.bash.tmp
	$(abspath $(BIN)) completion zsh >$(BUILD)/completion/_vgpu-probe.tmp
	$(abspath $(BIN)) completion fish >$(BUILD)/completion/vgpu-probe.fish.tmp
	cd $(BUILD)/completion && for f in vgpu-probe.bash _vgpu-probe vgpu-probe.fish; do mv $$f.tmp $$f; done

# `make install` is install-bin below plus install-lib (libhybridsync/Makefile.inc).
# The installed unit's ExecStart names $(BINDIR)/vgpu-probe.
install: install-bin
uninstall: uninstall-bin

install-bin: build man completions $(BUILD)/lib/vgpu-probe/blocksync.so
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MANDIR)/man1 \
		$(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR) $(DESTDIR)$(LIBDIR)/vgpu-probe
	install -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/vgpu-probe
	install -m 0755 $(BUILD)/lib/vgpu-probe/blocksync.so $(DESTDIR)$(LIBDIR)/vgpu-probe/blocksync.so
	sed 's|/usr/local/bin/vgpu-probe|$(BINDIR)/vgpu-probe|g' agent/vgpu-probe-agent.service >$(BUILD)/vgpu-probe-agent.service
	install -m 0644 $(BUILD)/vgpu-probe-agent.service $(DESTDIR)$(UNITDIR)/
	rm -f $(DESTDIR)$(MANDIR)/man1/vgpu-probe.1 $(DESTDIR)$(MANDIR)/man1/vgpu-probe-*.1
	install -m 0644 $(BUILD)/man/man1/*.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 libhybridsync/hybridsync-run.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 $(BUILD)/completion/vgpu-probe.bash $(DESTDIR)$(BASHCOMPDIR)/vgpu-probe
	install -m 0644 $(BUILD)/completion/_vgpu-probe $(DESTDIR)$(ZSHCOMPDIR)/_vgpu-probe
	install -m 0644 $(BUILD)/completion/vgpu-probe.fish $(DESTDIR)$(FISHCOMPDIR)/vgpu-probe.fish

uninstall-bin:
	rm -f $(DESTDIR)$(LIBDIR)/vgpu-probe/blocksync.so
	rmdir $(DESTDIR)$(LIBDIR)/vgpu-probe 2>/dev/null || true
	rm -f $(DESTDIR)$(BINDIR)/vgpu-probe $(DESTDIR)$(UNITDIR)/vgpu-probe-agent.service \
		$(DESTDIR)$(MANDIR)/man1/vgpu-probe.1 $(DESTDIR)$(MANDIR)/man1/vgpu-probe-*.1 \
		$(DESTDIR)$(MANDIR)/man1/hybridsync-run.1 \
		$(DESTDIR)$(BASHCOMPDIR)/vgpu-probe $(DESTDIR)$(ZSHCOMPDIR)/_vgpu-probe \
		$(DESTDIR)$(FISHCOMPDIR)/vgpu-probe.fish

# The whole suite, race detector on. Tests that need root, cgroups, a real
# libvirtd or Chromium use them when present and say why when they skip.
# Packages run one at a time (-p 1): several pin busy threads to a CPU and
# check the contention they measure, which another package's busy threads
# on the same CPU would distort.
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -p 1 -timeout 60m ./...

# Go benchmarks of the hot paths (docs/BENCHMARKS.md, "Fast path and
# dictionary (Go benchmarks)", says how its numbers were taken).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./hybridsync/...
	$(GO) test -run '^$$' -bench 'PreloadLaunch|LauncherStart' -benchtime 5x ./libhybridsync/ctest

# The agent's HTTP server under load, as root (minutes): a busy target, a
# 256 MB memory cgroup, many clients and 20,500 idle connections; 200
# targets under 60 scrapers; 202 targets with 20,000 connections, timeline
# readers and scrapers; the series of a sleeping process and of one naming
# its threads "CPU n/KVM". One part: BENCH=scrapers (busy, idle, scrapers,
# memory, cardinality).
BENCH ?=
bench-agent-http:
	VGPU_BENCH_HTTP=1 $(GO) test -count=1 -v -timeout 30m -run 'TestAgentHTTPLoad/$(BENCH)' ./agent/exporter/loadtest

lint:
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

# Every shell script (and the launcher's template) through shellcheck, and
# every Python script compiled and through pyflakes: .ci/setup-lint.sh
# installs both, .ci/run runs this before the tests. The lists are git's
# (tracked and untracked, less what .gitignore leaves out); the bytecode
# goes to a directory removed after.
.PHONY: lint-scripts
lint-scripts:
	shellcheck $$(git ls-files -co --exclude-standard '*.sh' .ci/run libhybridsync/hybridsync-run.in)
	d=$$(mktemp -d) && PYTHONPYCACHEPREFIX=$$d python3 -m py_compile $$(git ls-files -co --exclude-standard '*.py'); \
	  rc=$$?; rm -rf "$$d"; exit $$rc
	pyflakes3 $$(git ls-files -co --exclude-standard '*.py')

# A short run of every fuzz target; the corpora live in testdata/fuzz.
FUZZTIME ?= 20s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

clean:
	rm -rf build vgpu-probe

-include bpf/Makefile.inc
-include libhybridsync/Makefile.inc
-include profiler/Makefile.inc
-include vmimages/Makefile.inc
-include packaging/Makefile.inc

# What `vgpu-probe advise` finds beside the binary (experiments/apps/suite,
# FindParts): the library and the launcher where `make lib` puts them,
# without the static archive and the package files, and CUDA's
# blocking-sync shim (advise/blocksync/blocksync.c, which needs no CUDA
# headers) where `make install` puts it under the prefix.
parts: $(HS_LIB)/libhybridsync.so $(HS_BUILD)/bin/hybridsync-run $(HS_BUILD)/bin/hybridsync-openmp $(BUILD)/lib/vgpu-probe/blocksync.so

$(BUILD)/lib/vgpu-probe/blocksync.so: advise/blocksync/blocksync.c
	@mkdir -p $(@D)
	$(CC) -shared -fPIC -O2 -Wall -o $@.tmp $< -ldl && mv $@.tmp $@
