#!/usr/bin/env bash
# Builds helm from the Go module proxy, once per helm version, into a cache
# outside the repo. The chart tests (crates/fluidos-node/tests/helm_chart.rs)
# run it: `helm lint` and `helm template` on deploy/helm/fluidos-node.
# Prints the directory holding the binary on its last line.
#
#   tools/helm/build.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

cache_root=${FLUIDOS_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fluidos-rs/helm}
# Bump when the build recipe changes, so caches built the old way are not reused.
recipe=2
out="$cache_root/$HELM_VERSION-r$recipe"
mkdir -p "$out"

# go.mod must build what versions.env names; a mismatch would cache the binary
# under the wrong key.
grep -q "helm.sh/helm/v3 $HELM_VERSION" "$here/go.mod" ||
  { echo "tools/helm/go.mod does not require helm.sh/helm/v3 $HELM_VERSION" >&2; exit 1; }

export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
if [ ! -x "$out/helm" ]; then
  echo "building helm $HELM_VERSION..." >&2
  start=$SECONDS
  # Upstream's release build (its Makefile) stamps the version, and the
  # Kubernetes version `helm template`/`helm lint` assume (its client-go's,
  # v0.X -> 1.X) for charts' kubeVersion checks; unstamped, helm says 1.20.
  k8s=$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/client-go)
  k8s_minor=$(echo "$k8s" | cut -d. -f2)
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldflags="$ldflags -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
  done
  (cd "$here" && go build -trimpath -ldflags="$ldflags" -o "$out/helm.tmp" helm.sh/helm/v3/cmd/helm)
  mv "$out/helm.tmp" "$out/helm"
  echo "built helm in $((SECONDS - start))s" >&2
fi
echo "$out"
