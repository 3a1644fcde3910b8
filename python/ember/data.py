"""Training data for CTR-style models (the C++ library's ps/data.h): the
synthetic source with a known ground truth, and streaming readers for libsvm
and Criteo TSV files of any size.

Examples come in ``Batch``es in CSR form, the layout of
``torch.nn.functional.embedding_bag``: example ``i`` has the feature ids
``ids[offsets[i]:offsets[i + 1]]`` (uint64, hashed), their ``values``
(float32, or None when every feature is binary) and ``labels[i]`` (0 or 1).
Generating and parsing run in C++ without the GIL, so a thread can prepare
the next batch while another trains.
"""

import numpy as np

from ember import _ember

TEST_STREAM = 0


def train_stream(worker):
    """The synthetic stream worker ``worker`` trains on."""
    return _ember._SyntheticSource.train_stream(worker)


class Batch:
    """Examples in CSR form: ids, offsets (len n + 1), values, labels."""

    __slots__ = ("ids", "offsets", "values", "labels")

    def __init__(self, ids, offsets, values, labels):
        self.ids = ids
        self.offsets = offsets
        self.values = values
        self.labels = labels

    def __len__(self):
        return len(self.labels)

    def fixed_width(self):
        """The number of ids per example if every example has as many (the
        synthetic and Criteo data: one per field), else None."""
        if len(self.labels) == 0:
            return None
        counts = np.diff(self.offsets)
        return int(counts[0]) if np.all(counts == counts[0]) else None

    def __repr__(self):
        return "Batch(%d examples, %d ids)" % (len(self), len(self.ids))


class SyntheticSource:
    """Examples drawn from a logistic regression plus factorisation machine
    truth over ``fields`` categorical fields (ps::data::SyntheticSource;
    keyword arguments set SyntheticConfig's fields: seed, fields,
    ids_per_field, zipf, fm_dim, w_std, v_std, bias, head, fm_head, decay).
    Example (stream, index) is a pure function of the configuration, so
    every process can make any part of the data."""

    def __init__(self, **config):
        c = _ember.SyntheticConfig()
        for name, value in config.items():
            if not hasattr(c, name):
                raise TypeError("unknown SyntheticConfig field %r" % name)
            setattr(c, name, value)
        self._source = _ember._SyntheticSource(c)

    @property
    def config(self):
        return self._source.config

    def generate(self, stream, first, count):
        """Examples first .. first + count - 1 of ``stream`` as a Batch."""
        return Batch(*self._source.generate(stream, first, count))

    def truth_logits(self, batch):
        """The ground truth's logits of a batch of this source (float64)."""
        return self._source.truth_logits(batch.ids, batch.offsets)

    def batches(self, stream, batch_size, count, first=0):
        """Yields ``count`` examples of ``stream`` in Batches."""
        end = first + count
        while first < end:
            n = min(batch_size, end - first)
            yield self.generate(stream, first, n)
            first += n


class ExampleReader:
    """Streams one shard and split of a libsvm or Criteo file (it holds one
    line at a time, so files larger than memory are fine). Line ``n`` is held
    out (split "test", not "train") iff ``n % test_every == test_every - 1``;
    the i-th line of the split belongs to shard ``i % num_shards``. Malformed
    lines are counted in ``stats()`` and skipped; a file that cannot be
    opened or read raises ember.Error."""

    def __init__(self, path, format="libsvm", split="all", test_every=10,
                 shard=0, num_shards=1, max_logged_errors=5):
        self._reader = _ember._ExampleReader(
            str(path), format, split, test_every, shard, num_shards,
            max_logged_errors)

    def read_batch(self, max_examples):
        """The next Batch of up to max_examples, or None at the end."""
        raw = self._reader.read_batch(max_examples)
        return None if raw is None else Batch(*raw)

    def batches(self, batch_size):
        """Yields Batches until the end of the input."""
        while True:
            b = self.read_batch(batch_size)
            if b is None:
                return
            yield b

    def stats(self):
        """Lines read, examples returned, blank and malformed lines skipped,
        and the first errors ("file:line: reason")."""
        return self._reader.stats()


def read_all(path, format="libsvm", split="all", test_every=10, shard=0,
             num_shards=1):
    """One shard and split of a file as a single Batch."""
    reader = ExampleReader(path, format, split, test_every, shard, num_shards)
    parts = list(reader.batches(1 << 16))
    return concatenate(parts)


def concatenate(batches):
    """One Batch of several."""
    if not batches:
        return Batch(np.zeros(0, np.uint64), np.zeros(1, np.int64), None,
                     np.zeros(0, np.float32))
    ids = np.concatenate([b.ids for b in batches])
    offsets = [np.zeros(1, np.int64)]
    base = 0
    for b in batches:
        offsets.append(b.offsets[1:] + base)
        base += b.offsets[-1]
    weighted = any(b.values is not None for b in batches)
    values = None
    if weighted:
        values = np.concatenate([
            b.values if b.values is not None
            else np.ones(len(b.ids), np.float32) for b in batches])
    labels = np.concatenate([b.labels for b in batches])
    return Batch(ids, np.concatenate(offsets), values, labels)


feature_id = _ember.feature_id
feature_value = _ember.feature_value
