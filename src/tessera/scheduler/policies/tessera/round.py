"""The tessera policy's per-round state (like the Kubernetes scheduling framework's CycleState).

Everything one round computes and its rules share — the GPU prices the LP found, the jobs already changed, the
memoized remaining times and restart costs, the preemptible jobs — lives in one :class:`RoundState` built at the
start of :meth:`~tessera.scheduler.policies.tessera.Tessera.schedule` and dropped at its end, so nothing of one
round leaks into the next and every rule is a function of (round state, its inputs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tessera.scheduler.policies.tessera.cells import Cell, JobCells, shares_type
from tessera.scheduler.policy import SchedulingContext, fmt_gpus, fmt_s
from tessera.scheduler.state import Allocation, GPUs, Job, JobState

if TYPE_CHECKING:
    from tessera.scheduler.policies.tessera import Tessera


@dataclass(frozen=True)
class Victims:
    """The preemptible jobs holding one GPU type, in the order they make way (see ``admit._victims_by_type``)."""

    keys: list[tuple[int, float]]  # (user priority, −remaining GPU-seconds), ascending
    ids: list[int]
    held: list[int]  # GPUs of the type the first k held at the round's start: held[k] (len(ids) + 1 entries)


@dataclass
class RoundState:
    """One round of the tessera policy: its options (``pol``), the context, and what the rules share."""

    pol: Tessera
    ctx: SchedulingContext
    prices: dict[str, float] = field(default_factory=dict)  # GPU shadow prices (empty: all free of charge)
    touched: set[int] = field(default_factory=set)  # jobs whose allocation changed (changed at most once)
    prio_w: dict[int, float] = field(default_factory=dict)  # LP weight per user priority
    weights: dict[int, float] = field(default_factory=dict)  # job → its LP weight (memo of ``order.weight``)
    # job → (seconds, GPU-seconds) it still needs on its smallest Cell
    remaining: dict[int, tuple[float, float]] = field(default_factory=dict)
    restart: dict[int, float] = field(default_factory=dict)  # job → restart seconds
    relaunch: dict[int, float] = field(default_factory=dict)  # job → relaunch seconds (no worker kept)
    # the preemptible jobs (user priority, remaining GPU-seconds, id), found once a round
    victims: list[tuple[int, float, int]] | None = None
    victims_by_type: dict[str, Victims] | None = None  # the same per GPU type, in the order they make way

    # ------------------------------------------------------------------ Cells
    def info(self, job: Job) -> JobCells:
        return self.pol.catalog.info(self.ctx, job)

    def held_cell(self, js: JobState, a: Allocation) -> Cell:
        """The Cell of GPUs ``a``; when the job runs on them and measured faster there than estimated, at the
        measured speed (a job whose Cell estimate is 40 % slow is not shrunk or moved for a gain that exists only
        against the estimate). A measurement slower than the estimate does not lower it: live, a job's first steps
        carry first-call and loop costs the other Cells' estimates leave out, and compared with those it would
        move a job off its GPUs on its warm-up (the speed factors carry a steady slowdown into every Cell of the
        configuration instead). On the Philly table no estimate is above the truth, so in the simulator without
        noise this is the measured speed."""
        c = self.pol.catalog.held_cell(self.ctx, js, a)
        m = js.rate_iters_per_s
        if m > c.rate and js.allocation is not None and js.allocation.gpus == a.gpus:
            c = replace(c, norm=m / self.info(js.job).ref, rate=m, measured=True)
        return c

    def value(self, c: Cell, w: float = 1.0) -> float:
        """A Cell's worth to the cluster this round: its normalized throughput (× the job's LP weight ``w``) less
        its GPUs' shadow prices."""
        return w * c.norm - sum(self.prices.get(t, 0.0) * n for t, n in c.gpus)

    # ------------------------------------------------------------------ restarts and hysteresis
    def restart_s(self, js: JobState) -> float:
        """The job's restart cost (the backend's estimate, memoized for the round)."""
        out = self.restart.get(js.job_id)
        if out is None:
            out = self.restart[js.job_id] = self.ctx.restart_s(js.job)
        return out

    def relaunch_s(self, js: JobState) -> float:
        """The job's cost of a move that keeps none of its workers (the backend's estimate, memoized)."""
        out = self.relaunch.get(js.job_id)
        if out is None:
            out = self.relaunch[js.job_id] = self.ctx.relaunch_s(js.job)
        return out

    def move_s(self, js: JobState, new: GPUs, held: GPUs) -> float:
        """What moving from ``held`` to ``new`` costs the job: a relaunch when they share no GPU type (the new
        GPUs are on other nodes, so no worker is kept), else a restart that keeps workers."""
        return self.restart_s(js) if shares_type(new, held) else self.relaunch_s(js)

    def settling(self, js: JobState) -> bool:
        """Hysteresis: the job's allocation changed (start, resume, rescale, migration) less than
        max(``settle_rounds`` rounds, ``settle_s``) ago — it has just moved."""
        return self.ctx.now_s - js.last_change_s < self.settle_window_s

    @property
    def settle_window_s(self) -> float:
        """How long a job settles after its allocation changed: max(``settle_rounds`` rounds, ``settle_s``)."""
        return max(self.pol.settle_rounds * self.ctx.round_s, self.pol.settle_s)

    def restart_weight(self, js: JobState) -> float:
        """How many times its restart cost a move must save: ``settle_factor`` while the job settles, else 1."""
        return self.pol.settle_factor if self.settling(js) else 1.0

    def penalty(self, js: JobState, new: Cell, held: GPUs) -> float:
        """A move's restart in throughput terms: over the job's remaining time on the new Cell (T), a restart of c
        seconds (:meth:`move_s` from the GPUs ``held``, × :meth:`restart_weight`) leaves an average of
        new × T / (c + T); the penalty is the difference. A move is then worth it when the time it saves exceeds
        c: R/r_old − R/r_new > c."""
        T = js.remaining_at(self.ctx.now_s) / new.rate
        c = self.move_s(js, new.gpus, held) * self.restart_weight(js)
        return new.norm * c / (c + T) if c + T > 0 else 0.0

    def may_restart(self, js: JobState) -> bool:
        """The restart budget: a running job is rescaled or suspended for others only while the restarts it has
        had cost at most ``restart_budget`` of its time in the system — a lifetime count would leave a long job
        that was often rescaled unmovable for good."""
        age = self.ctx.now_s - js.job.arrival_s
        if not js.restarts:  # most jobs: no restart spent (and no restart cost to look up)
            return self.pol.restart_budget * age >= 0.0
        return js.restarts * self.restart_s(js) <= self.pol.restart_budget * age

    def movable(self, js: JobState) -> bool:
        """Whether a running job may be rescaled this round: not restarting and within its restart budget (the
        restart penalty in its values, with hysteresis, does the rest)."""
        if js.job_id in self.touched or js.paused_until_s > self.ctx.now_s:
            return False
        return self.may_restart(js)

    def rescale_limit(self) -> int:
        """Running jobs a round may rescale: ``depth`` per arrival or departure (Crius's search depth bounds the
        jobs one scheduling choice scales), or ``upgrades_per_round`` when set."""
        if self.pol.upgrades_per_round is not None:
            return self.pol.upgrades_per_round
        ev = self.ctx.events
        n = len(ev.arrived) + len(ev.finished) + len(ev.evicted) + len(ev.nodes_repaired)
        return self.pol.depth * max(1, n)

    # ------------------------------------------------------------------ reasons
    def explain_start(self, jid: int, c: Cell, why: str) -> None:
        """Record why a job gets Cell ``c`` (worded start / resume / move by what it held; the figures are
        taken now and worded when read)."""
        js = self.ctx.jobs[jid]
        held = js.allocation.gpus if js.allocation is not None else None
        verb = self.ctx.verb(jid)
        prices = self.prices  # replaced, never changed, once the LP has set them
        before = self.ctx.reasons.given(jid)  # suspended earlier this round and placed again: say both

        def words() -> str:
            head = f"move {fmt_gpus(held)} →" if held is not None else f"{verb}:"
            note = price_note(prices, c.gpus)
            first = before() if callable(before) else before
            return (
                f"{head} {fmt_gpus(c.gpus)}, est. {c.rate:.3g} it/s — {why}"
                + (f"; {note}" if note else "")
                + (f"; it was first {first}" if first.startswith("preempted") else "")
            )

        self.ctx.explain(jid, words)

    def explain_move(self, js: JobState, old: Cell, new: Cell, gain: float, w: float) -> None:
        """Record a rescale's or migration's figures: the estimated throughput before and after, the restart it
        pays and when that pays back, the time left, the LP's value gain and GPU prices (taken now, worded when
        read)."""
        now = self.ctx.now_s
        c = self.move_s(js, new.gpus, old.gpus)
        left = js.remaining_at(now) / old.rate if old.rate > 0 else float("inf")
        ago = now - js.last_change_s if self.settling(js) and self.pol.settle_factor > 1 else None
        factor, prices = self.pol.settle_factor, self.prices
        self.ctx.explain(
            js.job_id, lambda: move_words(old, new, c, left, ago, factor, gain / max(w, 1e-12), prices)
        )


