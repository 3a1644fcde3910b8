"""Kills servers of a running replicated cluster with SIGKILL (docs/replication.md).

Modes:
  survive  kill one server of --servers (with EMBER_REPLICAS=1): every other
           process must exit 0, every key must end at workers x iterations
           (cluster_failover checks), and the figures are reported:
           detection (kill -> the scheduler declares the death), takeover
           (declaration -> the end of the longest stall a worker saw) and
           the longest stall itself.
  twice    kill one server, wait until the scheduler has every copy of the
           survivors' data restored, then kill a second one: as survive
           (exact sums, every other process exits 0); the time from the
           first death to the last copy restored is reported.
  lost     kill two servers that hold the same data at once: every survivor
           must exit non-zero within --limit seconds and the scheduler must
           name the lost data; never a wrong answer.
  join     kill nothing: start one more server with EMBER_JOIN=1 while the
           workers push (docs/replication.md, "Joining"); every process,
           the newcomer included, must exit 0 with exact sums, and the
           figures are reported: the hand-over (the scheduler's admission ->
           its "has joined") and the longest stall a worker saw.
  replace  kill one server, wait for the failover, then start a replacement
           with the usual settings (no EMBER_JOIN: it takes the vacant
           slot); as survive, and the replacement must exit 0 too.
  scheduler
           kill the scheduler, start it again --restart-after seconds later
           on the same port with EMBER_SCHEDULER_RESTART=1 and the run's
           key file (docs/replication.md, "Scheduler restart"): every
           worker must push on while it is down (its progress advances),
           every process but the killed scheduler must exit 0, the sums
           must be exact, and the figures are reported: pushes done during
           the outage, the longest single push, and the time from the
           restart to every member re-registered.
  pause    stop the scheduler with SIGSTOP for --restart-after seconds (more
           than the heartbeat timeout), then let it go on (SIGCONT), as an
           overloaded machine or a debugger would: it must not blame the
           members for the heartbeats it could not read meanwhile (no node
           declared dead); every process exits 0 with exact sums, and the
           scheduler says it did not run for that long.
  joinleave  the issue's 2 -> 3 -> 2: start one more server with
           EMBER_JOIN=1, wait until it has joined, then send server
           --victim SIGTERM (docs/replication.md, "Leaving"): it must leave
           and exit 0, and so must every other process, with exact sums;
           the figures of each migration are reported (its hand-over and
           the longest stall a worker saw while it ran). With
           --ember-consistency=bsp the servers defer each round until
           both workers have pushed it, so both migrations move rounds in
           progress (docs/replication.md, "A hand-over under bsp").

The cluster is started by hand, not through ember-launch, to kill, stop
and restart single processes and read each one's log (ember-launch
--failover, which lets a job outlive a server, is tested in
tests/scripts/launch_cluster_test.py). Every process's log is
printed on failure. Bounded everywhere: no wait without a deadline.

usage: failover_test.py PROGRAM SCHEDULER [--mode survive|twice|lost] [...]
"""

import argparse
import datetime
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

# Every wait of this test (and of model_failover_test.py, which uses its
# Cluster) grows by this factor, --limit too: a sanitizer build runs a job 3
# to 5 times slower (tests/integration/CMakeLists.txt sets it).
TIME_SCALE = float(os.environ.get("EMBER_TEST_TIME_SCALE", "1"))


