"""The Policy interface: how a scheduling policy plugs into the scheduler core.

A policy is one file in ``tessera/scheduler/policies/`` holding one class::

    from tessera.scheduler.policy import Policy, SchedulingContext, register

    @register("my-policy")                      # discovered by name; variants may stack more @register lines
    @register("my-policy-x", some_option=True)  # … each with its own constructor defaults
    class MyPolicy(Policy):
        \"\"\"Cite the paper rules it implements here.\"\"\"

        every_round = False   # True: called every round even when nothing arrived or finished (time-sharing)

        def __init__(self, some_option: bool = False):
            self.some_option = some_option

        def schedule(self, ctx: SchedulingContext) -> None:
            for js in ctx.pending:                                   # queued jobs, arrival order
                for opt in ctx.knowledge.cells(js.job):              # or dp_rate(...) for DP-only data
                    if ctx.reserve(js.job_id, opt.gpus, opt.n_stages):  # virtual allocation (HAS placement)
                        break

The core calls ``schedule`` at round boundaries (default every 300 s) when something happened since the last
round — arrivals, completions, node failures or repairs (``ctx.events``) — or every round when ``every_round``.
``ctx`` starts from the current allocations; the policy changes them *virtually* with :meth:`~SchedulingContext.
reserve`, :meth:`~SchedulingContext.release` and :meth:`~SchedulingContext.drop`, and the core then finalizes
(binds) the result: jobs whose GPUs changed restart (rescale / migration), jobs that lost their GPUs are
preempted back to the queue. ``schedule`` may instead return a :class:`Decision` built by hand; either way the
core validates it (capacity, nodes up, memory fit) and raises :class:`PolicyError` on a bad one.

What a policy may know (Crius §8.1): ``ctx.knowledge`` answers DP-only throughput (:meth:`~tessera.scheduler.
knowledge.Knowledge.dp_rate`) — the baselines' data — and Cell estimates (:meth:`~tessera.scheduler.knowledge.
Knowledge.cells`, ``cell_rate``) — Tessera's; ``fits`` is the memory module. The true speed of a job on its
allocation (the tuned plan's) is the backend's business; running jobs expose what was measured
(``JobState.rate_iters_per_s``), as a real system would observe it.

Phases (the Kubernetes scheduling framework): :class:`PhasedPolicy` runs candidates → filter → score → reserve
per job, each an overridable method; the core binds. ``fcfs`` is the reference policy written that way.

Testing a policy without the simulator: :func:`tessera.scheduler.testing.make_context` builds a context from
a few nodes, jobs and a hand-written throughput table; call ``policy.schedule(ctx)`` and inspect
``ctx.decision()``.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tessera.errors import UnknownNameError
from tessera.scheduler.knowledge import CellOption, Knowledge
from tessera.scheduler.placement import Placement, place
from tessera.scheduler.state import Allocation, ClusterState, GPUs, Job, JobState, gpus_of

DEFAULT_RESTART_S = 60.0

Candidate = CellOption  # what the candidates phase yields: GPUs, a stage count and the policy's rate estimate


class PolicyError(RuntimeError):
    """A policy returned an impossible decision (a bug in the policy, never bad user input)."""


# A reason as given: its text, or what formats it when first read. A simulated round at scale starts a thousand
# jobs and nobody reads their reasons, so the figures are captured when the policy decides and worded on demand.
Why = str | Callable[[], str]


class Reasons(Mapping[int, str]):
    """Reasons per job, each worded when first read (then kept)."""

    def __init__(self, given: Mapping[int, Why] | None = None) -> None:
        self._given: dict[int, Why] = dict(given or {})

    def given(self, job_id: int) -> Why:
        """The reason as the policy gave it, unworded ('' when none)."""
        return self._given.get(job_id, "")

    def set(self, job_id: int, why: Why) -> None:
        self._given[job_id] = why

    def copy(self) -> Reasons:
        return Reasons(self._given)

    def __getitem__(self, job_id: int) -> str:
        why = self._given[job_id]
        if callable(why):
            why = self._given[job_id] = why()
        return why

    def __iter__(self) -> Iterator[int]:
        return iter(self._given)

    def __len__(self) -> int:
        return len(self._given)


@dataclass(frozen=True)
class Decision:
    """The allocations every job should hold after this round (absent = pending), jobs dropped (given up by a
    deadline-aware policy), and why: ``reasons`` per job whose allocation changes, with figures (the core
    copies each into the job's :class:`~tessera.scheduler.core.Change`, and says something generic for a job
    the policy gave no reason for)."""

    allocations: Mapping[int, Allocation]
    dropped: frozenset[int] = frozenset()
    reasons: Mapping[int, Why] = field(default_factory=Reasons)  # read: worded (kept as :class:`Reasons`)

    def __post_init__(self) -> None:
        if not isinstance(self.reasons, Reasons):
            object.__setattr__(self, "reasons", Reasons(self.reasons))

    def why(self, job_id: int) -> Why:
        """The job's reason as the policy gave it, unworded ('' when none)."""
        reasons = self.reasons
        return reasons.given(job_id) if isinstance(reasons, Reasons) else reasons.get(job_id, "")


