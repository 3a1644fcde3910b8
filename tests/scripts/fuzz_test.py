#!/usr/bin/python3
"""Tests of scripts/fuzz.py: its parsing of libFuzzer's output and, with
stand-in fuzz binaries (shell scripts that print what libFuzzer prints), what
it does when a target finds nothing and when one finds a crash."""

import io
import os
import contextlib
import stat
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # Before the import: no __pycache__.
from scriptload import load_script  # noqa: E402

fuzz = load_script("fuzz")

DONE_LINE = ("#1659937\tDONE   cov: 1304 ft: 3485 corp: 834/98Kb lim: 4096 "
             "exec/s: 79044 rss: 557Mb")
CRASH = ("==123==ERROR: AddressSanitizer: heap-buffer-overflow\n"
         "artifact_prefix='{dir}/'; Test unit written to {dir}/crash-abc\n")


class ParseTest(unittest.TestCase):
    def test_done_line(self):
        stats = fuzz.parse_done("INFO: seed\n" + DONE_LINE + "\nDone 1 runs\n")
        self.assertEqual(stats, {"runs": 1659937, "cov": 1304, "ft": 3485,
                                 "corpus": 834, "exec_s": 79044,
                                 "rss_mb": 557})

    def test_no_done_line_after_a_crash(self):
        self.assertIsNone(fuzz.parse_done(CRASH.format(dir="/tmp")))

    def test_artifacts(self):
        self.assertEqual(fuzz.artifacts(CRASH.format(dir="/x")),
                         ["/x/crash-abc"])
        self.assertEqual(fuzz.artifacts(DONE_LINE), [])

    def test_new_inputs_go_to_the_scratch_corpus_not_the_seeds(self):
        argv = fuzz.command("/b/fuzz_message", 30, "/tmp/s", "/repo/c",
                            "/tmp/a", 10)
        self.assertEqual(argv[0], "/b/fuzz_message")
        self.assertIn("-max_total_time=30", argv)
        self.assertIn("-artifact_prefix=/tmp/a/", argv)
        self.assertEqual(argv[-2:], ["/tmp/s", "/repo/c"])


class RunTest(unittest.TestCase):
    """fuzz.py against stand-in binaries in a build folder of our own."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.build = self.tmp.name
        os.makedirs(os.path.join(self.build, "tests", "fuzz"))

    def tearDown(self):
        self.tmp.cleanup()

    def stand_in(self, target, script):
        path = os.path.join(self.build, "tests", "fuzz", "fuzz_" + target)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + script)
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)

    def run_fuzz(self, *args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = fuzz.main(["--build", self.build, "--seconds", "1"] +
                               list(args))
        return status, out.getvalue()

    def test_nothing_found(self):
        self.stand_in("specs", "echo '%s'\n" % DONE_LINE)
        status, out = self.run_fuzz("--targets", "specs")
        self.assertEqual(status, 0, out)
        self.assertIn("specs      ok: 1659937 runs", out)

    def test_a_crash_fails_the_run_and_names_its_input(self):
        artifacts = os.path.join(self.build, "found")
        # libFuzzer's -artifact_prefix=DIR/ is the 5th argument.
        self.stand_in("message",
                      "dir=$(echo \"$5\" | sed 's/-artifact_prefix=//; "
                      "s#/$##')\n"
                      "echo crashing > \"$dir/crash-abc\"\n"
                      "echo '==123==ERROR: AddressSanitizer: oops'\n"
                      "echo \"Test unit written to $dir/crash-abc\"\n"
                      "exit 77\n")
        self.stand_in("specs", "echo '%s'\n" % DONE_LINE)
        status, out = self.run_fuzz("--targets", "message,specs",
                                    "--artifacts", artifacts)
        self.assertEqual(status, 1, out)
        self.assertIn("message    FAILED (status 77); input: " +
                      artifacts + "/crash-abc", out)
        self.assertIn("specs      ok", out)  # The others still ran.
        self.assertTrue(os.path.exists(os.path.join(artifacts, "crash-abc")))

    def test_unknown_target_is_a_usage_error(self):
        with contextlib.redirect_stderr(io.StringIO()):
            with self.assertRaises(SystemExit) as e:
                self.run_fuzz("--targets", "nonesuch")
        self.assertEqual(e.exception.code, 2)


if __name__ == "__main__":
    unittest.main()
