"""One core per rank when several CPU ranks share a host (the runtime's workers, the profiler and its co-runners,
the gloo collective profiler).

Unpinned, the OS migrates a rank's compute thread and gloo's I/O threads between cores, so two ranks' share of
the host varies from launch to launch; pinned, each rank (and the profiler standing in for one) keeps its core.
Pinning only applies where it cannot crowd ranks together: more than one rank and no more ranks than cores this
process may use. ``TESSERA_PIN_CPUS=0`` turns it off.

Torch-free, in the torch side's package so the runtime (which imports only the plan, ``nn`` and torch) and
``perf`` share it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

ENV = "TESSERA_PIN_CPUS"


def _usable() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return []


def core_for(slot: int, slots: int) -> int | None:
    """The core slot ``slot`` of ``slots`` co-located ranks runs on, or None where pinning does not apply."""
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    cpus = _usable()
    if slots < 2 or slots > len(cpus) or not 0 <= slot < slots:
        return None
    return cpus[slot]


def pin(slot: int, slots: int) -> int | None:
    """Pin the calling thread (and every thread it starts afterwards: gloo's, torch's) to its core for good.
    Returns the core, or None when left unpinned (see :func:`core_for`)."""
    core = core_for(slot, slots)
    if core is not None:
        os.sched_setaffinity(0, {core})
    return core


@contextlib.contextmanager
def pinned(slot: int, slots: int) -> Iterator[int | None]:
    """:func:`pin` for the duration of the block, then the affinity the caller had (for in-process work such as
    profiling, which must not leave the user's process on one core)."""
    before = _usable()
    core = pin(slot, slots)
    try:
        yield core
    finally:
        if core is not None:
            os.sched_setaffinity(0, before)


# A busy loop at the training thread's priority on the same core: the scheduler gives each half of it, so a
# ``cpu-half`` device really computes at half speed (the profiler measures it beside the same neighbour). It
# exits when its parent does (it also carries the service's reaper marker in its environment).
_NEIGHBOUR = """
import os, sys, time
if sys.argv[1] != "-":
    os.sched_setaffinity(0, {int(sys.argv[1])})
parent = os.getppid()
while os.getppid() == parent:
    end = time.monotonic() + 0.2
    while time.monotonic() < end:
        pass
"""


def start_neighbour(core: int | None) -> subprocess.Popen:
    """A busy process pinned to ``core``: a device sharing the core with it (the embedded service's
    ``cpu-half``, or the profiler timing one) gets half of it (``None``: unpinned, for a one-core host where
    everything shares the core anyway). The caller kills it when done."""
    return subprocess.Popen(
        [sys.executable, "-c", _NEIGHBOUR, "-" if core is None else str(core)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, close_fds=True,
    )  # fmt: skip


@contextlib.contextmanager
def neighboured(on: bool, core: int | None) -> Iterator[None]:
    """:func:`start_neighbour` on ``core`` for the duration of the block when ``on``."""
    proc = start_neighbour(core) if on else None
    try:
        yield
    finally:
        if proc is not None:
            proc.kill()
            proc.wait(timeout=10)