def fmt_gpus(gpus: GPUs | Mapping[str, int] | None) -> str:
    """GPUs as a user reads them: ``2×A100-40GB`` or ``1×A10+1×A100-40GB`` (``none`` for no GPUs)."""
    if not gpus:
        return "none"
    items = gpus.items() if isinstance(gpus, Mapping) else gpus
    return "+".join(f"{n}×{t}" for t, n in items)


def fmt_s(seconds: float) -> str:
    """A duration at the precision a reason needs: ``45 s``, ``12 min``, ``2.1 h``, ``3.0 d``."""
    if seconds != seconds or seconds == float("inf"):
        return "∞"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


@dataclass(frozen=True)
class RoundEvents:
    """What happened since the policy was last called."""

    arrived: tuple[int, ...] = ()
    finished: tuple[int, ...] = ()
    evicted: tuple[int, ...] = ()  # jobs that lost their GPUs to a node failure
    nodes_failed: tuple[int, ...] = ()
    nodes_repaired: tuple[int, ...] = ()
    resumed: tuple[int, ...] = ()  # jobs whose restart (rescale, migration) completed

    @property
    def any(self) -> bool:
        return bool(self.arrived or self.finished or self.evicted or self.nodes_failed or self.nodes_repaired)


class ActiveJobs(Mapping[int, JobState]):
    """Running and pending jobs by id, as one read-only mapping (no copy per round)."""

    def __init__(self, running: Mapping[int, JobState], pending: Mapping[int, JobState]) -> None:
        self._r, self._p = running, pending

    def __getitem__(self, jid: int) -> JobState:
        js = self._r.get(jid)
        return js if js is not None else self._p[jid]

    def __iter__(self) -> Iterator[int]:
        yield from self._r
        yield from self._p

    def __len__(self) -> int:
        return len(self._r) + len(self._p)


