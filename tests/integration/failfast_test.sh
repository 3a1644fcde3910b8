#!/usr/bin/env bash
# A node of a local.sh cluster kills itself with SIGKILL mid-run: local.sh
# must end the whole run with a non-zero status within 15 s, and its output
# must name the dead node.
# usage: failfast_test.sh server|worker SOAK_PROGRAM LOCAL_SH
set -u
role=$1 soak=$2 localsh=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s%3N)
EMBER_TIMEOUT=60 "$localsh" 2 2 "$soak" --seconds=60 --crash_role="$role" \
  --crash_rank=1 --crash_after_ms=1500 >"$out" 2>&1
status=$?
elapsed=$(($(date +%s%3N) - start - 1500))
if ((status == 0)); then
  cat "$out"
  echo "failfast_test: FAIL: the run succeeded although $role 1 died"
  exit 1
fi
# The launcher's own line about the dead node (every line a node prints is
# prefixed "[$role 1]", so a bare "$role 1" would match its ordinary output).
if ! grep -Eq "^local\.sh: $role 1 \(pid [0-9]+\) exited with status" "$out"; then
  cat "$out"
  echo "failfast_test: FAIL: local.sh does not name $role 1 as the node that ended"
  exit 1
fi
if ((elapsed > 15000)); then
  cat "$out"
  echo "failfast_test: FAIL: the run took ${elapsed} ms to end"
  exit 1
fi
grep -E "exited with status|died|dead" "$out" | head -5
echo "failfast_test: PASS: exit status $status, ended ${elapsed} ms after the crash"
