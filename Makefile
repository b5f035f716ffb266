# discovery: the two commands of the README are `make run` and `make test`.
SHELL := /usr/bin/env bash
GO ?= go
BIN := bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.gitCommit=$(COMMIT)
EXAMPLE ?= examples/basic
HUB ?= ghcr.io/meshplane
TAG ?= $(VERSION)
IMAGE ?= $(HUB)/discovery:$(TAG)
CREATED := $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

.PHONY: build run test test-unit lint fmt-check vet proto proto-check crds crds-check testenv bench image push

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/discovery ./cmd/discovery

# The embedded default: serve the example mesh from files, no cluster needed.
run: build
	$(BIN)/discovery serve --config-dir $(EXAMPLE)

# Everything CI runs: generated code current, formatting, vet, and every test
# including the integration suite on a real etcd + kube-apiserver, which
# hack/testenv.sh installs or builds on first use.
test: proto-check crds-check fmt-check vet
	set -euo pipefail; eval "$$(hack/testenv.sh)"; \
	TESTENV_REQUIRED=1 $(GO) test -count=1 -timeout 45m ./...

# Fast tests only: integration tests skip (with the reason) without testenv.
test-unit:
	$(GO) test -count=1 -short ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

lint: vet
	@if command -v golangci-lint >/dev/null; then golangci-lint run ./...; else echo "golangci-lint not installed: skipped (go vet ran)"; fi

proto:
	hack/gen-proto.sh

proto-check:
	hack/gen-proto.sh --check

crds:
	hack/gen-crds.sh

crds-check:
	hack/gen-crds.sh --check

testenv:
	hack/testenv.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The container image, without a container engine: a static binary on an
# empty base, written as a tarball for `docker load` (bin/discovery-image.tar).
# The same commit gives the same digest.
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -buildvcs=false \
	  -ldflags '-s -w -buildid= $(LDFLAGS)' -o $(BIN)/discovery-linux-amd64 ./cmd/discovery
	$(GO) run ./hack/image --binary $(BIN)/discovery-linux-amd64 --version $(VERSION) --revision $(COMMIT) \
	  --created $(CREATED) --tag $(IMAGE) --out $(BIN)/discovery-image.tar

# Push the image: make push IMAGE=registry.example/discovery:tag
push: image
	$(GO) run ./hack/image --binary $(BIN)/discovery-linux-amd64 --version $(VERSION) --revision $(COMMIT) \
	  --created $(CREATED) --push $(IMAGE)
