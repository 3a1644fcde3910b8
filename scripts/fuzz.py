#!/usr/bin/python3
"""Runs Ember's libFuzzer targets (tests/fuzz) for a chosen time each.

usage: fuzz.py [--build DIR] [--seconds N] [--targets message,checkpoint,...]
               [--keep DIR]

The targets must have been built with clang and -DEMBER_FUZZ=ON:

  cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++-15 -DEMBER_FUZZ=ON
  cmake --build build-fuzz --target fuzz_message fuzz_checkpoint fuzz_specs

Each target starts from its seed corpus, tests/fuzz/corpus/<target>, which it
reads but never changes; what it learns goes to a scratch corpus (kept with
--keep). A crash, a leak, a sanitizer report or an input that runs longer
than --input-timeout seconds ends that target: its input is saved as
crash-* (or leak-*, timeout-*) in the artifact folder, the run goes on with
the other targets and ends non-zero. Add each such input to the target's
corpus once its bug is fixed: every build replays the corpora
(fuzz_*_corpus tests), so it stays fixed.

Exit status: 0 if no target found anything, 1 if one did, 2 on usage errors.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = ["message", "checkpoint", "specs"]
DONE = re.compile(r"^#(\d+)\s+DONE\s+cov: (\d+) ft: (\d+) corp: (\d+)/\S+"
                  r".*exec/s: (\d+) rss: (\d+)Mb")
ARTIFACT = re.compile(r"(?:Test unit written to|artifact_prefix.*; Test unit "
                      r"written to) (\S+)")


def parse_done(output):
    """The final statistics line: dict of runs, cov, ft, corpus, exec_s,
    rss_mb; None if the run did not end normally."""
    for line in reversed(output.splitlines()):
        m = DONE.match(line.strip())
        if m:
            keys = ["runs", "cov", "ft", "corpus", "exec_s", "rss_mb"]
            return dict(zip(keys, (int(g) for g in m.groups())))
    return None


def artifacts(output):
    """Paths of the inputs libFuzzer saved (crash-, leak-, timeout-...)."""
    return [m.group(1) for line in output.splitlines()
            for m in [ARTIFACT.search(line)] if m]


def command(binary, seconds, scratch, corpus, artifact_dir, input_timeout):
    """The libFuzzer command line: new inputs go to the first folder."""
    return [binary, "-max_total_time=%d" % seconds,
            "-timeout=%d" % input_timeout, "-rss_limit_mb=4096",
            "-print_final_stats=0",
            "-artifact_prefix=" + os.path.join(artifact_dir, ""),
            scratch, corpus]


def run_target(build, target, seconds, scratch_root, artifact_dir,
               input_timeout):
    binary = os.path.join(build, "tests", "fuzz", "fuzz_" + target)
    if not os.access(binary, os.X_OK):
        raise SystemExit("fuzz.py: no %s (build with -DEMBER_FUZZ=ON; see "
                         "--help)" % binary)
    corpus = os.path.join(ROOT, "tests", "fuzz", "corpus", target)
    scratch = os.path.join(scratch_root, target)
    os.makedirs(scratch, exist_ok=True)
    os.makedirs(artifact_dir, exist_ok=True)
    argv = command(binary, seconds, scratch, corpus, artifact_dir,
                   input_timeout)
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=seconds + 120,
                           check=False)
        output = p.stdout.decode(errors="replace")
        status = p.returncode
    except subprocess.TimeoutExpired as e:
        output = (e.output or b"").decode(errors="replace")
        status = "hung"
    return status, output


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build-fuzz"))
    ap.add_argument("--seconds", type=int, default=60,
                    help="fuzzing time per target")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--input-timeout", type=int, default=10,
                    help="seconds one input may take")
    ap.add_argument("--keep", help="keep the scratch corpora in this folder")
    ap.add_argument("--artifacts", default=None,
                    help="where crash inputs go (default: the scratch folder)")
    args = ap.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    unknown = set(targets) - set(TARGETS)
    if unknown or args.seconds < 1:
        ap.error("unknown target(s) %s; known: %s" %
                 (",".join(sorted(unknown)), ",".join(TARGETS)))
    scratch_root = args.keep or tempfile.mkdtemp(prefix="ember-fuzz.")
    artifact_dir = args.artifacts or os.path.join(scratch_root, "artifacts")
    failed = []
    try:
        for target in targets:
            status, output = run_target(args.build, target, args.seconds,
                                        scratch_root, artifact_dir,
                                        args.input_timeout)
            stats = parse_done(output)
            if status == 0 and stats:
                print("fuzz.py: %-10s ok: %d runs in %d s, %d exec/s, "
                      "coverage %d, features %d, corpus %d, rss %d MB" %
                      (target, stats["runs"], args.seconds, stats["exec_s"],
                       stats["cov"], stats["ft"], stats["corpus"],
                       stats["rss_mb"]), flush=True)
                continue
            sys.stdout.write(output[-20000:])
            found = artifacts(output)
            print("fuzz.py: %-10s FAILED (status %s); input: %s" %
                  (target, status, ", ".join(found) or "none saved"),
                  flush=True)
            if found and not args.artifacts:
                keep = os.path.join(ROOT, "build-fuzz-artifacts")
                os.makedirs(keep, exist_ok=True)
                for path in found:
                    shutil.copy(path, keep)
                print("fuzz.py: copied to " + keep)
            failed.append(target)
    finally:
        if not args.keep:
            shutil.rmtree(scratch_root, ignore_errors=True)
    if failed:
        print("fuzz.py: %d of %d targets found a problem: %s" %
              (len(failed), len(targets), ", ".join(failed)))
        return 1
    print("fuzz.py: %d targets, %d s each, nothing found" %
          (len(targets), args.seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
