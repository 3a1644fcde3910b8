#!/usr/bin/python3
"""ember-launch runs real jobs on every engine it supports, each started by
the test itself on this host: local processes, Open MPI's mpirun, an sshd on
127.0.0.1 with a generated key, and a one-node Slurm cluster (munged,
slurmctld and slurmd configured for localhost). On each engine a 2 x 2 job
of cluster_kv succeeds, and a SIGKILL of one node ends the job non-zero
within 15 s with no process of the job left (checked by PID). An engine that
cannot start here skips its tests with the reason; nothing passes silently.

The programs come from the build tree: EMBER_BUILD_DIR (CTest sets it), else
build/ in the repository. Every job is bounded in time, and on a failure the
job's whole output (every node's lines, prefixed) and logs are printed."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

sys.dont_write_bytecode = True

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "ember_launch.py")
LOCAL_SH = os.path.join(ROOT, "scripts", "local.sh")
BUILD = os.environ.get("EMBER_BUILD_DIR") or os.path.join(ROOT, "build")
SCHEDULER = os.path.join(BUILD, "scheduler", "ember_scheduler")
CLUSTER_KV = os.path.join(BUILD, "tests", "integration", "cluster_kv")
CLUSTER_SOAK = os.path.join(BUILD, "tests", "integration", "cluster_soak")
CLUSTER_FAILOVER = os.path.join(BUILD, "tests", "integration",
                                "cluster_failover")
# ps-lite's API as a ps-lite program uses it (tests/integration/consumer).
API_TOUR = os.path.join(BUILD, "tests", "integration", "api_tour")
PYTHON = "/usr/bin/python3"
JOB_LIMIT = 60  # ember-launch --timeout of every job, in seconds.
# The failover and join jobs' bounds grow by this: a sanitizer build runs
# them 3 to 5 times slower (tests/CMakeLists.txt sets it).
TIME_SCALE = float(os.environ.get("EMBER_TEST_TIME_SCALE", "1"))
# Those jobs: ember-launch --timeout, and the pushes of each worker (enough
# for a join or a failover to happen while they run).
PUSH_JOB_LIMIT = int(JOB_LIMIT * TIME_SCALE)
PUSHES = "--iterations=6000"
# Heartbeats of the jobs in which a node dies: a death is detected within
# 1.5 s (a closed connection within 0.2 s). x TIME_SCALE: a sanitizer
# build's nodes miss tighter beats under load; and a 600 ms timeout failed
# once under ctest -j2, when the whole machine stalled for 460 ms.
DEATH_BEATS = ["--env", "EMBER_HEARTBEAT_INTERVAL_MS=%d" % (100 * TIME_SCALE),
               "--env", "EMBER_HEARTBEAT_TIMEOUT_MS=%d" % (1500 * TIME_SCALE)]
KILL_LIMIT = 15  # A killed node must end the job within this, in seconds.
TAG = "LAUNCH_TEST_TAG"  # Marks the processes of one job (--env TAG).


def setUpModule():
    # The binaries may be relinked by a concurrent build: wait a little
    # (but not for a build tree that is not there).
    deadline = time.monotonic() + (60 if os.path.isdir(BUILD) else 0)
    while True:
        missing = [p for p in (SCHEDULER, CLUSTER_KV, CLUSTER_SOAK, API_TOUR,
                               CLUSTER_FAILOVER)
                   if not os.access(p, os.X_OK)]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(1)
    if missing:
        raise RuntimeError("build first (missing %s; EMBER_BUILD_DIR=%s)" %
                           (", ".join(missing), BUILD))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError as e:
        return "(cannot read: %s)" % e


# ---------------------------------------------------------------- processes --
def proc_start_time(pid):
    """Field 22 of /proc/PID/stat and whether it is a zombie; None if gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    return int(fields[19]), fields[0] == b"Z"


def check_went_on(test, job, tag, timeout, lines=(), patterns=()):
    """Waits up to TIMEOUT s for JOB, a job of cluster_failover in which a
    node died and the job went on, and checks its end: status 0, each of
    LINES in its output and each of PATTERNS (regular expressions, one line
    each) matched, exact sums, and no process of the job (TAG) left."""
    status = job.wait(timeout)
    out = job.output()
    test.assertEqual(status, 0, job.report())
    for line in lines:
        test.assertIn(line, out, job.report())
    for pattern in list(patterns) + [r"^\[worker 0\] cluster_failover: "
                                     r"sums exact"]:
        test.assertRegex(out, "(?m)" + pattern, job.report())
    test.assertEqual(tagged_processes(tag), {}, job.report())


def tagged_processes(tag):
    """Live processes whose environment holds TAG=tag: {pid: info}."""
    found = {}
    marker = ("%s=%s" % (TAG, tag)).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
            exe = os.path.basename(os.readlink("/proc/%d/exe" % pid))
        except OSError:
            continue
        if marker not in env:
            continue
        start = proc_start_time(pid)
        if start is None or start[1]:
            continue
        variables = dict(v.decode(errors="replace").partition("=")[::2]
                         for v in env if b"=" in v)
        found[pid] = {"exe": exe, "start": start[0],
                      "role": variables.get("DMLC_ROLE"),
                      "rank": variables.get("EMBER_RANK_HINT")}
    return found


