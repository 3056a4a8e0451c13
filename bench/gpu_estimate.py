"""Estimated vs measured iteration time of single-device plans on a real GPU (issue 22, "GPU truth").

What it does, in one process on one device:

1. groups the plans by the layer profile their estimate reads — (model, sequence length, precision,
   optimizer) — and for each group profiles the model's distinct layers through the library
   (:func:`tessera.perf.profiler.profile_layers`, what ``tessera profile layers`` runs) at exactly the
   micro-batch sizes, TP degrees and recompute variants its plans use, into a temporary cost directory;
2. estimates every plan of the group twice with :func:`tessera.perf.estimate.estimate_plan`: with those
   profiles (loaded back from the cost directory), and with an empty :class:`~tessera.perf.costmodel.CostModel`
   — the uncalibrated catalog/efficiency model — to show what profiling buys;
3. runs every plan for real with the runtime's own :class:`tessera.runtime.engine.Trainer` (what a worker
   runs per rank: same model factory, synthetic data and ``Trainer.step``) and keeps the median step time
   (``StepStats.iter_s``, CUDA-synchronized at the step's end) after warm-up steps.

Plans: a plain single-device plan runs under a real world-1 process group (nccl on CUDA, gloo on CPU), as
the launcher would start it. A *TP shard* plan (``tp > 1``) is measured as one device's shard: rank 0 of the
plan under PyTorch's ``fake`` process group (:func:`tessera.nn.dtensor_tp.fake_process_group`, as the profiler
times TP shards), so its collectives do nothing; it is compared with the estimate's compute
(``iteration_time_s − comm_s``: the TP all-reduces are the communication model's, profiled apart).

The catalog entry of the GPU comes from ``torch.cuda.get_device_name()`` through the profiler's
:func:`~tessera.perf.profiler.device_type_of` (``NVIDIA H100 80GB HBM3`` → ``H100-80GB``), and the plans'
devices carry that type, so profiles and estimates meet under one key.

Nothing is calibrated from the runs (that would fit the answer). Layers are built under the target device
(``with torch.device(...)``) so a 1.3B model's initialization runs on the GPU, not on the host CPU — timing
neutral (the same modules end on the same device), and a build that fails that way is retried the normal way.

Accuracy = 1 − |estimate − measured| / measured. Targets (issue 22): mean ≥ 0.95, worst ≥ 0.90.

    python3 bench/gpu_estimate.py --device cuda --budget-s 180 --out $OUT      # on the GPU
    python bench/gpu_estimate.py --device cpu --smoke                           # here: same code path
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

_T0 = time.monotonic()  # the budget counts importing torch and the library too

import torch  # noqa: E402

from tessera.hardware import get_gpu  # noqa: E402
from tessera.models.spec import ModelSpec, TransformerArch  # noqa: E402
from tessera.models.zoo import FAMILIES, family_of, get_arch, get_spec  # noqa: E402
from tessera.perf.compute import profile_device  # noqa: E402
from tessera.perf.costmodel import CostModel  # noqa: E402
from tessera.perf.estimate import estimate_plan  # noqa: E402
from tessera.perf.profiler import device_type_of, profile_layers  # noqa: E402
from tessera.plan import Plan, simple_plan  # noqa: E402
from tessera.planning.partition import block_range  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
# the CPU check runs as the embedded service's one-thread device: a fixed thread count keeps a busy 2-core
# host from oversubscribing the smoke run (the figures there only check the code path)
CPU_STAND_IN = "cpu-core"


# ------------------------------------------------------------------------------------------------ models
@dataclass(frozen=True)
class Model:
    """A model the bench runs: a zoo name, or a zoo model's architecture with fields replaced (the runtime's
    ``ZooModel(name, overrides)``), for LLaMA shapes of 125M–1.3B the zoo has no name for."""

    label: str
    zoo: str
    overrides: tuple[tuple[str, Any], ...] = ()

    def arch(self) -> TransformerArch:
        base = get_arch(self.zoo)
        return replace(base, **dict(self.overrides)) if self.overrides else base  # type: ignore[arg-type]

    def spec(self, seq_len: int) -> ModelSpec:
        if not self.overrides:
            return get_spec(self.zoo, seq_len=seq_len)
        fam = family_of(self.zoo)
        return FAMILIES[fam].spec(self.label, self.arch(), seq_len)

    def factory(self) -> Any:
        from tessera.runtime.model import ZooModel

        return ZooModel(self.zoo, self.overrides)


def _llama(hidden: int, layers: int, heads: int, kv_heads: int, ffn: int) -> tuple[tuple[str, Any], ...]:
    return (
        ("hidden", hidden), ("n_layers", layers), ("n_heads", heads), ("n_kv_heads", kv_heads),
        ("ffn_hidden", ffn), ("max_positions", 4096),
    )  # fmt: skip


GPT125 = Model("gpt3-125m", "gpt3-125m")
GPT350 = Model("gpt3-350m", "gpt3-350m")
GPT760 = Model("gpt3-760m", "gpt3-760m")
GPT13 = Model("gpt3-1.3b", "gpt3-1.3b")
GPT27 = Model("gpt3-2.7b", "gpt3-2.7b")
# LLaMA-2's block (RMSNorm, SwiGLU, RoPE, no biases, 32k vocab) at small sizes: ~134M, and TinyLlama's
# 1.1B shape (h 2048, 22 layers, GQA 32/4, ffn 5632)
LLAMA134 = Model("llama-134m (llama2 block, h768 x12)", "llama2-7b", _llama(768, 12, 12, 12, 2048))
LLAMA11 = Model("llama-1.1b (TinyLlama shape)", "llama2-7b", _llama(2048, 22, 32, 4, 5632))
LLAMA7 = Model("llama2-7b", "llama2-7b")
GPT_CPU = Model("gpt-small-cpu", "gpt-small-cpu")
LLAMA_CPU = Model("llama-small-cpu", "llama-small-cpu")


@dataclass(frozen=True)
class Case:
    label: str
    model: Model
    seq_len: int
    micro_batch: int  # samples per micro-batch on the device
    micro_batches: int = 1
    precision: str = "bf16"
    recompute: str = "none"
    tp: int = 1  # > 1: one rank's shard of a TP plan, measured on this device
    optimizer: str = "adamw"

    def plan(self, gpu_type: str) -> Plan:
        spec = self.model.spec(self.seq_len)
        plan = simple_plan(
            self.model.zoo, n_layers=spec.n_layers, global_batch=self.micro_batch * self.micro_batches,
            seq_len=self.seq_len, tp=self.tp, gpu_type=gpu_type, micro_batches=self.micro_batches,
            model_heads=spec.arch.n_heads, blocks=block_range(spec), precision=self.precision,
            recompute=self.recompute, optimizer=self.optimizer,
        )  # fmt: skip
        plan.validate()
        return plan

    @property
    def group(self) -> tuple[str, int, str, str]:
        """The profile this case's estimate reads (the device key is one per run: the GPU's type, or the
        CPU stand-in's one-thread ``cpu-core``, whatever the plan's world)."""
        return self.model.label, self.seq_len, self.precision, self.optimizer


def gpu_cases() -> list[Case]:
    """27 plans, ordered so a budget cut still leaves both families and both precisions."""
    C = Case
    return [
        C("gpt3-125m s1024 mb1 bf16", GPT125, 1024, 1),
        C("gpt3-125m s1024 mb4 bf16", GPT125, 1024, 4),
        C("gpt3-125m s1024 mb8 bf16", GPT125, 1024, 8),
        C("gpt3-125m s1024 mb4x2 bf16", GPT125, 1024, 4, micro_batches=2),
        C("gpt3-125m s1024 mb8 bf16 full recompute", GPT125, 1024, 8, recompute="full"),
        C("gpt3-125m s1024 mb8 bf16 selective recompute", GPT125, 1024, 8, recompute="selective"),
        C("llama-134m s2048 mb1 bf16", LLAMA134, 2048, 1),
        C("llama-134m s2048 mb4 bf16", LLAMA134, 2048, 4),
        C("llama-134m s2048 mb8 bf16 full recompute", LLAMA134, 2048, 8, recompute="full"),
        C("gpt3-125m s512 mb2 fp32", GPT125, 512, 2, precision="fp32"),
        C("gpt3-125m s512 mb8 fp32", GPT125, 512, 8, precision="fp32"),
        C("gpt3-350m s2048 mb2 bf16", GPT350, 2048, 2),
        C("gpt3-350m s2048 mb4 bf16", GPT350, 2048, 4),
        C("gpt3-350m s2048 mb4 bf16 full recompute", GPT350, 2048, 4, recompute="full"),
        C("llama-134m s512 mb4 fp32", LLAMA134, 512, 4, precision="fp32"),
        C("gpt3-760m s1024 mb1 fp32", GPT760, 1024, 1, precision="fp32"),
        C("gpt3-760m s1024 mb2 fp32", GPT760, 1024, 2, precision="fp32"),
        C("gpt3-1.3b s2048 mb1 bf16", GPT13, 2048, 1),
        C("gpt3-1.3b s2048 mb4 bf16", GPT13, 2048, 4),
        C("gpt3-1.3b s2048 mb4 bf16 full recompute", GPT13, 2048, 4, recompute="full"),
        C("gpt3-1.3b s2048 mb2 bf16, TP2 shard", GPT13, 2048, 2, tp=2),
        C("llama-1.1b s4096 mb1 bf16", LLAMA11, 4096, 1),
        C("llama-1.1b s4096 mb2 bf16 selective recompute", LLAMA11, 4096, 2, recompute="selective"),
        C("llama-1.1b s1024 mb4 bf16-master", LLAMA11, 1024, 4, precision="bf16-master"),
        C("gpt3-2.7b s2048 mb2 bf16, TP4 shard", GPT27, 2048, 2, tp=4),
        C("llama2-7b s4096 mb1 bf16, TP8 shard", LLAMA7, 4096, 1, tp=8),
        C("llama2-7b s4096 mb2 bf16 full recompute, TP8 shard", LLAMA7, 4096, 2, recompute="full", tp=8),
    ]  # fmt: skip


def smoke_cases() -> list[Case]:
    """Tiny models at seq 64 on the CPU: the same code path (profile, both estimates, runs, TP shard)."""
    C = Case
    return [
        C("gpt-small-cpu s64 mb2 fp32", GPT_CPU, 64, 2, precision="fp32"),
        C("gpt-small-cpu s64 mb4 fp32 full recompute", GPT_CPU, 64, 4, precision="fp32", recompute="full"),
        C("gpt-small-cpu s64 mb2 fp32, TP2 shard", GPT_CPU, 64, 2, precision="fp32", tp=2),
        C("llama-small-cpu s64 mb2 bf16", LLAMA_CPU, 64, 2),
    ]  # fmt: skip


# ----------------------------------------------------------------------------------------------- helpers
@dataclass
class Clock:
    budget_s: float
    t0: float

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.budget_s - self.elapsed()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _fresh(device: torch.device) -> None:
    """Between configurations: free cached blocks and reset the peak counter."""
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def _on_device(device: torch.device, fn: Any) -> Any:
    """``fn()`` with tensors created on ``device`` by default (a GPU initializes a 1.3B model in
    milliseconds, the host's cores in seconds); a failure that way is retried the normal way."""
    if device.type != "cuda":
        return fn()
    try:
        with torch.device(device):
            return fn()
    except torch.OutOfMemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - fall back to the library's own (CPU-side) build
        print(f"    (building under the device failed: {type(e).__name__}: {e}; building on the host)")
        _fresh(device)
        return fn()


@contextlib.contextmanager
def process_group(plan: Plan, device: torch.device) -> Iterator[str]:
    """World 1: a real process group as the launcher starts one (nccl on CUDA, gloo on CPU; on CUDA gloo if
    nccl will not start, else none — a world-1 step runs no collective). A TP shard: rank 0 of the plan's
    world under the ``fake`` backend (no peers; collectives do nothing). Yields the backend's name."""
    import torch.distributed as dist

    from tessera.nn.dtensor_tp import fake_process_group

    if plan.world_size > 1:
        with fake_process_group(plan.world_size, 0):
            yield "fake"
        return
    if dist.is_initialized():
        dist.destroy_process_group()
    backend = "none"
    for name in ("nccl", "gloo") if device.type == "cuda" else ("gloo",):
        try:
            dist.init_process_group(name, store=dist.HashStore(), rank=0, world_size=1)
            backend = name
            break
        except Exception as e:  # noqa: BLE001 - try the next backend
            print(f"    ({name} process group did not start: {type(e).__name__}: {e})")
    try:
        yield backend
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_plan(
    case: Case, plan: Plan, device: torch.device, *, warmup: int, steps: int, time_cap_s: float
) -> dict[str, Any]:
    """The plan's step on this device, as a worker runs rank 0: median ``iter_s`` after ``warmup`` steps
    (at least 3 timed steps, at most ``steps``, stopping early once ``time_cap_s`` of timed steps ran)."""
    from tessera.runtime.data import SyntheticData
    from tessera.runtime.engine import Trainer
    from tessera.runtime.options import RunOptions

    training = RunOptions(steps=warmup + steps).training()
    data = SyntheticData(0)
    threads = get_gpu(CPU_STAND_IN).threads if device.type == "cpu" else None
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)  # the stand-in device's fixed thread count
    t_build = time.perf_counter()
    try:
        with process_group(plan, device) as backend:
            trainer = _on_device(
                device,
                lambda: Trainer(
                    plan,
                    0,
                    case.model.factory(),
                    seed=0,
                    learning_rate=training.lr_at(0, warmup + steps),
                    device=device,
                    training=training,
                ),
            )
            _sync(device)
            build_s = time.perf_counter() - t_build
            times: list[float] = []
            computes: list[float] = []
            spent = 0.0
            for step in range(warmup + steps):
                torch.manual_seed(hash((0, step, 0, 0)) % (2**63))  # the worker's dropout seed
                inputs, targets = data.batch(trainer.stage.module, step, plan.global_batch, plan.seq_len)
                stats = trainer.step(
                    step, inputs, targets, learning_rate=training.lr_at(step, warmup + steps)
                )
                if step >= warmup:
                    times.append(stats.iter_s)
                    computes.append(stats.compute_s)
                    spent += stats.iter_s
                    if len(times) >= min(3, steps) and spent >= time_cap_s:
                        break
            peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
            trainer.close()
            del trainer
    finally:
        torch.set_num_threads(before)
    return {
        "measured_s": statistics.median(times),
        "measured_compute_s": statistics.median(computes),
        "steps_s": times,
        "build_s": build_s,
        "peak_memory_bytes": peak,
        "backend": backend,
    }


