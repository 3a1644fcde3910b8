#!/usr/bin/env bash
# Deterministic cost figures: instructions per request on the worker and on
# the server (a 1000-key sparse push and a 4 MB push, window 8, and a 4 KB
# push one at a time), counted by valgrind's callgrind (instruction counts do not
# depend on the machine's load, unlike times). Each case runs kv_bench at
# 1 server x 1 worker twice, with N1 and N2 requests; the difference divided
# by N2 - N1 is the cost of one request, without start-up and shutdown.
# Kernel work (socket copies) is not counted: callgrind sees user space only.
# Waiting threads do not spin (EMBER_SPIN_US=0): a spin's polls depend on
# timing, and would make the counts vary from run to run.
#
# Each case runs with kv_bench's summing server handle (the server adds every
# pushed value into its store) and with its empty one (the server does
# nothing with the values): the second is Ember's own cost on the server.
#
# usage: scripts/callgrind.sh [BUILD_DIR]      (default: build)
# env:   N1 (default 50), N2 (default 150), HANDLES (default "sum empty")
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
n1=${N1:-50}
n2=${N2:-150}
handles=${HANDLES:-sum empty}
for handle in $handles; do
  [[ $handle == sum || $handle == empty ]] ||
    { echo "callgrind.sh: HANDLES holds sum and/or empty, not '$handle'" >&2; exit 2; }
done
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind is not installed"; exit 2; }
out=$(mktemp -d "${TMPDIR:-/tmp}/ember-callgrind.XXXXXX")
trap 'rm -rf "$out"' EXIT

# local.sh runs the same program as server and worker: this wrapper puts each
# under callgrind, with its role in the output file's name.
cat >"$out/wrap.sh" <<WRAP
#!/usr/bin/env bash
exec valgrind --tool=callgrind --callgrind-out-file="\$CG_DIR/\$DMLC_ROLE.out" \
  "$build/bench/kv_bench" "\$@"
WRAP
chmod +x "$out/wrap.sh"

# Total instructions of one role's process.
instructions() { awk '/^summary:/ {print $2}' "$1"; }

run() {  # run PAYLOAD WINDOW HANDLE N -> leaves server.out and worker.out in $CG_DIR
  local payload=$1 window=$2 handle=$3 n=$4
  export CG_DIR=$out/$payload-w$window-$handle-$n
  mkdir -p "$CG_DIR"
  # Valgrind serialises threads: give heartbeats room.
  EMBER_HEARTBEAT_TIMEOUT_MS=120000 EMBER_TIMEOUT=600 \
    EMBER_SCHEDULER=$build/scheduler/ember_scheduler EMBER_SPIN_US=0 \
    "$root/scripts/local.sh" 1 1 "$out/wrap.sh" --mode=push \
    --payload="$payload" --window="$window" --handle="$handle" --requests="$n" \
    >"$CG_DIR/log" 2>&1 || { cat "$CG_DIR/log"; exit 1; }
}

declare -A ir  # role -> instructions per request
printf '%-22s %-6s %18s %18s\n' case handle worker_Ir/request server_Ir/request
# PAYLOAD:WINDOW; the 4 KB push one at a time is the round trip's case.
for case in sparse_1000x1:8 dense_4m:8 dense_4k:1; do
  payload=${case%:*} window=${case#*:}
  for handle in $handles; do
    run "$payload" "$window" "$handle" "$n1"
    run "$payload" "$window" "$handle" "$n2"
    for role in worker server; do
      a=$(instructions "$out/$payload-w$window-$handle-$n1/$role.out")
      b=$(instructions "$out/$payload-w$window-$handle-$n2/$role.out")
      ir[$role]=$(((b - a) / (n2 - n1)))
    done
    printf '%-22s %-6s %18s %18s\n' "push $payload w$window" "$handle" "${ir[worker]}" "${ir[server]}"
    echo "RESULT callgrind payload=$payload mode=push window=$window handle=$handle worker_ir_per_request=${ir[worker]} server_ir_per_request=${ir[server]}"
  done
done
