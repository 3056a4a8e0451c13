"""One Ray actor per device: runs the existing runtime (``Trainer``, checkpoints, data) on its rank of a Plan.

The actor trains in a background thread and the service *polls* it (``poll``), so a gang outlives the
server that launched it: a restarted server finds the actors by name and reattaches. The step loop is the
runtime's own (``tessera.runtime.worker.run_job``) plus one thing the service needs: a **cooperative stop**.
Every step ends with a 1-element MAX all-reduce of "stop requested"; when any rank has been asked to stop,
all ranks agree on the same step, write a checkpoint there, and exit — that is how a rescale or migration
checkpoints exactly where it stops, never losing steps. The same all-reduce carries "my loss is not finite":
with ``on_nonfinite_loss="fail"`` every rank ends at that step, writes no checkpoint (the parameters it just
updated are not finite), and the actor's state is ``diverged`` with "loss diverged (NaN) at step N" — the
service fails the job without relaunching it. With ``"skip"`` the trainer skips such steps' updates itself.

Imports only ``tessera.plan``, the runtime and torch (the worker stays light, as the runtime promises).
"""

from __future__ import annotations

import faulthandler
import math
import os
import socket
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, replace
from datetime import timedelta
from typing import Any

from tessera import cpu_affinity
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

        from tessera.runtime import checkpoint
        from tessera.runtime.data import SyntheticData, TextData, data_source
        from tessera.runtime.engine import Trainer
        from tessera.runtime.model import ZooModel
        from tessera.runtime.schedule import Training
        from tessera.runtime.telemetry import RankStep, peak_memory_bytes
        from tessera.runtime.worker import check_resume_data, identity_of, should_validate, validation_loss

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
            factory = run.model_factory or ZooModel(plan.model)
            training = Training(**run.training) if run.training else Training(learning_rate=run.learning_rate)
            trainer = Trainer(
                plan, rank, factory, seed=run.seed, learning_rate=training.lr_at(0, run.total_steps), device=device,
                skip_nonfinite=run.on_nonfinite_loss == "skip", training=training,
            )  # fmt: skip
            if run.data_config is not None:
                data = data_source(run.data_config, seed=run.seed, model=plan.model)
            else:
                data = TextData(run.data_path, vocab=run.vocab) if run.data_path else SyntheticData(run.seed)
            data_identity = identity_of(data, plan)
            start = 0
            if run.resume and _has_checkpoint(run.checkpoint_dir):
                where, meta = checkpoint.read_meta(run.checkpoint_dir)
                check_resume_data(meta.get("data"), data_identity, str(where), run.force_data_change)
                ckpt = checkpoint.load(where, trainer.checkpoint_want())  # only this rank's pieces
                trainer.load_local(ckpt.params, ckpt.optim)
                start = ckpt.step
                with self._lock:
                    self._checkpoint_step = start
            self._put({"kind": "ready", "rank": rank, "start_step": start, "t": time.time()})
            loop_t = time.perf_counter()  # each record's wall_s: the loop iteration that produced it
            lay = trainer.layout
            needs_data = lay.first or lay.last
            flag = torch.zeros(2, device=device)  # [stop requested, non-finite loss code]
            stopped = False
            diverged: str | None = None
            for step in range(start, run.total_steps):
                torch.manual_seed(hash((run.seed, step, lay.stage_index, lay.replica)) % (2**63))
                inputs = targets = None
                if needs_data:
                    inputs, targets = data.batch(trainer.stage.module, step, plan.global_batch, plan.seq_len)
                stats = trainer.step(
                    step, inputs, targets, learning_rate=training.lr_at(step, run.total_steps)
                )
                val = None
                if should_validate(data, step + 1, run.total_steps):
                    val = validation_loss(trainer, data, plan, needs_data)
                done = step + 1
                bad = stats.reports_loss and run.on_nonfinite_loss == "fail"
                flag[0] = 1.0 if self._stop.is_set() else 0.0
                flag[1] = _NONFINITE_CODE.get(_nonfinite(stats.loss), 0.0) if bad else 0.0
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank stops at the same step
                code = float(flag[1].item())
                stopped = code == 0 and bool(flag[0].item() > 0) and done < run.total_steps
                every = run.checkpoint_every
                saved_s: float | None = None  # seconds this step's checkpoint took, if it wrote one
                # every rank ends at a diverged step before any checkpoint of non-finite parameters
                if code == 0 and ((every and done % every == 0) or done == run.total_steps or stopped):
                    meta = {
                        "plan": plan.to_dict(),
                        "seed": run.seed,
                        "data_position": done,
                        "data": data_identity,
                        "model": plan.model,
                    }
                    t_save = time.perf_counter()
                    checkpoint.save(
                        run.checkpoint_dir, done, rank, trainer.param_pieces(), trainer.optim_pieces(), meta
                    )
                    saved_s = time.perf_counter() - t_save
                # the step's record after its checkpoint: its wall time is the whole iteration, the
                # checkpoint's share named apart (a job writes about ten, whatever its length)
                rec = RankStep(
                    job=run.job_id, rank=rank, stage=lay.stage_index, step=step, loss=stats.loss,
                    reports_loss=stats.reports_loss, iter_s=stats.iter_s, compute_s=stats.compute_s,
                    comm_s=stats.comm_s, peak_memory_bytes=peak_memory_bytes(device), skipped=stats.skipped,
                    val_loss=val, grad_norm=stats.grad_norm, learning_rate=stats.learning_rate,
                    wall_s=time.perf_counter() - loop_t, checkpoint_s=saved_s or 0.0,
                )  # fmt: skip
                loop_t = time.perf_counter()
                self._put({"kind": "step", **asdict(rec)})
                if code > 0:
                    kind = next(k for k, v in _NONFINITE_CODE.items() if v == code)
                    diverged = f"loss diverged ({kind}) at step {done}"
                    break
                if saved_s is not None:
                    with self._lock:
                        self._checkpoint_step = done
                    self._put({"kind": "checkpoint", "rank": rank, "step": done})
                if stopped:
                    break
            dist.barrier()
            if diverged is not None:
                return "diverged", diverged
            return ("stopped" if stopped else "finished"), None
        finally:
            faulthandler.cancel_dump_traceback_later()
            if trainer is not None:
                trainer.close()
            if dist.is_initialized():
                dist.destroy_process_group()


# A non-finite loss as a number all ranks can MAX-reduce: NaN beats -inf beats inf (a sum with NaN is NaN).
_NONFINITE_CODE = {"inf": 1.0, "-inf": 2.0, "NaN": 3.0}


def _nonfinite(loss: float) -> str | None:
    if math.isnan(loss):
        return "NaN"
    if math.isinf(loss):
        return "inf" if loss > 0 else "-inf"
    return None


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
