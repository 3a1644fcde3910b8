#!/usr/bin/python3
"""Ember's key-value benchmark against raw ZeroMQ, interleaved in one run.

    /usr/bin/python3 scripts/bench.py [--rounds N] [--out DIR] [--quick] ...

Builds nothing: it runs the programs of an existing build tree
(BUILD/bench/{kv_bench,zmq_baseline,memcpy_baseline,embedding_bench} and the
scheduler). Every round runs each raw ZeroMQ baseline case followed by the
Ember cases compared with it (A B A B ...), so slow drift on a shared machine
hits both sides alike. After the rounds it prints the medians and the
Ember / baseline ratios of the targets, all at 1 server x 1 worker:

  dense 4 MB push, window 8, GB/s      vs raw ZeroMQ 4 MB, window 8
  dense 4 MB pull, window 8, GB/s      vs the same
  sparse 1000 keys x 1 float push, window 8, requests/s
                                       vs raw ZeroMQ messages/s at 12000 B
  4 KB push, window 1, p50 round trip  vs raw ZeroMQ 4096 B, window 1

(for the round trip lower is better: the ratio is Ember's time over
ZeroMQ's). The ratio judged is the median of the per-round ratios, each
round's Ember figure over the baseline run just before it; beside it, the
ratio of the medians, the range of the per-round ratios and best against best
(interference only slows a run down, so a few slow rounds on one side cannot
move that one). Their k-th smallest and largest are a confidence interval for
the median (order statistics, at least 90%: 5 rounds give 94%), and
'settled' judges the target by it: met, missed, or open when the interval
straddles the target.

With no target, it also prints Ember against raw ZeroMQ that spins before it
sleeps as Ember's threads do (zmq_baseline --spin_us); the 4 MB push with
kv_bench's summing handle against plain raw ZeroMQ and against raw ZeroMQ
whose server adds each payload the same way (--server_sums); what that
adding costs raw ZeroMQ; and raw ZeroMQ answered over a second connection,
as Ember answers, against the request's connection. Then the memcpy / gather
/ scatter-add baseline once, and the embedding target: a table of
--embed-rows rows of dim 64 with Adagrad, pull and push + update against a
plain gather / scatter-add over a flat array of the same rows
(embedding_bench, the same rounds in one process; target at least 0.5).
docs/performance.md explains the method.

Then it runs scripts/bench_multi.py (2 x 2 and 4 x 4 against raw ZeroMQ in
the same topology, cost growth, callgrind, CURVE's cost; --no-multi skips
it), its output in bench_multi.txt.

Writes to the output directory: bench_results.csv (the ratio table with
every round's values), bench_ratios.png (with matplotlib: scripts/deps.sh
--bench installs it), memcpy_baseline.txt, and raw/ with every run's output.

--quick is a check that everything runs, in a few minutes, not a
measurement: 3 rounds of 0.3 s, small tables, bench_multi's 1 x 1 and 2 x 2
sparse cases only.

Exit status: 0 when every run produced its figure, 1 otherwise (the table is
still written, with n/a where runs failed), 2 on usage errors.
"""

import datetime
import os
import subprocess
import sys
import textwrap

sys.dont_write_bytecode = True  # No __pycache__ in the source tree.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

CSV_HEADER = ["case", "metric", "ember_median", "baseline", "baseline_median",
              "ratio_of_medians", "ratio", "target", "met", "ember_values",
              "baseline_values", "per_round_ratios", "best_ratio",
              "interval_low", "interval_high", "interval_coverage", "settled"]


