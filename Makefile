# volumed — see README.md. Tests and the demo need root (loop devices, mounts).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
# sudo's secure_path lacks /usr/local/go/bin, where Go's own tarball puts
# go: `sudo make demo` finds it there, and so do the tests that run go.
GO ?= $(or $(shell command -v go 2>/dev/null),$(wildcard /usr/local/go/bin/go),go)
ifneq ($(findstring /,$(GO)),)
export PATH := $(patsubst %/,%,$(dir $(GO))):$(PATH)
endif

.PHONY: build deps test test-race test-vms lint-then-vms os-image os-tier test-vm test-os bench bench-boot lint demo clean fuzz

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/volumed ./cmd/volumed

# Everything: unit tests, real-kernel tests of each package, end-to-end
# tests of the binary (with crash points compiled in), the VM tests of
# the network drivers (test/vm), the real-OS tier (test/os) and lint. All
# but the VM and OS tests run under the race detector (which needs cgo),
# and so does the agent the e2e tests build; the VM and OS tests check
# what ships, a static binary built without it. Every fuzz target's seed
# corpus and saved inputs (testdata/fuzz) run as tests; the fuzzing itself
# is make fuzz: even a short pass, most of it building the instrumented
# binaries, costs more CPU than the 25-minute bound can spare
# (docs/performance.md, "Round 3 of the tier's cost").
# After deps, a test whose tool is missing fails instead of skipping
# (VOLUMED_DEPS, internal/testtool).
# Lint and then the VM tests, the race packages, and the OS image's build
# run side by side (each one's output is printed when it ends): deadcode,
# most of a warm lint, is one thread; the race packages wait on the
# kernel; the VM tests compute (qemu without KVM); the image mostly waits
# on apt and dpkg. The VM tests come after lint, not beside it: a guest
# booted beside golangci-lint and the race build keeps time badly (its
# clock ran about 3 times the host's), and its scenarios' time limits
# ran out early. A lint failure fails make test once the others have
# ended. The OS tier takes both cores after them, its image built.
test: deps
	$(MAKE) --no-print-directory -j3 --output-sync=target lint-then-vms test-race os-image
	$(MAKE) --no-print-directory os-tier

# -parallel 4: three VMs run at once whatever it says (test/os's slots);
# more tests in flight keep a test's host-side work (a replay, a package
# build) from holding a slot idle. The tier is bound by emulated CPU: it
# prints what each test's VMs cost (bin/os-tier-cpu.txt), pass or fail.
os-tier:
	@mkdir -p bin; rm -f bin/os-tier-cpu.txt
	VOLUMED_DEPS=1 VOLUMED_OS_CPU_REPORT=$(CURDIR)/bin/os-tier-cpu.txt $(GO) test -count=1 -parallel 4 -timeout 50m ./test/os/; \
	  s=$$?; cat bin/os-tier-cpu.txt 2>/dev/null; exit $$s

# GOMAXPROCS=4 runs four tests (and packages) at once on 2 cores: the e2e
# tests wait on the kernel (mkfs, fsync, timers) far more than they
# compute, a quarter of a core each, and those that touch devices beyond
# their own temp dir stay serial (no t.Parallel). -parallel would say the
# same, but csi-sanity's Ginkgo refuses that flag.
RACE_PKGS = $(shell $(GO) list ./... | grep -v -e '/test/vm$$' -e '/test/os$$')
test-race:
	GOMAXPROCS=4 VOLUMED_DEPS=1 CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 30m $(RACE_PKGS)

lint-then-vms:
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory test-vms

test-vms:
	VOLUMED_DEPS=1 $(GO) test -count=1 -timeout 30m ./test/vm/

# The real-OS tier's image (.cache/os), built or found cached.
os-image:
	VOLUMED_DEPS=1 $(GO) test -count=1 -timeout 30m -run '^TestImageHoldsThePackage$$' ./test/os/

# Only the VM tests: NVMe/TCP, iSCSI and local disks against a Debian
# kernel in qemu (TCG). The first run downloads that kernel and open-iscsi
# into .cache/vm (VOLUMED_VM_CACHE); VOLUMED_VM_SCENARIOS=nvme,chap picks some.
test-vm:
	$(GO) test -count=1 -v -timeout 20m ./test/vm/

# Only the real-OS tests (test/os): Debian 12 built with mmdebstrap, the
# .deb of this tree installed, booted under qemu with systemd as PID 1;
# boot order, reboot, poweroff, package upgrade. The image is cached in
# .cache/os (VOLUMED_OS_CACHE) and rebuilt when the package changes.
test-os:
	VOLUMED_DEPS=1 $(GO) test -count=1 -v -timeout 50m ./test/os/

# Each go test -fuzz target for FUZZTIME executions (the seed corpora
# always run in `go test`); a crash fails and leaves its input in
# testdata/fuzz/. A count, not a duration: see scripts/fuzz.sh.
FUZZTIME ?= 100000x
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) ./scripts/fuzz.sh

# N volumes (default 100): sudo make bench N=1000
# PROFILE=DIR records the restart and the edits with perf(1) into DIR,
# with a binary built with its symbols (bin/volumed.prof).
N ?= 100
bench: build
ifneq ($(PROFILE),)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-X main.version=$(VERSION)' -o bin/volumed.prof ./cmd/volumed
	$(GO) run ./test/bench -n $(N) -bin bin/volumed.prof -perf $(PROFILE) $(BENCHFLAGS)
else
	$(GO) run ./test/bench -n $(N) $(BENCHFLAGS)
endif

# Boot cost on the real OS (test/os TestBootCost): 20 ext4 loop images
# mounted by volumed and by /etc/fstab's loop option, BOOTS boots of each
# alternating in one run; prints the uptime at which their consumer starts,
# the mount phase alone, and the ratios against the targets. Not in
# `make test`: it measures, it asserts no time.
BOOTS ?= 3
bench-boot:
	VOLUMED_BENCH_BOOT=1 VOLUMED_BENCH_BOOTS=$(BOOTS) VOLUMED_DEPS=1 $(GO) test -count=1 -v -run '^TestBootCost$$' -timeout 60m ./test/os/

# gofmt, go vet and golangci-lint (.golangci.yml), each on both tag sets,
# and deadcode. The two linters are pinned and built into .cache/bin the
# first time (scripts/gotool.sh), from the Go module proxy.
GOLANGCI_LINT_VERSION = v2.15.0
DEADCODE_VERSION = v0.52.0
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags crashpoints ./...
	@gl=$$(GO=$(GO) ./scripts/gotool.sh github.com/golangci/golangci-lint/v2/cmd/golangci-lint $(GOLANGCI_LINT_VERSION)) && \
	echo "golangci-lint run ./..." && $$gl run ./... && \
	echo "golangci-lint run --build-tags crashpoints ./..." && $$gl run --build-tags crashpoints ./...
	@# deadcode exits 0 whatever it finds: any line it prints fails lint.
	@# Once, with the crash points: the build without them only leaves out
	@# no-op stubs, and would call dead what only the crash points use. It
	@# has no cache: it is most of a warm lint's time.
	@dc=$$(GO=$(GO) ./scripts/gotool.sh golang.org/x/tools/cmd/deadcode $(DEADCODE_VERSION)) && \
	echo "deadcode -test -tags crashpoints ./..." && \
	out=$$($$dc -test -tags crashpoints ./...) && \
	if [ -n "$$out" ]; then echo "unreachable functions:"; echo "$$out"; exit 1; fi

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
