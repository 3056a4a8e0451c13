"""Tessera-Crius — Crius's Cell-based scheduling as published (Crius §6.1, Algorithm 1), for comparison.

The ``tessera`` policy reworks Crius's scheduler (one throughput LP per round, shortest-remaining order,
preemption, restart budgets). This policy is the paper's algorithm as written, so the project can show what
its rework gains over it. Rules implemented:

* **Cells** (§6.1 "Initializing Cells"): per job, for every GPU type, the counts N/2, N, 2N (N the requested
  count raised to the fewest GPUs the model fits in — :meth:`Knowledge.base_count`), each with its best stage
  count among 1, 2, 4, … (the log N stage choices) — :meth:`Knowledge.cells` without mixes: a Crius Cell has
  one GPU type. ``cells_set`` holds the Cells of every active job (memoized per configuration and request).
* **Objective** (BestPerf, line 18): maximum cluster throughput — the sum of the jobs' estimated rates, each
  normalized by the job's fastest Cell at its base count N (iterations/s of different models do not add up).
* **SchedArrival** (lines 2–8): each new job, in arrival order, gets ``CellBasedSched(job)``; a job no choice
  places stays pending.
* **SchedDeparture** (lines 9–13): when jobs finish (or nodes come back, or a failure evicts jobs), every
  pending job is retried in arrival order, then ``CellBasedSched()`` gives the released GPUs to running jobs —
  once per departure, while it finds a gain.
* **CellBasedSched / ScaleResource** (lines 14–20): a scheduling choice is the new job's Cell plus at most
  ``depth`` (the search depth, default 3) running jobs moved to another of their Cells — fewer GPUs
  (adaptivity scaling) or another type (heterogeneity scaling) — whose Cells together stay within the cluster's
  GPUs of each type. The choices are searched depth-first over the ``branch`` moves that free the most of the
  GPU types the new Cell lacks per unit of throughput lost (the paper leaves the enumeration order open; it
  bounds only the depth). Without a new job (line 12) the choices are up to ``depth`` moves of running jobs
  into free GPUs, each a gain. BestPerf takes the choice of the largest total throughput; an arrival whose
  best choice would lower it (the moves cost more than the job adds) stays pending, as "pending" is itself a
  choice (throughput unchanged).
* **VirtualAlloc** (line 19): the choice is applied to the round's virtual state — moved jobs released and
  placed again (HAS best-fit), then the new job; when placement on nodes fails (counts per type fit, nodes do
  not), the next-best of ``max_choices`` choices is tried, and otherwise the state is restored.
* **FinalizeAlloc** (lines 8 and 13): the core binds the virtual allocation at the end of the round.
* **Opportunistic execution** (§6.1): jobs behind a pending job start on idle GPUs; once the GPUs held by jobs
  that arrived after it and started while it waited, with the free ones, satisfy its minimum Cell, those jobs
  are suspended (latest started first, only as many as needed — :meth:`SchedulingContext.preempt_until_fits`)
  and it starts.

Not implemented (not in Algorithm 1): restart costs in the objective, preemption beyond opportunistic
execution, a deadline mode.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache

from tessera.scheduler.knowledge import CellOption
from tessera.scheduler.policy import Policy, SchedulingContext, fmt_gpus, register
from tessera.scheduler.state import Allocation, GPUs, Job, JobState


@dataclass(frozen=True)
class CriusCell:
    """One Cell of a job: GPUs of one type, stage count, estimated rate, and that rate normalized."""

    gpus: GPUs
    n_stages: int | None
    rate_iters_per_s: float
    norm: float  # rate ÷ the job's fastest Cell at its base count N

    @property
    def n_gpus(self) -> int:
        return sum(n for _, n in self.gpus)


@dataclass(frozen=True)
class Move:
    """A running job scaled to another of its Cells; ``freed`` is GPUs given back per type (negative: taken)."""

    job_id: int
    old: GPUs
    new: CriusCell
    delta_norm: float  # change of the cluster's normalized throughput
    freed: tuple[tuple[str, int], ...]


class _MoveIndex:
    """The moves of the jobs holding GPUs: per job, and per GPU type they free sorted by throughput lost per
    GPU freed (least first); ``reach`` is the most GPUs of a type ``depth`` moves of distinct jobs can free."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.jobs: dict[int, tuple[GPUs, list[Move]]] = {}
        self.by_type: dict[str, list[tuple[float, int, int, Move]]] = {}
        self._most: dict[str, dict[int, int]] = {}
        self._reach: dict[str, int] = {}
        self._seq = 0
        # job → its by_type entries, and its moves that raise throughput
        self._entries: dict[int, list[tuple[str, tuple[float, int, int, Move]]]] = {}
        self._gaining: dict[int, list[Move]] = {}
        # every job's moves that raise throughput, most first (then by job, then in the job's order)
        self._by_gain: list[tuple[float, int, int, Move]] = []

    def sync(self, pol: TesseraCrius, ctx: SchedulingContext, jids: Iterable[int]) -> None:
        allocs = ctx.allocations
        for jid in jids:
            a = allocs.get(jid)
            have = self.jobs.get(jid)
            if have is not None and a is not None and have[0] == a.gpus:
                continue
            if have is not None:
                self._drop(jid, have[1])
            if a is not None:
                self._add(jid, a.gpus, pol.job_moves(ctx, jid, a))
        self._reach.clear()

    def _add(self, jid: int, gpus: GPUs, moves: list[Move]) -> None:
        self.jobs[jid] = (gpus, moves)
        gaining = self._gaining[jid] = [m for m in moves if m.delta_norm > 0]
        for i, m in enumerate(gaining):
            bisect.insort(self._by_gain, (-m.delta_norm, jid, i, m))
        mine = self._entries[jid] = []
        for m in moves:
            for t, k in m.freed:
                if k > 0:
                    self._seq += 1
                    e = (-m.delta_norm / k, jid, self._seq, m)
                    bisect.insort(self.by_type.setdefault(t, []), e)
                    mine.append((t, e))
                    mt = self._most.setdefault(t, {})
                    mt[jid] = max(mt.get(jid, 0), k)

    def _drop(self, jid: int, moves: list[Move]) -> None:
        """Forget a job's moves: each of its entries found by bisection (its (gain, job, seq) is unique) rather
        than by filtering lists that hold every running job's moves (at 12,800 GPUs most of a round's time)."""
        del self.jobs[jid]
        for i, m in enumerate(self._gaining.pop(jid)):
            k = bisect.bisect_left(self._by_gain, (-m.delta_norm, jid, i))
            del self._by_gain[k]  # (gain, job, i) is unique and the gain a number (gaining moves gain)
        for t, e in self._entries.pop(jid):
            lst = self.by_type[t]
            i = bisect.bisect_left(lst, e[:3])
            if i < len(lst) and lst[i] is e:
                del lst[i]
            else:  # not where its key says (a NaN gain): the slow way
                lst[:] = [x for x in lst if x is not e]
        for t in {t for m in moves for t, k in m.freed if k > 0}:
            self._most[t].pop(jid, None)

    def reach(self, t: str) -> int:
        r = self._reach.get(t)
        if r is None:
            r = self._reach[t] = sum(heapq.nlargest(self.depth, self._most.get(t, {}).values()))
        return r

    def best_freeing(self, t: str, n: int) -> list[Move]:
        return [e[3] for e in self.by_type.get(t, [])[:n]]

    def all(self) -> Iterator[Move]:
        for _, ms in self.jobs.values():
            yield from ms

    def by_gain(self) -> Iterator[Move]:
        """The moves that raise throughput (``delta_norm`` > 0), most first, then by job id (a job's own in the
        order of its Cells): sorted as they change, not every time a departure asks."""
        for e in self._by_gain:
            yield e[3]


