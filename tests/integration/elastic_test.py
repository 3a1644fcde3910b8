"""Elastic workers through real processes (docs/consistency.md, "Elastic
workers").

Modes:
  restart  bsp training (cluster_elastic --mode=train, 2 servers, 2
           workers). First a run in which worker 1 is slow: it pauses
           --pause-ms in iteration --pause-at. Then, for each phase in
           --phases (push: after its push of that iteration was
           acknowledged; pull: after its pull, before its push), a run in
           which worker 1 is killed with SIGKILL in that pause and started
           again with EMBER_WORKER_RANK=1 once the scheduler has declared it
           dead (EMBER_WORKER_REJOIN_MS holds its rank meanwhile). Every
           process must exit 0, the restarted worker must resume at clock
           --pause-at, and worker 0's final parameters must be bitwise equal
           to the slow run's.
  leave    asp (cluster_elastic --mode=ones): worker 1 gets SIGTERM mid-run,
           stops, leaves (Finalize without the barrier) and exits 0; the
           others go on. Worker 0 checks that every key holds exactly the
           pushes made: the others' and the leaver's.

The clusters are started by hand, not through ember-launch, because the
launcher ends the job as soon as one process dies (as failover_test.py).
Bounded everywhere; every process's log is printed on failure.

usage: elastic_test.py PROGRAM SCHEDULER [--mode restart|leave] [...]
"""

import argparse
import os
import re
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import failover_test  # noqa: E402
from failover_test import Failure, first_line_time  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser()
    p.add_argument("program")
    p.add_argument("scheduler")
    p.add_argument("--mode", choices=("restart", "leave"), default="restart")
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--iterations", type=int, default=60,
                   help="restart: iterations of training")
    p.add_argument("--pushes", type=int, default=2000,
                   help="leave: pushes per worker")
    p.add_argument("--pause-at", type=int, default=25)
    p.add_argument("--pause-ms", type=int, default=1500)
    p.add_argument("--phases", default="push,pull")
    p.add_argument("--heartbeat-ms", type=int, default=250)
    p.add_argument("--timeout-ms", type=int, default=2000)
    p.add_argument("--limit", type=float, default=90.0,
                   help="seconds a run may take")
    return p.parse_args(argv)


