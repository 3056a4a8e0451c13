"""The tessera policy's grouping of running jobs for the LP (``lp._running_owners``) writes out, per job, the
restart budget, remaining work and LP weight instead of calling the rules' functions (a heavy round at 12,800 GPUs
spent most of its time outside the LP there). On every round of a contended trace its groups, the capacity it
leaves and the memos it seeds equal, to the last bit, what the rules' own functions give on a fresh round state."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

from tessera.scheduler import ClusterState, Job, get_policy
from tessera.scheduler.knowledge import SyntheticModel, synthetic_table
from tessera.scheduler.policies.tessera.order import remaining, weight, weight_bucket
from tessera.scheduler.policies.tessera.round import RoundState
from tessera.sim.simulator import SimConfig, Simulator

lp = importlib.import_module("tessera.scheduler.policies.tessera.lp")

MODELS = {
    ("s", 8): SyntheticModel(memory_gib=10, base_rate=2.0, scaling=0.9),
    ("m", 8): SyntheticModel(memory_gib=40, base_rate=1.0, scaling=0.85),
    ("l", 8): SyntheticModel(memory_gib=90, base_rate=0.5, scaling=0.8),
}
TYPES = ("A100-40GB", "V100-32GB", "A10")


def _reference(r: RoundState, capacity: np.ndarray) -> dict[tuple, list[int]]:
    """The grouping by the rules' functions, one call per job (as ``_running_owners`` was written before)."""
    ctx = r.ctx
    now = ctx.now_s
    frozen = r.rescale_limit() <= 0
    col = {t: k for k, t in enumerate(ctx.cluster.types)}
    groups: dict[tuple, list[int]] = {}
    for js in ctx.running:
        a = ctx.allocations.get(js.job_id)
        if a is None:
            continue
        if frozen or not r.movable(js):
            for t, n in a.gpus:
                capacity[col[t]] -= n
            continue
        inf = r.info(js.job)
        rate = js.rate_iters_per_s or r.held_cell(js, a).rate
        rem = js.remaining_at(now)
        left = int(math.log2(max(rem / max(rate, 1e-12), 1.0)))
        key = (inf.key, js.job.priority, a.gpus, left, weight_bucket(r, js), r.settling(js))
        groups.setdefault(key, []).append(js.job_id)
    return groups


def _trace(seed: int) -> tuple[ClusterState, object, list[Job]]:
    """A small three-type cluster under a burst of jobs of random size, priority and length."""
    cs = ClusterState.of([("A100-40GB", 8)] * 2 + [("V100-32GB", 8)] * 2 + [("A10", 4)] * 2)
    table = synthetic_table(MODELS, cs.capacity_by_type())
    rng = np.random.default_rng(seed)
    keys = list(MODELS)
    jobs: list[Job] = []
    t = 0.0
    for i in range(90):
        t += float(rng.exponential(90.0))
        model, gb = keys[int(rng.integers(len(keys)))]
        gtype = TYPES[int(rng.integers(len(TYPES)))]
        probe = Job(i, model, gb, t, 1.0)
        n0 = table.min_gpus(probe, gtype)
        if n0 is None:
            gtype, n0 = "A100-40GB", table.min_gpus(probe, "A100-40GB")
        n = max(int(n0 or 1), 2 ** int(rng.integers(0, 3)))
        rate = table.true_of((model, gb), ((gtype, n),))
        dur = float(np.exp(rng.uniform(np.log(300.0), np.log(12000.0))))
        jobs.append(Job(i, model, gb, t, dur * rate, n, gtype, priority=int(rng.integers(0, 2))))
    return cs, table, jobs


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_running_groups_and_memos_equal_the_rules_functions(seed, monkeypatch):
    checked = []
    owners_of = lp._running_owners

    def both(r: RoundState, capacity: np.ndarray):
        fresh = RoundState(r.pol, r.ctx, prio_w=dict(r.prio_w), touched=set(r.touched))
        want_cap = capacity.copy()
        want = _reference(fresh, want_cap)
        got = owners_of(r, capacity)
        assert capacity.tobytes() == want_cap.tobytes()
        assert sorted(sorted(js.job_id for js in o.members) for o in got) == sorted(
            sorted(m) for m in want.values()
        )
        for jid, m in r.remaining.items():  # the memos seeded equal the rules' figures from scratch
            assert m == remaining(fresh, r.ctx.jobs[jid])
        for jid, w in r.weights.items():
            assert w == weight(fresh, r.ctx.jobs[jid])
        for jid, c in r.restart.items():
            assert c == fresh.restart_s(r.ctx.jobs[jid])
        checked.append(len(got))
        return got

    monkeypatch.setattr(lp, "_running_owners", both)
    cs, table, jobs = _trace(seed)
    Simulator(cs, jobs, table, get_policy("tessera"), SimConfig()).run()
    assert len(checked) > 20 and sum(checked) > 50  # rounds with running groups were checked
