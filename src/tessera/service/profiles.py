"""Profiles of this machine's CPU for the embedded service's device types (``cpu-core``, ``cpu-half``).

Why: a job on the embedded cluster runs on CPU processes, so what the user is shown as "estimated" must be an
estimate for them — from layer times measured on this machine the way ``tessera profile layers`` takes them,
not from a GPU datasheet. Each (model, sequence length, precision, optimizer) is profiled once per device
type, in a child process (the server never builds a model itself), and cached in the service's cost
directory beside a ledger (``profiled.json``), so later jobs and later server starts reuse it. A job waits
for its model's profile before its first launch: calibration learns a correction *of the profile*, and a
correction learned against a datasheet estimate would be wrong for every profiled job after it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tessera.jobs.spec import JobSpec
from tessera.perf.compute import Profile
from tessera.perf.costmodel import PROFILE_FILE
from tessera.service.model_source import seq_len_for

log = logging.getLogger("tessera.service.profiles")
LEDGER = "profiled.json"
PROFILE_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class ProfileTarget:
    """What one profile covers: a model at one sequence length, precision and optimizer (a user's own model:
    with the ``entrypoint`` that builds it, whose code then runs in the profiling child, never here)."""

    model: str
    seq_len: int | None
    precision: str
    optimizer: str
    micro_batches: tuple[int, ...]
    entrypoint: str | None = None

    @property
    def key(self) -> str:
        mbs = ",".join(str(b) for b in self.micro_batches)
        own = f"|entrypoint={self.entrypoint}" if self.entrypoint else ""
        return f"{self.model}|seq={self.seq_len}|{self.precision}|{self.optimizer}|mb={mbs}{own}"


def target_of(spec: JobSpec) -> ProfileTarget:
    """The profile a job needs: its model's layers at its sequence length (a user's own model at the length
    the service traces it at) and at the micro-batches a plan may give one device."""
    mbs, b = [], 1
    while b <= min(spec.global_batch, 16):
        mbs.append(b)
        b *= 2
    return ProfileTarget(
        spec.model, seq_len_for(spec), spec.precision, spec.optimizer, tuple(mbs), spec.entrypoint
    )


class ProfileKeeper:
    """Profiles models for the embedded CPU device types in the background, one at a time, in child processes.

    ``processes``: the devices of the embedded cluster (the profiler loads the other cores with co-runners,
    as the devices load each other). ``on_profiled(profile)`` gets each new profile's measurements to merge
    into the live cost model."""

    def __init__(
        self,
        cost_dir: Path,
        device_types: tuple[str, ...],
        processes: int,
        on_profiled: Callable[[Profile], None],
        tp_degrees: tuple[int, ...] = (1, 2),
    ) -> None:
        self.cost_dir = Path(cost_dir)
        self.device_types = device_types
        self.processes = max(1, processes)
        self.tp_degrees = tp_degrees
        self.on_profiled = on_profiled
        self._lock = threading.Lock()
        self._queue: list[ProfileTarget] = []
        self._ledger: dict[str, dict[str, str]] = self._read_ledger()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._runs_s: list[list[float]] = []  # [start, end] of each profiling run (end inf while it runs)

    # ------------------------------------------------------------------ queries
    def wait_reason(self, spec: JobSpec) -> str | None:
        """Why a job that is not running may not launch yet (its profile is queued when missing), or None.

        It waits for its own model's profile, and while any profile is being taken: the profiler holds this
        machine's cores, so a gang started beside it would run slower than its device does and the profile
        would measure the devices slower than they are."""
        target = target_of(spec)
        if not self.device_types:
            return None
        with self._lock:
            mine = target.key in self._ledger
            if not mine and target not in self._queue:
                self._queue.append(target)
                self._wake.set()
            busy = self._queue[0].model if self._queue else None
        if not mine:
            return f"profiling {target.model} on this machine's CPU (once; cached for later jobs)"
        if busy is not None:
            return f"waiting while {busy} is profiled on this machine's CPU (a launch beside it would disturb both)"
        return None

    def profiled(self, spec: JobSpec) -> bool:
        """Whether the job's estimate comes from a profile taken here (only such jobs calibrate)."""
        target = target_of(spec)
        with self._lock:
            return self._ledger.get(target.key, {}).get("state") == "done"

    def busy_during(self, start_s: float, end_s: float) -> bool:
        """Whether a profiling child ran on this machine's CPU at some time in [start_s, end_s]: it loads the
        cores the embedded devices run on, so timings taken meanwhile are not the device's own."""
        with self._lock:
            return any(s <= end_s and e >= start_s for s, e in self._runs_s)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="tessera-profiles", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=1.0)
            self._wake.clear()
            while not self._stop.is_set():
                with self._lock:
                    target = self._queue[0] if self._queue else None
                if target is None:
                    break
                state = self._profile(target)
                with self._lock:
                    self._queue.remove(target)
                    self._ledger[target.key] = state
                    self._write_ledger()

    def _profile(self, target: ProfileTarget) -> dict[str, str]:
        """Profile ``target`` for every device type into a scratch directory, then hand the measurements over."""
        run = [time.time(), math.inf]
        with self._lock:
            self._runs_s = [*self._runs_s[-63:], run]
        try:
            with tempfile.TemporaryDirectory(prefix="tessera-profile-") as scratch:
                for device_type in _runs(self.device_types):
                    cmd = [
                        sys.executable, "-m", "tessera", "profile", "layers", "--model", target.model,
                        "--micro-batch", ",".join(str(b) for b in target.micro_batches),
                        "--tp", "1" if target.entrypoint else ",".join(str(t) for t in self.tp_degrees),
                        "--precision", target.precision,
                        "--optimizer", target.optimizer, "--processes", str(self.processes),
                        "--device-type", device_type, "--repeats", "6", "--passes", "3",
                        "--cost-dir", scratch, "--json",
                    ]  # fmt: skip
                    if target.seq_len:
                        cmd += ["--seq", str(target.seq_len)]
                    if target.entrypoint:  # the user's code runs in that child, never here
                        cmd += ["--entrypoint", target.entrypoint]
                    done = subprocess.run(
                        cmd, capture_output=True, text=True, timeout=PROFILE_TIMEOUT_S,
                        env=_child_env(user_code=target.entrypoint is not None), start_new_session=True,
                    )  # fmt: skip
                    if done.returncode != 0:
                        lines = (done.stderr or done.stdout).strip().splitlines()
                        raise RuntimeError(lines[-1] if lines else f"exit code {done.returncode}")
                self.on_profiled(Profile.load(Path(scratch) / PROFILE_FILE))
            log.info("profiled %s for %s", target.key, ", ".join(self.device_types))
            return {"state": "done"}
        except Exception as e:  # noqa: BLE001 - the job is priced from the datasheet instead
            log.warning("profiling %s failed: %s", target.key, e)
            return {"state": "failed", "error": f"{type(e).__name__}: {e}"[:300]}
        finally:
            with self._lock:
                run[1] = time.time()

    # ------------------------------------------------------------------ ledger
    def _read_ledger(self) -> dict[str, dict[str, str]]:
        try:
            raw = json.loads((self.cost_dir / LEDGER).read_text())
            return {str(k): dict(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
        except (OSError, ValueError, TypeError, AttributeError):
            return {}

    def _write_ledger(self) -> None:
        self.cost_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.cost_dir / f".{LEDGER}.tmp"
        tmp.write_text(json.dumps(self._ledger, indent=1))
        os.replace(tmp, self.cost_dir / LEDGER)


def _runs(device_types: tuple[str, ...]) -> list[str]:
    """The profiler runs: ``cpu-core,cpu-half`` in one (the half core derived from the same measurements)."""
    if set(device_types) == {"cpu-core", "cpu-half"}:
        return ["cpu-core,cpu-half"]
    return list(device_types)


def _child_env(user_code: bool) -> dict[str, str]:
    """The profiler's environment: no terminal (plain output), the same Python path as the server's; where it
    runs a user's model, only what the user-code child gets (no token, no database URL)."""
    from tessera.service.user_code import user_code_env

    env = user_code_env() if user_code else dict(os.environ)
    env["TERM"] = "dumb"
    env.setdefault("PYTHONPATH", os.pathsep.join(p for p in sys.path if p))
    return env
