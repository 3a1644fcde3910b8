#!/usr/bin/python3
"""The cost of metrics on the 2 x 2 sparse push benchmark.

usage: scripts/bench_metrics.py [--build DIR] [--rounds N] [--seconds S]
           [--no-scrape] [--callgrind [--req-s R] [--n1 N] [--n2 N]
           [--repeat K] [--scrape-interval S]]

Runs bench/pslite_api_bench (2 servers, 2 workers, pushes of 1000 random
keys, 8 in flight per worker) alternately with metrics off and with
EMBER_METRICS_PORT=0 and every node's /metrics fetched once a second (what a
Prometheus scraping each second does), N rounds of each, interleaved, and
prints each round's requests/s, the medians and their ratio (on/off) as a
RESULT line. Standard library only; /usr/bin/python3.

With --callgrind, the same case runs under valgrind's callgrind instead,
which counts instructions (deterministic, unlike times on a shared machine),
with EMBER_REPLICAS=0 (replication is measured elsewhere): metrics off,
metrics on without scrapes, and metrics on scraped every second, each with
--n1 and --n2 requests per worker. The difference of the two counts over the
requests in between is the cost of one request, start-up and shutdown left
out (as scripts/callgrind.py does); the scraped run against the unscraped one
at the same request count, over the scrapes each node answered, is the cost
of one scrape. Under callgrind a second holds far fewer requests than in a
real run, so the scrapes are not compared per second there: one scrape per
node per second is set against the requests of one second at the request rate
of the wall-clock run (--req-s, or the median with metrics off of --rounds
wall-clock rounds run first). Prints the figures and a RESULT line.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.dont_write_bytecode = True  # No __pycache__ in the source tree.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVERS, WORKERS = 2, 2
ROLES = ("worker", "server")
CASE = ["mode=push", "keys=1000", "window=8"]


def parse_serves(line):
    """(role, url) of a node's "metrics: <role> serves http://..." log line
    (as the launcher relays it, prefixed or not), or None."""
    if " serves http://" not in line:
        return None
    head, _, tail = line.partition(" serves ")
    words = head.split()
    return (words[-1] if words else "", tail.split()[0])


def run(build, seconds, metrics, scrape=True, program=None, requests=0,
        env_extra=None, timeout=None, scrape_timeout=2.0, interval=1.0):
    """Runs the case once, for `seconds` (or with `requests` per worker, for
    callgrind; `program` then is its wrapper); with `metrics`, every node's
    /metrics is fetched every `interval` seconds unless not `scrape`.
    Returns the workers' summed requests/s and {role: scrapes its nodes
    answered}."""
    env = dict(os.environ)
    env["EMBER_SCHEDULER"] = os.path.join(build, "scheduler", "ember_scheduler")
    env["EMBER_TIMEOUT"] = str(timeout or int(seconds) + 60)
    if metrics:
        env["EMBER_METRICS_PORT"] = "0"
    env.update(env_extra or {})
    length = (["requests=%d" % requests] if requests else
              ["seconds=%g" % seconds, "warmup=0.5"])
    proc = subprocess.Popen(
        ["/usr/bin/python3", os.path.join(ROOT, "scripts", "ember_launch.py"),
         "-n", str(WORKERS), "-s", str(SERVERS),
         program or os.path.join(build, "bench", "pslite_api_bench")] +
        CASE + length, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    lines, urls, scrapes = [], {}, {}
    stop = threading.Event()

    def scraper():
        while not stop.wait(interval):
            for u, role in list(urls.items()):
                try:
                    with urllib.request.urlopen(
                            u, timeout=scrape_timeout) as r:
                        r.read()
                    scrapes[role] = scrapes.get(role, 0) + 1
                except OSError:
                    pass

    t = threading.Thread(target=scraper, daemon=True)
    if scrape:
        t.start()
    for line in proc.stdout:
        lines.append(line)
        served = parse_serves(line)
        if served:
            urls[served[1]] = served[0]
    rc = proc.wait()
    stop.set()
    if scrape:
        t.join()
    rates = [float(l.split("req_s=")[1].split()[0]) for l in lines
             if "PSBENCH" in l]
    if rc != 0 or len(rates) != WORKERS:
        sys.stdout.write("".join(lines))
        raise SystemExit("bench_metrics: the job failed (rc %d)" % rc)
    if metrics and scrape and not scrapes:
        raise SystemExit("bench_metrics: no scrape succeeded")
    return sum(rates), scrapes


def scrape_cost(unscraped, scraped, scrapes):
    """Instructions of one scrape of one node, per role: the extra
    instructions of the scraped runs over the unscraped ones at the same
    request counts, summed over the runs, over the scrapes the role's nodes
    answered in them. unscraped and scraped: [{role: instructions}] per
    request count; scrapes: [{role: count}] likewise."""
    out = {}
    for role in ROLES:
        extra = sum(s[role] - u[role] for u, s in zip(unscraped, scraped))
        n = sum(c.get(role, 0) for c in scrapes)
        out[role] = bl.quotient(extra, n)
    return out


def derive(off, on, per_scrape, req_s, nodes=None, scrapes_per_s=1.0):
    """The cost of metrics at `req_s` requests/s (the job's, all workers),
    with each node scraped `scrapes_per_s` times a second. off, on:
    {role: instructions per request, data path}; per_scrape: {role:
    instructions of one scrape of one node}; nodes: {role: how many}.
    Returns {role and "total": (data-path ratio on/off, the scrapes'
    instructions per request, the whole ratio (on + scrapes) / off)}."""
    nodes = nodes or {"worker": WORKERS, "server": SERVERS}
    out = {}
    for role in ROLES:
        scr = nodes[role] * scrapes_per_s * per_scrape[role] / req_s
        out[role] = (on[role] / off[role], scr, (on[role] + scr) / off[role])
    o, n = sum(off.values()), sum(on.values())
    scr = sum(out[r][1] for r in ROLES)
    out["total"] = (n / o, scr, (n + scr) / o)
    return out


def per_request_range(runs1, runs2, n1, n2):
    """Instructions per request of one role from K runs of n1 and K runs of
    n2 requests (their totals, in run order): (from the medians of each,
    least and most of the K pairs run i of n1 with run i of n2)."""
    pairs = [bl.per_request(a, b, n1, n2) for a, b in zip(runs1, runs2)]
    return (bl.per_request(bl.median(runs1), bl.median(runs2), n1, n2),
            min(pairs), max(pairs))


def callgrind(build, n1, n2, repeat, interval, timeout):
    """Counts the three cases under callgrind, each `repeat` times at n1 and
    at n2 requests per worker. Returns ({"off"/"on": {role: (instructions
    per request, least, most)}}, {role: instructions per scrape of one
    node}, [{role: scrapes answered}] per scraped run)."""
    env = dict(bl.CALLGRIND_ENV, EMBER_REPLICAS="0")
    raw, counts = {}, []
    with tempfile.TemporaryDirectory(prefix="ember-mcost-") as tmp:
        wrap = bl.callgrind_wrapper(
            tmp, os.path.join(build, "bench", "pslite_api_bench"))
        for k in range(repeat):
            for case, metrics, scrape in (("off", False, False),
                                          ("on", True, False),
                                          ("scraped", True, True)):
                for n in (n1, n2):
                    d = os.path.join(tmp, "%s-%d-%d" % (case, n, k))
                    os.makedirs(d)
                    _, scrapes = run(build, 0, metrics, scrape, wrap, n,
                                     dict(env, CG_DIR=d), timeout,
                                     scrape_timeout=60, interval=interval)
                    totals = {r: bl.role_total(d, r, WORKERS if r == "worker"
                                               else SERVERS) for r in ROLES}
                    raw.setdefault((case, n), []).append(totals)
                    if scrape:
                        counts.append(scrapes)
                    print("  run %d %-7s %5d requests/worker: worker %d, "
                          "server %d instructions%s" % (
                              k, case, n, totals["worker"], totals["server"],
                              " (scrapes answered: %s)" % scrapes if scrape
                              else ""), flush=True)
    per = {}
    for case in ("off", "on"):
        # Requests of the whole job: every worker issues n.
        per[case] = {r: per_request_range(
            [t[r] for t in raw[(case, n1)]], [t[r] for t in raw[(case, n2)]],
            WORKERS * n1, WORKERS * n2) for r in ROLES}
    # Each scraped run against the median unscraped run of its length.
    base = {n: {r: bl.median([t[r] for t in raw[("on", n)]]) for r in ROLES}
            for n in (n1, n2)}
    baseline = [base[n] for _ in range(repeat) for n in (n1, n2)]
    scraped = [raw[("scraped", n)][k] for k in range(repeat)
               for n in (n1, n2)]
    return per, scrape_cost(baseline, scraped, counts), counts


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--no-scrape", action="store_true",
                   help="serve metrics but fetch none: the cost of serving "
                   "alone")
    p.add_argument("--callgrind", action="store_true",
                   help="count instructions under callgrind (see above)")
    p.add_argument("--n1", type=int, default=1000,
                   help="--callgrind: requests per worker of the short run")
    p.add_argument("--n2", type=int, default=3000,
                   help="--callgrind: requests per worker of the long run")
    p.add_argument("--req-s", type=float,
                   help="--callgrind: the wall-clock requests/s to scale the "
                   "scrapes to (default: measured by --rounds rounds)")
    p.add_argument("--repeat", type=int, default=3,
                   help="--callgrind: runs of each case and length")
    p.add_argument("--scrape-interval", type=float, default=1.0,
                   help="--callgrind: seconds between scrapes of the "
                   "scraped runs (more scrapes, a finer figure per scrape)")
    p.add_argument("--timeout", type=int, default=900,
                   help="--callgrind: seconds one run may take")
    a = p.parse_args()
    if a.callgrind:
        if not 0 < a.n1 < a.n2 or a.repeat < 1 or a.scrape_interval <= 0:
            p.error("need 0 < --n1 < --n2, --repeat >= 1, "
                    "--scrape-interval > 0")
        if not bl.have_valgrind():
            raise SystemExit("bench_metrics: valgrind is not installed "
                             "(scripts/deps.sh --bench installs it)")
    if a.callgrind and a.req_s:
        return callgrind_report(a, a.req_s)
    off, on = [], []
    for i in range(a.rounds):
        for metrics in ((False, True) if i % 2 == 0 else (True, False)):
            rate, scrapes = run(a.build, a.seconds, metrics,
                                scrape=not a.no_scrape)
            (on if metrics else off).append(rate)
            print("round %d metrics %-3s %10.0f req/s%s" % (
                i, "on" if metrics else "off", rate,
                " (%d scrapes)" % sum(scrapes.values()) if metrics else ""),
                flush=True)
    m_off, m_on = statistics.median(off), statistics.median(on)
    print("RESULT bench=metrics_cost case=sparse_push_2x2%s off_req_s=%.0f "
          "on_req_s=%.0f ratio=%.4f rounds=%d" % (
              "_no_scrape" if a.no_scrape else "", m_off, m_on, m_on / m_off,
              a.rounds))
    if a.callgrind:
        callgrind_report(a, m_off)


def callgrind_report(a, req_s):
    print("callgrind, %d x %d, n1=%d n2=%d requests per worker, %d runs "
          "each, EMBER_REPLICAS=0, scrapes every %gs" % (
              SERVERS, WORKERS, a.n1, a.n2, a.repeat, a.scrape_interval),
          flush=True)
    per, per_scrape, counts = callgrind(os.path.abspath(a.build), a.n1, a.n2,
                                        a.repeat, a.scrape_interval,
                                        a.timeout)
    if None in per_scrape.values():
        raise SystemExit("bench_metrics: a role answered no scrape")
    off = {r: per["off"][r][0] for r in ROLES}
    on = {r: per["on"][r][0] for r in ROLES}
    d = derive(off, on, per_scrape, req_s)
    print("instructions per request of the job (all nodes of the role, all "
          "threads; median, and least-most of the %d pairs):" % a.repeat)
    for role in ROLES:
        print("  %-6s off %6.0f (%.0f-%.0f)  on %6.0f (%.0f-%.0f)  on/off "
              "%.4f" % ((role,) + per["off"][role] + per["on"][role] +
                        (d[role][0],)))
    for role in ROLES:
        print("  %-6s one scrape of one node: %.0f instructions (%d scrapes)"
              % (role, per_scrape[role], sum(c.get(role, 0) for c in counts)))
    print("at %.0f requests/s and one scrape of every node per second:" %
          req_s)
    for role in ROLES + ("total",):
        base = sum(off.values()) if role == "total" else off[role]
        print("  %-6s data path %+.2f %%, scrapes %+.2f %%, metrics "
              "%+.2f %%" % (role, 100 * (d[role][0] - 1),
                            100 * d[role][1] / base, 100 * (d[role][2] - 1)))
    bl.emit("bench=metrics_cost_callgrind", [
        ("case", "sparse_push_2x2"), ("n1", a.n1), ("n2", a.n2),
        ("repeat", a.repeat),
        ("worker_off_ir", "%.0f" % off["worker"]),
        ("worker_on_ir", "%.0f" % on["worker"]),
        ("server_off_ir", "%.0f" % off["server"]),
        ("server_on_ir", "%.0f" % on["server"]),
        ("worker_scrape_ir", "%.0f" % per_scrape["worker"]),
        ("server_scrape_ir", "%.0f" % per_scrape["server"]),
        ("req_s", "%.0f" % req_s),
        ("data_path_ratio", "%.4f" % d["total"][0]),
        ("ratio", "%.4f" % d["total"][2])])


if __name__ == "__main__":
    main()
