#!/usr/bin/python3
"""scripts/benchlib.py on hand-made inputs whose answers are worked out by
hand: medians, the order-statistic confidence interval for the median and
its coverage at the sample sizes the benchmarks use, the median's and the
interval's verdicts on a target, RESULT lines, CSV, the runner's time limit
and failure reports, and callgrind's counts."""

import os
import socket
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # No __pycache__ in the source tree.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))), "scripts"))
import benchlib as bl  # noqa: E402


class StatisticsTest(unittest.TestCase):
    def test_median(self):
        self.assertEqual(bl.median([5, 1, 3]), 3)
        self.assertEqual(bl.median([4, 1, 3, 2]), 2.5)
        self.assertEqual(bl.median([None, 3, 1, "NA", 2]), 2)
        self.assertIsNone(bl.median([None, "NA", float("nan")]))

    def test_numbers_sorts_numerically_and_skips_failures(self):
        self.assertEqual(bl.numbers(["100", None, 10, 2, "n/a", True]),
                         [2, 10, 100])

    def test_no_interval_under_five_values(self):
        # n = 4, k = 1: 1 - 2/16 = 0.875 < 0.9.
        self.assertIsNone(bl.interval([0.4, 0.1, 0.3, 0.2]))
        self.assertIsNone(bl.interval([0.4, None, 0.1, 0.3, None, 0.2]))

    def test_interval_of_five_nine_and_fifteen_values(self):
        # n = 5, k = 1: 1 - 2/32 = 0.9375; k = 2 would give 0.625.
        lo, hi, cov = bl.interval([0.5, 0.3, 0.1, 0.4, 0.2])
        self.assertEqual((lo, hi), (0.1, 0.5))
        self.assertAlmostEqual(cov, 0.9375)
        # n = 9, k = 2: 1 - 2 (1 + 9) / 512 = 0.9609; k = 3 gives 0.82.
        lo, hi, cov = bl.interval([0.9, 0.1, 0.8, 0.2, 0.7, 0.3, 0.6, 0.4,
                                   0.5])
        self.assertEqual((lo, hi), (0.2, 0.8))
        self.assertAlmostEqual(cov, 1 - 20 / 512)
        # n = 15, k = 4: 1 - 2 (1 + 15 + 105 + 455) / 32768 = 0.9648; k = 5
        # adds 1365 and gives 0.88.
        lo, hi, cov = bl.interval(range(15, 0, -1))
        self.assertEqual((lo, hi), (4, 12))
        self.assertAlmostEqual(cov, 1 - 1152 / 32768)
        # Failed rounds do not count.
        self.assertEqual(bl.interval([3, None, 5, 1, 4, 2])[:2], (1, 5))

    def test_settled_judges_the_interval(self):
        self.assertEqual(bl.settled((1.1, 1.3), ">=", 1.0), "met")
        self.assertEqual(bl.settled((1.0, 1.3), ">=", 1.0), "met")
        self.assertEqual(bl.settled((0.7, 0.9), ">=", 1.0), "missed")
        self.assertEqual(bl.settled((0.9, 1.1), ">=", 1.0), "open")
        self.assertEqual(bl.settled((0.5, 0.7), "<=", 1.3), "met")
        self.assertEqual(bl.settled((1.4, 1.6), "<=", 1.3), "missed")
        self.assertEqual(bl.settled((1.2, 1.4), "<=", 1.3), "open")
        self.assertEqual(bl.settled(None, ">=", 1.0), "n/a")
        self.assertEqual(bl.settled((0.5, 0.7), "", None), "-")

    def test_meets_judges_the_median(self):
        self.assertEqual(bl.meets(1.2, ">=", 1.0), "yes")
        self.assertEqual(bl.meets(1.0, ">=", 1.0), "yes")
        self.assertEqual(bl.meets(0.9, ">=", 1.0), "no")
        self.assertEqual(bl.meets(0.5, "<=", 1.3), "yes")
        self.assertEqual(bl.meets(1.4, "<=", 1.3), "no")
        self.assertEqual(bl.meets(None, ">=", 1.0), "n/a")
        self.assertEqual(bl.meets(0.5, "", None), "-")

    def test_best_quotient_and_ratios(self):
        self.assertEqual(bl.best([3, None, 7, 5], True), 7)
        self.assertEqual(bl.best([3, None, 7, 5], False), 3)
        self.assertIsNone(bl.best([None], True))
        self.assertAlmostEqual(bl.quotient(2, 3), 2 / 3)
        self.assertIsNone(bl.quotient(2, 0))
        self.assertIsNone(bl.quotient(None, 3))
        self.assertEqual(bl.per_round_ratios([2, None, 8, 5], [1, 4, 0]),
                         [2.0, None, None, None])

    def test_formatting(self):
        self.assertEqual(bl.fmt(2 / 3), "0.667")
        self.assertEqual(bl.fmt(None), "n/a")
        self.assertEqual(bl.fmt_g(4.09123456), "4.09123")
        self.assertEqual(bl.fmt_span([0.5, None, 0.9, 0.1]), "0.10-0.90")
        self.assertEqual(bl.fmt_span([None]), "n/a")
        self.assertEqual(bl.fmt_values([1.5, None, 2]), "1.5 NA 2")


