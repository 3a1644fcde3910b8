"""Checks of ember's KV and model API, run as every node of a job: servers
serve KV apps 0 (float32), 1 (float64), 2 (int64) and the model layer; the
worker(s) run the check named by argv[1] and print "CHECK <name> ok". Any
failed assertion raises, which fails the job."""

import os
import resource
import shutil
import sys
import tempfile
import time

import numpy as np

import ember

DTYPES = {0: np.float32, 1: np.float64, 2: np.int64}


def keys_of(n, seed=0):
    """Random sorted keys, distinct per worker (several workers push)."""
    rng = np.random.default_rng([seed, ember.rank()])
    return np.unique(rng.integers(1, 2**63, size=n, dtype=np.uint64))


def check_roundtrip():
    for app, dtype in DTYPES.items():
        w = ember.KVWorker(app, dtype=dtype)
        assert w.dtype == np.dtype(dtype)
        keys = keys_of(1000, app)
        vals = (np.arange(len(keys)) % 7).astype(dtype)
        w.wait(w.push(keys, vals))
        w.wait(w.push(keys, vals))
        got = w.wait(w.pull(keys))
        assert got.dtype == np.dtype(dtype), got.dtype
        np.testing.assert_array_equal(got, 2 * vals)
        out = np.empty(len(keys), dtype)
        res = w.wait(w.push_pull(keys, vals, out))
        assert res is out
        np.testing.assert_array_equal(out, 3 * vals)
        assert w.outstanding == 0
    # Several values per key, and per-key lengths.
    w = ember.KVWorker(0)
    keys = keys_of(100, 7)
    vals = np.arange(len(keys) * 3, dtype=np.float32)
    w.wait(w.push(keys, vals))
    np.testing.assert_array_equal(w.wait(w.pull(keys)), vals)
    lk = keys_of(3, 8)
    lens = np.array([1, 2, 3], np.int32)
    w.wait(w.push(lk, np.ones(6, np.float32), lens=lens))
    out_lens = np.zeros(3, np.int32)
    out = np.zeros(6, np.float32)
    w.wait(w.pull(lk, out, lens=out_lens))
    np.testing.assert_array_equal(out_lens, lens)
    np.testing.assert_array_equal(out, np.ones(6))
    # Many requests in flight, waited in another order.
    ts = [w.push(keys, vals) for _ in range(8)]
    for t in reversed(ts):
        w.wait(t)
    ts = w.clock()
    w.wait(ts)
    assert w.current_clock == 1


def check_zero_copy():
    w = ember.KVWorker(0)
    # Pointer identity: a pull with `out` writes into the caller's memory.
    keys = keys_of(1000, 1)
    vals = np.full(len(keys), 2.5, np.float32)
    w.wait(w.push(keys, vals))
    out = np.zeros(len(keys), np.float32)
    address = out.ctypes.data
    res = w.wait(w.pull(keys, out))
    assert res is out and out.ctypes.data == address
    np.testing.assert_array_equal(out, vals)
    # While a push is in flight the library holds the caller's array itself
    # (a reference, not a copy), and lets it go when the push is done.
    big_keys = np.arange(1, 9, dtype=np.uint64) << np.uint64(60)
    n = 32 << 20  # 8 keys x 4 M floats: 128 MB
    big = np.ones(n, np.float32)
    before = sys.getrefcount(big)
    t = w.push(big_keys, big)
    assert sys.getrefcount(big) > before, "the library did not share the array"
    w.wait(t)
    ember._ember._release_pins()
    assert sys.getrefcount(big) == before, "the library still holds it"
    # Memory: a push of 128 MB and a pull into a 128 MB array leave this
    # process's peak memory within a fraction of the array (a copy of
    # either would add 128 MB).
    out = np.zeros(n, np.float32)
    out[:] = 0.5  # touch every page before measuring
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    w.wait(w.push(big_keys, big))
    grown_push = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 \
        - peak
    assert grown_push < big.nbytes // 8, "push grew memory by %d" % grown_push
    print("CHECK zero_copy push grew peak memory by %.1f MB of a %.0f MB "
          "array" % (grown_push / 1e6, big.nbytes / 1e6))
    # A pull without `out` returns the received buffer itself (one server):
    # the peak grows by the array once (the network's receive), not twice.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    got = w.wait(w.pull(big_keys))
    grown_pull = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 \
        - peak
    assert got.nbytes == big.nbytes and got[0] == 2.0 and got[-1] == 2.0
    assert grown_pull < big.nbytes * 1.25, "pull grew memory by %d" % grown_pull
    print("CHECK zero_copy pull grew peak memory by %.1f MB of a %.0f MB "
          "array" % (grown_pull / 1e6, big.nbytes / 1e6))


