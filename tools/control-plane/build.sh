#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, kubectl,
# kubelet, kube-proxy and CoreDNS
# from the Go module proxy, once per version set, into a cache outside the repo.
# Prints the directory holding the binaries on its last line.
#
#   tools/control-plane/build.sh            # all nine
#   FLUIDOS_CP_MINIMAL=1 tools/control-plane/build.sh   # etcd + kube-apiserver only
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

cache_root=${FLUIDOS_CP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fluidos-rs/control-plane}
# Bump when the build recipe changes, so caches built the old way are not reused.
recipe=2
out="$cache_root/k8s-$KUBERNETES_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-r$recipe"
mkdir -p "$out"

# The go.mod files must build what versions.env names; a mismatch would cache
# binaries under the wrong key.
grep -q "k8s.io/kubernetes $KUBERNETES_VERSION" "$here/kubernetes/go.mod" ||
  { echo "kubernetes/go.mod does not require k8s.io/kubernetes $KUBERNETES_VERSION" >&2; exit 1; }
grep -q "go.etcd.io/etcd/server/v3 $ETCD_VERSION" "$here/etcd/go.mod" ||
  { echo "etcd/go.mod does not require etcd $ETCD_VERSION" >&2; exit 1; }
grep -q "sigs.k8s.io/kwok $KWOK_VERSION" "$here/kwok/go.mod" ||
  { echo "kwok/go.mod does not require kwok $KWOK_VERSION" >&2; exit 1; }
grep -q "github.com/coredns/coredns $COREDNS_VERSION" "$here/coredns/go.mod" ||
  { echo "coredns/go.mod does not require coredns $COREDNS_VERSION" >&2; exit 1; }

export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
# Stamp the Kubernetes version so `GET /version` reports it (upstream's release
# build does the same through hack/lib/version.sh).
k8s_ldflags="-X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2) -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION"
build() { # build NAME MODULE_DIR PACKAGE [EXTRA_LDFLAGS]
  local name=$1 dir=$2 pkg=$3 extra=${4:-}
  if [ -x "$out/$name" ]; then return 0; fi
  echo "building $name ($pkg)..." >&2
  local start=$SECONDS
  (cd "$here/$dir" && go build -trimpath -ldflags="-s -w $extra" -o "$out/$name.tmp" "$pkg")
  mv "$out/$name.tmp" "$out/$name"
  echo "built $name in $((SECONDS - start))s" >&2
}

build etcd etcd .
build kube-apiserver kubernetes k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags"
if [ -z "${FLUIDOS_CP_MINIMAL:-}" ]; then
  build kube-controller-manager kubernetes k8s.io/kubernetes/cmd/kube-controller-manager "$k8s_ldflags"
  build kube-scheduler kubernetes k8s.io/kubernetes/cmd/kube-scheduler "$k8s_ldflags"
  build kwok kwok sigs.k8s.io/kwok/cmd/kwok
  # For the `kubectl fluidos` plugin test (crates/kubectl-fluidos): a kubectl
  # of the same version that finds plugins on PATH.
  build kubectl kubernetes k8s.io/kubernetes/cmd/kubectl "$k8s_ldflags"
  # For the real-node profile (fluidos_testenv::real_node): a kubelet that runs
  # pods through Debian's containerd, and kube-proxy for Service addresses.
  build kubelet kubernetes k8s.io/kubernetes/cmd/kubelet "$k8s_ldflags"
  build kube-proxy kubernetes k8s.io/kubernetes/cmd/kube-proxy "$k8s_ldflags"
  # The cluster DNS of the real-node profile, named by its version and
  # recipe (the cache key above predates it, so a new one builds beside).
  build "coredns-$COREDNS_VERSION-r$COREDNS_RECIPE" coredns . \
    "-X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION"
fi
echo "$out"