def command_lines_with(text):
    """The command lines (of any process) that contain TEXT."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if text in cmdline:
                found.append(cmdline.replace(b"\0", b" ").decode(
                    errors="replace"))
    return found


def slurm_processes(conf):
    """Live processes whose environment has SLURM_CONF=conf."""
    marker = ("SLURM_CONF=%s" % conf).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        start = proc_start_time(int(entry))
        if marker in env and start is not None and not start[1]:
            found.append(int(entry))
    return found


def descendants(root):
    """The live descendants of process ROOT: {pid: info}."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(
                (int(entry), int(fields[19])))
    found, todo = {}, [root]
    while todo:
        for pid, start in children.get(todo.pop(), []):
            found[pid] = {"exe": "descendant of %d" % root, "start": start,
                          "role": None, "rank": None}
            todo.append(pid)
    return found


def still_alive(processes):
    """The PIDs of PROCESSES that still run (same start time, not zombie)."""
    alive = []
    for pid, info in processes.items():
        start = proc_start_time(pid)
        if start is not None and start[0] == info["start"] and not start[1]:
            alive.append(pid)
    return alive


class Job:
    """One launcher run: its output in a file, its processes marked by a
    unique tag, and a hard cleanup whatever happens. An argument {LOGS}
    becomes a directory whose files are printed on a failure."""

    def __init__(self, test, argv, env=None, tag=None):
        self.test = test
        self.tag = tag
        self.dir = tempfile.mkdtemp(prefix="ember-launch-test.")
        self.out_path = os.path.join(self.dir, "output")
        self.log_dir = os.path.join(self.dir, "logs")
        argv = [self.log_dir if a == "{LOGS}" else a for a in argv]
        full_env = dict(os.environ)
        full_env.pop("EMBER_SCHEDULER", None)
        full_env.update(env or {})
        # The launcher's own temporary files go with the job's, even when
        # a test kills it with SIGKILL.
        full_env["TMPDIR"] = self.dir
        if tag:
            # The launcher passes it on with "--env LAUNCH_TEST_TAG", so the
            # tag is in no command line.
            full_env[TAG] = tag
        self.out = open(self.out_path, "wb")
        self.started = time.monotonic()
        self.popen = subprocess.Popen(argv, stdout=self.out,
                                      stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL,
                                      env=full_env, start_new_session=True)
        test.addCleanup(self.cleanup)

    def output(self):
        return read_text(self.out_path)

    def report(self):
        text = ["----- job output (%s)" % self.out_path, self.output()]
        if os.path.isdir(self.log_dir):
            for name in sorted(os.listdir(self.log_dir)):
                text += ["----- %s" % name,
                         read_text(os.path.join(self.log_dir, name))]
        return "\n".join(text)

    def wait_running(self):
        """Waits (30 s at most) until both workers of a cluster_soak job
        report progress."""
        deadline = time.monotonic() + 30
        pattern = [re.compile(r"(?m)^\[worker %d\] .*progress" % w)
                   for w in (0, 1)]
        while not all(p.search(self.output()) for p in pattern):
            if self.popen.poll() is not None or time.monotonic() > deadline:
                self.test.fail("the job did not get going (status %s)\n%s" %
                               (self.popen.poll(), self.report()))
            time.sleep(0.1)

    def wait_output(self, pattern, others=()):
        """The first match of PATTERN in the output (30 s at most, scaled by
        TIME_SCALE, while the launcher runs); on a failure OTHERS' reports
        are printed too."""
        deadline = time.monotonic() + 30 * TIME_SCALE
        while True:
            m = re.search(pattern, self.output(), re.M)
            if m:
                return m
            if self.popen.poll() is not None or time.monotonic() > deadline:
                self.test.fail("no '%s' in the output (status %s)\n%s" % (
                    pattern, self.popen.poll(),
                    "\n".join([self.report()] + [o.report() for o in others])))
            time.sleep(0.05)

    def wait(self, timeout):
        """The exit status, or fails the test (with the output) on expiry."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.test.fail("the launcher still runs after %g s\n%s" %
                           (timeout, self.report()))

    def cleanup(self):
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except OSError:
                pass
            self.popen.wait()
        if self.tag:
            for pid in tagged_processes(self.tag):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        self.out.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def kill_scheduler(test, job, tag):
    """SIGKILLs the job's one scheduler (by PID); returns its PID."""
    schedulers = [pid for pid, p in tagged_processes(tag).items()
                  if p["role"] == "scheduler"]
    test.assertEqual(len(schedulers), 1, job.report())
    os.kill(schedulers[0], signal.SIGKILL)
    return schedulers[0]


def check_launcher_kill(test, job, tag, expected, untagged=None):
    """SIGKILLs JOB's launcher: its EXPECTED tagged processes (launcher
    included) and the UNTAGGED ones must all end within KILL_LIMIT s, with
    no one left to stop them."""
    processes = tagged_processes(tag)
    test.assertEqual(len(processes), expected, "%s\n%s" % (processes,
                                                           job.report()))
    for pid, info in (untagged or {}).items():
        processes.setdefault(pid, info)
    os.kill(job.popen.pid, signal.SIGKILL)
    killed = time.monotonic()
    job.wait(5)
    while still_alive(processes) and time.monotonic() - killed < KILL_LIMIT:
        time.sleep(0.1)
    left = still_alive(processes)
    test.assertEqual(left, [], "left running: %s\n%s" % (
        {p: processes[p] for p in left}, job.report()))
    print("%s: launcher killed; its %d processes ended within %.2f s" % (
        job.popen.args[3], len(processes), time.monotonic() - killed),
        file=sys.stderr)


