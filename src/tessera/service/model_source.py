"""Where a job's model comes from: the zoo, a Hugging Face config, or the user's own ``nn.Module`` (entrypoint).

The planner needs an analytic ModelSpec; the runtime needs a picklable factory that builds any layer range on
a worker. For an entrypoint both come from the user's code: the factory imports it on the worker
(:class:`EntrypointModel` carries only the ``source:attribute`` string), and the spec is traced from the
module on meta tensors (``tessera.nn.trace``), so a user model is planned exactly like a zoo model.

The user's code never runs in the server: :func:`entrypoint_info` has a short-lived child process
(:mod:`tessera.service.user_code`, with a timeout and a memory limit) import and trace it and hand back plain
JSON — the ModelSpec, each layer's TaskGraph, the annotations' stage count — cached by the file's content.
:func:`model_spec`, :func:`annotated`, :func:`annotation_stage_count` and :func:`entrypoint_plan` work from
that; :func:`entrypoint_module` is a stand-in module with the same layers and annotations. Only the workers
import the user's code for real (:class:`EntrypointModel`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import threading
from dataclasses import asdict, dataclass, field, fields, replace
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from tessera.jobs import JobSpec


class ModelSourceError(ValueError):
    """A job's model cannot be loaded; ``field`` names the spec field to fix."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def _module_from_file(path: Path) -> Any:
    """Import a .py file once per process under a stable name (so pickled references resolve on workers)."""
    name = "tessera_user_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load_entrypoint(target: str) -> Any:
    """The callable named by ``source:attribute``: a class is instantiated with no arguments when it is a
    factory (not an ``nn.Module``), an ``nn.Module`` subclass is used as its own factory."""
    from torch import nn

    source, _, attr = target.rpartition(":")
    if source.endswith(".py"):
        path = Path(source)
        if not path.is_file():
            raise ModelSourceError(
                "entrypoint", f"no such file {source!r} (paths are resolved on the server)"
            )
        try:
            module = _module_from_file(path.resolve())
        except Exception as e:
            raise ModelSourceError(
                "entrypoint", f"importing {source} failed: {type(e).__name__}: {e}"
            ) from None
    else:
        try:
            module = importlib.import_module(source)
        except Exception as e:
            raise ModelSourceError(
                "entrypoint", f"importing {source} failed: {type(e).__name__}: {e}"
            ) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ModelSourceError("entrypoint", f"{source} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if isinstance(obj, type) and not issubclass(obj, nn.Module):
        try:
            obj = obj()
        except TypeError as e:
            raise ModelSourceError(
                "entrypoint", f"{attr} must be constructible without arguments: {e}"
            ) from None
    if not callable(obj):
        raise ModelSourceError("entrypoint", f"{attr} is not callable")
    return obj


@dataclass(frozen=True)
class EntrypointModel:
    """The runtime's ModelFactory for a user model: imports ``target`` wherever it is called (a worker)."""

    target: str

    def __call__(
        self, *, layer_range: tuple[int, int] | None, tp: Any, attention: str, recompute: str
    ) -> Any:
        build = load_entrypoint(self.target)
        return build(layer_range=layer_range, tp=tp, attention=attention, recompute=recompute)


def factory_for(job: JobSpec) -> Any:
    """What the runtime builds the model from (None: the zoo model the Plan names)."""
    return EntrypointModel(job.entrypoint) if job.entrypoint else None


def seq_len_for(job: JobSpec) -> int | None:
    return job.seq_len if job.seq_len is not None else (1 if job.entrypoint else None)


def build_entrypoint_module(entrypoint: str) -> Any:
    """The user's whole model built on the meta device (shapes and Whale annotations, no memory). This runs
    the user's code: only in the short-lived child of :mod:`tessera.service.user_code` (or a worker)."""
    import torch

    factory = EntrypointModel(entrypoint)
    try:
        with torch.device("meta"):
            module = factory(layer_range=None, tp=None, attention="flash", recompute="none")
    except ModelSourceError:
        raise
    except Exception as e:
        raise ModelSourceError("entrypoint", f"building the model failed: {type(e).__name__}: {e}") from None
    if not isinstance(getattr(module, "layers", None), torch.nn.ModuleList | torch.nn.Sequential):
        raise ModelSourceError(
            "entrypoint", "the model needs its blocks as `self.layers = nn.ModuleList([...])`"
        )
    for needed in ("loss", "make_batch"):
        if not callable(getattr(module, needed, None)):
            raise ModelSourceError(
                "entrypoint", f"the model has no .{needed}() method (see the job spec docs)"
            )
    return module


def inspect_entrypoint(entrypoint: str, model: str, seq_len: int) -> dict[str, Any]:
    """Everything the server needs of a user model, as plain JSON data: its ModelSpec (traced on meta
    tensors), each layer's TaskGraph and the stage count its annotations make. Runs the user's code, so it
    is called in the child process only (``tessera.service.user_code``)."""
    from tessera.nn.trace import trace_spec
    from tessera.runtime.annotations import _groups, current_config, taskgraph_of

    module = build_entrypoint_module(entrypoint)
    try:
        example, _ = module.make_batch(
            1, seq_len
        )  # outside the meta context: any device works, shapes matter
        spec = _with_auto_split(trace_spec(module, seq_len, name=model, example_input=example), module)
    except (TypeError, ValueError) as e:
        raise ModelSourceError("entrypoint", str(e)) from None
    except Exception as e:
        raise ModelSourceError("entrypoint", f"tracing the model failed: {type(e).__name__}: {e}") from None
    tgs = [taskgraph_of(layer) for layer in module.layers]
    stage_count = None
    if any(t is not None for t in tgs):
        try:
            stage_count = len(_groups(module, current_config()))
        except ValueError as e:
            raise ModelSourceError("entrypoint", str(e)) from None
    return {
        "spec": spec_to_json(spec),
        "taskgraphs": [
            None if t is None else {"index": t.index, "kind": t.kind, "device_count": t.device_count}
            for t in tgs
        ],
        "stage_count": stage_count,
    }


def _with_auto_split(spec: Any, module: Any) -> Any:
    """The spec with each layer the runtime cuts by itself under TP (plain code: Whale's split,
    :mod:`tessera.runtime.auto_tp`) priced as column-sharded, so the estimate prices what runs."""
    from dataclasses import replace

    from tessera.models.spec import TPShard
    from tessera.runtime.auto_tp import split_units

    layers = list(spec.layers)
    for i, (layer, nn_layer) in enumerate(zip(layers, module.layers, strict=True)):
        units = split_units(nn_layer) if layer.tp_shard == TPShard.REPLICATED else None
        if units is not None:
            layers[i] = replace(layer, tp_shard=TPShard.COLUMNS, tp_units=units)
    return replace(spec, layers=tuple(layers))


# ------------------------------------------------------------------------ ModelSpec <-> JSON (no pickle)
def spec_to_json(spec: Any) -> dict[str, Any]:
    """A ModelSpec as JSON data: the child hands it to the server this way, never pickled (unpickling what
    user code could have written would run code in the server)."""
    from tessera.models.spec import ConvArch, TransformerArch

    arch = spec.arch
    arch_json = None
    if isinstance(arch, TransformerArch | ConvArch):
        arch_json = {"type": "transformer" if isinstance(arch, TransformerArch) else "conv", **asdict(arch)}
    return {
        "name": spec.name,
        "family": spec.family,
        "seq_len": spec.seq_len,
        "layers": [{**asdict(layer), "tp_shard": str(layer.tp_shard)} for layer in spec.layers],
        "arch": arch_json,
        "meta": {str(k): str(v) for k, v in spec.meta.items()},
    }


def _typed(cls: type, data: Any) -> Any:
    """``cls(**data)`` with every field checked against its annotation (int, float, str, bool, enum)."""
    import math
    import typing

    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__}: expected an object")
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        v, t = data[f.name], hints[f.name]
        if t is bool:
            ok = isinstance(v, bool)
        elif t is int:
            ok = isinstance(v, int) and not isinstance(v, bool)
        elif t is float:
            ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            v = float(v) if ok else v
        elif t is str:
            ok = isinstance(v, str)
        elif isinstance(t, type) and issubclass(t, Enum):
            v = t(v)
            ok = True
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: unsupported field type {t}")
        if not ok:
            raise TypeError(f"{cls.__name__}.{f.name}: {v!r} is not a {t.__name__}")
        out[f.name] = v
    return cls(**out)


