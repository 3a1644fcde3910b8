# Ember's container image: the library, ember_scheduler and the CTR example
# (examples/ctr/ctr_train), built from this tree on Debian bookworm with
# Debian's packages only. The manifests in deploy/kubernetes run it; see
# deploy/kubernetes/README.md.
#
#   docker build -t ember:0.1.0 .
#
# A node's role comes from DMLC_ROLE, as everywhere else: with no arguments
# the image runs ctr_train, which is a scheduler, a server or a worker as
# DMLC_ROLE says. Give another installed program as the arguments to run
# it instead (/usr/local/bin/ember_scheduler for the scheduler).

# Build stage: compilers and -dev packages, a subset of scripts/deps.sh's.
FROM debian:bookworm-slim AS build
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       build-essential cmake pkg-config libzmq3-dev libcpp-httplib-dev libprotobuf-dev \
       protobuf-compiler libgoogle-glog-dev libgflags-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Only the installed targets and the example are built (no tests, no
# benchmarks). The install rules do not cover ctr_train, so it is copied out
# of the build tree; in the runtime stage it finds libember_ps through ld.so's
# cache (its build RPATH names /build, which is not there).
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
       -DEMBER_BUILD_TESTS=OFF \
    && cmake --build /build -j"$(nproc)" --target ps ember_scheduler ctr_train \
    && cmake --install /build --prefix /opt/ember \
    && install -m 0755 /build/examples/ctr_train /opt/ember/bin/ctr_train

# Runtime stage: the shared libraries the programs link, and tini as PID 1
# (the programs install no SIGTERM handler, and PID 1 ignores signals it does
# not handle, so without it a pod would only stop at its grace period's end).
FROM debian:bookworm-slim
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       libzmq5 libcpp-httplib0.11 libprotobuf32 libgoogle-glog0v6 libgflags2.2 tini \
    && rm -rf /var/lib/apt/lists/*
# The install is relocatable (ember_scheduler's RPATH is $ORIGIN/../lib,
# ember.pc finds its prefix from its own place).
COPY --from=build /opt/ember/ /usr/local/
RUN ldconfig \
    && groupadd --system --gid 10001 ember \
    && useradd --system --uid 10001 --gid ember --home-dir /home/ember \
       --create-home --shell /usr/sbin/nologin ember
USER 10001:10001
WORKDIR /home/ember
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["/usr/local/bin/ctr_train"]