def profile_group(
    cases: list[Case],
    device: torch.device,
    cost_dir: Path,
    *,
    warmup: int,
    repeats: int,
    back_to_back: int | None = None,
) -> dict[str, Any]:
    """Profile the model of ``cases`` (one group) at the micro-batches, TP degrees and recompute variants
    they use, store it in ``cost_dir``; returns what was profiled and the equivalent CLI command."""
    c0 = cases[0]
    spec = c0.model.spec(c0.seq_len)
    mbs = sorted({c.micro_batch for c in cases})
    tps = sorted({c.tp for c in cases})
    rcs = tuple(dict.fromkeys(("none", *(c.recompute for c in cases))))
    cost = CostModel.load(cost_dir)
    t0 = time.perf_counter()
    run = _on_device(
        device,
        lambda: profile_layers(
            spec,
            micro_batches=mbs,
            tp_degrees=tps,
            precision=c0.precision,
            optimizer=c0.optimizer,
            device=device,
            device_type=CPU_STAND_IN if device.type == "cpu" else None,
            warmup=warmup,
            repeats=repeats,
            passes=1,
            recomputes=rcs,
            co_run=False,
            back_to_back=back_to_back,
        ),  # fmt: skip
    )
    _sync(device)
    seconds = time.perf_counter() - t0
    run.store(spec, cost.profile)
    cost.save(cost_dir)
    command = (
        f"python3 -m tessera profile layers --model {c0.model.zoo} --seq {c0.seq_len} "
        f"--micro-batch {','.join(map(str, mbs))} --tp {','.join(map(str, tps))} --precision {c0.precision} "
        f"--optimizer {c0.optimizer} --recompute {','.join(rcs)} --repeats {repeats} --passes 1 "
        f"--cost-dir {cost_dir}"
    )
    if c0.model.overrides:
        command += f"  # model: {c0.model.zoo} with {dict(c0.model.overrides)}"
    return {
        "model": c0.model.label, "seq_len": c0.seq_len, "precision": c0.precision, "optimizer": c0.optimizer,
        "micro_batches": mbs, "tp_degrees": tps, "recomputes": list(rcs), "device_type": run.device_type,
        "measurements": len(run.rows), "profile_s": seconds, "command": command,
        "rows": [asdict(r) for r in run.rows],
    }  # fmt: skip