@dataclass(frozen=True)
class Choice:
    """One scheduling choice (ScaleResource's output): moves of running jobs and the new job's Cell."""

    moves: tuple[Move, ...]
    cell: CriusCell | None
    gain_norm: float  # total change of the cluster's normalized throughput


def _holders_latest_first(ctx: SchedulingContext) -> list[tuple[float, int]]:
    """(arrival, id) of the jobs holding GPUs in the virtual state, latest first. Read from the round's running
    jobs (the core lists them in (arrival, id) order already: the sort then only merges in the jobs started this
    round) rather than by looking every holder up by id."""
    alloc = ctx.allocations
    out = [(js.job.arrival_s, js.job_id) for js in ctx.running if js.job_id in alloc]
    was_running = {js.job_id for js in ctx.running}
    out += [(ctx.jobs[j].job.arrival_s, j) for j in alloc if j not in was_running]
    out.sort(reverse=True)
    return out


@cache
def _freed(old: GPUs, new: GPUs) -> tuple[tuple[str, int], ...]:
    """GPUs given back per type when a job on ``old`` moves to ``new`` (negative: taken), sorted by type — asked
    for every move of every running job, of a few hundred distinct pairs."""
    return tuple(sorted(_sub(dict(old), new, -1).items()))


def _sub(a: dict[str, int], gpus: Iterable[tuple[str, int]], sign: int = 1) -> dict[str, int]:
    out = dict(a)
    for t, n in gpus:
        out[t] = out.get(t, 0) + sign * n
    return out


