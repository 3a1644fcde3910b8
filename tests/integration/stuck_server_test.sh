#!/usr/bin/env bash
# A server of a local.sh cluster stops answering requests but stays alive
# (heartbeats go on): a hung handle. Under EMBER_REQUEST_TIMEOUT_MS the
# workers' requests to it fail in time, so local.sh must end the run with a
# non-zero status within 15 s of the hang, and the output must name the
# setting and the server (server 0: the soak's keys all lie in its range).
# Without a deadline the run would only log that it waits.
# usage: stuck_server_test.sh SOAK_PROGRAM LOCAL_SH
set -u
soak=$1 localsh=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s%3N)
EMBER_TIMEOUT=60 EMBER_REPLICAS=0 EMBER_REQUEST_TIMEOUT_MS=2000 \
  "$localsh" 2 2 "$soak" --seconds=60 --stuck_rank=0 --crash_after_ms=1500 \
  >"$out" 2>&1
status=$?
elapsed=$(($(date +%s%3N) - start - 1500))
fail() {
  cat "$out"
  echo "stuck_server_test: FAIL: $1"
  exit 1
}
((status != 0)) || fail "the run succeeded although server 0 stopped answering"
grep -q "no longer answering" "$out" || fail "server 0 never got stuck"
line=$(grep -m1 "(EMBER_REQUEST_TIMEOUT_MS) from server 0 " "$out") ||
  fail "no worker names the deadline and server 0"
grep -Eq "^local\.sh: worker [01] \(pid [0-9]+\) exited with status" "$out" ||
  fail "local.sh does not name a worker as the node that ended"
((elapsed <= 15000)) || fail "the run took ${elapsed} ms to end"
echo "$line"
echo "stuck_server_test: PASS: exit status $status, ended ${elapsed} ms after the hang"