def _estimates(case: Case, plan: Plan, cost: CostModel) -> dict[str, Any]:
    """Profiled and uncalibrated estimates; a TP shard compares the compute part (its collectives are
    the communication model's, and the fake process group runs none)."""
    spec = case.model.spec(case.seq_len)
    est = estimate_plan(plan, spec, cost=cost)
    unc = estimate_plan(plan, spec, cost=CostModel())

    def part(e: Any) -> float:
        return e.iteration_time_s - e.comm_s if case.tp > 1 else e.iteration_time_s

    return {
        "estimate_s": part(est),
        "uncalibrated_estimate_s": part(unc),
        "estimate_iteration_s": est.iteration_time_s,
        "estimate_comm_s": est.comm_s,
        "estimate_feasible": est.feasible,
        "uncalibrated_comm_s": unc.comm_s,
        "estimate_compute_s": est.compute_s,
        "estimate_optimizer_s": est.optimizer_s,
        "estimate_bubble_s": est.bubble_s,
        "estimate_stage_times_s": list(est.stage_times_s),
    }


def _accuracy(est: float, measured: float) -> float:
    return 1.0 - abs(est - measured) / measured


# -------------------------------------------------------------------------------------------------- main
def environment(device: torch.device) -> dict[str, Any]:
    env: dict[str, Any] = {"torch": torch.__version__, "device": str(device), "cpus": os.cpu_count()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        free, total = torch.cuda.mem_get_info(device)
        env.update(
            gpu=torch.cuda.get_device_name(device), memory_bytes=int(total), free_memory_bytes=int(free),
            cuda=torch.version.cuda, capability=f"{props.major}.{props.minor}",
        )  # fmt: skip
    else:
        env["gpu"] = None
    env["device_type"] = (
        device_type_of(device)
        if device.type == "cuda"
        else profile_device(CPU_STAND_IN, get_gpu(CPU_STAND_IN).threads)
    )
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--smoke", action="store_true", help="tiny models at seq 64, 4 plans (CPU check)")
    ap.add_argument(
        "--out", default=str(RESULTS), help="folder for gpu_estimate.json (--smoke: gpu_estimate_smoke.json)"
    )
    ap.add_argument("--budget-s", type=float, default=180.0, help="wall-clock budget for the whole script")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps per plan (3; smoke 1)")
    ap.add_argument("--steps", type=int, default=None, help="most timed steps per plan (8; smoke 3)")
    ap.add_argument(
        "--no-sync-compare", action="store_true", help="skip the one-pass-per-sync profiles (the old method)"
    )
    ap.add_argument("--only", default=None, help="run only cases whose label contains this text")
    args = ap.parse_args(argv)
    # from the command line the budget counts from the start of the imports; a call (tests) from here
    clock = Clock(args.budget_s, _T0 if argv is None else time.monotonic())
    args.warmup = args.warmup if args.warmup is not None else (1 if args.smoke else 3)
    args.steps = args.steps if args.steps is not None else (3 if args.smoke else 8)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch sees no CUDA device", file=sys.stderr)
        return 2
    device = (
        torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    )
    if device.type == "cuda":
        torch.cuda.set_device(device)  # as the worker does before its nccl group
    env = environment(device)
    print(json.dumps(env, indent=1), flush=True)
    gpu_type = env["device_type"] if device.type == "cuda" else CPU_STAND_IN
    if device.type == "cuda":
        try:
            get_gpu(gpu_type)
        except Exception as e:  # noqa: BLE001
            print(
                f"GPU {env['gpu']!r} has no catalog entry ({e}); add an alias to gpus.yaml", file=sys.stderr
            )
            return 2
    cases = smoke_cases() if args.smoke else gpu_cases()
    if args.only:
        cases = [c for c in cases if args.only in c.label]
    groups: dict[tuple, list[Case]] = {}
    for c in cases:
        groups.setdefault(c.group, []).append(c)
    prof_warmup, prof_repeats = (1, 3) if device.type == "cpu" else (2, 5)
    # a plan is started only with this much budget left, a group's profile with twice it
    reserve_s = 6.0 if device.type == "cpu" else 10.0
    time_cap_s = 1.0 if device.type == "cpu" else 2.0
    rows: list[dict[str, Any]] = []
    profiles: list[dict[str, Any]] = []
    truncated = False
    print(f"{len(cases)} plans in {len(groups)} profile groups on {gpu_type}", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="tessera-gpu-est-") as tmp,
        tempfile.TemporaryDirectory(prefix="tessera-gpu-est-sync-") as tmp_sync,
    ):
        cost_dir, sync_dir = Path(tmp), Path(tmp_sync)
        for key, members in groups.items():
            if clock.left() < 2 * reserve_s:
                truncated = True
                break
            print(f"[{clock.elapsed():6.1f}s] profiling {key}", flush=True)
            try:
                info = profile_group(members, device, cost_dir, warmup=prof_warmup, repeats=prof_repeats)
                profiles.append(info)
                print(f"    {info['measurements']} measurements in {info['profile_s']:.1f} s", flush=True)
            except Exception as e:  # noqa: BLE001 - one group's failure must not cost the run
                traceback.print_exc()
                profiles.append({"model": key[0], "seq_len": key[1], "error": f"{type(e).__name__}: {e}"})
                for c in members:
                    rows.append({"label": c.label, "error": f"profile: {type(e).__name__}: {e}"})
                _fresh(device)
                continue
            _fresh(device)
            # the old method beside it: one pass per sync (smoke: to exercise the path)
            if (device.type == "cuda" and not args.no_sync_compare) or args.smoke:
                try:
                    profile_group(
                        members, device, sync_dir, warmup=prof_warmup, repeats=prof_repeats, back_to_back=1
                    )
                except Exception:  # noqa: BLE001
                    traceback.print_exc()
                _fresh(device)
            cost = CostModel.load(cost_dir)  # the saved profiles, as `tessera estimate` reads them
            cost_sync = CostModel.load(sync_dir) if any(sync_dir.iterdir()) else None
            for c in members:
                if clock.left() < reserve_s:
                    truncated = True
                    break
                row = _row(c, info["command"], gpu_type, device, cost, args, time_cap_s, cost_sync)
                rows.append(row)
                _fresh(device)
            if truncated:
                break
    ok = [r for r in rows if "accuracy" in r]
    out = summary(ok, rows, truncated, clock, args, env, profiles, device)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    # a smoke run never overwrites the GPU's figures
    name = "gpu_estimate_smoke.json" if args.smoke else "gpu_estimate.json"
    (out_dir / name).write_text(json.dumps(out, indent=2))
    print_table(out)
    return 0


