"""A server dies mid-job: the worker's next request that needs it raises
ember.UnavailableError naming it, instead of hanging. Run with
EMBER_ON_NODE_FAILURE=continue and short heartbeats (test_kv.py); server 1
SIGKILLs itself after the first barrier."""

import os
import signal
import time

import numpy as np

import ember

ember.start()
if ember.is_server():
    keep = ember.KVServer(0)
    ember.barrier("servers+workers")
    if ember.rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # the test ends this process
elif ember.is_worker():
    w = ember.KVWorker(0)
    # One key in each server's half of the key space.
    keys = np.array([1, 2**63 + 1], np.uint64)
    w.wait(w.push(keys, np.ones(2, np.float32)))
    ember.barrier("servers+workers")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            w.wait(w.pull(keys))
        except ember.UnavailableError as e:
            assert isinstance(e, ConnectionError)
            print("CHECK unavailable ok: %s" % e, flush=True)
            os._exit(0)
        time.sleep(0.05)
    print("CHECK unavailable: no error within 30 s", flush=True)
    os._exit(1)
