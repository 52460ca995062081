#!/usr/bin/env bash
# Builds the statically linked release `fluidos-node` that deploy/Containerfile
# copies into the image, and prints its path on the last line.
#
#   tools/image/build-static.sh --prepare   # once: musl target and musl-gcc (root)
#   tools/image/build-static.sh
#
# The target is x86_64-unknown-linux-musl (musl-gcc only compiles ring's C and
# assembly parts; the TLS stack is rustls), as the Containerfile expects. Where
# rustup cannot fetch the musl standard library, it falls back to glibc with a
# static C runtime (`+crt-static`): also static, but glibc's resolver then needs
# its NSS modules for names other than IP addresses, so that binary is for
# checks, not for the image; the script says so.
#
# CARGO_TARGET_DIR defaults to target/static, apart from the debug builds, so
# this build can run beside `cargo test` without waiting for its lock.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target/static}
export CARGO_PROFILE_RELEASE_STRIP=symbols CARGO_INCREMENTAL=0

target=x86_64-unknown-linux-musl
# What the musl build needs: rustup's musl standard library and Debian's
# musl-gcc. `--prepare` installs them (apt needs root) and builds nothing; CI
# runs it in the foreground, as apt must not race another apt (RabbitMQ's).
# (The list is read whole: `grep -q` on a pipe could stop rustup mid-write.)
have_target() {
  local installed
  installed=$(rustup target list --installed 2>/dev/null) || return 1
  grep -qx "$target" <<<"$installed"
}
have_musl() { have_target && command -v musl-gcc >/dev/null; }
# In CI the image's binary is required: no glibc fallback there.
no_musl() {
  if [ -n "${CI:-}" ]; then
    echo "no musl build here (rustup's $target or Debian's musl-tools missing): CI needs the image's binary" >&2
    exit 1
  fi
  echo "no musl build here: the build falls back to glibc" >&2
}
if [ "${1:-}" = --prepare ]; then
  have_target || rustup target add "$target" >&2 || true
  if ! command -v musl-gcc >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt=(apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends musl-tools)
    "${apt[@]}" >&2 || { apt-get -o DPkg::Lock::Timeout=300 update -q >&2 && "${apt[@]}" >&2; } || true
  fi
  if have_musl; then echo "musl build ready" >&2; else no_musl; fi
  exit 0
fi
have_musl || { no_musl; target=; }

start=$SECONDS
if [ -n "$target" ]; then
  CC_x86_64_unknown_linux_musl=musl-gcc \
    cargo build --release --locked --target "$target" -p fluidos-node >&2
else
  target=x86_64-unknown-linux-gnu
  echo "WARNING: no musl build here (rustup's target or musl-gcc missing): building" \
    "$target with +crt-static; not the image's binary (see above)" >&2
  RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --target "$target" -p fluidos-node >&2
fi
bin="$CARGO_TARGET_DIR/$target/release/fluidos-node"
echo "built $bin in $((SECONDS - start))s: $(stat -c %s "$bin") bytes" \
  "($(( $(stat -c %s "$bin") / 1048576 )) MiB, stripped)" >&2
echo "$bin"
