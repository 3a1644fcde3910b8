#!/usr/bin/python3
"""The committed seed corpora are what fuzz_seeds writes today.

usage: seeds_current_test.py FUZZ_SEEDS CORPUS_DIR

A format change (a new header field, a changed control message) changes
what fuzz_seeds writes; a corpus left behind starts the fuzzers from
messages the decoders no longer see. Every seed fuzz_seeds writes must be in
CORPUS_DIR byte for byte; files only in CORPUS_DIR (crash inputs added as
regressions) are left alone.
"""

import filecmp
import os
import subprocess
import sys
import tempfile


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    fuzz_seeds, corpus = sys.argv[1:]
    with tempfile.TemporaryDirectory() as fresh:
        subprocess.run([fuzz_seeds, fresh], check=True,
                       stdout=subprocess.DEVNULL, timeout=60)
        stale = []
        written = 0
        for target in sorted(os.listdir(fresh)):
            for name in sorted(os.listdir(os.path.join(fresh, target))):
                written += 1
                mine = os.path.join(fresh, target, name)
                theirs = os.path.join(corpus, target, name)
                if not os.path.exists(theirs):
                    stale.append(f"{target}/{name} (missing)")
                elif not filecmp.cmp(mine, theirs, shallow=False):
                    stale.append(f"{target}/{name} (differs)")
    if written == 0:
        print("seeds_current_test: FAIL: fuzz_seeds wrote nothing")
        return 1
    if stale:
        for s in stale:
            print(f"seeds_current_test: stale seed: {s}")
        print("seeds_current_test: FAIL: run `fuzz_seeds tests/fuzz/corpus` "
              "from the source root and commit the result")
        return 1
    print(f"seeds_current_test: PASS ({written} seeds current)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
