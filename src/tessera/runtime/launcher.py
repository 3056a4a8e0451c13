"""Local launcher: one process per device, live progress, telemetry, and failures that never hang.

A job ends in one of three ways, all within the configured timeouts:
* every rank reports ``exit`` → the result;
* a rank dies (non-zero exit, signal) or raises → all ranks are stopped and ``LaunchError`` names the rank that
  failed *first in cause*: a rank that died silently is the root cause even if its peers' collectives failed
  earlier in wall time because of it;
* a rank is silent for ``watchdog_s`` (hung) → the same, naming the rank that is furthest behind;
* the loss becomes NaN or infinite (``on_nonfinite_loss="fail"``, the default) → ``LaunchError`` "loss diverged
  (NaN) at step N", with no rank to blame and no checkpoint written at or after that step.
Workers also run under a process-group timeout, so a collective blocked on a dead peer fails by itself.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from tessera.plan import Plan
from tessera.runtime.loop import divergence
from tessera.runtime.options import RunOptions
from tessera.runtime.shards import assemble
from tessera.runtime.telemetry import JsonlWriter, RankStep, StepRecord, merge
from tessera.runtime.worker import LossDiverged, WorkerArgs, from_bytes, main

STARTUP_S = 180.0


class LaunchError(RuntimeError):
    """The job failed; ``rank`` and ``cause`` say where and why."""

    def __init__(self, message: str, rank: int | None, cause: str) -> None:
        super().__init__(message)
        self.rank = rank
        self.cause = cause


@dataclass(frozen=True)
class LaunchResult:
    plan: Plan
    records: tuple[StepRecord, ...]
    wall_s: float
    grads: dict[str, torch.Tensor] | None = None
    params: dict[str, torch.Tensor] | None = None
    checkpoint_step: int | None = None

    @property
    def losses(self) -> list[float]:
        return [r.loss for r in self.records]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pick_backend(options: RunOptions, world: int) -> str:
    if options.backend != "auto":
        return options.backend
    return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= 1 else "gloo"


def launch(plan: Plan, options: RunOptions | None = None) -> LaunchResult:
    """Run ``plan`` on one local process per device and return its per-step records."""
    return launch_many([(plan, options or RunOptions())])[0]


@dataclass
class _JobState:
    plan: Plan
    options: RunOptions
    writer: JsonlWriter
    pending: dict[int, list[RankStep]] = field(default_factory=dict)
    records: list[StepRecord] = field(default_factory=list)
    done: dict[int, dict[str, Any]] = field(default_factory=dict)
    t0: float | None = None
    t1: float | None = None


def _signal_name(code: int) -> str:
    with contextlib.suppress(ValueError):
        return signal.Signals(-code).name
    return f"signal {-code}"


def _unguarded_main_call() -> str | None:
    """Where the running script calls into the launcher at its top level outside ``if __name__ == "__main__":``
    (``file:line``), else None.

    Workers are started with ``spawn``, which re-imports the main script in every child: an unguarded call
    would launch again from each child, and Python's error about it surfaces only in a child's traceback.
    Checked before any process starts, so the user gets one error saying what to change."""
    import ast
    import sys

    main_mod = sys.modules.get("__main__")
    path = getattr(main_mod, "__file__", None)
    if not path or not path.endswith(".py"):  # -c, a REPL, a notebook: spawn does not re-run them
        return None
    frame = sys._getframe(1)
    while frame is not None and not (
        frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__"
    ):
        frame = frame.f_back
    if frame is None:  # not called from the script's top level (a thread, a server, a test runner)
        return None
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None
    line = frame.f_lineno

    def is_guard(node: ast.stmt) -> bool:
        t = node.test if isinstance(node, ast.If) else None
        if not (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq)):
            return False
        sides = [t.left, t.comparators[0]]
        names = [x for x in sides if isinstance(x, ast.Name) and x.id == "__name__"]
        consts = [x for x in sides if isinstance(x, ast.Constant) and x.value == "__main__"]
        return bool(names and consts)

    for node in tree.body:
        if is_guard(node) and node.lineno <= line <= (node.end_lineno or node.lineno):
            return None
    return f"{path}:{line}"


def worker_context() -> mp.context.BaseContext:
    """Workers fork from a forkserver that imported torch and the worker once (a fresh interpreter, no
    threads or CUDA state of this process), so each launch skips the seconds of importing torch per rank;
    spawn where there is no forkserver."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "tessera.runtime.worker"])
    return ctx


