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

.PHONY: build run test test-unit lint lint-if-built fmt-check vet proto proto-check crds crds-check testenv bench image push

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/discovery ./cmd/discovery

# The embedded default: serve the example mesh from files, no cluster needed.
run: build
	$(BIN)/discovery serve --config-dir $(EXAMPLE)

# Everything CI runs: generated code current, formatting, vet, and every test
# including the integration suite on a real etcd + kube-apiserver, and the
# compatibility tests with Istio's own pilot-agent and istioctl;
# hack/testenv.sh, hack/istio-agent.sh and hack/istioctl.sh install or build
# them on first use. golangci-lint runs only when `make lint` has built it
# into .cache/bin (building it costs about 8 minutes cold on 2 cores).
test: proto-check crds-check values-schema-check fmt-check vet lint-if-built
	set -euo pipefail; eval "$$(hack/testenv.sh)"; eval "$$(hack/istio-agent.sh)"; \
	TESTENV_REQUIRED=1 COMPAT_REQUIRED=1 $(GO) test -count=1 -timeout 45m ./...
	cd hack/istio-validate && $(GO) test -count=1 ./...
	set -euo pipefail; eval "$$(hack/testenv.sh)"; \
	cd hack/conformance && $(GO) vet ./... && TESTENV_REQUIRED=1 $(GO) test -count=1 -timeout 30m ./...
	cd hack/helm-charts && $(GO) vet ./... && $(GO) test -count=1 ./...
	$(MAKE) test-istioctl
	$(MAKE) fuzz-short

# Istio's istioctl (analyze, x precheck, tag, proxy-status, version) against
# discovery installed on the real API server, with pilot-agent as the proxy.
.PHONY: test-istioctl
test-istioctl:
	set -euo pipefail; eval "$$(hack/testenv.sh)"; eval "$$(hack/istio-agent.sh)"; eval "$$(hack/istioctl.sh)"; \
	cd hack/istioctl-compat && $(GO) vet ./... && \
	TESTENV_REQUIRED=1 COMPAT_REQUIRED=1 $(GO) test -count=1 -timeout 20m ./...

# Bounded runs of the fuzzers whose property is a security claim: one bad
# config costs only the resources built from it (FuzzBlastRadius). A count
# of inputs (about 30 s here), not a duration: with a duration, Go 1.26's
# fuzzing coordinator can report "context deadline exceeded" when the time
# is up, with no failing input (go.dev/issue/75804, fixed in Go 1.27).
FUZZTIME ?= 5000x
.PHONY: fuzz-short
fuzz-short:
	$(GO) test ./pkg/xds/gen/ -run '^$$' -fuzz '^FuzzBlastRadius$$' -fuzztime $(FUZZTIME)

# Fast tests only: integration tests skip (with the reason) without testenv.
test-unit:
	$(GO) test -count=1 -short ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# golangci-lint with .golangci.yml (errorlint, contextcheck, thelper,
# depguard; gofumpt and goimports), built by hack/golangci-lint.sh into
# .cache/bin on first use (pinned by hack/golangci/go.mod).
lint: vet
	hack/golangci-lint.sh

lint-if-built:
	hack/golangci-lint.sh --if-built

proto:
	hack/gen-proto.sh

proto-check:
	hack/gen-proto.sh --check

crds:
	hack/gen-crds.sh

crds-check:
	hack/gen-crds.sh --check

# Each chart's values.schema.json and files/noeffect.json, generated from
# the value types pkg/install validates against.
.PHONY: values-schema values-schema-check
values-schema:
	$(GO) run ./hack/gen-values-schema

values-schema-check:
	$(GO) run ./hack/gen-values-schema --check

testenv:
	hack/testenv.sh