def round_runs(handle, spin_us):
    """The runs of one round, in order: (name, key, kind, arguments). kind
    "zmq": (size, window, replies, spin_us, server_sums); "ember": (mode,
    payload, window, handle)."""

    def zmq(name, key, size, window, replies="same", spin=0, sums=False):
        return (name, key, "zmq", (size, window, replies, spin, sums))

    def ember(name, key, payload, window, mode="push", server=handle):
        return (name, key, "ember", (mode, payload, window, server))

    runs = [zmq("zmq_4m_w8", "GB_s", 4194304, 8),
            ember("ember_dense4m_push", "GB_s", "dense_4m", 8),
            ember("ember_dense4m_pull", "GB_s", "dense_4m", 8, "pull")]
    if handle != "sum":
        runs.append(ember("ember_dense4m_push_sum", "GB_s", "dense_4m", 8,
                          server="sum"))
    runs += [zmq("zmq_4m_w8_sum", "GB_s", 4194304, 8, sums=True),
             zmq("zmq_4m_w8_spin", "GB_s", 4194304, 8, spin=spin_us),
             zmq("zmq_12k_w8", "msgs_s", 12000, 8),
             ember("ember_sparse1000x1", "req_s", "sparse_1000x1", 8),
             zmq("zmq_12k_w8_spin", "msgs_s", 12000, 8, spin=spin_us),
             zmq("zmq_12k_w8_separate", "msgs_s", 12000, 8, "separate"),
             zmq("zmq_4k_w1", "p50_us", 4096, 1),
             ember("ember_dense4k_w1", "p50_us", "dense_4k", 1),
             zmq("zmq_4k_w1_spin", "p50_us", 4096, 1, spin=spin_us)]
    return runs


def table_rows(handle, spin_us):
    """The rows of the ratio table: (heading before it or None, case,
    metric, Ember run, baseline description, baseline run, op, target)."""
    rows = [
        (None, "dense 4 MB push w8", "GB_s", "ember_dense4m_push",
         "zmq 4194304 B w8 GB_s", "zmq_4m_w8", ">=", 1.0),
        (None, "dense 4 MB pull w8", "GB_s", "ember_dense4m_pull",
         "zmq 4194304 B w8 GB_s", "zmq_4m_w8", ">=", 0.9),
        (None, "sparse 1000x1 push w8", "req_s", "ember_sparse1000x1",
         "zmq 12000 B w8 msgs_s", "zmq_12k_w8", ">=", 0.55),
        (None, "4 KB push w1 round trip", "p50_us", "ember_dense4k_w1",
         "zmq 4096 B w1 p50_us", "zmq_4k_w1", "<=", 1.3),
    ]
    same_wait = ("no target: Ember / raw ZeroMQ spinning the same way before "
                 "it sleeps\n(zmq_baseline --spin_us=%d; the 'ember' column "
                 "is Ember's same runs):" % spin_us)
    for case, metric, ember, zmq in [
            ("dense 4 MB push w8", "GB_s", "ember_dense4m_push",
             "zmq_4m_w8_spin"),
            ("dense 4 MB pull w8", "GB_s", "ember_dense4m_pull",
             "zmq_4m_w8_spin"),
            ("sparse 1000x1 push w8", "req_s", "ember_sparse1000x1",
             "zmq_12k_w8_spin"),
            ("4 KB push w1 round trip", "p50_us", "ember_dense4k_w1",
             "zmq_4k_w1_spin")]:
        size = {"GB_s": "4194304 B w8", "req_s": "12000 B w8",
                "p50_us": "4096 B w1"}[metric]
        unit = "msgs_s" if metric == "req_s" else metric
        rows.append((same_wait, case + " same-wait", metric, ember,
                     "zmq %s spin %s" % (size, unit), zmq, "", None))
        same_wait = None
    sum_push = "ember_dense4m_push"
    if handle != "sum":
        sum_push = "ember_dense4m_push_sum"
        rows.append(("no target: the 4 MB push with the summing handle "
                     "(Ember's server adds every\npushed value into its "
                     "store) / raw ZeroMQ, whose server does not:",
                     "dense 4 MB push w8 summing", "GB_s", sum_push,
                     "zmq 4194304 B w8 GB_s", "zmq_4m_w8", "", None))
    rows += [
        ("no target: Ember with the summing handle / raw ZeroMQ whose server "
         "adds\neach pushed 4 MB into a store the same way (zmq_baseline "
         "--server_sums):", "dense 4 MB push w8 same-work", "GB_s", sum_push,
         "zmq 4194304 B w8 sums GB_s", "zmq_4m_w8_sum", "", None),
        ("and what that adding costs raw ZeroMQ (the 'ember' column is raw "
         "ZeroMQ adding):", "raw 4 MB push w8 adding", "GB_s",
         "zmq_4m_w8_sum", "zmq 4194304 B w8 GB_s", "zmq_4m_w8", "", None),
        ("topology, no target: raw ZeroMQ answered over a second connection "
         "/ over\nthe request's connection (the 'ember' column is the "
         "former):", "raw 12 KB w8 on 2 connections", "msgs_s",
         "zmq_12k_w8_separate", "zmq 12000 B w8 msgs_s", "zmq_12k_w8", "",
         None),
    ]
    return rows


def judge(case, metric, ember_values, baseline_name, baseline_values, op,
          target, ratios=None, ratio=None, best_ratio="compute"):
    """One row of the table as a dict of CSV_HEADER. Ratios default to the
    per-round ratios of the two value lists; the judged ratio to their
    median; best_ratio to best against best (lower is better for a latency
    or an at-most target)."""
    em = bl.median(ember_values)
    bm = bl.median(baseline_values)
    if ratios is None:
        ratios = bl.per_round_ratios(ember_values, baseline_values)
    if ratio is None:
        ratio = bl.median(ratios)
    if best_ratio == "compute":
        higher = not (op == "<=" or metric == "p50_us")
        best_ratio = bl.quotient(bl.best(ember_values, higher),
                                 bl.best(baseline_values, higher))
    bounds = bl.interval(ratios)
    return {
        "case": case, "metric": metric, "ember_median": bl.fmt_g(em),
        "baseline": baseline_name, "baseline_median": bl.fmt_g(bm),
        "ratio_of_medians": bl.fmt(bl.quotient(em, bm)),
        "ratio": bl.fmt(ratio),
        "target": "%s%g" % (op, target) if op else "",
        "met": bl.meets(ratio, op, target),
        "ember_values": bl.fmt_values(ember_values),
        "baseline_values": bl.fmt_values(baseline_values),
        "per_round_ratios": " ".join(bl.fmt(r) if r is not None else "NA"
                                     for r in ratios),
        "best_ratio": bl.fmt(best_ratio),
        "interval_low": bl.fmt(bounds and bounds[0]),
        "interval_high": bl.fmt(bounds and bounds[1]),
        "interval_coverage": bl.fmt(bounds and bounds[2]),
        "settled": bl.settled(bounds, op, target),
    }


TABLE_FORMAT = "%-44s %10s %10s %8s %6s %10s %9s %7s %4s %15s %7s"


def table_header():
    return TABLE_FORMAT % ("case", "ember", "baseline", "med/med", "ratio",
                           "range", "best/best", "target", "met", "interval",
                           "settled")


def table_line(row, ratios):
    interval = bl.NA
    if row["interval_low"] != bl.NA:
        interval = "%.2f-%.2f %.0f%%" % (float(row["interval_low"]),
                                         float(row["interval_high"]),
                                         100 * float(row["interval_coverage"]))
    return TABLE_FORMAT % (
        "%s (%s)" % (row["case"], row["metric"]), row["ember_median"],
        row["baseline_median"], row["ratio_of_medians"], row["ratio"],
        bl.fmt_span(ratios), row["best_ratio"], row["target"] or "-",
        row["met"], interval, row["settled"])


def draw_chart(rows, png, rounds):
    """The judged rows as bars of their ratio, coloured by their verdict,
    with the confidence interval as an error bar and the target as a mark.
    False when matplotlib is missing."""
    plt = bl.pyplot()
    if plt is None:
        return False
    colours = {"met": "tab:green", "missed": "tab:red", "open": "tab:orange"}
    rows = [r for r in rows if r["target"][:2] in (">=", "<=")]
    labels, ratios, targets, bar_colours = [], [], [], []
    errors = [[], []]
    for r in rows:
        better = ("lower is better" if r["target"].startswith("<=")
                  else "higher is better")
        labels.append(textwrap.fill(r["case"], 20) +
                      "\n%s\n%s" % (r["metric"], better))
        ratio = float(r["ratio"]) if r["ratio"] != bl.NA else 0.0
        ratios.append(ratio)
        if r["interval_low"] != bl.NA and r["ratio"] != bl.NA:
            errors[0].append(max(0.0, ratio - float(r["interval_low"])))
            errors[1].append(max(0.0, float(r["interval_high"]) - ratio))
        else:
            errors[0].append(0.0)
            errors[1].append(0.0)
        targets.append(float(r["target"][2:]))
        # By the interval's verdict; by the median's under 5 rounds.
        verdict = r["settled"]
        if verdict not in colours:
            verdict = {"yes": "met", "no": "missed"}.get(r["met"], bl.NA)
        bar_colours.append(colours.get(verdict, "tab:gray"))
    fig, ax = plt.subplots(figsize=(max(9, 1.9 * len(rows)), 5))
    x = list(range(len(rows)))
    ax.bar(x, ratios, color=bar_colours)
    ax.errorbar(x, ratios, yerr=errors, fmt="none", ecolor="dimgray",
                capsize=5, label="confidence interval for the median (>= 90%)")
    ax.scatter(x, targets, marker="_", s=900, color="tab:blue", linewidths=3,
               zorder=3, label="target")
    for i, ratio in enumerate(ratios):
        ax.annotate("%.2f" % ratio, (i + 0.08, ratio), ha="left",
                    va="center", fontsize=9,
                    bbox=dict(boxstyle="round,pad=0.15", fc="white",
                              ec="none", alpha=0.8))
    for verdict, colour in colours.items():
        ax.bar([0], [0], color=colour, label="settled: " + verdict)
    ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("Ember / baseline")
    ax.set_title("Ember against raw ZeroMQ (1 server x 1 worker) and a plain "
                 "gather / scatter-add (embedding), medians of %d rounds" %
                 rounds, fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
              markerscale=0.4)
    return bl.save_chart(plt, fig, png)


class Bench:
    """One run of the benchmark: the rounds, then the tables."""

    def __init__(self, args):
        self.args = args
        self.raw = os.path.join(args.out, "raw")
        self.runner = bl.Runner(args.build, args.case_timeout, self.raw)
        self.values = {}  # run name -> its figure per round (None: failed)
        self.failed = False

    def fail(self, message):
        print("bench.py: " + message, file=sys.stderr, flush=True)
        self.failed = True

    def one_run(self, round_number, name, key, kind, params):
        a = self.args
        log = "%s.round%d.log" % (name, round_number)
        if kind == "zmq":
            size, window, replies, spin, sums = params
            argv = [self.runner.program("bench", "zmq_baseline"),
                    "--sizes=%d" % size, "--windows=%d" % window,
                    "--directions=push", "--replies=" + replies,
                    "--spin_us=%d" % spin,
                    "--server_sums=" + ("true" if sums else "false"),
                    "--seconds=%g" % a.seconds,
                    "--warmup_seconds=%g" % a.warmup]
            run = lambda: self.runner.run(argv, log_name=log)  # noqa: E731
        else:
            mode, payload, window, handle = params
            flags = ["--mode=" + mode, "--payload=" + payload,
                     "--window=%d" % window, "--handle=" + handle,
                     "--seconds=%g" % a.seconds,
                     "--warmup_seconds=%g" % a.warmup]
            run = lambda: self.runner.cluster(  # noqa: E731
                1, 1, self.runner.program("bench", "kv_bench"), flags,
                log_name=log)
        try:
            value = bl.figure(run(), key)
        except bl.BenchError as e:
            self.fail("round %d, %s failed: %s" % (round_number, name,
                                                   str(e).split("\n")[0]))
            value = None
        self.values.setdefault(name, []).append(value)
        print("  %-22s %-8s %s" % (name, key, bl.fmt_g(value)), flush=True)

    def rounds(self):
        runs = round_runs(self.args.handle, self.args.spin_us)
        for r in range(1, self.args.rounds + 1):
            print("round %d/%d" % (r, self.args.rounds), flush=True)
            for name, key, kind, params in runs:
                self.one_run(r, name, key, kind, params)

    def ratio_table(self):
        a = self.args
        print("\nEmber / raw ZeroMQ, 1 server x 1 worker, medians of %d rounds"
              % a.rounds)
        print(textwrap.dedent("""\
            (ratio: the median of the per-round ratios, each round's Ember run
            against the baseline run just before it, which is what 'met'
            judges; the ratio of the medians, the range of the per-round
            ratios and the ratio of the best figures, best/best, are shown
            beside it). 'interval' is a distribution-free confidence interval
            for the median per-round ratio (order statistics, at least 90%;
            n/a under 5 rounds) and 'settled' judges the target by it: met,
            missed, or open when the interval straddles the target."""))
        print(table_header())
        rows = []
        for heading, case, metric, ember, base_name, base, op, target in \
                table_rows(a.handle, a.spin_us):
            if heading:
                print(heading)
            e = self.values.get(ember, [])
            b = self.values.get(base, [])
            row = judge(case, metric, e, base_name, b, op, target)
            print(table_line(row, bl.per_round_ratios(e, b)), flush=True)
            rows.append(row)
        return rows

    def memcpy(self):
        print("\nmemcpy / gather / scatter-add baseline (once):")
        argv = [self.runner.program("bench", "memcpy_baseline")]
        argv += self.args.memcpy_args.split()
        path = os.path.join(self.args.out, "memcpy_baseline.txt")
        try:
            out = self.runner.run(argv, log_name="memcpy_baseline.log",
                                  timeout=3 * self.args.case_timeout)
        except bl.BenchError as e:
            self.fail("memcpy_baseline failed: " + str(e).split("\n")[0])
            out = ""
        lines = ["RESULT " + m.group(1) for m in bl.RESULT.finditer(out)]
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
        for line in lines:
            print("  " + line)
        print("wrote " + path)

    def embedding(self):
        """The embedding target's rows, judged like the rest: the ratios are
        embedding_bench's own per-round ones (both sides run in turns in one
        process)."""
        a = self.args
        print("\nembedding table (dim 64, %d rows, Adagrad, %d rounds) / "
              "plain\ngather or scatter-add over a flat array of the same rows "
              "(embedding_bench):" % (a.embed_rows, a.rounds))
        print(table_header())
        argv = [self.runner.program("bench", "embedding_bench"),
                "--rows=%d" % a.embed_rows, "--dims=64",
                "--optimizers=adagrad", "--memory_rows=0",
                "--rounds=%d" % a.rounds] + a.embed_args.split()
        try:
            out = self.runner.run(argv, log_name="embedding_bench.log",
                                  timeout=5 * a.case_timeout)
            found = bl.results(out, "op")
            if not found:
                raise bl.BenchError("no RESULT op= line")
        except bl.BenchError as e:
            self.fail("embedding_bench failed: " + str(e).split("\n")[0])
            return []
        rows = []
        for f in found:
            try:
                ratios = [float(x) for x in f["ratios"].split(",")]
                row = judge("embedding %s dim 64 adagrad" % f["op"], "rows_s",
                            [float(f["rows_s"])],
                            "flat-array %s rows_s" % f["baseline"],
                            [float(f["baseline_rows_s"])], ">=", 0.5,
                            ratios=ratios, ratio=float(f["ratio"]),
                            best_ratio=None)
            except (KeyError, ValueError) as e:
                self.fail("embedding_bench: a RESULT line lacks %s" % e)
                continue
            # One figure per side, not per round: the values are the
            # medians embedding_bench printed.
            row["ember_values"] = row["baseline_values"] = ""
            print(table_line(row, ratios), flush=True)
            rows.append(row)
        return rows

    def multi(self):
        a = self.args
        print("\n== more than one server (scripts/bench_multi.py)", flush=True)
        argv = ["/usr/bin/python3",
                os.path.join(bl.ROOT, "scripts", "bench_multi.py"),
                "--build", a.build, "--rounds", str(a.multi_rounds),
                "--seconds", "%g" % a.multi_seconds, "--out", a.out]
        if a.multi_only:
            argv += ["--only", a.multi_only]
        if a.pslite:
            argv += ["--pslite", a.pslite]
        path = os.path.join(a.out, "bench_multi.txt")
        with open(path, "w", encoding="utf-8") as f:
            p = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
            for line in p.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                f.write(line)
            status = p.wait()
        if status != 0:
            self.fail("bench_multi.py failed (its output is in %s)" % path)

    def main(self):
        a = self.args
        os.makedirs(self.raw, exist_ok=True)
        commit = subprocess.run(["git", "-C", bl.ROOT, "rev-parse", "--short",
                                 "HEAD"], capture_output=True, text=True)
        print("# bench.py: %s UTC, commit %s, %s cores" % (
            datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M:%S"),
            commit.stdout.strip() or "unknown", os.cpu_count()))
        print("# build %s, %d rounds, %g s measured + %g s warm-up per run, "
              "1 server x 1 worker, handle=%s, EMBER_SPIN_US=%d" %
              (a.build, a.rounds, a.seconds, a.warmup, a.handle, a.spin_us))
        print("# load average at start: " + load_average(), flush=True)
        self.rounds()
        rows = self.ratio_table()
        print("# load average at end: " + load_average())
        if a.memcpy:
            self.memcpy()
        if a.embed_rows > 0:
            rows += self.embedding()
        csv_path = os.path.join(a.out, "bench_results.csv")
        bl.write_csv(csv_path, CSV_HEADER, rows)
        print("wrote " + csv_path)
        png = os.path.join(a.out, "bench_ratios.png")
        if draw_chart(rows, png, a.rounds):
            print("wrote " + png)
        else:
            print(bl.NO_MATPLOTLIB)
        if a.multi:
            self.multi()
        if self.failed:
            print("bench.py: some runs failed; their figures are n/a (raw "
                  "output in %s)" % self.raw, file=sys.stderr)
            return 1
        return 0


def load_average():
    try:
        with open("/proc/loadavg", encoding="utf-8") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


# Options whose default comes from an environment variable of the same name
# as their metavar (the settings of the shell script this replaced): one a
# line, "flag VARIABLE type default | help" ("-" for an empty default).
ENV_OPTIONS = """
--out OUT_DIR str bench-out | the output directory
--rounds ROUNDS int 5 | at least 3 (default 5: fewer give no interval)
--seconds BENCH_SECONDS float 3 | measured seconds per run (default 3)
--warmup BENCH_WARMUP float 1 | warm-up seconds per run (default 1)
--handle BENCH_HANDLE str empty | kv_bench's server handle for the judged
  cases, empty or sum (default empty, as ps-lite's benchmark measured)
--spin-us EMBER_SPIN_US int 200 | Ember's spin before sleeping, also given to
  the spinning raw baseline (default 200, Ember's default)
--memcpy-args MEMCPY_ARGS str - | extra flags for memcpy_baseline, e.g.
  --table_rows=1000000
--embed-rows EMBED_ROWS int 10000000 | rows of the embedding case (default
  10 M, about 8 GB with its flat baseline; 0 skips it)
--case-timeout CASE_TIMEOUT int 60 | hard limit in seconds for one run
  (default 60)
--pslite BENCH_PSLITE str - | folder with pslite_api_bench built against
  ps-lite (docs/performance.md)
"""


