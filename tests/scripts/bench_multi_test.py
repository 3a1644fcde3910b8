#!/usr/bin/python3
"""Unit tests of scripts/bench_multi.py's parsing and statistics (no
cluster is started: the runs themselves are exercised by running it)."""

import contextlib
import io
import os
import socket
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # Before the import: no __pycache__.
from scriptload import load_script  # noqa: E402

bm = load_script("bench_multi")


class ParseTest(unittest.TestCase):
    def test_worker_rates_sum_every_worker(self):
        out = ("[worker 0] PSBENCH rank=0 mode=push keys=1000 servers=2 "
               "workers=2 window=8 req_s=1500.5 keys_s=1.5e6\n"
               "[server 1] noise req_s=99\n"
               "[worker 1] PSBENCH rank=1 mode=push keys=1000 servers=2 "
               "workers=2 window=8 req_s=500 keys_s=5e5\n")
        total, n = bm.parse_worker_rates(out)
        self.assertAlmostEqual(total, 2000.5)
        self.assertEqual(n, 2)

    def test_worker_rates_without_a_line_is_an_error(self):
        with self.assertRaises(bm.BenchError):
            bm.parse_worker_rates("local.sh: worker 0 exited with status 1\n")

    def test_topology_rate(self):
        out = ("progress\nRESULT baseline=zmq_topology servers=4 clients=4 "
               "mode=pull keys=1000 req_s=48123.4 bytes_s=1\n")
        self.assertAlmostEqual(bm.parse_topology_rate(out), 48123.4)
        with self.assertRaises(bm.BenchError):
            bm.parse_topology_rate("RESULT baseline=other req_s=1\n")

    def test_kvbench_times_are_means_over_workers(self):
        out = ("[worker 0] [09:00:00] x.cc:62: num = 10000000, Push average "
               "time cost: 200ms\n"
               "[worker 1] [09:00:00] x.cc:62: num = 10000000, Push average "
               "time cost: 300.5ms\n"
               "[worker 0] ... Pull average time cost: 400ms\n"
               "[worker 1] ... Pull average time cost: 600ms\n")
        push, pull, n = bm.parse_kvbench_times(out)
        self.assertAlmostEqual(push, 250.25)
        self.assertAlmostEqual(pull, 500)
        self.assertEqual(n, 2)
        with self.assertRaises(bm.BenchError):
            bm.parse_kvbench_times("Push average time cost: 1ms\n")

    def test_callgrind_total(self):
        with tempfile.NamedTemporaryFile("w", suffix=".out",
                                         delete=False) as f:
            f.write("version: 1\ncmd: x\nevents: Ir\nsummary: 123456\n")
        try:
            self.assertEqual(bm.parse_callgrind_total(f.name), 123456)
        finally:
            os.unlink(f.name)


class StatsTest(unittest.TestCase):
    def test_median_and_range(self):
        self.assertEqual(bm.median_and_range([3, 1, 2]), (2, 1, 3))
        self.assertEqual(bm.median_and_range([4, 1]), (2.5, 1, 4))
        with self.assertRaises(ValueError):
            bm.median_and_range([])

    def test_ratios_pair_rounds_and_skip_zero_baselines(self):
        self.assertEqual(bm.ratios([2, 3, 8], [1, 0, 4]), [2.0, 2.0])


class OnOffTest(unittest.TestCase):
    def test_rounds_interleave_and_the_ratio_is_per_round(self):
        calls = []
        rates = {"on": iter([10.0, 30.0, 20.0]),
                 "off": iter([100.0, 100.0, 50.0])}

        def measure(which, s, w, mode, keys, window):
            calls.append(which)
            self.assertEqual((s, w, mode, keys, window),
                             (2, 2, "push", 1000000, 2))
            return next(rates[which])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            bm.on_off(None, 3, "title", "tag",
                      [("dense", 2, 2, "push", 1000000, 2)], None, None,
                      measure=measure)
        # The order alternates from round to round.
        self.assertEqual(calls, ["off", "on", "on", "off", "off", "on"])
        # Medians: off 100, on 20; per-round ratios 0.1, 0.3, 0.4 -> 0.3.
        self.assertIn("off_req_s=100.0", out.getvalue())
        self.assertIn("on_req_s=20.0", out.getvalue())
        self.assertIn("on_over_off=0.300", out.getvalue())


