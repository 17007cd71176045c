# vgpu-probe build. `make` builds the binary; `make test` is what CI runs.
# Parts add their own targets through the Makefile.inc files included below.

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: all build test bench lint fuzz clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o vgpu-probe ./cmd/vgpu-probe

# The whole suite, race detector on. Tests that need root, cgroups, a real
# libvirtd or Chromium use them when present and say why when they skip.
# Packages run one at a time (-p 1): several pin busy threads to a CPU and
# check the contention they measure, which another package's busy threads
# on the same CPU would distort.
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -p 1 -timeout 60m ./...

# Go benchmarks of the hot paths (see docs/BENCHMARKS.md for how numbers
# there were taken).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./hybridsync/...
	$(GO) test -run '^$$' -bench PreloadLaunch -benchtime 5x ./cgo/ctest

lint:
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

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
-include cgo/Makefile.inc
-include profiler/Makefile.inc
-include vmimages/Makefile.inc
