"""Measure collectives on this machine and fill a :class:`~tessera.perf.comm.CommTable` (Crius §5.1: the
interconnect does not change after setup, so communication is profiled once, offline, and interpolated).

``N`` local processes (gloo over TCP loopback on CPU, NCCL on GPUs) time all-reduce, all-gather, reduce-scatter
and point-to-point send/recv over message sizes from 1 KiB up (powers of 4). Sizes follow the table's
convention: the full tensor for all-reduce, the gathered tensor for all-gather / reduce-scatter, the message for
send/recv. Each point is the median over repeats of the slowest rank (a collective ends when its last rank
does); send/recv is half a ping-pong between ranks 0 and 1 (a group of 2).

The table is stored under the link kind the estimator looks up for these devices: ``loopback`` for CPU processes
on one host, the GPU's intra-node link (``nvlink4``, ``pcie4``, …) on a GPU node. Processes run with the thread
count the runtime gives them (``cpus // N``), so gloo's copies compete for cores as they do in training.

In training a collective follows compute (a layer's forward or backward), not another collective: gloo's
I/O threads have gone to sleep and the ranks arrive a little apart. Timing collectives back to back measures
a hot path the runtime never sees (on 2 cores, 1 MiB all-reduces took 0.7 ms hot and 2.2 ms after compute).
So on gloo every timed operation comes after ``burst_s`` of matrix multiplies on each rank (default
:data:`GLOO_BURST_S`); on NCCL the kernels queue on a stream and no burst is needed.

The ranks of an uneven group (Whale's uneven TP shards, a group mixing GPU types) do not arrive together: the
slowest arrives last at every collective and the others wait for it. Its part is then shorter (on gloo the
waiting ranks have already posted their side of the exchange), so the all-reduce is also timed with
:attr:`~tessera.perf.comm.Arrival.LAST`: :data:`LATE_OPS` operations back to back, as in a training loop, each
after the last rank computed a random :data:`LATE_GAP_S` longer than the others; the point is the mean of the
late rank's own times. The gap is random because in training it varies op to op, and on a host with a coarse
timer tick what a wait costs depends on where in the tick it ends. The mean, not the median: these costs are
bimodal (the waiting rank still awake, or woken from sleep), and a run pays their sum.
"""

from __future__ import annotations

import os
import queue as queue_mod
import random
import socket
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from scipy.optimize import isotonic_regression

from tessera.nn import cpu_affinity
from tessera.perf.comm import Arrival, Collective, CommTable

KiB = 1024
MiB = 1024 * KiB
DEFAULT_MIN_BYTES = 1 * KiB
DEFAULT_MAX_BYTES = 64 * MiB
COLLECTIVES = (Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.SEND_RECV)
LARGE_BYTES = 4 * MiB  # above this, fewer repeats: each one takes long and varies little
GLOO_BURST_S = 0.005  # compute before each timed gloo collective, as a layer's work precedes it in training
LATE_GAP_S = (0.0005, 0.004)  # the late rank's extra compute: uniform over one 250 Hz timer tick
LATE_OPS = 160  # late-arrival ops per size: their cost is bimodal (the waiting rank awake or not), so a mean
LATE_COLLECTIVES = (Collective.ALL_REDUCE,)  # what uneven groups run (TP's activations and gradients)


@dataclass(frozen=True)
class CommPoint:
    collective: str
    n: int  # ranks in the group
    nbytes: int
    time_s: float  # median over repeats of the slowest rank; arrival "last": mean of the late rank's ops
    arrival: str = str(Arrival.TOGETHER)

    @property
    def bandwidth_Bps(self) -> float:
        return self.nbytes / self.time_s if self.time_s > 0 else 0.0


@dataclass(frozen=True)
class CommProfileRun:
    backend: str
    link_kind: str
    procs: int
    threads: int | None
    points: tuple[CommPoint, ...]

    def table(self) -> CommTable:
        t = CommTable()
        self.fill(t)
        return t

    def fill(self, table: CommTable) -> None:
        """Add every measured point to ``table`` under this run's link kind."""
        for p in self.points:
            table.add(p.collective, self.link_kind, p.n, p.nbytes, p.time_s, p.arrival)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["points"] = [{**asdict(p), "bandwidth_Bps": p.bandwidth_Bps} for p in self.points]
        return d


