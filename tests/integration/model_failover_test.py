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

With --second-kill-at N, each killed run then waits until the scheduler
has every copy of the survivors' data restored, and kills the next server
(rank victim + 1) once every worker has ended N iterations: two of three
servers die, one after the other, and the result must still be the same.

With --membership, nothing is killed: the disturbed run starts one more
server with EMBER_JOIN=1 once every worker has ended --kill-at iterations,
waits until it has joined, and sends server --leaver SIGTERM once the
workers have gone on a while (docs/model.md, "Servers joining and
leaving"): 2 -> 3 -> 2 servers, every process (the leaver too) exits 0,
and the parameters must be bitwise those of the undisturbed run.

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
    p.add_argument("--consistency", default="bsp",
                   help="bsp, asp or ssp:S")
    p.add_argument("--servers", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--iterations", type=int, default=120)
    p.add_argument("--kill-at", type=int, default=40,
                   help="iterations every worker has ended at the kill")
    p.add_argument("--second-kill-at", type=int, default=0,
                   help="iterations at which a second server is killed, "
                        "after the copies are restored (0: none)")
    p.add_argument("--pace-ms", type=int, default=0)
    p.add_argument("--victims", default="0,1,2",
                   help="ranks of the servers to kill, one run each")
    p.add_argument("--membership", action="store_true",
                   help="a server joins, then --leaver leaves, instead of "
                        "kills")
    p.add_argument("--leaver", type=int, default=0,
                   help="--membership: the rank of the server that leaves")
    p.add_argument("--heartbeat-ms", type=int, default=200)
    p.add_argument("--timeout-ms", type=int, default=1200)
    p.add_argument("--limit", type=float, default=120.0,
                   help="seconds a run may take")
    return p.parse_args(argv)


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


class Cluster(failover_test.Cluster):
    """failover_test's cluster running cluster_model; worker 0 writes its
    final parameters to `out`."""

    progress_pattern = r"cluster_model: progress (\d+)"

    def __init__(self, args, workdir, name):
        super().__init__(args, workdir, name)
        self.out = os.path.join(self.dir, "parameters")

    def program_args(self, role):
        return program_flags(self.args) + (["--out=" + self.out]
                                           if role == "worker" else [])


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
        if args.second_kill_at:
            survivors.remove(second_kill(args, cluster, victim))
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
    return read_parameters(cluster)


def wait_log(cluster, name, needle, seconds):
    deadline = time.monotonic() + seconds
    while needle not in cluster.log(name):
        if time.monotonic() > deadline:
            raise Failure("%s: no %r in the log of %s within %d s"
                          % (cluster.name, needle, name, seconds))
        for n, p in cluster.procs.items():
            if p.poll() is not None and p.returncode != 0:
                raise Failure("%s: %s exited (%d) early"
                              % (cluster.name, n, p.returncode))
        time.sleep(0.02)


def run_membership(args, cluster):
    """A server joins at --kill-at, then server --leaver leaves; returns the
    parameters worker 0 wrote."""
    started = time.monotonic()
    cluster.start()
    cluster.wait_progress(args.kill_at, args.limit)
    newcomer = "server-%d" % args.servers
    cluster.spawn_server(newcomer, args.servers, {"EMBER_JOIN": "1"})
    wait_log(cluster, "scheduler", "has joined: it holds the state",
             args.limit)
    if "joined the running job with" not in cluster.log(newcomer):
        raise Failure("%s: the newcomer's model server did not join"
                      % cluster.name)
    seen = max(cluster.progress(w) for w in range(args.workers))
    cluster.wait_progress(min(seen + args.iterations // 6,
                              args.iterations * 5 // 6), args.limit)
    leaver = "server-%d" % args.leaver
    os.kill(cluster.procs[leaver].pid, signal.SIGTERM)
    wait_log(cluster, "scheduler", "has left: its ranges are handed over",
             args.limit)
    # Both changes came while the workers trained.
    at_left = [cluster.progress(w) for w in range(args.workers)]
    if max(at_left) >= args.iterations:
        raise Failure("%s: the workers had ended (%s) when the leave was "
                      "done: make the run longer" % (cluster.name, at_left))
    cluster.wait_all(list(cluster.procs), args.limit)
    bad = ["%s (%d)" % (n, p.returncode) for n, p in cluster.procs.items()
           if p.returncode != 0]
    if bad:
        raise Failure("%s: non-zero exits: %s" % (cluster.name,
                                                  ", ".join(bad)))
    print("model_failover_test: %s: %s joined at worker iterations >= %d, "
          "%s had left at %s; %.1f s"
          % (cluster.name, newcomer, args.kill_at, leaver, at_left,
             time.monotonic() - started))
    return read_parameters(cluster)


def read_parameters(cluster):
    if not os.path.exists(cluster.out):
        raise Failure("%s: worker 0 wrote no parameters" % cluster.name)
    values = array.array("f")
    with open(cluster.out, "rb") as f:
        values.frombytes(f.read())
    return values


def second_kill(args, cluster, victim):
    """Once every survivor's copies are restored and the workers have ended
    --second-kill-at iterations, kills the server after `victim`."""
    deadline = time.monotonic() + args.limit
    while cluster.log("scheduler").count("copies restored") < \
            args.servers - 1:
        if time.monotonic() > deadline:
            raise Failure("%s: copies not restored" % cluster.name)
        time.sleep(0.02)
    cluster.wait_progress(args.second_kill_at, args.limit)
    second = "server-%d" % ((int(victim.split("-")[1]) + 1) % args.servers)
    os.kill(cluster.procs[second].pid, signal.SIGKILL)
    cluster.procs[second].wait()
    print("model_failover_test: killed %s after the copies were restored"
          % second)
    return second


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
    if args.second_kill_at and not \
            args.kill_at < args.second_kill_at < args.iterations:
        print("model_failover_test: --second-kill-at must lie after "
              "--kill-at, inside the run")
        return 2
    victims = [int(v) for v in args.victims.split(",") if v]
    if args.membership:
        victims = []
        if not 0 <= args.leaver < args.servers:
            print("model_failover_test: --leaver must name a server")
            return 2
    elif not victims or not all(0 <= v < args.servers for v in victims):
        print("model_failover_test: --victims must name servers")
        return 2
    with tempfile.TemporaryDirectory(prefix="ember-model-failover.") as d:
        clusters = []

        def body():
            calm = Cluster(args, d, "undisturbed")
            clusters.append(calm)
            undisturbed = run_cluster(args, calm, None)
            if args.membership:
                cluster = Cluster(args, d, "join-then-leave")
                clusters.append(cluster)
                compare(args, cluster.name, undisturbed,
                        run_membership(args, cluster))
                print("model_failover_test: PASS: %s: with a server joining "
                      "and server %d leaving, the final parameters equal "
                      "the undisturbed run's bitwise"
                      % (args.consistency, args.leaver))
                return
            for v in victims:
                cluster = Cluster(args, d, "server-%d-killed" % v)
                clusters.append(cluster)
                compare(args, cluster.name, undisturbed,
                        run_cluster(args, cluster, v))
            print("model_failover_test: PASS: %s: with any of servers %s "
                  "killed, the final parameters equal the undisturbed run's "
                  "bitwise" % (args.consistency, victims))

        return failover_test.run_reporting("model_failover_test", clusters,
                                           body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
