#!/usr/bin/env bash
# Installs Ember's build and test dependencies from Debian's packages
# (bookworm). Does nothing if they are already there. Needs root.
#
# usage: scripts/deps.sh [--bench]
#   --bench  also what scripts/bench.sh needs to draw its chart
#            (python3-matplotlib) and scripts/callgrind.sh (valgrind)
set -eu
packages=(build-essential cmake pkg-config libzmq3-dev cppzmq-dev
  libprotobuf-dev protobuf-compiler libgoogle-glog-dev libgflags-dev
  libgtest-dev python3)
case ${1:-} in
  "") ;;
  --bench) packages+=(python3-matplotlib valgrind) ;;
  *)
    echo "usage: scripts/deps.sh [--bench]" >&2
    exit 2
    ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
    missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps.sh: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