class SchedulingContext:
    """One round's view for a policy, and its virtual allocation.

    ``pending`` (arrival order) and ``running`` are the jobs as of the round start; ``jobs`` maps every active
    job id to its :class:`JobState` (read-only). ``cluster`` is a private copy of the cluster whose free GPUs
    follow the virtual allocation.
    """

    def __init__(
        self,
        *,
        now_s: float,
        cluster: ClusterState,
        knowledge: Knowledge,
        pending: Sequence[JobState],
        running: Sequence[JobState],
        events: RoundEvents = RoundEvents(),
        round_s: float = 300.0,
        keep_in_node: bool = True,
        restart_estimate: Callable[[Job], float] | None = None,
        relaunch_estimate: Callable[[Job], float] | None = None,
        jobs: Mapping[int, JobState] | None = None,
        at_round: bool = True,
    ) -> None:
        self.now_s, self.round_s = now_s, round_s
        self._restart_estimate = restart_estimate
        self._relaunch_estimate = relaunch_estimate
        self.knowledge = knowledge
        self.pending, self.running = list(pending), list(running)
        self.jobs: Mapping[int, JobState] = (
            jobs if jobs is not None else {js.job_id: js for js in (*self.running, *self.pending)}
        )
        self.events = events
        # False at a control tick between rounds (an event decided as soon as the tick comes), True at a round
        self.at_round = at_round
        self.keep_in_node = keep_in_node
        self.cluster = cluster.copy()
        # free GPUs per type in the virtual state: counted on first ask, then kept in step by _take/_give
        self._free: dict[str, int] | None = None
        self._alloc: dict[int, Allocation] = {}
        self._dropped: set[int] = set()
        self._reasons = Reasons()
        for js in self.running:
            if js.allocation is not None:
                self._alloc[js.job_id] = js.allocation

    # ------------------------------------------------------------------ reading
    def allocation(self, job_id: int) -> Allocation | None:
        """The job's allocation in the virtual state."""
        return self._alloc.get(job_id)

    @property
    def allocations(self) -> Mapping[int, Allocation]:
        return self._alloc

    @property
    def dropped(self) -> frozenset[int]:
        return frozenset(self._dropped)

    def verb(self, job_id: int) -> str:
        """How a reservation for the job will read in its log: ``start`` (never ran), ``resume`` (ran, now
        queued) or ``move`` (holds GPUs at the round's start)."""
        js = self.jobs[job_id]
        if js.allocation is not None:
            return "move"
        return "start" if js.first_start_s is None else "resume"

    def reason(self, job_id: int) -> str:
        """What the policy said about the job this round ('' when nothing)."""
        return self._reasons.get(job_id, "")

    @property
    def reasons(self) -> Reasons:
        """What the policy said this round, per job (read-only by convention: :meth:`explain` says it)."""
        return self._reasons

    def free_by_type(self) -> dict[str, int]:
        """Free GPUs per type (on nodes that are up) in the virtual state — a copy the caller may change. Counted
        over the nodes once a round and then kept in step with every reservation: policies ask for it per job,
        thousands of times a round at scale."""
        if self._free is None:
            self._free = self.cluster.free_by_type()
        return dict(self._free)

    def _take(self, placement: Placement) -> None:
        self.cluster.take(placement)
        self._count(placement, -1)

    def _give(self, placement: Placement) -> None:
        self.cluster.give(placement)
        self._count(placement, 1)

    def _count(self, placement: Placement, sign: int) -> None:
        if self._free is None:
            return
        nodes, up = self.cluster.nodes, self.cluster.up
        for i, n in placement:
            if up[i]:
                t = nodes[i].gpu_type
                self._free[t] += sign * n

    def capacity_by_type(self) -> dict[str, int]:
        return self.cluster.capacity_by_type()

    def place(self, gpus: GPUs | Mapping[str, int], *, keep_in_node: bool | None = None) -> Placement | None:
        """Where HAS best-fit would put these GPUs in the virtual state now (nothing is reserved)."""
        kin = self.keep_in_node if keep_in_node is None else keep_in_node
        return place(self.cluster, gpus if isinstance(gpus, tuple) else gpus_of(gpus), keep_in_node=kin)

    def restart_s(self, job: Job) -> float:
        """Seconds a rescale, migration or resume of this job costs (checkpoint save + load + start-up) — known
        from the model's size; 60 s when the backend gives no estimate."""
        return self._restart_estimate(job) if self._restart_estimate is not None else DEFAULT_RESTART_S

    def relaunch_s(self, job: Job) -> float:
        """Seconds a move costs when no worker of the job stays on the new allocation's nodes (the gang starts
        afresh there); :meth:`restart_s` where the backend tells no separate figure (the simulator's)."""
        return self._relaunch_estimate(job) if self._relaunch_estimate is not None else self.restart_s(job)

    def fits(self, job: Job, gpus: GPUs | Mapping[str, int]) -> bool:
        """Whether any plan of the job fits these GPUs' memory."""
        return self.knowledge.fits(job, gpus if isinstance(gpus, tuple) else gpus_of(gpus))

    # ------------------------------------------------------------------ virtual allocation
    def release(self, job_id: int) -> Allocation | None:
        """Take the job's GPUs back (it will be preempted unless reserved again). Returns what it held."""
        a = self._alloc.pop(job_id, None)
        if a is not None:
            self._give(a.placement)
        return a

    def release_all(self) -> None:
        for jid in list(self._alloc):
            self.release(jid)

    def reserve(
        self,
        job_id: int,
        gpus: GPUs | Mapping[str, int],
        n_stages: int | None = None,
        *,
        placement: Placement | None = None,
        keep_in_node: bool | None = None,
    ) -> Allocation | None:
        """Give the job these GPUs (filter: memory fit and free capacity; reserve: HAS best-fit placement, or
        ``placement`` as given). A job that already holds exactly these GPU counts keeps its GPUs (no restart).
        On failure nothing changes and None is returned."""
        gpus = gpus if isinstance(gpus, tuple) else gpus_of(gpus)
        js = self.jobs.get(job_id)
        if js is None:
            raise KeyError(f"job {job_id} is not active this round")
        if not gpus or not self.knowledge.fits(js.job, gpus):
            return None
        old = self._alloc.get(job_id)
        if old is not None and placement is None and old.gpus == gpus:
            if n_stages is not None and n_stages != old.n_stages:
                old = Allocation(old.placement, old.gpus, n_stages)
                self._alloc[job_id] = old
            return old
        if old is not None:
            self.release(job_id)
        if placement is None:
            kin = self.keep_in_node if keep_in_node is None else keep_in_node
            placement = place(self.cluster, gpus, keep_in_node=kin)
        elif not self.cluster.can_take(placement) or self.cluster.gpus_of_placement(placement) != gpus:
            placement = None
        if placement is None:
            if old is not None:
                self._take(old.placement)
                self._alloc[job_id] = old
            return None
        self._take(placement)
        a = Allocation(tuple(sorted(placement)), gpus, n_stages)
        self._alloc[job_id] = a
        return a

    def drop(self, job_id: int, reason: str = "") -> None:
        """Give up on a job (deadline-aware policies): it leaves the system unfinished."""
        self.release(job_id)
        self._dropped.add(job_id)
        if reason:
            self.explain(job_id, reason)

    def explain(self, job_id: int, reason: Why) -> None:
        """Say why the job's allocation changes this round, with figures (the last word wins): it becomes the
        reason of the job's :class:`~tessera.scheduler.core.Change`. Ignored for a job that ends up unchanged.
        A function is called when the reason is first read (it must capture the figures now)."""
        self._reasons.set(job_id, reason)

    def preempt_until_fits(
        self,
        job_id: int,
        gpus: GPUs | Mapping[str, int],
        n_stages: int | None,
        victims: Iterable[int],
        *,
        why: str | Callable[[int], str] = "",
    ) -> list[int] | None:
        """Suspend ``victims`` (running jobs, in the order they should yield) one by one until ``gpus`` can be
        placed, then reserve them for ``job_id`` and give back — on their own GPUs, the last released first —
        the victims that turned out not to be needed. Returns the jobs suspended (each explained as "preempted
        to make room for job …", plus ``why`` — or ``why(victim)`` for figures of its own), or None with everything as it was when ``gpus`` still do not
        fit. The one preemption loop every preempting policy uses, so none leaves a job half-preempted."""
        gpus = gpus if isinstance(gpus, tuple) else gpus_of(gpus)
        released: list[tuple[int, Allocation]] = []
        for v in victims:
            if self.place(gpus) is not None:
                break
            a = self.release(v)
            if a is not None:
                released.append((v, a))
        if self.reserve(job_id, gpus, n_stages) is None:
            for v, a in reversed(released):
                self.reserve(v, a.gpus, a.n_stages, placement=a.placement)
            return None
        out: list[int] = []
        for v, a in reversed(released):  # give back what was suspended but not needed
            if self.reserve(v, a.gpus, a.n_stages, placement=a.placement) is None:
                out.append(v)
        js = self.jobs[job_id]
        for v in out:
            note = why(v) if callable(why) else why
            self.explain(
                v,
                f"preempted to make room for job {job_id} (priority {js.job.priority})"
                + (f": {note}" if note else ""),
            )
        return out[::-1]

    def decision(self) -> Decision:
        return Decision(dict(self._alloc), frozenset(self._dropped), self._reasons.copy())


