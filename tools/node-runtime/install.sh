#!/usr/bin/env bash
# Installs what the real-node test profile (fluidos_testenv::RealNode) runs
# besides the kubelet and kube-proxy of tools/control-plane/build.sh: Debian's
# containerd and runc, the CNI plugins, a static busybox (the pause and test
# workload images are made of it), iptables for kube-proxy, and checks each
# against tools/node-runtime/versions.env. The tests start their own containerd
# per node (own root, state and socket), never the system service: the
# package's service is stopped and disabled if the installation started it.
# Needs root for apt (CI runs as root); idempotent. A running real node changes
# the host as any node does (README, "Test": the kubelet's kernel sysctls, IPv4
# forwarding): meant for test machines.
#
#   tools/node-runtime/install.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

packages=(containerd runc containernetworking-plugins busybox-static iptables iproute2 util-linux)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' ||
    missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages: ${missing[*]}; run this script as root to install them" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt=(apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}")
  "${apt[@]}" || { apt-get -o DPkg::Lock::Timeout=300 update -q && "${apt[@]}"; }
  if command -v systemctl >/dev/null && systemctl is-active --quiet containerd 2>/dev/null; then
    systemctl disable --now containerd || true
  fi
fi

# A pod reaching another pod on its node's bridge through a Service (the
# cluster DNS) needs bridged traffic to go through iptables.
if [ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null)" != 1 ]; then
  modprobe br_netfilter 2>/dev/null || true
  sysctl -q -w net.bridge.bridge-nf-call-iptables=1 ||
    { echo "cannot turn on net.bridge.bridge-nf-call-iptables (br_netfilter)" >&2; exit 1; }
fi

check() { # check NAME PINNED ACTUAL
  case "$3" in
    "$2"*) echo "$1 $3" ;;
    *) echo "$1 is $3, tools/node-runtime/versions.env pins $2" >&2; exit 1 ;;
  esac
}
version_of() { dpkg-query -W -f='${Version}' "$1" | sed -e 's/^[0-9]*://' -e 's/[~+-].*//'; }
check containerd "$CONTAINERD_VERSION" "$(version_of containerd)"
check runc "$RUNC_VERSION" "$(version_of runc)"
check containernetworking-plugins "$CNI_PLUGINS_VERSION" "$(version_of containernetworking-plugins)"
check busybox-static "$BUSYBOX_VERSION" "$(version_of busybox-static)"
[ -x /usr/lib/cni/bridge ] || { echo "/usr/lib/cni/bridge missing" >&2; exit 1; }