def _row(
    c: Case,
    command: str,
    gpu_type: str,
    device: torch.device,
    cost: CostModel,
    args: Any,
    time_cap_s: float,
    cost_sync: CostModel | None = None,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "label": c.label, "model": c.model.label, "zoo": c.model.zoo, "seq_len": c.seq_len,
        "micro_batch": c.micro_batch, "micro_batches": c.micro_batches, "precision": c.precision,
        "recompute": c.recompute, "tp_shard": c.tp, "optimizer": c.optimizer, "command": command,
    }  # fmt: skip
    try:
        plan = c.plan(gpu_type)
        row["params"] = c.model.spec(c.seq_len).params
        row.update(_estimates(c, plan, cost))
        row.update(run_plan(c, plan, device, warmup=args.warmup, steps=args.steps, time_cap_s=time_cap_s))
        row["accuracy"] = _accuracy(row["estimate_s"], row["measured_s"])
        row["uncalibrated_accuracy"] = _accuracy(row["uncalibrated_estimate_s"], row["measured_s"])
        if cost_sync is not None:
            row["sync_estimate_s"] = _estimates(c, plan, cost_sync)["estimate_s"]
            row["sync_accuracy"] = _accuracy(row["sync_estimate_s"], row["measured_s"])
        print(
            f"    {c.label:<52} est {row['estimate_s'] * 1e3:8.2f} ms  measured {row['measured_s'] * 1e3:8.2f} ms"
            f"  acc {row['accuracy']:.3f}  uncal {row['uncalibrated_estimate_s'] * 1e3:8.2f} ms",
            flush=True,
        )
    except Exception as e:  # noqa: BLE001 - an OOM or a missing kernel must not cost the run
        traceback.print_exc()
        row["error"] = f"{type(e).__name__}: {e}"[:500]
        print(f"    {c.label:<52} ERROR {row['error']}", flush=True)
    return row


