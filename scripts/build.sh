#!/usr/bin/env bash
# Configures and builds Ember into BUILD_DIR (default: build), warnings as
# errors. Extra arguments go to cmake (e.g. -DEMBER_SANITIZE=ON).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DEMBER_WERROR=ON "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
