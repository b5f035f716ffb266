#!/usr/bin/env bash
# Builds Istio's own CLI, istioctl, from istio.io/istio through the Go
# module proxy (hack/istio-tools/go.mod pins the version, the same as
# pilot-agent's), cached in .cache/bin, and prints the environment that
# points hack/istioctl-compat at it. About 12 minutes the first time on a
# 2-core machine; seconds after.
# Usage: eval "$(hack/istioctl.sh)"
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.cache/bin"
mkdir -p "$bin"

log() { echo "istioctl: $*" >&2; }

version=$(cd "$root/hack/istio-tools" && go list -m -f '{{.Version}}' istio.io/istio)
istioctl="$bin/istioctl"
stamp="$bin/istioctl.version"
if [ ! -x "$istioctl" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$version" ]; then
  log "building istioctl istio.io/istio@$version (many minutes the first time)"
  start=$(date +%s)
  (cd "$root/hack/istio-tools" && CGO_ENABLED=0 go build -trimpath -o "$istioctl.tmp" \
    -ldflags "-s -w -X istio.io/istio/pkg/version.buildVersion=$version" \
    istio.io/istio/istioctl/cmd/istioctl) >&2
  mv "$istioctl.tmp" "$istioctl"
  echo "$version" > "$stamp"
  log "built in $(( $(date +%s) - start ))s"
fi

echo "export COMPAT_ISTIOCTL=$istioctl"
