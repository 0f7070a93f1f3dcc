# volumed — see README.md. Tests and the demo need root (loop devices, mounts).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
# sudo's secure_path lacks /usr/local/go/bin, where Go's own tarball puts
# go: `sudo make demo` finds it there, and so do the tests that run go.
GO ?= $(or $(shell command -v go 2>/dev/null),$(wildcard /usr/local/go/bin/go),go)
ifneq ($(findstring /,$(GO)),)
export PATH := $(patsubst %/,%,$(dir $(GO))):$(PATH)
endif

.PHONY: build deps test test-unit test-e2e test-vm bench lint demo clean fuzz

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/volumed ./cmd/volumed

# Everything: unit tests, real-kernel tests of each package, end-to-end
# tests of the binary (with crash points compiled in), the VM tests of
# the network drivers (test/vm), lint, and a short run of every fuzzer.
# All but the VM tests run under the race detector (which needs cgo), and
# so does the agent the e2e tests build; the VM tests check what runs in
# the VM, a static binary built without it.
# After deps, a test whose tool is missing fails instead of skipping
# (VOLUMED_DEPS, internal/testtool).
RACE_PKGS = $(shell $(GO) list ./... | grep -v '/test/vm$$')
test: deps lint
	VOLUMED_DEPS=1 CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 30m $(RACE_PKGS)
	VOLUMED_DEPS=1 $(GO) test -count=1 -timeout 30m ./test/vm/
	$(MAKE) fuzz

# Only the VM tests: NVMe/TCP, iSCSI and local disks against a Debian
# kernel in qemu (TCG). The first run downloads that kernel and open-iscsi
# into .cache/vm (VOLUMED_VM_CACHE); VOLUMED_VM_SCENARIOS=nvme,chap picks some.
test-vm:
	$(GO) test -count=1 -v -timeout 20m ./test/vm/

# Each go test -fuzz target for FUZZTIME (the seed corpora always run in
# `go test`); a crash fails and leaves its input in testdata/fuzz/.
FUZZTIME ?= 15s
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) ./scripts/fuzz.sh

# N volumes (default 100): sudo make bench N=1000
N ?= 100
bench: build
	$(GO) run ./test/bench -n $(N) $(BENCHFLAGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags crashpoints ./...

demo: build
	./scripts/deps.sh demo
	./scripts/demo.sh

# What the tests need (scripts/deps.sh): apt-installed on Debian/Ubuntu as
# root, named with their packages elsewhere.
deps:
	./scripts/deps.sh test

clean:
	rm -rf bin

.PHONY: package schema man completion

# .deb and .rpm of the static binary, with nfpm (packaging/nfpm.yaml), into
# $(DIST). Later nfpm versions do not build from the module proxy here.
NFPM ?= $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
DIST ?= bin/dist
PACKAGE_BIN ?= bin/volumed
PACKAGE_ARCH ?= $(shell $(GO) env GOARCH)
# test/os builds only the .deb (PACKAGERS=deb).
PACKAGERS ?= deb rpm
# Tag v1.2.3 gives 1.2.3; an untagged build 0~git<describe>, which sorts
# before any release. rpm allows no '-' in a version.
PACKAGE_VERSION = $(shell echo '$(VERSION)' | sed -E 's/^v([0-9])/\1/; /^[0-9]+\./!s/^/0~git/; s/-/./g')

package: $(if $(filter bin/volumed,$(PACKAGE_BIN)),build)
	mkdir -p $(DIST)
	for p in $(PACKAGERS); do \
		VOLUMED_VERSION='$(PACKAGE_VERSION)' VOLUMED_ARCH='$(PACKAGE_ARCH)' VOLUMED_BIN='$(PACKAGE_BIN)' \
		$(NFPM) package --config packaging/nfpm.yaml --packager $$p --target $(DIST)/ || exit 1; \
	done

# The manifest JSON Schema, from agent/manifest's types; the man pages,
# one of which is made from it.
schema:
	$(GO) run ./packaging/schema
	$(MAKE) man

# volumed(8) from internal/cli, volumed.yaml(5) from the schema.
man:
	$(GO) run ./packaging/man

# The completion scripts the packages ship (volumed completion bash|zsh).
completion:
	$(GO) run ./cmd/volumed completion bash >packaging/completion/volumed.bash
	$(GO) run ./cmd/volumed completion zsh >packaging/completion/_volumed
