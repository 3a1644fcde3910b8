#!/usr/bin/python3
"""ps-lite's own test programs, compiled unchanged against Ember, run through
ember-launch on one engine.

usage: pslite_programs_test.py LAUNCHER PROGRAM_DIR
       pslite_programs_test.py --not-configured

LAUNCHER is local, ssh, mpi or slurm; PROGRAM_DIR holds test_connection,
test_simple_app, test_kv_app, test_kv_app_multi_workers and
test_kv_app_benchmark, built from the tests/ of a ps-lite checkout
(github.com/dmlc/ps-lite) by CMake's -DEMBER_PSLITE_DIR (docs/launching.md).
Each runs as ps-lite's tests/local.sh runs it: the program is the scheduler
too, 2 servers and 2 workers (test_kv_app_multi_workers: one worker process
hosting two workers, its role as its argument, as local_multi_workers.sh
does). A program passes when the job ends with status 0 within its time
limit, its workers printed what the program prints on success, and no
process of the job is left.

The engines are set up as tests/scripts/launch_cluster_test.py sets them up
(an sshd on 127.0.0.1 with generated keys, Open MPI's mpirun, a one-node
Slurm cluster), by the same code. Exit 77 (skipped), with the reason, when
the engine cannot start here, or with --not-configured: the build was
configured without a ps-lite checkout.
"""

import os
import sys
import unittest
import uuid

sys.dont_write_bytecode = True
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "scripts"))
import launch_cluster_test as lct  # noqa: E402

JOB_LIMIT = 120  # ember-launch --timeout of every job, in seconds.
PROGRAM_DIR = None  # Set by main().

# name -> (ember-launch options, program arguments, [regex every worker's
# output must match, with %d for the worker's rank]). The patterns are the
# lines the programs print (ps-lite's LL, that is LOG(ERROR)) once their
# checks have passed.
PROGRAMS = {
    "test_connection": ([], [], []),
    "test_simple_app": ([], [], []),
    "test_kv_app": ([], [], [r"error: 0, 0"]),
    # One worker process (worker 0) hosts both logical workers.
    "test_kv_app_multi_workers": (["--worker-procs", "1"], ["{role}"], []),
    "test_kv_app_benchmark": ([], [], [
        r"num = 10000000, Push average time cost: [0-9.]+ms",
        r"num = 10000000, Pull average time cost: [0-9.]+ms"]),
}


class PsliteProgramsMixin:
    """Runs every program of PROGRAMS as a 2 x 2 job on self.launcher."""

    def run_program(self, name):
        options, args, patterns = PROGRAMS[name]
        program = os.path.join(PROGRAM_DIR, name)
        tag = uuid.uuid4().hex
        argv = self.argv(program, "--program-scheduler", "--timeout",
                         str(JOB_LIMIT), "--env", lct.TAG, "--log-dir",
                         "{LOGS}", *options) + args
        job = lct.Job(self, argv, self.env(), tag)
        status = job.wait(JOB_LIMIT + 30)
        self.assertEqual(status, 0, "%s on %s\n%s" % (name, self.launcher,
                                                      job.report()))
        out = job.output()
        self.assertRegex(out, r"(?m)^\[scheduler\] .*cluster formed: 2 "
                         r"servers, 2 workers", job.report())
        if name == "test_kv_app_multi_workers":
            # Both logical workers of worker process 0 checked their sums.
            self.assertEqual(len([l for l in out.splitlines() if l.startswith(
                "[worker 0] ") and "error: 0, 0" in l]), 2, job.report())
        for w in (0, 1):
            for p in patterns:
                self.assertRegex(out, r"(?m)^\[worker %d\] .*%s" % (w, p),
                                 job.report())
        self.assertEqual(lct.tagged_processes(tag), {}, job.report())
        print("%s: ps-lite's %s passed" % (self.launcher, name),
              file=sys.stderr)

    def test_ps_lite_programs(self):
        for name in PROGRAMS:
            with self.subTest(program=name):
                self.run_program(name)


# The engines' setups (setUpClass, tearDownClass, argv, env) come from
# launch_cluster_test's classes; only test_ps_lite_programs is run (main
# builds the suite by name), not their own tests.
CLASSES = {
    "local": type("PsliteLocal", (PsliteProgramsMixin, lct.LocalTest), {}),
    "mpi": type("PsliteMpi", (PsliteProgramsMixin, lct.MpiTest), {}),
    "ssh": type("PsliteSsh", (PsliteProgramsMixin, lct.SshTest), {}),
    "slurm": type("PsliteSlurm", (PsliteProgramsMixin, lct.SlurmTest), {}),
}


def main(argv):
    global PROGRAM_DIR
    if argv[1:] == ["--not-configured"]:
        print("SKIP: ps-lite's test programs are not built: configure with "
              "-DEMBER_PSLITE_DIR=/path/to/ps-lite (a checkout of "
              "github.com/dmlc/ps-lite) to compile its tests/*.cc unchanged "
              "against Ember and run them through every launcher "
              "(docs/launching.md)")
        return 77
    if len(argv) != 3 or argv[1] not in CLASSES:
        print(__doc__)
        return 2
    PROGRAM_DIR = argv[2]
    missing = [n for n in PROGRAMS
               if not os.access(os.path.join(PROGRAM_DIR, n), os.X_OK)]
    if missing:
        print("FAIL: not built in %s: %s" % (PROGRAM_DIR, ", ".join(missing)))
        return 1
    lct.setUpModule()  # The scheduler and the programs it checks are built.
    suite = unittest.TestSuite([CLASSES[argv[1]]("test_ps_lite_programs")])
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    if not result.wasSuccessful():
        return 1
    # An engine that cannot start skips in setUpClass: no test ran.
    if result.skipped or result.testsRun == 0:
        print("SKIP: %s" % (result.skipped[0][1] if result.skipped else
                            "the %s engine did not run" % argv[1]))
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
