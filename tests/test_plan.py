import pytest

from tessera.plan import Device, Plan, PlanError, Stage, simple_plan


def _dev(*ranks, gpu="A100-40GB"):
    return tuple(Device(rank=r, gpu_type=gpu) for r in ranks)


def test_json_round_trip_of_mixed_degree_plan():
    plan = Plan(
        model="gpt-tiny",
        global_batch=8,
        seq_len=16,
        stages=(
            Stage(0, 3, _dev(0, 1), dp_degree=2, batch_shares=(6, 2)),
            Stage(3, 6, _dev(2, 3, gpu="V100-32GB"), tp_degree=2, tp_ratios=(0.75, 0.25)),
        ),
        micro_batches=2,
        precision="bf16",
        model_layers=6,
        model_heads=4,
    )
    again = Plan.from_json(plan.to_json())
    assert again == plan
    assert again.stage_of_rank(3) == (1, 0, 1)
    assert again.world_size == 4 and not again.stages[1].even_tp


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"stages": (Stage(0, 6, _dev(0, 1), dp_degree=2, batch_shares=(5, 2)),)}, "batch_shares"),
        ({"stages": (Stage(0, 6, _dev(0, 1), tp_degree=2, tp_ratios=(0.5, 0.4)),)}, "tp_ratios"),
        ({"stages": (Stage(0, 6, _dev(0, 1, 2), tp_degree=3),)}, r"stages\[0\].tp_degree"),
        ({"stages": (Stage(0, 3, _dev(0)), Stage(3, 6, _dev(0)))}, "rank 0 already used"),
        ({"stages": (Stage(0, 3, _dev(0)), Stage(3, 6, _dev(1))), "micro_batches": 1}, "1F1B needs"),
        ({"stages": (Stage(0, 5, _dev(0)),)}, "stages cover 5 layers"),
        ({"stages": (Stage(0, 3, _dev(0)), Stage(2, 6, _dev(1)))}, "layer_start"),
        ({"stages": (Stage(0, 6, _dev(0)),), "zero": 4}, "zero"),
        ({"stages": (Stage(0, 6, _dev(0)),), "precision": "fp8"}, "precision"),
    ],
)
def test_invalid_plans_name_the_field(kwargs, field):
    base = {
        "model": "m",
        "global_batch": 8,
        "seq_len": 16,
        "micro_batches": 2,
        "model_layers": 6,
        "model_heads": 4,
    }
    with pytest.raises(PlanError, match=field):
        Plan(**{**base, **kwargs})


def test_simple_plan_even_layers_and_shares():
    p = simple_plan("m", n_layers=7, global_batch=10, seq_len=8, dp=3, pp=2, micro_batches=2)
    assert [(s.layer_start, s.layer_end) for s in p.stages] == [(0, 4), (4, 7)]
    assert p.stages[0].shares(10) == (4, 3, 3)
    assert p.world_size == 6
    with pytest.raises(PlanError, match="pp"):
        simple_plan("m", n_layers=2, global_batch=4, seq_len=8, pp=3)


def test_virtual_stages_chunks_round_trip_and_validation():
    """Interleaving keeps each stage's layer count, cut into chunks placed round-robin (virtual stage c·S + s);
    old plan JSON without the field loads as the plain schedule; bad values name the field."""
    plan = simple_plan("m", n_layers=10, global_batch=8, seq_len=16, pp=2, micro_batches=4,
                       layer_cuts=(4,), virtual_stages=3)  # fmt: skip
    assert plan.stage_chunks() == (((0, 2), (4, 5), (7, 8)), ((2, 4), (5, 7), (8, 10)))
    assert [plan.stage_of_layer(i) for i in range(10)] == [0, 0, 1, 1, 0, 1, 1, 0, 1, 1]
    assert Plan.from_json(plan.to_json()) == plan
    old = plan.to_dict()
    del old["virtual_stages"]
    old["micro_batches"] = 3
    plain = Plan.from_dict(old)
    assert plain.virtual_stages == 1 and plain.stage_chunks() == (((0, 4),), ((4, 10),))
    assert plain.stage_of_layer(4) == 1
    with pytest.raises(KeyError):
        plain.stage_of_layer(10)
    for kw, reason in (
        ({"virtual_stages": 0}, ">= 1"),
        ({"virtual_stages": 2, "schedule": "gpipe"}, "1F1B"),
        ({"virtual_stages": 2, "micro_batches": 5}, "multiple of the stages"),
        ({"virtual_stages": 5}, "fewer than its 5 chunks"),
    ):
        with pytest.raises(PlanError, match=reason) as err:
            simple_plan("m", n_layers=10, global_batch=8, seq_len=16, pp=2,
                        **{"micro_batches": 4, "layer_cuts": (4,), **kw})  # fmt: skip
        assert err.value.field == "virtual_stages"
    with pytest.raises(PlanError, match="virtual_stages"):
        simple_plan("m", n_layers=10, global_batch=8, seq_len=16, pp=1, virtual_stages=2)


def test_the_every_micro_batch_shortcut_equals_the_dealt_rows():
    """``every_replica_in_every_micro_batch`` answers equal shares without dealing the rows (the estimate asks
    it per stage and plan); its answer is the dealt rows' for equal and unequal shares alike."""
    from tessera.plan import every_replica_in_every_micro_batch, micro_ranges, replica_rows

    for dp in (1, 2, 3, 4, 8):
        for batch in range(dp, 41):
            for m in range(1, batch + 1):
                base, extra = divmod(batch, dp)
                for shares in {
                    tuple(base + (r < extra) for r in range(dp)),
                    (batch - dp + 1,) + (1,) * (dp - 1),
                }:
                    rows = replica_rows(shares, micro_ranges(batch, m))
                    want = all(a < b for replica in rows for a, b in replica)
                    assert every_replica_in_every_micro_batch(shares, batch, m) == want, (shares, batch, m)