def parse_args(argv):
    p = argparse.ArgumentParser()
    p.add_argument("program")
    p.add_argument("scheduler")
    p.add_argument("--mode",
                   choices=("survive", "twice", "lost", "join", "replace",
                            "scheduler", "joinleave", "pause"),
                   default="survive")
    p.add_argument("--servers", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--iterations", type=int, default=3000)
    p.add_argument("--victim", type=int, default=1,
                   help="rank of the server to kill (lost: it and the next)")
    p.add_argument("--ballast-mb", type=int, default=0,
                   help="MB of extra state spread over the servers first")
    p.add_argument("--heartbeat-ms", type=int, default=100)
    p.add_argument("--timeout-ms", type=int, default=600)
    p.add_argument("--limit", type=float, default=120.0,
                   help="seconds the whole run may take after the kill")
    p.add_argument("--restart-after", type=float, default=5.0,
                   help="scheduler: seconds between the kill and the "
                   "restart; pause: how long the scheduler is stopped")
    p.add_argument("--ember-consistency", default="",
                   help="EMBER_CONSISTENCY of every process (asp, bsp; "
                   "default: unset, asp); under bsp the workers' pushes "
                   "(no clocks) make one round per push of each worker")
    return p.parse_args(argv)


class Cluster:
    """A cluster started by hand: the scheduler, then args.servers servers
    and args.workers workers running args.program (with program_args), every
    process's output in its own log. model_failover_test.py derives from it.
    """

    # What a worker prints as it goes (its number of pushes or iterations).
    progress_pattern = r"cluster_failover: progress (\d+)"

    def __init__(self, args, workdir, name=""):
        self.args = args
        self.name = name
        self.dir = os.path.join(workdir, name) if name else workdir
        if name:
            os.mkdir(self.dir)
        self.procs = {}  # name -> Popen
        self.logs = {}
        self.scheduler_env = {}  # Extra settings of the scheduler.

    def program_args(self, role):
        del role  # The same for every role.
        return ["--iterations=%d" % self.args.iterations,
                "--ballast_mb=%d" % getattr(self.args, "ballast_mb", 0)]

    def fail(self, what):
        return Failure("%s: %s" % (self.name, what) if self.name else what)

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
        consistency = getattr(self.args, "ember_consistency", "")
        if consistency:
            e["EMBER_CONSISTENCY"] = consistency
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
        extra = {"DMLC_PS_ROOT_PORT": "0", "EMBER_PORT_FILE": port_file}
        extra.update(self.scheduler_env)
        self.spawn("scheduler", [self.args.scheduler],
                   self.env("scheduler", extra))
        deadline = time.monotonic() + 30 * TIME_SCALE
        while not (os.path.exists(port_file) and os.path.getsize(port_file)):
            if time.monotonic() > deadline:
                raise self.fail("the scheduler did not publish its port")
            time.sleep(0.05)
        with open(port_file) as f:
            port = f.read().strip()
        for role, count in (("server", self.args.servers),
                            ("worker", self.args.workers)):
            for i in range(count):
                self.spawn("%s-%d" % (role, i),
                           [self.args.program] + self.program_args(role),
                           self.env(role, {"DMLC_PS_ROOT_PORT": port,
                                           "EMBER_RANK_HINT": str(i)}))

    def spawn_server(self, name, rank, extra):
        """Starts one more server (after the cluster formed)."""
        with open(os.path.join(self.dir, "port")) as f:
            port = f.read().strip()
        env = self.env("server", {"DMLC_PS_ROOT_PORT": port,
                                  "EMBER_RANK_HINT": str(rank)})
        env.update(extra)
        self.spawn(name, [self.args.program] + self.program_args("server"),
                   env)

    def log(self, name):
        with open(self.logs[name], errors="replace") as f:
            return f.read()

    def progress(self, worker):
        """The last progress worker `worker` printed (-1: none yet)."""
        seen = [int(m) for m in re.findall(
            self.progress_pattern, self.log("worker-%d" % worker))]
        return max(seen) if seen else -1

    def wait_progress(self, at_least, seconds):
        deadline = time.monotonic() + seconds * TIME_SCALE
        while time.monotonic() < deadline:
            done = 0
            for w in range(self.args.workers):
                seen = [int(m) for m in re.findall(
                    self.progress_pattern, self.log("worker-%d" % w))]
                done += bool(seen) and max(seen) >= at_least
            if done == self.args.workers:
                return
            for name, p in self.procs.items():
                # A server this test killed is expected to be gone.
                if p.poll() is not None and p.returncode != -signal.SIGKILL:
                    raise self.fail("%s exited (%d) before the kill"
                                    % (name, p.returncode))
            time.sleep(0.02)
        raise self.fail("the workers did not reach %d" % at_least)

    def wait_all(self, names, seconds):
        deadline = time.monotonic() + seconds * TIME_SCALE
        for name in names:
            left = deadline - time.monotonic()
            try:
                self.procs[name].wait(timeout=max(left, 0.01))
            except subprocess.TimeoutExpired:
                raise self.fail("%s still runs %.0f s after the kill"
                                % (name, seconds * TIME_SCALE))

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()

    def dump(self):
        for name in self.procs:
            print("----- %s%s (exit %s)" % (self.name + ": " if self.name
                                            else "", name,
                                            self.procs[name].returncode))
            print(self.log(name))


class Failure(Exception):
    pass


GLOG_TIME = re.compile(r"^[IWEF](\d{8}) (\d\d):(\d\d):(\d\d)\.(\d{6})")


def glog_unix_ms(line):
    """The time of a glog line (local time) as Unix milliseconds."""
    m = GLOG_TIME.match(line)
    if not m:
        return None
    day = datetime.datetime.strptime(m.group(1), "%Y%m%d")
    t = day.replace(hour=int(m.group(2)), minute=int(m.group(3)),
                    second=int(m.group(4)), microsecond=int(m.group(5)))
    return t.timestamp() * 1000.0


def first_line_time(text, needle):
    for line in text.splitlines():
        if needle in line:
            return glog_unix_ms(line)
    return None


def check_finished(cluster, names):
    """Every process in `names` exited 0 and worker 0 found exact sums."""
    bad = ["%s (%d)" % (n, cluster.procs[n].returncode) for n in names
           if cluster.procs[n].returncode != 0]
    if bad:
        raise Failure("non-zero exits: %s" % ", ".join(bad))
    if "sums exact" not in cluster.log("worker-0"):
        raise Failure("worker 0 did not report exact sums")


def reported_stalls(cluster, workers):
    """Each worker's longest push (its max_stall_ms) and when it ended
    (stall_end_unix_ms), as (ms, unix ms) pairs."""
    stalls = []
    for w in range(workers):
        m = re.search(r"max_stall_ms=([\d.]+) stall_end_unix_ms=(\d+)",
                      cluster.log("worker-%d" % w))
        if not m:
            raise Failure("worker %d reported no stall figure" % w)
        stalls.append((float(m.group(1)), int(m.group(2))))
    return stalls


def run_join(args, cluster):
    """--mode=join and --mode=replace."""
    cluster.start()
    cluster.wait_progress(args.iterations // 6, 60)
    victims = []
    if args.mode == "replace":
        victim = "server-%d" % args.victim
        os.kill(cluster.procs[victim].pid, signal.SIGKILL)
        cluster.procs[victim].wait()
        victims.append(victim)
        print("failover_test: killed %s" % victim)
        deadline = time.monotonic() + 30 * TIME_SCALE
        while "takes over the data of" not in cluster.log("scheduler"):
            if time.monotonic() > deadline:
                raise Failure("no failover within 30 s")
            time.sleep(0.02)
        cluster.wait_progress(args.iterations // 3, 60)
    extra = {"EMBER_JOIN": "1"} if args.mode == "join" else {}
    newcomer = "server-%d" % args.servers
    cluster.spawn_server(newcomer, args.servers, extra)
    print("failover_test: started %s%s" % (
        newcomer, " with EMBER_JOIN=1" if extra else ""))
    survivors = [n for n in cluster.procs if n not in victims]
    cluster.wait_all(survivors, args.limit)
    sched = cluster.log("scheduler")
    check_finished(cluster, survivors)
    admitted_ms = first_line_time(sched, "joins the running cluster")
    joined_ms = first_line_time(sched, "has joined: it holds the state")
    if admitted_ms is None or joined_ms is None:
        raise Failure("the scheduler did not report the join")
    if "handing the keys that moved to node" not in cluster.log(
            "server-0"):
        raise Failure("server 0 handed nothing over")
    worst, end_ms = max(reported_stalls(cluster, args.workers))
    print("RESULT %s servers=%d workers=%d handover_ms=%.0f max_stall_ms=%.0f "
          "stall_end_after_admission_ms=%.0f"
          % (args.mode, args.servers, args.workers, joined_ms - admitted_ms,
             worst, end_ms - admitted_ms))
    print("failover_test: PASS: sums exact, every process exited 0")


def run_scheduler_restart(args, cluster):
    """--mode=scheduler."""
    key_file = os.path.join(cluster.dir, "run.key")
    cluster.scheduler_env = {"EMBER_RUN_KEY_FILE": key_file}
    cluster.start()
    cluster.wait_progress(args.iterations // 10, 60)
    if os.stat(key_file).st_mode & 0o777 != 0o600:
        raise Failure("the run's key file is not mode 0600")
    at_kill = [cluster.progress(w) for w in range(args.workers)]
    os.kill(cluster.procs["scheduler"].pid, signal.SIGKILL)
    cluster.procs["scheduler"].wait()
    kill_ms = time.time() * 1000.0
    print("failover_test: killed the scheduler; workers at %s" % at_kill)
    time.sleep(args.restart_after)
    at_restart = [cluster.progress(w) for w in range(args.workers)]
    print("failover_test: restarting the scheduler; workers at %s"
          % at_restart)
    stalled = [w for w in range(args.workers)
               if at_restart[w] <= at_kill[w]]
    with open(os.path.join(cluster.dir, "port")) as f:
        port = f.read().strip()
    restart_ms = time.time() * 1000.0
    cluster.spawn("scheduler-restarted", [args.scheduler],
                  cluster.env("scheduler", {
                      "DMLC_PS_ROOT_PORT": port,
                      "EMBER_SCHEDULER_RESTART": "1",
                      "EMBER_RUN_KEY_FILE": key_file}))
    if stalled:
        raise Failure("workers %s made no progress while the scheduler was "
                      "down" % stalled)
    survivors = [n for n in cluster.procs if n != "scheduler"]
    cluster.wait_all(survivors, args.limit)
    check_finished(cluster, survivors)
    sched = cluster.log("scheduler-restarted")
    rebuilt_ms = first_line_time(sched, "every member has re-registered")
    if rebuilt_ms is None:
        raise Failure("the restarted scheduler did not report every member "
                      "re-registered")
    for name in survivors:
        if name.startswith("scheduler"):
            continue
        text = cluster.log(name)
        if "waiting for it" not in text or "answers again" not in text:
            raise Failure("%s did not log its wait for the scheduler" % name)
    stalls = [ms for ms, _ in reported_stalls(cluster, args.workers)]
    during = [at_restart[w] - at_kill[w] for w in range(args.workers)]
    print("RESULT scheduler_restart servers=%d workers=%d outage_ms=%.0f "
          "pushes_during_outage=%s (to the nearest 200) max_push_ms=%.0f "
          "restart_to_rebuilt_ms=%.0f"
          % (args.servers, args.workers, restart_ms - kill_ms,
             "/".join(str(d) for d in during), max(stalls),
             rebuilt_ms - restart_ms))
    print("failover_test: PASS: workers pushed through the outage, sums "
          "exact, every process but the killed scheduler exited 0")


def run_scheduler_pause(args, cluster):
    """--mode=pause."""
    cluster.start()
    cluster.wait_progress(args.iterations // 10, 60)
    pid = cluster.procs["scheduler"].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(args.restart_after)
    finally:
        os.kill(pid, signal.SIGCONT)
    print("failover_test: the scheduler was stopped for %.1f s"
          % args.restart_after)
    cluster.wait_all(list(cluster.procs), args.limit)
    check_finished(cluster, list(cluster.procs))
    sched = cluster.log("scheduler")
    if "is dead" in sched or "declared dead" in sched:
        raise Failure("the scheduler declared a member dead after its pause")
    m = re.search(r"this process did not run for about (\d+) ms", sched)
    if not m:
        raise Failure("the scheduler did not say it had not run")
    print("failover_test: PASS: after %.1f s stopped (the scheduler measured "
          "%s ms) nobody was declared dead, sums exact, every process "
          "exited 0" % (args.restart_after, m.group(1)))


def wait_log(cluster, name, needle, seconds):
    deadline = time.monotonic() + seconds * TIME_SCALE
    while needle not in cluster.log(name):
        if time.monotonic() > deadline:
            raise Failure("no %r in the log of %s within %d s"
                          % (needle, name, seconds))
        for n, p in cluster.procs.items():
            if p.poll() is not None and p.returncode != 0:
                raise Failure("%s exited (%d) early" % (n, p.returncode))
        time.sleep(0.02)


def worst_stall(cluster, workers, begin_ms, end_ms):
    """The longest push a worker reported that ended in [begin_ms,
    end_ms], in ms (0 if none took over 20 ms)."""
    worst = 0.0
    for w in range(workers):
        for m in re.finditer(r"stall_ms=([\d.]+) end_unix_ms=(\d+)",
                             cluster.log("worker-%d" % w)):
            if begin_ms <= int(m.group(2)) <= end_ms:
                worst = max(worst, float(m.group(1)))
    return worst


def run_join_leave(args, cluster):
    """--mode=joinleave: 2 -> 3 -> 2 servers while the workers push."""
    cluster.start()
    cluster.wait_progress(args.iterations // 6, 60)
    newcomer = "server-%d" % args.servers
    cluster.spawn_server(newcomer, args.servers, {"EMBER_JOIN": "1"})
    print("failover_test: started %s with EMBER_JOIN=1" % newcomer)
    wait_log(cluster, "scheduler", "has joined: it holds the state", 60)
    sched = cluster.log("scheduler")
    admitted_ms = first_line_time(sched, "joins the running cluster")
    joined_ms = first_line_time(sched, "has joined: it holds the state")
    # The leave comes once the workers have gone on a while after the join.
    seen = max(int(m) for m in re.findall(cluster.progress_pattern,
                                           cluster.log("worker-0")))
    cluster.wait_progress(min(seen + args.iterations // 6,
                              args.iterations * 2 // 3), 60)
    leaver = "server-%d" % args.victim
    os.kill(cluster.procs[leaver].pid, signal.SIGTERM)
    print("failover_test: sent %s SIGTERM" % leaver)
    wait_log(cluster, "scheduler", "has left: its ranges are handed over", 60)
    cluster.wait_all(list(cluster.procs), args.limit)
    check_finished(cluster, list(cluster.procs))
    if "this server has left the running cluster" not in cluster.log(leaver):
        raise Failure("%s did not report that it left" % leaver)
    sched = cluster.log("scheduler")
    leave_ms = first_line_time(sched, "leaves the running cluster")
    left_ms = first_line_time(sched, "has left: its ranges are handed over")
    # A migration's stalls end at most a second after its end (a request
    # waiting for the ring, then re-routed).
    join_stall = worst_stall(cluster, args.workers, admitted_ms,
                             joined_ms + 1000)
    leave_stall = worst_stall(cluster, args.workers, leave_ms, left_ms + 1000)
    worst = max(ms for ms, _ in reported_stalls(cluster, args.workers))
    # What it handed over as it left (not at the join, as a former owner).
    leaving = cluster.log(leaver).split("leaving the running cluster", 1)[-1]
    handed = sum(int(b) for b in re.findall(
        r"handing the keys that moved to node \d+ under ring epoch \d+ over "
        r"\(\d+ chunk\(s\), (\d+) bytes\)", leaving))
    print("RESULT joinleave servers=%d workers=%d join_handover_ms=%.0f "
          "join_max_stall_ms=%.0f leave_handover_ms=%.0f leave_handed_mb=%.1f "
          "leave_max_stall_ms=%.0f run_max_stall_ms=%.0f"
          % (args.servers, args.workers, joined_ms - admitted_ms, join_stall,
             left_ms - leave_ms, handed / 1e6, leave_stall, worst))
    print("failover_test: PASS: 2 -> 3 -> 2 servers, sums exact, every "
          "process (the leaver too) exited 0")


def run(args, cluster):
    if args.mode in ("join", "replace"):
        return run_join(args, cluster)
    if args.mode == "scheduler":
        return run_scheduler_restart(args, cluster)
    if args.mode == "pause":
        return run_scheduler_pause(args, cluster)
    if args.mode == "joinleave":
        return run_join_leave(args, cluster)
    cluster.start()
    cluster.wait_progress(args.iterations // 6, 60)
    victims = ["server-%d" % args.victim]
    if args.mode == "lost":
        victims.append("server-%d" % ((args.victim + 1) % args.servers))
    kill_ms = time.time() * 1000.0
    for v in victims:
        os.kill(cluster.procs[v].pid, signal.SIGKILL)
    for v in victims:
        cluster.procs[v].wait()
    print("failover_test: killed %s" % ", ".join(victims))
    if args.mode == "twice":
        # Each survivor whose copies were on the victim, or whose data grew
        # by the victim's, copies its state: with k = 1 every survivor.
        want = args.servers - 1
        deadline = time.monotonic() + 60 * TIME_SCALE
        while cluster.log("scheduler").count("copies restored") < want:
            if time.monotonic() > deadline:
                raise Failure("copies not restored within 60 s")
            time.sleep(0.02)
        sched = cluster.log("scheduler")
        restored = [glog_unix_ms(l) for l in sched.splitlines()
                    if "copies restored" in l]
        dead_ms = first_line_time(sched, " is dead: ")
        print("RESULT restore copies=%d restore_ms=%.0f (first death -> last "
              "copy restored)" % (len(restored), max(restored) - dead_ms))
        second = "server-%d" % ((args.victim + 1) % args.servers)
        os.kill(cluster.procs[second].pid, signal.SIGKILL)
        cluster.procs[second].wait()
        print("failover_test: killed %s" % second)
        victims.append(second)
    survivors = [n for n in cluster.procs if n not in victims]
    cluster.wait_all(survivors, args.limit)
    sched = cluster.log("scheduler")
    if args.mode == "lost":
        bad = [n for n in survivors if cluster.procs[n].returncode == 0]
        if bad:
            raise Failure("exited 0 although data was lost: %s" % bad)
        if "that data is lost" not in sched:
            raise Failure("the scheduler did not name the lost data")
        print("failover_test: PASS: every survivor ended non-zero and the "
              "scheduler named the lost data")
        return
    check_finished(cluster, survivors)
    if "takes over the data of" not in sched:
        raise Failure("the scheduler did not fail over")
    dead_ms = first_line_time(sched, " is dead: ")
    worst, end_ms = max(reported_stalls(cluster, args.workers))
    detection = dead_ms - kill_ms if dead_ms else float("nan")
    takeover = end_ms - dead_ms if dead_ms else float("nan")
    print("RESULT failover servers=%d workers=%d detection_ms=%.0f "
          "takeover_ms=%.0f max_stall_ms=%.0f heartbeat_ms=%d timeout_ms=%d"
          % (args.servers, args.workers, detection, takeover, worst,
             args.heartbeat_ms, args.timeout_ms))
    print("failover_test: PASS: sums exact, every survivor exited 0")


def run_reporting(program, clusters, body):
    """Runs body(), which appends every Cluster it makes to `clusters`:
    returns 0 if it passes, or prints its Failure as `program`'s with every
    cluster's logs and returns 1. Every cluster is stopped either way."""
    try:
        body()
        return 0
    except Failure as e:
        print("%s: FAIL: %s" % (program, e))
        for c in clusters:
            c.stop()
            c.dump()
        return 1
    finally:
        for c in clusters:
            c.stop()


def main(argv):
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ember-failover.") as workdir:
        cluster = Cluster(args, workdir)
        return run_reporting("failover_test", [cluster],
                             lambda: run(args, cluster))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
