#!/usr/bin/python3
"""ctr_torch: a CTR model in PyTorch whose embedding tables and dense
parameters live on Ember's servers (the Python twin of examples/ctr/ctr_train).

Models: "deepfm" (linear weights, a factorisation machine and an MLP over the
field embeddings, as in DeepFM; on libsvm data, whose examples have no fixed
fields, the MLP sees the examples' summed embeddings) or "fm" (linear weights and the
factorisation machine only: ctr_train's model, for comparing the two).
Tables "w" (dim 1) and "v" (dim --fm_dim) are ember.torch.Embedding modules;
the bias and the MLP are kept on the servers by ember.torch.DenseParameters;
the optimizers (Adagrad, as ctr_train's) run on the servers. Each worker
trains on its own shard, prefetching the next batch's rows while it
computes; worker 0 evaluates held-out AUC and log-loss as it goes, shows a
progress bar, and at the end writes the learning curve (curve.csv and, with
matplotlib, curve.png) to --out_dir.

Data: the synthetic stream of ctr_train (the same examples, by seed), or
--data=FILE --format=libsvm|criteo (line n % 10 == 9 held out).

    scripts/local.sh 2 2 /usr/bin/python3 examples/python/ctr_torch.py

(with PYTHONPATH=build/python for the build tree's ember package).
"""

import argparse
import os
import queue
import sys
import threading
import time

# One BLAS thread per worker (set before numpy loads OpenBLAS): the workers
# and servers of a job share the machine's cores. --threads sets torch's.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ember  # noqa: E402
import ember.data  # noqa: E402
import ember.torch  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("deepfm", "fm"), default="deepfm")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of the synthetic truth and data")
    p.add_argument("--examples_per_worker", type=int, default=4000000)
    p.add_argument("--test_examples", type=int, default=50000)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--fm_dim", type=int, default=4)
    p.add_argument("--hidden", default="64,32",
                   help="deepfm: the MLP's hidden layer sizes")
    p.add_argument("--optimizer", default="adagrad(lr=0.05,eps=1e-6)",
                   help="optimizer of the linear weights w and the bias")
    p.add_argument("--fm_optimizer", default="adagrad(lr=0.02,eps=1e-6)",
                   help="optimizer of the factor table v")
    p.add_argument("--mlp_optimizer", default="adagrad(lr=0.01,eps=1e-6)",
                   help="deepfm: optimizer of the MLP")
    p.add_argument("--consistency", default="asp")
    p.add_argument("--evals", type=int, default=8,
                   help="held-out evaluations during training (worker 0)")
    p.add_argument("--data", default="",
                   help="a libsvm or Criteo file instead of synthetic data")
    p.add_argument("--format", choices=("libsvm", "criteo"), default="libsvm")
    p.add_argument("--out_dir", default="ctr_torch_out")
    p.add_argument("--checkpoint_dir", default="")
    p.add_argument("--threads", type=int, default=1,
                   help="torch's intra-op threads per worker")
    p.add_argument("--no_progress", action="store_true",
                   help="no progress bar (worker 0 shows one by default)")
    return p.parse_args(argv)


