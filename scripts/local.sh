#!/bin/sh
# local.sh - launch a local Ember (ps-lite compatible) cluster on 127.0.0.1.
#
# usage: local.sh NUM_SERVERS NUM_WORKERS PROGRAM [ARGS...]
#
# A thin wrapper: ember-launch --launcher local does the work, with
# local.sh's arguments, environment variables (EMBER_TIMEOUT, EMBER_LOG_DIR,
# EMBER_SCHEDULER, ...) and messages. `local.sh --help` and
# docs/launching.md describe them. Installed as bin/ember-local (its
# messages then say ember-local). The launcher sits next to this script:
# scripts/ember_launch.py in the source tree, bin/ember-launch installed.
dir=$(dirname -- "$0")
real_dir=$(dirname -- "$(readlink -f -- "$0")")
for launcher in "$dir/ember_launch.py" "$dir/ember-launch" \
  "$real_dir/ember_launch.py" "$real_dir/ember-launch"; do
  if [ -f "$launcher" ]; then
    exec /usr/bin/python3 "$launcher" --local-sh "$0" "$@"
  fi
done
echo "local.sh: ember-launch not found next to $0" >&2
exit 2
