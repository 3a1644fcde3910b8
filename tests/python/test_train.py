"""ember.torch: modules whose rows live on the servers, and a 2 x 2 training
run of examples/python/ctr_torch.py through the launcher."""

import os

from conftest import ROOT, run_job

CTR_TORCH = os.path.join(ROOT, "examples", "python", "ctr_torch.py")


def test_embedding_modules_pull_prefetch_and_push_through_backward():
    job = run_job(2, 1, "torch_checks.py", timeout=120)
    assert len(job.lines("CHECK torch ok")) == 1, job.output


def test_ctr_torch_2x2_learns_and_writes_its_curve(tmp_path):
    job = run_job(2, 2, CTR_TORCH, "--examples_per_worker=40000",
                  "--test_examples=5000", "--evals=4",
                  "--out_dir=%s" % tmp_path, timeout=240)
    final = job.lines("RESULT test_auc=")
    assert len(final) == 1, job.output
    fields = dict(kv.split("=") for kv in final[0].split()[1:])
    # 80,000 examples take a DeepFM well past chance (truth ~0.80; ctr_train
    # itself reaches ~0.73 on this little data).
    assert float(fields["test_auc"]) > 0.70, job.output
    assert fields["workers"] == "2" and fields["servers"] == "2"
    assert len(job.lines("RESULT worker=")) == 2, job.output
    assert len(job.lines("RESULT server=")) == 2, job.output
    curve = (tmp_path / "curve.csv").read_text().splitlines()
    assert curve[0].startswith("step,examples") and len(curve) >= 4
    assert (tmp_path / "curve.png").stat().st_size > 1000


def test_ctr_torch_trains_on_a_libsvm_file(tmp_path):
    # A libsvm file written from the synthetic source (one id per field,
    # ids as decimal numbers), read back sharded over 2 workers.
    import ember.data
    src = ember.data.SyntheticSource(seed=2, ids_per_field=1000)
    b = src.generate(ember.data.train_stream(0), 0, 20000)
    path = tmp_path / "train.libsvm"
    with open(path, "w") as f:
        for i in range(len(b)):
            ids = b.ids[b.offsets[i]:b.offsets[i + 1]]
            f.write("%d %s\n" % (b.labels[i],
                                 " ".join("%d:1" % x for x in ids)))
    job = run_job(1, 2, CTR_TORCH, "--data=%s" % path, "--format=libsvm",
                  "--evals=2", "--out_dir=%s" % (tmp_path / "out"),
                  timeout=240)
    final = job.lines("RESULT test_auc=")
    assert len(final) == 1, job.output
    fields = dict(kv.split("=") for kv in final[0].split()[1:])
    assert float(fields["test_auc"]) > 0.65, job.output
    examples = sum(int(line.split()[2].split("=")[1])
                   for line in job.lines("RESULT worker="))
    assert examples == 18000, job.output  # every line but the held-out 10%
