#!/usr/bin/env bash
# Installs the built tmap into a scratch prefix, then configures, builds and runs a consumer
# project that finds it with find_package(tmap). Arguments: the build dir and the source dir.
set -euo pipefail
build=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
test -x "$work/prefix/bin/tmap"
test -f "$work/prefix/share/tmap/hw_abstractions/wmma_fp16_fp32.json"
# The installed binary finds its abstractions beside itself.
"$work/prefix/bin/tmap" hw list | grep -q wmma_int4_int32
cmake -S "$src/tests/package" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
TMAP_HW_DIR="$work/prefix/share/tmap/hw_abstractions" "$work/consumer/consumer"
