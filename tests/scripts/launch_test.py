#!/usr/bin/python3
"""Unit tests of scripts/ember_launch.py: the command line (ember-launch's
and local.sh's), the environment every node gets, the mapping of mpi and
slurm ranks to roles, host files and the engines' command lines. No process
is started here; launch_cluster_test.py runs real jobs."""

import contextlib
import io
import os
import signal
import stat
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # Before the import: no __pycache__.
from scriptload import load_script  # noqa: E402

el = load_script("ember_launch")

# An environment in which no scheduler is found unless a test puts one.
BARE = {"PATH": "/nonexistent"}


def parse(argv, environ=None):
    env = dict(BARE, EMBER_SCHEDULER="/bin/true")
    env.update(environ or {})
    return el.parse_ember_launch(argv, env, [])


class EmberLaunchArgumentsTest(unittest.TestCase):
    def test_tracker_options_are_read(self):
        job = parse(["-n", "3", "-s", "2", "--launcher", "mpi", "-H",
                     "hosts", "--timeout", "7.5", "--log-dir", "logs",
                     "--env", "A=1", "--env", "B:x=y",
                     "--engine-arg=--mca", "--", "/bin/echo", "--flag",
                     "{role}"])
        self.assertEqual((job.workers, job.servers), (3, 2))
        self.assertEqual((job.worker_procs, job.server_procs), (3, 2))
        self.assertEqual(job.launcher, "mpi")
        self.assertEqual(job.hostfile, "hosts")
        self.assertEqual(job.timeout, 7.5)
        self.assertEqual(job.log_dir, "logs")
        self.assertEqual(job.env, {"A": "1", "B": "x=y"})
        self.assertEqual(job.engine_args, ["--mca"])
        self.assertEqual(job.command, ["/bin/echo", "--flag", "{role}"])
        self.assertEqual(job.scheduler, ["/bin/true"])

    def test_servers_default_to_the_number_of_workers(self):
        job = parse(["-n", "4", "/bin/true"])
        self.assertEqual((job.servers, job.workers), (4, 4))
        self.assertEqual(job.launcher, "local")

    def test_options_after_the_command_belong_to_the_command(self):
        job = parse(["-n", "1", "/bin/echo", "-s", "9", "--timeout", "x"])
        self.assertEqual(job.servers, 1)
        self.assertEqual(job.timeout, 0)
        self.assertEqual(job.command, ["/bin/echo", "-s", "9", "--timeout",
                                       "x"])

    def test_a_local_program_is_resolved_on_path(self):
        job = parse(["-n", "1", "true"], {"PATH": "/usr/bin:/bin"})
        self.assertTrue(os.path.isabs(job.command[0]))
        with self.assertRaisesRegex(el.UsageError, "not found"):
            parse(["-n", "1", "no-such-program-here"])
        # A remote node resolves it on its own host.
        job = parse(["-n", "1", "--launcher", "mpi", "no-such-program"])
        self.assertEqual(job.command, ["no-such-program"])

    def test_bad_values_are_usage_errors(self):
        for argv in (["-n", "x", "/bin/true"], ["-n", "1", "-s", "-1",
                                                "/bin/true"],
                     ["-n", "1", "--timeout", "soon", "/bin/true"],
                     ["-n", "1", "--env", "1X=2", "/bin/true"],
                     ["-n", "1"],
                     ["-n", "1", "--launcher", "ssh", "/bin/true"],
                     ["-n", "1", "-H", "hosts", "/bin/true"]):
            with self.subTest(argv=argv):
                with self.assertRaises(el.UsageError):
                    parse(argv)

    def test_failover_is_local_and_ssh_only(self):
        self.assertFalse(parse(["-n", "1", "/bin/true"]).failover)
        self.assertTrue(parse(["-n", "1", "--failover", "/bin/true"]).failover)
        self.assertTrue(parse(["-n", "1", "--launcher", "ssh", "-H", "h",
                               "--failover", "/bin/true"]).failover)
        with self.assertRaisesRegex(el.UsageError, "--replace-servers needs "
                                    "--launcher local"):
            parse(["-n", "1", "--launcher", "ssh", "-H", "h", "--failover",
                   "--replace-servers", "1", "/bin/true"])
        for launcher in ("mpi", "slurm"):
            with self.subTest(launcher=launcher):
                with self.assertRaisesRegex(el.UsageError, "--failover needs"):
                    parse(["-n", "1", "--launcher", launcher, "--failover",
                           "/bin/true"])

    def test_replace_servers_needs_failover_and_a_count(self):
        self.assertEqual(parse(["-n", "1", "/bin/true"]).replace_servers, 0)
        job = parse(["-n", "1", "--failover", "--replace-servers", "3",
                     "/bin/true"])
        self.assertEqual((job.failover, job.replace_servers), (True, 3))
        self.assertEqual(parse(["-n", "1", "--replace-servers", "0",
                                "/bin/true"]).replace_servers, 0)
        for argv, says in (
                (["--replace-servers", "1"], "--replace-servers needs "
                 "--failover"),
                (["--failover", "--replace-servers", "-1"],
                 "--replace-servers must be a non-negative integer"),
                (["--failover", "--replace-servers", "x"],
                 "--replace-servers must be a non-negative integer"),
                (["--failover", "--replace-servers", "1", "--join",
                  "127.0.0.1:9"], "not for --join")):
            with self.subTest(argv=argv):
                with self.assertRaisesRegex(el.UsageError, says):
                    parse(["-n", "1"] + argv + ["/bin/true"])

    def test_restart_scheduler_is_ember_schedulers_only(self):
        self.assertEqual(parse(["-n", "1", "/bin/true"]).restart_scheduler, 0)
        self.assertEqual(parse(["-n", "1", "--restart-scheduler", "2",
                                "/bin/true"]).restart_scheduler, 2)
        # The scheduler runs on this host whatever the engine.
        for launcher in ("mpi", "slurm"):
            self.assertEqual(parse(["-n", "1", "--launcher", launcher,
                                    "--restart-scheduler", "1",
                                    "/bin/true"]).restart_scheduler, 1)
        for argv, says in (
                (["--restart-scheduler", "x"], "--restart-scheduler must be "
                 "a non-negative integer"),
                (["--restart-scheduler", "1", "--program-scheduler"],
                 "ember_scheduler only"),
                (["--restart-scheduler", "1", "--join", "127.0.0.1:9"],
                 "not for --join")):
            with self.subTest(argv=argv):
                with self.assertRaisesRegex(el.UsageError, says):
                    parse(["-n", "1"] + argv + ["/bin/true"])

    def test_join_takes_the_running_jobs_scheduler(self):
        job = parse(["-n", "2", "-s", "3", "--join", "10.0.0.5:9091",
                     "/bin/true"], {"EMBER_SCHEDULER": "/nonexistent"})
        self.assertEqual(job.join, ("10.0.0.5", 9091))
        self.assertEqual((job.workers, job.servers), (2, 3))
        self.assertIsNone(job.scheduler)  # None is looked for: none runs.
        self.assertEqual(parse(["-n", "1", "--join", "[::1]:7",
                                "/bin/true"]).join, ("::1", 7))
        self.assertEqual(el.join_address("::1", 7), "[::1]:7")
        self.assertEqual(el.join_address("10.0.0.5", 9091), "10.0.0.5:9091")
        for argv, text in (
                (["--join", "host"], "HOST:PORT"),
                (["--join", "host:0"], "HOST:PORT"),
                (["--join", ":80"], "HOST:PORT"),
                (["--join", "h:1", "--launcher", "mpi"], "--launcher local"),
                (["--join", "h:1", "--scheduler", "/bin/true"],
                 "do not apply"),
                (["--join", "h:1", "--program-scheduler"], "do not apply")):
            with self.subTest(argv=argv):
                with self.assertRaisesRegex(el.UsageError, text):
                    parse(["-n", "1"] + argv + ["/bin/true"])

    def test_argparse_errors_exit_with_status_2(self):
        devnull = open(os.devnull, "w")
        old, sys.stderr = sys.stderr, devnull
        try:
            for argv in (["/bin/true"], ["-n", "1", "--launcher", "yarn",
                                         "/bin/true"]):
                with self.assertRaises(SystemExit) as e:
                    parse(argv)
                self.assertEqual(e.exception.code, 2)
        finally:
            sys.stderr = old
            devnull.close()

    def test_env_takes_a_bare_name_from_this_host(self):
        job = parse(["-n", "1", "--env", "OMP_NUM_THREADS", "/bin/true"],
                    {"OMP_NUM_THREADS": "3"})
        self.assertEqual(job.env, {"OMP_NUM_THREADS": "3"})
        with self.assertRaisesRegex(el.UsageError, "not set here"):
            parse(["-n", "1", "--env", "UNSET_NAME", "/bin/true"])

    def test_environment_gives_defaults_and_options_win(self):
        env = {"EMBER_TIMEOUT": "30", "EMBER_LOG_DIR": "/tmp/l",
               "EMBER_SERVER_PROCS": "1", "EMBER_WORKER_PROCS": "2",
               "DMLC_PS_ROOT_PORT": "9000", "DMLC_PS_ROOT_URI": "10.0.0.1"}
        job = parse(["-n", "4", "--launcher", "mpi", "/bin/true"], env)
        self.assertEqual((job.timeout, job.log_dir), (30, "/tmp/l"))
        self.assertEqual((job.server_procs, job.worker_procs), (1, 2))
        self.assertEqual((job.root_port, job.root_uri), (9000, "10.0.0.1"))
        job = parse(["-n", "4", "--timeout", "5", "--worker-procs", "3",
                     "--log-dir", "d", "/bin/true"], env)
        self.assertEqual((job.timeout, job.worker_procs, job.log_dir),
                         (5, 3, "d"))
        self.assertIsNone(job.root_uri)  # local is always on 127.0.0.1
        with self.assertRaisesRegex(el.UsageError, "DMLC_PS_ROOT_PORT"):
            parse(["-n", "1", "/bin/true"], {"DMLC_PS_ROOT_PORT": "70000"})

    def test_program_scheduler_option(self):
        job = parse(["-n", "1", "--program-scheduler", "/bin/true"])
        self.assertIsNone(job.scheduler)
        self.assertIsNone(job.scheduler_note)
        job = parse(["-n", "1", "--scheduler", "/bin/echo", "/bin/true"])
        self.assertEqual(job.scheduler, ["/bin/echo"])


