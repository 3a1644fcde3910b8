#!/usr/bin/env bash
# The programs behind the ceilings of CURVE's and of replication's cost
# (docs/performance.md, docs/replication.md) still run and print what
# scripts/bench_multi.py reads: zmq_topology with --curve (and with two I/O
# threads) moves requests and says so, refuses --io_threads=0;
# zmq_topology --forward=ack, =chain, =batch, =coalesce and =async (with and
# without keys in the copies, and requests without keys) forward every push
# to the next server (it exits non-zero unless every copy forwarded was
# received, and acknowledged under ack, batch and coalesce; under async no
# more than were forwarded), refuses to forward with one server or to
# batch frames it splits; with --requests it sends that many and names its
# clients' processes; cipher_bench
# prints a rate for every cipher. No figure is judged.
# usage: ceiling_bench_smoke_test.sh ZMQ_TOPOLOGY [CIPHER_BENCH]
set -u
zmq_topology=$1 cipher_bench=${2:-}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failed=0

fail() {
  cat "$out"
  echo "ceiling_bench_smoke_test: FAIL: $*"
  failed=1
}

for extra in "--curve" "--curve --io_threads=2"; do
  # shellcheck disable=SC2086
  if ! timeout -k 5 60 "$zmq_topology" --servers=1 --clients=1 --keys=1000 \
    --window=2 --seconds=0.2 --warmup_seconds=0.05 --transport=ipc \
    $extra >"$out" 2>&1; then
    fail "zmq_topology $extra exited with an error"
    continue
  fi
  threads=1
  [[ $extra == *io_threads=2* ]] && threads=2
  if ! grep -qE "^RESULT baseline=zmq_topology .* req_s=[1-9][0-9.]* .*curve=1 io_threads=$threads( |$)" "$out"; then
    fail "zmq_topology $extra: no RESULT line with req_s > 0, curve=1 and io_threads=$threads"
  else
    echo "ceiling_bench_smoke_test: ok: zmq_topology $extra"
  fi
done

if timeout -k 5 30 "$zmq_topology" --io_threads=0 >"$out" 2>&1; then
  fail "zmq_topology accepted --io_threads=0"
else
  echo "ceiling_bench_smoke_test: ok: --io_threads=0 refused"
fi

for variant in ack chain batch "batch --copy_keys=false" \
  "coalesce --copy_keys=false" "async --copy_keys=false" \
  "ack --request_keys=false"; do
  set -- $variant
  forward=$1
  shift
  if ! timeout -k 5 60 "$zmq_topology" --servers=2 --clients=2 --keys=1000 \
    --window=4 --seconds=0.2 --warmup_seconds=0.05 --transport=ipc \
    --forward=$forward "$@" >"$out" 2>&1; then
    fail "zmq_topology --forward=$variant exited with an error"
  elif ! grep -qE "^RESULT baseline=zmq_topology .* req_s=[1-9][0-9.]* .* forward=$forward copies=[1-9][0-9]* copy_messages=[1-9][0-9]* " "$out"; then
    fail "zmq_topology --forward=$variant: no RESULT line with req_s > 0 and copies > 0"
  else
    line=$(grep "^RESULT baseline=zmq_topology" "$out")
    copies=$(echo "$line" | sed -E 's/.* copies=([0-9]+) .*/\1/')
    messages=$(echo "$line" | sed -E 's/.* copy_messages=([0-9]+) .*/\1/')
    # One message a copy, except that batch and coalesce send several in
    # one.
    batched=0
    [ "$forward" = batch ] || [ "$forward" = coalesce ] && batched=1
    if ((batched)) && [ "$messages" -gt "$copies" ]; then
      fail "zmq_topology --forward=$variant: $messages messages for $copies copies"
    elif ((!batched)) && [ "$messages" -ne "$copies" ]; then
      fail "zmq_topology --forward=$variant: $messages messages for $copies copies"
    else
      echo "ceiling_bench_smoke_test: ok: zmq_topology --forward=$variant"
    fi
  fi
done

if timeout -k 5 30 "$zmq_topology" --forward=batch --max_frame=1000 >"$out" 2>&1; then
  fail "zmq_topology accepted --forward=batch with --max_frame"
else
  echo "ceiling_bench_smoke_test: ok: --forward=batch with --max_frame refused"
fi

if timeout -k 5 30 "$zmq_topology" --servers=1 --forward=ack >"$out" 2>&1; then
  fail "zmq_topology accepted --forward=ack with one server"
else
  echo "ceiling_bench_smoke_test: ok: --forward with one server refused"
fi

# --requests (callgrind's fixed amount of work): ends by itself, names
# every client's process; fewer requests than the window are refused.
if ! timeout -k 5 60 "$zmq_topology" --servers=4 --clients=2 --keys=1000 \
  --window=8 --requests=40 --transport=ipc >"$out" 2>&1; then
  fail "zmq_topology --requests=40 exited with an error"
elif ! grep -qE "^RESULT baseline=zmq_topology .* req_s=[1-9][0-9.]* .* client_pids=[0-9]+,[0-9]+$" "$out"; then
  fail "zmq_topology --requests=40: no RESULT line with req_s > 0 and two client_pids"
else
  echo "ceiling_bench_smoke_test: ok: zmq_topology --requests"
fi
if timeout -k 5 30 "$zmq_topology" --window=8 --requests=3 >"$out" 2>&1; then
  fail "zmq_topology accepted --requests below --window"
else
  echo "ceiling_bench_smoke_test: ok: --requests below --window refused"
fi

if [[ -n $cipher_bench ]]; then
  if ! timeout -k 5 60 "$cipher_bench" --bytes=65536 --rounds=1 \
    --seconds=0.02 >"$out" 2>&1; then
    fail "cipher_bench exited with an error"
  else
    for cipher in xsalsa20poly1305 chacha20poly1305 xchacha20poly1305 memcpy; do
      if ! grep -qE "^RESULT bench=cipher cipher=$cipher bytes=65536 seal_gb_s=[0-9.]+ open_gb_s=[0-9.]+$" "$out"; then
        fail "cipher_bench: no RESULT line for $cipher"
      fi
    done
    if ! grep -qE "cipher=aes256gcm |aes256gcm: not available" "$out"; then
      fail "cipher_bench: says nothing of aes256gcm"
    fi
    ((failed)) || echo "ceiling_bench_smoke_test: ok: cipher_bench"
  fi
fi
exit "$failed"