def expect(error, fn, *words):
    try:
        fn()
    except error as e:
        for word in words:
            assert word in str(e), "%r lacks %r" % (str(e), word)
        return e
    raise AssertionError("no %s" % error.__name__)


def check_errors():
    w = ember.KVWorker(0)
    keys = keys_of(10)
    vals = np.ones(10, np.float32)
    # The C++ Status, as a Python exception with its message.
    e = expect(ember.InvalidArgumentError,
               lambda: w.wait(w.push(keys[::-1].copy(), vals)),
               "sorted")
    assert isinstance(e, ValueError) and isinstance(e, ember.Error)
    expect(ember.InvalidArgumentError,
           lambda: w.wait(w.push(keys, np.ones(15, np.float32))), "values")
    # Arrays the library cannot share are refused before anything is sent.
    expect(TypeError, lambda: w.push(keys.astype(np.int64), vals), "uint64")
    expect(TypeError, lambda: w.push(keys, vals.astype(np.float64)),
           "float32")
    expect(ValueError, lambda: w.push(keys, np.ones(20, np.float32)[::2]),
           "contiguous")
    ro = np.zeros(10, np.float32)
    ro.flags.writeable = False
    expect(ValueError, lambda: w.pull(keys, ro), "writable")
    expect(TypeError, lambda: ember.KVWorker(5, dtype=np.complex64),
           "unsupported dtype")
    assert w.outstanding == 0
    # The worker still works after the errors.
    w.wait(w.push(keys, vals))
    c = ember.ModelClient()
    expect(ember.NotFoundError,
           lambda: c.pull_rows("missing", np.array([1], np.uint64)),
           "missing")
    expect(ember.InvalidArgumentError,
           lambda: c.register_table("t", 4, optimizer="sgd(lr=oops)"))
    c.register_table("t", 4)
    expect(ember.InvalidArgumentError,
           lambda: c.register_table("t", 5), "t")
    expect(ember.InvalidArgumentError,
           lambda: c.push({}, [("t", np.array([1], np.uint64),
                                np.ones(3, np.float32))]))
    expect(ValueError, lambda: c.wait_rows(12345), "ticket")


def check_model():
    c = ember.ModelClient()
    c.register_table("emb", 4, initializer="constant(0.5)",
                     optimizer="sgd(lr=1)")
    c.register_dense("dense", np.arange(6, dtype=np.float32).reshape(2, 3),
                     optimizer="sgd(lr=1)")
    assert c.dim("emb") == 4
    ids = np.array([3, 1, 3, 2**63 + 5], np.uint64)
    rows = c.pull_rows("emb", ids)
    assert rows.shape == (4, 4) and np.all(rows == 0.5)
    t = c.pull_rows_async("emb", ids[:2])
    np.testing.assert_array_equal(c.wait_rows(t), rows[:2])
    values, version = c.pull_dense("dense")
    assert values.shape == (2, 3)
    np.testing.assert_array_equal(values.reshape(-1), np.arange(6))
    # Duplicate ids are summed on the server: id 3 gets 2 x 0.25.
    v = c.push({"dense": np.ones(6, np.float32)},
               [("emb", np.array([3, 3], np.uint64),
                 np.full(8, 0.25, np.float32))])
    assert v >= 1
    np.testing.assert_allclose(c.pull_rows("emb", np.array([3], np.uint64)),
                               [[0.0] * 4])
    values, version2 = c.pull_dense("dense")
    np.testing.assert_allclose(values.reshape(-1), np.arange(6) - 1)
    assert version2 > version
    c.clock()
    # int64 ids are read by their bits (torch's index type).
    np.testing.assert_array_equal(
        c.pull_rows("emb", ids.view(np.int64)), c.pull_rows("emb", ids))
    # Save, change, load: the saved values come back.
    d = tempfile.mkdtemp(prefix="ember_py_ckpt_")
    if ember.rank() == 0:
        c.save(d)
        c.push({"dense": np.ones(6, np.float32)}, [])
        c.load(d)
        values, _ = c.pull_dense("dense")
        np.testing.assert_allclose(values.reshape(-1), np.arange(6) - 1)
        assert len(os.listdir(d)) == ember.num_servers()  # one shard each
    shutil.rmtree(d, ignore_errors=True)


