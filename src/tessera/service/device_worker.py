"""One Ray actor per device: runs the existing runtime (``Trainer``, checkpoints, data) on its rank of a Plan.

The actor trains in a background thread and the service *polls* it (``poll``), so a gang outlives the
server that launched it: a restarted server finds the actors by name and reattaches. The step loop is the
runtime's own (:func:`tessera.runtime.loop.train_steps`, as ``tessera train`` runs it), asked for the one thing
the service needs: a **cooperative stop**.
Every step ends with a 2-element MAX all-reduce of "stop requested"; when any rank has been asked to stop,
all ranks agree on the same step, write a checkpoint there, and exit — that is how a rescale or migration
checkpoints exactly where it stops, never losing steps. The same all-reduce carries "my loss is not finite":
with ``on_nonfinite_loss="fail"`` every rank ends at that step, writes no checkpoint (the parameters it just
updated are not finite), and the actor's state is ``diverged`` with "loss diverged (NaN) at step N" — the
service fails the job without relaunching it. With ``"skip"`` the trainer skips such steps' updates itself.

Imports only ``tessera.plan``, the runtime, torch and the stdlib-only :mod:`tessera.service.job_files`
(the worker stays light, as the runtime promises).
"""

from __future__ import annotations

import faulthandler
import os
import socket
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, replace
from datetime import timedelta
from typing import Any

from tessera.nn import cpu_affinity
from tessera.plan import Plan


