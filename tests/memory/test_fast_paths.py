"""The memory module's fast paths give exactly what the plain computation gives."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tessera.hardware import get_gpu
from tessera.memory.estimate import candidate_layouts, smallest_fitting_layouts
from tessera.memory.formula import evaluate, inputs_for
from tessera.memory.layout import Layout, device_views
from tessera.memory.overhead import DEFAULT_HEADROOM_FRACTION, overhead_for
from tessera.models.zoo import get_spec


def _exhaustive(spec, base, gpu_type, top, max_gpus):  # every candidate layout evaluated, as before
    gpu = get_gpu(gpu_type)
    layouts = candidate_layouts(spec, base, max_gpus)
    views, owner = [], []
    for j, lay in enumerate(layouts):
        for v in device_views(spec, lay):
            views.append(v)
            owner.append(j)
    worst = np.zeros(len(layouts))
    np.maximum.at(worst, np.asarray(owner), evaluate(spec, views).peak_bytes)
    o = overhead_for(gpu.name)
    device = worst * o.fragmentation + o.context_bytes
    ok = np.flatnonzero(device <= gpu.memory_bytes * (1 - DEFAULT_HEADROOM_FRACTION))
    if ok.size == 0:
        return []
    n = np.array([layouts[j].n_gpus for j in ok])
    chosen = sorted(ok[n == n.min()], key=lambda j: device[j])[:top]
    return [(int(n.min()), layouts[j], float(worst[j]), float(gpu.memory_bytes - device[j])) for j in chosen]


@pytest.mark.parametrize("model,batch,prec", [("gpt3-1.3b", 64, "fp16"), ("llama2-7b", 32, "bf16-master")])
def test_smallest_fitting_layouts_equal_exhaustive_search(model, batch, prec):
    spec = copy.deepcopy(get_spec(model))
    base = Layout(global_batch=batch, precision=prec)
    for gpu_type in ("A100-40GB", "A10", "V100-32GB"):
        want = _exhaustive(spec, base, gpu_type, 3, 32)
        for _ in range(2):  # cold, then from the per-spec memo
            rows = smallest_fitting_layouts(spec, base, gpu_type, top=3, max_gpus=32)
            got = [
                (r.n_gpus, Layout(dp=r.dp, tp=r.tp, pp=r.pp, micro_batch=r.micro_batch, global_batch=batch,
                                  precision=prec, recompute=r.recompute, zero=r.zero), r.peak_bytes,
                 r.headroom_bytes)
                for r in rows
            ]  # fmt: skip
            assert got == want


def test_uncovered_model_still_raises():
    with pytest.raises(ValueError):
        smallest_fitting_layouts(get_spec("wrn-2b"), Layout(global_batch=64), "A100-40GB", max_gpus=8)


@pytest.mark.parametrize("model", ["gpt3-1.3b", "llama2-7b", "bert-1.3b", "moe-2.4b"])
def test_batched_inputs_equal_one_view_at_a_time(model):
    spec = get_spec(model)
    views = [
        v
        for lay in candidate_layouts(spec, Layout(global_batch=32, precision="fp16", attention="math"), 8)
        for v in device_views(spec, lay)
    ][::7]
    batch = inputs_for(spec, views)
    for i, v in enumerate(views):
        one = inputs_for(spec, [v])
        assert list(one) == list(batch)
        for k, col in one.items():
            assert col[0] == batch[k][i], (k, v)
