#!/usr/bin/python3
"""scripts/bench.py end to end, in its quick mode with short runs, against
the programs of this build tree: every case of the ratio table and the
embedding rows get a figure, the CSV has them with every round's values,
and the chart is drawn (when matplotlib is installed). No figure is judged:
this checks that the orchestration works, not how fast Ember is.

usage: bench_quick_test.py BUILD_DIR
"""

import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # No __pycache__ in the source tree.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import bench  # noqa: E402
import benchlib as bl  # noqa: E402


def main():
    build = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="ember-bench-quick-") as out:
        argv = ["/usr/bin/python3", os.path.join(ROOT, "scripts", "bench.py"),
                "--build", build, "--out", out, "--quick", "--seconds", "0.1",
                "--warmup", "0.05", "--no-multi", "--embed-rows", "20000",
                "--case-timeout", "40"]
        p = subprocess.run(argv, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=600)
        print(p.stdout)
        failures = []
        if p.returncode != 0:
            failures.append("bench.py exited with %d" % p.returncode)
        csv_path = os.path.join(out, "bench_results.csv")
        rows = bl.read_csv(csv_path) if os.path.exists(csv_path) else []
        want = [r[1] for r in bench.table_rows("empty", 200)]
        want += ["embedding pull dim 64 adagrad",
                 "embedding push dim 64 adagrad"]
        got = [r["case"] for r in rows]
        if got != want:
            failures.append("CSV cases %s, expected %s" % (got, want))
        for r in rows:
            if list(r) != bench.CSV_HEADER:
                failures.append("CSV header %s" % list(r))
                break
            if bl.numbers([r["ratio"]]) == []:
                failures.append("%s has no ratio" % r["case"])
            if not r["case"].startswith("embedding") and \
                    len(r["ember_values"].split()) != 3:
                failures.append("%s lacks a round's value" % r["case"])
        if not os.path.exists(os.path.join(out, "memcpy_baseline.txt")):
            failures.append("no memcpy_baseline.txt")
        png = os.path.join(out, "bench_ratios.png")
        if bl.pyplot() is None:
            print("bench_quick_test: matplotlib is not installed; the chart "
                  "is not checked")
        elif not os.path.exists(png):
            failures.append("no bench_ratios.png")
        if failures:
            for name in sorted(os.listdir(os.path.join(out, "raw"))):
                with open(os.path.join(out, "raw", name)) as f:
                    print("==== raw/%s\n%s" % (name, f.read()[-3000:]))
            for f in failures:
                print("bench_quick_test: FAIL: " + f)
            return 1
    print("bench_quick_test: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
