#!/usr/bin/python3
"""ember-status: what a running Ember job looks like, asked of its scheduler.

usage: ember-status [--json] [--timeout SECONDS] [HOST:PORT]

HOST:PORT is where the scheduler serves its metrics (it must run with
EMBER_METRICS_PORT set; its log says "metrics: scheduler serves
http://HOST:PORT/metrics and /status"). Without it, DMLC_PS_ROOT_URI and
EMBER_METRICS_PORT are used. The scheduler's GET /status gives the
membership, the ring's epoch and ranges and where every node serves its own
metrics; each node's /metrics then gives its load (requests, keys, bytes,
resident memory) and the workers' clocks. Printed as tables, or with --json
as one JSON document. Exit status 1 if the scheduler cannot be reached.
docs/operations.md describes the fields.

Standard library only; runs on Debian's /usr/bin/python3 (3.11).
"""

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.request

VERSION = "0.1.0"
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """Prometheus text format -> [(name, {label: value}, float)]."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            continue
        labels = dict(LABEL.findall(m.group(3) or ""))
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        samples.append((m.group(1), labels, value))
    return samples


def total(samples, name):
    return sum(v for n, _, v in samples if n == name)


def fetch(url, timeout):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode("utf-8", "replace")


def host_for_url(host):
    return "[%s]" % host if ":" in host else host


def node_load(node, scheduler_host, timeout):
    """The load of one node from its /metrics, or an 'error'."""
    port = node.get("metrics_port", -1)
    if port is None or port < 0:
        return {"error": "serves no metrics (EMBER_METRICS_PORT unset)"}
    host = node.get("host") or scheduler_host
    url = "http://%s:%d/metrics" % (host_for_url(host), port)
    try:
        samples = parse_metrics(fetch(url, timeout))
    except (OSError, urllib.error.URLError) as e:
        return {"error": "%s: %s" % (url, e)}
    load = {
        "requests": total(samples, "ember_requests_total"),
        "keys": total(samples, "ember_request_keys_total"),
        "bytes_sent": total(samples, "ember_bytes_sent_total"),
        "bytes_received": total(samples, "ember_bytes_received_total"),
        "resident_bytes": total(samples, "ember_resident_memory_bytes"),
    }
    clocks = [v for n, _, v in samples if n == "ember_worker_clock"]
    if clocks:
        load["clock"] = min(clocks)
    min_clocks = [v for n, _, v in samples if n == "ember_consistency_min_clock"]
    if min_clocks:
        load["min_worker_clock"] = min(min_clocks)
    return load


def collect(address, timeout):
    status = json.loads(fetch("http://%s/status" % address, timeout))
    scheduler_host = address.rsplit(":", 1)[0].strip("[]")
    for node in status.get("nodes", []):
        if node.get("state") == "alive":
            node["load"] = node_load(node, scheduler_host, timeout)
    by_id = {n["id"]: n for n in status.get("nodes", [])}
    per_server = {}
    for r in status.get("ranges", []):
        per_server.setdefault(r["server_id"], []).append([r["begin"], r["last"]])
    status["ranges_per_server"] = [
        {"server_id": sid, "rank": by_id.get(sid, {}).get("rank", -1),
         "ranges": ranges}
        for sid, ranges in sorted(per_server.items())]
    workers = [n for n in status.get("nodes", [])
               if n.get("role") == "worker" and "clock" in n.get("load", {})]
    workers.sort(key=lambda n: (n["load"]["clock"], n["rank"]))
    status["slowest_workers"] = [
        {"id": n["id"], "rank": n["rank"], "clock": n["load"]["clock"]}
        for n in workers[:3]]
    return status


def table(rows):
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
                     for r in rows)


def mb(v):
    return "%.1f" % (v / 1e6)


def render(status):
    out = ["epoch %d, %d servers, %d workers, %s placement" % (
        status.get("epoch", 0), status.get("num_servers", 0),
        status.get("num_workers", 0), status.get("placement") or "-"), ""]
    rows = [("role", "rank", "id", "address", "state", "requests", "keys",
             "MB sent", "MB recv", "RSS MB", "clock")]
    for n in status.get("nodes", []):
        load = n.get("load", {})
        if "error" in load:
            extra = ("-",) * 6
        else:
            extra = ("%d" % load.get("requests", 0), "%d" % load.get("keys", 0),
                     mb(load.get("bytes_sent", 0)),
                     mb(load.get("bytes_received", 0)),
                     mb(load.get("resident_bytes", 0)),
                     "%d" % load["clock"] if "clock" in load else "-")
        rows.append((n["role"], n["rank"], n["id"],
                     "%s:%d" % (n["host"], n["port"]), n["state"]) + extra)
    out += [table(rows), ""]
    rows = [("server", "id", "ranges")]
    for s in status["ranges_per_server"]:
        rows.append((s["rank"], s["server_id"], " ".join(
            "[%d, %d]" % (b, e) for b, e in s["ranges"])))
    out += [table(rows), ""]
    if status["slowest_workers"]:
        out.append("slowest workers: " + ", ".join(
            "worker %d (clock %d)" % (w["rank"], w["clock"])
            for w in status["slowest_workers"]))
    errors = [(n, n["load"]["error"]) for n in status.get("nodes", [])
              if "error" in n.get("load", {})]
    for n, e in errors:
        out.append("%s %d: %s" % (n["role"], n["rank"], e))
    return "\n".join(out)


def main(argv):
    p = argparse.ArgumentParser(prog="ember-status", description=__doc__.split(
        "\n\n")[0], epilog="See docs/operations.md.")
    p.add_argument("address", nargs="?", help="the scheduler's metrics "
                   "HOST:PORT (default: DMLC_PS_ROOT_URI:EMBER_METRICS_PORT)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--timeout", type=float, default=5.0,
                   help="seconds to wait for each answer (default 5)")
    p.add_argument("--version", action="version",
                   version="%(prog)s (Ember) " + VERSION)
    args = p.parse_args(argv)
    address = args.address
    if not address:
        host = os.environ.get("DMLC_PS_ROOT_URI")
        port = os.environ.get("EMBER_METRICS_PORT")
        if not host or not port or port == "0":
            p.error("give the scheduler's metrics HOST:PORT (or set "
                    "DMLC_PS_ROOT_URI and a fixed EMBER_METRICS_PORT)")
        address = "%s:%s" % (host_for_url(host), port)
    try:
        status = collect(address, args.timeout)
    except (OSError, urllib.error.URLError, ValueError) as e:
        print("ember-status: cannot read http://%s/status: %s (does the "
              "scheduler run with EMBER_METRICS_PORT set?)" % (address, e),
              file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
    else:
        print(render(status))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
