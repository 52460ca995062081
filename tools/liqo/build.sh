#!/usr/bin/env bash
# Builds the Liqo binaries the tests run as local processes
# (liqo-controller-manager, crd-replicator, webhook, virtual-kubelet, liqoctl),
# and the uninstaller Liqo's chart runs as its pre-delete hook,
# from the Go module proxy, once per Liqo version, into a cache outside the repo.
#
# Besides the binaries, the output directory holds `liqo-module-dir`: the
# path of the github.com/liqotech/liqo module in the Go module cache (the same
# version the binaries were built from), under which the tests find Liqo's own
# CRDs (deployments/liqo/charts/liqo-crds/crds) and RBAC roles
# (deployments/liqo/files). The path is refreshed on every run, so a cleaned
# module cache is downloaded again even when the binaries are cached.
#
# Prints the directory holding the binaries on its last line.
#
#   tools/liqo/build.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

cache_root=${FLUIDOS_LIQO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fluidos-rs/liqo}
# Bump when the build recipe changes, so caches built the old way are not reused.
recipe=1
out="$cache_root/$LIQO_VERSION-r$recipe"
mkdir -p "$out"

# go.mod must build what versions.env names; a mismatch would cache binaries
# under the wrong key and pair them with CRDs of another version.
grep -q "github.com/liqotech/liqo $LIQO_VERSION" "$here/go.mod" ||
  { echo "tools/liqo/go.mod does not require github.com/liqotech/liqo $LIQO_VERSION" >&2; exit 1; }

export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
# Liqo replaces virtual-kubelet with its own fork, which the checksum database
# does not know (lookups answer 404); the module still comes from the proxy and
# go.sum pins its hash.
export GONOSUMDB=${GONOSUMDB:+$GONOSUMDB,}github.com/liqotech

module_dir=$(cd "$here" && go mod download -json "github.com/liqotech/liqo@$LIQO_VERSION" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
crds="$module_dir/deployments/liqo/charts/liqo-crds/crds"
[ -d "$crds" ] || { echo "no Liqo CRDs at $crds" >&2; exit 1; }
printf '%s\n' "$module_dir" > "$out/liqo-module-dir.tmp"
mv "$out/liqo-module-dir.tmp" "$out/liqo-module-dir"

build() { # build NAME PACKAGE [EXTRA_LDFLAGS]
  local name=$1 pkg=$2 extra=${3:-}
  if [ -x "$out/$name" ]; then return 0; fi
  echo "building $name ($pkg)..." >&2
  local start=$SECONDS
  (cd "$here" && go build -trimpath -ldflags="-s -w $extra" -o "$out/$name.tmp" "$pkg")
  mv "$out/$name.tmp" "$out/$name"
  echo "built $name in $((SECONDS - start))s" >&2
}

build liqo-controller-manager github.com/liqotech/liqo/cmd/liqo-controller-manager
build crd-replicator github.com/liqotech/liqo/cmd/crd-replicator
# The admission webhooks are not optional for offloading: the VirtualNode
# mutating webhook fills spec.createNode and the virtual-kubelet Deployment
# template, which the VirtualNode controller dereferences.
build webhook github.com/liqotech/liqo/cmd/webhook
build virtual-kubelet github.com/liqotech/liqo/cmd/virtual-kubelet
# Liqo's chart runs it as its pre-delete hook (real-node clusters install
# Liqo by its chart, fluidos_testenv::liqo_images).
build uninstaller github.com/liqotech/liqo/cmd/uninstaller
# Upstream's release build stamps liqoctl's version the same way.
build liqoctl github.com/liqotech/liqo/cmd/liqoctl \
  "-X github.com/liqotech/liqo/pkg/liqoctl/version.LiqoctlVersion=$LIQO_VERSION"
echo "CRDs: $crds" >&2
echo "$out"
