#!/usr/bin/env bash
# Installs (as root) or names (otherwise) the Debian 12 packages hopper needs to build, test and demo.
# Idempotent and quiet when everything is present, so every make target can call it.
set -euo pipefail

packages=(
  g++ make cmake pkg-config clang-format
  postgresql-15 postgresql-client-15 postgresql-server-dev-15 libpq-dev
  libfmt-dev libgtest-dev googletest
  libipc-run-perl
  ffmpeg
  pgbouncer
  python3
  locales
)
if [ "${HOPPER_DEPS_BENCH:-0}" = 1 ]; then packages+=(gnuplot-nox); fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # An old or empty package list makes apt-get fail on a fresh machine.
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "deps: missing packages. Run as root:" >&2
  echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi
