"""What Ember's benchmark tooling shares: statistics over rounds, RESULT
lines, CSV, running programs and clusters with a time limit, callgrind's
counts and matplotlib.

scripts/bench.py, scripts/bench_multi.py, scripts/callgrind.py and
scripts/sync_modes.py import it; tests/scripts/benchlib_test.py checks it on
hand-worked inputs. Standard library only (matplotlib is loaded on demand,
and its absence is an answer, not an error); runs on Debian's
/usr/bin/python3.
"""

import argparse
import csv
import math
import os
import re
import shutil
import socket
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCAL_SH = os.path.join(ROOT, "scripts", "local.sh")
NA = "n/a"


class BenchError(Exception):
    """A run failed or printed no figure; the message carries its output."""


# ------------------------------------------------------------ statistics --
# Every function below takes the figures of several rounds, in which a
# failed run is None (or any value that is not a finite number), and skips
# those.


def numbers(values):
    """The finite numbers among `values`, ascending."""
    out = []
    for v in values:
        if isinstance(v, bool):
            continue
        try:
            x = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(x):
            out.append(x)
    return sorted(out)


def median(values):
    """The median of the numbers in `values`, or None without any."""
    v = numbers(values)
    if not v:
        return None
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def interval(values, least_coverage=0.9):
    """A distribution-free confidence interval for the median of `values`,
    assuming the rounds are independent: the k-th smallest and the k-th
    largest, with k as large as keeps the coverage, 1 - 2 P(Binomial(n, 1/2)
    < k), at least `least_coverage`. (low, high, coverage), or None when even
    k = 1 covers too little (under 5 values at 90%: 4 give 87.5%). 5 values
    give 93.8% (k = 1), 9 give 96.1% (k = 2), 15 give 96.5% (k = 4)."""
    v = numbers(values)
    n = len(v)
    found = None
    tail = 0.0  # P(Binomial(n, 1/2) < k), built up term by term.
    for k in range(1, n // 2 + 1):
        tail += math.comb(n, k - 1) / 2.0 ** n
        coverage = 1 - 2 * tail
        if coverage < least_coverage:
            break
        found = (v[k - 1], v[n - k], coverage)
    return found


def meets(ratio, op, target):
    """Whether a median ratio meets `op target` ("yes" or "no"); "n/a"
    without a ratio, "-" without a target. op is ">=" or "<=" or ""."""
    if ratio is None:
        return NA
    if not op:
        return "-"
    ok = ratio >= target if op == ">=" else ratio <= target
    return "yes" if ok else "no"


def settled(bounds, op, target):
    """Whether the interval (low, high, ...) meets the target ("met"),
    misses it ("missed") or straddles it ("open"); "-" without a target,
    "n/a" without an interval."""
    if not op:
        return "-"
    if bounds is None:
        return NA
    low, high = bounds[0], bounds[1]
    if op == ">=":
        return "met" if low >= target else "missed" if high < target else "open"
    return "met" if high <= target else "missed" if low > target else "open"


def best(values, higher_is_better):
    """The best of the numbers in `values`, or None."""
    v = numbers(values)
    if not v:
        return None
    return v[-1] if higher_is_better else v[0]


def quotient(x, y):
    """x / y, or None when either is missing or y is 0."""
    if x is None or y is None or y == 0:
        return None
    return x / y


def per_round_ratios(ember, baseline):
    """ember[i] / baseline[i], round by round; None where either failed."""
    out = []
    for i, e in enumerate(ember):
        b = baseline[i] if i < len(baseline) else None
        out.append(quotient(e, b))
    return out


def fmt(value, spec=".3f"):
    """`value` formatted by `spec`, or "n/a" for None."""
    return NA if value is None else format(value, spec)


def fmt_g(value):
    """A figure in 6 significant digits (as %.6g), or "n/a"."""
    return fmt(value, ".6g")


def fmt_span(values):
    """"min-max" of the numbers in `values` to 2 decimals, or "n/a"."""
    v = numbers(values)
    return "%.2f-%.2f" % (v[0], v[-1]) if v else NA


def fmt_values(values):
    """Space-separated figures of the rounds, NA for a failed run."""
    return " ".join("NA" if numbers([v]) == [] else "%.6g" % v
                    for v in values)


# ---------------------------------------------------------- RESULT lines --

RESULT = re.compile(r"RESULT (.*)$", re.M)


def result_fields(line):
    """The key=value items of one RESULT line (or any line) as a dict;
    items without '=' are skipped."""
    out = {}
    for item in line.split():
        key, eq, value = item.partition("=")
        if eq:
            out[key] = value
    return out


def results(text, first_key=None):
    """Every RESULT line of `text` (a program's output, possibly prefixed
    with "[role rank] " by the launcher) as a dict, in order. With
    `first_key`, only the lines whose first item has that key."""
    out = []
    for m in RESULT.finditer(text):
        body = m.group(1)
        if first_key and not body.startswith(first_key + "="):
            continue
        out.append(result_fields(body))
    return out


def figure(text, key):
    """The float value of `key` in the last RESULT line of `text`; raises
    BenchError when there is none."""
    found = results(text)
    if not found or key not in found[-1]:
        raise BenchError("no RESULT line with %s in:\n%s" % (key, text[-4000:]))
    try:
        return float(found[-1][key])
    except ValueError:
        raise BenchError("%s=%s is not a number" % (key, found[-1][key]))


def emit(label, fields):
    """Prints a machine-readable RESULT line: label, then key=value items."""
    print("RESULT " + label + " " +
          " ".join("%s=%s" % (k, v) for k, v in fields), flush=True)


# ------------------------------------------------------------------- CSV --


def write_csv(path, header, rows):
    """Writes `rows` (lists or dicts keyed by `header`) under `header`."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        for row in rows:
            w.writerow([row.get(h, "") for h in header]
                       if isinstance(row, dict) else row)


def read_csv(path):
    """The rows of a CSV file with a header, as dicts."""
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------- processes --


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (for programs that
    cannot publish the port they bound, as ps-lite's scheduler cannot)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Runner:
    """Runs benchmark programs, each with a hard time limit, and clusters of
    them through scripts/local.sh (the launcher)."""

    def __init__(self, build, timeout, log_dir=None):
        """build: the build tree; timeout: seconds one run may take before it
        is killed; log_dir: where each named run's output is kept."""
        self.build = build
        self.timeout = timeout
        self.log_dir = log_dir

    def program(self, *parts):
        return os.path.join(self.build, *parts)

    def run(self, argv, env_extra=None, log_name=None, timeout=None):
        """Runs argv to its end and returns its output (stdout and stderr).
        Raises BenchError on a non-zero exit or a timeout. With `log_name`
        and a log_dir, the output is also kept in log_dir/log_name."""
        env = dict(os.environ)
        env.update(env_extra or {})
        limit = timeout or self.timeout
        failure = None
        try:
            p = subprocess.run(argv, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=env,
                               timeout=limit, check=False)
            out = p.stdout.decode(errors="replace")
            if p.returncode != 0:
                failure = "exit status %d" % p.returncode
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode(errors="replace")
            failure = "timed out after %ds" % limit
        where = ""
        if log_name and self.log_dir:
            path = os.path.join(self.log_dir, log_name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(out)
            where = "; see " + path
        if failure:
            raise BenchError("%s: %s%s\n%s" % (failure, " ".join(argv), where,
                                               out[-4000:]))
        return out

    def cluster(self, servers, workers, program, args, env_extra=None,
                program_scheduler=False, log_name=None):
        """Runs `program args` as the servers and workers of a local cluster
        (and as its scheduler too with program_scheduler, on a fixed free
        port, as ps-lite's programs need). The launcher stops the cluster
        itself a little before the hard limit."""
        env = {"EMBER_TIMEOUT": str(max(1, self.timeout - 5)),
               "EMBER_BUILD_DIR": self.build}
        if program_scheduler:
            env["EMBER_PROGRAM_SCHEDULER"] = "1"
            env["DMLC_PS_ROOT_PORT"] = str(free_port())
        else:
            env["EMBER_SCHEDULER"] = self.program("scheduler",
                                                  "ember_scheduler")
        env.update(env_extra or {})
        return self.run([LOCAL_SH, str(servers), str(workers), program] +
                        list(args), env, log_name)


# ------------------------------------------------------------- callgrind --


def have_valgrind():
    return shutil.which("valgrind") is not None


def callgrind_wrapper(directory, program):
    """Writes directory/wrap.sh, which runs `program` under callgrind with
    its output in $CG_DIR/<role>.<pid>.out ($DMLC_ROLE, set by the
    launcher), and returns its path: the launcher runs the same program as
    every role, and this puts each process under callgrind."""
    wrap = os.path.join(directory, "wrap.sh")
    with open(wrap, "w", encoding="utf-8") as f:
        f.write("#!/bin/sh\nexec valgrind --tool=callgrind "
                "--callgrind-out-file=\"$CG_DIR/$DMLC_ROLE.%%p.out\" "
                "\"%s\" \"$@\"\n" % program)
    os.chmod(wrap, 0o755)
    return wrap


# Valgrind serialises threads and runs programs tens of times slower: give
# heartbeats room. Waiting threads do not spin: a spin's polls depend on
# timing and would make the counts vary from run to run.
CALLGRIND_ENV = {"EMBER_HEARTBEAT_TIMEOUT_MS": "120000", "EMBER_SPIN_US": "0"}


def parse_callgrind_total(path):
    """The total instructions of a callgrind output file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise BenchError("no summary in " + path)


def role_total(directory, role, count=1):
    """The instructions of the `count` processes of `role` profiled in
    `directory` (as callgrind_wrapper names the files), summed; each file
    holds all threads of its process."""
    found = [x for x in os.listdir(directory) if x.startswith(role + ".")]
    if len(found) != count:
        raise BenchError("expected %d %s profile(s) in %s, found %d" %
                         (count, role, directory, len(found)))
    return sum(parse_callgrind_total(os.path.join(directory, x))
               for x in found)


def per_request(total_n1, total_n2, n1, n2):
    """Instructions of one request: the difference of two runs of n1 and n2
    requests over n2 - n1, which leaves out start-up and shutdown."""
    return (total_n2 - total_n1) / (n2 - n1)


def argument_parser(doc):
    """An ArgumentParser whose --help prints the tool's whole docstring, with
    --build (the build tree whose programs run; default build/)."""
    ap = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="the build tree (default: build)")
    return ap


# ------------------------------------------------------------ matplotlib --


def pyplot():
    """matplotlib.pyplot on the Agg backend (files, no display), or None
    when matplotlib is not installed (scripts/deps.sh --bench installs
    Debian's python3-matplotlib)."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_chart(plt, fig, png):
    """Lays out `fig`, writes it to `png` and frees it; True."""
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return True


NO_MATPLOTLIB = ("note: matplotlib not found; chart skipped (the CSV has the "
                 "same figures; scripts/deps.sh --bench installs it)")