@dataclass(frozen=True)
class RunSpec:
    """Everything a rank needs besides the Plan (plain data: it travels through Ray)."""

    job_id: int
    attempt: int
    total_steps: int
    learning_rate: float
    seed: int
    checkpoint_dir: str
    checkpoint_every: int
    resume: bool
    backend: str  # gloo | nccl | auto (nccl where the actor sees a CUDA GPU, else gloo)
    pg_timeout_s: float
    model_factory: Any = None  # None: the zoo model the Plan names
    data_path: str | None = None
    vocab: int = 256
    loopback: bool = True
    on_nonfinite_loss: str = "fail"  # fail | skip (the JobSpec field)
    data_config: Any = None  # a dataset mapping (JobSpec.data_options()); data_path stays the text-file form
    training: dict[str, Any] | None = None  # JobSpec.training_options(): schedule, clipping, decay, dropout
    force_data_change: bool = False
    # the job's files shipped to the nodes (``tessera.service.job_files``): archive digest, its Ray object and
    # where each field's copy lies in it; None: the paths above are used as they are (embedded, shared files)
    files: dict[str, Any] | None = None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class DeviceWorker:
    """Ray actor body (wrapped with ``ray.remote`` by the backend, so this module does not import Ray)."""

    def __init__(
        self, rank: int, world_size: int, gpu_type: str, core: int | None = None, neighbour: bool = False
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.gpu_type = gpu_type
        self.core = core  # embedded CPU devices: the core this device is (its training thread pinned there)
        self.neighbour = neighbour  # a half-core device: a busy process shares the core while it trains
        self._lock = threading.Lock()
        self._messages: list[dict[str, Any]] = []
        self._acked = 0  # messages before this index were delivered and dropped
        self._state = "created"  # created | running | finished | stopped | diverged | failed
        self._error: str | None = None
        self._checkpoint_step: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_at = time.time()

    # --------------------------------------------------------------------- control
    def pid(self) -> int:
        return os.getpid()

    def address(self, loopback: bool = True) -> tuple[str, int]:
        """(host, free port) for the process group's rendezvous (asked of rank 0): loopback for the embedded
        cluster, else this node's address as Ray knows it."""
        host = "127.0.0.1" if loopback else _node_ip()
        return host, free_port(host)

    def start(self, plan_json: str, run: dict[str, Any], master: tuple[str, int]) -> bool:
        with self._lock:
            if self._thread is not None:
                return False
            spec = RunSpec(**run)
            self._thread = threading.Thread(
                target=self._main,
                args=(Plan.from_json(plan_json), spec, master),
                daemon=True,
                name="tessera-train",
            )
            self._state = "running"
            self._thread.start()
            return True

    def request_stop(self) -> None:
        self._stop.set()

    def reform(self, rank: int, world_size: int, gpu_type: str) -> bool:
        """Make this actor a rank of the job's next gang (fast rescale): allowed only once its training
        thread ended ``stopped`` — its process group is destroyed and its checkpoint written — so the new
        ``start`` re-forms the process group with the new rank and world size and reshards from that
        checkpoint, without paying a new process, Ray actor and torch import. False: not reusable."""
        t = self._thread
        if t is not None:
            t.join(timeout=30)  # the state says "stopped" a moment before the thread has returned
        with self._lock:
            if self._thread is None or self._thread.is_alive() or self._state not in ("stopped", "finished"):
                return False  # ("finished": a spare — a gang that completed kept for the next launch here)
            self._thread = None
            self.rank, self.world_size, self.gpu_type = rank, world_size, gpu_type
            self._messages, self._acked = [], 0
            self._state, self._error, self._checkpoint_step = "created", None, None
            self._stop = threading.Event()
            self._started_at = time.time()
            return True

    def poll(self, cursor: int) -> dict[str, Any]:
        """Messages from index ``cursor`` on (earlier ones are dropped: the caller has them) and the state."""
        with self._lock:
            if cursor > self._acked:
                drop = min(cursor, self._acked + len(self._messages)) - self._acked
                del self._messages[:drop]
                self._acked += drop
            start = max(0, cursor - self._acked)
            out = self._messages[start:]
            return {
                "messages": list(out),
                "next": self._acked + len(self._messages),
                "state": self._state,
                "error": self._error,
                "checkpoint_step": self._checkpoint_step,
                "rank": self.rank,
            }

    # --------------------------------------------------------------------- training
    def _put(self, msg: dict[str, Any]) -> None:
        with self._lock:
            self._messages.append(msg)

    def _saved(self, step: int) -> None:
        """A checkpoint of ``step`` is complete on this rank (a relaunch may resume from it)."""
        with self._lock:
            self._checkpoint_step = step
        self._put({"kind": "checkpoint", "rank": self.rank, "step": step})

    def _main(self, plan: Plan, run: RunSpec, master: tuple[str, int]) -> None:
        if self.core is not None:  # this thread and those it starts (gloo's) run on the device's core only
            os.sched_setaffinity(0, {self.core})
        neighbour = (
            cpu_affinity.start_neighbour(self.core) if self.neighbour and self.core is not None else None
        )
        try:
            end, error = self._train(plan, run, master)
            with self._lock:
                self._error = error
                self._state = end
        except BaseException as e:  # noqa: BLE001 - every failure must reach the service
            msg = f"{type(e).__name__}: {e}".strip().splitlines()[0][:500]
            with self._lock:
                self._error = f"rank {self.rank}: {msg}"
                self._messages.append(
                    {"kind": "error", "rank": self.rank, "error": msg, "trace": traceback.format_exc()}
                )
                self._state = "failed"
        finally:
            if neighbour is not None:
                neighbour.kill()
                neighbour.wait(timeout=10)

    def _train(self, plan: Plan, run: RunSpec, master: tuple[str, int]) -> tuple[str, str | None]:
        """Train until done, stopped or diverged: (finished | stopped | diverged, the divergence text)."""
        import torch
        import torch.distributed as dist

        from tessera.runtime.data import SyntheticData, TextData, data_source
        from tessera.runtime.loop import RankRun, prepare, train_steps
        from tessera.runtime.model import ZooModel
        from tessera.runtime.schedule import Training

        rank, world = self.rank, self.world_size
        if run.backend == "auto":
            run = replace(run, backend="nccl" if torch.cuda.is_available() else "gloo")
        if run.loopback or master[0].startswith("127.") or master[0] == "localhost":
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # a loopback rendezvous: gloo must not pick another NIC
        os.environ.update(
            RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0", MASTER_ADDR=master[0], MASTER_PORT=str(master[1]),
            TESSERA_GPU_TYPE=self.gpu_type, TESSERA_JOB_ID=str(run.job_id), TESSERA_ATTEMPT=str(run.attempt),
        )  # fmt: skip
        faulthandler.dump_traceback_later(max(60.0, 4 * run.pg_timeout_s), exit=False, file=sys.stderr)
        model_dir = None
        if run.files:  # the job's files, unpacked on this node: the RunSpec's paths now name the copies
            from tessera.service.job_files import localize

            run, model_dir = localize(run)
        torch.set_num_threads(1 if run.backend == "gloo" else max(1, (os.cpu_count() or 1) // 2))
        dist.init_process_group(
            run.backend,
            init_method=f"tcp://{master[0]}:{master[1]}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=run.pg_timeout_s),
        )
        trainer = None
        try:
            if run.backend == "nccl":  # one visible GPU per actor (Ray sets CUDA_VISIBLE_DEVICES)
                torch.cuda.set_device(0)
                device = torch.device("cuda", 0)
                plan = _unpinned(plan)
            else:
                device = torch.device("cpu")
            if run.data_config is not None:
                data = data_source(run.data_config, seed=run.seed, model=model_dir or plan.model)
            else:
                data = TextData(run.data_path, vocab=run.vocab) if run.data_path else SyntheticData(run.seed)
            training = Training(**run.training) if run.training else Training(learning_rate=run.learning_rate)
            rank_run = RankRun(
                plan, rank, run.seed, run.total_steps, training, on_nonfinite_loss=run.on_nonfinite_loss,
                checkpoint_dir=run.checkpoint_dir, checkpoint_every=run.checkpoint_every,
                force_data_change=run.force_data_change, job=run.job_id,
            )  # fmt: skip
            where = run.checkpoint_dir if run.resume and _has_checkpoint(run.checkpoint_dir) else None
            prepared = prepare(rank_run, run.model_factory or ZooModel(plan.model), data, device, where)
            trainer = prepared.trainer
            if where is not None:
                with self._lock:
                    self._checkpoint_step = prepared.start
            self._put({"kind": "ready", "rank": rank, "start_step": prepared.start, "t": time.time()})
            out = train_steps(
                rank_run, prepared, data, device=device,
                on_record=lambda rec: self._put({"kind": "step", **asdict(rec)}),
                on_checkpoint=self._saved, stop_requested=self._stop.is_set,
            )  # fmt: skip
            dist.barrier()
            return str(out.end), out.diverged
        finally:
            faulthandler.cancel_dump_traceback_later()
            if trainer is not None:
                trainer.close()
            if dist.is_initialized():
                dist.destroy_process_group()


def _has_checkpoint(root: str) -> bool:
    from tessera.runtime import checkpoint

    try:
        checkpoint.resolve(root)
        return True
    except FileNotFoundError:
        return False


def _unpinned(plan: Plan) -> Plan:
    """The Plan with GPU indices cleared: inside a Ray actor the one visible GPU is always cuda:0."""
    from tessera.plan import Device

    stages = []
    for st in plan.stages:
        devs = tuple(Device(d.rank, d.gpu_type, d.node, None) for d in st.devices)
        stages.append(st.__class__(**{**st.__dict__, "devices": devs}))
    return plan.with_(stages=tuple(stages))


def _node_ip() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # pragma: no cover - outside Ray
        return socket.gethostbyname(socket.gethostname())