def price_note(prices: Mapping[str, float], gpus: GPUs) -> str:
    """``LP shadow price A100-40GB 0.41`` for the types of ``gpus`` priced (empty when none)."""
    types = dict.fromkeys(t for t, _ in gpus)
    ps = [f"{t} {prices[t]:.2g}" for t in types if prices.get(t, 0.0) > 1e-9]
    return ("LP shadow price " + ", ".join(ps)) if ps else ""


def move_words(
    old: Cell, new: Cell, restart_s: float, left_s: float, settled_ago_s: float | None, settle_factor: float,
    gain: float, prices: Mapping[str, float],
) -> str:  # fmt: skip
    """A rescale's or migration's reason (:meth:`RoundState.explain_move`'s figures in words; the speed before
    is the one measured on the GPUs held where :meth:`RoundState.held_cell` took it)."""
    verb = "migrate" if old.gpus == new.gpus else "rescale"  # the core's kinds (ChangeKind)
    r0, r1 = old.rate, new.rate
    pct = 100.0 * (r1 / r0 - 1.0) if r0 > 0 else float("inf")
    speeds = (
        f"{r0:.3g} it/s measured → est. {r1:.3g} it/s" if old.measured else f"est. {r0:.3g} → {r1:.3g} it/s"
    )
    parts = [f"{verb} {fmt_gpus(old.gpus)} → {fmt_gpus(new.gpus)}: {speeds} ({pct:+.0f} %)"]
    if r1 > r0:
        payback = r0 * restart_s / (r1 - r0)
        parts.append(f"restart {fmt_s(restart_s)} pays back in {fmt_s(payback)} of {fmt_s(left_s)} left")
    else:
        parts.append(
            f"restart {fmt_s(restart_s)}, {fmt_s(left_s)} left; frees its GPUs for jobs that gain more"
        )
    if settled_ago_s is not None:
        parts.append(
            f"its GPUs changed {fmt_s(settled_ago_s)} ago, so it had to save ≥ {settle_factor:g}× the restart"
        )
    parts.append(f"LP gain {gain:+.2f} net of the restart")
    note = price_note(prices, old.gpus + new.gpus)
    if note:
        parts.append(note)
    return ", ".join(parts[:2]) + "; " + "; ".join(parts[2:])


__all__ = ["RoundState"]
