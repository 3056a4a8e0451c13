"""Replaying a live service run in the simulator, and comparing the two (``bench/fidelity.py``).

The replay feeds the simulator the live run's arrivals (same job specs, same policy, same round length, same
speed source) and nothing the live run measured: the speed source holds only what the service knew before
the run, and restarts cost what ``bench/service.py`` measured. This module records the replay's decisions
with their Cells and scores a replay against a live run:

* per-job JCT error ``(replay - live) / live`` and its mean absolute value;
* average-throughput error: samples processed ÷ makespan, replay vs live;
* decision match: decisions (start, resume, rescale, migrate, preempt — each with its Cell) are grouped into
  rounds; a round matches when every decision in it has a counterpart in the other run (the same job's k-th
  decision, of the same kind and Cell). The figure is the matching rounds of both runs over all their rounds,
  so neither extra nor missing decisions go unnoticed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tessera.scheduler.core import Change, ChangeKind
from tessera.scheduler.restart import RestartBelief
from tessera.scheduler.state import GPUs
from tessera.sim.simulator import Simulator

# the service's allocation history kinds → the core's change kinds ("recover"/"restart" are failure
# relaunches, not scheduling decisions: they are left out)
LIVE_KINDS = {"start": "start", "resume": "resume", "resize": "rescale", "rescale": "rescale",
              "migrate": "migrate", "preempt": "preempt"}  # fmt: skip


@dataclass(frozen=True)
class Decision:
    """One allocation change of one job: ``cell`` like ``"2xA100-40GB S1"`` (empty for a preemption)."""

    time_s: float
    job_id: int
    kind: str
    cell: str


def cell_label(gpus: GPUs, n_stages: int | None) -> str:
    """A Cell as the service labels it: ``"1xA100-40GB+1xV100-32GB S1"`` (types sorted)."""
    text = "+".join(f"{n}x{t}" for t, n in sorted(gpus))
    return f"{text} S{n_stages}" if n_stages is not None else text


def normalize_cell(cell: str | None) -> str:
    """The canonical form of a Cell label (its GPU parts sorted), so both runs' labels compare."""
    if not cell:
        return ""
    head, _, stages = cell.partition(" S")
    parts = "+".join(sorted(p.strip() for p in head.split("+") if p.strip()))
    return f"{parts} S{stages}" if stages else parts


def gpus_of_cell(cell: str) -> GPUs:
    """The GPUs of a Cell label: ``"1xA100-40GB+1xV100-32GB S1"`` → ``(("A100-40GB", 1), ("V100-32GB", 1))``;
    raises naming the label when a part is not ``NxTYPE``."""
    head = cell.partition(" S")[0]
    out: dict[str, int] = {}
    for part in head.split("+"):
        n, x, t = part.strip().partition("x")
        if not x or not n.isdigit() or not t:
            raise ValueError(f"cell label {cell!r}: part {part!r} is not NxTYPE")
        out[t] = out.get(t, 0) + int(n)
    return tuple(sorted(out.items()))


