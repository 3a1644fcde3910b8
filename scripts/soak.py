#!/usr/bin/python3
"""Soak: a job of S servers x W workers pushing and pulling for N minutes,
with every process's resident memory and open file descriptors sampled.

usage: soak.py [--minutes N] [--servers S] [--workers W] [--build DIR]
               [--interval SECONDS] [--warmup SECONDS] [--max-growth F]

The job is tests/integration/cluster_soak of the build tree (every worker
pushes and pulls 2000 keys in a loop), started by scripts/local.sh. Each
process's memory (VmRSS) and descriptor count (/proc/PID/fd) are sampled every
--interval seconds. After --warmup (the first minute by default) both must
stay flat: the median of the last samples may exceed the median of the first
samples after the warmup by at most --max-growth (5 %) and, for memory, by at
most --slack-mb (1 MiB) more, since a process of 20 MiB cannot be asked to
stay within 1 MiB's pages. It fails on growth, on a job that fails, and on a
process that ends early, printing every process's log.

Exit status: 0 flat, 1 growth or a failed job, 2 usage errors.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def children_of(pid):
    """Every descendant of `pid` (from /proc/*/stat)."""
    parent = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
        except OSError:
            continue
        # The command may hold spaces and parentheses: ppid follows the last ')'.
        fields = stat[stat.rfind(")") + 2:].split()
        parent[int(entry)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        found += kids
        frontier += kids
    return found


def node_of(pid):
    """(role, index) of an Ember node process, from its environment; None
    for other processes (the launcher's helpers)."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read().split(b"\0")
                       if b"=" in item)
        with open("/proc/%d/comm" % pid) as f:
            comm = f.read().strip()
    except OSError:
        return None
    role = env.get(b"DMLC_ROLE")
    if role is None or comm in ("sh", "bash", "stdbuf", "python3"):
        return None
    return (role.decode(), int(env.get(b"EMBER_RANK_HINT", b"0") or 0))


def sample(pid):
    """(resident KiB, open descriptors), or None if the process is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            rss = next(int(line.split()[1]) for line in f
                       if line.startswith("VmRSS:"))
        fds = len(os.listdir("/proc/%d/fd" % pid))
    except (OSError, StopIteration):
        return None
    return rss, fds


def growth(samples, warmup_s, window):
    """samples: [(t, value)]. The medians of the first `window` samples after
    the warmup and of the last `window`, and the growth ratio."""
    after = [v for t, v in samples if t >= warmup_s]
    if len(after) < 2 * window:
        return None
    first = statistics.median(after[:window])
    last = statistics.median(after[-window:])
    return first, last, (last - first) / first if first else 0.0


def judge(series, warmup_s, window, max_growth, slack_kib):
    """series: {(role, index): [(t, rss_kib, fds)]}. Returns (lines, ok)."""
    lines, ok = [], True
    lines.append("%-12s %10s %10s %8s %6s %6s %8s" %
                 ("process", "rss first", "rss last", "growth", "fds", "fds",
                  "growth"))
    for node in sorted(series):
        points = series[node]
        rss = growth([(t, r) for t, r, _ in points], warmup_s, window)
        fds = growth([(t, f) for t, _, f in points], warmup_s, window)
        name = "%s %d" % node
        if rss is None or fds is None:
            lines.append("%-12s too few samples after the warmup (%d)" %
                         (name, len(points)))
            ok = False
            continue
        rss_bad = rss[1] - rss[0] > max_growth * rss[0] + slack_kib
        fds_bad = fds[1] > fds[0] * (1 + max_growth)
        lines.append("%-12s %7.1f MB %7.1f MB %+7.1f%% %6d %6d %+7.1f%%%s" %
                     (name, rss[0] / 1024, rss[1] / 1024, 100 * rss[2],
                      fds[0], fds[1], 100 * fds[2],
                      "  GROWS" if rss_bad or fds_bad else ""))
        ok = ok and not (rss_bad or fds_bad)
    return lines, ok


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--interval", type=float, default=5)
    ap.add_argument("--warmup", type=float, default=60)
    ap.add_argument("--window", type=int, default=6,
                    help="samples in each median")
    ap.add_argument("--max-growth", type=float, default=0.05)
    ap.add_argument("--slack-mb", type=float, default=1)
    args = ap.parse_args(argv)
    seconds = args.minutes * 60
    if seconds <= args.warmup + 2 * args.window * args.interval:
        ap.error("--minutes leaves too few samples after --warmup")
    program = os.path.join(args.build, "tests", "integration", "cluster_soak")
    scheduler = os.path.join(args.build, "scheduler", "ember_scheduler")
    for path in (program, scheduler):
        if not os.access(path, os.X_OK):
            ap.error("no %s (build first)" % path)
    with tempfile.TemporaryDirectory(prefix="ember-soak.") as logs:
        env = dict(os.environ, EMBER_SCHEDULER=scheduler, EMBER_LOG_DIR=logs,
                   EMBER_TIMEOUT=str(int(seconds + 120)))
        # The job runs a little longer than the sampling, so every sample
        # sees a busy job.
        argv = [os.path.join(ROOT, "scripts", "local.sh"), str(args.servers),
                str(args.workers), program,
                "--seconds=%d" % int(seconds + 10)]
        out = open(os.path.join(logs, "launcher.out"), "w")
        job = subprocess.Popen(argv, env=env, stdout=out,
                               stderr=subprocess.STDOUT)
        series, expected = {}, args.servers + args.workers + 1
        start = time.monotonic()
        failed = None
        try:
            while time.monotonic() - start < seconds:
                if job.poll() is not None:
                    failed = "the job ended early with status %d" % job.returncode
                    break
                t = time.monotonic() - start
                for pid in children_of(job.pid):
                    node = node_of(pid)
                    s = sample(pid) if node else None
                    if s:
                        series.setdefault(node, []).append((t, s[0], s[1]))
                time.sleep(args.interval)
            if failed is None and len(series) != expected:
                failed = "found %d of %d processes" % (len(series), expected)
            status = job.wait(timeout=120) if failed is None else None
            if failed is None and status != 0:
                failed = "the job ended with status %d" % status
        finally:
            if job.poll() is None:
                job.terminate()
                try:
                    job.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    job.kill()
                    job.wait()
            out.close()
        lines, flat = judge(series, args.warmup, args.window, args.max_growth,
                            args.slack_mb * 1024)
        print("soak.py: %d x %d for %.1f min, sampled every %g s after %g s "
              "of warmup" % (args.servers, args.workers, args.minutes,
                             args.interval, args.warmup))
        print("\n".join(lines))
        if failed or not flat:
            for name in sorted(os.listdir(logs)):
                with open(os.path.join(logs, name), errors="replace") as f:
                    text = f.read()
                print("---- %s (last 3000 characters)\n%s" %
                      (name, text[-3000:]))
            print("soak.py: FAIL: " + (failed or "memory or descriptors grow"))
            return 1
    print("soak.py: PASS: memory and descriptors flat")
    return 0


if __name__ == "__main__":
    sys.exit(main())
