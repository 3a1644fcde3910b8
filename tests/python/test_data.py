"""ember.data: the C++ readers and the synthetic source from Python
(in-process: no cluster)."""

import numpy as np
import pytest

import ember
import ember.data


def test_synthetic_examples_are_a_function_of_stream_and_index():
    s = ember.data.SyntheticSource(seed=3, fields=5, ids_per_field=1000)
    a = s.generate(ember.data.train_stream(1), 100, 50)
    b = s.generate(ember.data.train_stream(1), 120, 10)
    assert len(a) == 50 and a.fixed_width() == 5 and a.values is None
    np.testing.assert_array_equal(a.ids[20 * 5:30 * 5], b.ids)
    np.testing.assert_array_equal(a.labels[20:30], b.labels)
    assert set(np.unique(a.labels)) <= {0.0, 1.0}
    # Field f's ids are FeatureId(f, rank) with rank < ids_per_field.
    ranks = [ember.data.feature_value(f, int(a.ids[f])) for f in range(5)]
    assert all(r < 1000 for r in ranks)
    assert ember.data.feature_id(2, ranks[2]) == int(a.ids[2])
    other = s.generate(ember.data.train_stream(2), 100, 50)
    assert not np.array_equal(a.ids, other.ids)


def test_truth_logits_predict_the_labels():
    s = ember.data.SyntheticSource(seed=1)
    test = s.generate(ember.data.TEST_STREAM, 0, 20000)
    z = s.truth_logits(test)
    p = 1 / (1 + np.exp(-z))
    # Labels are Bernoulli(sigmoid(truth)): the means agree.
    assert abs(p.mean() - test.labels.mean()) < 0.02
    with pytest.raises(ValueError):
        s.truth_logits(ember.data.Batch(test.ids[:3], np.array([0, 3]), None,
                                        test.labels[:1]))
    with pytest.raises(TypeError):
        ember.data.SyntheticSource(no_such_field=1)
    with pytest.raises(ember.InvalidArgumentError):
        ember.data.SyntheticSource(fields=0)


def test_libsvm_reader_streams_shards_splits_and_skips_bad_lines(tmp_path):
    path = tmp_path / "d.libsvm"
    lines = []
    for n in range(40):
        if n == 5:
            lines.append("this is not libsvm")
        elif n == 6:
            lines.append("")
        else:
            lines.append("%d %d:1 %d:0.5" % (n % 2, n, 1000 + n))
    path.write_text("\n".join(lines) + "\n")
    r = ember.data.ExampleReader(path, "libsvm", split="train", shard=1,
                                 num_shards=2, max_logged_errors=0)
    got = list(r.batches(4))
    assert all(len(b) <= 4 for b in got)
    batch = ember.data.concatenate(got)
    # Training lines: n % 10 != 9; shard 1 takes every second of them.
    train = [n for n in range(40) if n % 10 != 9]
    mine = [n for i, n in enumerate(train) if i % 2 == 1 and n not in (5, 6)]
    assert len(batch) == len(mine)
    np.testing.assert_array_equal(batch.ids[0::2], np.array(mine, np.uint64))
    np.testing.assert_array_equal(batch.values[1::2], 0.5)
    np.testing.assert_array_equal(batch.labels, [n % 2 for n in mine])
    stats = r.stats()
    assert stats["lines"] == 40 and stats["examples"] == len(mine)
    assert stats["malformed"] + stats["blank"] == 1  # line 5 is in shard 1
    test = ember.data.read_all(path, "libsvm", split="test")
    assert len(test) == 4 and list(test.offsets) == [0, 2, 4, 6, 8]


def test_criteo_lines_give_one_id_per_field(tmp_path):
    path = tmp_path / "day_0"
    cols = ["1"] + [str(i) for i in range(13)] + ["%08x" % i
                                                  for i in range(26)]
    cols[3] = ""  # a missing integer feature
    path.write_text("\t".join(cols) + "\n")
    b = ember.data.read_all(path, "criteo", test_every=0)
    assert len(b) == 1 and b.fixed_width() == 39 and b.labels[0] == 1
    assert int(b.ids[13]) == ember.data.feature_id(13, 0)


def test_missing_file_raises_not_found(tmp_path):
    with pytest.raises(ember.Error) as e:
        ember.data.ExampleReader(tmp_path / "nope.libsvm")
    assert "nope.libsvm" in str(e.value)
    with pytest.raises(ValueError):
        ember.data.ExampleReader(tmp_path / "x", format="csv")