@register("tessera-crius")
class TesseraCrius(Policy):
    """Crius Algorithm 1 as published (see the module doc)."""

    every_round = False

    def __init__(self, depth: int = 3, *, branch: int = 8, max_choices: int = 3, opportunistic: bool = True):
        if depth < 0:
            raise ValueError(f"depth must be >= 0, got {depth}")
        if branch < 1:
            raise ValueError(f"branch must be >= 1, got {branch}")
        if max_choices < 1:
            raise ValueError(f"max_choices must be >= 1, got {max_choices}")
        self.depth, self.branch, self.max_choices = depth, branch, max_choices
        self.opportunistic = opportunistic
        self._cells: dict[tuple, tuple[list[CriusCell], float]] = {}
        self._failed: set[tuple] = set()  # (job key, state version) that found no choice this round
        self._version = 0  # bumped whenever the virtual state changes (the caches below key on it)
        self._index = _MoveIndex(depth)
        self._dirty: set[int] | None = None  # jobs whose GPUs changed since the index was synced (None: all)
        self._by_arrival: tuple[int, list[tuple[float, int]]] | None = None  # (version, holders latest first)

    def reset(self) -> None:
        self._cells.clear()
        self._index = _MoveIndex(self.depth)
        self._dirty = None

    # ------------------------------------------------------------------ cells_set
    def cells(self, ctx: SchedulingContext, job: Job) -> tuple[list[CriusCell], float]:
        """The job's Cells (N/2, N, 2N per type, best stage count each), fastest first, and the rate its
        throughput is normalized by."""
        key = (job.config, job.requested_gpus)
        got = self._cells.get(key)
        if got is None:
            kn = ctx.knowledge
            opts: list[CellOption] = kn.cells(job, mixes=False)
            base = [o for o in opts if o.n_gpus == kn.base_count(job, o.gpus[0][0])]
            ref = max((o.rate_iters_per_s for o in base or opts), default=1.0) or 1.0
            cells = [
                CriusCell(o.gpus, o.n_stages, o.rate_iters_per_s, o.rate_iters_per_s / ref) for o in opts
            ]
            got = self._cells[key] = (cells, ref)
        return got

    def held_norm(self, ctx: SchedulingContext, js: JobState, a: Allocation) -> float:
        cells, ref = self.cells(ctx, js.job)
        for c in cells:
            if c.gpus == a.gpus:
                return c.norm
        return ctx.knowledge.cell_rate(js.job, a.gpus) / ref

    # ------------------------------------------------------------------ the round
    def schedule(self, ctx: SchedulingContext) -> None:
        ev = ctx.events
        self._failed.clear()
        self._version += 1
        self._dirty = None  # the round starts from the bound state: resync every job
        arrived = set(ev.arrived) | set(ev.evicted)
        departed = bool(ev.finished or ev.nodes_repaired or ev.evicted)
        # SchedArrival for new jobs; SchedDeparture retries every pending job — both in arrival order
        for js in list(ctx.pending):
            if ctx.allocation(js.job_id) is not None or js.job_id in ctx.dropped:
                continue
            if not (departed or js.job_id in arrived):
                continue
            if not self.cell_based_sched(ctx, js) and self.opportunistic:
                self.opportunistic_start(ctx, js)
        if departed:  # line 12: give released GPUs to running jobs
            for _ in range(max(1, len(ev.finished))):
                if not self.cell_based_sched(ctx, None):
                    break

    def cell_based_sched(self, ctx: SchedulingContext, js: JobState | None) -> bool:
        """Algorithm 1 lines 14–20: explore choices, take the best, apply it virtually."""
        fkey = None
        if js is not None:
            fkey = (js.job.config, js.job.requested_gpus, js.job.priority, self._version)
            if fkey in self._failed:  # an identical job found nothing in this very state
                return False
        for ch in self.scale_resource(ctx, js):
            if self.virtual_alloc(ctx, ch, js):
                self._version += 1
                return True
        if fkey is not None:
            self._failed.add(fkey)
        return False

    # ------------------------------------------------------------------ ScaleResource + BestPerf
    def moves(self, ctx: SchedulingContext) -> _MoveIndex:
        """Every move of a job holding GPUs (virtually) to another of its Cells, indexed by the GPU type it
        frees; kept in step with the virtual state job by job (the jobs a choice changed)."""
        idx = self._index
        if self._dirty is None:
            idx.sync(self, ctx, set(idx.jobs) | set(ctx.allocations))
        elif self._dirty:
            idx.sync(self, ctx, self._dirty)
        self._dirty = set()
        return idx

    def _touch(self, jids: Iterable[int]) -> None:
        if self._dirty is not None:
            self._dirty.update(jids)

    def job_moves(self, ctx: SchedulingContext, jid: int, a: Allocation) -> list[Move]:
        js = ctx.jobs[jid]
        cur = self.held_norm(ctx, js, a)
        out = []
        for c in self.cells(ctx, js.job)[0]:
            if c.gpus != a.gpus:
                out.append(Move(jid, a.gpus, c, c.norm - cur, _freed(a.gpus, c.gpus)))
        return out

    def scale_resource(self, ctx: SchedulingContext, js: JobState | None) -> list[Choice]:
        """The best ``max_choices`` choices that raise cluster throughput, best first (fewer moves on ties)."""
        free = ctx.free_by_type()
        found: list[Choice] = []
        if js is None:
            mv = self.moves(ctx)
            # the ``branch`` best moves the free GPUs allow
            cands = list(
                itertools.islice(
                    (m for m in mv.by_gain() if all(free.get(t, 0) + k >= 0 for t, k in m.freed)), self.branch
                )
            )
            self._dfs(cands, 0, (), free, 0.0, None, found)
        else:
            for c in self.cells(ctx, js.job)[0]:
                lack = {t: n - free.get(t, 0) for t, n in c.gpus if n > free.get(t, 0)}
                if not lack:
                    found.append(Choice((), c, c.norm))
                    continue
                if self.depth == 0:
                    continue
                mv = self.moves(ctx)
                if any(mv.reach(t) < k for t, k in lack.items()):
                    continue  # even the depth largest moves cannot free enough
                # the moves that free a lacking type, least throughput lost per GPU freed first
                cands: list[Move] = []
                for t in lack:
                    cands += [m for m in mv.best_freeing(t, self.branch) if m not in cands]
                self._dfs(cands, 0, (), free, c.norm, c, found)
        found = [ch for ch in found if ch.gain_norm > 1e-12]
        found.sort(key=lambda ch: (-ch.gain_norm, len(ch.moves)))
        return found[: self.max_choices]

    def _dfs(
        self,
        cands: list[Move],
        start: int,
        chosen: tuple[Move, ...],
        free: dict[str, int],
        value: float,
        cell: CriusCell | None,
        out: list[Choice],
    ) -> None:
        """Depth-first over sets of at most ``depth`` moves (one per job) whose GPUs, with the new Cell's,
        stay within the free GPUs of every type; each complete set is a choice."""
        if cell is not None:
            if all(free.get(t, 0) >= n for t, n in cell.gpus):
                out.append(Choice(chosen, cell, value))
                return  # more moves only free more than the Cell needs
        elif chosen:
            out.append(Choice(chosen, None, value))
        if len(chosen) >= self.depth:
            return
        busy = {m.job_id for m in chosen}
        for i in range(start, len(cands)):
            m = cands[i]
            if m.job_id in busy:
                continue
            # ``free`` holds no negative count: only the types the move changes can turn negative
            if any(free.get(t, 0) + k < 0 for t, k in m.freed):
                continue
            self._dfs(cands, i + 1, (*chosen, m), _sub(free, m.freed), value + m.delta_norm, cell, out)

    # ------------------------------------------------------------------ VirtualAlloc
    def virtual_alloc(self, ctx: SchedulingContext, ch: Choice, js: JobState | None) -> bool:
        """Apply a choice to the virtual state (moved jobs first, then the new job); all or nothing."""
        saved = [(m.job_id, ctx.allocation(m.job_id)) for m in ch.moves]
        for m in ch.moves:
            ctx.release(m.job_id)
        ok = all(ctx.reserve(m.job_id, m.new.gpus, m.new.n_stages) is not None for m in ch.moves)
        if ok and js is not None and ch.cell is not None:
            ok = ctx.reserve(js.job_id, ch.cell.gpus, ch.cell.n_stages) is not None
        if not ok:
            for m in ch.moves:
                ctx.release(m.job_id)
            if js is not None:
                ctx.release(js.job_id)
            for jid, a in saved:
                if a is not None:
                    ctx.reserve(jid, a.gpus, a.n_stages, placement=a.placement)
            return False
        self._touch([m.job_id for m in ch.moves] + ([js.job_id] if js is not None else []))
        gain = f"cluster throughput {ch.gain_norm:+.2f} (normalized jobs)"
        who = f"job {js.job_id}" if js is not None else "released GPUs"
        for m in ch.moves:
            verb = "scaled down" if m.new.n_gpus < sum(n for _, n in m.old) else "rescaled"
            if js is None:
                verb = "scaled up" if m.new.n_gpus > sum(n for _, n in m.old) else "moved"
            ctx.explain(
                m.job_id,
                f"{verb} {fmt_gpus(m.old)} → {fmt_gpus(m.new.gpus)} ({m.delta_norm:+.2f}) for {who}: "
                f"Crius choice of {len(ch.moves)} move(s), depth {self.depth}, {gain}",
            )
        if js is not None and ch.cell is not None:
            ctx.explain(
                js.job_id,
                f"starts on {fmt_gpus(ch.cell.gpus)} ({ch.cell.rate_iters_per_s:.3g} it/s estimated) with "
                f"{len(ch.moves)} running job(s) rescaled: {gain}",
            )
        return True

    # ------------------------------------------------------------------ opportunistic execution
    def opportunistic_start(self, ctx: SchedulingContext, js: JobState) -> bool:
        """Suspend the jobs launched while ``js`` waited (arrived after it, started since it last queued),
        latest first, once that satisfies its minimum Cell; start it there."""
        since = js.last_change_s
        if self._by_arrival is None or self._by_arrival[0] != self._version:
            self._by_arrival = (self._version, _holders_latest_first(ctx))
        victims = []
        for arrival, jid in self._by_arrival[1]:
            if arrival <= js.job.arrival_s:
                break
            v = ctx.jobs[jid]
            if v.job.priority > js.job.priority:
                continue
            started = v.first_start_s if v.first_start_s is not None else ctx.now_s
            if v.first_start_s is not None and started < since:
                continue
            victims.append((started, v.job.arrival_s, jid))
        if not victims:
            return False
        victims.sort(reverse=True)
        order = [jid for *_, jid in victims]
        cells = self.cells(ctx, js.job)[0]
        if not cells:
            return False
        least = min(c.n_gpus for c in cells)
        for c in (c for c in cells if c.n_gpus == least):
            got = ctx.preempt_until_fits(
                js.job_id,
                c.gpus,
                c.n_stages,
                order,
                why="opportunistic execution (Crius §6.1): launched on idle GPUs while it waited",
            )
            if got is not None:
                self._touch([*got, js.job_id])
                ctx.explain(
                    js.job_id,
                    f"starts on its minimum Cell {fmt_gpus(c.gpus)} after suspending {len(got)} job(s) "
                    "launched opportunistically while it waited (Crius §6.1)",
                )
                self._version += 1
                return True
        return False
