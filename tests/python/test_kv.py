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