# Published benchmarks (BENCHMARKS.md): workload S against the real server
# started by the load tool (file mode, loopback), the CA at 100 clients
# (ECDSA and RSA workload keys) and the injection webhook at 200 requests/s.
# Reports (report.txt, report.json) land in out/bench/*; 2-4 minutes.
bench: build
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/discovery-load ./test/load
	rm -rf out/bench/s out/bench/ca-ecdsa out/bench/ca-rsa out/bench/webhook
	$(BIN)/discovery-load xds --server-binary $(BIN)/discovery --out out/bench/s \
	  --services 100 --namespaces 10 --ports 2 --endpoints 10 --virtual-services 10 --proxies 100 \
	  --endpoint-changes 20 --vs-changes 20 --service-changes 10 --reconnects 20 --rate 2 --idle 10s
	$(BIN)/discovery-load ca --server-binary $(BIN)/discovery --out out/bench/ca-ecdsa --clients 100 --key ecdsa --duration 10s
	$(BIN)/discovery-load ca --server-binary $(BIN)/discovery --out out/bench/ca-rsa --clients 100 --key rsa --duration 10s
	$(BIN)/discovery-load webhook --server-binary $(BIN)/discovery --out out/bench/webhook --rate 200 --duration 30s

# Workload M1 (1,000 services x 2 ports, 10,000 endpoints, 50 namespaces,
# 1,000 delta proxies connecting at once), with server CPU and heap
# profiles from a measurement build that adds net/http/pprof through a
# build-time overlay (the server's code is unchanged). About 5 minutes.
# M1_ARGS adds load tool flags, e.g. M1_ARGS=--injected-labels (the labels
# Istio's injector gives every pod) or
# M1_ARGS=--server-arg=--xds-listeners-per-address.
M1_ARGS ?=
.PHONY: bench-m1
bench-m1: build
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/discovery-load ./test/load
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -overlay test/load/serverpprof/overlay.json -o $(BIN)/discovery-pprof ./cmd/discovery
	rm -rf out/bench/m1
	$(BIN)/discovery-load xds --server-binary $(BIN)/discovery-pprof --server-pprof --profile --out out/bench/m1 \
	  --services 1000 --namespaces 50 --ports 2 --endpoints 10 --virtual-services 100 --proxies 1000 \
	  --endpoint-changes 20 --vs-changes 20 --service-changes 10 --reconnects 20 --rate 1 --idle 20s --timeout 10m $(M1_ARGS)

# Workload M1 in API-server mode (as istiod was measured): the world is
# written into a real kube-apiserver (internal/testenv) and discovery serve
# reads it with --kubeconfig; bench-m1's phases. Report in
# out/bench/m1-kube. About ten minutes.
.PHONY: bench-m1-kube
bench-m1-kube:
	mkdir -p out/bench
	rm -rf out/bench/m1-kube
	set -euo pipefail; eval "$$(hack/testenv.sh)"; \
	LOAD_OUT=$(CURDIR)/out/bench/m1-kube TESTENV_REQUIRED=1 $(GO) test -tags loadkube -count=1 -timeout 40m -v -run TestM1OnARealAPIServer ./test/load/

# The reliability suite at scale (RELIABILITY.md): each fault scenario of
# test/chaos on a real etcd + kube-apiserver with 1,000 services and 1,000
# proxies, discovery serve run from bin/discovery. Reports land in
# test/chaos/results/<commit>/<scenario>/ (committed, like the
# benchmarks'); the log of the run in out/chaos.log. `make test` runs the
# small versions. About 30-40 minutes on this machine.
CHAOS_OUT ?= test/chaos/results/$(shell git rev-parse --short HEAD 2>/dev/null || echo dev)
CHAOS_RUN ?= .
.PHONY: chaos
chaos: build
	mkdir -p out
	set -euo pipefail; eval "$$(hack/testenv.sh)"; \
	TESTENV_REQUIRED=1 $(GO) test -count=1 -timeout 150m -v -run '$(CHAOS_RUN)' ./test/chaos/ \
	  -chaos.scale=big -chaos.server-binary=$(CURDIR)/$(BIN)/discovery -chaos.out=$(CURDIR)/$(CHAOS_OUT) 2>&1 | tee out/chaos.log

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
