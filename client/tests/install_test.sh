#!/usr/bin/env bash
# Installs the built client into a scratch prefix and builds a separate project against it with
# find_package(hopper):  install_test.sh BUILD_DIR CONSUMER_SOURCE_DIR
set -euo pipefail
build=$1
consumer=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
test -x "$scratch/prefix/bin/hopper"
test -f "$scratch/prefix/include/hopper/worker.hpp"
cmake -S "$consumer" -B "$scratch/build" -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/build" >/dev/null
out=$("$scratch/build/consumer")
if [ "$out" != 'dead "a\"b" default' ]; then
    echo "unexpected output from the consumer: $out"
    exit 1
fi
echo "ok: find_package(hopper) from an installed prefix"
