#!/usr/bin/python3
"""One workload under each consistency mode: examples/sync_modes (logistic
regression, 2 servers, 4 workers, the last worker a straggler) under bsp,
ssp:1, ssp:4 and asp.

    /usr/bin/python3 scripts/sync_modes.py [--build build] [--out DIR]
        [--servers 2] [--workers 4] [-- extra sync_modes flags...]

Prints a table of iterations per second (the fast workers' mean and the
straggler's), the job's wall time and the final held-out log-loss, and
writes it as DIR/sync_modes.csv (default DIR: BUILD/sync_modes, with each
run's log) and, with matplotlib, DIR/sync_modes.png.
"""

import os
import sys
import time

sys.dont_write_bytecode = True  # No __pycache__ in the source tree.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

MODES = ["bsp", "ssp:1", "ssp:4", "asp"]
CSV_HEADER = ["mode", "fast_it_per_s", "straggler_it_per_s", "job_seconds",
              "final_test_loss"]


def summarise(output, straggler):
    """(fast workers' mean it/s, the straggler's it/s, final test loss) of
    one run's output; raises BenchError if a figure is missing."""
    fast, slow, loss = [], None, None
    for r in bl.results(output):
        if "worker" in r and "it_per_s" in r:
            rate = float(r["it_per_s"])
            if int(r["worker"]) == straggler:
                slow = rate
            else:
                fast.append(rate)
        elif "test_loss" in r:
            loss = float(r["test_loss"])
    if not fast or slow is None or loss is None:
        raise bl.BenchError("missing RESULT lines (workers' it_per_s, "
                            "test_loss) in:\n" + output[-4000:])
    return sum(fast) / len(fast), slow, loss


def draw_chart(rows, png):
    """Iterations per second and final loss per mode, side by side. False
    without matplotlib."""
    plt = bl.pyplot()
    if plt is None:
        return False
    modes = [r["mode"] for r in rows]
    x = list(range(len(rows)))
    fig, (rate, loss) = plt.subplots(1, 2, figsize=(10, 4))
    rate.bar([i - 0.2 for i in x], [float(r["fast_it_per_s"]) for r in rows],
             0.4, label="fast workers (mean)", color="tab:blue")
    rate.bar([i + 0.2 for i in x],
             [float(r["straggler_it_per_s"]) for r in rows], 0.4,
             label="straggler", color="tab:orange")
    rate.set_xticks(x)
    rate.set_xticklabels(modes)
    rate.set_ylabel("iterations per second")
    rate.legend(fontsize=8)
    loss.bar(x, [float(r["final_test_loss"]) for r in rows], 0.6,
             color="tab:green")
    loss.set_xticks(x)
    loss.set_xticklabels(modes)
    loss.set_ylabel("final held-out log-loss")
    fig.suptitle("One workload under each consistency mode, with a straggler",
                 fontsize=10)
    return bl.save_chart(plt, fig, png)


def main(argv=None):
    ap = bl.argument_parser(__doc__)
    ap.add_argument("--out", help="default BUILD/sync_modes")
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--timeout", type=int, default=300,
                    help="seconds one mode's job may take")
    ap.add_argument("extra", nargs="*", help="flags for sync_modes")
    args = ap.parse_args(argv)
    if args.servers < 1 or args.workers < 2:
        ap.error("need at least 1 server and 2 workers")
    build = os.path.abspath(args.build)
    program = os.path.join(build, "examples", "sync_modes")
    if not os.access(program, os.X_OK):
        print("build first: %s is missing" % program, file=sys.stderr)
        return 1
    out = args.out or os.path.join(build, "sync_modes")
    os.makedirs(out, exist_ok=True)
    straggler = args.workers - 1
    runner = bl.Runner(build, args.timeout, out)
    rows = []
    print("%-7s %16s %18s %12s %16s" % ("mode", "fast it/s",
                                         "straggler it/s", "job s",
                                         "test log-loss"), flush=True)
    for mode in MODES:
        start = time.monotonic()
        try:
            output = runner.cluster(args.servers, args.workers, program,
                                    ["--slow_rank=%d" % straggler] +
                                    args.extra, {"EMBER_CONSISTENCY": mode},
                                    log_name=mode.replace(":", "") + ".log")
            fast, slow, loss = summarise(output, straggler)
        except bl.BenchError as e:
            print("%s: run failed: %s" % (mode, e), file=sys.stderr)
            return 1
        job = time.monotonic() - start
        print("%-7s %16.1f %18.1f %12.2f %16.5f" % (mode, fast, slow, job,
                                                    loss), flush=True)
        rows.append({"mode": mode, "fast_it_per_s": "%.1f" % fast,
                     "straggler_it_per_s": "%.1f" % slow,
                     "job_seconds": "%.2f" % job,
                     "final_test_loss": "%.5f" % loss})
    path = os.path.join(out, "sync_modes.csv")
    bl.write_csv(path, CSV_HEADER, rows)
    print("wrote %s (logs in %s)" % (path, out))
    png = os.path.join(out, "sync_modes.png")
    print("wrote " + png if draw_chart(rows, png) else bl.NO_MATPLOTLIB)
    return 0


if __name__ == "__main__":
    sys.exit(main())