class ReplicasTest(unittest.TestCase):
    def run_replicas(self, rates):
        calls = []

        def measure(which, s, w, mode, keys, window):
            calls.append((which, s, w, mode, keys, window))
            return next(rates[which])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            bm.replicas(None, 3, measure=measure)
        return calls, out.getvalue()

    def test_pushes_run_beside_raw_forwarding_and_pulls_alone(self):
        # The same figures for every case: per round, ember on/off 0.5, 0.4,
        # 0.45 (median 0.45); raw forwarding/off 0.9, 0.5, 0.6 (median 0.6);
        # chain/off 0.7, 0.8, 0.75.
        per_case = {"off": [100.0, 100.0, 100.0], "on": [50.0, 40.0, 45.0],
                    "zmq_off": [200.0, 200.0, 200.0],
                    "zmq_on": [180.0, 100.0, 120.0],
                    "zmq_chain": [140.0, 160.0, 150.0]}
        n = len(bm.REPLICA_CASES)
        rates = {k: iter(v * n) for k, v in per_case.items()}
        calls, out = self.run_replicas(rates)
        cases = [c[1:] for c in calls]
        for name, s, w, mode, keys, window in bm.REPLICA_CASES:
            which = [c[0] for c in calls if c[1:] == (s, w, mode, keys,
                                                     window)]
            if mode == "push":
                # Every variant once a round, the order reversed in odd
                # rounds.
                forward = ["off", "on", "zmq_off", "zmq_on", "zmq_chain"]
                self.assertEqual(which, forward + forward[::-1] + forward,
                                 name)
            else:
                self.assertEqual(which, ["off", "on", "on", "off", "off",
                                         "on"], name)
        self.assertEqual(len(cases), sum(15 if c[3] == "push" else 6
                                         for c in bm.REPLICA_CASES))
        lines = [ln for ln in out.splitlines()
                 if ln.startswith("RESULT bench=replicas ")]
        self.assertEqual(len(lines), n)
        for line, case in zip(lines, bm.REPLICA_CASES):
            self.assertIn(" on_over_off=0.450", line)
            if case[3] == "push":
                self.assertIn(" zmq_off_req_s=200.0 zmq_on_req_s=120.0 "
                              "zmq_on_over_off=0.600 "
                              "ember_share_of_ceiling=0.750 "
                              "zmq_chain_req_s=150.0 "
                              "zmq_chain_over_off=0.750", line)
            else:
                self.assertNotIn("zmq", line)

    def test_measure_runs_the_forwarding_baseline(self):
        class FakeRunner:
            build = "/b"

            def __init__(self):
                self.calls = []

            def ps_api(self, program, s, w, mode, keys, window,
                       env_extra=None):
                self.calls.append(("ember", program, env_extra))
                return 1.0

            def zmq(self, s, w, mode, keys, window, extra_args=()):
                self.calls.append(("zmq", list(extra_args)))
                return 2.0
        runner = FakeRunner()
        measure = bm.replica_measure(runner)
        for which in bm.REPLICA_VARIANTS:
            measure(which, 2, 2, "push", 1000, 8)
        self.assertEqual(runner.calls, [
            ("ember", "/b/bench/pslite_api_bench", {"EMBER_REPLICAS": "0"}),
            ("ember", "/b/bench/pslite_api_bench", {"EMBER_REPLICAS": "1"}),
            ("zmq", ["--forward=none"]), ("zmq", ["--forward=ack"]),
            ("zmq", ["--forward=chain"])])

    def test_further_arguments_of_a_case_reach_the_measure(self):
        seen = []

        def measure(which, s, w, mode, keys, window, layout=None):
            seen.append(layout)
            return 1.0
        with contextlib.redirect_stdout(io.StringIO()):
            bm.on_off(None, 2, "title", "tag",
                      [("runs", 1, 1, "push", 1000, 2, {"layout": "dense"}),
                       ("random", 1, 1, "push", 1000, 2)], None, None,
                      measure=measure)
        self.assertEqual(seen, ["dense"] * 4 + [None] * 4)

    def test_policy_runs_ember_under_each_thread_policy(self):
        class FakeRunner:
            build = "/b"

            def __init__(self):
                self.envs = []

            def ps_api(self, program, s, w, mode, keys, window,
                       env_extra=None, layout=None):
                self.envs.append(env_extra["EMBER_THREAD_POLICY"])
                self.replicas = env_extra["EMBER_REPLICAS"]
                return 2.0 if env_extra["EMBER_THREAD_POLICY"] == "batch" \
                    else 1.0
        runner = FakeRunner()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            bm.policy(runner, 2)
        self.assertEqual(runner.envs,
                         ["normal", "batch", "batch", "normal"] *
                         len(bm.POLICY_CASES))
        self.assertEqual(runner.replicas, "0")
        lines = [ln for ln in out.getvalue().splitlines()
                 if ln.startswith("RESULT bench=policy ")]
        self.assertEqual(len(lines), len(bm.POLICY_CASES))
        self.assertTrue(all("on_over_off=2.000" in ln for ln in lines))