class LocalShArgumentsTest(unittest.TestCase):
    def parse(self, argv, environ=None):
        env = dict(BARE, EMBER_SCHEDULER="/bin/true")
        env.update(environ or {})
        return el.parse_local_sh(argv, env, [])

    def test_positional_counts_and_program(self):
        job = self.parse(["02", "3", "/bin/echo", "a", "{role}"])
        self.assertEqual(job.name, "local.sh")
        self.assertEqual((job.servers, job.workers), (2, 3))
        self.assertEqual(job.command, ["/bin/echo", "a", "{role}"])
        self.assertEqual(job.launcher, "local")

    def test_process_counts_and_timeout_come_from_the_environment(self):
        job = self.parse(["2", "3", "/bin/true"],
                         {"EMBER_WORKER_PROCS": "1", "EMBER_TIMEOUT": "9",
                          "DMLC_PS_ROOT_URI": "10.1.1.1"})
        self.assertEqual((job.server_procs, job.worker_procs), (2, 1))
        self.assertEqual(job.timeout, 9)
        self.assertIsNone(job.root_uri)

    def test_usage_errors_name_the_bad_value(self):
        cases = [(["1", "1"], "expected at least 3 arguments, got 2"),
                 (["x", "1", "/bin/true"], "NUM_SERVERS must be"),
                 (["1", "-1", "/bin/true"], "NUM_WORKERS must be"),
                 (["1", "1", "/no/such/program"], "program '/no/such/"
                  "program' not found"),
                 (["1", "1", "/bin/true"], "EMBER_TIMEOUT")]
        for argv, text in cases:
            with self.subTest(argv=argv):
                env = {"EMBER_TIMEOUT": "1.5"} if "EMBER" in text else {}
                with self.assertRaisesRegex(el.UsageError, text):
                    self.parse(argv, env)

    def test_help_is_printed_and_nothing_runs(self):
        devnull = open(os.devnull, "w")
        old, sys.stdout = sys.stdout, devnull
        try:
            self.assertIsNone(self.parse(["--help"]))
        finally:
            sys.stdout = old
            devnull.close()

    def test_installed_as_ember_local_it_says_so(self):
        self.assertEqual(el.local_sh_name("/opt/ember/bin/ember-local"),
                         "ember-local")
        self.assertEqual(el.local_sh_name("scripts/local.sh"), "local.sh")
        job = el.parse_local_sh(["1", "1", "/bin/true"],
                                dict(BARE, EMBER_SCHEDULER="/bin/true"), [],
                                "ember-local")
        self.assertEqual(job.name, "ember-local")
        err = io.StringIO()
        old, sys.stderr = sys.stderr, err
        try:
            status = el.main(["--local-sh", "/opt/ember/bin/ember-local", "1"],
                             dict(BARE))
        finally:
            sys.stderr = old
        self.assertEqual(status, 2)
        self.assertEqual(err.getvalue(), (
            "ember-local: expected at least 3 arguments, got 1\n"
            "usage: ember-local NUM_SERVERS NUM_WORKERS PROGRAM [ARGS...]\n"))


class SchedulerSearchTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def executable(self, *parts):
        path = os.path.join(self.dir.name, *parts)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(path, stat.S_IRWXU)
        return path

    def find(self, environ, dirs):
        job = el.Job()
        job.command = ["prog"]
        el.find_scheduler(job, dict(BARE, **environ), dirs)
        return job

    def test_next_to_the_script_then_build_dir_then_path(self):
        bin_dir = os.path.join(self.dir.name, "bin")
        build = os.path.join(self.dir.name, "b")
        beside = self.executable("bin", "ember_scheduler")
        in_build = self.executable("b", "scheduler", "ember_scheduler")
        on_path = self.executable("p", "ember_scheduler")
        path = {"PATH": os.path.dirname(on_path)}
        self.assertEqual(self.find(dict(path, EMBER_BUILD_DIR=build),
                                   [bin_dir]).scheduler, [beside])
        os.unlink(beside)
        self.assertEqual(self.find(dict(path, EMBER_BUILD_DIR=build),
                                   [bin_dir]).scheduler, [in_build])
        self.assertEqual(self.find(path, [bin_dir]).scheduler, [on_path])

    def test_the_source_tree_layout_is_found(self):
        scripts = os.path.join(self.dir.name, "scripts")
        os.makedirs(scripts)
        built = self.executable("build", "scheduler", "ember_scheduler")
        self.assertEqual(os.path.realpath(
            self.find({}, [scripts]).scheduler[0]), built)

    def test_nothing_found_runs_the_program_with_a_note(self):
        job = self.find({}, [self.dir.name])
        self.assertIsNone(job.scheduler)
        self.assertIn("running 'prog' as the scheduler", job.scheduler_note)

    def test_explicit_choices(self):
        self.assertIsNone(self.find({"EMBER_PROGRAM_SCHEDULER": "1"},
                                    []).scheduler)
        with self.assertRaisesRegex(el.UsageError, "EMBER_SCHEDULER"):
            self.find({"EMBER_SCHEDULER": "/no/such"}, [])