class ReplaySimulator(Simulator):
    """The simulator, recording every change with its Cell, with a fixed measured restart cost, and rounds
    timed as the live service times them.

    ``restart_s`` is the pause a rescale or migration costs (measured before the run); ``believed`` is what the
    policy is told a move costs — the service's own belief before the run (what it kept from earlier moves, or
    its configured guess) — and, as live, each move's pause is folded into it by the same rule
    (:meth:`RestartBelief.observed`), so the replay's core weighs moves as the live core did.

    The service's controller ticks every ``tick_s`` (asking the policy only when an arrival or completion
    happened) and forces a round at every multiple of ``service_round_s`` on the wall clock; the replay's
    forced rounds fall at ``service_round_phase_s`` (the first one after its time 0, a live tick on the wall clock)
    and every ``service_round_s`` after; the simulator's own rounds are fixed boundaries.
    With ``service_round_s`` set, the simulator's round length must be ``tick_s``: every tick is a round the
    core answers only on events, and every ``service_round_s`` one is forced, as live."""

    def __init__(  # type: ignore[no-untyped-def]
        self,
        *args,
        restart_s: float,
        believed: RestartBelief,
        service_round_s: float | None = None,
        service_round_phase_s: float = 0.0,
        warm_start_s: float | None = None,
        spare_s: float = 0.0,
        **kw,
    ) -> None:
        self._restart_cost_s = restart_s
        self._warm_start_s = warm_start_s
        self._spare_s = spare_s
        self._warm: dict[int, list[float]] = {}  # node → expiry times of its finished jobs' spare workers
        super().__init__(*args, **kw)
        self.belief = believed
        self.sched.restart_estimate = lambda job: self.belief.restart_s
        self.sched.relaunch_estimate = lambda job: self.belief.relaunch_s
        self.decisions: list[Decision] = []
        if service_round_s is not None:
            if self.cfg.tick_s is not None:
                raise ValueError(
                    "tick_s: a replay of the service ticks as the service did (round_s is its tick)"
                )
            if service_round_s < self.cfg.round_s:
                raise ValueError(
                    f"service_round_s ({service_round_s}) must be >= the simulator's round_s (the tick, "
                    f"{self.cfg.round_s})"
                )
            self.sched.round_s = service_round_s  # what policies are told a round lasts
            tick = self.sched.tick
            phase = service_round_phase_s % service_round_s
            next_forced = [phase]

            def service_tick(now_s: float, *, force: bool = False, boundary: bool = True):  # type: ignore[no-untyped-def]
                # every simulator round is a service tick (tick_s is refused above, so ``boundary`` is True);
                # which of them are the service's periodic rounds is the wall clock's, from the phase
                periodic = now_s >= next_forced[0] - 1e-9
                if periodic:  # the next multiple of the round after now, from the phase (as live: wall clock)
                    k = math.floor((now_s - phase) / service_round_s + 1e-9) + 1
                    next_forced[0] = phase + k * service_round_s
                return tick(now_s, force=force or periodic, boundary=periodic)

            self.sched.tick = service_tick  # type: ignore[method-assign]

    def seen_at(self, job) -> float:  # type: ignore[no-untyped-def, override]
        """The live controller sees a submission at its next tick, never in the instant it arrives: two jobs
        submitted 35 ms apart at a tick boundary are decided in one round live, so in the replay too."""
        return job.arrival_s + 1e-6

    def restart_s(self, job) -> float:  # type: ignore[no-untyped-def, override]
        return self._restart_cost_s

    def start_s(self, job, placement, now: float) -> float:  # type: ignore[no-untyped-def, override]
        """A launch onto GPUs whose finished job's workers are still kept as spares (the service keeps a
        completed gang's workers ``spare_s``) starts warm, in ``warm_start_s``; any GPU without one, cold."""
        return self._launch(job, placement, now)[0]

    def pause_s(self, ch: Change, job, now: float) -> float:  # type: ignore[no-untyped-def, override]
        """As the service pays them: a rescale or migration keeps the workers that stay on nodes of the new
        allocation (the measured ``restart_s``); one onto other nodes only keeps none, and starts the gang
        there as a launch does (cold, or warm on a finished job's spares); a resume after a preemption is a
        launch — the preempted gang's workers were released — and its fixed cost was charged at its first start.
        (Charging a resume the fast restart made every time-sharing swap of a Gavel replay 5 s too cheap.)"""
        assert ch.new is not None
        if ch.kind == "resume":
            return self._launch(job, ch.new.placement, now)[0]
        if ch.kind not in (ChangeKind.RESCALE, ChangeKind.MIGRATE):
            return super().pause_s(ch, job, now)
        kept = ch.old is not None and bool(
            {i for i, _ in ch.old.placement} & {i for i, _ in ch.new.placement}
        )
        pause, warm = (self.restart_s(job), False) if kept else self._launch(job, ch.new.placement, now)
        # as the live service learns from each move: a gang that adopted no worker (kept or spare) relaunched
        self.belief = self.belief.observed(pause, relaunch=not (kept or warm))
        return pause

    def _launch(self, job, placement, now: float) -> tuple[float, bool]:  # type: ignore[no-untyped-def]
        """A launch's pause, and whether it started warm (on finished jobs' spare workers)."""
        if self._warm_start_s is None:
            return super().start_s(job, placement, now), False
        live = {i: [t for t in self._warm.get(i, []) if t > now] for i, _ in placement}
        if any(len(live[i]) < n for i, n in placement):
            self._warm.update(live)
            return super().start_s(job, placement, now), False
        for i, n in placement:  # the spares are taken: the soonest to expire first
            self._warm[i] = sorted(live[i])[n:]
        return self._warm_start_s, True

    def _on_complete(self, jid: int, v: int, now: float) -> bool:
        js = self.sched.jobs[jid]
        placement = js.allocation.placement if js.allocation is not None else ()
        done = super()._on_complete(jid, v, now)
        if done and self._spare_s > 0:
            for i, n in placement:
                self._warm.setdefault(i, []).extend([now + self._spare_s] * n)
        return done

    def _stages(self, ch: Change) -> int:
        """The Cell's stage count; where the policy left it to the planner (baselines), the one the service
        launches: the best Cell estimate's on those GPUs (as ``service/scheduling.py`` resolves it)."""
        assert ch.new is not None
        if ch.new.n_stages:
            return ch.new.n_stages
        source = getattr(self.table, "source", None)
        job = self.sched.jobs[ch.job_id].job
        if source is not None and hasattr(source, "job") and job.config is not None:
            return source.job(job.config).best_stages(ch.new.gpus) or 1
        return 1

    def _apply(self, ch: Change, now: float) -> None:
        cell = cell_label(ch.new.gpus, self._stages(ch)) if ch.new is not None else ""
        self.decisions.append(Decision(now, ch.job_id, str(getattr(ch.kind, "value", ch.kind)), cell))
        super()._apply(ch, now)