class ResultLineTest(unittest.TestCase):
    OUTPUT = ("starting\n"
              "[worker 0] RESULT mode=push payload=dense_4m GB_s=3.9 "
              "p50_us=120\n"
              "[server 0] RESULT server=0 rows=5\n"
              "RESULT op=pull dim=64 rows_s=5e6 ratios=0.5,0.6,0.7\n")

    def test_results_in_order_with_prefixes(self):
        found = bl.results(self.OUTPUT)
        self.assertEqual(len(found), 3)
        self.assertEqual(found[0]["GB_s"], "3.9")
        self.assertEqual(found[2]["ratios"], "0.5,0.6,0.7")
        self.assertEqual(bl.results(self.OUTPUT, "op"), [found[2]])

    def test_figure_reads_the_last_line(self):
        self.assertEqual(bl.figure(self.OUTPUT, "rows_s"), 5e6)
        with self.assertRaises(bl.BenchError):
            bl.figure(self.OUTPUT, "GB_s")  # Not in the last line.
        with self.assertRaises(bl.BenchError):
            bl.figure("no figures\n", "GB_s")
        with self.assertRaises(bl.BenchError):
            bl.figure("RESULT GB_s=fast\n", "GB_s")


class FilesTest(unittest.TestCase):
    def test_csv_round_trip(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.csv")
            bl.write_csv(path, ["a", "b"], [{"a": "1", "b": "x y"},
                                            ["2", "z,w"]])
            self.assertEqual(bl.read_csv(path), [{"a": "1", "b": "x y"},
                                                 {"a": "2", "b": "z,w"}])

    def test_callgrind_counts(self):
        with tempfile.TemporaryDirectory() as tmp:
            for name, total in (("worker.12.out", 5000), ("server.13.out",
                                                          7000)):
                with open(os.path.join(tmp, name), "w") as f:
                    f.write("version: 1\ncmd: x\nevents: Ir\nsummary: %d\n" %
                            total)
            self.assertEqual(bl.role_total(tmp, "worker"), 5000)
            self.assertEqual(bl.role_total(tmp, "server"), 7000)
            with self.assertRaises(bl.BenchError):
                bl.role_total(tmp, "scheduler")
            # Two processes of a role: their sum, and only with count=2.
            with open(os.path.join(tmp, "worker.14.out"), "w") as f:
                f.write("events: Ir\ntotals: 1234\n")
            self.assertEqual(bl.role_total(tmp, "worker", 2), 6234)
            with self.assertRaises(bl.BenchError):
                bl.role_total(tmp, "worker")
            with self.assertRaises(bl.BenchError):
                bl.role_total(tmp, "server", 2)
        self.assertEqual(bl.per_request(1000, 3000, 50, 150), 20)

    def test_callgrind_wrapper_runs_the_program_under_valgrind(self):
        with tempfile.TemporaryDirectory() as tmp:
            wrap = bl.callgrind_wrapper(tmp, "/x/kv_bench")
            self.assertTrue(os.access(wrap, os.X_OK))
            with open(wrap) as f:
                text = f.read()
            self.assertIn("valgrind --tool=callgrind", text)
            self.assertIn('"/x/kv_bench" "$@"', text)
            self.assertIn("$CG_DIR/$DMLC_ROLE.%p.out", text)


class RunnerTest(unittest.TestCase):
    def test_output_and_log(self):
        with tempfile.TemporaryDirectory() as tmp:
            runner = bl.Runner(tmp, 10, tmp)
            out = runner.run(["/bin/sh", "-c", "echo RESULT x=$FOO; echo e >&2"],
                             {"FOO": "7"}, log_name="one.log")
            self.assertEqual(bl.figure(out, "x"), 7)
            self.assertIn("e\n", out)
            with open(os.path.join(tmp, "one.log")) as f:
                self.assertEqual(f.read(), out)

    def test_failure_and_timeout_are_errors_with_the_output(self):
        runner = bl.Runner("/nonexistent", 1)
        with self.assertRaises(bl.BenchError) as cm:
            runner.run(["/bin/sh", "-c", "echo why; exit 3"])
        self.assertIn("exit status 3", str(cm.exception))
        self.assertIn("why", str(cm.exception))
        with self.assertRaises(bl.BenchError) as cm:
            runner.run(["/bin/sh", "-c", "echo started; exec sleep 30"])
        self.assertIn("timed out after 1s", str(cm.exception))

    def test_free_port_can_be_bound(self):
        port = bl.free_port()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))


if __name__ == "__main__":
    unittest.main()