class CallgrindTest(unittest.TestCase):
    def test_each_program_is_counted_at_1_and_4_servers(self):
        # A runner that writes the worker's profile as callgrind would: a
        # fixed start-up cost plus a cost per request that grows with the
        # servers (Ember 20 + 10 per extra server, ps-lite 15 + 12).
        cost = {"ember": (20, 10), "ps-lite": (15, 12)}

        class FakeRunner:
            build = "/b"

            def __init__(self):
                self.calls = []

            def cluster(self, s, w, wrap, args, env,
                        program_scheduler=False):
                with open(wrap, encoding="utf-8") as f:
                    who = "ps-lite" if "/psl/" in f.read() else "ember"
                n = int([a for a in args if a.startswith("requests=")][0]
                        .split("=")[1])
                if w == 2:
                    # The copy's cost, 2 x 2: each worker 30 a request, each
                    # server 10 without a copy and 40 with one.
                    self.calls.append(("replicas", s, n, program_scheduler,
                                       env["EMBER_REPLICAS"]))
                    step = 40 if env["EMBER_REPLICAS"] == "1" else 10
                    for role, pid, c in (("worker", 1, 30), ("worker", 2, 30),
                                         ("server", 3, step),
                                         ("server", 4, step)):
                        path = os.path.join(env["CG_DIR"],
                                            "%s.%d.out" % (role, pid))
                        with open(path, "w", encoding="utf-8") as f:
                            f.write("summary: %d\n" % (100 + n * c))
                    return
                base, step = cost[who]
                self.calls.append((who, s, n, program_scheduler,
                                   env.get("EMBER_REPLICAS")))
                path = os.path.join(env["CG_DIR"], "worker.7.out")
                with open(path, "w", encoding="utf-8") as f:
                    f.write("summary: %d\n" % (1000 + n * (base +
                                                           step * (s - 1))))

            def run(self, argv, env):
                # Raw ZeroMQ (zmq_topology under the wrapper): 5 + 3 per
                # extra server, in the file of the client it names.
                flag = {a.split("=")[0]: a.split("=")[1] for a in argv[1:]}
                s, n = int(flag["--servers"]), int(flag["--requests"])
                self.calls.append(("zeromq", s, n, None, None))
                with open(os.path.join(env["CG_DIR"], "client.9.out"), "w",
                          encoding="utf-8") as f:
                    f.write("summary: %d\n" % (500 + n * (5 + 3 * (s - 1))))
                return ("RESULT baseline=zmq_topology servers=%d clients=1 "
                        "req_s=1.0 client_pids=9\n" % s)

        runner = FakeRunner()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            old = bm.bl.have_valgrind
            bm.bl.have_valgrind = lambda: True
            try:
                bm.callgrind(runner, "/psl")
            finally:
                bm.bl.have_valgrind = old
        text = out.getvalue()
        self.assertIn("ember    4 servers / 1 server: 2.500; each server "
                      "beyond the first: 10", text)
        self.assertIn("ps-lite  4 servers / 1 server: 3.400; each server "
                      "beyond the first: 12", text)
        # ps-lite's program runs its own scheduler; Ember's runs without
        # copies, as in every comparison with ps-lite.
        self.assertIn("zeromq   4 servers / 1 server: 2.800; each server "
                      "beyond the first: 3", text)
        # The floor: Ember's 20 at 1 server plus raw ZeroMQ's 3 x 3.
        self.assertIn("nothing of Ember's own: 1.450", text)
        self.assertIn("RESULT bench=callgrind_floor servers=4 ratio=1.450",
                      text)
        # Per request of one worker: 30 + 10 without a copy, 30 + 40 with.
        self.assertIn("EMBER_REPLICAS=0: workers 30, servers 10, all 40",
                      text)
        self.assertIn("EMBER_REPLICAS=1: workers 30, servers 40, all 70",
                      text)
        self.assertIn("RESULT bench=callgrind_replicas servers=2 workers=2 "
                      "keys=1000 off_ir_per_request=40 on_ir_per_request=70 "
                      "off_over_on=0.571", text)
        self.assertEqual({(c[0], c[3], c[4]) for c in runner.calls},
                         {("ember", False, "0"), ("ps-lite", True, None),
                          ("zeromq", None, None), ("replicas", False, "0"),
                          ("replicas", False, "1")})
        self.assertEqual(len(runner.calls), 16)


class PortTest(unittest.TestCase):
    def test_free_port_can_be_bound(self):
        port = bm.free_port()
        self.assertGreater(port, 0)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))


class ArgsTest(unittest.TestCase):
    def test_bad_arguments_are_refused(self):
        for argv in (["--rounds", "0"], ["--only", "sparse,nonsense"],
                     ["--kvbench", "/nonexistent/a,/nonexistent/b"],
                     ["--pslite", "/nonexistent"]):
            with self.assertRaises(SystemExit) as cm:
                with open(os.devnull, "w") as null:
                    saved, sys.stderr = sys.stderr, null
                    try:
                        bm.main(argv)
                    finally:
                        sys.stderr = saved
            self.assertEqual(cm.exception.code, 2, argv)


if __name__ == "__main__":
    unittest.main()
