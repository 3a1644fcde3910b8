#!/usr/bin/python3
"""Ember at more than one server, against raw ZeroMQ in the same topology.

Runs, in interleaved rounds (Ember and its baseline in turn, the order
alternating from round to round, so both see the same phases of the
machine):

  * sparse requests of 1000 random keys x 1 float, 8 in flight per worker,
    push and pull, at 1x1, 2x2 and 4x4 (servers x workers);
  * 1 M-key requests, 2 in flight, push and pull, at 2x2 and 4x4;
  * at 1x1 (part "single"): 1 M-key requests, 8 in flight, push and pull,
    and 1024-key (4 KB) pushes one at a time (the round trip: its req/s is
    1 / round trip);

with bench/pslite_api_bench (Ember) and bench/zmq_topology (W client
processes each sending every request's share of keys and values to S server
processes, the answers on a second connection, as Ember's are). It prints
each case's medians, the median of the per-round ratios and its range, then
a cost-growth table (nanoseconds per key at 1 K, 100 K, 1 M and 10 M keys
per request, at 1 and 4 servers, Ember beside raw ZeroMQ), and, if valgrind
is installed, the worker's instructions per 1000-key push at 1 and 4
servers (callgrind, the difference of two runs of N1 and N2 requests), with
--pslite ps-lite's program's beside them, raw ZeroMQ's client beside them
(the floor of the 4 / 1 ratio), and every process's instructions per 2x2
sparse push with EMBER_REPLICAS=0 against 1.

Part "curve" runs Ember with EMBER_CURVE=1 against without (dense 4 MB
pushes at 1x1 and 2x2, of 1 M random keys and of a dense tensor's keys,
which travel as key runs; sparse 1000-key pushes and pulls at 2x2), then one
core's cipher rates (bench/cipher_bench, when built) and the dense cases in
raw ZeroMQ with CURVE against without (bench/zmq_topology --curve): the
ceiling of Ember's ratio.

Part "replicas" runs Ember with EMBER_REPLICAS=1 against 0 (sparse 1000-key
and dense 4 MB pushes and pulls at 2x2, sparse pushes at 4x4) and, in the
same interleaved rounds, raw ZeroMQ with the same forwarding against without
(bench/zmq_topology --forward=ack: each server forwards every push to its
successor and answers after the successor's acknowledgement): the ceiling
of Ember's on/off ratio on this machine (docs/replication.md); and raw
ZeroMQ in chain replication's pattern (--forward=chain: the successor
answers), the ceiling of that other scheme.

Part "policy" runs Ember with its message threads under SCHED_BATCH
(EMBER_THREAD_POLICY=batch, the default) against SCHED_OTHER (normal):
sparse 1000-key pushes and pulls at 1x1, 2x2 and 4x4, 1 M-key pushes and
pulls at 2x2 and the 4 KB round trip (docs/performance.md, "Thread policy").

With --pslite DIR, DIR/pslite_api_bench (the same source file, built by the
user against ps-lite outside this repository; docs/performance.md says how)
runs beside Ember in every round of the sparse and 1 M-key cases, launched
the same way (on a fixed free port: ps-lite's scheduler publishes none), and
the table gains Ember / ps-lite.

With --kvbench PSLITE_BIN,EMBER_BIN (ps-lite's tests/test_kv_app_benchmark.cc
compiled unchanged, once against ps-lite and once against Ember, outside
this repository) both run in interleaved rounds at 1x1, 2x2 and 4x4, and the
table gives each one's push and pull time (the mean over the workers).

    /usr/bin/python3 scripts/bench_multi.py [--build build] [--rounds 3]
        [--seconds 2] [--out DIR] [--pslite DIR] [--kvbench PSLITE_BIN,EMBER_BIN]
        [--only sparse,batch,single,growth,callgrind,kvbench,curve,replicas,
                policy]

Every line of figures is also printed as a machine-readable RESULT line.
Standard library (and matplotlib for the chart, when installed); runs on
Debian's /usr/bin/python3. scripts/bench.py runs it after its own cases.
"""

import os
import re
import statistics
import sys
import tempfile

sys.dont_write_bytecode = True  # No __pycache__ in the source tree.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
from benchlib import BenchError, free_port, parse_callgrind_total  # noqa: E402,F401

SPARSE_TOPOLOGIES = [(1, 1), (2, 2), (4, 4)]
BATCH_TOPOLOGIES = [(2, 2), (4, 4)]
GROWTH_KEYS = [1000, 100000, 1000000, 10000000]
GROWTH_SERVERS = [1, 4]


