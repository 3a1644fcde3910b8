#!/usr/bin/env bash
# bsp is bitwise reproducible: the same training, run three times with
# different timing (random pauses on every worker) and with 1 and 3 servers,
# must end with identical parameters, bit for bit.
#
# usage: bsp_determinism_test.sh LOCAL_SH SYNC_MODES
set -u
local_sh=$1 program=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/ember-bsp.XXXXXX")
trap 'rm -rf "$dir"' EXIT

run() {  # name servers jitter_seed
  EMBER_CONSISTENCY=bsp "$local_sh" "$2" 3 "$program" --iterations=60 \
    --features=5000 --batch=50 --jitter_seed="$3" --dump="$dir/$1.hex" \
    >"$dir/$1.log" 2>&1
}

fail() {
  echo "bsp_determinism_test: FAIL: $*"
  for f in "$dir"/*.log; do
    echo "----- $(basename "$f")"
    cat "$f"
  done
  exit 1
}

run a 1 1 || fail "run a (1 server, jitter 1) failed"
run b 1 2 || fail "run b (1 server, jitter 2) failed"
run c 3 3 || fail "run c (3 servers, jitter 3) failed"
n=$(wc -l <"$dir/a.hex")
[ "$n" -eq 5000 ] || fail "run a dumped $n weights, expected 5000"
# A model that did not move would match trivially.
nonzero=$(grep -vc '^00000000$' "$dir/a.hex")
[ "$nonzero" -gt 1000 ] || fail "only $nonzero weights moved"
cmp -s "$dir/a.hex" "$dir/b.hex" ||
  fail "1 server: runs with different timing differ ($(cmp "$dir/a.hex" "$dir/b.hex"))"
cmp -s "$dir/a.hex" "$dir/c.hex" ||
  fail "1 and 3 servers differ ($(cmp "$dir/a.hex" "$dir/c.hex"))"
grep -h "RESULT final" "$dir"/*.log
echo "bsp_determinism_test: OK: $nonzero of $n weights trained, identical bits in all three runs"