def launch_argv(launcher, program, *options):
    return ([PYTHON, SCRIPT, "--launcher", launcher, "-n", "2", "-s", "2",
             "--timeout", str(JOB_LIMIT), "--scheduler", SCHEDULER] +
            list(options) + ["--", program])


class EngineTests:
    """The checks every engine passes; mixed into one TestCase per engine."""

    launcher = None

    def argv(self, program, *options):
        """The command that runs PROGRAM as a 2 x 2 job on this engine."""
        return launch_argv(self.launcher, program, *options)

    def env(self):
        return {}

    def untagged_processes(self):
        """Processes of the running job that carry no tag: {pid: info}."""
        return {}

    def test_2x2_job_succeeds_with_prefixed_output(self):
        tag = uuid.uuid4().hex
        job = Job(self, self.argv(CLUSTER_KV, "--env", TAG,
                                  "--log-dir", "{LOGS}"), self.env(), tag)
        status = job.wait(JOB_LIMIT + 15)
        out = job.output()
        self.assertEqual(status, 0, job.report())
        for w in (0, 1):
            self.assertRegex(out, r"(?m)^\[worker %d\] .*worker %d verified "
                             r"8200 keys" % (w, w), job.report())
        self.assertRegex(out, r"(?m)^\[scheduler\] .*cluster formed: 2 "
                         r"servers, 2 workers", job.report())
        self.assertEqual(tagged_processes(tag), {}, job.report())

    def test_ps_lite_api_tour_succeeds(self):
        job = Job(self, self.argv(API_TOUR, "--log-dir", "{LOGS}"),
                  self.env())
        self.assertEqual(job.wait(JOB_LIMIT + 15), 0, job.report())
        for w in (0, 1):
            self.assertRegex(job.output(), r"(?m)^\[worker %d\] .*api_tour: "
                             r"worker %d done" % (w, w), job.report())

    def test_sigkill_of_a_node_ends_the_job_within_15_s(self):
        self.check_kill("worker", 1)

    def test_restart_scheduler_starts_a_killed_scheduler_again(self):
        # --restart-scheduler 1: a SIGKILL of the scheduler (which runs on
        # this host whatever the engine) does not stop the job; the launcher
        # starts it again on its port (EMBER_SCHEDULER_RESTART=1, the run's
        # key from the first one's file), the members re-register, the
        # workers of cluster_failover finish with exact sums (through the
        # final barrier, which needs the scheduler) and the launcher exits
        # 0. Deaths are detected as DEATH_BEATS says.
        tag = uuid.uuid4().hex
        # The later --timeout wins.
        argv = self.argv(CLUSTER_FAILOVER, "--env", TAG,
                         "--restart-scheduler", "1", "--log-dir", "{LOGS}",
                         "--timeout", str(PUSH_JOB_LIMIT), *DEATH_BEATS)
        job = Job(self, argv + [PUSHES], self.env(), tag)
        job.wait_output(r"^\[worker 1\] cluster_failover: progress [1-9]")
        scheduler = kill_scheduler(self, job, tag)
        check_went_on(self, job, tag, PUSH_JOB_LIMIT + 15, lines=[
            "ember-launch: scheduler 0 (pid %d) exited with status 137; the "
            "job goes on (--restart-scheduler)" % scheduler,
            "ember-launch: the job finished; its scheduler died during it "
            "and was started again 1 time(s)"], patterns=[
            r"^ember-launch: starting the scheduler again on port \d+ \(1 "
            r"of 1, --restart-scheduler\)",
            r"^\[scheduler r1\] .*every member has re-registered"])

    def check_kill(self, role, index):
        tag = uuid.uuid4().hex
        # Ember's own failure detection would end the survivors after the
        # heartbeat timeout, or 200 ms after a closed connection; a long
        # timeout and no disconnect grace leave the ending to the launcher.
        job = Job(self, self.argv(CLUSTER_SOAK, "--env", TAG,
                                  "--env", "EMBER_HEARTBEAT_TIMEOUT_MS=120000",
                                  "--env", "EMBER_DISCONNECT_GRACE_MS=-1",
                                  "--log-dir", "{LOGS}") +
                  ["--seconds=%d" % JOB_LIMIT], self.env(), tag)
        job.wait_running()
        processes = tagged_processes(tag)
        for pid, info in self.untagged_processes().items():
            processes.setdefault(pid, info)
        # The environment travels out of sight: no command line (which ps
        # shows to everyone) carries a value given with --env.
        self.assertEqual(command_lines_with(tag.encode()), [],
                         job.report())
        victims = [pid for pid, p in processes.items()
                   if p["role"] == role and p["rank"] == str(index) and
                   p["exe"] == os.path.basename(CLUSTER_SOAK)]
        self.assertEqual(len(victims), 1, "%s\n%s" % (processes,
                                                      job.report()))
        os.kill(victims[0], signal.SIGKILL)
        killed = time.monotonic()
        status = job.wait(KILL_LIMIT)
        elapsed = time.monotonic() - killed
        self.assertNotEqual(status, 0, job.report())
        self.assertRegex(job.output(), r"(?m)^ember-launch: %s %d \(pid %d.*"
                         r"\) exited with status 137; stopping the cluster" %
                         (role, index, victims[0]), job.report())
        # Nothing of the job may be left: every process seen before the kill
        # (launcher's children, engines, nodes, scheduler) and any other
        # carrying the tag.
        while still_alive(processes) and \
                time.monotonic() - killed < KILL_LIMIT:
            time.sleep(0.1)
        left = still_alive(processes)
        self.assertEqual(left, [], "left running: %s\n%s" % (
            {p: processes[p] for p in left}, job.report()))
        self.assertEqual(tagged_processes(tag), {}, job.report())
        print("%s: killed %s %d; the job ended with status %d after %.2f s, "
              "%d processes gone" % (self.launcher, role, index, status,
                                     elapsed, len(processes)),
              file=sys.stderr)


