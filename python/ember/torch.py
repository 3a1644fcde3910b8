"""PyTorch modules whose parameters live on Ember's servers.

``Embedding`` and ``EmbeddingBag`` are ``torch.nn.Module``s over an Ember
embedding table: rows are keyed by 64-bit ids (numpy uint64, or torch int64
holding the same bits), created on the servers on first pull and updated
there by the table's optimizer. ``forward`` pulls the rows of the batch (or
takes the rows ``prefetch`` started pulling while the previous batch
computed); ``backward`` pushes the gradient of exactly those rows (a sparse
gradient; duplicate ids are summed on the server). ``DenseParameters`` keeps
a module's ordinary parameters on the servers too: ``pull()`` before the
forward pass, ``push()`` after the backward pass, with the optimizer running
on the servers.

Pushes go out at once, or, given a ``PushGroup``, together in one request
per step (``group.flush()``), which is what a training loop wants::

    client = ember.ModelClient()
    group = ember.torch.PushGroup(client)
    emb = ember.torch.EmbeddingBag(client, "emb", 16, group=group,
                                   include_last_offset=True)
    mlp = torch.nn.Linear(16, 1)
    dense = ember.torch.DenseParameters(client, mlp, "mlp", group=group)
    for batch in batches:
        dense.pull()
        loss = loss_fn(mlp(emb(batch.ids, batch.offsets)), labels)
        loss.backward()
        dense.push()
        group.flush(clock=True)
"""

import threading

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["Embedding", "EmbeddingBag", "DenseParameters", "PushGroup"]


def _ids_array(ids):
    """``ids`` as a 1-D numpy uint64 array (sharing memory when possible)."""
    if isinstance(ids, torch.Tensor):
        if ids.dtype != torch.int64:
            raise TypeError("ids must be torch.int64 (or numpy uint64), not %s"
                            % ids.dtype)
        return ids.detach().contiguous().numpy().view(np.uint64).reshape(-1)
    a = np.asarray(ids)
    if a.dtype == np.int64:
        a = a.view(np.uint64)
    if a.dtype != np.uint64:
        raise TypeError("ids must be uint64 (or int64), not %s" % a.dtype)
    return np.ascontiguousarray(a).reshape(-1)


class PushGroup:
    """Collects the gradients of one step and pushes them in one request
    (``ModelClient.push``), so a step costs one round trip however many
    tables and dense parameters it updates. Thread-safe."""

    def __init__(self, client):
        self.client = client
        self._lock = threading.Lock()
        self._dense = {}
        self._sparse = []
        self.version = 0

    def add_sparse(self, table, ids, grads):
        with self._lock:
            self._sparse.append((table, ids, grads))

    def add_dense(self, name, grads):
        with self._lock:
            if name in self._dense:
                self._dense[name] = self._dense[name] + grads
            else:
                self._dense[name] = grads

    def flush(self, clock=False):
        """Pushes what was collected (if anything), then, with ``clock``,
        ends this worker's iteration. Returns the model version."""
        with self._lock:
            dense, sparse = self._dense, self._sparse
            self._dense, self._sparse = {}, []
        if dense or sparse:
            self.version = self.client.push(dense, sparse)
        if clock:
            self.client.clock()
        return self.version


class _Rows:
    """Pulls and prefetches a table's rows for the modules below."""

    def __init__(self, client, table):
        self.client = client
        self.table = table
        self._prefetched = []  # (ids, ticket), oldest first.

    def prefetch(self, ids):
        ids = _ids_array(ids)
        self._prefetched.append((ids, self.client.pull_rows_async(
            self.table, ids)))
        return ids

    def pull(self, ids):
        while self._prefetched:
            want, ticket = self._prefetched.pop(0)
            rows = self.client.wait_rows(ticket)
            if want is ids or (want.shape == ids.shape and
                               np.array_equal(want, ids)):
                return rows
        return self.client.pull_rows(self.table, ids)

    def drop_prefetched(self):
        while self._prefetched:
            self.client.wait_rows(self._prefetched.pop(0)[1])