def parse_worker_rates(output):
    """Sum of req_s over the PSBENCH lines of every worker in `output`."""
    rates = [float(m.group(1))
             for m in re.finditer(r"^.*?PSBENCH .*\breq_s=([0-9.]+)",
                                  output, re.M)]
    if not rates:
        raise BenchError("no PSBENCH line in:\n" + output[-4000:])
    return sum(rates), len(rates)


def parse_topology_rate(output):
    m = re.search(r"^RESULT baseline=zmq_topology .*\breq_s=([0-9.]+)",
                  output, re.M)
    if not m:
        raise BenchError("no zmq_topology RESULT line in:\n" + output[-4000:])
    return float(m.group(1))


def parse_kvbench_times(output):
    """(push_ms, pull_ms), each the mean over the workers' lines of
    test_kv_app_benchmark's output."""
    got = {}
    for op in ("Push", "Pull"):
        ms = [float(m.group(1)) for m in re.finditer(
            op + r" average time cost: ([0-9.]+)ms", output)]
        if not ms:
            raise BenchError("no %s time in:\n%s" % (op, output[-4000:]))
        got[op] = (statistics.fmean(ms), len(ms))
    return got["Push"][0], got["Pull"][0], got["Push"][1]


def median_and_range(values):
    """(median, min, max) of a non-empty list."""
    if not values:
        raise ValueError("no values")
    return statistics.median(values), min(values), max(values)


def ratios(ember, baseline):
    """Per-round ratios ember[i] / baseline[i] (rounds with a zero baseline
    are skipped)."""
    return [r for r in bl.per_round_ratios(ember, baseline) if r is not None]


def local_transport():
    """zmq_topology's --transport for the one Ember's local nodes use
    between each other (abstract sockets unless EMBER_LOCAL_IPC=0)."""
    return "tcp" if os.environ.get("EMBER_LOCAL_IPC") == "0" else "ipc"


class Runner(bl.Runner):
    """benchlib's Runner with the measured seconds of every run."""

    def __init__(self, build, seconds, timeout):
        super().__init__(build, timeout)
        self.seconds = seconds

    def ps_api(self, program, servers, workers, mode, keys, window,
               program_scheduler=False, seconds=None, env_extra=None,
               layout=None):
        args = ["mode=" + mode, "keys=%d" % keys, "window=%d" % window,
                "seconds=%g" % (seconds or self.seconds), "warmup=0.5"]
        if layout:
            args.append("layout=" + layout)
        out = self.cluster(servers, workers, program, args, env_extra,
                           program_scheduler)
        total, n = parse_worker_rates(out)
        if n != workers:
            raise BenchError("%d of %d workers reported" % (n, workers))
        return total

    def zmq(self, servers, clients, mode, keys, window, seconds=None,
            extra_args=()):
        out = self.run([os.path.join(self.build, "bench", "zmq_topology"),
                        "--transport=" + local_transport(),
                        "--servers=%d" % servers, "--clients=%d" % clients,
                        "--mode=" + mode, "--keys=%d" % keys,
                        "--window=%d" % window,
                        "--seconds=%g" % (seconds or self.seconds)] +
                       list(extra_args))
        return parse_topology_rate(out)


def throughput_cases(runner, rounds, pslite, cases):
    """cases: (name, servers, workers, mode, keys, window). Returns a row of
    CSV_HEADER per case."""
    ember_bin = os.path.join(runner.build, "bench", "pslite_api_bench")
    rows = []
    print("%-28s %12s %12s %12s %8s %13s %10s" %
          ("case (req/s, all workers)", "ember", "zmq", "ps-lite",
           "e/zmq", "e/zmq range", "e/ps-lite"), flush=True)
    for name, s, w, mode, keys, window in cases:
        got = {"ember": [], "zmq": [], "pslite": []}
        for r in range(rounds):
            order = ["ember", "zmq"] + (["pslite"] if pslite else [])
            if r % 2:
                order.reverse()
            for who in order:
                if who == "ember":
                    got[who].append(runner.ps_api(ember_bin, s, w, mode, keys,
                                                  window,
                                                  env_extra=NO_REPLICAS))
                elif who == "zmq":
                    got[who].append(runner.zmq(s, w, mode, keys, window))
                else:
                    got[who].append(runner.ps_api(
                        os.path.join(pslite, "pslite_api_bench"), s, w, mode,
                        keys, window, program_scheduler=True))
        e = statistics.median(got["ember"])
        z = statistics.median(got["zmq"])
        rz, lo, hi = median_and_range(ratios(got["ember"], got["zmq"]))
        p = statistics.median(got["pslite"]) if pslite else None
        rp = (statistics.median(ratios(got["ember"], got["pslite"]))
              if pslite else None)
        print("%-28s %12.1f %12.1f %12s %8.3f %6.3f-%-6.3f %10s" %
              (name, e, z, "%.1f" % p if p else "-", rz, lo, hi,
               "%.3f" % rp if rp else "-"), flush=True)
        fields = [("case", name.replace(" ", "_")), ("servers", s),
                  ("workers", w), ("mode", mode), ("keys", keys),
                  ("window", window), ("rounds", rounds),
                  ("ember_req_s", "%.1f" % e), ("zmq_req_s", "%.1f" % z),
                  ("ember_over_zmq", "%.3f" % rz)]
        if pslite:
            fields += [("pslite_req_s", "%.1f" % p),
                       ("ember_over_pslite", "%.3f" % rp)]
        bl.emit("bench=multi", fields)
        rows.append(dict(fields, case=name, ember_over_zmq_low="%.3f" % lo,
                         ember_over_zmq_high="%.3f" % hi))
    return rows


