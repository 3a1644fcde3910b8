"""Checks of ember.torch, run as every node of a job (servers run the model
layer); the worker prints "CHECK torch ok"."""

import numpy as np
import torch

import ember
import ember.torch


def check():
    client = ember.ModelClient()
    emb = ember.torch.Embedding(client, "e", 3, initializer="constant(1)",
                                optimizer="sgd(lr=1)")
    ids = np.array([7, 9, 7], np.uint64)
    rows = emb(ids)
    assert rows.shape == (3, 3) and rows.requires_grad
    # backward pushes d(sum)/d(row) = 1 per occurrence: id 7 twice.
    rows[[0, 2]].sum().backward()
    after = client.pull_rows("e", np.array([7, 9], np.uint64))
    np.testing.assert_allclose(after, [[-1] * 3, [1] * 3])
    # Prefetched rows are the ones the forward pass uses.
    emb.prefetch(ids)
    with torch.no_grad():
        r = emb(ids)
    np.testing.assert_allclose(r.numpy(), [[-1] * 3, [1] * 3, [-1] * 3])
    # A forward pass on other ids than prefetched still gets the right rows.
    emb.prefetch(np.array([1], np.uint64))
    with torch.no_grad():
        r = emb(np.array([9], np.uint64))
    np.testing.assert_allclose(r.numpy(), [[1] * 3])

    # EmbeddingBag as torch.nn.EmbeddingBag, and a PushGroup: one push.
    group = ember.torch.PushGroup(client)
    bag = ember.torch.EmbeddingBag(client, "b", 2, mode="sum",
                                   initializer="constant(0.5)",
                                   optimizer="sgd(lr=0.1)", group=group)
    bag_ids = torch.tensor([1, 2, 3, 1], dtype=torch.int64)
    offsets = np.array([0, 1])  # bag starts, as torch.nn.EmbeddingBag's
    with torch.no_grad():
        out = bag(bag_ids, offsets)
        np.testing.assert_allclose(out.numpy(), [[0.5, 0.5], [1.5, 1.5]])
        weighted = bag(bag_ids, offsets,
                       per_sample_weights=torch.tensor([1.0, 2.0, 2.0, 2.0]))
        np.testing.assert_allclose(weighted.numpy(), [[0.5] * 2, [3] * 2])
        # The same bags in CSR form (ember.data.Batch.offsets).
        csr = ember.torch.EmbeddingBag(client, "b", 2, register=False,
                                       include_last_offset=True)
        np.testing.assert_allclose(csr(bag_ids, [0, 1, 4]).numpy(),
                                   out.numpy())
        mean = ember.torch.EmbeddingBag(client, "b", 2, mode="mean",
                                        register=False)
        np.testing.assert_allclose(
            mean(np.array([[1, 2], [3, 1]], np.uint64)).numpy(),
            [[0.5] * 2, [0.5] * 2])

    lin = torch.nn.Linear(2, 1)
    with torch.no_grad():
        lin.weight.fill_(1.0)
        lin.bias.fill_(0.0)
    dense = ember.torch.DenseParameters(client, lin, "lin",
                                        optimizer="sgd(lr=0.1)", group=group)
    dense.pull()
    loss = lin(bag(bag_ids, offsets)).sum()
    loss.backward()
    dense.push()
    assert client.pull_rows("b", np.array([2], np.uint64))[0][0] == 0.5, \
        "a grouped gradient went out before flush"
    group.flush(clock=True)
    # d loss / d row = lin.weight = 1 per occurrence; id 1 appears twice.
    np.testing.assert_allclose(
        client.pull_rows("b", np.array([1, 2], np.uint64)),
        [[0.3] * 2, [0.4] * 2], rtol=1e-6)
    dense.pull()
    # d loss / d weight = the bags' summed values (0.5 + 1.5) per column.
    np.testing.assert_allclose(lin.weight.detach().numpy(), [[0.8, 0.8]],
                               rtol=1e-6)


def main():
    ember.start()
    keep = None
    if ember.is_server():
        keep = ember.ModelServer()
    elif ember.is_worker():
        torch.set_num_threads(1)
        check()
        print("CHECK torch ok", flush=True)
    ember.finalize()
    del keep


if __name__ == "__main__":
    main()