def launch_many(jobs: Sequence[tuple[Plan, RunOptions]]) -> list[LaunchResult]:
    """Run several jobs one after another in the same worker processes (one start-up for all; tests).

    All plans must have the same world size.
    """
    where = _unguarded_main_call()
    if where is not None:
        raise LaunchError(
            f'launch() called at the top level of a script without an `if __name__ == "__main__":` guard '
            f"({where}). Tessera starts one worker process per device with multiprocessing (forkserver or spawn), "
            "which re-runs the script in each worker, so the call would start workers again. Put the code that "
            'launches under `if __name__ == "__main__":`.',
            None,
            "no __main__ guard",
        )
    worlds = {p.world_size for p, _ in jobs}
    if len(worlds) != 1:
        raise ValueError(f"launch_many: plans of different world sizes {sorted(worlds)}")
    world = worlds.pop()
    backend = pick_backend(jobs[0][1], world)
    ctx = worker_context()
    q = ctx.Queue()
    port = free_port()
    states = [_JobState(p, o, JsonlWriter(o.telemetry_path)) for p, o in jobs]
    watchdog = max(o.watchdog_s for _, o in jobs)
    procs = []
    for rank in range(world):
        args = WorkerArgs(rank, world, port, backend, tuple(jobs), tuple(os.environ.items()))
        proc = ctx.Process(target=main, args=(args, q), name=f"tessera-rank{rank}", daemon=True)
        proc.start()
        procs.append(proc)
    progress = _Progress(world) if any(o.progress for _, o in jobs) else None
    last_seen = [time.monotonic()] * world
    last_step = [-1] * world
    ready = [False] * world  # before its first "ready", a rank gets STARTUP_S (imports, model build)
    exited: set[int] = set()
    errors: dict[int, tuple[str, str]] = {}
    failure: tuple[int | None, str] | None = None
    t_start = time.monotonic()
    try:
        while len(exited) < world:
            try:
                kind, job, rank, payload = q.get(timeout=0.2)
            except queue_mod.Empty:
                kind = None
            now = time.monotonic()
            if kind is not None:
                last_seen[rank] = now
                if kind == "ready":
                    ready[rank] = True
                    st = states[job]
                    st.t0 = st.t0 or time.monotonic()
                elif kind == "step":
                    st = states[job]
                    last_step[rank] = payload.step
                    parts = st.pending.setdefault(payload.step, [])
                    parts.append(payload)
                    if len(parts) == world:
                        rec = merge(st.pending.pop(payload.step), st.plan.global_batch)
                        st.records.append(rec)
                        st.writer.write(rec)
                        if progress and st.options.progress:
                            progress.update(st.plan, rec, st.options.steps)
                        diverged = divergence(rec.loss, rec.step)
                        if diverged and st.options.on_nonfinite_loss == "fail":
                            failure = (None, diverged)  # the job's own outcome, not a rank's fault
                            break
                elif kind == "done":
                    states[job].done[rank] = from_bytes(payload)
                    states[job].t1 = time.monotonic()
                elif kind == "exit":
                    exited.add(rank)
                elif kind == "error":
                    errors[rank] = payload
            if errors or any(p.exitcode not in (None, 0) for p in procs):
                failure = _diagnose(procs, errors, q, last_step)
                break
            silent = [
                r
                for r in range(world)
                if r not in exited
                and now - last_seen[r] > (watchdog if ready[r] else max(watchdog, STARTUP_S))
            ]
            if silent:
                behind = min(silent, key=lambda r: (last_step[r], r))
                where = (
                    f"after step {last_step[behind]}" if last_step[behind] >= 0 else "before its first step"
                )
                failure = (behind, f"hung: no progress for {watchdog:.0f} s {where}")
                break
    finally:
        for st in states:
            st.writer.close()
        if progress:
            progress.close()
        _stop(procs)
    if failure is not None:
        rank, cause = failure
        if cause.startswith("loss diverged"):  # the training's outcome: no rank is at fault
            raise LaunchError(f"job failed: {cause}", None, cause)
        others = "; ".join(f"rank {r}: {m}" for r, (m, _) in sorted(errors.items()) if r != rank)
        msg = f"job failed: rank {rank} {cause}" + (f" (then {others})" if others else "")
        raise LaunchError(msg, rank, cause)
    results = []
    for st in states:
        grads = [g for d in st.done.values() for g in d.get("grads", [])]
        params = [g for d in st.done.values() for g in d.get("params", [])]
        ck = [d.get("checkpoint_step") for d in st.done.values()]
        wall = (st.t1 or time.monotonic()) - (st.t0 or t_start)
        results.append(
            LaunchResult(
                st.plan,
                tuple(st.records),
                wall,
                assemble(grads) if grads else None,
                assemble(params) if params else None,
                ck[0] if ck else None,
            )
        )
    return results