CSV_HEADER = ["case", "servers", "workers", "mode", "keys", "window",
              "rounds", "ember_req_s", "zmq_req_s", "ember_over_zmq",
              "ember_over_zmq_low", "ember_over_zmq_high", "pslite_req_s",
              "ember_over_pslite"]


def draw_chart(rows, png):
    """Ember / raw ZeroMQ per case, the range of the per-round ratios as an
    error bar, Ember / ps-lite beside it when measured. False without
    matplotlib."""
    plt = bl.pyplot()
    if plt is None:
        return False
    x = list(range(len(rows)))
    ratio = [float(r["ember_over_zmq"]) for r in rows]
    errors = [[max(0.0, q - float(r["ember_over_zmq_low"]))
               for q, r in zip(ratio, rows)],
              [max(0.0, float(r["ember_over_zmq_high"]) - q)
               for q, r in zip(ratio, rows)]]
    with_pslite = all(r.get("ember_over_pslite") for r in rows)
    width = 0.4 if with_pslite else 0.7
    fig, ax = plt.subplots(figsize=(max(9, 0.8 * len(rows)), 5))
    ax.bar([i - width / 2 if with_pslite else i for i in x], ratio, width,
           yerr=errors, capsize=4, color="tab:blue",
           label="Ember / raw ZeroMQ (range of the rounds)")
    if with_pslite:
        ax.bar([i + width / 2 for i in x],
               [float(r["ember_over_pslite"]) for r in rows], width,
               color="tab:orange", label="Ember / ps-lite")
    ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
    ax.set_xticks(x)
    ax.set_xticklabels([r["case"] for r in rows], rotation=35, ha="right",
                       fontsize=8)
    ax.set_ylabel("requests/s, median of the per-round ratios")
    ax.set_title("Ember at 1 x 1, 2 x 2 and 4 x 4 (servers x workers) "
                 "against the same topology in raw ZeroMQ", fontsize=10)
    ax.legend(fontsize=8)
    return bl.save_chart(plt, fig, png)


