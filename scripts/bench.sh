#!/usr/bin/env bash
# bench.sh - Ember's KV benchmark against raw ZeroMQ, interleaved in one run.
#
# usage: scripts/bench.sh [--rounds N] [--out DIR] [--seconds S]
#                         [--warmup S] [--handle empty|sum] [--no-memcpy]
#                         [--no-multi]
#
# Builds nothing: it runs the programs of an existing build tree
# ($BUILD_DIR/bench/{kv_bench,zmq_baseline,memcpy_baseline} and the
# scheduler). Every round runs each raw ZeroMQ baseline case followed by the
# Ember cases compared with it (A B A B ...), so slow drift on a shared
# machine hits both sides alike. After the rounds it prints the medians and
# the Ember / baseline ratios of the cases issue 5 sets targets for, all at
# 1 server x 1 worker:
#   dense 4 MB push, window 8, GB/s      vs raw ZeroMQ 4 MB, window 8
#   dense 4 MB pull, window 8, GB/s      vs the same
#   sparse 1000 keys x 1 float push, window 8, requests/s
#                                        vs raw ZeroMQ messages/s at 12000 B
#   4 KB push, window 1, p50 round trip  vs raw ZeroMQ 4096 B, window 1
# (for the round trip lower is better: the ratio is Ember's time over
# ZeroMQ's). The ratio judged is the median of the per-round ratios (each
# round's Ember figure over the baseline run just before it; the 4 MB pull
# shares the push's, run just before the push); the ratio of
# the medians, the range of the per-round ratios and the ratio of the best
# figures are printed beside it. On a shared machine interference only ever
# slows a run down, so best against best is a second estimate that a few
# slow rounds on one side cannot move; when the two estimates disagree, the
# rounds were too noisy to judge the target. How sure the judgement is comes
# from the per-round ratios too: their k-th smallest and k-th largest are a
# confidence interval for the median that assumes nothing about the noise
# but that rounds are independent (at least 90%: 5 rounds give 94%, 9 give
# 96%), and 'settled' says whether that interval meets the target, misses it
# or straddles it (open). The chart draws the interval as an error bar.
# Ember's waiting threads spin before they sleep (EMBER_SPIN_US, see
# ReceiveGate); raw ZeroMQ's baseline blocks at once, as the targets were
# set. So the same cases are also run against raw ZeroMQ that spins the same
# way (zmq_baseline --spin_us, the same value), judged against no target:
# that second table is Ember's own overhead over the transport, with the
# waiting strategy taken out.
# The targets are judged with kv_bench's empty server handle, which does
# nothing with a pushed value and answers a pull with a ready array: that is
# how ps-lite's own benchmark (tests/test_benchmark.cc, whose handler skips
# its summation) measured the ps-lite figures the targets come from, and how
# raw ZeroMQ's server behaves. With the summing handle Ember's server adds
# every pushed value into its store, which raw ZeroMQ's server does not; on
# 2 cores that arithmetic is a large share of the 4 MB push's CPU. So every
# round also runs the 4 MB push with the summing handle, followed by raw
# ZeroMQ whose server adds each payload into a store with the same loop
# (zmq_baseline --server_sums), and prints, judged against no target: the
# summing push against plain raw ZeroMQ; against raw ZeroMQ adding (Ember's
# overhead with the server's arithmetic in both; that baseline runs after
# Ember's summing run, just after it by default, so this pairs Ember with a
# run after it); and raw
# ZeroMQ adding against plain raw ZeroMQ (what the adding itself costs on
# this machine). --handle=sum judges the targets with the summing handle
# instead (then the summing push is the judged run).
# One more line, judged against no target, says what Ember's topology costs
# raw ZeroMQ itself: 12000 B, window 8, answered over a second TCP connection
# (zmq_baseline --replies=separate, the way an Ember node answers) over the
# same answered on the request's connection, in the same rounds. Then it
# runs the memcpy / gather / scatter-add baseline once, and the embedding
# target: a table of EMBED_ROWS rows of dim 64 with Adagrad, pull and
# push + update against a plain gather / scatter-add over a flat array of
# the same rows (embedding_bench, ROUNDS rounds in one process; target: at
# least 0.5, within 2x), judged the same way.
#
# Then it runs scripts/bench_multi.py: the same kind of sparse and 1 M-key
# cases at 2 x 2 and 4 x 4 (and 1 x 1) against raw ZeroMQ in the same
# topology, the cost-growth table, callgrind at 1 and 4 servers and the cost
# of CURVE encryption (EMBER_CURVE=1 against off)
# (--no-multi skips it; BENCH_PSLITE=DIR adds ps-lite side by side, see
# docs/performance.md), its output in bench_multi.txt.
#
# Writes to the output directory: bench_results.csv (the ratio table, with
# every round's values), bench_ratios.png (when python3 has matplotlib:
# scripts/deps.sh --bench installs it),
# memcpy_baseline.txt, and raw/ with every run's full output.
#
# Environment (flags win):
#   BUILD_DIR      build tree (default: build in the repository)
#   OUT_DIR        output directory (default: bench-out)
#   ROUNDS         rounds, at least 3 (default 5: fewer give no interval)
#   BENCH_SECONDS  measured seconds per case (default 3)
#   BENCH_WARMUP   warm-up seconds per case (default 1)
#   BENCH_HANDLE   kv_bench's server handle for the judged cases, empty or
#                  sum (default empty, as ps-lite's benchmark measured)
#   BENCH_MEMCPY   0 skips the memcpy baseline (default 1)
#   EMBER_SPIN_US  Ember's spin before sleeping, also given to the spinning
#                  raw baseline (default 200, Ember's own default)
#   MEMCPY_ARGS    extra flags for memcpy_baseline, e.g. --table_rows=1000000
#   EMBED_ROWS     rows of the embedding table case (default 10000000, about
#                  8 GB with its flat baseline; 0 skips the case)
#   CASE_TIMEOUT   hard limit in seconds for one run (default 60)
#   BENCH_MULTI    0 skips bench_multi.py (default 1)
#   BENCH_PSLITE   folder with pslite_api_bench built against ps-lite
#   PYTHON         python with matplotlib for the chart (default: python3,
#                  then /usr/bin/python3)
#
# Exit status: 0 when every run produced its figure, 1 otherwise (the table
# is still written, with n/a where runs failed), 2 on usage errors.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/bench_stats.sh
source "$ROOT/scripts/bench_stats.sh"
NAME=bench.sh