class Embedding(torch.nn.Module):
    """Rows of the Ember embedding table ``table`` (dimension ``dim``) by id:
    ``forward(ids)`` returns a ``(len(ids), dim)`` float32 tensor. In
    training mode its gradient is pushed to the table's server-side
    optimizer during backward (or added to ``group``). ``register`` False:
    the table is already registered (same spec) by this or another worker.
    """

    def __init__(self, client, table, dim, initializer="normal(0,0.01)",
                 optimizer="adagrad(lr=0.05)", consistency="asp",
                 group=None, register=True):
        super().__init__()
        self.client = client
        self.table = table
        self.dim = dim
        self.group = group
        if register:
            client.register_table(table, dim, initializer, optimizer,
                                  consistency)
        self._rows = _Rows(client, table)

    def prefetch(self, ids):
        """Starts pulling the rows of ``ids`` (the next batch) now; the
        forward pass given the same ids waits for them instead of pulling."""
        return self._rows.prefetch(ids)

    def forward(self, ids):
        ids = _ids_array(ids)
        rows = torch.from_numpy(self._rows.pull(ids))
        if self.training and torch.is_grad_enabled():
            rows.requires_grad_(True)
            rows.register_hook(self._pusher(ids))
        return rows

    def _pusher(self, ids):
        def push(grad):
            g = grad.detach().contiguous().numpy()
            if self.group is not None:
                self.group.add_sparse(self.table, ids, g)
            else:
                self.client.push({}, [(self.table, ids, g)])
        return push

    def extra_repr(self):
        return "table=%r, dim=%d, on Ember's servers" % (self.table, self.dim)


class EmbeddingBag(Embedding):
    """Sums (``mode`` "sum") or averages ("mean") the rows of each bag, as
    ``torch.nn.EmbeddingBag``: ``offsets`` holds each bag's start in
    ``ids`` or, with ``include_last_offset`` (the CSR layout of
    ``ember.data.Batch.offsets``), also the end of the last one;
    ``per_sample_weights`` weights the rows (sum mode). Without offsets,
    ``ids`` is 2-D (batch, bag size). The rows live on Ember's servers (see
    Embedding)."""

    def __init__(self, client, table, dim, mode="sum",
                 include_last_offset=False, **kwargs):
        if mode not in ("sum", "mean"):
            raise ValueError("mode must be sum or mean")
        super().__init__(client, table, dim, **kwargs)
        self.mode = mode
        self.include_last_offset = include_last_offset

    def forward(self, ids, offsets=None, per_sample_weights=None):
        last = self.include_last_offset
        if offsets is None:
            shape = tuple(np.shape(ids))
            if len(shape) != 2:
                raise ValueError("ids without offsets must be 2-D")
            offsets = np.arange(0, shape[0] * shape[1], shape[1])
            last = False
        rows = super().forward(ids)
        offsets = torch.as_tensor(np.asarray(offsets, dtype=np.int64))
        index = torch.arange(rows.shape[0])
        if per_sample_weights is not None:
            per_sample_weights = torch.as_tensor(per_sample_weights)
        return F.embedding_bag(index, rows, offsets, mode=self.mode,
                               per_sample_weights=per_sample_weights,
                               include_last_offset=last)


class DenseParameters:
    """Keeps ``module``'s parameters on Ember's servers as one dense parameter
    ``name`` (its parameters flattened in order), updated there by
    ``optimizer``. The first worker to register it supplies the initial
    values; ``pull()`` copies the servers' values into the module,
    ``push()`` sends the gradients (into ``group`` if given)."""

    def __init__(self, client, module, name, optimizer="adagrad(lr=0.05)",
                 consistency="asp", group=None):
        self.client = client
        self.name = name
        self.group = group
        self.params = [p for p in module.parameters() if p.requires_grad]
        initial = torch.nn.utils.parameters_to_vector(self.params)
        client.register_dense(name, initial.detach().numpy().astype(
            np.float32), optimizer, consistency)
        self.version = 0

    def pull(self):
        """Copies the servers' current values into the module's parameters."""
        values, self.version = self.client.pull_dense(self.name)
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(torch.from_numpy(values),
                                                self.params)
        return self.version

    def push(self):
        """Sends the module's gradients (zeros for parameters without one)
        and clears them."""
        grads = [p.grad.reshape(-1) if p.grad is not None
                 else torch.zeros(p.numel()) for p in self.params]
        flat = torch.cat(grads).detach().numpy().astype(np.float32, copy=False)
        for p in self.params:
            p.grad = None
        if self.group is not None:
            self.group.add_dense(self.name, flat)
        else:
            self.version = self.client.push({self.name: flat}, [])
        return self.version
