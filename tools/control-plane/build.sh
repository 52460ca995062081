#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
# from the Go module proxy, once per version set, into a cache outside the repo.
# Prints the directory holding the binaries on its last line.
#
#   tools/control-plane/build.sh            # all five
#   FLUIDOS_CP_MINIMAL=1 tools/control-plane/build.sh   # etcd + kube-apiserver only
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

cache_root=${FLUIDOS_CP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fluidos-rs/control-plane}
out="$cache_root/k8s-$KUBERNETES_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION"
mkdir -p "$out"

# The go.mod files must build what versions.env names; a mismatch would cache
# binaries under the wrong key.
grep -q "k8s.io/kubernetes $KUBERNETES_VERSION" "$here/kubernetes/go.mod" ||
  { echo "kubernetes/go.mod does not require k8s.io/kubernetes $KUBERNETES_VERSION" >&2; exit 1; }
grep -q "go.etcd.io/etcd/server/v3 $ETCD_VERSION" "$here/etcd/go.mod" ||
  { echo "etcd/go.mod does not require etcd $ETCD_VERSION" >&2; exit 1; }
grep -q "sigs.k8s.io/kwok $KWOK_VERSION" "$here/kwok/go.mod" ||
  { echo "kwok/go.mod does not require kwok $KWOK_VERSION" >&2; exit 1; }

export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
build() { # build NAME MODULE_DIR PACKAGE
  local name=$1 dir=$2 pkg=$3
  if [ -x "$out/$name" ]; then return 0; fi
  echo "building $name ($pkg)..." >&2
  local start=$SECONDS
  (cd "$here/$dir" && go build -trimpath -ldflags='-s -w' -o "$out/$name.tmp" "$pkg")
  mv "$out/$name.tmp" "$out/$name"
  echo "built $name in $((SECONDS - start))s" >&2
}

build etcd etcd .
build kube-apiserver kubernetes k8s.io/kubernetes/cmd/kube-apiserver
if [ -z "${FLUIDOS_CP_MINIMAL:-}" ]; then
  build kube-controller-manager kubernetes k8s.io/kubernetes/cmd/kube-controller-manager
  build kube-scheduler kubernetes k8s.io/kubernetes/cmd/kube-scheduler
  build kwok kwok sigs.k8s.io/kwok/cmd/kwok
fi
echo "$out"