BUILD_DIR=${BUILD_DIR:-$ROOT/build}
OUT_DIR=${OUT_DIR:-bench-out}
ROUNDS=${ROUNDS:-5}
BENCH_SECONDS=${BENCH_SECONDS:-3}
BENCH_WARMUP=${BENCH_WARMUP:-1}
BENCH_HANDLE=${BENCH_HANDLE:-empty}
BENCH_MEMCPY=${BENCH_MEMCPY:-1}
EMBED_ROWS=${EMBED_ROWS:-10000000}
MEMCPY_ARGS=${MEMCPY_ARGS:-}
CASE_TIMEOUT=${CASE_TIMEOUT:-60}
BENCH_MULTI=${BENCH_MULTI:-1}
BENCH_PSLITE=${BENCH_PSLITE:-}
# One value for Ember's runs and the spinning baseline's.
EMBER_SPIN_US=${EMBER_SPIN_US:-200}
export EMBER_SPIN_US

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die_usage() {
  echo "$NAME: $*" >&2
  echo "usage: $NAME [--rounds N] [--out DIR] [--seconds S] [--warmup S] [--handle empty|sum] [--no-memcpy] [--no-multi]" >&2
  exit 2
}

while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --rounds) [[ $# -ge 2 ]] || die_usage "$1 needs a value"; ROUNDS=$2; shift 2 ;;
    --rounds=*) ROUNDS=${1#*=}; shift ;;
    --out) [[ $# -ge 2 ]] || die_usage "$1 needs a value"; OUT_DIR=$2; shift 2 ;;
    --out=*) OUT_DIR=${1#*=}; shift ;;
    --seconds) [[ $# -ge 2 ]] || die_usage "$1 needs a value"; BENCH_SECONDS=$2; shift 2 ;;
    --seconds=*) BENCH_SECONDS=${1#*=}; shift ;;
    --warmup) [[ $# -ge 2 ]] || die_usage "$1 needs a value"; BENCH_WARMUP=$2; shift 2 ;;
    --warmup=*) BENCH_WARMUP=${1#*=}; shift ;;
    --handle) [[ $# -ge 2 ]] || die_usage "$1 needs a value"; BENCH_HANDLE=$2; shift 2 ;;
    --handle=*) BENCH_HANDLE=${1#*=}; shift ;;
    --no-memcpy) BENCH_MEMCPY=0; shift ;;
    --no-multi) BENCH_MULTI=0; shift ;;
    *) die_usage "unknown argument '$1'" ;;
  esac
done

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
is_number() { [[ $1 =~ ^[0-9]+([.][0-9]+)?$ ]]; }
if ! is_uint "$ROUNDS" || ((ROUNDS < 3)); then
  die_usage "ROUNDS must be an integer >= 3, got '$ROUNDS'"
fi
is_number "$BENCH_SECONDS" || die_usage "the measured seconds must be a number, got '$BENCH_SECONDS'"
is_number "$BENCH_WARMUP" || die_usage "the warm-up seconds must be a number, got '$BENCH_WARMUP'"
is_uint "$EMBER_SPIN_US" || die_usage "EMBER_SPIN_US must be an integer, got '$EMBER_SPIN_US'"
if ! is_uint "$CASE_TIMEOUT" || ((CASE_TIMEOUT < 10)); then
  die_usage "CASE_TIMEOUT must be an integer >= 10, got '$CASE_TIMEOUT'"
fi
[[ $BENCH_HANDLE == sum || $BENCH_HANDLE == empty ]] || die_usage "the handle must be sum or empty, got '$BENCH_HANDLE'"

KV_BENCH=$BUILD_DIR/bench/kv_bench
ZMQ_BASELINE=$BUILD_DIR/bench/zmq_baseline
MEMCPY_BASELINE=$BUILD_DIR/bench/memcpy_baseline
EMBEDDING_BENCH=$BUILD_DIR/bench/embedding_bench
LOCAL_SH=$ROOT/scripts/local.sh
missing=0
for program in "$KV_BENCH" "$ZMQ_BASELINE" "$MEMCPY_BASELINE" "$EMBEDDING_BENCH" "$BUILD_DIR/scheduler/ember_scheduler"; do
  if [[ ! -x $program ]]; then
    echo "$NAME: $program is missing" >&2
    missing=1
  fi
done
if ((missing)); then
  echo "$NAME: build first, e.g. cmake --build $BUILD_DIR (this script builds nothing)" >&2
  exit 2
fi
command -v timeout >/dev/null 2>&1 || { echo "$NAME: needs timeout(1) (coreutils)" >&2; exit 2; }

RAW_DIR=$OUT_DIR/raw
mkdir -p -- "$RAW_DIR" || { echo "$NAME: cannot create $RAW_DIR" >&2; exit 2; }
CSV=$OUT_DIR/bench_results.csv
PNG=$OUT_DIR/bench_ratios.png
MEMCPY_TXT=$OUT_DIR/memcpy_baseline.txt

FAILED=0
declare -A VALUES  # run name -> space-separated figures, one per round

# field LINE KEY: the value of KEY=value in a RESULT line.
field() {
  local item
  for item in $1; do
    [[ $item == "$2="* ]] && { echo "${item#*=}"; return 0; }
  done
  return 1
}

# record NAME ROUND KEY LOG STATUS: keep KEY of the RESULT line in LOG.
record() {
  local name=$1 round=$2 key=$3 log=$4 status=$5 line value
  line=$(grep -o 'RESULT .*' "$log" | tail -n 1)
  value=$(field "$line" "$key")
  if [[ $status -ne 0 || -z $value ]]; then
    echo "$NAME: round $round, $name failed (exit status $status); see $log" >&2
    FAILED=1
    value=NA
  fi
  VALUES[$name]="${VALUES[$name]:-} $value"
  printf '  %-22s %-8s %s\n' "$name" "$key" "$value"
}

# zmq NAME ROUND KEY SIZE WINDOW [REPLIES [SPIN_US [SERVER_SUMS]]]
zmq() {
  local name=$1 round=$2 key=$3 size=$4 window=$5 replies=${6:-same}
  local spin=${7:-0} sums=${8:-false} log status
  log=$RAW_DIR/$name.round$round.log
  timeout -k 5 "$CASE_TIMEOUT" "$ZMQ_BASELINE" --sizes="$size" \
    --windows="$window" --directions=push --replies="$replies" \
    --spin_us="$spin" --server_sums="$sums" --seconds="$BENCH_SECONDS" \
    --warmup_seconds="$BENCH_WARMUP" >"$log" 2>&1
  status=$?
  record "$name" "$round" "$key" "$log" "$status"
}

# ember NAME ROUND KEY MODE PAYLOAD WINDOW [HANDLE]
ember() {
  local name=$1 round=$2 key=$3 mode=$4 payload=$5 window=$6
  local handle=${7:-$BENCH_HANDLE} log status
  log=$RAW_DIR/$name.round$round.log
  # local.sh stops its cluster itself a little before the hard limit.
  EMBER_BUILD_DIR=$BUILD_DIR EMBER_TIMEOUT=$((CASE_TIMEOUT - 5)) \
    timeout -k 5 "$CASE_TIMEOUT" "$LOCAL_SH" 1 1 "$KV_BENCH" \
    --mode="$mode" --payload="$payload" --window="$window" \
    --handle="$handle" --seconds="$BENCH_SECONDS" \
    --warmup_seconds="$BENCH_WARMUP" >"$log" 2>&1
  status=$?
  record "$name" "$round" "$key" "$log" "$status"
}

echo "# bench.sh: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc 2>/dev/null || echo '?') cores"
echo "# build $BUILD_DIR, $ROUNDS rounds, ${BENCH_SECONDS} s measured + ${BENCH_WARMUP} s warm-up per run, 1 server x 1 worker, handle=$BENCH_HANDLE, EMBER_SPIN_US=$EMBER_SPIN_US"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"

for ((round = 1; round <= ROUNDS; round++)); do
  echo "round $round/$ROUNDS"
  zmq zmq_4m_w8 "$round" GB_s 4194304 8
  ember ember_dense4m_push "$round" GB_s push dense_4m 8
  ember ember_dense4m_pull "$round" GB_s pull dense_4m 8
  if [[ $BENCH_HANDLE != sum ]]; then
    ember ember_dense4m_push_sum "$round" GB_s push dense_4m 8 sum
  fi
  zmq zmq_4m_w8_sum "$round" GB_s 4194304 8 same 0 true
  zmq zmq_4m_w8_spin "$round" GB_s 4194304 8 same "$EMBER_SPIN_US"
  zmq zmq_12k_w8 "$round" msgs_s 12000 8
  ember ember_sparse1000x1 "$round" req_s push sparse_1000x1 8
  zmq zmq_12k_w8_spin "$round" msgs_s 12000 8 same "$EMBER_SPIN_US"
  zmq zmq_12k_w8_separate "$round" msgs_s 12000 8 separate
  zmq zmq_4k_w1 "$round" p50_us 4096 1
  ember ember_dense4k_w1 "$round" p50_us push dense_4k 1
  zmq zmq_4k_w1_spin "$round" p50_us 4096 1 same "$EMBER_SPIN_US"
done

trim() { local -a words; read -r -a words <<<"$1"; echo "${words[*]}"; }

# per_round_ratios EMBER BASELINE: ember/baseline, round by round.
per_round_ratios() {
  local -a e b
  read -r -a e <<<"${VALUES[$1]:-}"
  read -r -a b <<<"${VALUES[$2]:-}"
  local i out=()
  for ((i = 0; i < ${#e[@]}; i++)); do
    out+=("$(awk -v x="${e[i]}" -v y="${b[i]:-NA}" 'BEGIN {
      if (x == "NA" || y == "NA" || y + 0 == 0) print "NA"; else printf "%.3f", x / y }')")
  done
  echo "${out[*]}"
}

echo "case,metric,ember_median,baseline,baseline_median,ratio_of_medians,ratio,target,met,ember_values,baseline_values,per_round_ratios,best_ratio,interval_low,interval_high,interval_coverage,settled" >"$CSV"
# table_line CASE EMBER BASELINE RATIO_OF_MEDIANS RATIO RANGE BEST TARGET MET
#            INTERVAL SETTLED
table_line() { printf '%-44s %10s %10s %8s %6s %10s %9s %7s %4s %15s %7s\n' "$@"; }

echo
echo "Ember / raw ZeroMQ, 1 server x 1 worker, medians of $ROUNDS rounds"
echo "(ratio: the median of the per-round ratios, each round's Ember run against"
echo "the baseline run just before it, which is what 'met' judges; the ratio of"
echo "the medians, the range of the per-round ratios and the ratio of the best"
echo "figures, best/best, are shown beside it). 'interval' is a distribution-free"
echo "confidence interval for the median per-round ratio (order statistics, at"
echo "least 90%; n/a under 5 rounds) and 'settled' judges the target by it:"
echo "met, missed, or open when the interval straddles the target."
table_line case ember baseline 'med/med' ratio range best/best target met \
  interval settled
# emit_row CASE METRIC EMBER BASELINE_DESCRIPTION BASELINE RATIO PER_ROUND BEST
#          OP TARGET EMBER_VALUES BASELINE_VALUES: judges RATIO (and the
# interval of the space-separated PER_ROUND ratios) against OP TARGET, prints
# the table line and appends the CSV line.
emit_row() {
  local name=$1 metric=$2 em=$3 baseline_name=$4 bm=$5 ratio=$6 per_round=$7
  local best_ratio=$8 op=$9 target=${10} ember_values=${11} baseline_values=${12}
  local met lo hi cov verdict ci
  # The CSV is comma-separated, unquoted.
  if [[ $name == *,* ]]; then
    echo "$NAME: internal error: case name '$name' has a comma" >&2
    exit 2
  fi
  met=$(meets "$ratio" "$op" "$target")
  # shellcheck disable=SC2086  # the ratios are space-separated on purpose
  read -r lo hi cov <<<"$(interval $per_round)"
  verdict=$(settled "$lo" "$hi" "$op" "$target")
  ci=n/a
  [[ $lo == n/a ]] ||
    ci=$(awk -v l="$lo" -v h="$hi" -v c="$cov" 'BEGIN {
      printf "%.2f-%.2f %.0f%%", l, h, c * 100 }')
  # shellcheck disable=SC2086
  table_line "$name ($metric)" "$em" "$bm" "$(quotient "$em" "$bm")" "$ratio" \
    "$(span $per_round)" "$best_ratio" "${op:--}$target" "$met" "$ci" "$verdict"
  printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$name" \
    "$metric" "$em" "$baseline_name" "$bm" "$(quotient "$em" "$bm")" "$ratio" \
    "$op$target" "$met" "$(trim "$ember_values")" "$(trim "$baseline_values")" \
    "$(trim "$per_round")" "$best_ratio" "$lo" "$hi" "$cov" "$verdict" >>"$CSV"
}

# row CASE METRIC EMBER_RUN BASELINE_DESCRIPTION BASELINE_RUN OP TARGET: a
# case of the rounds above.
row() {
  local name=$1 metric=$2 ember_run=$3 baseline_name=$4 baseline_run=$5 op=$6 target=$7
  local em bm per_round ratio higher eb bb
  # shellcheck disable=SC2086  # the figures are space-separated on purpose
  em=$(median ${VALUES[$ember_run]:-})
  # shellcheck disable=SC2086
  bm=$(median ${VALUES[$baseline_run]:-})
  per_round=$(per_round_ratios "$ember_run" "$baseline_run")
  higher=1
  # Latency: lower is better, with or without a target.
  [[ $op == "<=" || $metric == p50_us ]] && higher=0
  # shellcheck disable=SC2086
  eb=$(best "$higher" ${VALUES[$ember_run]:-})
  # shellcheck disable=SC2086
  bb=$(best "$higher" ${VALUES[$baseline_run]:-})
  # shellcheck disable=SC2086
  ratio=$(median $per_round)
  [[ $ratio == n/a ]] || ratio=$(awk -v r="$ratio" 'BEGIN { printf "%.3f", r }')
  emit_row "$name" "$metric" "$em" "$baseline_name" "$bm" "$ratio" \
    "$per_round" "$(quotient "$eb" "$bb")" "$op" "$target" \
    "${VALUES[$ember_run]:-}" "${VALUES[$baseline_run]:-}"
}
row "dense 4 MB push w8" GB_s ember_dense4m_push "zmq 4194304 B w8 GB_s" zmq_4m_w8 ">=" 1.0
row "dense 4 MB pull w8" GB_s ember_dense4m_pull "zmq 4194304 B w8 GB_s" zmq_4m_w8 ">=" 0.9
row "sparse 1000x1 push w8" req_s ember_sparse1000x1 "zmq 12000 B w8 msgs_s" zmq_12k_w8 ">=" 0.55
row "4 KB push w1 round trip" p50_us ember_dense4k_w1 "zmq 4096 B w1 p50_us" zmq_4k_w1 "<=" 1.3
echo "no target: Ember / raw ZeroMQ spinning the same way before it sleeps"
echo "(zmq_baseline --spin_us=$EMBER_SPIN_US; the 'ember' column is Ember's same runs):"
row "dense 4 MB push w8 same-wait" GB_s ember_dense4m_push "zmq 4194304 B w8 spin GB_s" zmq_4m_w8_spin "" ""
row "dense 4 MB pull w8 same-wait" GB_s ember_dense4m_pull "zmq 4194304 B w8 spin GB_s" zmq_4m_w8_spin "" ""
row "sparse 1000x1 push w8 same-wait" req_s ember_sparse1000x1 "zmq 12000 B w8 spin msgs_s" zmq_12k_w8_spin "" ""
row "4 KB push w1 round trip same-wait" p50_us ember_dense4k_w1 "zmq 4096 B w1 spin p50_us" zmq_4k_w1_spin "" ""
SUM_PUSH=ember_dense4m_push
if [[ $BENCH_HANDLE != sum ]]; then
  SUM_PUSH=ember_dense4m_push_sum
  echo "no target: the 4 MB push with the summing handle (Ember's server adds every"
  echo "pushed value into its store) / raw ZeroMQ, whose server does not:"
  row "dense 4 MB push w8 summing" GB_s "$SUM_PUSH" "zmq 4194304 B w8 GB_s" zmq_4m_w8 "" ""
fi
echo "no target: Ember with the summing handle / raw ZeroMQ whose server adds"
echo "each pushed 4 MB into a store the same way (zmq_baseline --server_sums):"
row "dense 4 MB push w8 same-work" GB_s "$SUM_PUSH" "zmq 4194304 B w8 sums GB_s" zmq_4m_w8_sum "" ""
echo "and what that adding costs raw ZeroMQ (the 'ember' column is raw ZeroMQ adding):"
row "raw 4 MB push w8 adding" GB_s zmq_4m_w8_sum "zmq 4194304 B w8 GB_s" zmq_4m_w8 "" ""
echo "topology, no target: raw ZeroMQ answered over a second connection / over"
echo "the request's connection (the 'ember' column is the former):"
row "raw 12 KB w8 on 2 connections" msgs_s zmq_12k_w8_separate "zmq 12000 B w8 msgs_s" zmq_12k_w8 "" ""
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
echo "wrote $CSV"

if ((BENCH_MEMCPY)); then
  echo
  echo "memcpy / gather / scatter-add baseline (once):"
  # shellcheck disable=SC2086  # MEMCPY_ARGS holds several flags
  timeout -k 5 "$((CASE_TIMEOUT * 3))" "$MEMCPY_BASELINE" $MEMCPY_ARGS \
    >"$RAW_DIR/memcpy_baseline.log" 2>&1
  status=$?
  grep -o 'RESULT .*' "$RAW_DIR/memcpy_baseline.log" >"$MEMCPY_TXT"
  sed 's/^/  /' "$MEMCPY_TXT"
  if ((status != 0)); then
    echo "$NAME: memcpy_baseline failed (exit status $status); see $RAW_DIR/memcpy_baseline.log" >&2
    FAILED=1
  fi
  echo "wrote $MEMCPY_TXT"
fi

# The embedding target: server-side pull and push + update of an embedding
# table (dim 64, Adagrad) within 2x of a plain gather / scatter-add over a
# flat array of the same rows, measured in rounds within one process
# (embedding_bench), judged like the rows above.
if ((EMBED_ROWS > 0)); then
  echo
  echo "embedding table (dim 64, $EMBED_ROWS rows, Adagrad, $ROUNDS rounds) / plain"
  echo "gather or scatter-add over a flat array of the same rows (embedding_bench):"
  table_line case ember baseline 'med/med' ratio range best/best target met \
    interval settled
  timeout -k 5 "$((CASE_TIMEOUT * 5))" "$EMBEDDING_BENCH" --rows="$EMBED_ROWS" \
    --dims=64 --optimizers=adagrad --memory_rows=0 --rounds="$ROUNDS" \
    >"$RAW_DIR/embedding_bench.log" 2>&1
  status=$?
  embed_lines=$(grep -o 'RESULT op=.*' "$RAW_DIR/embedding_bench.log")
  if ((status != 0)) || [[ -z $embed_lines ]]; then
    echo "$NAME: embedding_bench failed (exit status $status); see $RAW_DIR/embedding_bench.log" >&2
    FAILED=1
  fi
  while read -r line; do
    [[ -n $line ]] || continue
    op=$(field "$line" op)
    emit_row "embedding $op dim 64 adagrad" rows_s "$(field "$line" rows_s)" \
      "flat-array $(field "$line" baseline) rows_s" \
      "$(field "$line" baseline_rows_s)" "$(field "$line" ratio)" \
      "$(field "$line" ratios | tr ',' ' ')" n/a ">=" 0.5 "" ""
  done <<<"$embed_lines"
  echo "added to $CSV"
fi

# The first python with matplotlib: $PYTHON, python3 on PATH, the system's
# (a python3 on PATH from a version manager may lack Debian's modules).
CHART_PYTHON=
for candidate in ${PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 &&
    "$candidate" -c 'import matplotlib' >/dev/null 2>&1; then
    CHART_PYTHON=$candidate
    break
  fi
done
if [[ -n $CHART_PYTHON ]]; then
  if CSV="$CSV" PNG="$PNG" ROUNDS="$ROUNDS" "$CHART_PYTHON" - <<'EOF'
import csv
import os
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

with open(os.environ["CSV"], newline="") as f:
    rows = list(csv.DictReader(f))
VERDICT_COLORS = {"met": "tab:green", "missed": "tab:red", "open": "tab:orange"}
labels, ratios, targets, colors, errors = [], [], [], [], [[], []]
rows = [r for r in rows if r["target"][:2] in (">=", "<=")]
for r in rows:
    better = "lower is better" if r["target"].startswith("<=") else "higher is better"
    labels.append(textwrap.fill(r["case"], 20) + f'\n{r["metric"]}\n{better}')
    ratio = float(r["ratio"]) if r["ratio"] != "n/a" else 0.0
    ratios.append(ratio)
    # The confidence interval for the median, as an error bar (none under 5
    # rounds).
    if r["interval_low"] != "n/a" and r["ratio"] != "n/a":
        errors[0].append(max(0.0, ratio - float(r["interval_low"])))
        errors[1].append(max(0.0, float(r["interval_high"]) - ratio))
    else:
        errors[0].append(0.0)
        errors[1].append(0.0)
    targets.append(float(r["target"][2:]))
    # Coloured by the verdict of the interval; by the median where there is
    # none (under 5 rounds).
    verdict = r["settled"] if r["settled"] in ("met", "missed", "open") else \
        {"yes": "met", "no": "missed"}.get(r["met"], "n/a")
    colors.append(VERDICT_COLORS.get(verdict, "tab:gray"))
fig, ax = plt.subplots(figsize=(max(9, 1.9 * len(rows)), 5))
x = range(len(rows))
ax.bar(x, ratios, color=colors)
ax.errorbar(x, ratios, yerr=errors, fmt="none", ecolor="dimgray", capsize=5,
            label="confidence interval for the median (>= 90%)")
ax.scatter(x, targets, marker="_", s=900, color="tab:blue", linewidths=3,
           zorder=3, label="target")
# The value beside the bar's top, clear of the target mark and the error bar.
for i, ratio in enumerate(ratios):
    ax.annotate(f"{ratio:.2f}", (i + 0.08, ratio), ha="left", va="center",
                fontsize=9, bbox=dict(boxstyle="round,pad=0.15", fc="white",
                                      ec="none", alpha=0.8))
for verdict, color in VERDICT_COLORS.items():
    ax.bar([0], [0], color=color, label=f"settled: {verdict}")
ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
ax.set_xticks(list(x))
ax.set_xticklabels(labels, fontsize=8)
ax.set_ylabel("Ember / baseline")
ax.set_title("Ember against raw ZeroMQ (1 server x 1 worker) and a plain gather / "
             f"scatter-add (embedding), medians of {os.environ['ROUNDS']} rounds",
             fontsize=10)
ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, markerscale=0.4)
fig.tight_layout()
fig.savefig(os.environ["PNG"], dpi=120)
EOF
  then
    echo "wrote $PNG"
  else
    echo "$NAME: the chart could not be drawn; the CSV is complete" >&2
  fi
else
  echo "note: python3 with matplotlib not found; chart skipped (the CSV has the same"
  echo "figures; scripts/deps.sh --bench installs it)"
fi

if ((BENCH_MULTI)); then
  echo
  echo "== more than one server (scripts/bench_multi.py)"
  multi_args=(--build "$BUILD_DIR" --rounds "$ROUNDS" --seconds "$BENCH_SECONDS")
  [[ -n $BENCH_PSLITE ]] && multi_args+=(--pslite "$BENCH_PSLITE")
  if ! (set -o pipefail; /usr/bin/python3 "$ROOT/scripts/bench_multi.py" \
    "${multi_args[@]}" | tee "$OUT_DIR/bench_multi.txt"); then
    echo "$NAME: bench_multi.py failed (its output is in $OUT_DIR/bench_multi.txt)" >&2
    FAILED=1
  fi
fi

if ((FAILED)); then
  echo "$NAME: some runs failed; their figures are n/a (raw output in $RAW_DIR)" >&2
  exit 1
fi
exit 0
