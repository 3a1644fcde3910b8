#!/usr/bin/python3
"""Draws the CTR example's learning curve: the curve.csv that ctr_train's
worker 0 writes, as a PNG with two panels over training examples, the
held-out AUC (with the ground truth's AUC as a dashed line, on synthetic
data) and the train and held-out log-loss.

    /usr/bin/python3 examples/ctr/plot_curve.py CURVE_CSV [OUT_PNG]
        [--title TEXT]

OUT_PNG defaults to the CSV's name with .png. An empty cell is a value not
measured (the truth's AUC on real data): it is left out of its line.
Needs matplotlib (Debian's python3-matplotlib, which scripts/deps.sh
installs); exits 2 without it or on a malformed CSV.
"""

import argparse
import csv
import math
import os
import sys

COLUMNS = ["step", "examples", "seconds", "train_loss", "test_loss",
           "test_auc", "truth_auc"]


class CurveError(Exception):
    """The CSV is not a learning curve; the message says where."""


def read_curve(path):
    """{column: [float, NaN for an empty cell]} of a curve.csv, rows in
    order. Raises CurveError on a wrong header or a cell that is not a
    number."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header != COLUMNS:
            raise CurveError("%s: header %s, expected %s" %
                             (path, header, ",".join(COLUMNS)))
        curve = {c: [] for c in COLUMNS}
        for number, row in enumerate(reader, start=2):
            if len(row) != len(COLUMNS):
                raise CurveError("%s:%d: %d cells, expected %d" %
                                 (path, number, len(row), len(COLUMNS)))
            for column, cell in zip(COLUMNS, row):
                try:
                    value = float(cell) if cell else math.nan
                except ValueError:
                    raise CurveError("%s:%d: %s=%r is not a number" %
                                     (path, number, column, cell))
                curve[column].append(value)
    return curve


def summary(curve):
    """The last point in words, for the chart's subtitle."""
    if not curve["examples"]:
        return "no points yet"
    last = {c: curve[c][-1] for c in COLUMNS}
    words = "%s examples in %.1f s" % (format(int(last["examples"]), ","),
                                       last["seconds"])
    for column, name in (("test_auc", "test AUC"), ("truth_auc", "truth AUC"),
                         ("test_loss", "test log-loss")):
        if math.isfinite(last[column]):
            words += ", %s %.4f" % (name, last[column])
    return words


def draw(curve, png, title):
    """Writes the chart to `png`. False when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    x = curve["examples"]
    fig, (auc, loss) = plt.subplots(2, 1, sharex=True, figsize=(9, 7))
    auc.plot(x, curve["test_auc"], marker="o", color="tab:blue",
             label="test AUC")
    if any(math.isfinite(v) for v in curve["truth_auc"]):
        auc.plot(x, curve["truth_auc"], linestyle="--", color="tab:red",
                 label="truth AUC")
    auc.set_ylabel("AUC")
    auc.legend(loc="lower right")
    auc.grid(alpha=0.3)
    loss.plot(x, curve["train_loss"], marker="o", color="tab:orange",
              label="train log-loss")
    loss.plot(x, curve["test_loss"], marker="o", color="tab:blue",
              label="test log-loss")
    loss.set_ylabel("log-loss")
    loss.set_xlabel("training examples (all workers)")
    loss.xaxis.set_major_formatter(EngFormatter())
    loss.legend(loc="upper right")
    loss.grid(alpha=0.3)
    fig.suptitle(title + "\n" + summary(curve), fontsize=11)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("png", nargs="?")
    ap.add_argument("--title", default="ctr_train: LR + FM")
    args = ap.parse_args(argv)
    png = args.png or os.path.splitext(args.csv)[0] + ".png"
    try:
        curve = read_curve(args.csv)
    except (OSError, CurveError) as e:
        print("plot_curve.py: %s" % e, file=sys.stderr)
        return 2
    if not draw(curve, png, args.title):
        print("plot_curve.py: matplotlib is not installed (Debian's "
              "python3-matplotlib; scripts/deps.sh installs it)",
              file=sys.stderr)
        return 2
    print("wrote " + png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