class Cluster(failover_test.Cluster):
    progress_pattern = r"cluster_elastic: progress (\d+)"

    def __init__(self, args, workdir, name, extra_flags):
        super().__init__(args, workdir, name)
        self.out = os.path.join(self.dir, "parameters")
        self.extra_flags = extra_flags

    def program_args(self, role):
        del role
        return (["--iterations=%d" % (self.args.iterations
                                      if self.args.mode == "restart"
                                      else self.args.pushes),
                 "--out=" + self.out,
                 "--left_file=" + os.path.join(self.dir, "left")] +
                self.extra_flags)

    def env(self, role, extra):
        e = super().env(role, extra)
        e.update({
            "EMBER_REPLICAS": "0",
            "EMBER_CONSISTENCY": "bsp" if self.args.mode == "restart"
                                 else "asp",
            # The scheduler's: a dead worker's rank is held a minute.
            "EMBER_WORKER_REJOIN_MS": "60000",
        })
        e.update(extra)
        return e

    def wait_line(self, name, pattern, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            m = re.search(pattern, self.log(name))
            if m:
                return m
            if self.procs[name].poll() is not None:
                raise self.fail("%s exited (%d) before %r" % (
                    name, self.procs[name].returncode, pattern))
            time.sleep(0.01)
        raise self.fail("%s did not print %r" % (name, pattern))

    def check_exits(self, names):
        self.wait_all(names, self.args.limit)
        bad = ["%s (%d)" % (n, self.procs[n].returncode) for n in names
               if self.procs[n].returncode != 0]
        if bad:
            raise self.fail("non-zero exits: " + ", ".join(bad))

    def parameters(self):
        if not os.path.exists(self.out):
            raise self.fail("worker 0 wrote no parameters")
        with open(self.out, "rb") as f:
            return f.read()


def train_flags(args, phase):
    return ["--mode=train", "--pause_rank=1", "--pause_at=%d" % args.pause_at,
            "--pause_ms=%d" % args.pause_ms, "--pause_phase=" + phase]


def run_slow(args, d):
    c = Cluster(args, d, "slow", train_flags(args, "push"))
    clusters.append(c)
    started = time.monotonic()
    c.start()
    c.check_exits(list(c.procs))
    print("elastic_test: slow run: %.1f s" % (time.monotonic() - started))
    return c.parameters()


def run_restart(args, d, phase):
    c = Cluster(args, d, "killed-after-" + phase, train_flags(args, phase))
    clusters.append(c)
    started = time.monotonic()
    c.start()
    c.wait_line("worker-1", r"cluster_elastic: paused at %d" % args.pause_at,
                args.limit)
    kill_ms = time.time() * 1000.0
    os.kill(c.procs["worker-1"].pid, signal.SIGKILL)
    c.procs["worker-1"].wait()
    c.wait_line("scheduler", r"its rank is held", args.limit)
    dead_ms = first_line_time(c.log("scheduler"), " is dead: ")
    with open(os.path.join(c.dir, "port")) as f:
        port = f.read().strip()
    env = c.env("worker", {"DMLC_PS_ROOT_PORT": port,
                           "EMBER_WORKER_RANK": "1"})
    # The restarted worker does not pause again.
    c.spawn("worker-1-restarted",
            [args.program] + c.program_args("worker")[:3] +
            ["--mode=train"], env)
    m = c.wait_line("worker-1-restarted",
                    r"cluster_elastic: resumed at clock (\d+)", args.limit)
    if int(m.group(1)) != args.pause_at:
        raise c.fail("the restarted worker resumed at clock %s, not %d"
                     % (m.group(1), args.pause_at))
    names = [n for n in c.procs if n != "worker-1"]
    c.check_exits(names)
    if "is back: it resumes its rank" not in c.log("scheduler"):
        raise c.fail("the scheduler did not take the worker back")
    print("elastic_test: %s: detection %.0f ms; run %.1f s"
          % (c.name, dead_ms - kill_ms if dead_ms else float("nan"),
             time.monotonic() - started))
    return c.parameters()


def compare(name, slow, killed):
    if len(slow) != len(killed):
        raise Failure("%s: %d bytes of parameters, the slow run %d"
                      % (name, len(killed), len(slow)))
    differ = sum(slow[i:i + 4] != killed[i:i + 4]
                 for i in range(0, len(slow), 4))
    if differ:
        raise Failure("%s: %d of %d parameters differ from the slow run's"
                      % (name, differ, len(slow) // 4))
    print("RESULT elastic_restart run=%s values=%d bitwise_equal=1"
          % (name, len(slow) // 4))


def run_leave(args, d):
    c = Cluster(args, d, "leave", ["--mode=ones", "--pace_ms=2"])
    clusters.append(c)
    c.start()
    c.wait_progress(100, args.limit)
    os.kill(c.procs["worker-1"].pid, signal.SIGTERM)
    c.check_exits(list(c.procs))
    m = re.search(r"left after (\d+) pushes", c.log("worker-1"))
    if not m or "sums exact" not in c.log("worker-0"):
        raise c.fail("the worker did not leave, or the sums are not exact")
    print("elastic_test: leave: worker 1 left after %s pushes; %s"
          % (m.group(1), re.search(r"sums exact.*", c.log("worker-0"))
             .group(0)))


clusters = []


def main(argv):
    args = parse_args(argv)
    if not 0 < args.pause_at < args.iterations:
        print("elastic_test: --pause-at must lie inside the run")
        return 2
    with tempfile.TemporaryDirectory(prefix="ember-elastic.") as d:

        def body():
            if args.mode == "restart":
                slow = run_slow(args, d)
                for phase in [p for p in args.phases.split(",") if p]:
                    compare("killed-after-" + phase, slow,
                            run_restart(args, d, phase))
                print("elastic_test: PASS: worker 1 killed in iteration %d "
                      "and restarted with its rank: the final parameters "
                      "equal the slow run's bitwise" % args.pause_at)
            else:
                run_leave(args, d)
                print("elastic_test: PASS: a worker left mid-run under asp; "
                      "the sums are exact")

        return failover_test.run_reporting("elastic_test", clusters, body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
