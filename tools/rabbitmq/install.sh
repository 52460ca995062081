#!/usr/bin/env bash
# Installs Debian's rabbitmq-server (with Erlang and epmd) when it is missing,
# for crates/fluidos-network-manager/tests/broker.rs. The test starts its own
# broker process (own directory, node name, ports, epmd; TLS only), never the
# system service: the package's service is stopped and disabled if the
# installation started it. Needs root (CI runs as root); idempotent.
#
#   tools/rabbitmq/install.sh
set -euo pipefail

server=/usr/lib/rabbitmq/bin/rabbitmq-server
plugin_glob='/usr/lib/rabbitmq/lib/rabbitmq_server-*/plugins/rabbitmq_auth_mechanism_ssl-*'

if [ ! -x "$server" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "rabbitmq-server is missing; run this script as root to install it" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # policy-rc.d refuses service starts in containers; elsewhere the
  # package starts its service, which the tests do not use.
  apt-get install -y -q --no-install-recommends rabbitmq-server
  if command -v systemctl >/dev/null && systemctl is-active --quiet rabbitmq-server 2>/dev/null; then
    systemctl disable --now rabbitmq-server || true
  fi
fi

# The test needs the EXTERNAL mechanism plugin (shipped in the package).
compgen -G "$plugin_glob" >/dev/null ||
  { echo "rabbitmq_auth_mechanism_ssl plugin not found under /usr/lib/rabbitmq" >&2; exit 1; }
command -v epmd >/dev/null || { echo "epmd (erlang-base) not found" >&2; exit 1; }

dpkg-query -W -f='rabbitmq-server ${Version}\n' rabbitmq-server 2>/dev/null || echo "rabbitmq-server at $server"