def env_options():
    """ENV_OPTIONS as (flag, variable, type, default, help)."""
    out = []
    for line in ENV_OPTIONS.strip().split("\n"):
        if line.startswith("  "):  # The help goes on.
            out[-1][4] += " " + line.strip()
            continue
        words, _, text = line.partition(" | ")
        flag, variable, kind, default = words.split()
        out.append([flag, variable, {"str": str, "int": int,
                                     "float": float}[kind],
                    "" if default == "-" else default, text])
    return out


def parse_args(argv):
    env = os.environ.get
    ap = bl.argument_parser(__doc__)
    ap.epilog = ("The upper-case metavars are also environment variables that "
                 "set the defaults (BUILD_DIR for --build); flags win.")
    ap.set_defaults(build=env("BUILD_DIR", ap.get_default("build")))
    for flag, variable, kind, default, text in env_options():
        ap.add_argument(flag, metavar=variable, type=kind,
                        default=env(variable, default), help=text)
    ap.add_argument("--embed-args", default="",
                    help="extra flags for embedding_bench")
    ap.add_argument("--no-memcpy", dest="memcpy", action="store_false",
                    default=env("BENCH_MEMCPY", "1") != "0",
                    help="skip the memcpy baseline (BENCH_MEMCPY=0)")
    ap.add_argument("--no-multi", dest="multi", action="store_false",
                    default=env("BENCH_MULTI", "1") != "0",
                    help="skip scripts/bench_multi.py (BENCH_MULTI=0)")
    ap.add_argument("--multi-only", default="",
                    help="bench_multi.py's --only (default: every part)")
    ap.add_argument("--quick", action="store_true",
                    help="a check that everything runs, not a measurement")
    ap.set_defaults(multi_rounds=None, multi_seconds=None)
    a = ap.parse_args(argv)
    if a.quick:
        # Defaults for a check that everything runs; flags still win.
        ap.set_defaults(rounds=3, seconds=0.3, warmup=0.1,
                        embed_rows=min(a.embed_rows, 100000),
                        embed_args="--seconds=0.05",
                        memcpy_args="--table_rows=100000 --seconds=0.1 "
                        "--cold_bytes=8388608", multi_only="sparse",
                        multi_rounds=1, multi_seconds=0.3)
        a = ap.parse_args(argv)
    if a.multi_rounds is None:
        a.multi_rounds, a.multi_seconds = a.rounds, a.seconds
    if a.handle not in ("empty", "sum"):
        ap.error("--handle must be empty or sum, got " + a.handle)
    if a.rounds < 3:
        ap.error("--rounds must be at least 3, got %d" % a.rounds)
    if a.seconds <= 0 or a.warmup < 0:
        ap.error("--seconds must be > 0 and --warmup >= 0")
    if a.spin_us < 0:
        ap.error("--spin-us must be >= 0")
    if a.case_timeout < 10:
        ap.error("--case-timeout must be at least 10")
    a.build = os.path.abspath(a.build)
    return a


def main(argv=None):
    a = parse_args(argv)
    missing = [p for p in [os.path.join(a.build, "bench", n) for n in
                           ("kv_bench", "zmq_baseline", "memcpy_baseline",
                            "embedding_bench")] +
               [os.path.join(a.build, "scheduler", "ember_scheduler")]
               if not os.access(p, os.X_OK)]
    if missing:
        for p in missing:
            print("bench.py: %s is missing" % p, file=sys.stderr)
        print("bench.py: build first, e.g. cmake --build %s (this script "
              "builds nothing)" % a.build, file=sys.stderr)
        return 2
    # One value for Ember's runs and the spinning baseline's.
    os.environ["EMBER_SPIN_US"] = str(a.spin_us)
    return Bench(a).main()


if __name__ == "__main__":
    sys.exit(main())