def write_outputs(rows, out_dir):
    """bench_multi.csv and bench_multi.png in out_dir."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "bench_multi.csv")
    bl.write_csv(path, CSV_HEADER, rows)
    print("wrote " + path, flush=True)
    png = os.path.join(out_dir, "bench_multi.png")
    if draw_chart(rows, png):
        print("wrote " + png, flush=True)
    else:
        print(bl.NO_MATPLOTLIB, flush=True)


# CURVE's cost (docs/security.md): the case, servers, workers, mode, keys,
# window[, further arguments]. 1 M random keys is a 4 MB push plus its 8 MB
# of keys; 1 M keys of a dense tensor ("runs") is 4 MB and three words.
CURVE_CASES = [("dense 4 MB push", 1, 1, "push", 1000000, 2),
               ("dense 4 MB push", 2, 2, "push", 1000000, 2),
               # The same with a dense tensor's keys, MXNet/BytePS-style:
               # each server's part is a key run (docs/protocol.md).
               ("runs 4 MB push", 1, 1, "push", 1000000, 2,
                {"layout": "dense"}),
               ("runs 4 MB push", 2, 2, "push", 1000000, 2,
                {"layout": "dense"}),
               ("sparse 1000 push", 2, 2, "push", 1000, 8),
               ("sparse 1000 pull", 2, 2, "pull", 1000, 8)]


# Against ps-lite, which has no replicas, Ember runs without them too.
NO_REPLICAS = {"EMBER_REPLICAS": "0"}


def interleaved(rounds, names, measure):
    """{name: [figure per round]}: `measure(name)` for every name in every
    round, in the order of `names` in even rounds and reversed in odd ones,
    so that every variant sees the same phases of the machine."""
    got = {n: [] for n in names}
    for r in range(rounds):
        for n in (names if r % 2 == 0 else list(reversed(names))):
            got[n].append(measure(n))
    return got


def on_off(runner, rounds, title, tag, cases, on_env, off_env, measure=None):
    """Ember with `on_env` against Ember with `off_env`, interleaved, on
    the same cases; prints and emits on/off per case. A case is (name,
    servers, workers, mode, keys, window) and optionally a dict of further
    pslite_api_bench arguments ({"layout": "dense"}). `measure(which,
    servers, workers, mode, keys, window, **further)`, if given, measures
    instead (which: "on" or "off"), and the envs are unused."""
    if measure is None:
        ember_bin = os.path.join(runner.build, "bench", "pslite_api_bench")

        def measure(which, s, w, mode, keys, window, layout=None):
            return runner.ps_api(
                ember_bin, s, w, mode, keys, window,
                env_extra=on_env if which == "on" else off_env,
                layout=layout)
    print("\n%s (req/s, all workers; median of %d rounds)" % (title, rounds),
          flush=True)
    print("%-28s %12s %12s %8s" % ("case", "off", "on", "on/off"), flush=True)
    for case in cases:
        name, s, w, mode, keys, window = case[:6]
        further = case[6] if len(case) > 6 else {}
        got = interleaved(rounds, ["off", "on"],
                          lambda which: measure(which, s, w, mode, keys,
                                                window, **further))
        off_m = statistics.median(got["off"])
        on_m = statistics.median(got["on"])
        ratio = statistics.median(ratios(got["on"], got["off"]))
        label = "%s %dx%d" % (name, s, w)
        print("%-28s %12.1f %12.1f %8.3f" % (label, off_m, on_m, ratio),
              flush=True)
        bl.emit("bench=" + tag, [("case", label.replace(" ", "_")),
                                 ("servers", s), ("workers", w),
                                 ("mode", mode), ("keys", keys),
                                 ("rounds", rounds),
                                 ("off_req_s", "%.1f" % off_m),
                                 ("on_req_s", "%.1f" % on_m),
                                 ("on_over_off", "%.3f" % ratio)])


def curve(runner, rounds):
    """Ember with EMBER_CURVE=1 against Ember without (both without
    replicas, so that only encryption differs), then raw ZeroMQ with CURVE
    against without in the same topology: the ceiling of Ember's ratio
    (docs/performance.md, "CURVE's ceiling")."""
    keygen = os.path.join(runner.build, "scheduler", "ember_scheduler")
    with tempfile.TemporaryDirectory() as tmp:
        key = os.path.join(tmp, "cluster.key")
        runner.run([keygen, "--make_curve_key=" + key])
        on = dict(NO_REPLICAS, EMBER_CURVE="1", EMBER_CURVE_KEY_FILE=key)
        on_off(runner, rounds, "CURVE encryption", "curve", CURVE_CASES, on,
               NO_REPLICAS)

    # One core's rate with CURVE's cipher and the others libsodium has.
    cipher_bench = os.path.join(runner.build, "bench", "cipher_bench")
    if os.access(cipher_bench, os.X_OK):
        print("\nOne core's cipher rates (GB/s; bench/cipher_bench)",
              flush=True)
        out = runner.run([cipher_bench, "--rounds=3"])
        for line in out.splitlines():
            if line.startswith("RESULT ") or "not available" in line:
                print(line, flush=True)

    def raw(which, s, w, mode, keys, window):
        return runner.zmq(s, w, mode, keys, window,
                          extra_args=["--curve"] if which == "on" else [])
    on_off(runner, rounds, "CURVE in raw ZeroMQ, the same topology",
           "curve_zmq", [c for c in CURVE_CASES if c[0].startswith("dense")],
           None, None, measure=raw)


# The message threads' scheduling policy (docs/performance.md, "Thread
# policy"): EMBER_THREAD_POLICY=batch (on, the default) against normal.
POLICY_CASES = [("sparse 1000 push", 1, 1, "push", 1000, 8),
                ("sparse 1000 push", 2, 2, "push", 1000, 8),
                ("sparse 1000 pull", 2, 2, "pull", 1000, 8),
                ("sparse 1000 push", 4, 4, "push", 1000, 8),
                ("sparse 1000 pull", 4, 4, "pull", 1000, 8),
                ("1M keys push", 2, 2, "push", 1000000, 2),
                ("1M keys pull", 2, 2, "pull", 1000000, 2),
                ("4KB round trip", 1, 1, "push", 1024, 1)]


def policy(runner, rounds):
    """Ember's message threads under SCHED_BATCH against SCHED_OTHER."""
    on_off(runner, rounds, "Thread policy, EMBER_THREAD_POLICY=batch (on) "
           "against normal (off)", "policy", POLICY_CASES,
           dict(NO_REPLICAS, EMBER_THREAD_POLICY="batch"),
           dict(NO_REPLICAS, EMBER_THREAD_POLICY="normal"))


