#!/usr/bin/env bash
# Installs or builds what the integration tests need, and prints the
# environment that points internal/testenv at it:
#   etcd          Debian's etcd-server package (apt-get, as root)
#   kube-apiserver built from k8s.io/kubernetes through the Go module proxy
#                 (hack/tools/go.mod), cached in .cache/bin
# Usage: eval "$(hack/testenv.sh)"
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.cache/bin"
mkdir -p "$bin"
k8s_version=v1.37.2

log() { echo "testenv: $*" >&2; }

find_etcd() {
  for p in "$bin/etcd" /usr/bin/etcd /usr/local/bin/etcd; do
    [ -x "$p" ] && { echo "$p"; return 0; }
  done
  return 1
}

if ! etcd=$(find_etcd); then
  log "installing etcd-server from Debian"
  if [ "$(id -u)" -ne 0 ]; then
    log "need root for apt-get install etcd-server (or put an etcd binary at $bin/etcd)"
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends etcd-server >&2
  # The package starts a system etcd on :2379; tests use their own ports,
  # so stop it to keep the machine quiet.
  (systemctl stop etcd || service etcd stop || pkill -x etcd) >/dev/null 2>&1 || true
  etcd=$(find_etcd)
fi

apiserver="$bin/kube-apiserver"
stamp="$bin/kube-apiserver.version"
if [ ! -x "$apiserver" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$k8s_version" ]; then
  log "building kube-apiserver $k8s_version (10-20 minutes the first time)"
  (cd "$root/hack/tools" && go build -o "$apiserver.tmp" \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37" \
    k8s.io/kubernetes/cmd/kube-apiserver) >&2
  mv "$apiserver.tmp" "$apiserver"
  echo "$k8s_version" > "$stamp"
fi

echo "export TESTENV_ETCD=$etcd"
echo "export TESTENV_KUBE_APISERVER=$apiserver"