def bsp_hold(seconds):
    """Both workers push 1 to key 5 under bsp (app 3) and end iteration 0;
    worker 1 ends iteration 1 `seconds` later, so worker 0's pull at clock 1
    is held until then. Returns (worker, keys) on worker 0, (None, None) on
    worker 1 once it has ended iteration 1."""
    w = ember.KVWorker(3)
    keys = np.array([5], np.uint64)
    w.wait(w.push(keys, np.ones(1, np.float32)))
    if ember.rank() == 1:
        time.sleep(seconds)
        w.wait(w.clock())
        return None, None
    w.wait(w.clock())
    return w, keys


def check_gil():
    """The GIL is free while a wait blocks: under bsp (app 3) worker 0's pull
    at clock 1 is held until worker 1 ends its iteration, 0.5 s later;
    meanwhile a Python thread of worker 0 keeps counting. A wait with a
    timeout gives up on the held pull, which stays outstanding."""
    import threading
    w, keys = bsp_hold(0.5)
    if w is None:
        return
    count = [0]
    stop = threading.Event()

    def counter():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=counter)
    t.start()
    time.sleep(0.01)
    start = time.monotonic()
    before = count[0]
    ts = w.pull(keys)
    e = expect(ember.DeadlineExceededError,
               lambda: w.wait(ts, timeout=0.05), "no answer within")
    assert isinstance(e, TimeoutError)
    assert w.outstanding == 1
    got = w.wait(ts)
    during = count[0] - before
    held = time.monotonic() - start
    stop.set()
    t.join()
    assert got[0] == 2.0, got  # both workers' pushes
    assert held > 0.2, "the pull was not held (%.3f s)" % held
    assert during > 1000, "the thread counted %d while the pull waited %.2f s" \
        % (during, held)
    print("CHECK gil counted %d during a %.2f s wait" % (during, held))


def check_request_timeout():
    """Under EMBER_REQUEST_TIMEOUT_MS (set by the test) a request that a
    server does not answer in time fails by itself: its wait raises
    UnavailableError, not DeadlineExceededError, even with a timeout, and it
    is no longer outstanding. Worker 0's pull under bsp is held until
    worker 1 ends its iteration, 1.5 s later."""
    w, keys = bsp_hold(1.5)
    if w is None:
        return
    ts = w.pull(keys)
    # A loop on DeadlineExceededError ends: that error means "still open".
    # The loop's own bound (10 s, far past the 300 ms deadline) makes a
    # regression fail here, naming the cause, instead of at the job's limit.
    give_up = time.monotonic() + 10
    while True:
        try:
            w.wait(ts, timeout=0.05)
        except ember.DeadlineExceededError:
            if time.monotonic() > give_up:
                raise AssertionError(
                    "the held pull was still open 10 s after its deadline")
            continue
        except ember.UnavailableError as e:
            assert "EMBER_REQUEST_TIMEOUT_MS" in str(e), str(e)
            assert "server 0" in str(e), str(e)
            break
        raise AssertionError("the held pull was answered")
    assert w.outstanding == 0, w.outstanding
    print("CHECK request_timeout failed the held pull", flush=True)


def main():
    check = sys.argv[1]
    ember.start()
    keep = []
    if ember.is_server():
        keep = [ember.KVServer(app, dtype=d) for app, d in DTYPES.items()]
        keep.append(ember.KVServer(3, consistency="bsp"))
        keep.append(ember.ModelServer())
    elif ember.is_worker():
        globals()["check_" + check]()
        print("CHECK %s ok role=%s rank=%d workers=%d servers=%d" % (
            check, ember.role(), ember.rank(), ember.num_workers(),
            ember.num_servers()), flush=True)
    elif ember.is_scheduler():
        print("CHECK scheduler role=%s" % ember.role(), flush=True)
    ember.finalize()
    del keep


if __name__ == "__main__":
    main()