class Policy(ABC):
    """Turns the cluster state and the queue into allocations (see the module doc for how to write one)."""

    name: ClassVar[str] = ""
    every_round: ClassVar[bool] = False

    def reset(self) -> None:  # noqa: B027 - optional hook
        """Forget per-run state (a new simulation is starting)."""

    def knowledge_changed(self) -> None:
        """The rates it may know changed (the service measured a job's speed): forget every copy of them. By
        default everything is forgotten; a policy that keeps accounting beside its copies (time received,
        ages) keeps that, as the simulator, whose rates never change mid-run, keeps it too."""
        self.reset()

    @abstractmethod
    def schedule(self, ctx: SchedulingContext) -> Decision | None:
        """Decide this round: change ``ctx`` virtually (and return None) or return a Decision."""


class PhasedPolicy(Policy):
    """A policy as phases, job by job in :meth:`order`: :meth:`candidates` → :meth:`filter` → :meth:`score`
    → reserve (HAS placement). Running jobs keep their GPUs unless :meth:`prepare` changes them."""

    def prepare(self, ctx: SchedulingContext) -> None:  # noqa: B027 - optional hook
        """Before placing queued jobs (e.g. release GPUs of jobs to preempt)."""

    def order(self, ctx: SchedulingContext) -> Iterable[JobState]:
        return ctx.pending

    @abstractmethod
    def candidates(self, ctx: SchedulingContext, js: JobState) -> Iterable[Candidate]: ...

    def filter(self, ctx: SchedulingContext, js: JobState, cand: Candidate) -> bool:
        return ctx.fits(js.job, cand.gpus) and all(ctx.cluster.free_of(t) >= n for t, n in cand.gpus)

    def score(self, ctx: SchedulingContext, js: JobState, cand: Candidate) -> float:
        """Higher is better; ties keep the candidates' order. Default: keep the order."""
        return 0.0

    def on_unplaced(self, ctx: SchedulingContext, js: JobState) -> bool:
        """A job found no place: True goes on with the next job (backfilling), False ends the round."""
        return True

    def reserve(self, ctx: SchedulingContext, js: JobState, cand: Candidate) -> Allocation | None:
        """Reserve phase: give the job the candidate's GPUs. Default: HAS best-fit type by type; a policy that
        places by something else (Frenzy's memory sizes) overrides it."""
        return ctx.reserve(js.job_id, cand.gpus, cand.n_stages)

    def schedule(self, ctx: SchedulingContext) -> Decision | None:
        self.prepare(ctx)
        for js in list(self.order(ctx)):
            if ctx.allocation(js.job_id) is not None:
                continue
            cands = [c for c in self.candidates(ctx, js) if self.filter(ctx, js, c)]
            placed = False
            if cands:
                scored = sorted(enumerate(cands), key=lambda ic: (-self.score(ctx, js, ic[1]), ic[0]))
                for _, c in scored:
                    if self.reserve(ctx, js, c) is not None:
                        placed = True
                        break
            if not placed and not self.on_unplaced(ctx, js):
                break
        return None


