#!/usr/bin/env bash
# The benchmark programs still run and still print what scripts/bench.py
# reads: zmq_baseline in both answer topologies, spinning and with its server
# adding the payloads, kv_bench through local.sh (sparse and dense payloads,
# both server handles, a 2 x 2 cluster), and embedding_bench on small tables.
# Runs are a fraction of a second each and no figure is judged: this checks
# that the programs work, not how fast they are.
# usage: bench_smoke_test.sh ZMQ_BASELINE KV_BENCH LOCAL_SH EMBEDDING_BENCH
set -u
zmq_baseline=$1 kv_bench=$2 localsh=$3 embedding_bench=$4
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failed=0

# check WHAT EXPECTED_RESULT_LINES FIELD... : the last run printed that many
# RESULT lines, each with every FIELD (a key: KEY=anything; or KEY=VALUE).
check() {
  local what=$1 want=$2 got field pattern
  shift 2
  got=$(grep -c '^RESULT ' "$out")
  if ((got != want)); then
    cat "$out"
    echo "bench_smoke_test: FAIL: $what printed $got RESULT lines, expected $want"
    failed=1
    return
  fi
  for field in "$@"; do
    pattern=$field
    [[ $field == *=* ]] || pattern="$field=[^ ]*"
    if grep '^RESULT ' "$out" | grep -qvE " $pattern( |$)"; then
      cat "$out"
      echo "bench_smoke_test: FAIL: $what: a RESULT line lacks $field"
      failed=1
      return
    fi
  done
  echo "bench_smoke_test: ok: $what"
}

# The spinning baseline, and the one whose server adds the payloads, answer
# over the request's connection only, as bench.py runs them.
for args in "same 0 0" "separate 0 0" "same 200 0" "same 0 1"; do
  read -r replies spin sums <<<"$args"
  timeout -k 5 60 "$zmq_baseline" --sizes=4096,12000 --windows=1,8 \
    --directions=push,pull --replies="$replies" --spin_us="$spin" \
    --server_sums="$sums" --seconds=0.2 --warmup_seconds=0.05 >"$out" 2>&1
  status=$?
  what="zmq_baseline --replies=$replies --spin_us=$spin --server_sums=$sums"
  if ((status != 0)); then
    cat "$out"
    echo "bench_smoke_test: FAIL: $what exited with $status"
    failed=1
  else
    check "$what" 8 GB_s msgs_s p50_us p99_us "replies=$replies" \
      "spin_us=$spin" "server_sums=$sums"
  fi
done

if timeout -k 5 30 "$zmq_baseline" --replies=both >"$out" 2>&1; then
  echo "bench_smoke_test: FAIL: zmq_baseline accepted --replies=both"
  failed=1
fi
if timeout -k 5 30 "$zmq_baseline" --spin_us=-1 >"$out" 2>&1; then
  echo "bench_smoke_test: FAIL: zmq_baseline accepted --spin_us=-1"
  failed=1
fi

# kv NAME SERVERS WORKERS KV_BENCH_FLAGS...
kv() {
  local name=$1 servers=$2 workers=$3 status
  shift 3
  EMBER_TIMEOUT=60 timeout -k 5 70 "$localsh" "$servers" "$workers" \
    "$kv_bench" --requests=200 "$@" >"$out" 2>&1
  status=$?
  if ((status != 0)); then
    cat "$out"
    echo "bench_smoke_test: FAIL: kv_bench $name exited with $status"
    failed=1
    return
  fi
  # local.sh prefixes each line with the process's role and rank.
  sed -i 's/^.*\(RESULT \)/\1/' "$out"
  check "kv_bench $name" 1 mode payload "servers=$servers" "workers=$workers" \
    window handle GB_s req_s p50_us p99_us
}

kv "sparse push, summing handle" 1 1 --mode=push --payload=sparse_1000x8 \
  --window=8 --handle=sum
kv "dense pull, empty handle" 1 1 --mode=pull --payload=dense_4k --window=1 \
  --handle=empty
kv "dense push-pull, 2 x 2" 2 2 --mode=pushpull --payload=dense_256k \
  --window=8 --handle=sum

# Two small tables, 3 rounds of 4 batches of each side in turns of 2: the
# memory line, a table line per table, and a pull and a push line per table
# with three per-round ratios each.
timeout -k 5 60 "$embedding_bench" --rows=5000 --dims=8 \
  --optimizers=sgd,adagrad --memory_rows=20000 --rounds=3 --iterations=4 \
  --slice_batches=2 --batch=100 --stream_keys=2000 >"$out" 2>&1
status=$?
if ((status != 0)); then
  cat "$out"
  echo "bench_smoke_test: FAIL: embedding_bench exited with $status"
  failed=1
elif (($(grep -c '^RESULT memory ' "$out") != 1 ||
  $(grep -c '^RESULT table ' "$out") != 2)); then
  cat "$out"
  echo "bench_smoke_test: FAIL: embedding_bench: expected 1 memory and 2 table lines"
  failed=1
else
  sed -i '/^RESULT \(memory\|table\) /d' "$out"
  check "embedding_bench" 4 op dim=8 optimizer rows=5000 rows_s baseline \
    baseline_rows_s ratio ratio_min ratio_max rounds=3 \
    'ratios=[0-9.]+,[0-9.]+,[0-9.]+'
fi
for bad in --rounds=0 --slice_batches=0; do
  if timeout -k 5 30 "$embedding_bench" --rows=100 "$bad" >"$out" 2>&1; then
    echo "bench_smoke_test: FAIL: embedding_bench accepted $bad"
    failed=1
  fi
done

if ((failed)); then exit 1; fi
echo "bench_smoke_test: PASS"