class EnvironmentTest(unittest.TestCase):
    def job(self):
        job = el.Job()
        job.servers, job.workers = 2, 3
        job.env = {"OMP_NUM_THREADS": "2", "DMLC_ROLE": "ignored"}
        return job

    def test_a_node_gets_the_job_and_its_role(self):
        base = {"HOME": "/root", "EMBER_PORT_FILE": "/tmp/p",
                "DMLC_ROLE": "worker", "EMBER_SPIN_US": "5"}
        env = el.node_environment(base, self.job(), "server", 1,
                                  "127.0.0.1", 4000)
        want = {"HOME": "/root", "EMBER_SPIN_US": "5",
                "OMP_NUM_THREADS": "2", "DMLC_NUM_SERVER": "2",
                "DMLC_NUM_WORKER": "3", "DMLC_PS_ROOT_URI": "127.0.0.1",
                "DMLC_PS_ROOT_PORT": "4000", "DMLC_ROLE": "server",
                "EMBER_RANK_HINT": "1"}
        self.assertEqual(env, want)

    def test_a_joining_server_gets_the_running_jobs_scheduler(self):
        job = self.job()
        job.join = ("10.0.0.5", 9091)
        env = el.join_environment({"HOME": "/root", "EMBER_RANK_HINT": "4",
                                   "EMBER_PORT_FILE": "/tmp/p"}, job)
        self.assertEqual(env["DMLC_ROLE"], "server")
        self.assertEqual(env["EMBER_JOIN"], "1")
        self.assertEqual((env["DMLC_PS_ROOT_URI"], env["DMLC_PS_ROOT_PORT"]),
                         ("10.0.0.5", "9091"))
        self.assertEqual((env["DMLC_NUM_SERVER"], env["DMLC_NUM_WORKER"]),
                         ("2", "3"))
        self.assertNotIn("EMBER_RANK_HINT", env)
        self.assertNotIn("EMBER_PORT_FILE", env)
        self.assertEqual(env["OMP_NUM_THREADS"], "2")

    def test_a_replacement_gets_its_servers_settings_and_join_replace(self):
        job = self.job()
        job.env["EMBER_JOIN"] = "1"  # --env cannot make it grow the job.
        env = el.replacement_environment(
            {"HOME": "/root", "EMBER_RANK_HINT": "4",
             "EMBER_PORT_FILE": "/tmp/p"}, job, 1, "127.0.0.1", 4000)
        self.assertEqual(env["DMLC_ROLE"], "server")
        self.assertEqual(env["EMBER_JOIN"], "replace")
        self.assertEqual((env["DMLC_PS_ROOT_URI"], env["DMLC_PS_ROOT_PORT"]),
                         ("127.0.0.1", "4000"))
        self.assertEqual((env["DMLC_NUM_SERVER"], env["DMLC_NUM_WORKER"]),
                         ("2", "3"))
        self.assertNotIn("EMBER_RANK_HINT", env)
        self.assertNotIn("EMBER_PORT_FILE", env)

    def test_remote_nodes_get_the_cluster_settings_not_this_hosts(self):
        base = {"HOME": "/root", "PATH": "/x", "SSH_AUTH_SOCK": "s",
                "EMBER_HEARTBEAT_TIMEOUT_MS": "900", "GLOG_v": "1",
                "PS_VERBOSE": "1", "LD_LIBRARY_PATH": "/l",
                "EMBER_PORT_FILE": "/tmp/p", "EMBER_RANK_HINT": "4"}
        env = el.remote_environment(base, self.job(), "10.0.0.1", 4000)
        self.assertEqual(sorted(env), sorted([
            "EMBER_HEARTBEAT_TIMEOUT_MS", "GLOG_v", "PS_VERBOSE",
            "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "DMLC_ROLE",
            "DMLC_NUM_SERVER", "DMLC_NUM_WORKER", "DMLC_PS_ROOT_URI",
            "DMLC_PS_ROOT_PORT"]))
        self.assertEqual(env["DMLC_PS_ROOT_URI"], "10.0.0.1")

    def test_role_placeholder_is_replaced_in_arguments_only(self):
        self.assertEqual(el.substitute_role(["{role}", "{role}", "x{role}"],
                                            "worker"),
                         ["{role}", "worker", "x{role}"])