def spec_from_json(data: Any) -> Any:
    from tessera.models.spec import ConvArch, Layer, ModelSpec, TransformerArch

    if not isinstance(data, dict) or not isinstance(data.get("layers"), list):
        raise TypeError("ModelSpec: expected an object with layers")
    arch = data.get("arch")
    if arch is not None:
        kinds = {"transformer": TransformerArch, "conv": ConvArch}
        cls = kinds.get(arch.get("type")) if isinstance(arch, dict) else None
        if cls is None:
            raise TypeError("ModelSpec.arch: unknown type")
        arch = _typed(cls, arch)
    meta = data.get("meta") or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise TypeError("ModelSpec.meta: expected strings")
    _typed(_SpecHead, {k: data.get(k) for k in ("name", "family", "seq_len")})
    spec = ModelSpec(
        name=data["name"],
        family=data["family"],
        seq_len=data["seq_len"],
        layers=tuple(_typed(Layer, layer) for layer in data["layers"]),
        arch=arch,
        meta={str(k): v for k, v in meta.items()},
    )
    return spec


@dataclass(frozen=True)
class _SpecHead:
    name: str
    family: str
    seq_len: int


# ------------------------------------------------------------------ user code, out of the server's process
@dataclass(frozen=True)
class TaskGraphInfo:
    """A layer's TaskGraph as the user's annotations made it (index, replicate/split, device count)."""

    index: int
    kind: Literal["replicate", "split"]
    device_count: int | None


