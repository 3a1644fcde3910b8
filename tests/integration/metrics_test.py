#!/usr/bin/python3
"""Metrics, the progress line and ember-status on a live 2 x 2 job.

usage: metrics_test.py prometheus|stats EMBER_LAUNCH SCHEDULER BENCH STATUS

prometheus  A 2 x 2 job of BENCH (pslite_api_bench, sparse pushes) with
            EMBER_METRICS_PORT=0. Debian's prometheus, started here on
            127.0.0.1 with its storage in a temporary directory, scrapes
            every node each second; the test waits until it has the series
            of all five nodes, queries a few through its HTTP API, runs
            `promtool check metrics` on one scrape of a server, and runs
            STATUS (ember-status) against the scheduler, as a table and as
            JSON. Every node's per-peer traffic series carry the peer's
            role and rank and add up to its totals. Exit 77 (skipped) only
            if prometheus or promtool cannot start.
stats       A short 2 x 2 job with EMBER_STATS_INTERVAL=1: every node logs
            progress lines, and the servers' count the requests they got.

Every process's output is printed when the test fails.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

ROLES = ["scheduler", "server 0", "server 1", "worker 0", "worker 1"]
DEADLINE_S = 90


class Job:
    """A job of ember-launch whose output is read as it comes."""

    def __init__(self, launch, scheduler, bench, seconds, env_extra):
        env = dict(os.environ)
        env.update({"EMBER_SCHEDULER": scheduler, "EMBER_TIMEOUT": "80"})
        env.update(env_extra)
        self.lines = []
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            ["/usr/bin/python3", launch, "-n", "2", "-s", "2", bench,
             "mode=push", "keys=1000", "window=8", "seconds=%d" % seconds,
             "warmup=0.5"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append(line)

    def output(self):
        with self.lock:
            return "".join(self.lines)

    def metrics_urls(self):
        """role -> http://host:port (from the nodes' 'metrics:' lines)."""
        urls = {}
        for line in self.output().splitlines():
            if "metrics: " in line and " serves http://" in line:
                role = line[1:line.index("]")]
                url = line.split(" serves ", 1)[1].split("/metrics")[0]
                urls[role] = url
        return urls

    def wait(self, timeout):
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # ember-launch stops its nodes as it goes
            rc = self.proc.wait()
        self.reader.join(timeout=5)
        return rc


def fail(why, job, extra=""):
    sys.stdout.write(job.output())
    sys.stdout.write(extra)
    print("metrics_test: FAIL: " + why)
    sys.exit(1)