class RankMappingTest(unittest.TestCase):
    def test_servers_first_then_workers(self):
        got = [el.role_of_rank(r, 2, 3) for r in range(5)]
        self.assertEqual(got, [("server", 0), ("server", 1), ("worker", 0),
                               ("worker", 1), ("worker", 2)])
        for bad in (-1, 5):
            with self.assertRaises(ValueError):
                el.role_of_rank(bad, 2, 3)

    def test_rank_comes_from_open_mpi_then_slurm(self):
        self.assertEqual(el.rank_from_environment(
            {"OMPI_COMM_WORLD_RANK": "3", "SLURM_PROCID": "1"}),
            (3, "OMPI_COMM_WORLD_RANK"))
        self.assertEqual(el.rank_from_environment({"SLURM_PROCID": "1"}),
                         (1, "SLURM_PROCID"))
        self.assertEqual(el.rank_from_environment({"PMIX_RANK": "2"}),
                         (2, "PMIX_RANK"))
        with self.assertRaises(ValueError):
            el.rank_from_environment({"SLURM_PROCID": ""})


class HostfileTest(unittest.TestCase):
    def test_hosts_ports_users_and_slots(self):
        text = ("# cluster\n\nnode1\nroot@node2:2222  # the second\n"
                "10.0.0.3 slots=2\n")
        self.assertEqual(el.parse_hostfile(text), [
            ("node1", None), ("root@node2", 2222), ("10.0.0.3", None),
            ("10.0.0.3", None)])
        self.assertEqual(el.hostname_of("root@node2"), "node2")

    def test_bad_lines_are_errors(self):
        for text in ("", "# nothing\n", "node1:x\n", "node1 cpus=2\n"):
            with self.subTest(text=text):
                with self.assertRaises(ValueError):
                    el.parse_hostfile(text)


