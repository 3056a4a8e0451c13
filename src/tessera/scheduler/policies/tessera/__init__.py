"""Tessera — Crius's Cell-based scheduling (Crius §6, Algorithm 1) with Frenzy's HAS placement.

One round (:meth:`Tessera.schedule`) runs these rules, each a small module of this package, in this order on one
:class:`~tessera.scheduler.policies.tessera.round.RoundState` (the round's prices, jobs changed, memos):

1. **Deadlines** (``tessera-ddl``, Crius §8.5; :func:`.order.drop_hopeless`): a job that cannot meet its deadline
   even on its fastest Cell is dropped early.
2. **Queue order** (:func:`.order.queue`): user priority, then shortest-remaining-first with HRRN aging (Crius §6
   takes arrival order: ``order="arrival"``; earliest deadline first in the deadline-aware mode).
3. **BestPerf as one LP** (:func:`.lp.plan`, Crius Algorithm 1 lines 14-20 solved for all jobs together, as Crius
   §6 suggests solvers may): the throughput LP over the Cells of queued and running jobs
   (:mod:`tessera.scheduler.cell_lp`); each job's normalized throughput is weighted by its user priority
   (``PRIORITY_WEIGHT`` per level) and 1 + θ ÷ t (t: seconds it still needs on its reference Cell, θ =
   ``srpt_horizon_s``) — the **order and weights** rule (:mod:`.order`). A running job's held Cell is worth the
   speed measured on it where that beats the estimate, its other Cells their estimated throughput less the
   restart they cost; its duals price each GPU type for the round.
4. **Rescale** (:func:`.rescale.rescale_running`, VirtualAlloc line 19, ScaleResource): the running jobs the LP
   moves change first — at most ``depth`` (default 10) per arrival or departure of the round, the most valuable
   first, all released together so two jobs can trade GPU types.
5. **Admit, backfill, preempt** (:func:`.admit.admit`): queued jobs take the LP's Cells in queue order; those left
   out may start on free GPUs with a Cell worth its GPUs' prices, by opportunistic execution (Crius §6.1) or by
   shortest-remaining preemption — both through the one "suspend until it fits, else undo" loop.
6. **Short jobs finish soonest** (:func:`.sprint.sprint`): a job admitted whose fastest Cell on the GPUs still idle
   would finish it within ``sprint_s`` (default 30 min) takes that Cell before it starts — at rounds and control
   ticks alike: it gives the GPUs back before a grown long job would have to be shrunk for an arrival.
7. **Grow** (:func:`.grow.grow_new`): jobs admitted this round grow into GPUs left idle before they start (no
   restart yet), best gain per GPU first — at rounds only. At a control tick between rounds (an arrival or a
   completion decided as it happens, ``SchedulingContext.at_round`` False) a job admitted takes its Cell: the
   next arrival may be seconds away, and a job grown into the GPUs a completion just freed is shrunk for it at a
   restart's cost (under saturation, growing at every tick made the large jobs' restarts and JCTs grow).
8. **FinalizeAlloc** (lines 8 and 13): the core binds the virtual allocation.

Cells (:mod:`.cells`, Crius §6.1 "Initializing Cells"): per GPU type the counts N/2, N, 2N, … ``max_scale`` × N
(default 4; Crius: 2) — N the requested count raised to the fewest GPUs the model fits in — × stage counts ×
even two-type mixes (a mix only when no single type can hold the job); the LP chooses among those, while growth
into idle GPUs (grow, sprint, backfill) may go on to ``grow_scale`` × N (default 8: at 4 × N, GPUs sat idle at light
load while jobs that could use them ran on). Throughput is normalized per job by its
fastest Cell at the base count (``normalize="best"``) or by its estimate on the type it named
(``normalize="request"``: then a job that named a slow type counts 2.5× on a fast GPU and one that named the fast
type 0.4× on a slow one, so under contention the latter are parked on slow GPUs — on the Philly benchmark at 4×
density average JCT 5,400 s vs 5,000 s, for 0.5 % of throughput).

**Restart budget** (as Pollux and Sia discount a re-allocation by the share of its life restarts took): a running
job is rescaled or suspended for others only while its restarts so far cost at most ``restart_budget`` (10 %) of
its time in the system. Preemption victims must also have run a round and twice their restart since their last
change.

**Hysteresis** (no thrash): a job whose allocation changed (start, resume, rescale, migration) less than
max(``settle_rounds`` = 2 rounds, ``settle_s`` = 600 s) ago is *settling*; it is moved again only when the move
saves at least ``settle_factor`` = 3 × its restart cost over its remaining work: in the LP its other Cells are
charged 3 × the restart (a Cell of rate r_new is worth r_new · T ÷ (3c + T), T = R ÷ r_new the time it would
take, which beats the held Cell's r_old exactly when R ÷ r_old − R ÷ r_new > 3c; a move made for other jobs must
add that much to the cluster's throughput). A move then does not undo itself on a small change of estimates (a job
2×A100 → 1×V100 → 2×A100 within seconds, as calibration moved the estimates), while a large gain still moves it
at once. After the window the restart is charged once: a move must save more than it costs.

**Every move explained**: each start, rescale, migration and preemption carries its reason with figures (the
estimated throughput before and after, the restart it pays and when that pays back, the time left, the job a
preemption makes room for, the LP's shadow price of the GPU types), through ``SchedulingContext.explain`` into the
core's ``Change.reason``.

**The LP at scale** (``lp_columns``): on a cluster of ``LP_COLUMNS_MIN_GPUS`` = 4,096 GPUs or more the LP is solved by
column generation seeded by the last round's prices (:func:`tessera.scheduler.cell_lp.maximize`), below that whole
by HiGHS (``True`` / ``False`` force one). Both find an optimum of the same LP, but where that is not unique not
always the same one, so decisions may differ at ties. On the Philly window as ten copies on 12,800 GPUs (the first
100 simulated hours, ``bench/sched_profile.py --copies 10 --hours 100``) the whole solve's HiGHS took 36.9 ms of
48.3 CPU-ms a round, decision p99 197 ms; by columns the p99 was 62 ms with the average JCT within 0.02 % and the
same jobs finished and restarts. The whole LP at 1,280 GPUs keeps the decisions every committed figure there
was measured with.

**Ablations** (§8.6): ``tessera-na`` has no adaptivity scaling (GPU count fixed at N), ``tessera-nh`` no
heterogeneity scaling (the requested GPU type only). Placement: HAS best-fit, a job that fits one node kept in one
node (Frenzy §IV-B).
"""

