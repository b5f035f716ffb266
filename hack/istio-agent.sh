#!/usr/bin/env bash
# Builds Istio's own data plane agent, pilot-agent, from istio.io/istio
# through the Go module proxy (hack/istio-tools/go.mod pins the version),
# cached in .cache/bin, and prints the environment that points test/compat
# at it. Many minutes the first time on a small machine.
# Usage: eval "$(hack/istio-agent.sh)"
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.cache/bin"
mkdir -p "$bin"

log() { echo "istio-agent: $*" >&2; }

version=$(cd "$root/hack/istio-tools" && go list -m -f '{{.Version}}' istio.io/istio)
agent="$bin/pilot-agent"
stamp="$bin/pilot-agent.version"
if [ ! -x "$agent" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$version" ]; then
  log "building pilot-agent istio.io/istio@$version (many minutes the first time)"
  (cd "$root/hack/istio-tools" && CGO_ENABLED=0 go build -trimpath -o "$agent.tmp" \
    -ldflags "-s -w -X istio.io/istio/pkg/version.buildVersion=$version" \
    istio.io/istio/pilot/cmd/pilot-agent) >&2
  mv "$agent.tmp" "$agent"
  echo "$version" > "$stamp"
fi

echo "export COMPAT_PILOT_AGENT=$agent"
