#!/usr/bin/python3
"""py_kv_bench: the cost of Python on Ember's KV API. A 1000-key push/pull
round trip (push 1000 float32 values, wait, pull them into an array, wait)
from Python (ember.KVWorker over numpy arrays) against the same round trip
through the C++ API (KVWorker<float>::ZPush/ZPull, bench/py_kv_bench_ext.cc),
in the same worker process, against the same servers, in alternating
blocks so that both see the same machine.

    PYTHONPATH=build/python:build/bench scripts/local.sh 2 1 \\
        /usr/bin/python3 bench/py_kv_bench.py [--rounds 10] [--iters 300]

Worker 0 prints (one line)
    RESULT bench=py_kv keys=1000 servers=S python_us=P cpp_us=C ratio=P/C
           python_p90_us=.. cpp_p90_us=..
with the medians over every round trip of every block.
"""

import argparse
import sys
import time

import numpy as np

import ember


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=10,
                   help="blocks of each side, alternating")
    p.add_argument("--iters", type=int, default=300,
                   help="round trips per block")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    ember.start()
    keep = None
    if ember.is_server():
        keep = ember.KVServer(0)
    elif ember.is_worker() and ember.rank() == 0:
        import _ember_bench
        rng = np.random.default_rng(args.seed)
        keys = np.unique(rng.integers(1, 2**63, size=args.keys * 2,
                                      dtype=np.uint64))[:args.keys]
        rng.shuffle(keys)
        keys = np.sort(keys[:args.keys])
        vals = np.ones(len(keys), np.float32)
        out = np.zeros(len(keys), np.float32)
        py_worker = ember.KVWorker(0, customer_id=0)
        cpp_worker = _ember_bench.CppWorker(0, 1)
        key_list = [int(k) for k in keys]

        def python_block(n):
            ns = []
            clock = time.perf_counter_ns
            for _ in range(n):
                t = clock()
                py_worker.wait(py_worker.push(keys, vals))
                py_worker.wait(py_worker.pull(keys, out))
                ns.append(clock() - t)
            return ns

        python_block(50)  # warm-up of both sides
        cpp_worker.round_trips(key_list, 50)
        py_ns, cpp_ns = [], []
        for _ in range(args.rounds):
            py_ns += python_block(args.iters)
            cpp_ns += cpp_worker.round_trips(key_list, args.iters)
        py_us = np.median(py_ns) / 1e3
        cpp_us = np.median(cpp_ns) / 1e3
        print("RESULT bench=py_kv keys=%d servers=%d python_us=%.1f "
              "cpp_us=%.1f ratio=%.3f python_p90_us=%.1f cpp_p90_us=%.1f" % (
                  len(keys), ember.num_servers(), py_us, cpp_us,
                  py_us / cpp_us, np.percentile(py_ns, 90) / 1e3,
                  np.percentile(cpp_ns, 90) / 1e3), flush=True)
        keep = (py_worker, cpp_worker)
    ember.finalize()
    del keep
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