def message_sizes(max_bytes: int = DEFAULT_MAX_BYTES, min_bytes: int = DEFAULT_MIN_BYTES) -> list[int]:
    """Powers of 4 from ``min_bytes`` up to ``max_bytes`` (inclusive when it falls on one)."""
    if min_bytes < 4 or max_bytes < min_bytes:
        raise ValueError(f"max-bytes: need max >= min >= 4 bytes, got max {max_bytes}, min {min_bytes}")
    out, n = [], int(min_bytes)
    while n <= max_bytes:
        out.append(n)
        n *= 4
    return out


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def link_kind_for(backend: str) -> str:
    """Link kind of the measured processes: ``loopback`` for gloo on CPU, else the local GPU's link."""
    if backend != "nccl":
        return "loopback"
    import torch

    from tessera.hardware import get_gpu
    from tessera.perf.profiler import catalog_name

    props = torch.cuda.get_device_properties(0)
    name = catalog_name(props.name, int(props.total_memory))
    return get_gpu(name).link.kind if name else "pcie"


@dataclass(frozen=True)
class _Args:
    rank: int
    world: int
    port: int
    backend: str
    sizes: tuple[int, ...]
    collectives: tuple[str, ...]
    warmup: int
    repeats: int
    timeout_s: float
    threads: int
    burst_s: float = 0.0
    late: tuple[str, ...] = ()  # collectives also timed with the last rank arriving late


def _burst(torch: Any, seconds: float) -> None:
    """Keep this rank's cores busy with matrix multiplies for ``seconds`` (a layer's compute)."""
    if seconds <= 0:
        return
    a = torch.ones(128, 128)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a @ a