def wait_for(what, predicate, job, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if job.proc.poll() is not None:
            fail("the job ended before " + what, job)
        time.sleep(0.2)
    fail("no " + what + " within %d s" % timeout, job)


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_samples(text):
    """[(name, {label: value}, value)] of a scrape in the text format (the
    label values Ember writes hold no ',' or '"')."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, _, labels = head.partition("{")
        pairs = (p.split("=", 1) for p in labels.rstrip("}").split(",") if p)
        samples.append((name, {k: v.strip('"') for k, v in pairs},
                        float(value)))
    return samples


# Per-peer families and the totals they add up to.
PEER_TOTALS = [("ember_peer_messages_sent_total", "ember_messages_sent_total"),
               ("ember_peer_bytes_sent_total", "ember_bytes_sent_total"),
               ("ember_peer_messages_received_total",
                "ember_messages_received_total"),
               ("ember_peer_bytes_received_total",
                "ember_bytes_received_total"),
               ("ember_peer_send_errors_total", "ember_send_errors_total")]


def check_peer_sums(text, worst):
    """None if, in one scrape, every per-peer family adds up to its total;
    else why not. worst[0] becomes the largest relative difference seen. The job runs while the node reads its counters, one after
    the other, so a sum may be off by the messages of those microseconds:
    allowed 1% (a peer missed or counted twice is far more)."""
    samples = parse_samples(text)
    for peer_name, total_name in PEER_TOTALS:
        peers = [(l, v) for n, l, v in samples if n == peer_name]
        totals = [v for n, _, v in samples if n == total_name]
        if len(totals) != 1:
            return "%d samples of %s" % (len(totals), total_name)
        if total_name != "ember_send_errors_total" and not peers:
            return "no %s series" % peer_name
        if any(not l.get("peer") or not l.get("peer_role") or
               "peer_rank" not in l for l, _ in peers):
            return "%s without peer labels: %s" % (peer_name, peers)
        total, summed = totals[0], sum(v for _, v in peers)
        if total > 0:
            worst[0] = max(worst[0], abs(summed - total) / total)
        if abs(summed - total) > 0.01 * total:
            return "%s adds up to %g, %s is %g" % (peer_name, summed,
                                                   total_name, total)
    return None


def run_prometheus(launch, scheduler, bench, status_tool):
    prometheus = shutil.which("prometheus")
    promtool = shutil.which("promtool")
    if not prometheus or not promtool:
        print("metrics_test: SKIP: prometheus or promtool is not installed "
              "(apt-get install prometheus)")
        return 77
    job = Job(launch, scheduler, bench, 20, {"EMBER_METRICS_PORT": "0"})
    urls = wait_for("metrics endpoint of every node",
                    lambda: len(job.metrics_urls()) == 5 and job.metrics_urls(),
                    job, 30)
    tmp = tempfile.mkdtemp(prefix="ember-metrics-test-")
    prom = None
    try:
        config = os.path.join(tmp, "prometheus.yml")
        targets = sorted(u[len("http://"):] for u in urls.values())
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: ember\n"
                    "    static_configs:\n      - targets: %s\n"
                    % json.dumps(targets))
        port = free_port()
        prom_log = open(os.path.join(tmp, "prometheus.log"), "w+")
        prom = subprocess.Popen(
            [prometheus, "--config.file=" + config,
             "--storage.tsdb.path=" + os.path.join(tmp, "data"),
             "--web.listen-address=127.0.0.1:%d" % port],
            stdout=prom_log, stderr=subprocess.STDOUT)
        api = "http://127.0.0.1:%d/api/v1/query?query=" % port

        def prom_output():
            prom_log.seek(0)
            return "\n--- prometheus ---\n" + prom_log.read()

        def query(q):
            try:
                doc = json.loads(get(api + urllib.parse.quote(q)))
            except OSError:
                if prom.poll() is not None:
                    return None
                return []
            return doc.get("data", {}).get("result", [])

        deadline = time.monotonic() + 20
        while query("up") == [] and time.monotonic() < deadline:
            if prom.poll() is not None:
                break
            time.sleep(0.2)
        if prom.poll() is not None:
            print(prom_output())
            print("metrics_test: SKIP: prometheus could not start")
            job.wait(DEADLINE_S)
            return 77

        # Prometheus scrapes each target at its own moment, so one query
        # can see a server's pushes counted and a worker's series from a
        # scrape before its first request. So every check is asked again
        # until all of them hold at once, or the deadline names the one that
        # did not.
        checks = {
            'sum(ember_request_keys_total{role="worker",op="push"})': None,
            'ember_server_push_apply_seconds_count': 2,
            'ember_cluster_servers{role="scheduler"}': 1,
            'ember_ring_epoch': 5,
            'ember_resident_memory_bytes': 5,
            'ember_bytes_received_total{role="server"}': 2,
            'ember_requests_total{role="server",op="push"}': 2,
            'up == 1': 5,
        }
        last = ["nothing queried yet"]

        def series_problem():
            for q, count in checks.items():
                r = query(q)
                if not r or (count is not None and len(r) != count):
                    return "prometheus query %s gave %s" % (q, r)
                if any(float(s["value"][1]) <= 0 for s in r):
                    return "prometheus query %s has a zero: %s" % (q, r)
            servers = query('ember_cluster_servers{role="scheduler"}')
            if float(servers[0]["value"][1]) != 2:
                return "the scheduler counts %s servers" % servers
            # Per peer: each worker sent to each server, labelled with the
            # peer's role and rank; each server heard from both workers.
            for q, pairs in (
                    ('ember_peer_bytes_sent_total{role="worker",'
                     'peer_role="server"} > 0', ("rank", "peer_rank")),
                    ('ember_peer_messages_received_total{role="server",'
                     'peer_role="worker"} > 0', ("rank", "peer_rank"))):
                r = query(q)
                seen = sorted((s["metric"][pairs[0]], s["metric"][pairs[1]])
                              for s in (r or []))
                if seen != [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")]:
                    return "prometheus query %s gave %s" % (q, r)
            return None

        def every_series():
            last[0] = series_problem()
            return last[0] is None

        deadline = time.monotonic() + 30
        while not every_series():
            if time.monotonic() > deadline:
                fail(last[0] + " (for 30 s)", job, prom_output())
            if job.proc.poll() is not None:
                fail("the job ended before prometheus had every series: " +
                     last[0], job, prom_output())
            time.sleep(0.2)
        print("metrics_test: prometheus has every node's series")
        worst = [0.0]
        for role, url in sorted(urls.items()):
            why = check_peer_sums(get(url + "/metrics"), worst)
            if why:
                fail("%s: %s" % (role, why), job)
        print("metrics_test: per-peer traffic adds up to every node's totals "
              "(largest difference %.2g%%)" % (100 * worst[0]))

        scrape = get(urls["server 0"] + "/metrics")
        check = subprocess.run([promtool, "check", "metrics"], input=scrape,
                               text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=30)
        if check.returncode != 0:
            fail("promtool check metrics: " + check.stdout, job, scrape)
        print("metrics_test: promtool check metrics passes")

        sched = urls["scheduler"][len("http://"):]
        out = subprocess.run(["/usr/bin/python3", status_tool, "--json", sched],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=30)
        if out.returncode != 0:
            fail("ember-status --json: " + out.stdout, job)
        status = json.loads(out.stdout)
        roles = sorted(n["role"] for n in status["nodes"])
        if roles != ["scheduler", "server", "server", "worker", "worker"]:
            fail("ember-status lists %s" % roles, job, out.stdout)
        if status["epoch"] < 1 or len(status["ranges_per_server"]) != 2:
            fail("ember-status's ring is wrong", job, out.stdout)
        for n in status["nodes"]:
            if n["role"] == "server" and n["load"].get("requests", 0) <= 0:
                fail("ember-status has no load for a server", job, out.stdout)
        if len(status["slowest_workers"]) != 2:
            fail("ember-status has no worker clocks", job, out.stdout)
        out = subprocess.run(["/usr/bin/python3", status_tool, sched],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=30)
        if out.returncode != 0 or "slowest workers" not in out.stdout or \
                out.stdout.count("alive") != 5:
            fail("ember-status's table: " + out.stdout, job)
        print(out.stdout)
        print("metrics_test: ember-status reads the live job")
    finally:
        if prom is not None:
            prom.terminate()
            try:
                prom.wait(timeout=10)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    rc = job.wait(DEADLINE_S)
    if rc != 0:
        fail("the job ended with %d" % rc, job)
    print("metrics_test: PASS (prometheus)")
    return 0


def run_stats(launch, scheduler, bench):
    job = Job(launch, scheduler, bench, 4, {"EMBER_STATS_INTERVAL": "1"})
    rc = job.wait(DEADLINE_S)
    if rc != 0:
        fail("the job ended with %d" % rc, job)
    out = job.output()
    for role in ROLES:
        lines = [l for l in out.splitlines()
                 if l.startswith("[%s]" % role) and "progress " in l]
        if len(lines) < 2:
            fail("%s logged %d progress lines" % (role, len(lines)), job)
        if role.startswith("server") or role.startswith("worker"):
            last = lines[-1].split("progress ", 1)[1]
            requests = int(last.split(": ", 1)[1].split(" requests")[0])
            if requests <= 0:
                fail("%s's progress counts no requests: %s" % (role, last),
                     job)
    print("metrics_test: PASS (stats)")
    return 0


def main(argv):
    if len(argv) != 6 or argv[1] not in ("prometheus", "stats"):
        print(__doc__)
        return 2
    mode, launch, scheduler, bench, status_tool = argv[1:]
    if mode == "prometheus":
        return run_prometheus(launch, scheduler, bench, status_tool)
    return run_stats(launch, scheduler, bench)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