# --------------------------------------------------------------- node mode --
class NodeModeTest(unittest.TestCase):
    """ember-launch --node, as an engine starts it, without an engine: the
    role from the rank, the prefix, the status, the stop on EOF."""

    def node(self, options, env, program, stdin=subprocess.DEVNULL):
        full = {k: v for k, v in os.environ.items()
                if k not in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK",
                             "SLURM_PROCID", "PMI_RANK", "DMLC_NODE_HOST",
                             "DMLC_INTERFACE")}
        full.update(env, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT="9")
        return subprocess.Popen(
            [PYTHON, SCRIPT, "--node", "--server-procs", "2",
             "--worker-procs", "3"] + options + ["--", "/bin/sh", "-c",
                                                 program, "{role}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=stdin,
            env=full)

    def test_rank_picks_the_role_and_output_is_prefixed(self):
        # DMLC_NODE_HOST is left unset: the node finds its address itself.
        program = ('echo "$0 $DMLC_ROLE $EMBER_RANK_HINT '
                   '${DMLC_NODE_HOST-unset}"; printf partial; exit 3')
        for variable, rank, label in (("OMPI_COMM_WORLD_RANK", "1",
                                       "server 1"),
                                      ("SLURM_PROCID", "4", "worker 2")):
            with self.subTest(variable=variable):
                node = self.node(["--prefix"], {variable: rank}, program)
                out, _ = node.communicate(timeout=30)
                role, index = label.split()
                self.assertEqual(node.returncode, 3, out)
                self.assertEqual(out.decode().splitlines(), [
                    "[%s] %s %s %s unset" % (label, role, role, index),
                    "[%s] partial" % label,
                    "ember-launch: %s (pid %d on %s) exited with status 3" %
                    (label, int(re.search(rb"pid (\d+)", out).group(1)),
                     socket.gethostname())])

    def test_a_rank_beyond_the_job_is_refused(self):
        node = self.node([], {"SLURM_PROCID": "5"}, "exit 0")
        out, _ = node.communicate(timeout=30)
        self.assertEqual(node.returncode, 2)
        self.assertIn(b"rank 5 is outside 0..4", out)

    def test_environment_from_stdin_then_eof_stops_the_program(self):
        r, w = os.pipe()
        node = self.node(["--role", "worker", "--index", "0",
                          "--env-from-stdin", "--watch-stdin"], {},
                         'echo "started $FOO"; exec sleep 300', stdin=r)
        os.close(r)
        os.write(w, b'{"FOO": "a b\\nc"}\n')
        self.assertEqual(node.stdout.readline(), b"started a b\n")
        self.assertEqual(node.stdout.readline(), b"c\n")
        os.close(w)
        out, _ = node.communicate(timeout=10)
        self.assertEqual(node.returncode, 143, out)
        self.assertRegex(out, rb"worker 0 \(pid \d+ on .*\) exited with "
                         rb"status 143 \(stopped: the launcher went away\)")


# ------------------------------------------------------------------- local --
class LocalTest(EngineTests, unittest.TestCase):
    launcher = "local"

    def test_sigkill_of_a_server_ends_the_job_within_15_s(self):
        self.check_kill("server", 0)

    def test_local_sh_keeps_its_interface(self):
        job = Job(self, [LOCAL_SH, "2", "2", CLUSTER_KV],
                  {"EMBER_SCHEDULER": SCHEDULER,
                   "EMBER_TIMEOUT": str(JOB_LIMIT)})
        self.assertEqual(job.wait(JOB_LIMIT + 15), 0, job.report())
        self.assertRegex(job.output(), r"(?m)^\[worker 1\] .*worker 1 "
                         r"verified", job.report())
        usage = subprocess.run([LOCAL_SH, "2", "x", CLUSTER_KV],
                               stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=30)
        self.assertEqual(usage.returncode, 2)
        self.assertEqual(usage.stdout.decode(), (
            "local.sh: NUM_WORKERS must be a non-negative integer, got 'x'\n"
            "usage: local.sh NUM_SERVERS NUM_WORKERS PROGRAM [ARGS...]\n"))

    def test_the_time_limit_stops_everything_with_124(self):
        tag = uuid.uuid4().hex
        job = Job(self, [PYTHON, SCRIPT, "-n", "1", "-s", "1", "--timeout",
                         "1.5", "--scheduler", SCHEDULER, "--env", TAG, "--",
                         "/bin/sleep", "300"],
                  tag=tag)
        self.assertEqual(job.wait(15), 124, job.report())
        self.assertIn("ember-launch: time limit of 1.5 s exceeded",
                      job.output())
        self.assertEqual(tagged_processes(tag), {}, job.report())

    def test_sigterm_to_the_launcher_stops_the_job_with_143(self):
        tag = uuid.uuid4().hex
        job = Job(self, launch_argv("local", CLUSTER_SOAK, "--env", TAG) +
                  ["--seconds=%d" % JOB_LIMIT], tag=tag)
        job.wait_running()
        processes = tagged_processes(tag)
        self.assertEqual(len(processes), 6, job.report())
        job.popen.send_signal(signal.SIGTERM)
        self.assertEqual(job.wait(KILL_LIMIT), 143, job.report())
        self.assertIn("ember-launch: interrupted (SIGTERM); stopping the "
                      "cluster", job.output())
        self.assertEqual(still_alive(processes), [], job.report())

    def test_a_server_joins_the_running_job_at_the_address_printed(self):
        # ember-launch --join: a third server joins a running 2 x 2 job of
        # cluster_failover, at the scheduler address its launcher printed,
        # while the workers push; both launchers exit 0 and the sums are
        # exact (docs/launching.md, "Adding a server to a running job").
        tag = uuid.uuid4().hex
        program = [CLUSTER_FAILOVER, PUSHES]
        settings = ["--env", TAG, "--env", "EMBER_REPLICAS=1"]
        # The later --timeout wins over launch_argv's.
        job = Job(self, launch_argv("local", program[0], "--log-dir",
                                    "{LOGS}", "--timeout",
                                    str(PUSH_JOB_LIMIT), *settings) +
                  program[1:], tag=tag)
        address = job.wait_output(r"^ember-launch: scheduler at (\S+)$")[1]
        job.wait_output(r"^\[worker 1\] cluster_failover: progress [1-9]")
        joiner = Job(self, [PYTHON, SCRIPT, "--join", address, "-n", "2",
                            "-s", "2", "--timeout", str(PUSH_JOB_LIMIT),
                            "--log-dir", "{LOGS}"] + settings + ["--"] +
                     program, tag=tag)
        joined = joiner.wait(PUSH_JOB_LIMIT + 15)
        ended = job.wait(PUSH_JOB_LIMIT + 15)
        both = "%s\n%s" % (job.report(), joiner.report())
        self.assertEqual((joined, ended), (0, 0), both)
        self.assertRegex(joiner.output(), r"(?m)^\[server \+\] .*joined a "
                         r"running cluster as server 2", both)
        self.assertRegex(job.output(), r"(?m)^\[scheduler\] .*server 2 .* "
                         r"has joined: it holds the state", both)
        self.assertRegex(job.output(), r"(?m)^\[worker 0\] "
                         r"cluster_failover: sums exact", both)
        self.assertTrue(os.path.exists(os.path.join(joiner.log_dir,
                                                    "server-join.log")), both)
        self.assertEqual(tagged_processes(tag), {}, both)

    def failover_job(self, tag, servers, replicas, pushes, options=()):
        """A --failover job of cluster_failover: SERVERS servers, 2 workers,
        EMBER_REPLICAS=REPLICAS, deaths detected as DEATH_BEATS says, with
        the launcher's OPTIONS (default --failover); returned once both
        workers push."""
        job = Job(self, [PYTHON, SCRIPT, "-n", "2", "-s", str(servers)] +
                  list(options or ["--failover"]) +
                  ["--timeout", str(PUSH_JOB_LIMIT),
                         "--scheduler", SCHEDULER, "--log-dir", "{LOGS}",
                         "--env", TAG, "--env", "EMBER_REPLICAS=%d" % replicas,
                         *DEATH_BEATS, "--",
                         CLUSTER_FAILOVER, pushes], tag=tag)
        job.wait_output(r"^\[worker 1\] cluster_failover: progress [1-9]")
        return job

    def kill_server(self, job, tag, index):
        """SIGKILLs the server the launcher started as server INDEX (by PID);
        returns its PID."""
        victims = [pid for pid, p in tagged_processes(tag).items()
                   if p["role"] == "server" and p["rank"] == str(index) and
                   p["exe"] == os.path.basename(CLUSTER_FAILOVER)]
        self.assertEqual(len(victims), 1, job.report())
        os.kill(victims[0], signal.SIGKILL)
        return victims[0]

    def test_with_failover_a_killed_server_costs_the_job_nothing(self):
        # --failover: a SIGKILL of one server of 3 (EMBER_REPLICAS=1) does
        # not stop the job; the cluster fails over, the workers finish with
        # exact sums and the launcher exits 0, naming the server it lost.
        tag = uuid.uuid4().hex
        job = self.failover_job(tag, 3, 1, PUSHES)
        victim = self.kill_server(job, tag, 1)
        check_went_on(self, job, tag, PUSH_JOB_LIMIT + 15, lines=[
            "ember-launch: server 1 (pid %d) exited with status 137; the job "
            "goes on (--failover)" % victim,
            "ember-launch: the job finished without server 1, which died "
            "during it (--failover)"], patterns=[
            r"^\[scheduler\] .*takes over the data of server 1 "])

    def test_with_replace_servers_a_killed_server_is_replaced(self):
        # --replace-servers 1: the launcher starts a server in place of the
        # killed one at once (EMBER_JOIN=replace); the scheduler holds its
        # join until it has declared the death, then admits it into the
        # vacant slot as server 3, which takes a share of the ranges; the
        # sums are exact and the launcher exits 0.
        tag = uuid.uuid4().hex
        job = self.failover_job(tag, 3, 1, PUSHES,
                                ["--failover", "--replace-servers", "1"])
        self.kill_server(job, tag, 1)
        self.check_replaced(job, tag, "scheduler", [
            r"^\[scheduler\] .*takes over the data of server 1 "])

    def check_replaced(self, job, tag, scheduler, patterns):
        """Checks the end of JOB, in which server 1 of 3 was killed and
        replaced once: the launcher's lines, its replacement's join as server
        3 (logged by the scheduler whose prefix is SCHEDULER) and PATTERNS,
        then check_went_on's checks."""
        check_went_on(self, job, tag, PUSH_JOB_LIMIT + 15, lines=[
            "ember-launch: starting replacement 1 (server 1) in its place (1 "
            "of 1, --replace-servers)",
            "ember-launch: the job finished without server 1, which died "
            "during it (--failover); replacements started: replacement 1 "
            "(server 1)"], patterns=list(patterns) + [
            r"^\[%s\] .*server 3 \(id \d+, [^)]*\) has joined: it holds "
            r"the state of its ranges" % re.escape(scheduler),
            r"^\[server 1 r1\] .*joined a running cluster as server 3 "])

    def test_a_replacement_waits_through_a_restart_of_the_scheduler(self):
        # Server 1 and the scheduler are SIGKILLed together: the launcher
        # starts a replacement (EMBER_JOIN=replace) and the scheduler again.
        # The replacement's JOIN finds no scheduler, or one that has not yet
        # heard from the members; it asks again every beat, is held once they
        # have re-registered, and takes the slot of server 1 once the
        # restarted scheduler declares it dead (it never re-registers). The
        # sums are exact and the launcher exits 0.
        tag = uuid.uuid4().hex
        job = self.failover_job(tag, 3, 1, PUSHES, [
            "--failover", "--replace-servers", "1", "--restart-scheduler",
            "1"])
        self.kill_server(job, tag, 1)
        kill_scheduler(self, job, tag)
        self.check_replaced(job, tag, "scheduler r1", [
            # Server 1 never re-registers: 4 of 5, or of 4 once it is dead.
            r"^\[scheduler r1\] .*re-registered \(4 of [45] members\)"])

    def test_with_failover_but_no_copies_the_cluster_ends_the_job(self):
        # Without copies (EMBER_REPLICAS=0) the cluster cannot fail over: it
        # ends itself, naming the dead server, and the launcher exits with
        # the first node's failure, not 0.
        tag = uuid.uuid4().hex
        # Pushes enough to outlast the end the test waits for.
        job = self.failover_job(tag, 2, 0, "--iterations=100000")
        self.kill_server(job, tag, 0)
        status = job.wait(KILL_LIMIT * TIME_SCALE + 15)
        self.assertNotIn(status, (0, 124), job.report())
        self.assertRegex(job.output(), r"(?m)^ember-launch: (worker|server|"
                         r"scheduler) \d \(pid \d+\) exited with status "
                         r"\d+; stopping the cluster", job.report())
        self.assertEqual(tagged_processes(tag), {}, job.report())

    def test_sigkill_of_the_launcher_leaves_no_node(self):
        tag = uuid.uuid4().hex
        job = Job(self, launch_argv("local", CLUSTER_SOAK, "--env", TAG) +
                  ["--seconds=%d" % JOB_LIMIT], tag=tag)
        job.wait_running()
        # The launcher, the scheduler and four nodes.
        check_launcher_kill(self, job, tag, 6)

    def test_installed_layout_finds_its_scheduler(self):
        # bin/ as `cmake --install` lays it out: ember-local (local.sh),
        # ember-launch and ember_scheduler side by side, nothing from the
        # build tree on PATH.
        with tempfile.TemporaryDirectory() as prefix:
            bin_dir = os.path.join(prefix, "bin")
            os.mkdir(bin_dir)
            shutil.copy(LOCAL_SH, os.path.join(bin_dir, "ember-local"))
            shutil.copy(SCRIPT, os.path.join(bin_dir, "ember-launch"))
            os.symlink(SCHEDULER, os.path.join(bin_dir, "ember_scheduler"))
            env = {"PATH": "/usr/bin:/bin", "EMBER_TIMEOUT": str(JOB_LIMIT)}
            env.pop("EMBER_BUILD_DIR", None)
            for argv in ([os.path.join(bin_dir, "ember-local"), "1", "1",
                          CLUSTER_KV],
                         [os.path.join(bin_dir, "ember-launch"), "-n", "1",
                          CLUSTER_KV]):
                full = {k: v for k, v in os.environ.items()
                        if k not in ("EMBER_SCHEDULER", "EMBER_BUILD_DIR")}
                full.update(env)
                run = subprocess.run(argv, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=full,
                                     timeout=JOB_LIMIT + 15)
                out = run.stdout.decode(errors="replace")
                self.assertEqual(run.returncode, 0, out)
                self.assertNotIn("ember_scheduler not found", out)
                self.assertRegex(out, r"(?m)^\[scheduler\] .*cluster formed")


# --------------------------------------------------------------------- mpi --
class MpiTest(EngineTests, unittest.TestCase):
    launcher = "mpi"

    @classmethod
    def setUpClass(cls):
        mpirun = shutil.which("mpirun")
        if mpirun is None:
            raise unittest.SkipTest(skip_reason(
                "mpi", "mpirun is not installed (Debian: openmpi-bin)"))
        argv = [mpirun, "--oversubscribe", "-np", "2", "/bin/true"]
        if os.geteuid() == 0:
            argv.insert(1, "--allow-run-as-root")
        try:
            probe = subprocess.run(argv, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, timeout=60)
        except subprocess.TimeoutExpired:
            raise unittest.SkipTest(skip_reason(
                "mpi", "mpirun -np 2 /bin/true did not end within 60 s"))
        if probe.returncode != 0:
            raise unittest.SkipTest(skip_reason(
                "mpi", "mpirun cannot start processes here: %s" %
                probe.stdout.decode(errors="replace")[-1000:]))


def skip_reason(engine, reason):
    text = "%s engine cannot start: %s" % (engine, reason)
    print("SKIP " + text, file=sys.stderr)
    return text


# --------------------------------------------------------------------- ssh --
class SshTest(EngineTests, unittest.TestCase):
    """Against an sshd of the test's own on 127.0.0.1, with generated host
    and user keys."""

    launcher = "ssh"

    @classmethod
    def setUpClass(cls):
        sshd, ssh = "/usr/sbin/sshd", shutil.which("ssh")
        keygen = shutil.which("ssh-keygen")
        if not os.access(sshd, os.X_OK) or ssh is None or keygen is None:
            raise unittest.SkipTest(skip_reason(
                "ssh", "sshd, ssh or ssh-keygen is not installed (Debian: "
                "openssh-server, openssh-client)"))
        cls.dir = tempfile.mkdtemp(prefix="ember-sshd.")
        d = cls.dir
        for key in ("host_key", "user_key"):
            subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f",
                            os.path.join(d, key)], check=True, timeout=30)
        shutil.copy(os.path.join(d, "user_key.pub"),
                    os.path.join(d, "authorized_keys"))
        cls.port = free_port()
        with open(os.path.join(d, "sshd_config"), "w") as f:
            f.write("Port %d\nListenAddress 127.0.0.1\nHostKey %s/host_key\n"
                    "AuthorizedKeysFile %s/authorized_keys\n"
                    "PidFile %s/sshd.pid\nStrictModes no\nUsePAM no\n"
                    "PasswordAuthentication no\n"
                    "KbdInteractiveAuthentication no\n"
                    "PermitRootLogin prohibit-password\n" % (cls.port, d, d,
                                                            d))
        try:
            os.makedirs("/run/sshd", exist_ok=True)  # Privilege separation.
        except OSError:
            pass
        cls.log = open(os.path.join(d, "sshd.log"), "wb")
        cls.sshd = subprocess.Popen(
            [sshd, "-D", "-e", "-f", os.path.join(d, "sshd_config")],
            stdout=cls.log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL)
        with open(os.path.join(d, "hosts"), "w") as f:
            f.write("# the test's sshd\n127.0.0.1:%d\n" % cls.port)
        cls.ssh_command = ("%s -F /dev/null -i %s/user_key -o BatchMode=yes "
                           "-o StrictHostKeyChecking=no -o "
                           "UserKnownHostsFile=/dev/null -o LogLevel=ERROR" %
                           (ssh, d))
        deadline = time.monotonic() + 20
        while True:
            probe = subprocess.run(
                cls.ssh_command.split() + ["-p", str(cls.port), "127.0.0.1",
                                           "echo ok"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
            if probe.returncode == 0 and probe.stdout == b"ok\n":
                break
            if cls.sshd.poll() is not None or time.monotonic() > deadline:
                reason = "sshd on 127.0.0.1:%d does not take logins: %s %s" % (
                    cls.port, probe.stdout.decode(errors="replace")[-500:],
                    read_text(os.path.join(d, "sshd.log"))[-1000:])
                cls.tearDownClass()
                raise unittest.SkipTest(skip_reason("ssh", reason))
            time.sleep(0.2)

    @classmethod
    def tearDownClass(cls):
        if cls.sshd.poll() is None:
            cls.sshd.terminate()
            try:
                cls.sshd.wait(10)
            except subprocess.TimeoutExpired:
                cls.sshd.kill()
                cls.sshd.wait()
        cls.log.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def untagged_processes(self):
        return descendants(self.sshd.pid)

    def argv(self, program, *options):
        return launch_argv("ssh", program, "-H",
                           os.path.join(self.dir, "hosts"), "--ssh-command",
                           self.ssh_command, *options)

    def test_with_failover_a_killed_remote_server_costs_the_job_nothing(self):
        # --failover over ssh: the node mode's line for the killed server
        # does not stop the job; its ssh client exits with the server's
        # status, the cluster fails over, the sums are exact and the
        # launcher exits 0. 3 servers x 2 workers, EMBER_REPLICAS=1, deaths
        # detected as DEATH_BEATS says.
        tag = uuid.uuid4().hex
        job = Job(self, self.argv(
            CLUSTER_FAILOVER, "-s", "3", "--failover", "--env", TAG,
            "--env", "EMBER_REPLICAS=1", "--log-dir", "{LOGS}",
            "--timeout", str(PUSH_JOB_LIMIT), *DEATH_BEATS) + [PUSHES],
            tag=tag)
        job.wait_output(r"^\[worker 1\] cluster_failover: progress [1-9]")
        victims = [pid for pid, p in tagged_processes(tag).items()
                   if p["role"] == "server" and p["rank"] == "1" and
                   p["exe"] == os.path.basename(CLUSTER_FAILOVER)]
        self.assertEqual(len(victims), 1, job.report())
        os.kill(victims[0], signal.SIGKILL)
        check_went_on(self, job, tag, PUSH_JOB_LIMIT + 15, lines=[
            "ember-launch: the job finished without server 1, which died "
            "during it (--failover)"], patterns=[
            r"^\[server 1\] ember-launch: server 1 \(pid %d on [^)]+\) "
            r"exited with status 137$" % victims[0],
            r"^ember-launch: server 1 \(pid \d+\) exited with status 137; "
            r"the job goes on \(--failover\)",
            r"^\[scheduler\] .*takes over the data of server 1 "])

    def test_sigkill_of_the_launcher_stops_the_remote_nodes(self):
        tag = uuid.uuid4().hex
        job = Job(self, self.argv(CLUSTER_SOAK, "--env", TAG)
                  + ["--seconds=%d" % JOB_LIMIT], tag=tag)
        job.wait_running()
        # The launcher, the scheduler, an ssh client and a program a node;
        # the node modes, which read their environment from stdin, and
        # sshd's sessions are the test's sshd's descendants.
        check_launcher_kill(self, job, tag, 10, self.untagged_processes())


# ------------------------------------------------------------------- slurm --
class SlurmTest(EngineTests, unittest.TestCase):
    """A one-node Slurm cluster of the test's own: munged on a private
    socket and key, slurmctld and slurmd on free ports, proctrack/linuxproc
    and task/none (no cgroups). Jobs run inside an allocation (salloc)."""

    launcher = "slurm"

    @classmethod
    def setUpClass(cls):
        tools = ["/usr/sbin/munged", "/usr/sbin/slurmctld",
                 "/usr/sbin/slurmd"]
        missing = [t for t in tools if not os.access(t, os.X_OK)]
        missing += [t for t in ("salloc", "srun", "sinfo")
                    if shutil.which(t) is None]
        if missing:
            raise unittest.SkipTest(skip_reason(
                "slurm", "not installed: %s (Debian: munge, slurmctld, "
                "slurmd, slurm-client)" % ", ".join(missing)))
        if os.geteuid() != 0:
            raise unittest.SkipTest(skip_reason(
                "slurm", "slurmd must run as root here"))
        cls.daemons = []
        cls.dir = d = tempfile.mkdtemp(prefix="ember-slurm.")
        os.chmod(d, 0o755)
        for sub in ("state", "spool"):
            os.mkdir(os.path.join(d, sub))
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(128))
        os.chmod(key, 0o600)
        host = socket.gethostname().split(".")[0]
        conf = os.path.join(d, "slurm.conf")
        with open(conf, "w") as f:
            f.write("""ClusterName=embertest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge.sock
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/linear
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName={host} NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""".format(host=host, d=d, ctld_port=free_port(), slurmd_port=free_port()))
        cls.env_vars = {"SLURM_CONF": conf}
        env = dict(os.environ, SLURM_CONF=conf)
        try:
            cls.start(["/usr/sbin/munged", "-F", "--socket=%s/munge.sock" % d,
                       "--key-file=" + key, "--pid-file=%s/munged.pid" % d,
                       "--log-file=%s/munged.log" % d,
                       "--seed-file=%s/munge.seed" % d, "--force"], env,
                      "munged")
            deadline = time.monotonic() + 20
            while not os.path.exists(os.path.join(d, "munge.sock")):
                cls.check_time(deadline, "munged made no socket")
            cls.start(["/usr/sbin/slurmctld", "-D", "-c", "-f", conf], env,
                      "slurmctld")
            cls.start(["/usr/sbin/slurmd", "-D", "-f", conf, "-N", host], env,
                      "slurmd")
            deadline = time.monotonic() + 45
            while True:
                state = subprocess.run(
                    ["sinfo", "-h", "-o", "%T"], env=env,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    timeout=30).stdout.decode(errors="replace").strip()
                if state == "idle":
                    break
                cls.check_time(deadline, "the node is '%s', not idle" % state)
        except unittest.SkipTest:
            cls.tearDownClass()
            raise

    @classmethod
    def start(cls, argv, env, name):
        log = open(os.path.join(cls.dir, name + ".out"), "wb")
        cls.daemons.append((subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL), log))

    @classmethod
    def check_time(cls, deadline, what):
        for daemon, _ in cls.daemons:
            if daemon.poll() is not None:
                what += "; %s exited with %d" % (daemon.args[0],
                                                  daemon.returncode)
                deadline = 0
        if time.monotonic() > deadline:
            logs = "\n".join("----- %s\n%s" % (f, read_text(
                os.path.join(cls.dir, f))[-1500:]) for f in sorted(
                os.listdir(cls.dir)) if f.endswith((".log", ".out")))
            raise unittest.SkipTest(skip_reason("slurm", what + "\n" + logs))
        time.sleep(0.2)

    @classmethod
    def tearDownClass(cls):
        # slurmstepd (one a job step, detached from slurmd) may still be
        # finishing a step: give it time, and stop what is left of it
        # after the daemons. Ours carry SLURM_CONF, as slurmd does.
        conf = cls.env_vars.get("SLURM_CONF", "") if hasattr(
            cls, "env_vars") else ""
        daemons = set()
        for daemon, _ in cls.daemons:
            daemons.add(daemon.pid)
            daemons.update(descendants(daemon.pid))
        deadline = time.monotonic() + 15
        while conf and time.monotonic() < deadline and any(
                pid not in daemons for pid in slurm_processes(conf)):
            time.sleep(0.2)
        for daemon, log in reversed(cls.daemons):
            if daemon.poll() is None:
                daemon.terminate()
                try:
                    daemon.wait(10)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait()
            log.close()
        cls.daemons = []
        for pid in slurm_processes(conf) if conf else ():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(cls.dir, ignore_errors=True)

    def env(self):
        return self.env_vars

    def argv(self, program, *options):
        return ["salloc", "--quiet", "-n", "4", "-t", "5"] + launch_argv(
            "slurm", program, *options)


if __name__ == "__main__":
    unittest.main(verbosity=2)
