#!/usr/bin/python3
"""scripts/bench.py, scripts/callgrind.py and scripts/sync_modes.py without
a cluster: the cases and the table rows agree, a row is judged as worked out
by hand, the charts are drawn (skipped, with the reason, without
matplotlib), the arguments are checked, and the outputs of the example
programs are read. The runs themselves are exercised by the bench_quick
integration test."""

import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # No __pycache__ in the source tree.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))), "scripts"))
import bench  # noqa: E402
import benchlib as bl  # noqa: E402
import callgrind  # noqa: E402
import sync_modes  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == PNG_SIGNATURE


class BenchCasesTest(unittest.TestCase):
    def test_every_row_compares_runs_of_the_round(self):
        for handle in ("empty", "sum"):
            runs = {name for name, _, _, _ in bench.round_runs(handle, 200)}
            rows = bench.table_rows(handle, 200)
            for _, case, _, ember, _, base, _, _ in rows:
                self.assertIn(ember, runs, case)
                self.assertIn(base, runs, case)
            self.assertEqual(sum(1 for r in rows if r[6]), 4)  # targets
        # With the summing handle judged, its push is not run twice.
        self.assertNotIn("ember_dense4m_push_sum",
                         {n for n, _, _, _ in bench.round_runs("sum", 0)})

    def test_a_row_judged_by_hand(self):
        row = bench.judge("dense 4 MB push w8", "GB_s",
                          [4.0, 3.0, None, 4.4, 3.9],
                          "zmq 4194304 B w8 GB_s", [4.0, 4.0, 4.0, 4.0, 3.0],
                          ">=", 1.0)
        # Per-round ratios 1, 0.75, NA, 1.1, 1.3: median of the four 1.05.
        self.assertEqual(row["per_round_ratios"], "1.000 0.750 NA 1.100 1.300")
        self.assertEqual(row["ratio"], "1.050")
        self.assertEqual(row["met"], "yes")
        # Four ratios give no interval.
        self.assertEqual(row["settled"], "n/a")
        self.assertEqual(row["ember_median"], "3.95")
        self.assertEqual(row["ratio_of_medians"], "0.988")
        self.assertEqual(row["best_ratio"], "1.100")  # 4.4 / 4.0
        self.assertEqual(row["ember_values"], "4 3 NA 4.4 3.9")
        # A latency: lower is better for best/best.
        row = bench.judge("4 KB push w1 round trip", "p50_us",
                          [140, 150, 130, 145, 135], "zmq", [120] * 5, "<=",
                          1.3)
        self.assertEqual(row["best_ratio"], "1.083")  # 130 / 120
        self.assertEqual(row["settled"], "met")  # 1.08-1.25 <= 1.3
        self.assertEqual(set(row), set(bench.CSV_HEADER))

    def test_chart_of_the_judged_rows(self):
        rows = [bench.judge("case %d" % i, "GB_s", [1.0 + i / 10] * 5, "zmq",
                            [1.0] * 5, op, 1.0)
                for i, op in enumerate([">=", "<=", ""])]
        with tempfile.TemporaryDirectory() as tmp:
            png = os.path.join(tmp, "bench_ratios.png")
            if not bench.draw_chart(rows, png, 5):
                self.skipTest("matplotlib is not installed (python3-"
                              "matplotlib; scripts/deps.sh --bench)")
            self.assertTrue(is_png(png))

    def test_bad_arguments_are_refused(self):
        for argv in (["--rounds", "2"], ["--handle", "other"],
                     ["--seconds", "0"], ["--case-timeout", "5"]):
            with self.assertRaises(SystemExit) as cm:
                with contextlib.redirect_stderr(io.StringIO()):
                    bench.parse_args(argv)
            self.assertEqual(cm.exception.code, 2, argv)

    def test_quick_is_short(self):
        a = bench.parse_args(["--quick"])
        self.assertEqual((a.rounds, a.multi_rounds), (3, 1))
        self.assertLess(a.seconds, 1)
        self.assertLessEqual(a.embed_rows, 100000)

    def test_a_missing_build_is_a_usage_error(self):
        with contextlib.redirect_stderr(io.StringIO()) as err:
            self.assertEqual(bench.main(["--build", "/nonexistent"]), 2)
        self.assertIn("build first", err.getvalue())


class CallgrindTest(unittest.TestCase):
    def test_chart(self):
        rows = [{"payload": p, "window": 8, "handle": "sum",
                 "worker_ir_per_request": "28341",
                 "server_ir_per_request": "78083"}
                for p in ("sparse_1000x1", "dense_4m")]
        with tempfile.TemporaryDirectory() as tmp:
            png = os.path.join(tmp, "callgrind.png")
            if not callgrind.draw_chart(rows, png):
                self.skipTest("matplotlib is not installed")
            self.assertTrue(is_png(png))

    def test_bad_arguments_are_refused(self):
        for argv in (["--handles", "sum,other"], ["--n1", "150"]):
            with self.assertRaises(SystemExit):
                with contextlib.redirect_stderr(io.StringIO()):
                    callgrind.main(argv)


class SyncModesTest(unittest.TestCase):
    OUTPUT = ("[worker 0] RESULT worker=0 iterations=300 seconds=1.000 "
              "it_per_s=300.0 loss=0.5\n"
              "[worker 1] RESULT worker=1 iterations=300 seconds=1.000 "
              "it_per_s=100.0\n"
              "[worker 2] RESULT worker=2 iterations=300 seconds=3.000 "
              "it_per_s=50.5\n"
              "[worker 0] RESULT final test_loss=0.41234 truth_loss=0.4 "
              "workers=3\n"
              "[server 0] RESULT server=0 keys=2000\n")

    def test_summary_of_a_run(self):
        fast, slow, loss = sync_modes.summarise(self.OUTPUT, 2)
        self.assertEqual((fast, slow, loss), (200.0, 50.5, 0.41234))

    def test_a_missing_figure_is_an_error(self):
        for drop in ("worker=2 ", "test_loss"):
            text = "\n".join(line for line in self.OUTPUT.split("\n")
                             if drop not in line)
            with self.assertRaises(bl.BenchError):
                sync_modes.summarise(text, 2)

    def test_chart(self):
        rows = [{"mode": m, "fast_it_per_s": "200", "straggler_it_per_s":
                 "50", "job_seconds": "3", "final_test_loss": "0.4"}
                for m in sync_modes.MODES]
        with tempfile.TemporaryDirectory() as tmp:
            png = os.path.join(tmp, "sync_modes.png")
            if not sync_modes.draw_chart(rows, png):
                self.skipTest("matplotlib is not installed")
            self.assertTrue(is_png(png))


if __name__ == "__main__":
    unittest.main()