# The cost of safety (docs/replication.md): one copy of every server's data
# (EMBER_REPLICAS=1) against none.
REPLICA_CASES = [("sparse 1000 push", 2, 2, "push", 1000, 8),
                 ("sparse 1000 pull", 2, 2, "pull", 1000, 8),
                 ("dense 4 MB push", 2, 2, "push", 1000000, 2),
                 ("dense 4 MB pull", 2, 2, "pull", 1000000, 2),
                 ("sparse 1000 push", 4, 4, "push", 1000, 8)]

# The variants of the replicas part: Ember without and with a copy, and for
# pushes raw ZeroMQ without and with the same forwarding (zmq_topology
# --forward=ack: the owner forwards each push to its successor and answers
# after the successor's acknowledgement), the ceiling of Ember's ratio, and
# with chain replication's (--forward=chain: the successor answers).
REPLICA_VARIANTS = ["off", "on", "zmq_off", "zmq_on", "zmq_chain"]


def replica_measure(runner):
    """measure(which, servers, workers, mode, keys, window) for replicas()."""
    ember_bin = os.path.join(runner.build, "bench", "pslite_api_bench")

    def measure(which, s, w, mode, keys, window):
        if which in ("off", "on"):
            return runner.ps_api(
                ember_bin, s, w, mode, keys, window,
                env_extra={"EMBER_REPLICAS": "1"} if which == "on"
                else NO_REPLICAS)
        forward = {"zmq_off": "none", "zmq_on": "ack", "zmq_chain": "chain"}
        return runner.zmq(s, w, mode, keys, window,
                          extra_args=["--forward=" + forward[which]])
    return measure


def replicas(runner, rounds, measure=None):
    """Ember with EMBER_REPLICAS=1 against 0 and, for pushes, raw ZeroMQ
    with the same forwarding against without, all interleaved in the same
    rounds: prints each case's medians, the median per-round on/off ratio of
    each, and Ember's ratio over raw ZeroMQ's (how much of the ceiling it
    keeps), and raw ZeroMQ's ratio in chain replication's pattern; emits one
    RESULT line per case. Pulls are not forwarded (by either), so they run
    Ember only."""
    measure = measure or replica_measure(runner)
    print("\nReplication, EMBER_REPLICAS=1 (on) against 0 (off), beside raw "
          "ZeroMQ with the same forwarding (req/s, all workers; median of %d "
          "rounds)" % rounds, flush=True)
    print("%-24s %10s %10s %8s %10s %10s %8s %8s %9s" %
          ("case", "ember off", "ember on", "on/off", "zmq off", "zmq fwd",
           "fwd/off", "e/zmq", "chain/off"), flush=True)
    for name, s, w, mode, keys, window in REPLICA_CASES:
        names = REPLICA_VARIANTS if mode == "push" else REPLICA_VARIANTS[:2]
        got = interleaved(rounds, names,
                          lambda which: measure(which, s, w, mode, keys,
                                                window))
        med = {n: statistics.median(v) for n, v in got.items()}
        ember = statistics.median(ratios(got["on"], got["off"]))
        label = "%s %dx%d" % (name, s, w)
        fields = [("case", label.replace(" ", "_")), ("servers", s),
                  ("workers", w), ("mode", mode), ("keys", keys),
                  ("rounds", rounds), ("off_req_s", "%.1f" % med["off"]),
                  ("on_req_s", "%.1f" % med["on"]),
                  ("on_over_off", "%.3f" % ember)]
        raw = "%10s %10s %8s %8s %9s" % ("-", "-", "-", "-", "-")
        if "zmq_on" in got:
            zmq = statistics.median(ratios(got["zmq_on"], got["zmq_off"]))
            chain = statistics.median(ratios(got["zmq_chain"],
                                             got["zmq_off"]))
            raw = "%10.1f %10.1f %8.3f %8.3f %9.3f" % (
                med["zmq_off"], med["zmq_on"], zmq, ember / zmq, chain)
            fields += [("zmq_off_req_s", "%.1f" % med["zmq_off"]),
                       ("zmq_on_req_s", "%.1f" % med["zmq_on"]),
                       ("zmq_on_over_off", "%.3f" % zmq),
                       ("ember_share_of_ceiling", "%.3f" % (ember / zmq)),
                       ("zmq_chain_req_s", "%.1f" % med["zmq_chain"]),
                       ("zmq_chain_over_off", "%.3f" % chain)]
        print("%-24s %10.1f %10.1f %8.3f %s" %
              (label, med["off"], med["on"], ember, raw), flush=True)
        bl.emit("bench=replicas", fields)


