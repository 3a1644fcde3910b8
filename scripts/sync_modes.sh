#!/usr/bin/env bash
# One workload (examples/sync_modes: logistic regression, 2 servers,
# 4 workers, worker 3 a straggler) under bsp, ssp:1, ssp:4 and asp.
# Prints a table of iterations per second and final held-out log-loss, and
# writes it as CSV.
#
# usage: scripts/sync_modes.sh [BUILD_DIR] [extra sync_modes flags...]
# env:   OUT_DIR (default BUILD_DIR/sync_modes), SERVERS, WORKERS
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
program=$build/examples/sync_modes
[ -x "$program" ] || { echo "build first: $program is missing" >&2; exit 1; }
servers=${SERVERS:-2} workers=${WORKERS:-4}
slow=$((workers - 1))
out=${OUT_DIR:-$build/sync_modes}
mkdir -p "$out"
csv=$out/sync_modes.csv
echo "mode,fast_it_per_s,straggler_it_per_s,job_seconds,final_test_loss" >"$csv"
printf '%-7s %16s %18s %12s %16s\n' mode "fast it/s" "straggler it/s" \
  "job s" "test log-loss"
for mode in bsp ssp:1 ssp:4 asp; do
  log=$out/${mode/:/}.log
  start=$(date +%s.%N)
  EMBER_CONSISTENCY=$mode EMBER_TIMEOUT=300 \
    "$root/scripts/local.sh" "$servers" "$workers" "$program" \
    --slow_rank="$slow" "$@" >"$log" 2>&1 ||
    { echo "$mode: run failed, log in $log" >&2; cat "$log" >&2; exit 1; }
  end=$(date +%s.%N)
  fast=$(grep -o "RESULT worker=[0-9]* .*it_per_s=[0-9.]*" "$log" |
    grep -v "worker=$slow " | sed 's/.*it_per_s=//' |
    awk '{s += $1; n++} END {printf "%.1f", s / n}')
  straggler=$(grep -o "RESULT worker=$slow .*it_per_s=[0-9.]*" "$log" |
    sed 's/.*it_per_s=//')
  loss=$(grep -o "test_loss=[0-9.]*" "$log" | cut -d= -f2)
  job=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.2f", b - a}')
  printf '%-7s %16s %18s %12s %16s\n' "$mode" "$fast" "$straggler" "$job" \
    "$loss"
  echo "$mode,$fast,$straggler,$job,$loss" >>"$csv"
done
echo "wrote $csv (logs in $out)"
