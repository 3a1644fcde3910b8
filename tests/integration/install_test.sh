#!/usr/bin/env bash
# Installs the build into a temporary prefix, builds an outside project with
# find_package(Ember) and runs it with the installed ember-local
# (scripts/local.sh), which must find the installed scheduler next to itself.
# usage: install_test.sh BUILD_DIR
set -eu
build=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ember-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log" ||
  { cat "$work/install.log"; exit 1; }
for f in bin/ember_scheduler bin/ember-local bin/ember-launch \
  bin/ember-status include/ps/ps.h \
  lib/cmake/Ember/EmberConfig.cmake lib/pkgconfig/ember.pc; do
  [[ -e $prefix/$f ]] || { echo "install_test: $f is not installed"; exit 1; }
done
# Every installed program's name says it is Ember's.
for f in "$prefix"/bin/*; do
  case $(basename "$f") in
    ember_* | ember-*) ;;
    *) echo "install_test: bin/$(basename "$f") does not say it is Ember's"; exit 1 ;;
  esac
done
# ember-local's messages use its installed name.
usage=$("$prefix/bin/ember-local" 1 1 2>&1) && exit 1
[[ $usage == "ember-local: expected at least 3 arguments, got 2"* ]] ||
  { echo "install_test: ember-local says: $usage"; exit 1; }
# --version on the installed programs names Ember's version.
version=$(sed -n 's/^project(Ember VERSION \([^ )]*\).*/\1/p' \
  "$here/../../CMakeLists.txt")
"$prefix/bin/ember_scheduler" --version 2>&1 | grep -q "version $version" ||
  { echo "install_test: ember_scheduler --version does not say $version"; exit 1; }
/usr/bin/python3 "$prefix/bin/ember-launch" --version | grep -q "$version" ||
  { echo "install_test: ember-launch --version does not say $version"; exit 1; }
# pkg-config, as a Makefile user would: build the same program with it.
pc_flags=$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs ember)
g++ "$here/consumer/api_tour.cc" -o "$work/api_tour_pc" $pc_flags \
  -Wl,-rpath,"$prefix/lib" >"$work/pc.log" 2>&1 ||
  { cat "$work/pc.log"; echo "install_test: pkg-config flags do not build"; exit 1; }
cmake -S "$here/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/consumer" >"$work/build.log" 2>&1 ||
  { cat "$work/build.log"; exit 1; }
# Nothing from the build tree: the installed ember-local must find the
# installed scheduler by itself.
unset EMBER_SCHEDULER EMBER_BUILD_DIR
PATH=/usr/bin:/bin EMBER_TIMEOUT=60 "$prefix/bin/ember-local" 2 2 \
  "$work/consumer/api_tour"
PATH=/usr/bin:/bin EMBER_TIMEOUT=60 "$prefix/bin/ember-local" 1 1 \
  "$work/api_tour_pc"
# The Python package, if this build has it: installed into the prefix's
# dist-packages, it imports with Debian's python3 and finds the installed
# library by itself (RPATH), and runs a job.
if [[ -e $build/python/ember/__init__.py ]]; then
  site=$(ls -d "$prefix"/lib/python3*/dist-packages 2>/dev/null | head -n 1)
  [[ -n $site && -e $site/ember/__init__.py ]] ||
    { echo "install_test: the ember package is not installed"; exit 1; }
  cat >"$work/job.py" <<'PY'
import numpy as np
import ember
ember.start()
keep = ember.KVServer(0) if ember.is_server() else None
if ember.is_worker():
    w = ember.KVWorker(0)
    keys = np.array([1, 2, 3], np.uint64)
    w.wait(w.push(keys, np.ones(3, np.float32)))
    assert list(w.wait(w.pull(keys))) == [1, 1, 1]
    print("python job ok", ember.__version__)
ember.finalize()
PY
  PATH=/usr/bin:/bin PYTHONPATH=$site EMBER_TIMEOUT=60 "$prefix/bin/ember-local" \
    1 1 /usr/bin/python3 "$work/job.py" | tee "$work/python.log"
  grep -q "python job ok $version" "$work/python.log" ||
    { echo "install_test: the installed ember package did not run"; exit 1; }
fi
echo "install_test: PASS"