# -------------------------------------------------------------------------------------------- registry
@dataclass(frozen=True)
class _Entry:
    cls: type[Policy]
    defaults: dict[str, Any] = field(default_factory=dict)


_REGISTRY: dict[str, _Entry] = {}
_DISCOVERED = False
_BROKEN: dict[str, str] = {}  # policy modules that failed to import: module → error


def register(name: str, **defaults: Any) -> Callable[[type[Policy]], type[Policy]]:
    """Class decorator: make the policy available as ``name`` (with constructor ``defaults``)."""

    def deco(cls: type[Policy]) -> type[Policy]:
        if name in _REGISTRY and _REGISTRY[name].cls.__qualname__ != cls.__qualname__:
            raise ValueError(f"policy name {name!r} is already registered by {_REGISTRY[name].cls.__name__}")
        _REGISTRY[name] = _Entry(cls, dict(defaults))
        if not cls.name:
            cls.name = name
        return cls

    return deco


def _discover() -> None:
    """Import every module of ``tessera.scheduler.policies`` so their ``@register`` lines run."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    import tessera.scheduler.policies as pkg

    for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if not m.name.startswith("_"):
            try:
                importlib.import_module(f"{pkg.__name__}.{m.name}")
            except Exception as e:  # one broken policy file must not take the others down
                _BROKEN[m.name] = f"{type(e).__name__}: {e}"
    _DISCOVERED = True


def policy_names() -> list[str]:
    """Every registered policy name (discovering the policies package first)."""
    _discover()
    return sorted(_REGISTRY)


def get_policy(name: str, **options: Any) -> Policy:
    """A fresh policy instance by name; ``options`` override the registered defaults."""
    _discover()
    entry = _REGISTRY.get(name)
    if entry is None:
        err = UnknownNameError("policy", name, _REGISTRY)
        if _BROKEN:
            err.message += (
                " (policy modules that failed to import: "
                + "; ".join(f"{m}: {e}" for m, e in sorted(_BROKEN.items()))
                + ")"
            )
        raise err
    p = entry.cls(**{**entry.defaults, **options})
    p.name = name  # type: ignore[misc]  # the variant's name (class attribute holds the first registered)
    return p


__all__ = [
    "Candidate",
    "Decision",
    "PhasedPolicy",
    "Policy",
    "PolicyError",
    "RoundEvents",
    "SchedulingContext",
    "fmt_gpus",
    "fmt_s",
    "get_policy",
    "policy_names",
    "register",
]