def _worker(args: _Args, q: Any) -> None:
    """One rank: join the group, time every (collective, size), send the per-repeat times to the parent."""
    try:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        import torch
        import torch.distributed as dist

        torch.set_num_threads(args.threads)
        if args.backend == "gloo":
            cpu_affinity.pin(args.rank, args.world)  # as the runtime pins its ranks
        device = torch.device("cpu")
        if args.backend == "nccl":
            device = torch.device("cuda", args.rank % torch.cuda.device_count())
            torch.cuda.set_device(device)
        dist.init_process_group(
            args.backend,
            init_method=f"tcp://127.0.0.1:{args.port}",
            rank=args.rank,
            world_size=args.world,
            timeout=timedelta(seconds=args.timeout_s),
        )

        def sync() -> None:
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        results: dict[tuple[str, int, str], list[float]] = {}
        n = args.world
        gaps = random.Random(args.rank)  # the same gaps on every run
        passes = [(c, str(Arrival.TOGETHER)) for c in args.collectives]
        passes += [(c, str(Arrival.LAST)) for c in args.late]
        for coll, arrival in passes:
            late = arrival == Arrival.LAST and args.rank == n - 1
            for nbytes in args.sizes:
                numel = max(n, nbytes // 4)
                numel -= numel % n  # gathered / scattered tensors split evenly
                full = torch.ones(numel, device=device)
                part = torch.ones(numel // n, device=device)
                fn = _operation(dist, coll, full, part, args.rank)
                if arrival == Arrival.LAST:
                    reps = LATE_OPS if nbytes <= LARGE_BYTES else LATE_OPS // 4
                else:
                    reps = args.repeats if nbytes <= LARGE_BYTES else max(3, args.repeats // 2)
                times = []
                dist.barrier()
                for k in range(args.warmup + reps):
                    # together: each op from a barrier; a late rank's ops back to back, as in training
                    if arrival == Arrival.TOGETHER:
                        dist.barrier()
                    sync()
                    _burst(torch, args.burst_s + (gaps.uniform(*LATE_GAP_S) if late else 0.0))
                    t0 = time.perf_counter()
                    fn()
                    sync()
                    dt = time.perf_counter() - t0
                    if coll == Collective.SEND_RECV:
                        dt /= 2  # one way of the round trip
                    if k >= args.warmup:
                        times.append(dt)
                results[(str(coll), int(numel * 4), arrival)] = times
        dist.barrier()
        dist.destroy_process_group()
        q.put(("ok", args.rank, results))
    except BaseException as e:  # noqa: BLE001 - every failure must reach the parent as one line
        q.put(("error", args.rank, f"{type(e).__name__}: {e}".splitlines()[0][:300]))


def _operation(dist: Any, coll: str, full: Any, part: Any, rank: int) -> Callable[[], None]:
    """One timed operation. Send/recv is a ping-pong: rank 0 sends to 1 and waits for the echo; other ranks
    (groups > 2) sit it out."""
    # the tensor forms of all-gather / reduce-scatter (named *_single in recent torch)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    def fn() -> None:
        if coll == Collective.ALL_REDUCE:
            dist.all_reduce(full)
        elif coll == Collective.ALL_GATHER:
            gather(full, part)
        elif coll == Collective.REDUCE_SCATTER:
            scatter(part, full)
        elif rank == 0:
            dist.send(full, 1)
            dist.recv(full, 1)
        elif rank == 1:
            dist.recv(full, 0)
            dist.send(full, 0)

    return fn


def profile_comm(
    procs: int = 2,
    *,
    sizes: Sequence[int] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    collectives: Sequence[Collective | str] = COLLECTIVES,
    backend: str | None = None,
    warmup: int = 2,
    repeats: int = 7,
    timeout_s: float = 120.0,
    table: CommTable | None = None,
    burst_s: float | None = None,
    late_collectives: Sequence[Collective | str] = LATE_COLLECTIVES,
) -> CommProfileRun:
    """Spawn ``procs`` local processes, time the collectives over ``sizes`` (default: powers of 4 from 1 KiB to
    ``max_bytes``) and return the points; with ``table``, also add them to it.

    ``late_collectives`` are timed a second time with the last rank arriving late (see the module's note), over
    :data:`LATE_OPS` operations whatever ``repeats`` says (a mean of bimodal costs needs many); only those also
    in ``collectives``, and never send/recv, whose two sides are not symmetric.

    ``backend``: "gloo" or "nccl" (default: NCCL when this machine has at least ``procs`` GPUs). Every rank
    runs under a process-group ``timeout_s``, and the whole measurement under a wall-clock limit derived from
    it, so a dead peer ends the run with an error instead of a hang.
    """
    import torch
    import torch.multiprocessing as mp

    if procs < 2:
        raise ValueError(f"procs: collectives need at least 2 processes, got {procs}")
    colls = tuple(str(Collective(c)) for c in collectives)
    late = tuple(
        c for c in (str(Collective(x)) for x in late_collectives) if c in colls and c != Collective.SEND_RECV
    )
    sizes = tuple(int(s) for s in (sizes if sizes is not None else message_sizes(max_bytes)))
    if not sizes or any(s < 4 for s in sizes):
        raise ValueError(f"max-bytes: message sizes must be >= 4 bytes, got {list(sizes)}")
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= procs else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend: {backend!r} is not one of gloo, nccl")
    threads = max(1, (os.cpu_count() or 1) // procs)
    if burst_s is None:
        burst_s = GLOO_BURST_S if backend == "gloo" else 0.0
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    workers = []
    for rank in range(procs):
        a = _Args(
            rank, procs, port, backend, sizes, colls, warmup, repeats, timeout_s, threads, burst_s, late
        )
        p = ctx.Process(target=_worker, args=(a, q), daemon=True, name=f"tessera-comm{rank}")
        p.start()
        workers.append(p)
    got: dict[int, dict[tuple[str, int], list[float]]] = {}
    deadline = time.monotonic() + timeout_s + 60.0 + 2.0 * len(sizes) * (len(colls) + len(late))
    try:
        while len(got) < procs:
            try:
                kind, rank, payload = q.get(timeout=0.5)
            except queue_mod.Empty:
                dead = [r for r, p in enumerate(workers) if p.exitcode not in (None, 0) and r not in got]
                if dead:
                    raise RuntimeError(
                        f"comm profile failed: rank {dead[0]} exited with code {workers[dead[0]].exitcode}"
                    ) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"comm profile failed: no result within {timeout_s:.0f} s") from None
                continue
            if kind == "error":
                raise RuntimeError(f"comm profile failed: rank {rank} raised {payload}")
            got[rank] = payload
    finally:
        for p in workers:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    medians: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for key in got[0]:
        coll, nbytes, arrival = key
        if arrival == Arrival.LAST:
            # the late rank's own time (the others' includes waiting for it), averaged: what a run sums
            t = statistics.fmean(got[procs - 1][key])
        else:
            t = statistics.median(max(ts) for ts in zip(*(got[r][key] for r in range(procs)), strict=True))
        medians.setdefault((coll, arrival), []).append((nbytes, t))
    points = []
    for (coll, arrival), pts in medians.items():
        pts.sort()
        n = 2 if coll == Collective.SEND_RECV else procs
        # A bigger message never takes less time: the least-squares non-decreasing fit removes the noise of
        # single points (a scheduler hiccup at one size) without biasing the curve up or down.
        fitted = isotonic_regression([t for _, t in pts], increasing=True).x
        points.extend(
            CommPoint(coll, n, nb, float(t), arrival) for (nb, _), t in zip(pts, fitted, strict=True)
        )
    run = CommProfileRun(
        backend, link_kind_for(backend), procs, threads if backend == "gloo" else None, tuple(points)
    )
    if table is not None:
        run.fill(table)
    return run
