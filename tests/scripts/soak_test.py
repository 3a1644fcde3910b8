#!/usr/bin/python3
"""Tests of scripts/soak.py: how it judges growth, and (with EMBER_BUILD_DIR
set, as CTest sets it) a short soak of a real 2 x 2 job."""

import contextlib
import io
import os
import sys
import unittest

sys.dont_write_bytecode = True  # Before the import: no __pycache__.
from scriptload import load_script  # noqa: E402

soak = load_script("soak")


def flat(n, rss, fds, start=0):
    return [(t, rss, fds) for t in range(start, start + n)]


class JudgeTest(unittest.TestCase):
    def test_growth_compares_medians_after_the_warmup(self):
        samples = [(0, 1), (1, 100), (2, 10), (3, 10), (4, 11), (5, 11)]
        first, last, g = soak.growth(samples, warmup_s=2, window=2)
        self.assertEqual((first, last), (10, 11))
        self.assertAlmostEqual(g, 0.1)
        self.assertIsNone(soak.growth(samples, warmup_s=5, window=2))

    def test_flat_processes_pass(self):
        series = {("server", 0): flat(20, 20000, 25),
                  ("worker", 0): flat(20, 21000, 26)}
        lines, ok = soak.judge(series, 5, 4, 0.05, 1024)
        self.assertTrue(ok, "\n".join(lines))

    def test_memory_growth_beyond_five_percent_and_the_slack_fails(self):
        grows = [(t, 20000 + 400 * t, 25) for t in range(20)]
        lines, ok = soak.judge({("server", 1): grows}, 5, 4, 0.05, 1024)
        self.assertFalse(ok)
        self.assertIn("server 1", lines[-1])
        self.assertIn("GROWS", lines[-1])

    def test_a_leaking_descriptor_fails(self):
        leaks = [(t, 20000, 25 + t) for t in range(20)]
        _, ok = soak.judge({("worker", 0): leaks}, 5, 4, 0.05, 1024)
        self.assertFalse(ok)

    def test_small_noise_within_the_slack_passes(self):
        noisy = [(t, 20000 + (300 if t % 2 else 0), 25) for t in range(20)]
        _, ok = soak.judge({("worker", 0): noisy}, 5, 4, 0.0, 1024)
        self.assertTrue(ok)

    def test_too_few_samples_fails(self):
        lines, ok = soak.judge({("worker", 0): flat(3, 1, 1)}, 5, 4, 0.05, 0)
        self.assertFalse(ok)
        self.assertIn("too few samples", lines[-1])


@unittest.skipUnless(os.environ.get("EMBER_BUILD_DIR"),
                     "EMBER_BUILD_DIR is not set (CTest sets it)")
class RealJobTest(unittest.TestCase):
    def test_a_short_soak_of_a_2x2_job_is_flat(self):
        if os.environ.get("EMBER_SOAK_SKIP"):
            self.skipTest(os.environ["EMBER_SOAK_SKIP"])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = soak.main(["--build", os.environ["EMBER_BUILD_DIR"],
                                "--minutes", "0.4", "--warmup", "6",
                                "--interval", "1", "--window", "5"])
        self.assertEqual(status, 0, out.getvalue())
        self.assertIn("server 1", out.getvalue())
        self.assertIn("worker 1", out.getvalue())


if __name__ == "__main__":
    unittest.main()
