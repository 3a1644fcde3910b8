#!/usr/bin/python3
"""The cost of metrics on the 2 x 2 sparse push benchmark.

usage: scripts/bench_metrics.py [--build DIR] [--rounds N] [--seconds S]

Runs bench/pslite_api_bench (2 servers, 2 workers, pushes of 1000 random
keys, 8 in flight per worker) alternately with metrics off and with
EMBER_METRICS_PORT=0 and every node's /metrics fetched once a second (what a
Prometheus scraping each second does), N rounds of each, interleaved, and
prints each round's requests/s, the medians and their ratio (on/off) as a
RESULT line. Standard library only; /usr/bin/python3.
"""

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(build, seconds, metrics, scrape=True):
    env = dict(os.environ)
    env["EMBER_SCHEDULER"] = os.path.join(build, "scheduler", "ember_scheduler")
    env["EMBER_TIMEOUT"] = str(int(seconds) + 60)
    if metrics:
        env["EMBER_METRICS_PORT"] = "0"
    proc = subprocess.Popen(
        ["/usr/bin/python3", os.path.join(ROOT, "scripts", "ember_launch.py"),
         "-n", "2", "-s", "2", os.path.join(build, "bench", "pslite_api_bench"),
         "mode=push", "keys=1000", "window=8", "seconds=%g" % seconds,
         "warmup=0.5"], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    lines, urls, scrapes = [], set(), [0]
    stop = threading.Event()

    def scraper():
        while not stop.wait(1.0):
            for u in list(urls):
                try:
                    with urllib.request.urlopen(u, timeout=2) as r:
                        r.read()
                    scrapes[0] += 1
                except OSError:
                    pass

    t = threading.Thread(target=scraper, daemon=True)
    if scrape:
        t.start()
    for line in proc.stdout:
        lines.append(line)
        if " serves http://" in line:
            urls.add(line.split(" serves ", 1)[1].split()[0])
    rc = proc.wait()
    stop.set()
    if scrape:
        t.join()
    rates = [float(l.split("req_s=")[1].split()[0]) for l in lines
             if "PSBENCH" in l]
    if rc != 0 or len(rates) != 2:
        sys.stdout.write("".join(lines))
        raise SystemExit("bench_metrics: the job failed (rc %d)" % rc)
    if metrics and scrape and scrapes[0] == 0:
        raise SystemExit("bench_metrics: no scrape succeeded")
    return sum(rates), scrapes[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--no-scrape", action="store_true",
                   help="serve metrics but fetch none: the cost of serving "
                   "alone")
    a = p.parse_args()
    off, on = [], []
    for i in range(a.rounds):
        for metrics in ((False, True) if i % 2 == 0 else (True, False)):
            rate, scrapes = run(a.build, a.seconds, metrics,
                                scrape=not a.no_scrape)
            (on if metrics else off).append(rate)
            print("round %d metrics %-3s %10.0f req/s%s" % (
                i, "on" if metrics else "off", rate,
                " (%d scrapes)" % scrapes if metrics else ""), flush=True)
    m_off, m_on = statistics.median(off), statistics.median(on)
    print("RESULT bench=metrics_cost case=sparse_push_2x2%s off_req_s=%.0f "
          "on_req_s=%.0f ratio=%.4f rounds=%d" % (
              "_no_scrape" if a.no_scrape else "", m_off, m_on, m_on / m_off,
              a.rounds))


if __name__ == "__main__":
    main()