def summary(
    ok: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    truncated: bool,
    clock: Clock,
    args: Any,
    env: dict[str, Any],
    profiles: list[dict[str, Any]],
    device: torch.device,
) -> dict[str, Any]:
    accs = [r["accuracy"] for r in ok]
    uaccs = [r["uncalibrated_accuracy"] for r in ok]
    saccs = [r["sync_accuracy"] for r in ok if "sync_accuracy" in r]
    return {
        "gpu": env.get("gpu"),
        "torch": torch.__version__,
        "device": str(device),
        "device_type": env["device_type"],
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "plans": len(ok),
        "plans_failed": len(rows) - len(ok),
        "mean_accuracy": statistics.fmean(accs) if accs else None,
        "worst_accuracy": min(accs) if accs else None,
        "uncalibrated_mean_accuracy": statistics.fmean(uaccs) if uaccs else None,
        "uncalibrated_worst_accuracy": min(uaccs) if uaccs else None,
        # profiles timed one pass per synchronization (the method before back-to-back timing on GPUs)
        "sync_mean_accuracy": statistics.fmean(saccs) if saccs else None,
        "sync_worst_accuracy": min(saccs) if saccs else None,
        "targets": {"mean_accuracy": 0.95, "worst_accuracy": 0.90, "plans": 20},
        "truncated": truncated,
        "budget_s": args.budget_s,
        "elapsed_s": clock.elapsed(),
        "smoke": args.smoke,
        "warmup_steps": args.warmup,
        "max_timed_steps": args.steps,
        "environment": env,
        "profiles": profiles,
        "rows": rows,
    }


