"""The rate table's lookups by the table's own configuration objects (``PerfTable._own``): an equal
configuration that is another object — a job's, against a table built in worker processes or unpickled — gets
the same figures, and the memos stay keyed by one object per configuration."""

from __future__ import annotations

import pickle

from tessera.scheduler.knowledge import SyntheticModel, synthetic_table
from tessera.scheduler.state import JobConfig

CAP = {"A100-40GB": 16, "V100-32GB": 16}
GPUS = (("A100-40GB", 4),)


def _table():
    return synthetic_table({("gpt-a", 32): SyntheticModel(60.0), ("gpt-b", 64): SyntheticModel(20.0)}, CAP)


def test_an_equal_configuration_object_gets_the_same_figures_from_the_same_memo_key():
    t = _table()
    first = JobConfig("gpt-a", 32)
    other = JobConfig("gpt-a", 32)  # equal, another object
    assert first is not other
    fresh = _table()  # uncached: every figure computed for ``other`` alone
    assert t.true_of(first, GPUS) == t.true_of(other, GPUS) == fresh.true_of(other, GPUS) > 0
    assert t.cell_of(other, GPUS) == fresh.cell_of(first, GPUS) > 0
    assert t.dp_of(other, "V100-32GB", 8) == fresh.dp_of(first, "V100-32GB", 8)
    assert t.stages_of(other, GPUS) == fresh.stages_of(first, GPUS)
    # one key object per configuration: the one seen first
    assert {id(k[0]) for k in t._true} == {id(first)}
    assert {id(k[0]) for k in t._cell} == {id(first)}


def test_a_configuration_loaded_later_and_a_pickled_table_keep_one_object_per_configuration():
    t = _table()
    a = JobConfig("gpt-a", 32)
    want = t.true_of(a, GPUS)
    data = t.export(a)
    # another table loads the figures under its own object; a third object finds them
    u = _table()
    u.load(JobConfig("gpt-a", 32), data)
    assert u.true_of(JobConfig("gpt-a", 32), GPUS) == want
    assert len({id(k[0]) for k in u._true}) == 1
    # a pickled table forgets the ids (per process) and finds its own objects again
    v = pickle.loads(pickle.dumps(u))
    assert v._alias is None
    b = JobConfig("gpt-a", 32)
    assert v.true_of(b, GPUS) == want
    assert v._own(b) is next(iter(v._true))[0]
    # (model, global batch) pairs are the same configuration
    assert v.true_of(("gpt-a", 32), GPUS) == want
    assert v.true_of(("gpt-b", 64), GPUS) == _table().true_of(JobConfig("gpt-b", 64), GPUS)