from __future__ import annotations

import numpy as np

from tessera.scheduler.policies.tessera.admit import admit
from tessera.scheduler.policies.tessera.cells import CellCatalog, JobCells
from tessera.scheduler.policies.tessera.grow import grow_new
from tessera.scheduler.policies.tessera.lp import plan
from tessera.scheduler.policies.tessera.order import PRIORITY_WEIGHT, SRPT_HORIZON_S, drop_hopeless, queue
from tessera.scheduler.policies.tessera.rescale import rescale_running
from tessera.scheduler.policies.tessera.round import RoundState
from tessera.scheduler.policies.tessera.sprint import sprint
from tessera.scheduler.policy import Policy, SchedulingContext, register
from tessera.scheduler.state import Job

# Clusters this large solve the round's LP by column generation (see the module doc): HiGHS on the whole LP grows
# with the options a round has and, at 12,800 GPUs, dominated the decision time.
LP_COLUMNS_MIN_GPUS = 4096

# Running jobs the LP may move per arrival or departure. Crius's depth of 2-3 left the LP's better Cells unused under
# saturation: with 10 (and the SRPT horizon at 32 h, order.py) tessera's average JCT on the Philly window is 0.82 /
# 0.78 / 0.72x the best baseline's at 2x / 4x / 8x density (0.86 / 0.87 / 0.94 with 3 and 16 h), rounds only
# (bench/results/sim_philly_rounds_only.json); hysteresis and the restart budget keep a job from moving on a small gain.
DEPTH = 10

# A job admitted that its fastest Cell on idle GPUs finishes within this many seconds takes that Cell (sprint.py).
SPRINT_S = 1800.0

# Jobs grow into idle GPUs up to this many times N (grow.py, sprint.py, backfill), while the LP chooses up to max_scale x N.
# Against 4 (bench/results/sim_philly_tessera_sia.json at 58cb49f vs acf50b4): tessera ÷ Sia average JCT 0.964 -> 0.874 at
# 0.25x density, 0.852 -> 0.818 at 1x, 0.673 -> 0.670 at 4x, but 0.625 -> 0.652 at 8x; p99 slowdown at 1x 2.532 -> 2.494
# (Sia 2.52); the large-long family 6,723 -> 6,628 s (Sia 6,668).
GROW_SCALE = 8


