#!/usr/bin/env bash
# Installs Ember's build and test dependencies from Debian's packages
# (bookworm). Does nothing if they are already there. Needs root.
#
# usage: scripts/deps.sh [--bench] [--launchers] [--fuzz]
#   --bench      also what scripts/callgrind.py and bench_multi.py count
#                instructions with (valgrind)
#   --launchers  also the engines ember-launch's tests start on this host:
#                Open MPI's mpirun, sshd and ssh, and a one-node Slurm
#                cluster (munge, slurmctld, slurmd, the client commands);
#                and Prometheus, which the metrics test scrapes a job with.
#                Their services are not configured or enabled by the tests;
#                on a machine with systemd, installing openssh-server and
#                munge starts them.
#
# The Python package (python/) needs python3-dev, pybind11 and numpy; its
# tests and examples/python need pytest, PyTorch, tqdm and matplotlib, and
# an optimized BLAS: without libopenblas0-pthread, Debian's torch and numpy
# use the reference BLAS (libblas3), 20 x slower on ctr_torch's MLP.
set -eu
packages=(build-essential cmake pkg-config libzmq3-dev cppzmq-dev
  libprotobuf-dev protobuf-compiler libgoogle-glog-dev libgflags-dev
  libgtest-dev libcpp-httplib-dev libxxhash-dev python3 python3-yaml
  python3-dev python3-pybind11 pybind11-dev python3-numpy python3-pytest
  python3-torch python3-tqdm libopenblas0-pthread)
# Installed without their recommendations (openssh-server's would bring
# systemd into a container). matplotlib draws the charts: the CTR example's
# learning curve (scripts/demo.sh) and the benchmarks'.
lean=(python3-matplotlib)
for flag in "$@"; do
  case $flag in
    --bench) packages+=(valgrind) ;;
    --launchers)
      lean+=(openmpi-bin openssh-server openssh-client munge slurmctld slurmd
        slurm-client prometheus)
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
