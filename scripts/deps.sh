#!/usr/bin/env bash
# Installs Ember's build and test dependencies from Debian's packages
# (bookworm). Does nothing if they are already there. Needs root.
#
# usage: scripts/deps.sh [--bench | --launchers]
#   --bench      also what scripts/bench.sh needs to draw its chart
#                (python3-matplotlib) and scripts/callgrind.sh (valgrind)
#   --launchers  also the engines ember-launch's tests start on this host:
#                Open MPI's mpirun, sshd and ssh, and a one-node Slurm
#                cluster (munge, slurmctld, slurmd, the client commands).
#                Their services are not configured or enabled by the tests;
#                on a machine with systemd, installing openssh-server and
#                munge starts them.
set -eu
packages=(build-essential cmake pkg-config libzmq3-dev cppzmq-dev
  libprotobuf-dev protobuf-compiler libgoogle-glog-dev libgflags-dev
  libgtest-dev python3 python3-yaml)
# Installed without their recommendations (openssh-server's would bring
# systemd into a container).
lean=()
for flag in "$@"; do
  case $flag in
    --bench) packages+=(python3-matplotlib valgrind) ;;
    --launchers)
      lean+=(openmpi-bin openssh-server openssh-client munge slurmctld slurmd
        slurm-client)
      ;;
    # The libFuzzer targets of tests/fuzz (scripts/fuzz.py); clang-15 also
    # checks the lock annotations (-Wthread-safety, scripts/test.sh).
    --fuzz) lean+=(clang-15 libfuzzer-15-dev) ;;
    *)
      echo "usage: scripts/deps.sh [--bench] [--launchers] [--fuzz]" >&2
      exit 2
      ;;
  esac
done
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed"; }
missing=() missing_lean=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
for p in "${lean[@]}"; do
  installed "$p" || missing_lean+=("$p")
done
if ((${#missing[@]} + ${#missing_lean[@]})); then
  echo "deps.sh: installing ${missing[*]} ${missing_lean[*]}"
  apt-get update -qq
  if ((${#missing[@]})); then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  if ((${#missing_lean[@]})); then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends "${missing_lean[@]}" >/dev/null
  fi
fi
