#!/usr/bin/env bash
# A cluster that cannot form (a server and the worker never come) must fail
# after EMBER_START_TIMEOUT, on the scheduler and on the node that did come,
# with a message naming what is missing.
# usage: start_timeout_test.sh PROGRAM SCHEDULER
set -u
program=$1 scheduler=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/ember-start.XXXXXX")
spid=
trap '[[ -n $spid ]] && kill -9 $spid 2>/dev/null; rm -rf "$dir"' EXIT
export EMBER_START_TIMEOUT=2 DMLC_NUM_SERVER=2 DMLC_NUM_WORKER=1
export DMLC_PS_ROOT_URI=127.0.0.1
DMLC_ROLE=scheduler DMLC_PS_ROOT_PORT=0 EMBER_PORT_FILE=$dir/port \
  timeout 30 "$scheduler" >"$dir/scheduler.log" 2>&1 &
spid=$!
for ((i = 0; i < 100; i++)); do
  [[ -s $dir/port ]] && break
  sleep 0.1
done
DMLC_ROLE=server DMLC_PS_ROOT_PORT=$(<"$dir/port") timeout 30 "$program" \
  >"$dir/server.log" 2>&1
server_status=$?
wait "$spid"
scheduler_status=$?
spid=
want="missing 1 server(s) and 1 worker(s)"
ok=1
((server_status != 0 && server_status != 124)) || ok=0
((scheduler_status != 0 && scheduler_status != 124)) || ok=0
grep -q "$want" "$dir/scheduler.log" || ok=0
grep -q "$want" "$dir/server.log" || ok=0
if ((!ok)); then
  echo "start_timeout_test: FAIL (server $server_status, scheduler $scheduler_status)"
  for f in "$dir"/*.log; do echo "----- $f"; cat "$f"; done
  exit 1
fi
grep -h "$want" "$dir"/*.log
echo "start_timeout_test: PASS"