class AddressTest(unittest.TestCase):
    def test_override_wins(self):
        job = el.Job()
        job.root_uri = "10.9.8.7"
        self.assertEqual(el.choose_root_uri(job, ["elsewhere"]), "10.9.8.7")

    def test_loopback_when_every_node_is_on_this_host(self):
        job = el.Job()
        self.assertEqual(el.choose_root_uri(
            job, ["localhost", "127.0.0.1"]), "127.0.0.1")
        self.assertTrue(el.is_this_host("localhost"))

    def test_route_to_loopback_is_loopback(self):
        self.assertEqual(el.route_address("127.0.0.1"), "127.0.0.1")


class EngineCommandTest(unittest.TestCase):
    def job(self):
        job = el.Job()
        job.launcher = "mpi"
        job.servers = job.server_procs = 2
        job.workers = job.worker_procs = 3
        job.command = ["prog", "--x"]
        job.env = {"A": "b c"}
        return job

    def test_mpirun_starts_every_node_through_the_node_mode(self):
        argv = el._mpirun_argv(self.job(), {"HOME": "/h", "EMBER_X": "1"},
                               "/s/ember_launch.py", "10.0.0.1", 4000)
        self.assertEqual(argv[0], "mpirun")
        self.assertIn("--oversubscribe", argv)
        self.assertEqual(argv[argv.index("-np") + 1], "5")
        exported = [argv[i + 1] for i, a in enumerate(argv) if a == "-x"]
        # Names only: mpirun exports its own values (no secret in argv).
        self.assertEqual(exported, sorted([
            "A", "EMBER_X", "DMLC_NUM_SERVER", "DMLC_NUM_WORKER",
            "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT"]))
        node = argv.index("/usr/bin/python3")
        self.assertEqual(argv[node:], [
            "/usr/bin/python3", "/s/ember_launch.py", "--node", "--name",
            "ember-launch", "--server-procs", "2", "--worker-procs", "3",
            "--prefix", "--", "prog", "--x"])

    def test_srun_kills_the_step_on_a_bad_exit(self):
        argv = el._srun_argv(self.job(), "/s/ember_launch.py")
        self.assertEqual(argv[:3], ["srun", "--ntasks", "5"])
        self.assertIn("--kill-on-bad-exit=1", argv)
        self.assertEqual(argv[-3:], ["--", "prog", "--x"])