@dataclass(frozen=True)
class EntrypointInfo:
    """What the server knows of a user model, found in a child process: plain data, no user code.

    ``stub`` is a stand-in module with as many layers, annotated as the user's layers are (identity layers
    registered under the same replicate/split TaskGraphs), so the annotation planner reads it exactly as it
    would read the user's model."""

    spec: Any  # ModelSpec
    taskgraphs: tuple[TaskGraphInfo | None, ...]
    stage_count: int | None  # pipeline stages the annotations make (None: not annotated)
    stub: Any = field(compare=False, repr=False, default=None)

    @property
    def annotated(self) -> bool:
        return any(t is not None for t in self.taskgraphs)


def _info_from(data: Any) -> EntrypointInfo:
    """The child's answer checked field by field (what user code may have written is only data)."""
    try:
        spec = spec_from_json(data["spec"])
        tgs: list[TaskGraphInfo | None] = []
        for t in data["taskgraphs"]:
            if t is None:
                tgs.append(None)
                continue
            if t.get("kind") not in ("replicate", "split"):
                raise TypeError("taskgraph kind")
            index, dc = t.get("index"), t.get("device_count")
            if not isinstance(index, int) or isinstance(index, bool):
                raise TypeError("taskgraph index")
            if dc is not None and (not isinstance(dc, int) or isinstance(dc, bool) or dc < 1):
                raise TypeError("taskgraph device_count")
            tgs.append(TaskGraphInfo(index, t["kind"], dc))
        if len(tgs) != spec.n_layers:
            raise ValueError("one TaskGraph entry per layer")
        stages = data["stage_count"]
        if stages is not None and (not isinstance(stages, int) or isinstance(stages, bool) or stages < 1):
            raise TypeError("stage_count")
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ModelSourceError("entrypoint", f"the model check returned malformed data ({e})") from None
    info = EntrypointInfo(spec, tuple(tgs), stages if any(tgs) else None)
    return replace(info, stub=_stub_module(info.taskgraphs))


_STUB_LOCK = threading.Lock()


def _stub_module(taskgraphs: tuple[TaskGraphInfo | None, ...]) -> Any:
    from torch import nn

    from tessera.runtime.annotations import replicate, split

    layers = [nn.Identity() for _ in taskgraphs]
    holder = nn.Module()
    by_graph: dict[int, list[int]] = {}
    for i, t in enumerate(taskgraphs):
        if t is not None:
            by_graph.setdefault(t.index, []).append(i)
    with _STUB_LOCK:  # the annotation scopes are process-global: one stand-in at a time
        for members in by_graph.values():
            t = taskgraphs[members[0]]
            assert t is not None
            with (replicate if t.kind == "replicate" else split)(t.device_count):
                for i in members:
                    holder.add_module(f"layer{i}", layers[i])  # registration under the scope annotates it
    stub = nn.Module()
    stub.layers = nn.ModuleList(layers)
    return stub


@dataclass(frozen=True)
class UserCodeLimits:
    """How long and how much memory the child that checks a user model may take."""

    timeout_s: float = 120.0
    memory_bytes: int = 4 << 30


_limits = UserCodeLimits()
_INFO: dict[tuple[Any, ...], EntrypointInfo | ModelSourceError] = {}
_LOCKS: dict[tuple[Any, ...], threading.Lock] = {}
_GUARD = threading.Lock()
_CACHE_SIZE = 256


def set_limits(limits: UserCodeLimits) -> None:
    """The server's limits for checking user code (``ServiceConfig.user_code_timeout_s`` / ``_memory_bytes``)."""
    global _limits
    _limits = limits


def _cache_key(job: JobSpec) -> tuple[Any, ...]:
    """(entrypoint, content hash of its .py file, model name, seq_len): what the child's answer depends on.
    Looking a module up finds it without importing it, so a typo costs no child process."""
    assert job.entrypoint
    source = job.entrypoint.rpartition(":")[0]
    digest = None
    if source.endswith(".py"):
        path = Path(source)
        if not path.is_file():
            raise ModelSourceError(
                "entrypoint", f"no such file {source!r} (paths are resolved on the server)"
            )
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as e:
            raise ModelSourceError("entrypoint", f"cannot read {source}: {e.strerror}") from None
    else:
        top = source.split(".")[0]
        try:
            found = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ModelSourceError("entrypoint", f"importing {source} failed: no module named {top!r}")
    return (job.entrypoint, digest, job.model, seq_len_for(job) or 1)