# ------------------------------------------------------------------ model --
class DeepFM(torch.nn.Module):
    """logit = bias + sum_i w_i x_i + FM(v, x) [+ MLP(field embeddings)]."""

    def __init__(self, client, args, group):
        super().__init__()
        k = args.fm_dim
        self.k = k
        E = ember.torch.Embedding
        self.w = E(client, "w", 1, initializer="zeros",
                   optimizer=args.optimizer, consistency=args.consistency,
                   group=group)
        self.v = E(client, "v", k, initializer="normal(0,0.01)",
                   optimizer=args.fm_optimizer,
                   consistency=args.consistency, group=group)
        self.bias = torch.nn.Parameter(torch.zeros(1))
        self.dense = [ember.torch.DenseParameters(
            client, _ParameterList([self.bias]), "bias", args.optimizer,
            args.consistency, group)]
        self.mlp = None
        self.fields = None
        if args.model == "deepfm":
            # One id per field (synthetic, Criteo): the MLP sees every
            # field's embedding; otherwise (libsvm) their weighted sum.
            self.fields = args.fields
            sizes = [(self.fields or 1) * k] + [int(h) for h in
                                                args.hidden.split(",") if h]
            layers = []
            for a, b in zip(sizes[:-1], sizes[1:]):
                layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
            layers.append(torch.nn.Linear(sizes[-1], 1))
            torch.manual_seed(12345)  # Every worker offers the same start.
            self.mlp = torch.nn.Sequential(*layers)
            self.dense.append(ember.torch.DenseParameters(
                client, self.mlp, "mlp", args.mlp_optimizer,
                args.consistency, group))

    def prefetch(self, batch):
        self.w.prefetch(batch.ids)
        self.v.prefetch(batch.ids)

    def pull_dense(self):
        for d in self.dense:
            d.pull()

    def push_dense(self):
        for d in self.dense:
            d.push()

    def forward(self, batch):
        n = len(batch)
        w = self.w(batch.ids)  # (nnz, 1)
        v = self.v(batch.ids)  # (nnz, k)
        width = batch.fixed_width()
        if width is not None and batch.values is None:
            linear = w.view(n, width).sum(1)
            vv = v.view(n, width, self.k)
            s = vv.sum(1)
            fm = 0.5 * ((s * s).sum(1) - (vv * vv).sum((1, 2)))
        else:
            vv = None
            offsets = torch.from_numpy(batch.offsets[:-1])
            index = torch.arange(w.shape[0])
            x = (torch.from_numpy(batch.values) if batch.values is not None
                 else torch.ones(w.shape[0]))
            bag = torch.nn.functional.embedding_bag
            linear = bag(index, w, offsets, mode="sum",
                         per_sample_weights=x).view(n)
            s = bag(index, v, offsets, mode="sum", per_sample_weights=x)
            sq = bag(index, v * v, offsets, mode="sum",
                     per_sample_weights=x * x)
            fm = 0.5 * ((s * s) - sq).sum(1)
        logit = self.bias + linear + fm
        if self.mlp is not None:
            if self.fields is None:
                deep = s
            elif vv is not None and width == self.fields:
                deep = vv.reshape(n, width * self.k)
            else:
                raise ValueError("expected %d ids per example (one per field)"
                                 % self.fields)
            logit = logit + self.mlp(deep).view(n)
        return logit


class _ParameterList(torch.nn.Module):
    def __init__(self, params):
        super().__init__()
        self.params = torch.nn.ParameterList(params)


# ------------------------------------------------------------------- data --
def slices(data, batch_size, count_batches):
    """Batches of a Batch held in memory: views, no copies."""
    n = len(data)
    per_epoch = (n + batch_size - 1) // batch_size
    for i in range(count_batches):
        b = i % per_epoch
        lo, hi = b * batch_size, min(n, (b + 1) * batch_size)
        a, z = data.offsets[lo], data.offsets[hi]
        yield ember.data.Batch(
            data.ids[a:z], data.offsets[lo:hi + 1] - a,
            None if data.values is None else data.values[a:z],
            data.labels[lo:hi])


def synthetic(source, stream, count):
    parts = [source.generate(stream, first, min(100000, count - first))
             for first in range(0, count, 100000)]
    return ember.data.concatenate(parts)


class Prefetcher:
    """Runs a batch iterator on a thread (the C++ readers run without the
    GIL), a few batches ahead."""

    def __init__(self, iterator, depth=4):
        self._q = queue.Queue(depth)
        self._t = threading.Thread(target=self._run, args=(iterator,),
                                   daemon=True)
        self._t.start()

    def _run(self, iterator):
        try:
            for b in iterator:
                self._q.put(b)
            self._q.put(None)
        except BaseException as e:  # Re-raised in the consumer.
            self._q.put(e)

    def __iter__(self):
        while True:
            b = self._q.get()
            if b is None:
                return
            if isinstance(b, BaseException):
                raise b
            yield b


