#!/usr/bin/env bash
# Installs the dependencies, builds, and runs the whole test suite (unit,
# integration and fault tests), compiles the library with clang-15's
# -Wthread-safety (warnings as errors), then runs the suite again under
# AddressSanitizer and UndefinedBehaviorSanitizer, then the unit tests (in-process, where every
# thread is ours) under ThreadSanitizer, then fuzzes every decoder for 30 s
# each. EMBER_SKIP_SANITIZE=1 skips the sanitizer passes, EMBER_SKIP_FUZZ=1
# the fuzzing.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
# --launchers: the engines the ember-launch tests start (mpirun, sshd, Slurm);
# --fuzz: clang and libFuzzer for the fuzz targets (clang also checks the
# lock annotations).
"$root/scripts/deps.sh" --launchers --fuzz
BUILD_DIR=$root/build "$root/scripts/build.sh"
(cd "$root/build" && ctest --output-on-failure -j 2)
# The lock annotations (src/util/thread_annotations.h) under clang-15's
# -Wthread-safety, warnings as errors: the library compiled, nothing run.
cmake -S "$root" -B "$root/build-clang" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++-15 -DEMBER_WERROR=ON \
  -DEMBER_BUILD_TESTS=OFF >/dev/null
cmake --build "$root/build-clang" -j "$(nproc)" --target ps ember_scheduler
if [[ ${EMBER_SKIP_SANITIZE:-0} != 1 ]]; then
  BUILD_DIR=$root/build-asan "$root/scripts/build.sh" -DEMBER_SANITIZE=ON
  # The install test is covered by the first pass.
  (cd "$root/build-asan" && ctest --output-on-failure -j 2 -E install)
  cmake -S "$root" -B "$root/build-tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DEMBER_WERROR=ON -DEMBER_TSAN=ON >/dev/null
  cmake --build "$root/build-tsan" -j "$(nproc)" --target unit_tests
  (cd "$root/build-tsan" && ctest --output-on-failure -j 2 -L unit)
fi
if [[ ${EMBER_SKIP_FUZZ:-0} != 1 ]]; then
  # Every decoder of network and disk bytes, fuzzed for EMBER_FUZZ_SECONDS
  # (default 30) each; scripts/fuzz.py --help says how to run them longer.
  cmake -S "$root" -B "$root/build-fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++-15 -DEMBER_FUZZ=ON >/dev/null
  cmake --build "$root/build-fuzz" -j "$(nproc)" --target fuzz_message \
    fuzz_checkpoint fuzz_specs
  /usr/bin/python3 "$root/scripts/fuzz.py" --build "$root/build-fuzz" \
    --seconds "${EMBER_FUZZ_SECONDS:-30}"
fi
echo "test.sh: all tests passed"
