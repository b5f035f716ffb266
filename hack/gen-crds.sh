#!/usr/bin/env bash
# Regenerates the Istio CRDs of the base chart from istio.io/api (hack/gen-crds,
# a go run program; go:generate in manifests/embed.go runs the same): types
# from its protobuf descriptors, validation (CEL rules and other constraints)
# and versions from the annotations of its .proto files, read from the module
# cache (the istio.io/api that go.mod requires), as Istio's generator does.
# Usage: hack/gen-crds.sh           regenerate in place
#        hack/gen-crds.sh --check   fail if the committed file differs
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=manifests/charts/base/files/crd-all.gen.yaml
cd "$root"
case "${1:-}" in
  "") go run ./hack/gen-crds -o "$out"; echo "gen-crds: wrote $out" >&2 ;;
  --check) go run ./hack/gen-crds -o "$out" --check; echo "gen-crds: $out is current" >&2 ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
