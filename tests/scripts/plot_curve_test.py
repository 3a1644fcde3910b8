#!/usr/bin/python3
"""examples/ctr/plot_curve.py: it reads the learning curve's CSV (empty
cells are values not measured), refuses a malformed one, and draws a PNG.

    plot_curve_test.py              hand-made curves
    plot_curve_test.py CURVE_CSV    also the curve a ctr_train run wrote
                                    (the ctr_curve integration test)

Without matplotlib the drawing tests are skipped and say why."""

import math
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # No __pycache__ in the source tree.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "ctr"))
import plot_curve  # noqa: E402

HEADER = "step,examples,seconds,train_loss,test_loss,test_auc,truth_auc\n"
# The curve of a run, if given; unittest gets the rest of the command line.
RUN_CSV = sys.argv.pop(1) if len(sys.argv) > 1 else None


def have_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot_curve_test: SKIP drawing: matplotlib is not installed "
              "(Debian's python3-matplotlib)", file=sys.stderr)
        return False
    return True


def is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n"


class PlotCurveTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, text):
        path = os.path.join(self.tmp.name, "curve.csv")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_reads_columns_with_missing_values(self):
        curve = plot_curve.read_curve(self.write(
            HEADER + "1,1000,0.5,0.49,0.5,0.71,0.8\n"
            "2,2000,1,0.48,0.49,0.72,\n"))
        self.assertEqual(curve["examples"], [1000, 2000])
        self.assertEqual(curve["test_auc"], [0.71, 0.72])
        self.assertEqual(curve["truth_auc"][0], 0.8)
        self.assertTrue(math.isnan(curve["truth_auc"][1]))
        self.assertEqual(plot_curve.summary(curve),
                         "2,000 examples in 1.0 s, test AUC 0.7200, "
                         "test log-loss 0.4900")

    def test_refuses_a_malformed_csv(self):
        for text in ("a,b\n1,2\n", HEADER + "1,2,3\n",
                     HEADER + "1,1000,0.5,x,0.5,0.71,0.8\n"):
            with self.assertRaises(plot_curve.CurveError):
                plot_curve.read_curve(self.write(text))
        self.assertEqual(plot_curve.main([self.write("nonsense\n")]), 2)

    def test_draws_a_png(self):
        if not have_matplotlib():
            self.skipTest("matplotlib is not installed")
        rows = "".join("%d,%d,%g,%g,%g,%g,\n" % (i, i * 1000, i / 2,
                                                 0.5 - i / 100, 0.51 - i / 100,
                                                 0.7 + i / 100)
                       for i in range(1, 9))
        csv_path = self.write(HEADER + rows)
        self.assertEqual(plot_curve.main([csv_path, "--title", "t"]), 0)
        self.assertTrue(is_png(os.path.join(self.tmp.name, "curve.png")))
        # No points yet still draws.
        empty = self.write(HEADER)
        png = os.path.join(self.tmp.name, "empty.png")
        self.assertEqual(plot_curve.main([empty, png]), 0)
        self.assertTrue(is_png(png))

    @unittest.skipUnless(RUN_CSV, "no run's curve given")
    def test_the_curve_of_a_run(self):
        path = RUN_CSV
        curve = plot_curve.read_curve(path)
        n = len(curve["examples"])
        self.assertGreaterEqual(n, 2, "a run evaluates at least twice")
        self.assertEqual(curve["examples"], sorted(curve["examples"]))
        for column in ("test_auc", "truth_auc"):
            for v in curve[column]:
                self.assertTrue(0.5 < v <= 1, "%s=%s" % (column, v))
        for column in ("train_loss", "test_loss"):
            for v in curve[column]:
                self.assertTrue(0 < v < 1, "%s=%s" % (column, v))
        if not have_matplotlib():
            self.skipTest("matplotlib is not installed")
        png = os.path.join(self.tmp.name, "run.png")
        self.assertEqual(plot_curve.main([path, png]), 0)
        self.assertTrue(is_png(png))


if __name__ == "__main__":
    unittest.main(verbosity=2)