# ---------------------------------------------------------------- metrics --
def auc(scores, labels):
    """Exact ROC AUC, ties counted as half."""
    scores = np.asarray(scores, np.float64)
    labels = np.asarray(labels) > 0.5
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s), np.float64)
    i = 0
    # Average ranks over runs of equal scores.
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    ends = np.r_[starts[1:], len(s)]
    avg = (starts + ends - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(avg, ends - starts)
    pos = labels.sum()
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    del i
    return float((ranks[labels].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def log_loss_of_logits(logits, labels):
    z = torch.as_tensor(np.asarray(logits, np.float64))
    y = torch.as_tensor(np.asarray(labels, np.float64))
    return float(torch.nn.functional.binary_cross_entropy_with_logits(z, y))


def evaluate(model, test):
    model.eval()
    out = []
    with torch.no_grad():
        model.pull_dense()
        parts = list(slices(test, 10000, (len(test) + 9999) // 10000))
        if parts:
            model.prefetch(parts[0])
        for i, part in enumerate(parts):
            if i + 1 < len(parts):
                model.prefetch(parts[i + 1])
            out.append(model(part).numpy())
    model.train()
    logits = np.concatenate(out) if out else np.zeros(0)
    return auc(logits, test.labels), log_loss_of_logits(logits, test.labels)


def write_curve(out_dir, title, points):
    os.makedirs(out_dir, exist_ok=True)
    keys = ["step", "examples", "seconds", "train_loss", "test_loss",
            "test_auc", "truth_auc"]
    with open(os.path.join(out_dir, "curve.csv"), "w") as f:
        f.write(",".join(keys) + "\n")
        for p in points:
            f.write(",".join(repr(p[k]) for k in keys) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing: wrote curve.csv only")
        return
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    ex = [p["examples"] for p in points]
    a1.plot(ex, [p["train_loss"] for p in points], label="train log-loss")
    a1.plot(ex, [p["test_loss"] for p in points], label="held-out log-loss")
    a1.set_xlabel("examples (all workers)")
    a1.legend()
    a2.plot(ex, [p["test_auc"] for p in points], label="held-out AUC")
    if points and points[0]["truth_auc"] is not None:
        a2.axhline(points[0]["truth_auc"], color="gray", ls="--",
                   label="truth AUC")
    a2.set_xlabel("examples (all workers)")
    a2.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "curve.png"), dpi=100)
    plt.close(fig)


# ----------------------------------------------------------------- worker --
def run_worker(args):
    rank, workers = ember.rank(), ember.num_workers()
    torch.set_num_threads(args.threads)
    client = ember.ModelClient()
    group = ember.torch.PushGroup(client)

    truth_auc = None
    test = None
    if not args.data:
        source = ember.data.SyntheticSource(seed=args.seed)
        args.fields = source.config.fields
        train = synthetic(source, ember.data.train_stream(rank),
                          args.examples_per_worker)
        if rank == 0:
            test = synthetic(source, ember.data.TEST_STREAM,
                             args.test_examples)
            truth_auc = auc(source.truth_logits(test), test.labels)
        batches_per_epoch = (len(train) + args.batch - 1) // args.batch
        total = batches_per_epoch * args.epochs
        stream = slices(train, args.batch, total)
    else:
        args.fields = 39 if args.format == "criteo" else None
        if rank == 0:
            test = ember.data.read_all(args.data, args.format, "test")
        # Counting the shard's lines first gives the progress bar its end
        # and every epoch; the file is streamed, never held in memory.
        count = sum(len(b) for b in ember.data.ExampleReader(
            args.data, args.format, "train", shard=rank,
            num_shards=workers).batches(1 << 16))
        total = (count + args.batch - 1) // args.batch * args.epochs

        def read():
            for _ in range(args.epochs):
                yield from ember.data.ExampleReader(
                    args.data, args.format, "train", shard=rank,
                    num_shards=workers).batches(args.batch)
        stream = iter(Prefetcher(read()))

    model = DeepFM(client, args, group)
    title = "ctr_torch: %s, %d workers, %d servers" % (
        args.model, workers, ember.num_servers())
    bar = None
    if rank == 0 and not args.no_progress:
        from tqdm import tqdm
        bar = tqdm(total=total, unit="batch", file=sys.stderr,
                   mininterval=1.0)
    eval_every = max(1, total // max(1, args.evals))
    points = []
    loss_fn = torch.nn.BCEWithLogitsLoss()
    train_loss = 0.0
    examples = 0
    start = time.monotonic()
    stream = iter(stream)
    batch = next(stream, None)
    if batch is not None:
        model.prefetch(batch)
    i = 0
    while batch is not None:
        following = next(stream, None)
        model.pull_dense()
        logits = model(batch)
        if following is not None:
            model.prefetch(following)  # overlaps this batch's compute
        labels = torch.from_numpy(batch.labels)
        loss = loss_fn(logits, labels)
        loss.backward()
        model.push_dense()
        group.flush(clock=True)
        value = float(loss)
        train_loss = value if i == 0 else 0.98 * train_loss + 0.02 * value
        examples += len(batch)
        i += 1
        if bar is not None:
            bar.update(1)
        if rank == 0 and (i % eval_every == 0 or i == total):
            test_auc, test_loss = evaluate(model, test)
            secs = time.monotonic() - start
            points.append(dict(step=i, examples=examples * workers,
                               seconds=secs, train_loss=train_loss,
                               test_loss=test_loss, test_auc=test_auc,
                               truth_auc=truth_auc))
            msg = ("progress batch=%d/%d examples~%d seconds=%.1f "
                   "examples_per_s~%.0f train_loss=%.4f test_loss=%.4f "
                   "test_auc=%.4f truth_auc=%s" % (
                       i, total, examples * workers, secs,
                       examples * workers / secs, train_loss, test_loss,
                       test_auc, "%.4f" % truth_auc if truth_auc else "-"))
            if bar is not None:
                bar.write(msg, file=sys.stdout)
            else:
                print(msg, flush=True)
        batch = following
    secs = time.monotonic() - start
    if bar is not None:
        bar.close()
    print("RESULT worker=%d examples=%d seconds=%.2f examples_per_s=%.0f" %
          (rank, examples, secs, examples / max(secs, 1e-9)), flush=True)
    ember.barrier("workers")
    if rank == 0:
        test_auc, test_loss = evaluate(model, test)
        print("RESULT test_auc=%.4f truth_auc=%s gap=%s test_loss=%.4f "
              "workers=%d servers=%d model=%s" % (
                  test_auc, "%.4f" % truth_auc if truth_auc else "-",
                  "%.4f" % (truth_auc - test_auc) if truth_auc else "-",
                  test_loss, workers, ember.num_servers(), args.model),
              flush=True)
        write_curve(args.out_dir, title, points)
        print("wrote %s/curve.csv and curve.png" % args.out_dir, flush=True)
        if args.checkpoint_dir:
            client.save(args.checkpoint_dir)
            print("saved the model to %s" % args.checkpoint_dir, flush=True)
    return client


def main(argv):
    args = parse_args(argv)
    ember.start()
    keep = None
    if ember.is_server():
        keep = ember.ModelServer()
    elif ember.is_worker():
        keep = run_worker(args)
    ember.finalize()
    if ember.is_server():
        s = keep.stats()
        print("RESULT server=%d rows=%d memory_mb=%.1f updates=%d" % (
            ember.rank(), s["rows"], s["memory_bytes"] / 1e6, s["updates"]),
            flush=True)
    del keep
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