def print_table(out: dict[str, Any]) -> None:
    print()
    print(f"{'plan':<54} {'est ms':>9} {'meas ms':>9} {'acc':>6} {'uncal ms':>9} {'uacc':>6}")
    for r in out["rows"]:
        if "accuracy" not in r:
            print(f"{r['label']:<54} ERROR {r.get('error', '')[:60]}")
            continue
        print(
            f"{r['label']:<54} {r['estimate_s'] * 1e3:9.2f} {r['measured_s'] * 1e3:9.2f} {r['accuracy']:6.3f}"
            f" {r['uncalibrated_estimate_s'] * 1e3:9.2f} {r['uncalibrated_accuracy']:6.3f}"
        )

    def f(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    print(
        f"\n{out['gpu'] or out['device']}: {out['plans']} plans ({out['plans_failed']} failed)"
        f"{' TRUNCATED' if out['truncated'] else ''} in {out['elapsed_s']:.0f} s — "
        f"mean accuracy {f(out['mean_accuracy'])}, worst {f(out['worst_accuracy'])} "
        f"(targets 0.95 / 0.90); uncalibrated mean {f(out['uncalibrated_mean_accuracy'])}, "
        f"worst {f(out['uncalibrated_worst_accuracy'])}; one pass per sync: mean {f(out['sync_mean_accuracy'])}, "
        f"worst {f(out['sync_worst_accuracy'])}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
