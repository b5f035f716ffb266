#!/usr/bin/env bash
# Regenerates the Go code for the .proto files under proto/.
#   protoc                 Debian's protobuf-compiler (+ libprotobuf-dev for the
#                          well-known types), installed with apt-get when missing
#   protoc-gen-go          google.golang.org/protobuf at the version in go.mod
#   protoc-gen-go-grpc     google.golang.org/grpc/cmd/protoc-gen-go-grpc
#                          (pinned below), both built into .cache/bin
# Usage: hack/gen-proto.sh           regenerate in place
#        hack/gen-proto.sh --check   regenerate into a temp dir and fail if the
#                                    committed Go differs
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.cache/bin"
grpc_plugin_version=v1.6.1

log() { echo "gen-proto: $*" >&2; }

check=false
case "${1:-}" in
  "") ;;
  --check) check=true ;;
  *) log "usage: $0 [--check]"; exit 2 ;;
esac

include=/usr/include
if ! command -v protoc >/dev/null || [ ! -f "$include/google/protobuf/struct.proto" ]; then
  log "installing protoc (protobuf-compiler, libprotobuf-dev) from Debian"
  if [ "$(id -u)" -ne 0 ]; then
    log "need root for apt-get install protobuf-compiler libprotobuf-dev"
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends protobuf-compiler libprotobuf-dev >&2
fi

mkdir -p "$bin"
cd "$root"
pb_version=$(go list -m -f '{{.Version}}' google.golang.org/protobuf)

# install_plugin NAME PACKAGE@VERSION: go install into .cache/bin once per version.
install_plugin() {
  local name=$1 pkg=$2 stamp="$bin/$1.version"
  if [ -x "$bin/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$pkg" ]; then
    return
  fi
  log "go install $pkg"
  GOBIN="$bin" go install "$pkg" >&2
  echo "$pkg" >"$stamp"
}
install_plugin protoc-gen-go "google.golang.org/protobuf/cmd/protoc-gen-go@$pb_version"
install_plugin protoc-gen-go-grpc "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$grpc_plugin_version"

# generate OUTDIR: writes the generated Go for every .proto into OUTDIR,
# mirroring the layout under proto/.
generate() {
  local out=$1
  mapfile -t files < <(cd proto && find . -name '*.proto' | sed 's|^\./||' | sort)
  PATH="$bin:$PATH" protoc \
    --proto_path=proto --proto_path="$include" \
    --go_out="$out" --go_opt=paths=source_relative \
    --go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
    "${files[@]}"
}

if ! $check; then
  generate proto
  log "regenerated $(cd proto && find . -name '*.pb.go' | wc -l) files under proto/"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
generate "$tmp"
status=0
while IFS= read -r f; do
  if ! diff -u "proto/$f" "$tmp/$f" >&2; then
    status=1
  fi
done < <(cd "$tmp" && find . -name '*.pb.go' | sed 's|^\./||' | sort)
# A committed .pb.go with no .proto behind it is stale too.
while IFS= read -r f; do
  if [ ! -f "$tmp/$f" ]; then
    log "proto/$f has no source .proto"
    status=1
  fi
done < <(cd proto && find . -name '*.pb.go' | sed 's|^\./||' | sort)
if [ $status -ne 0 ]; then
  log "generated code is out of date: run hack/gen-proto.sh"
  exit 1
fi
log "generated code is current"
