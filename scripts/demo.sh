#!/usr/bin/env bash
# Ember's main job: builds Ember and trains a CTR model (logistic regression
# plus a factorisation machine over millions of hashed sparse IDs, held in
# embedding tables on the servers with server-side Adagrad) on a local
# cluster of 2 servers and 2 workers, printing progress, held-out AUC
# against the ground truth's, throughput, and the learning curve (CSV and
# PNG in build/ctr_out). Arguments go to examples/ctr/ctr_train.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
BUILD_DIR=$root/build "$root/scripts/build.sh"
EMBER_TIMEOUT=${EMBER_TIMEOUT:-600} exec "$root/scripts/local.sh" \
  "${EMBER_SERVERS:-2}" "${EMBER_WORKERS:-2}" "$root/build/examples/ctr_train" \
  --out_dir="$root/build/ctr_out" "$@"