def kvbench(runner, rounds, pslite_bin, ember_bin):
    """ps-lite's test_kv_app_benchmark, both builds, interleaved rounds."""
    print("\ntest_kv_app_benchmark (10 M keys per request; ms, mean over "
          "workers, median of rounds)", flush=True)
    print("%-8s %10s %10s %8s %10s %10s %8s" %
          ("SxW", "push ps-l", "push ember", "speedup", "pull ps-l",
           "pull ember", "speedup"), flush=True)
    for s, w in SPARSE_TOPOLOGIES:
        got = {"ember": [], "pslite": []}
        for r in range(rounds):
            order = ["ember", "pslite"]
            if r % 2:
                order.reverse()
            for who in order:
                out = runner.cluster(s, w, ember_bin if who == "ember"
                                     else pslite_bin, [],
                                     env_extra=NO_REPLICAS,
                                     program_scheduler=who == "pslite")
                push, pull, n = parse_kvbench_times(out)
                if n != w:
                    raise BenchError("%d of %d workers reported:\n%s" %
                                     (n, w, out[-4000:]))
                got[who].append((push, pull))
        med = {k: (statistics.median(x[0] for x in v),
                   statistics.median(x[1] for x in v))
               for k, v in got.items()}
        sp = [statistics.median(p[i] / e[i] for e, p in
                                zip(got["ember"], got["pslite"]))
              for i in (0, 1)]
        print("%-8s %10.1f %10.1f %8.3f %10.1f %10.1f %8.3f" %
              ("%dx%d" % (s, w), med["pslite"][0], med["ember"][0], sp[0],
               med["pslite"][1], med["ember"][1], sp[1]), flush=True)
        bl.emit("bench=kvbench", [("servers", s), ("workers", w),
                               ("rounds", rounds),
                               ("pslite_push_ms", "%.1f" % med["pslite"][0]),
                               ("ember_push_ms", "%.1f" % med["ember"][0]),
                               ("push_speedup", "%.3f" % sp[0]),
                               ("pslite_pull_ms", "%.1f" % med["pslite"][1]),
                               ("ember_pull_ms", "%.1f" % med["ember"][1]),
                               ("pull_speedup", "%.3f" % sp[1])])


def growth(runner):
    ember_bin = os.path.join(runner.build, "bench", "pslite_api_bench")
    print("\ncost growth: ns per key, 1 worker, push (raw ZeroMQ beside)",
          flush=True)
    print("%-10s" % "keys" + "".join(
        "%14s %14s" % ("ember S=%d" % s, "zmq S=%d" % s)
        for s in GROWTH_SERVERS), flush=True)
    for keys in GROWTH_KEYS:
        window = 8 if keys <= 1000 else 2
        row = "%-10d" % keys
        for s in GROWTH_SERVERS:
            e = runner.ps_api(ember_bin, s, 1, "push", keys, window,
                              env_extra=NO_REPLICAS)
            z = runner.zmq(s, 1, "push", keys, window)
            ens, zns = 1e9 / (e * keys), 1e9 / (z * keys)
            row += "%14.2f %14.2f" % (ens, zns)
            bl.emit("bench=growth", [("servers", s), ("keys", keys),
                                  ("ember_ns_per_key", "%.3f" % ens),
                                  ("zmq_ns_per_key", "%.3f" % zns)])
        print(row, flush=True)


def cluster_push_counts(runner, wrap, d, servers, workers, n1, n2, env,
                        program_scheduler=False, roles=("worker",)):
    """{role: instructions per request of one worker} of 1000-key pushes
    (window 8) of the program under `wrap` on a servers x workers cluster,
    summed over every process of each role: the difference of two runs of
    n1 and n2 requests per worker, so start-up and shutdown cancel out.
    Each run's profiles go to a folder of its own under d."""
    counts = {"worker": workers, "server": servers}
    totals = []
    for n in (n1, n2):
        run_dir = os.path.join(d, "n%d" % n)
        os.makedirs(run_dir)
        runner.cluster(servers, workers, wrap,
                       ["mode=push", "keys=1000", "window=8",
                        "requests=%d" % n],
                       dict(bl.CALLGRIND_ENV, CG_DIR=run_dir, **env),
                       program_scheduler)
        totals.append({role: bl.role_total(run_dir, role, counts[role])
                       for role in roles})
    return {role: bl.per_request(totals[0][role], totals[1][role],
                                 n1 * workers, n2 * workers)
            for role in roles}


def callgrind_counts(runner, program, n1, n2, program_scheduler=False,
                     env=None):
    """The worker's instructions per 1000-key push of `program` at 1 and at
    GROWTH_SERVERS[-1] servers (1 worker, window 8)."""
    with tempfile.TemporaryDirectory(prefix="ember-cg-") as tmp:
        wrap = bl.callgrind_wrapper(tmp, program)
        return {s: cluster_push_counts(runner, wrap,
                                       os.path.join(tmp, "s%d" % s), s, 1,
                                       n1, n2, env or {},
                                       program_scheduler)["worker"]
                for s in GROWTH_SERVERS}


