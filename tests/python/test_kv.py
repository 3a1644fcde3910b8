"""ember's KV and model API through real jobs (programs/kv_checks.py)."""

from conftest import run_job


def test_roundtrip_of_every_dtype_lens_and_clock():
    job = run_job(2, 1, "kv_checks.py", "roundtrip")
    assert len(job.lines("CHECK roundtrip ok")) == 1, job.output


def test_arrays_are_shared_not_copied():
    # One server: a pull's answer comes whole and is adopted.
    job = run_job(1, 1, "kv_checks.py", "zero_copy")
    assert len(job.lines("CHECK zero_copy ok")) == 1, job.output
    assert len(job.lines("CHECK zero_copy push grew")) == 1, job.output


def test_cpp_errors_raise_python_exceptions_with_their_message():
    job = run_job(2, 1, "kv_checks.py", "errors")
    assert len(job.lines("CHECK errors ok")) == 1, job.output


def test_the_gil_is_released_while_a_wait_blocks():
    job = run_job(1, 2, "kv_checks.py", "gil")
    assert len(job.lines("CHECK gil ok")) == 2, job.output
    assert len(job.lines("CHECK gil counted")) == 1, job.output


def test_a_request_past_the_request_timeout_raises_unavailable_error():
    # Heartbeats every 5 s: the deadline is checked every tenth of it, not
    # once a beat, so the pull held 1.5 s fails long before the first beat.
    job = run_job(1, 2, "kv_checks.py", "request_timeout",
                  env={"EMBER_REQUEST_TIMEOUT_MS": "300",
                       "EMBER_HEARTBEAT_INTERVAL_MS": "5000",
                       "EMBER_HEARTBEAT_TIMEOUT_MS": "20000"})
    assert len(job.lines("CHECK request_timeout ok")) == 2, job.output
    assert len(job.lines("CHECK request_timeout failed")) == 1, job.output


def test_model_layer_round_trip_and_checkpoint():
    job = run_job(2, 1, "kv_checks.py", "model")
    assert len(job.lines("CHECK model ok")) == 1, job.output


def test_python_program_as_scheduler_server_and_worker():
    # ps-lite's way: the program itself is the scheduler too.
    job = run_job(1, 2, "kv_checks.py", "roundtrip",
                  env={"EMBER_PROGRAM_SCHEDULER": "1"})
    assert len(job.lines("CHECK scheduler role=scheduler")) == 1, job.output
    ok = job.lines("CHECK roundtrip ok role=worker")
    assert sorted(line.split()[4] for line in ok) == ["rank=0", "rank=1"], \
        job.output


def test_a_dead_server_raises_unavailable_error(tmp_path):
    # Started by hand (not through the launcher, which would stop the job
    # at the first death): scheduler, 2 servers, 1 worker on 127.0.0.1,
    # the port the scheduler picks, and every process killed by PID at the
    # end. EMBER_ON_NODE_FAILURE=continue: the worker learns of the death
    # through its request. Without replicas (EMBER_REPLICAS=0): with them
    # the survivor would take over the dead server's keys.
    import os
    import signal
    import subprocess
    import time
    from conftest import BUILD, PROGRAMS, PYTHON, PYTHONPATH
    work = str(tmp_path)
    port_file = os.path.join(work, "port")
    base = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1",
                DMLC_NUM_SERVER="2", DMLC_NUM_WORKER="1",
                EMBER_ON_NODE_FAILURE="continue", EMBER_REPLICAS="0",
                EMBER_HEARTBEAT_INTERVAL_MS="200",
                EMBER_HEARTBEAT_TIMEOUT_MS="1000",
                PYTHONPATH=PYTHONPATH, PYTHONDONTWRITEBYTECODE="1")
    procs = []
    logs = []

    def start(name, argv, env):
        log = open(os.path.join(work, name + ".log"), "w+")
        logs.append((name, log))
        procs.append(subprocess.Popen(argv, env=env, stdout=log,
                                      stderr=subprocess.STDOUT))
        return procs[-1]

    def output():
        text = []
        for name, log in logs:
            log.flush()
            log.seek(0)
            text.append("--- %s ---\n%s" % (name, log.read()))
        return "\n".join(text)

    try:
        start("scheduler", [os.path.join(BUILD, "scheduler",
                                         "ember_scheduler")],
              dict(base, DMLC_ROLE="scheduler", DMLC_PS_ROOT_PORT="0",
                   EMBER_PORT_FILE=port_file))
        deadline = time.monotonic() + 30
        port = ""
        while not port.isdigit() and time.monotonic() < deadline:
            time.sleep(0.02)
            if os.path.exists(port_file):
                port = open(port_file).read().strip()
        assert port.isdigit(), output()
        program = os.path.join(PROGRAMS, "dead_server.py")
        for role in ("server", "server", "worker"):
            start("%s-%d" % (role, len(procs)), [PYTHON, program],
                  dict(base, DMLC_ROLE=role, DMLC_PS_ROOT_PORT=port))
        worker = procs[-1]
        try:
            rc = worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError("worker still running after 60 s\n" +
                                 output())
        text = output()
        assert rc == 0, text
        assert "CHECK unavailable ok" in text, text
        # The C++ message names the dead server.
        line = [l for l in text.splitlines() if "CHECK unavailable ok" in l]
        assert "server" in line[0], text
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        for _, log in logs:
            log.close()