class RestartTest(unittest.TestCase):
    """When the launcher starts a node in place of one that died
    (--replace-servers, --restart-scheduler), and when it does not."""

    def setUp(self):
        self.sup = el.Supervisor("ember-launch", out_fd=os.open(os.devnull,
                                                                os.O_WRONLY))
        self.addCleanup(self.sup.close)
        self.addCleanup(self.sup.stop)
        self.job = el.Job()
        self.job.servers, self.job.workers = 2, 1
        self.job.command = ["/bin/sleep", "30"]

    def start(self, name):
        return self.sup.start(name, "[%s] " % name, ["/bin/sleep", "30"],
                              dict(os.environ))

    def said(self, action):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            action()
        return err.getvalue()

    def test_a_replacement_is_started_while_the_job_runs_and_some_are_left(
            self):
        self.job.replace_servers = 1
        self.start("scheduler 0")
        self.start("worker 0")
        replace = el._replacer(self.sup, self.job, dict(os.environ), 1,
                               "127.0.0.1", 4000)
        out = self.said(replace)
        self.assertIn("starting replacement 1 (server 1) in its place (1 of "
                      "1, --replace-servers)", out)
        [node] = self.sup.replacements
        self.assertEqual((node.name, node.prefix, node.role),
                         ("replacement 1 (server 1)", b"[server 1 r1] ",
                          "server"))
        self.assertTrue(node.survivable)
        self.assertIs(node.replace, replace)
        # None is left: its own death starts none.
        out = self.said(replace)
        self.assertIn("no replacement for it: all 1 started already", out)
        self.assertEqual(len(self.sup.replacements), 1)

    def test_no_replacement_once_the_scheduler_or_the_workers_ended(self):
        self.job.replace_servers = 3
        replace = el._replacer(self.sup, self.job, dict(os.environ), 0,
                               "127.0.0.1", 4000)
        self.start("worker 0")  # No scheduler runs.
        self.assertIn("no replacement for it: the job is ending",
                      self.said(replace))
        self.assertEqual(self.sup.replacements, [])

    def test_a_replacement_is_started_if_the_dead_scheduler_will_restart(
            self):
        # A server and the scheduler killed together: the server's death may
        # be handled first, while the scheduler is dead and not yet started
        # again.
        self.job.replace_servers = 1
        scheduler = self.start("scheduler 0")
        self.start("worker 0")
        os.kill(scheduler.pid, signal.SIGKILL)
        for _ in range(100):
            if not scheduler.running:
                break
            self.sup.step(0.1)
        self.assertEqual(scheduler.status, 137)
        replace = el._replacer(self.sup, self.job, dict(os.environ), 1,
                               "127.0.0.1", 4000)
        # Its last restart: it stays dead.
        self.assertIn("no replacement for it: the job is ending",
                      self.said(replace))
        scheduler.survivable = True  # Restarts are left.
        self.assertIn("starting replacement 1 (server 1) in its place",
                      self.said(replace))
        self.assertEqual(len(self.sup.replacements), 1)

    def test_the_scheduler_restarts_while_a_worker_runs_and_restarts_left(
            self):
        self.job.restart_scheduler = 2
        restart = el._scheduler_restarter(self.sup, self.job,
                                          ["/bin/sleep", "30"],
                                          {"EMBER_PORT_FILE": "/tmp/p"}, 4000)
        self.assertIn("not starting it again: the job is ending",
                      self.said(restart))
        self.start("worker 0")
        out = self.said(restart)
        self.assertIn("starting the scheduler again on port 4000 (1 of 2, "
                      "--restart-scheduler)", out)
        first = self.sup.restarts[0]
        self.assertEqual((first.role, first.prefix, first.survivable),
                         ("scheduler", b"[scheduler r1] ", True))
        self.said(restart)
        second = self.sup.restarts[1]
        # The last one allowed: its death stops the job.
        self.assertFalse(second.survivable)
        env = open("/proc/%d/environ" % second.pid, "rb").read().split(b"\0")
        self.assertIn(b"EMBER_SCHEDULER_RESTART=1", env)
        self.assertIn(b"DMLC_PS_ROOT_PORT=4000", env)
        self.assertNotIn(b"EMBER_PORT_FILE=/tmp/p", env)


class StatusTest(unittest.TestCase):
    def test_signals_follow_the_shell_convention(self):
        self.assertEqual(el.exit_status(-9), 137)
        self.assertEqual(el.exit_status(3), 3)

    def test_a_relayed_node_failure_is_recognised(self):
        sup = el.Supervisor("ember-launch", out_fd=os.open(os.devnull,
                                                           os.O_WRONLY))
        self.addCleanup(sup.close)

        class FakeNode:
            relays_nodes, log, prefix, survivable = True, None, b"", False

        sup._emit(FakeNode(), [
            b"[worker 0] ember-launch: worker 1 (pid 5 on h) exited with "
            b"status 1",
            b"ember-launch: server 0 (pid 7 on h) exited with status 143 "
            b"(stopped: SIGTERM)",
            b"ember-launch: worker 1 (pid 9 on h1) exited with status 137",
            b"ember-launch: server 1 (pid 8 on h) exited with status 1"])
        self.assertEqual(sup.reported_failure, ("worker 1", 9, "h1", 137))

    def test_a_survivable_nodes_relayed_failure_is_left_to_its_exit(self):
        # An ssh client of a server under --failover: its node's failure
        # line does not stop the job; the client's exit is judged instead.
        sup = el.Supervisor("ember-launch", out_fd=os.open(os.devnull,
                                                           os.O_WRONLY))
        self.addCleanup(sup.close)

        class FakeNode:
            relays_nodes, log, prefix, survivable = True, None, b"", True

        sup._emit(FakeNode(), [b"ember-launch: server 1 (pid 8 on h) exited "
                               b"with status 137"])
        self.assertIsNone(sup.reported_failure)


if __name__ == "__main__":
    unittest.main(verbosity=2)
