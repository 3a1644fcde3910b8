#!/usr/bin/python3
"""Deterministic cost figures: instructions per request on the worker and on
the server, counted by valgrind's callgrind.

    /usr/bin/python3 scripts/callgrind.py [--build build] [--n1 50]
        [--n2 150] [--handles sum,empty] [--out DIR]

The cases are a 1000-key sparse push and a 4 MB push, window 8, and a 4 KB
push one at a time (the round trip's case). Instruction counts do not depend
on the machine's load, unlike times. Each case runs kv_bench at 1 server x
1 worker twice, with N1 and N2 requests; the difference divided by N2 - N1 is
the cost of one request, without start-up and shutdown. Kernel work (socket
copies) is not counted: callgrind sees user space only. Waiting threads do
not spin (EMBER_SPIN_US=0): a spin's polls depend on timing, and would make
the counts vary from run to run.

Each case runs with kv_bench's summing server handle (the server adds every
pushed value into its store) and with its empty one (the server does nothing
with the values): the second is Ember's own cost on the server.

Prints a table and a RESULT line per case; with --out DIR, also writes
DIR/callgrind.csv and DIR/callgrind.png (with matplotlib). Exit status 2
without valgrind (scripts/deps.sh --bench installs it), 1 when a run fails.
"""

import os
import sys
import tempfile

sys.dont_write_bytecode = True  # No __pycache__ in the source tree.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

# (payload, window): the 4 KB push one at a time is the round trip's case.
CASES = [("sparse_1000x1", 8), ("dense_4m", 8), ("dense_4k", 1)]
ROLES = ("worker", "server")
CSV_HEADER = ["payload", "window", "handle", "worker_ir_per_request",
              "server_ir_per_request"]


def measure(runner, tmp, payload, window, handle, n1, n2):
    """{role: instructions per request} of one case."""
    wrap = bl.callgrind_wrapper(tmp, runner.program("bench", "kv_bench"))
    totals = {}
    for n in (n1, n2):
        d = os.path.join(tmp, "%s-w%d-%s-%d" % (payload, window, handle, n))
        os.makedirs(d)
        runner.cluster(1, 1, wrap, ["--mode=push", "--payload=" + payload,
                                    "--window=%d" % window,
                                    "--handle=" + handle,
                                    "--requests=%d" % n],
                       dict(bl.CALLGRIND_ENV, CG_DIR=d))
        totals[n] = {role: bl.role_total(d, role) for role in ROLES}
    return {role: bl.per_request(totals[n1][role], totals[n2][role], n1, n2)
            for role in ROLES}


def draw_chart(rows, png):
    """Instructions per request, worker and server, per case and handle, on
    a log scale (a 4 MB sum is a million times a sparse request's header).
    False without matplotlib."""
    plt = bl.pyplot()
    if plt is None:
        return False
    labels = ["%s w%s\n%s" % (r["payload"], r["window"], r["handle"])
              for r in rows]
    x = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(rows)), 4.5))
    for offset, role, colour in ((-0.2, "worker", "tab:blue"),
                                 (0.2, "server", "tab:orange")):
        ax.bar([i + offset for i in x],
               [float(r[role + "_ir_per_request"]) for r in rows], 0.4,
               color=colour, label=role)
    ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("instructions per request (callgrind)")
    ax.set_title("Ember's cost per push, 1 server x 1 worker", fontsize=10)
    ax.legend(fontsize=8)
    return bl.save_chart(plt, fig, png)


def main(argv=None):
    ap = bl.argument_parser(__doc__)
    ap.add_argument("--n1", type=int, default=50)
    ap.add_argument("--n2", type=int, default=150)
    ap.add_argument("--handles", default="sum,empty",
                    help="comma-separated: sum and/or empty")
    ap.add_argument("--out", help="folder for callgrind.csv and .png")
    ap.add_argument("--timeout", type=int, default=900,
                    help="seconds one run under valgrind may take")
    args = ap.parse_args(argv)
    handles = args.handles.split(",")
    if not handles or any(h not in ("sum", "empty") for h in handles):
        ap.error("--handles holds sum and/or empty, not " + args.handles)
    if not 0 < args.n1 < args.n2:
        ap.error("need 0 < --n1 < --n2")
    if not bl.have_valgrind():
        print("callgrind.py: valgrind is not installed (scripts/deps.sh "
              "--bench installs it)", file=sys.stderr)
        return 2
    runner = bl.Runner(os.path.abspath(args.build), args.timeout)
    rows = []
    print("%-22s %-6s %18s %18s" % ("case", "handle", "worker_Ir/request",
                                     "server_Ir/request"), flush=True)
    try:
        with tempfile.TemporaryDirectory(prefix="ember-callgrind-") as tmp:
            for payload, window in CASES:
                for handle in handles:
                    ir = measure(runner, tmp, payload, window, handle,
                                 args.n1, args.n2)
                    print("%-22s %-6s %18.0f %18.0f" % (
                        "push %s w%d" % (payload, window), handle,
                        ir["worker"], ir["server"]), flush=True)
                    fields = [("payload", payload), ("mode", "push"),
                              ("window", window), ("handle", handle),
                              ("worker_ir_per_request",
                               "%.0f" % ir["worker"]),
                              ("server_ir_per_request",
                               "%.0f" % ir["server"])]
                    bl.emit("callgrind", fields)
                    rows.append(dict(fields))
    except bl.BenchError as e:
        print("callgrind.py: " + str(e), file=sys.stderr)
        return 1
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "callgrind.csv")
        bl.write_csv(path, CSV_HEADER, rows)
        print("wrote " + path)
        png = os.path.join(args.out, "callgrind.png")
        print("wrote " + png if draw_chart(rows, png) else bl.NO_MATPLOTLIB)
    return 0


if __name__ == "__main__":
    sys.exit(main())
