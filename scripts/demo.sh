#!/usr/bin/env bash
# Ember's main job: builds Ember and trains a sparse logistic-regression
# (CTR-like) model on a local cluster of 2 servers and 2 workers, printing
# the learning progress, held-out AUC and throughput.
# Arguments go to the example (e.g. --epochs=5 --features=1000000).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
BUILD_DIR=$root/build "$root/scripts/build.sh"
EMBER_TIMEOUT=${EMBER_TIMEOUT:-600} exec "$root/scripts/local.sh" \
  "${EMBER_SERVERS:-2}" "${EMBER_WORKERS:-2}" "$root/build/examples/kv_demo" "$@"
