#!/usr/bin/env bash
# local.sh - launch a local Ember (ps-lite compatible) cluster on 127.0.0.1.
#
# usage: local.sh NUM_SERVERS NUM_WORKERS PROGRAM [ARGS...]
#
# Starts one scheduler, EMBER_SERVER_PROCS server processes and
# EMBER_WORKER_PROCS worker processes of PROGRAM, prefixes every output line
# with the process's role and index, and waits for all of them.  If any
# process fails (non-zero exit or killed by a signal) the rest of the cluster
# is stopped and local.sh exits non-zero.  See usage_long below for the
# environment variables it honours.

LOCALSH_NAME=local.sh

usage_short() {
  echo "usage: $LOCALSH_NAME NUM_SERVERS NUM_WORKERS PROGRAM [ARGS...]" >&2
}

usage_long() {
  cat <<'EOF'
usage: local.sh NUM_SERVERS NUM_WORKERS PROGRAM [ARGS...]

Launch a local cluster of PROGRAM on 127.0.0.1: one scheduler, the server
processes and the worker processes.  Every process gets DMLC_NUM_SERVER,
DMLC_NUM_WORKER, DMLC_PS_ROOT_URI=127.0.0.1, DMLC_PS_ROOT_PORT, DMLC_ROLE
(scheduler|server|worker) and EMBER_RANK_HINT (its launch index within its
role).  An argument equal to {role} is replaced by the process's role name.
Output lines are prefixed with "[scheduler] ", "[server I] ", "[worker I] ".

Environment:
  DMLC_PS_ROOT_PORT        scheduler port (default: the scheduler binds a port the
                           kernel picks and publishes it through EMBER_PORT_FILE)
  EMBER_SCHEDULER          scheduler binary to run (no arguments)
  EMBER_PROGRAM_SCHEDULER  =1: run PROGRAM ARGS as the scheduler (ps-lite style)
  EMBER_BUILD_DIR          build tree searched for scheduler/ember_scheduler
  EMBER_SERVER_PROCS       number of server processes (default NUM_SERVERS)
  EMBER_WORKER_PROCS       number of worker processes (default NUM_WORKERS)
  EMBER_LOG_DIR            also write raw output to DIR/<role>-<index>.log
  EMBER_TIMEOUT            time limit in seconds, 0 = none (default); exit 124

Without EMBER_SCHEDULER / EMBER_PROGRAM_SCHEDULER, the standalone scheduler
ember_scheduler is searched next to this script, in ../build/scheduler, in
$EMBER_BUILD_DIR/scheduler and on PATH; if it is not found PROGRAM itself is
run as the scheduler.

Exit status: 0 if every process exited 0; the first failing status otherwise;
124 on timeout; 2 on usage errors.
EOF
}

die_usage() {
  echo "$LOCALSH_NAME: $*" >&2
  usage_short
  exit 2
}

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