def entrypoint_info(job: JobSpec) -> EntrypointInfo:
    """The user model's spec and annotations, from a child process (cached by file content and the spec
    fields they depend on; a failure is cached too, a timeout is not: a busy machine may pass next time)."""
    from tessera.service.user_code import UserCodeTimeout, run_user_code

    key = _cache_key(job)
    hit = _INFO.get(key)
    if hit is None:
        with _GUARD:
            lock = _LOCKS.setdefault(key, threading.Lock())
        with lock:  # one child per model at a time; the others wait for its answer
            hit = _INFO.get(key)
            if hit is None:
                request = {"entrypoint": job.entrypoint, "model": job.model, "seq_len": key[3]}
                try:
                    answer = run_user_code(
                        request, timeout_s=_limits.timeout_s, memory_bytes=_limits.memory_bytes
                    )
                    if answer.get("ok") is True:
                        hit = _info_from(answer)
                    else:
                        hit = ModelSourceError(
                            "entrypoint", str(answer.get("reason", "the model check failed"))
                        )
                except UserCodeTimeout as e:
                    raise ModelSourceError("entrypoint", str(e)) from None
                except ModelSourceError as e:
                    hit = e
                with _GUARD:
                    while len(_INFO) >= _CACHE_SIZE:
                        _INFO.pop(next(iter(_INFO)))
                    _INFO[key] = hit
                    _LOCKS.pop(key, None)
    if isinstance(hit, ModelSourceError):
        raise ModelSourceError(hit.field, hit.reason)
    return hit


def entrypoint_module(job: JobSpec) -> Any:
    """A stand-in for the user's model with its layer count and annotations (no user code runs here)."""
    return entrypoint_info(job).stub


def annotated(job: JobSpec) -> bool:
    """Whether the entrypoint's model carries replicate/split annotations (then they shape its Plan)."""
    return job.entrypoint is not None and entrypoint_info(job).annotated


def annotation_stage_count(job: JobSpec) -> int | None:
    """Pipeline stages (TaskGraphs) the user model's annotations make; None for a zoo/HF or unannotated
    model."""
    if not job.entrypoint:
        return None
    info = entrypoint_info(job)
    return info.stage_count if info.annotated else None


def entrypoint_plan(job: JobSpec, devices: Any, n_stages: int, seq_len: int) -> Any:
    """The Plan of a user model on ``devices`` (rank order): its Whale annotations when it has them, else
    ``n_stages`` data-parallel TaskGraphs (pipeline stages). Either way Whale's hardware-aware balance gives
    faster GPU types larger batch shares. Never tensor parallelism the model did not ask for: a user's layers
    are not known to shard. Planned on the stand-in module: the user's code does not run here."""
    from tessera.hardware import get_gpu
    from tessera.runtime.annotations import Config, plan_from_annotations

    info = entrypoint_info(job)
    S = 1 if info.annotated else n_stages
    precision = job.precision
    flops = {d.gpu_type: get_gpu(d.gpu_type).peak_flops(precision) for d in devices}
    micro = max(1, min(job.global_batch, 2 * n_stages if n_stages > 1 else 1))
    return plan_from_annotations(
        info.stub, list(devices), model_name=job.model, global_batch=job.global_batch, seq_len=seq_len,
        config=Config(num_micro_batch=micro, num_task_graph=S), device_flops=flops, precision=precision,
        optimizer=job.optimizer, recompute="none" if job.recompute == "auto" else job.recompute,
    )  # fmt: skip


def model_spec(job: JobSpec):
    """The analytic ModelSpec the planner needs (zoo, Hugging Face config, or traced from the entrypoint in
    a child process)."""
    if not job.entrypoint:
        from tessera.nn.resolve import resolve_spec

        try:
            return resolve_spec(job.model, job.seq_len)
        except (KeyError, ValueError) as e:
            raise ModelSourceError(
                "model", e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            ) from None
    return entrypoint_info(job).spec


def check_data(job: JobSpec) -> None:
    if isinstance(job.data, str) and not Path(job.data).is_file():
        raise ModelSourceError("data", f"no such text file {job.data!r} (paths are resolved on the server)")
    if job.data is not None and not isinstance(job.data, str):
        from tessera.runtime.data import data_source
        from tessera.runtime.dataset import DataError

        try:  # the files exist and a tokenizer is named or the model folder has one (nothing is read yet)
            data_source(job.data_options(), seed=job.seed, model=job.model).check()  # type: ignore[union-attr]
        except DataError as e:
            field, _, reason = str(e).partition(": ")
            raise ModelSourceError(field, f"{reason} (paths are resolved on the server)") from None


def vocab_of(spec: Any) -> int:
    return int(getattr(getattr(spec, "arch", None), "vocab", 256) or 256)
