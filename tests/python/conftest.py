"""Shared helpers of the Python package's tests (pytest).

The package under test is the build tree's: EMBER_BUILD_DIR (CTest sets
it), else build/ in the repository; its python/ directory goes first on
sys.path, here and in every process a job starts. Jobs run through
scripts/local.sh (ember-launch) on 127.0.0.1 with a port the scheduler picks,
each with a hard time limit; a failed job's whole output (every node's
lines, prefixed with its role and rank) is in the assertion message."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BUILD = os.environ.get("EMBER_BUILD_DIR") or os.path.join(ROOT, "build")
PYTHONPATH = os.path.join(BUILD, "python")
PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "programs")
LOCAL_SH = os.path.join(ROOT, "scripts", "local.sh")
PYTHON = "/usr/bin/python3"

sys.path.insert(0, PYTHONPATH)


class Job:
    def __init__(self, returncode, output):
        self.returncode = returncode
        self.output = output

    def lines(self, prefix):
        """The output lines (without the node prefix) starting with prefix."""
        out = []
        for line in self.output.splitlines():
            body = line.split("] ", 1)[1] if line.startswith("[") else line
            if body.startswith(prefix):
                out.append(body)
        return out


def run_job(servers, workers, program, *args, timeout=60, env=None,
            expect_ok=True):
    """Runs PROGRAM (a Python file; relative names are in programs/) as
    every node of a servers x workers job, killed after `timeout` seconds.
    Returns a Job; with expect_ok, a non-zero exit fails the calling test
    with every node's output."""
    path = program if os.path.isabs(program) else os.path.join(PROGRAMS,
                                                               program)
    e = dict(os.environ)
    e["PYTHONPATH"] = PYTHONPATH + os.pathsep + e.get("PYTHONPATH", "")
    e["EMBER_BUILD_DIR"] = BUILD
    e["EMBER_TIMEOUT"] = str(timeout)
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    e.update(env or {})
    try:
        p = subprocess.run(
            [LOCAL_SH, str(servers), str(workers), PYTHON, path] +
            [str(a) for a in args], env=e, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, timeout=timeout + 30, text=True)
        job = Job(p.returncode, p.stdout)
    except subprocess.TimeoutExpired as t:
        out = t.stdout.decode() if isinstance(t.stdout, bytes) else t.stdout
        raise AssertionError("job did not end within %d s:\n%s" %
                             (timeout + 30, out or ""))
    if expect_ok and job.returncode != 0:
        raise AssertionError("job %s %s exited %d:\n%s" % (
            program, " ".join(map(str, args)), job.returncode, job.output))
    return job