def live_decisions(history: Iterable[Mapping], move_window_s: float = 1.0) -> list[Decision]:
    """Decisions from the service's allocation history (``GET /api/timeline``'s ``allocations``): each
    allocation's start is a decision of its kind; one that ended ``preempt``-ed adds a preemption unless the
    job's next allocation is a move (rescale or migration) starting within ``move_window_s`` (the service ends
    the old allocation of a move with that reason too: the move itself is the decision). A resume, however soon,
    follows a real preemption (a time-sharing round's), and so does a later move of the resumed job."""
    rows = sorted(history, key=lambda a: (float(a.get("started_at") or 0.0), int(a["job_id"])))
    starts: dict[int, list[tuple[float, bool]]] = {}  # job → (start, whether a move) of each allocation
    for a in rows:
        if a.get("started_at") is not None:
            moved = LIVE_KINDS.get(str(a.get("kind", "")).lower()) in ("rescale", "migrate")
            starts.setdefault(int(a["job_id"]), []).append((float(a["started_at"]), moved))
    out: list[Decision] = []
    for a in rows:
        jid = int(a["job_id"])
        kind = LIVE_KINDS.get(str(a.get("kind", "")).lower())
        if kind is not None and a.get("started_at") is not None:
            out.append(Decision(float(a["started_at"]), jid, kind, normalize_cell(a.get("cell"))))
        end = str(a.get("end_reason") or "").lower()
        if "preempt" in end and a.get("ended_at") is not None:
            t = float(a["ended_at"])
            nxt = next(((s, moved) for s, moved in starts.get(jid, ()) if s >= t - 1e-6), None)
            if nxt is None or not (nxt[1] and nxt[0] <= t + move_window_s):
                out.append(Decision(t, jid, "preempt", ""))
    return sorted(out, key=lambda d: (d.time_s, d.job_id))


def group_rounds(decisions: Sequence[Decision], window_s: float) -> list[list[Decision]]:
    """Decisions into rounds: one that follows the previous within ``window_s`` joins its round (the live
    service launches a round's decisions over a short span; the simulator's share one instant)."""
    rounds: list[list[Decision]] = []
    for d in sorted(decisions, key=lambda d: (d.time_s, d.job_id)):
        if rounds and d.time_s - rounds[-1][-1].time_s <= window_s:
            rounds[-1].append(d)
        else:
            rounds.append([d])
    return rounds


def _ordered(decisions: Sequence[Decision]) -> list[tuple[int, int, str, str]]:
    """(job, ordinal of the job's decision, kind, cell) of each decision, in time order."""
    seen: dict[int, int] = {}
    out = []
    for d in sorted(decisions, key=lambda d: (d.time_s, d.job_id)):
        k = seen.get(d.job_id, 0)
        seen[d.job_id] = k + 1
        out.append((d.job_id, k, d.kind, normalize_cell(d.cell)))
    return out


def decision_match(live: Sequence[Decision], replay: Sequence[Decision], window_s: float) -> float:
    """The fraction of rounds, of both runs together, whose every decision the other run made too (the same
    job's k-th decision, same kind and Cell). 1.0 when neither run decided anything."""
    live_keys, replay_keys = set(_ordered(live)), set(_ordered(replay))
    total = matched = 0
    for mine, other in ((live, replay_keys), (replay, live_keys)):
        ordered = sorted(mine, key=lambda d: (d.time_s, d.job_id))
        keys = _ordered(ordered)
        start = 0
        for rnd in group_rounds(ordered, window_s):
            total += 1
            if all(k in other for k in keys[start : start + len(rnd)]):
                matched += 1
            start += len(rnd)
    return matched / total if total else 1.0


def relative_error(replay: float, live: float) -> float:
    """``(replay - live) / live``; raises naming the figure when the live one is not positive."""
    if live <= 0:
        raise ValueError(f"live figure must be > 0 to compare against, got {live}")
    return (replay - live) / live


def throughput(samples: float, makespan_s: float) -> float:
    """Average throughput, samples/s over the makespan (first arrival to last completion)."""
    if makespan_s <= 0:
        raise ValueError(f"makespan_s must be > 0, got {makespan_s}")
    return samples / makespan_s


__all__ = [
    "Decision",
    "ReplaySimulator",
    "cell_label",
    "decision_match",
    "gpus_of_cell",
    "group_rounds",
    "live_decisions",
    "normalize_cell",
    "relative_error",
    "throughput",
]
