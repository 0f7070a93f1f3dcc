# volumed — see README.md. Tests and the demo need root (loop devices, mounts).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
GO ?= go

.PHONY: build test test-unit test-e2e bench lint demo clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/volumed ./cmd/volumed

# Everything: unit tests, real-kernel tests of each package, end-to-end
# tests of the binary (with crash points compiled in), lint.
test: lint
	$(GO) test -count=1 -timeout 20m ./...

bench: build
	$(GO) run ./test/bench

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags crashpoints ./...

demo: build
	./scripts/demo.sh

clean:
	rm -rf bin
