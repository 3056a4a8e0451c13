"""The tessera policy's per-round state (like the Kubernetes scheduling framework's CycleState).

Everything one round computes and its rules share — the GPU prices the LP found, the jobs already changed, the
memoized remaining times and restart costs, the preemptible jobs — lives in one :class:`RoundState` built at the
start of :meth:`~tessera.scheduler.policies.tessera.Tessera.schedule` and dropped at its end, so nothing of one
round leaks into the next and every rule is a function of (round state, its inputs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tessera.scheduler.policies.tessera.cells import Cell, JobCells
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
    # the preemptible jobs (user priority, remaining GPU-seconds, id), found once a round
    victims: list[tuple[int, float, int]] | None = None
    victims_by_type: dict[str, Victims] | None = None  # the same per GPU type, in the order they make way

    # ------------------------------------------------------------------ Cells
    def info(self, job: Job) -> JobCells:
        return self.pol.catalog.info(self.ctx, job)

    def held_cell(self, js: JobState, a: Allocation) -> Cell:
        return self.pol.catalog.held_cell(self.ctx, js, a)

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

    def penalty(self, js: JobState, new: Cell) -> float:
        """A move's restart in throughput terms: over the job's remaining time on the new Cell (T), a restart of c
        seconds (× :meth:`restart_weight`) leaves an average of new × T / (c + T); the penalty is the
        difference. A move is then worth it when the time it saves exceeds c: R/r_old − R/r_new > c."""
        T = js.remaining_at(self.ctx.now_s) / new.rate
        c = self.restart_s(js) * self.restart_weight(js)
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
    def price_note(self, gpus: GPUs) -> str:
        """``LP shadow price A100-40GB 0.41`` for the types of ``gpus`` the LP priced (empty when none)."""
        types = dict.fromkeys(t for t, _ in gpus)
        ps = [f"{t} {self.prices[t]:.2g}" for t in types if self.prices.get(t, 0.0) > 1e-9]
        return ("LP shadow price " + ", ".join(ps)) if ps else ""

    def explain_start(self, jid: int, c: Cell, why: str) -> None:
        """Record why a job gets Cell ``c`` (worded start / resume / move by what it held)."""
        js = self.ctx.jobs[jid]
        verb = self.ctx.verb(jid)
        verb = f"move {fmt_gpus(js.allocation.gpus)} →" if js.allocation is not None else f"{verb}:"
        note = self.price_note(c.gpus)
        before = self.ctx.reason(jid)  # suspended earlier this round and placed again: say both
        self.ctx.explain(
            jid,
            f"{verb} {fmt_gpus(c.gpus)}, est. {c.rate:.3g} it/s — {why}"
            + (f"; {note}" if note else "")
            + (f"; it was first {before}" if before.startswith("preempted") else ""),
        )

    def explain_move(self, js: JobState, old: Cell, new: Cell, gain: float, w: float) -> None:
        """Record a rescale's or migration's figures: the estimated throughput before and after, the restart it
        pays and when that pays back, the time left, the LP's value gain and GPU prices."""
        now = self.ctx.now_s
        verb = "migrate" if old.gpus == new.gpus else "rescale"  # the core's kinds (ChangeKind)
        r0, r1 = old.rate, new.rate
        c = self.restart_s(js)
        left = js.remaining_at(now) / r0 if r0 > 0 else float("inf")
        pct = 100.0 * (r1 / r0 - 1.0) if r0 > 0 else float("inf")
        parts = [
            f"{verb} {fmt_gpus(old.gpus)} → {fmt_gpus(new.gpus)}: est. {r0:.3g} → {r1:.3g} it/s ({pct:+.0f} %)"
        ]
        if r1 > r0:
            payback = r0 * c / (r1 - r0)
            parts.append(f"restart {fmt_s(c)} pays back in {fmt_s(payback)} of {fmt_s(left)} left")
        else:
            parts.append(f"restart {fmt_s(c)}, {fmt_s(left)} left; frees its GPUs for jobs that gain more")
        if self.settling(js) and self.pol.settle_factor > 1:
            ago = fmt_s(now - js.last_change_s)
            parts.append(
                f"its GPUs changed {ago} ago, so it had to save ≥ {self.pol.settle_factor:g}× the restart"
            )
        parts.append(f"LP gain {gain / max(w, 1e-12):+.2f} net of the restart")
        note = self.price_note(old.gpus + new.gpus)
        if note:
            parts.append(note)
        self.ctx.explain(js.job_id, ", ".join(parts[:2]) + "; " + "; ".join(parts[2:]))


__all__ = ["RoundState"]