def _diagnose(
    procs: list, errors: dict[int, tuple[str, str]], q: Any, last_step: list[int]
) -> tuple[int, str]:
    """Give the other ranks a moment to report, then blame the root cause (a silent death beats an error)."""
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        try:
            kind, _, rank, payload = q.get(timeout=0.1)
            if kind == "error":
                errors[rank] = payload
        except queue_mod.Empty:
            pass
    step_note = lambda r: f" at step {last_step[r] + 1}" if last_step[r] >= -1 else ""  # noqa: E731
    silent = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in errors]
    if silent:  # killed by a signal first (OOM killer, kill -9), then a bare non-zero exit
        rank = min(silent, key=lambda r: (procs[r].exitcode >= 0, r))
        code = procs[rank].exitcode
        how = f"killed by {_signal_name(code)}" if code < 0 else f"exited with code {code}"
        return rank, f"died ({how}){step_note(rank)}"
    diverged = [r for r, (m, _) in errors.items() if m.startswith(f"{LossDiverged.__name__}:")]
    if diverged:  # the loss went NaN/inf (fail mode): its peers' errors are consequences
        rank = min(diverged)
        return rank, errors[rank][0].split(": ", 1)[1]
    real = [r for r, (m, _) in errors.items() if not _is_timeout(m)]
    if real:
        rank = min(real)
        return rank, f"raised {errors[rank][0]}{step_note(rank)}"
    alive = [r for r, p in enumerate(procs) if p.exitcode is None and r not in errors]
    if alive:  # peers timed out waiting: the rank that neither failed nor progressed is the hung one
        rank = min(alive, key=lambda r: (last_step[r], r))
        return rank, f"hung{step_note(rank)}: its peers timed out waiting for it"
    rank = min(errors)
    return rank, f"raised {errors[rank][0]}{step_note(rank)}"


def _is_timeout(message: str) -> bool:
    m = message.lower()
    return "timed out" in m or "timeout" in m


def _stop(procs: list) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 5
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(timeout=2)


class _Progress:
    """Live Rich table: step, loss, samples/s and per-device peak memory."""

    def __init__(self, world: int) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console(stderr=True)
        self.live = Live(console=self.console, refresh_per_second=4, transient=False)
        self.live.start()

    def update(self, plan: Plan, rec: StepRecord, total: int) -> None:
        from rich.table import Table

        t = Table(title=f"tessera · {plan.model} · {plan.world_size} devices · {plan.n_stages} stage(s)")
        for col in ("step", "loss", "iter s", "samples/s", "peak memory per device (MiB)"):
            t.add_column(col)
        mem = " ".join(f"{r}:{v / 2**20:.0f}" for r, v in rec.peak_memory_bytes.items())
        t.add_row(
            f"{rec.step + 1}/{total}",
            f"{rec.loss:.4f}",
            f"{rec.iter_time_s:.3f}",
            f"{rec.samples_per_s:.1f}",
            mem,
        )
        self.live.update(t)

    def close(self) -> None:
        self.live.stop()