def zmq_callgrind_counts(runner, n1, n2):
    """The client's instructions per 1000-key push of raw ZeroMQ
    (zmq_topology, the same transport as Ember's nodes, 1 client, window 8)
    at 1 and at GROWTH_SERVERS[-1] servers: the price of the messages alone,
    and so the floor of any design that sends one message to each server."""
    per = {}
    with tempfile.TemporaryDirectory(prefix="ember-cg-zmq-") as tmp:
        wrap = bl.callgrind_wrapper(
            tmp, os.path.join(runner.build, "bench", "zmq_topology"))
        for s in GROWTH_SERVERS:
            totals = []
            for n in (n1, n2):
                d = os.path.join(tmp, "s%d-n%d" % (s, n))
                os.makedirs(d)
                out = runner.run([wrap, "--transport=" + local_transport(),
                                  "--servers=%d" % s, "--clients=1",
                                  "--mode=push", "--keys=1000", "--window=8",
                                  "--requests=%d" % n],
                                 {"CG_DIR": d, "DMLC_ROLE": "client"})
                m = re.search(r"^RESULT baseline=zmq_topology .*"
                              r"\bclient_pids=(\d+)\s*$", out, re.M)
                if not m:
                    raise BenchError("no client_pids in:\n" + out[-4000:])
                totals.append(bl.parse_callgrind_total(
                    os.path.join(d, "client.%s.out" % m.group(1))))
            per[s] = bl.per_request(totals[0], totals[1], n1, n2)
    return per


def replicas_callgrind_counts(runner, n1, n2, servers=2, workers=2):
    """{replicas: {role: instructions per request}} of the sparse 1000-key
    push (window 8) with EMBER_REPLICAS=0 and 1, over all the workers and
    all the servers, per request of one worker: the CPU a copy adds, which
    does not depend on the machine's load as requests/s do."""
    with tempfile.TemporaryDirectory(prefix="ember-cg-rep-") as tmp:
        wrap = bl.callgrind_wrapper(tmp, os.path.join(runner.build, "bench",
                                                      "pslite_api_bench"))
        return {k: cluster_push_counts(runner, wrap,
                                       os.path.join(tmp, "k%d" % k), servers,
                                       workers, n1, n2,
                                       {"EMBER_REPLICAS": str(k)},
                                       roles=("worker", "server"))
                for k in (0, 1)}


def callgrind(runner, pslite=None, n1=50, n2=150):
    """Ember's worker instructions per 1000-key push at 1 and 4 servers and,
    with `pslite` (a folder holding pslite_api_bench built against ps-lite),
    ps-lite's beside them: every extra server costs one more message each
    way, whose price is mostly ZeroMQ's and the allocator's. Raw ZeroMQ's
    client (zmq_topology) is counted the same way: its price per extra
    server, added to Ember's 1-server count, is the floor of Ember's ratio
    for any design that sends one message to each server. Then every
    process's instructions per 2 x 2 sparse push without a copy and with
    one (EMBER_REPLICAS=0 and 1): the CPU share a copy leaves."""
    if not bl.have_valgrind():
        print("\ncallgrind: skipped, valgrind is not installed "
              "(scripts/deps.sh --bench installs it)", flush=True)
        return
    print("\nworker instructions per 1000-key push (callgrind, window 8)",
          flush=True)
    programs = [("ember", os.path.join(runner.build, "bench",
                                       "pslite_api_bench"), False,
                 NO_REPLICAS)]
    if pslite:
        programs.append(("ps-lite", os.path.join(pslite, "pslite_api_bench"),
                         True, None))
    last = GROWTH_SERVERS[-1]
    counts = [(who, callgrind_counts(runner, program, n1, n2, own_scheduler,
                                     env))
              for who, program, own_scheduler, env in programs]
    counts.append(("zeromq", zmq_callgrind_counts(runner, n1, n2)))
    for who, per in counts:
        for s in GROWTH_SERVERS:
            print("  %-8s %d server(s): %.0f instructions per request" %
                  (who, s, per[s]), flush=True)
            bl.emit("bench=callgrind", [("program", who), ("servers", s),
                                        ("keys", 1000),
                                        ("worker_ir_per_request",
                                         "%.0f" % per[s])])
        if per.get(1):
            print("  %-8s %d servers / 1 server: %.3f; each server beyond "
                  "the first: %.0f" %
                  (who, last, per[last] / per[1],
                   (per[last] - per[1]) / (last - 1)), flush=True)
    # If Ember's own work per extra message were nothing, each extra server
    # would still cost what raw ZeroMQ's messages cost.
    ember, zmq = counts[0][1], counts[-1][1]
    if ember.get(1) and zmq.get(1):
        floor = ember[1] + (zmq[last] - zmq[1])
        print("  floor    %d servers / 1 server with raw ZeroMQ's price per "
              "extra server and nothing of Ember's own: %.3f" %
              (last, floor / ember[1]), flush=True)
        bl.emit("bench=callgrind_floor", [("servers", last),
                                          ("ratio", "%.3f" % (floor /
                                                              ember[1]))])
    # The CPU of one copy: on 2 cores every process shares, the rate with a
    # copy can be at most this share of the rate without.
    rep = replicas_callgrind_counts(runner, n1, n2)
    print("\nall processes' instructions per 1000-key push, 2 x 2, "
          "window 8 (callgrind)", flush=True)
    for k in (0, 1):
        print("  EMBER_REPLICAS=%d: workers %.0f, servers %.0f, all %.0f" %
              (k, rep[k]["worker"], rep[k]["server"],
               rep[k]["worker"] + rep[k]["server"]), flush=True)
    off, on = (sum(rep[k].values()) for k in (0, 1))
    print("  without / with a copy: %.3f" % (off / on), flush=True)
    bl.emit("bench=callgrind_replicas", [
        ("servers", 2), ("workers", 2), ("keys", 1000),
        ("off_ir_per_request", "%.0f" % off),
        ("on_ir_per_request", "%.0f" % on),
        ("off_over_on", "%.3f" % (off / on))])


