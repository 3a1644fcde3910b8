#!/usr/bin/env bash
# Installs the dependencies, builds, and runs the whole test suite (unit,
# integration and fault tests), then again under AddressSanitizer and
# UndefinedBehaviorSanitizer. EMBER_SKIP_SANITIZE=1 skips the second pass.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
BUILD_DIR=$root/build "$root/scripts/build.sh"
(cd "$root/build" && ctest --output-on-failure -j 2)
if [[ ${EMBER_SKIP_SANITIZE:-0} != 1 ]]; then
  BUILD_DIR=$root/build-asan "$root/scripts/build.sh" -DEMBER_SANITIZE=ON
  # The install test is covered by the first pass.
  (cd "$root/build-asan" && ctest --output-on-failure -j 2 -E install)
fi
echo "test.sh: all tests passed"
