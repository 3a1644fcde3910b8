#!/usr/bin/python3
"""Unit tests of scripts/bench_metrics.py: how it finds each node's metrics
endpoint in the launcher's output, and how it turns scraped and unscraped
runs into a scrape's cost. No cluster is started here."""

import sys
import unittest

sys.dont_write_bytecode = True  # Before the import: no __pycache__.
from scriptload import load_script  # noqa: E402

bm = load_script("bench_metrics")


class ParseTest(unittest.TestCase):
    def test_serves_line_names_role_and_url(self):
        line = ("[server 1] I1125 19:20:01.5 node_metrics.cc:72] metrics: "
                "server serves http://127.0.0.1:40113/metrics\n")
        self.assertEqual(bm.parse_serves(line),
                         ("server", "http://127.0.0.1:40113/metrics"))
        line = ("[scheduler] ... metrics: scheduler serves "
                "http://[::1]:9100/metrics and /status\n")
        self.assertEqual(bm.parse_serves(line),
                         ("scheduler", "http://[::1]:9100/metrics"))
        self.assertIsNone(bm.parse_serves("[worker 0] PSBENCH req_s=1\n"))


class ArithmeticTest(unittest.TestCase):
    def test_scrape_cost_is_the_extra_over_the_scrapes(self):
        unscraped = [{"worker": 1000, "server": 2000},
                     {"worker": 3000, "server": 5000}]
        scraped = [{"worker": 1600, "server": 2300},
                   {"worker": 3900, "server": 5500}]
        scrapes = [{"worker": 4, "server": 2, "scheduler": 2},
                   {"worker": 6, "server": 6, "scheduler": 3}]
        # worker: (600 + 900) / 10; server: (300 + 500) / 8.
        self.assertEqual(bm.scrape_cost(unscraped, scraped, scrapes),
                         {"worker": 150, "server": 100})
        # A role that answered no scrape has no cost figure, not 0.
        self.assertIsNone(bm.scrape_cost(unscraped, scraped,
                                         [{"worker": 1}])["server"])

    def test_per_request_range_over_repeated_runs(self):
        # Pairs: (3000-1000)/200 = 10, (3400-1200)/200 = 11,
        # (3100-1100)/200 = 10; medians: (3100-1100)/200 = 10.
        self.assertEqual(bm.per_request_range([1000, 1200, 1100],
                                              [3000, 3400, 3100], 100, 300),
                         (10, 10, 11))

    def test_derive_scales_the_scrapes_to_the_request_rate(self):
        off = {"worker": 100000, "server": 50000}
        on = {"worker": 101000, "server": 50500}
        per_scrape = {"worker": 2000000, "server": 1000000}
        d = bm.derive(off, on, per_scrape, req_s=40000)
        # Worker: 2 nodes x 1 scrape/s x 2e6 / 40000 req/s = 100 per request.
        self.assertAlmostEqual(d["worker"][0], 1.01)
        self.assertAlmostEqual(d["worker"][1], 100)
        self.assertAlmostEqual(d["worker"][2], 101100 / 100000)
        # Server: 2 x 1e6 / 40000 = 50 per request.
        self.assertAlmostEqual(d["server"][1], 50)
        self.assertAlmostEqual(d["server"][2], 50550 / 50000)
        self.assertAlmostEqual(d["total"][0], 151500 / 150000)
        self.assertAlmostEqual(d["total"][1], 150)
        self.assertAlmostEqual(d["total"][2], 151650 / 150000)
        # Half the rate: each request carries twice the scrapes.
        self.assertAlmostEqual(bm.derive(off, on, per_scrape, 20000)
                               ["total"][1], 300)
        # Other node counts and scrape rates.
        d = bm.derive(off, on, per_scrape, 40000,
                      nodes={"worker": 1, "server": 4}, scrapes_per_s=0.5)
        self.assertAlmostEqual(d["worker"][1], 25)
        self.assertAlmostEqual(d["server"][1], 50)


if __name__ == "__main__":
    unittest.main()
