#!/usr/bin/env bash
# Kills one node of a running cluster with SIGKILL and checks that Ember
# itself (not the launcher) ends the run: every surviving process must exit
# non-zero within 15 s, and the logs must name the dead node.
#
# The cluster is launched by hand here, not with local.sh, because local.sh
# would stop the survivors itself as soon as the victim dies.
#
# usage: kill_test.sh server|worker SOAK_PROGRAM SCHEDULER
set -u
victim_role=$1 soak=$2 scheduler=$3
limit=15
dir=$(mktemp -d "${TMPDIR:-/tmp}/ember-kill.XXXXXX")
pids=() names=()

cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT

dump_logs() {
  for f in "$dir"/*.log; do
    echo "----- $(basename "$f")"
    cat "$f"
  done
}

fail() {
  echo "kill_test: FAIL: $*"
  dump_logs
  exit 1
}

export DMLC_NUM_SERVER=2 DMLC_NUM_WORKER=2 DMLC_PS_ROOT_URI=127.0.0.1
export EMBER_HEARTBEAT_INTERVAL_MS=500 EMBER_HEARTBEAT_TIMEOUT_MS=3000
# Without replicas: a dead server ends the run (replication.md covers the rest).
export EMBER_REPLICAS=0

DMLC_ROLE=scheduler DMLC_PS_ROOT_PORT=0 EMBER_PORT_FILE=$dir/port \
  "$scheduler" >"$dir/scheduler.log" 2>&1 &
pids+=($!) names+=(scheduler)
for ((i = 0; i < 100; i++)); do
  [[ -s $dir/port ]] && break
  sleep 0.1
done
[[ -s $dir/port ]] || fail "the scheduler did not publish its port"
export DMLC_PS_ROOT_PORT=$(<"$dir/port")

for role in server worker; do
  for i in 0 1; do
    DMLC_ROLE=$role EMBER_RANK_HINT=$i "$soak" --seconds=60 \
      >"$dir/$role-$i.log" 2>&1 &
    pids+=($!) names+=("$role-$i")
  done
done

# Wait (bounded) until both workers make progress: the cluster is mid-run.
for ((i = 0; i < 300; i++)); do
  if grep -q "progress" "$dir/worker-0.log" 2>/dev/null &&
    grep -q "progress" "$dir/worker-1.log" 2>/dev/null; then
    break
  fi
  sleep 0.1
done
grep -q "progress" "$dir/worker-1.log" || fail "the cluster did not start"

victim=-1
for ((k = 0; k < ${#names[@]}; k++)); do
  [[ ${names[k]} == "$victim_role-1" ]] && victim=$k
done
kill -9 "${pids[victim]}"
killed_at=$(date +%s%3N)
echo "kill_test: killed $victim_role 1 (pid ${pids[victim]})"

# Every survivor must exit by itself, non-zero, within the limit.
for ((k = 0; k < ${#names[@]}; k++)); do
  ((k == victim)) && continue
  while kill -0 "${pids[k]}" 2>/dev/null; do
    if (($(date +%s%3N) - killed_at > limit * 1000)); then
      fail "${names[k]} still runs $limit s after the kill"
    fi
    sleep 0.1
  done
  wait "${pids[k]}"
  status=$?
  ((status != 0)) || fail "${names[k]} exited 0 after $victim_role 1 died"
done
elapsed=$(($(date +%s%3N) - killed_at))
grep -h "$victim_role 1 (id" "$dir"/*.log | grep -q -E "dead|died" ||
  fail "no log names $victim_role 1 as dead"
echo "kill_test: every survivor exited non-zero ${elapsed} ms after the kill;"
grep -h -m1 -E "$victim_role 1 \(id [0-9]+.*(dead|died)" "$dir"/*.log | head -3
echo "kill_test: PASS"
