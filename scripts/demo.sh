#!/usr/bin/env bash
# Ember's main job: builds Ember and trains a CTR model (logistic regression
# plus a factorisation machine over millions of hashed sparse IDs, held in
# embedding tables on the servers with server-side Adagrad) on a local
# cluster of 2 servers and 2 workers, printing progress, held-out AUC
# against the ground truth's and throughput, then draws the learning curve
# (build/ctr_out/curve.csv, drawn by examples/ctr/plot_curve.py with
# matplotlib into build/ctr_out/curve.png). Arguments go to
# examples/ctr/ctr_train.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
BUILD_DIR=$root/build "$root/scripts/build.sh"
servers=${EMBER_SERVERS:-2} workers=${EMBER_WORKERS:-2}
out=$root/build/ctr_out
EMBER_TIMEOUT=${EMBER_TIMEOUT:-600} "$root/scripts/local.sh" "$servers" \
  "$workers" "$root/build/examples/ctr_train" --out_dir="$out" "$@"
/usr/bin/python3 "$root/examples/ctr/plot_curve.py" "$out/curve.csv" \
  --title "ctr_train: LR + FM, $servers servers x $workers workers"
