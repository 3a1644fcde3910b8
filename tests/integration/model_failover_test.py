"""The model layer through SIGKILL of a server (docs/replication.md).

Runs cluster_model's training (an embedding table and a dense parameter,
--servers servers, --workers workers, EMBER_REPLICAS=1) undisturbed, and
then once for every server in --victims, killed with SIGKILL once every
worker has ended --kill-at iterations. Every run must end with every live
process exiting 0, each killed run must fail over, and the final parameters
worker 0 writes must be bitwise equal to the undisturbed run's.

  bsp  Adagrad on the table and Adam on the dense parameter: a bsp run is
       reproducible, so the kill must change nothing.
  asp, ssp:s  the order of the pushes varies, so cluster_model trains with
       --sign_grads and sgd: sums of powers of two, exact in any order. What
       is checked is that every push is applied exactly once.

Each run's worker 0 also checks its parameters against a one-process replay
(cluster_model --replay). The clusters are started by hand, not through
ember-launch, because the launcher ends the job as soon as one process
dies. Bounded everywhere; every process's log is printed on failure.

usage: model_failover_test.py PROGRAM SCHEDULER [--consistency bsp|asp|ssp:S]
                              [...]
"""

import argparse
import array
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from failover_test import first_line_time  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser()
    p.add_argument("program")
    p.add_argument("scheduler")
    p.add_argument("--consistency", default="bsp",
                   help="bsp, asp or ssp:S")
    p.add_argument("--servers", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--iterations", type=int, default=120)
    p.add_argument("--kill-at", type=int, default=40,
                   help="iterations every worker has ended at the kill")
    p.add_argument("--pace-ms", type=int, default=0)
    p.add_argument("--victims", default="0,1,2",
                   help="ranks of the servers to kill, one run each")
    p.add_argument("--heartbeat-ms", type=int, default=200)
    p.add_argument("--timeout-ms", type=int, default=1200)
    p.add_argument("--limit", type=float, default=120.0,
                   help="seconds a run may take")
    return p.parse_args(argv)


class Failure(Exception):
    pass


def program_flags(args):
    flags = ["--iterations=%d" % args.iterations,
             "--consistency=%s" % args.consistency,
             "--pace_ms=%d" % args.pace_ms]
    if args.consistency != "bsp":
        flags += ["--sign_grads", "--tolerance=0",
                  "--table_optimizer=sgd(lr=0.125)",
                  "--dense_optimizer=sgd(lr=0.125)"]
    else:
        flags += ["--table_optimizer=adagrad(lr=0.1)",
                  "--dense_optimizer=adam(lr=0.01)"]
    return flags


class Cluster:
    def __init__(self, args, workdir, name):
        self.args = args
        self.dir = os.path.join(workdir, name)
        os.mkdir(self.dir)
        self.name = name
        self.out = os.path.join(self.dir, "parameters")
        self.procs = {}  # name -> Popen
        self.logs = {}

    def env(self, role, extra):
        e = dict(os.environ)
        e.update({
            "DMLC_ROLE": role,
            "DMLC_NUM_SERVER": str(self.args.servers),
            "DMLC_NUM_WORKER": str(self.args.workers),
            "DMLC_PS_ROOT_URI": "127.0.0.1",
            "EMBER_REPLICAS": "1",
            "EMBER_HEARTBEAT_INTERVAL_MS": str(self.args.heartbeat_ms),
            "EMBER_HEARTBEAT_TIMEOUT_MS": str(self.args.timeout_ms),
        })
        e.update(extra)
        return e

    def spawn(self, name, cmd, env):
        path = os.path.join(self.dir, name + ".log")
        self.logs[name] = path
        with open(path, "wb") as out:
            self.procs[name] = subprocess.Popen(
                cmd, env=env, stdout=out, stderr=subprocess.STDOUT)

    def start(self):
        port_file = os.path.join(self.dir, "port")
        self.spawn("scheduler", [self.args.scheduler],
                   self.env("scheduler", {"DMLC_PS_ROOT_PORT": "0",
                                          "EMBER_PORT_FILE": port_file}))
        deadline = time.monotonic() + 30
        while not (os.path.exists(port_file) and os.path.getsize(port_file)):
            if time.monotonic() > deadline:
                raise Failure("%s: the scheduler did not publish its port"
                              % self.name)
            time.sleep(0.05)
        with open(port_file) as f:
            port = f.read().strip()
        flags = program_flags(self.args)
        for role, count in (("server", self.args.servers),
                            ("worker", self.args.workers)):
            for i in range(count):
                extra = flags + (["--out=" + self.out]
                                 if role == "worker" else [])
                self.spawn("%s-%d" % (role, i), [self.args.program] + extra,
                           self.env(role, {"DMLC_PS_ROOT_PORT": port,
                                           "EMBER_RANK_HINT": str(i)}))

    def log(self, name):
        with open(self.logs[name], errors="replace") as f:
            return f.read()

    def wait_progress(self, at_least, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            done = 0
            for w in range(self.args.workers):
                seen = re.findall(r"cluster_model: progress (\d+)",
                                  self.log("worker-%d" % w))
                done += bool(seen) and int(seen[-1]) >= at_least
            if done == self.args.workers:
                return
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise Failure("%s: %s exited (%d) before the kill"
                                  % (self.name, name, p.returncode))
            time.sleep(0.01)
        raise Failure("%s: the workers did not reach iteration %d"
                      % (self.name, at_least))

    def wait_all(self, names, seconds):
        deadline = time.monotonic() + seconds
        for name in names:
            left = deadline - time.monotonic()
            try:
                self.procs[name].wait(timeout=max(left, 0.01))
            except subprocess.TimeoutExpired:
                raise Failure("%s: %s still runs after %.0f s"
                              % (self.name, name, seconds))

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()

    def dump(self):
        for name in self.procs:
            print("----- %s: %s (exit %s)"
                  % (self.name, name, self.procs[name].returncode))
            print(self.log(name))


def run_cluster(args, cluster, victim):
    """Runs `cluster` to its end; kills server `victim` (if not None)
    mid-run."""
    kill = victim is not None
    started = time.monotonic()
    cluster.start()
    survivors = list(cluster.procs)
    if kill:
        cluster.wait_progress(args.kill_at, args.limit)
        victim = "server-%d" % victim
        kill_at = time.monotonic()
        kill_ms = time.time() * 1000.0
        os.kill(cluster.procs[victim].pid, signal.SIGKILL)
        cluster.procs[victim].wait()
        progress = [re.findall(r"cluster_model: progress (\d+)",
                               cluster.log("worker-%d" % w))
                    for w in range(args.workers)]
        print("model_failover_test: killed %s at worker iterations %s"
              % (victim, [int(p[-1]) if p else 0 for p in progress]))
        survivors.remove(victim)
    cluster.wait_all(survivors, args.limit)
    elapsed = time.monotonic() - started
    bad = ["%s (%d)" % (n, cluster.procs[n].returncode) for n in survivors
           if cluster.procs[n].returncode != 0]
    if bad:
        raise Failure("%s: non-zero exits: %s" % (cluster.name,
                                                  ", ".join(bad)))
    if kill:
        if "takes over the data of" not in cluster.log("scheduler"):
            raise Failure("%s: the scheduler did not fail over"
                          % cluster.name)
        dead_ms = first_line_time(cluster.log("scheduler"), " is dead: ")
        print("model_failover_test: %s: detection %.0f ms, survivors ended "
              "%.1f s after the kill"
              % (cluster.name, dead_ms - kill_ms if dead_ms else float("nan"),
                 time.monotonic() - kill_at))
    result = re.search(r"RESULT .*", cluster.log("worker-0"))
    print("model_failover_test: %s: %.1f s; %s"
          % (cluster.name, elapsed, result.group(0) if result else ""))
    if not os.path.exists(cluster.out):
        raise Failure("%s: worker 0 wrote no parameters" % cluster.name)
    values = array.array("f")
    with open(cluster.out, "rb") as f:
        values.frombytes(f.read())
    return values


def compare(args, name, undisturbed, killed):
    if len(undisturbed) != len(killed):
        raise Failure("the runs wrote %d and %d values"
                      % (len(undisturbed), len(killed)))
    a, b = undisturbed.tobytes(), killed.tobytes()
    differ = [i for i in range(len(killed)) if a[4 * i:4 * i + 4] !=
              b[4 * i:4 * i + 4]]
    if differ:
        worst = max(abs(undisturbed[i] - killed[i]) for i in differ)
        raise Failure("%s: %d of %d parameters differ from the undisturbed "
                      "run (largest difference %.3g; first at value %d: %r "
                      "vs %r)" % (name, len(differ), len(killed), worst,
                                  differ[0], undisturbed[differ[0]],
                                  killed[differ[0]]))
    print("RESULT model_failover consistency=%s run=%s values=%d "
          "bitwise_equal=1" % (args.consistency, name, len(killed)))


def main(argv):
    args = parse_args(argv)
    if not 0 < args.kill_at < args.iterations:
        print("model_failover_test: --kill-at must lie inside the run")
        return 2
    victims = [int(v) for v in args.victims.split(",") if v]
    if not victims or not all(0 <= v < args.servers for v in victims):
        print("model_failover_test: --victims must name servers")
        return 2
    with tempfile.TemporaryDirectory(prefix="ember-model-failover.") as d:
        clusters = []
        try:
            calm = Cluster(args, d, "undisturbed")
            clusters.append(calm)
            undisturbed = run_cluster(args, calm, None)
            for v in victims:
                cluster = Cluster(args, d, "server-%d-killed" % v)
                clusters.append(cluster)
                compare(args, cluster.name, undisturbed,
                        run_cluster(args, cluster, v))
            print("model_failover_test: PASS: %s: with any of servers %s "
                  "killed, the final parameters equal the undisturbed run's "
                  "bitwise" % (args.consistency, victims))
            return 0
        except Failure as e:
            print("model_failover_test: FAIL: %s" % e)
            for c in clusters:
                c.stop()
                c.dump()
            return 1
        finally:
            for c in clusters:
                c.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