# ---------------------------------------------------------------- arguments --
if [[ $# -ge 1 && ( $1 == -h || $1 == --help ) ]]; then
  usage_long
  exit 0
fi
[[ $# -ge 3 ]] || die_usage "expected at least 3 arguments, got $#"

NUM_SERVERS=$1
NUM_WORKERS=$2
PROGRAM=$3
shift 3
PROGRAM_ARGS=("$@")

is_uint "$NUM_SERVERS" || die_usage "NUM_SERVERS must be a non-negative integer, got '$NUM_SERVERS'"
is_uint "$NUM_WORKERS" || die_usage "NUM_WORKERS must be a non-negative integer, got '$NUM_WORKERS'"
NUM_SERVERS=$((10#$NUM_SERVERS))
NUM_WORKERS=$((10#$NUM_WORKERS))

SERVER_PROCS=${EMBER_SERVER_PROCS:-$NUM_SERVERS}
WORKER_PROCS=${EMBER_WORKER_PROCS:-$NUM_WORKERS}
is_uint "$SERVER_PROCS" || die_usage "EMBER_SERVER_PROCS must be a non-negative integer, got '$SERVER_PROCS'"
is_uint "$WORKER_PROCS" || die_usage "EMBER_WORKER_PROCS must be a non-negative integer, got '$WORKER_PROCS'"
SERVER_PROCS=$((10#$SERVER_PROCS))
WORKER_PROCS=$((10#$WORKER_PROCS))

TIMEOUT=${EMBER_TIMEOUT:-0}
is_uint "$TIMEOUT" || die_usage "EMBER_TIMEOUT must be a non-negative integer (seconds), got '$TIMEOUT'"
TIMEOUT=$((10#$TIMEOUT))

# resolve_exe NAME -> prints the path of an executable NAME (path or PATH lookup)
resolve_exe() {
  local name=$1 p
  [[ -n $name ]] || return 1
  if [[ $name == */* ]]; then
    [[ -f $name && -x $name ]] || return 1
    printf '%s\n' "$name"
    return 0
  fi
  p=$(type -P -- "$name" 2>/dev/null) || return 1
  [[ -n $p ]] || return 1
  printf '%s\n' "$p"
}

PROGRAM_PATH=$(resolve_exe "$PROGRAM") ||
  die_usage "program '$PROGRAM' not found or not executable"

# ---------------------------------------------------------------- scheduler --
SCRIPT_DIR=$(dirname -- "${BASH_SOURCE[0]:-$0}")
SCHED_CMD=()   # empty => run PROGRAM ARGS as the scheduler
if [[ -n ${EMBER_SCHEDULER:-} ]]; then
  p=$(resolve_exe "$EMBER_SCHEDULER") ||
    die_usage "EMBER_SCHEDULER '$EMBER_SCHEDULER' not found or not executable"
  SCHED_CMD=("$p")
elif [[ ${EMBER_PROGRAM_SCHEDULER:-} == 1 ]]; then
  :
else
  candidates=("$SCRIPT_DIR/ember_scheduler" "$SCRIPT_DIR/../build/scheduler/ember_scheduler")
  if real=$(readlink -f -- "${BASH_SOURCE[0]:-$0}" 2>/dev/null) && [[ -n $real ]]; then
    real_dir=$(dirname -- "$real")
    if [[ $real_dir != "$SCRIPT_DIR" ]]; then
      candidates+=("$real_dir/ember_scheduler" "$real_dir/../build/scheduler/ember_scheduler")
    fi
  fi
  [[ -n ${EMBER_BUILD_DIR:-} ]] && candidates+=("$EMBER_BUILD_DIR/scheduler/ember_scheduler")
  for c in "${candidates[@]}"; do
    if [[ -f $c && -x $c ]]; then
      SCHED_CMD=("$c")
      break
    fi
  done
  if [[ ${#SCHED_CMD[@]} -eq 0 ]]; then
    if p=$(type -P ember_scheduler 2>/dev/null) && [[ -n $p ]]; then
      SCHED_CMD=("$p")
    else
      echo "$LOCALSH_NAME: note: ember_scheduler not found (looked next to this script," \
        "in ../build/scheduler${EMBER_BUILD_DIR:+, \$EMBER_BUILD_DIR/scheduler} and on PATH);" \
        "running '$PROGRAM' as the scheduler" >&2
    fi
  fi
fi

# --------------------------------------------------------------------- port --
# Unless the caller fixed DMLC_PS_ROOT_PORT, the scheduler binds port 0 (a
# port the kernel picks, so two clusters can never collide) and writes the
# port it got to EMBER_PORT_FILE; the other processes start once it is known.
ROOT_PORT=
if [[ -n ${DMLC_PS_ROOT_PORT:-} ]]; then
  is_uint "$DMLC_PS_ROOT_PORT" || die_usage "DMLC_PS_ROOT_PORT must be a port number, got '$DMLC_PS_ROOT_PORT'"
  ROOT_PORT=$DMLC_PS_ROOT_PORT
fi
PORT_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ember-local.XXXXXX") || {
  echo "$LOCALSH_NAME: cannot create a temporary directory" >&2
  exit 1
}
PORT_FILE=$PORT_DIR/port

export DMLC_NUM_SERVER=$NUM_SERVERS
export DMLC_NUM_WORKER=$NUM_WORKERS
export DMLC_PS_ROOT_URI=127.0.0.1
export DMLC_PS_ROOT_PORT=${ROOT_PORT:-0}

if [[ -n ${EMBER_LOG_DIR:-} ]]; then
  mkdir -p -- "$EMBER_LOG_DIR" || {
    echo "$LOCALSH_NAME: cannot create EMBER_LOG_DIR '$EMBER_LOG_DIR'" >&2
    exit 2
  }
fi

# ------------------------------------------------------------ output filter --
# The filter reads a process's combined stdout/stderr and writes prefixed
# lines to our stdout (and raw lines to the log file).  It must process input
# line by line as it arrives: mawk needs -W interactive for that.
AWK_CMD=()
if command -v gawk >/dev/null 2>&1; then
  AWK_CMD=(gawk)
elif command -v mawk >/dev/null 2>&1; then
  AWK_CMD=(mawk -W interactive)
elif command -v awk >/dev/null 2>&1; then
  if awk -W version 2>&1 | grep -q mawk; then
    AWK_CMD=(awk -W interactive)
  else
    AWK_CMD=(awk)
  fi
fi
# Each line is emitted with a single printf of one string: with unbuffered
# output (mawk -W interactive) "print p $0" would issue separate write()s for
# the text and the newline, letting lines of different processes interleave.
# shellcheck disable=SC2016
AWK_PROG='
BEGIN { p = ENVIRON["LOCALSH_PREFIX"]; lf = ENVIRON["LOCALSH_LOG"] }
{
  printf "%s", p $0 "\n"; fflush()
  if (lf != "") { printf "%s", $0 "\n" > lf; fflush(lf) }
}'

# prefix_filter: the body of a process substitution (exec'd so its PID is $!)
prefix_filter() {
  if [[ ${#AWK_CMD[@]} -gt 0 ]]; then
    exec "${AWK_CMD[@]}" "$AWK_PROG"
  fi
  # pure bash fallback (slower)
  local line
  if [[ -n $LOCALSH_LOG ]]; then
    exec 3>"$LOCALSH_LOG"
  fi
  while IFS= read -r line || [[ -n $line ]]; do
    printf '%s%s\n' "$LOCALSH_PREFIX" "$line"
    [[ -n $LOCALSH_LOG ]] && printf '%s\n' "$line" >&3
  done
  exit 0
}

STDBUF=()
command -v stdbuf >/dev/null 2>&1 && STDBUF=(stdbuf -oL -eL)

# ------------------------------------------------------------- bookkeeping --
PIDS=()        # program PIDs, by process slot
NAMES=()       # "scheduler 0", "server 1", ...
FILTER_PIDS=() # output filter PIDs
RUNNING=()     # slots still running (not yet reaped)
TIMER_PID=
TICKER_PID=
STOPPED=0
FAIL_STATUS=0

pid_alive() { kill -0 "$1" 2>/dev/null; }
# group_alive PGID: does the process group still have a live (non-zombie)
# member?  Zombies are ignored: an init that does not reap orphans (as in some
# containers) would otherwise keep an already dead group "alive".
group_alive() {
  kill -0 -- "-$1" 2>/dev/null || return 1
  [[ -r /proc/self/stat ]] || return 0
  local f st rest
  for f in /proc/[0-9]*/stat; do
    { IFS= read -r st <"$f"; } 2>/dev/null || continue
    rest=${st##*) }   # "STATE PPID PGRP ..."
    read -r -a st <<<"$rest"
    [[ ${st[2]} == "$1" && ${st[0]} != Z ]] && return 0
  done
  return 1
}

# signal_slot SIG SLOT: signal the process group of a program (it leads its
# own group, which also catches its children) and,
# while it has not been reaped yet, the process itself.  A reaped PID is never
# signalled directly: it may have been reused by an unrelated process.
signal_slot() {
  local pid=${PIDS[$2]}
  kill "-$1" -- "-$pid" 2>/dev/null
  slot_unreaped "$2" && kill "-$1" "$pid" 2>/dev/null
}

slot_unreaped() { [[ " ${RUNNING[*]} " == *" $1 "* ]]; }

# slot_alive SLOT: is the program (or anything left in its process group) alive?
slot_alive() {
  { slot_unreaped "$1" && pid_alive "${PIDS[$1]}"; } || group_alive "${PIDS[$1]}"
}

# stop_cluster: terminate everything this script started (idempotent).
stop_cluster() {
  [[ $STOPPED == 1 ]] && return 0
  STOPPED=1
  [[ -n ${PORT_DIR:-} ]] && rm -rf -- "$PORT_DIR"
  local slot i any n=${#PIDS[@]}
  for ((slot = 0; slot < n; slot++)); do
    slot_alive "$slot" && signal_slot TERM "$slot"
  done
  # up to 2 s for a graceful exit
  for ((i = 0; i < 20; i++)); do
    any=0
    for ((slot = 0; slot < n; slot++)); do
      if slot_alive "$slot"; then any=1; break; fi
    done
    ((any)) || break
    sleep 0.1
  done
  local killed=()
  for ((slot = 0; slot < n; slot++)); do
    if slot_alive "$slot"; then
      signal_slot KILL "$slot"
      slot_unreaped "$slot" && pid_alive "${PIDS[slot]}" && killed+=("${PIDS[slot]}")
    fi
  done
  [[ -n $TIMER_PID ]] && kill "$TIMER_PID" 2>/dev/null
  [[ -n $TICKER_PID ]] && kill "$TICKER_PID" 2>/dev/null
  # reap the SIGKILLed children here, so that bash's "Killed" job notices go
  # to /dev/null (see the redirection below) rather than to the terminal
  local pid
  for pid in "${killed[@]}"; do
    wait "$pid"
  done
  drain_filters
} 2>/dev/null

# drain_filters: let the output filters print what is left (they end when all
# writers are gone), then stop any that are still around.
drain_filters() {
  local pid i any
  for ((i = 0; i < 20; i++)); do
    any=0
    for pid in "${FILTER_PIDS[@]}"; do
      if pid_alive "$pid"; then any=1; break; fi
    done
    ((any)) || break
    sleep 0.1
  done
  for pid in "${FILTER_PIDS[@]}"; do
    pid_alive "$pid" && kill -TERM "$pid" 2>/dev/null
  done
  FILTER_PIDS=()
}

# shellcheck disable=SC2317  # invoked from traps
on_signal() {
  trap '' INT TERM
  echo "$LOCALSH_NAME: interrupted (SIG$1); stopping the cluster" >&2
  stop_cluster
  trap - EXIT
  exit "$2"
}
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP
trap 'stop_cluster' EXIT

# launch ROLE INDEX PREFIX CMD...
launch() {
  local role=$1 index=$2 prefix=$3
  shift 3
  local cmd=("$@") a
  for ((a = 1; a < ${#cmd[@]}; a++)); do
    [[ ${cmd[a]} == '{role}' ]] && cmd[a]=$role
  done
  local log=
  [[ -n ${EMBER_LOG_DIR:-} ]] && log="$EMBER_LOG_DIR/$role-$index.log"

  local fd
  exec {fd}> >(export LOCALSH_PREFIX="$prefix" LOCALSH_LOG="$log"; prefix_filter)
  FILTER_PIDS+=("$!")
  # Job control gives the program a process group of its own (its PID),
  # so stop_cluster can signal it with its children, in local.sh's session:
  # a session per program (setsid) would put each in a scheduler autogroup
  # of its own, which halved a 4 x 4 cluster's throughput on 2 cores.
  set -m
  (
    export DMLC_ROLE=$role EMBER_RANK_HINT=$index
    exec "${STDBUF[@]}" "${cmd[@]}"
  ) </dev/null >&"$fd" 2>&1 &
  local pid=$!
  set +m
  exec {fd}>&-
  PIDS+=("$pid")
  NAMES+=("$role $index")
  RUNNING+=("$((${#PIDS[@]} - 1))")
}

# ------------------------------------------------------------------- launch --
[[ -z $ROOT_PORT ]] && export EMBER_PORT_FILE=$PORT_FILE
if [[ ${#SCHED_CMD[@]} -gt 0 ]]; then
  launch scheduler 0 "[scheduler] " "${SCHED_CMD[@]}"
else
  launch scheduler 0 "[scheduler] " "$PROGRAM_PATH" "${PROGRAM_ARGS[@]}"
fi
unset EMBER_PORT_FILE
if [[ -z $ROOT_PORT ]]; then
  # Wait (bounded) for the scheduler to publish its port.
  for ((tries = 0; tries < 600; tries++)); do
    if [[ -s $PORT_FILE ]]; then
      ROOT_PORT=$(<"$PORT_FILE")
      break
    fi
    pid_alive "${PIDS[0]}" || break
    sleep 0.05
  done
  if ! is_uint "$ROOT_PORT"; then
    if ! pid_alive "${PIDS[0]}"; then
      wait "${PIDS[0]}" 2>/dev/null
      FAIL_STATUS=$?
    fi
    echo "$LOCALSH_NAME: the scheduler did not publish its port (see its output above)" >&2
    stop_cluster
    trap - EXIT
    exit "$((FAIL_STATUS ? FAIL_STATUS : 1))"
  fi
  export DMLC_PS_ROOT_PORT=$ROOT_PORT
fi
for ((i = 0; i < SERVER_PROCS; i++)); do
  launch server "$i" "[server $i] " "$PROGRAM_PATH" "${PROGRAM_ARGS[@]}"
done
for ((i = 0; i < WORKER_PROCS; i++)); do
  launch worker "$i" "[worker $i] " "$PROGRAM_PATH" "${PROGRAM_ARGS[@]}"
done

if ((TIMEOUT > 0)); then
  sleep "$TIMEOUT" >/dev/null 2>&1 &
  TIMER_PID=$!
fi

HAVE_WAIT_N=0
if ((BASH_VERSINFO[0] > 4 || (BASH_VERSINFO[0] == 4 && BASH_VERSINFO[1] >= 3))); then
  HAVE_WAIT_N=1
fi

# reap: collect exited programs; returns 1 if one of them failed.
reap() {
  local slot pid st keep=()
  for slot in "${RUNNING[@]}"; do
    pid=${PIDS[slot]}
    if pid_alive "$pid"; then
      keep+=("$slot")
      continue
    fi
    wait "$pid" 2>/dev/null
    st=$?
    if ((st != 0 && FAIL_STATUS == 0)); then
      FAIL_STATUS=$st
      echo "$LOCALSH_NAME: ${NAMES[slot]} (pid $pid) exited with status $st; stopping the cluster" >&2
    fi
  done
  RUNNING=("${keep[@]}")
  ((FAIL_STATUS == 0))
}

describe_running() {
  local slot list=()
  for slot in "${RUNNING[@]}"; do
    list+=("${NAMES[slot]} (pid ${PIDS[slot]})")
  done
  local IFS=,
  [[ ${#list[@]} -gt 0 ]] && echo "$LOCALSH_NAME: still running:${list[*]/#/ }" >&2
}

# ---------------------------------------------------------------- main loop --
while :; do
  if ! reap; then
    describe_running
    stop_cluster
    trap - EXIT
    exit "$FAIL_STATUS"
  fi
  ((${#RUNNING[@]} == 0)) && break
  if [[ -n $TIMER_PID ]] && ! pid_alive "$TIMER_PID"; then
    TIMER_PID=''
    echo "$LOCALSH_NAME: time limit of $TIMEOUT s exceeded; stopping the cluster" >&2
    describe_running
    stop_cluster
    trap - EXIT
    exit 124
  fi
  if ((HAVE_WAIT_N)); then
    # The ticker bounds the wait, so a child that ended between reap and
    # wait -n is noticed within a second at worst.
    if [[ -z $TICKER_PID ]] || ! pid_alive "$TICKER_PID"; then
      sleep 1 >/dev/null 2>&1 &
      TICKER_PID=$!
    fi
    wait -n 2>/dev/null
  else
    sleep 0.2
  fi
done

# success: every program exited 0
[[ -n $TIMER_PID ]] && kill "$TIMER_PID" 2>/dev/null
[[ -n $TICKER_PID ]] && kill "$TICKER_PID" 2>/dev/null
TIMER_PID='' TICKER_PID=''
# stops leftover children of the programs (still in their process groups),
# if any, and lets the output filters finish
stop_cluster
trap - EXIT
exit 0