def main(argv=None):
    ap = bl.argument_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2)
    ap.add_argument("--timeout", type=int, default=120,
                    help="seconds per run before it is killed")
    ap.add_argument("--pslite", help="folder holding a pslite_api_bench "
                    "built against ps-lite")
    ap.add_argument("--kvbench", metavar="PSLITE_BIN,EMBER_BIN",
                    help="test_kv_app_benchmark built against ps-lite and "
                    "against Ember")
    ap.add_argument("--out", help="folder for bench_multi.csv and "
                    "bench_multi.png (the cases' table and chart)")
    ap.add_argument("--only",
                    default="sparse,batch,single,growth,callgrind,kvbench,"
                    "curve,replicas,policy")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.seconds <= 0:
        ap.error("--rounds must be >= 1 and --seconds > 0")
    parts = set(args.only.split(","))
    unknown = parts - {"sparse", "batch", "single", "growth", "callgrind",
                       "kvbench", "curve", "replicas", "policy"}
    if unknown:
        ap.error("unknown parts: " + ",".join(sorted(unknown)))
    if args.pslite and not os.access(
            os.path.join(args.pslite, "pslite_api_bench"), os.X_OK):
        ap.error("no executable pslite_api_bench in " + args.pslite)
    kv_bins = None
    if args.kvbench:
        kv_bins = args.kvbench.split(",")
        if len(kv_bins) != 2 or not all(os.access(b, os.X_OK)
                                        for b in kv_bins):
            ap.error("--kvbench wants two executables, PSLITE_BIN,EMBER_BIN")
        kv_bins = [os.path.abspath(b) for b in kv_bins]
    runner = Runner(os.path.abspath(args.build), args.seconds, args.timeout)
    try:
        cases = []
        if "sparse" in parts:
            for s, w in SPARSE_TOPOLOGIES:
                for mode in ("push", "pull"):
                    cases.append(("sparse 1000 %s %dx%d" % (mode, s, w), s, w,
                                  mode, 1000, 8))
        if "batch" in parts:
            for s, w in BATCH_TOPOLOGIES:
                for mode in ("push", "pull"):
                    cases.append(("1M keys %s %dx%d" % (mode, s, w), s, w,
                                  mode, 1000000, 2))
        if "single" in parts:
            for mode in ("push", "pull"):
                cases.append(("1M keys %s 1x1" % mode, 1, 1, mode, 1000000,
                              8))
            cases.append(("4KB round trip 1x1", 1, 1, "push", 1024, 1))
        if cases:
            rows = throughput_cases(runner, args.rounds, args.pslite, cases)
            if args.out:
                write_outputs(rows, args.out)
        if "kvbench" in parts and kv_bins:
            kvbench(runner, args.rounds, kv_bins[0], kv_bins[1])
        if "growth" in parts:
            growth(runner)
        if "callgrind" in parts:
            callgrind(runner, args.pslite)
        if "curve" in parts:
            curve(runner, args.rounds)
        if "replicas" in parts:
            replicas(runner, args.rounds)
        if "policy" in parts:
            policy(runner, args.rounds)
    except BenchError as e:
        print("bench_multi: " + str(e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