@register("tessera")
@register("tessera-na", count_scaling=False)
@register("tessera-nh", type_scaling=False)
@register("tessera-ddl", deadline_aware=True)
class Tessera(Policy):
    """Crius's Cell scheduling on an LP, with HAS placement (see the module doc for the rules, in order)."""

    every_round = False

    def __init__(
        self,
        depth: int = DEPTH,
        *,
        count_scaling: bool = True,
        type_scaling: bool = True,
        mixes: bool = True,
        opportunistic: bool = True,
        deadline_aware: bool = False,
        upgrades_per_round: int | None = None,
        opportunistic_attempts: int = 8,
        min_gain: float = 0.02,
        max_scale: int = 4,
        grow_scale: int = GROW_SCALE,
        max_gpus: int = 64,
        grow: bool = True,
        sprint_s: float = SPRINT_S,
        order: str = "srpt",
        preempt_factor: float = 32.0,
        preempt_attempts: int = 64,
        restart_budget: float = 0.1,
        aging: bool = True,
        normalize: str = "best",
        srpt_horizon_s: float = SRPT_HORIZON_S,
        srpt_floor_s: float = 30.0,
        settle_rounds: int = 2,
        settle_s: float = 600.0,
        settle_factor: float = 3.0,
        lp_columns: bool | None = None,
    ) -> None:
        if depth < 0:
            raise ValueError(f"depth must be >= 0, got {depth}")
        if order not in ("srpt", "arrival"):
            raise ValueError(f"order must be 'srpt' or 'arrival', got {order!r}")
        if normalize not in ("request", "best"):
            raise ValueError(f"normalize must be 'request' or 'best', got {normalize!r}")
        if srpt_horizon_s < 0 or srpt_floor_s <= 0:
            raise ValueError(
                f"srpt_horizon_s must be >= 0 and srpt_floor_s > 0 (the SRPT weight divides by it), got "
                f"{srpt_horizon_s}, {srpt_floor_s}"
            )
        if max_scale < 1 or grow_scale < 1:
            raise ValueError(f"max_scale and grow_scale must be >= 1, got {max_scale}, {grow_scale}")
        if sprint_s < 0:
            raise ValueError(f"sprint_s must be >= 0, got {sprint_s}")
        if settle_factor < 1 or settle_rounds < 0 or settle_s < 0:
            raise ValueError(
                f"settle_factor must be >= 1 and settle_rounds, settle_s >= 0, got {settle_factor}, "
                f"{settle_rounds}, {settle_s}"
            )
        self.depth = depth
        self.count_scaling = count_scaling
        self.type_scaling = type_scaling
        self.mixes = mixes and type_scaling
        self.opportunistic = opportunistic
        self.deadline_aware = deadline_aware
        self.upgrades_per_round = upgrades_per_round  # None: depth per arrival or departure of the round
        self.opportunistic_attempts = opportunistic_attempts
        self.min_gain = min_gain  # growth of a just-admitted job must add this share of its Cell's throughput
        self.max_scale, self.max_gpus = max_scale, max_gpus
        self.grow_scale = grow_scale  # Cells up to this x N for idle GPUs only (the LP's stop at max_scale)
        self.grow = grow
        self.sprint_s = sprint_s  # a job its fastest idle Cell finishes within this takes it (0: never)
        self.order = order
        self.preempt_factor = preempt_factor
        self.preempt_attempts = preempt_attempts
        self.restart_budget = restart_budget
        self.aging = aging
        self.normalize = normalize
        self.srpt_horizon_s, self.srpt_floor_s = srpt_horizon_s, srpt_floor_s
        self.settle_rounds, self.settle_s, self.settle_factor = settle_rounds, settle_s, settle_factor
        self.catalog = CellCatalog(self)
        # the LP by column generation (None: on clusters of LP_COLUMNS_MIN_GPUS or more), seeded by the last LP's
        # GPU prices: an optimum of the same LP, but where that is not unique possibly another one than the
        # whole-LP solve's, so decisions may change (cell_lp.maximize)
        self.lp_columns = lp_columns
        self.price_hint: np.ndarray | None = None

    def reset(self) -> None:
        self.catalog.clear()
        self.price_hint = None

    def solves_by_columns(self, total_gpus: int) -> bool:
        """Whether the round's LP is solved by column generation on a cluster of ``total_gpus``."""
        return total_gpus >= LP_COLUMNS_MIN_GPUS if self.lp_columns is None else self.lp_columns

    def info(self, ctx: SchedulingContext, job: Job) -> JobCells:
        """The job's Cells as this policy sees them."""
        return self.catalog.info(ctx, job)

    def schedule(self, ctx: SchedulingContext) -> None:
        self.catalog.forget(ctx.events.finished)
        r = RoundState(self, ctx)
        if self.deadline_aware:
            drop_hopeless(r)
        q = queue(r)
        p = plan(r, q)  # BestPerf: the throughput LP; sets the round's GPU prices
        if p is not None:
            rescale_running(r, p)
        admitted = admit(r, q, p)
        if self.grow and self.sprint_s > 0:
            sprint(r, admitted)
        if self.grow and ctx.at_round:
            grow_new(r, admitted)


__all__ = ["PRIORITY_WEIGHT", "Tessera"]
