"""Where a job's model comes from: the zoo, a Hugging Face config, or the user's own ``nn.Module`` (entrypoint).

The planner needs an analytic ModelSpec; the runtime needs a picklable factory that builds any layer range on
a worker. For an entrypoint both come from the user's code: the factory imports it on the worker
(:class:`EntrypointModel` carries only the ``source:attribute`` string), and the spec is traced from the
module on meta tensors (``tessera.models.trace``), so a user model is planned exactly like a zoo model.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


_MODULES: dict[str, Any] = {}


def entrypoint_module(job: JobSpec) -> Any:
    """The user's whole model built on the meta device (cached): shapes and Whale annotations, no memory."""
    assert job.entrypoint
    if job.entrypoint not in _MODULES:
        import torch

        factory = EntrypointModel(job.entrypoint)
        try:
            with torch.device("meta"):
                module = factory(layer_range=None, tp=None, attention="flash", recompute="none")
        except ModelSourceError:
            raise
        except Exception as e:
            raise ModelSourceError(
                "entrypoint", f"building the model failed: {type(e).__name__}: {e}"
            ) from None
        if not isinstance(getattr(module, "layers", None), torch.nn.ModuleList | torch.nn.Sequential):
            raise ModelSourceError(
                "entrypoint", "the model needs its blocks as `self.layers = nn.ModuleList([...])`"
            )
        for needed in ("loss", "make_batch"):
            if not callable(getattr(module, needed, None)):
                raise ModelSourceError(
                    "entrypoint", f"the model has no .{needed}() method (see the job spec docs)"
                )
        _MODULES[job.entrypoint] = module
    return _MODULES[job.entrypoint]


def annotated(job: JobSpec) -> bool:
    """Whether the entrypoint's model carries replicate/split annotations (then they shape its Plan)."""
    from tessera.runtime.annotations import layer_taskgraphs

    return job.entrypoint is not None and any(t is not None for t in layer_taskgraphs(entrypoint_module(job)))


def entrypoint_plan(job: JobSpec, devices: Any, n_stages: int, seq_len: int) -> Any:
    """The Plan of a user model on ``devices`` (rank order): its Whale annotations when it has them, else
    ``n_stages`` data-parallel TaskGraphs (pipeline stages). Either way Whale's hardware-aware balance gives
    faster GPU types larger batch shares. Never tensor parallelism the model did not ask for: a user's layers
    are not known to shard."""
    from tessera.hardware import get_gpu
    from tessera.runtime.annotations import Config, plan_from_annotations

    module = entrypoint_module(job)
    S = 1 if annotated(job) else n_stages
    precision = job.precision
    flops = {d.gpu_type: get_gpu(d.gpu_type).peak_flops(precision) for d in devices}
    micro = max(1, min(job.global_batch, 2 * n_stages if n_stages > 1 else 1))
    return plan_from_annotations(
        module, list(devices), model_name=job.model, global_batch=job.global_batch, seq_len=seq_len,
        config=Config(num_micro_batch=micro, num_task_graph=S), device_flops=flops, precision=precision,
        optimizer=job.optimizer, recompute="none" if job.recompute == "auto" else job.recompute,
    )  # fmt: skip


def model_spec(job: JobSpec):
    """The analytic ModelSpec the planner needs (zoo, Hugging Face config, or traced from the entrypoint)."""
    if not job.entrypoint:
        from tessera.models.resolve import resolve_spec

        try:
            return resolve_spec(job.model, job.seq_len)
        except (KeyError, ValueError) as e:
            raise ModelSourceError(
                "model", e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            ) from None
    from tessera.models.trace import trace_spec

    module = entrypoint_module(job)
    seq = seq_len_for(job) or 1
    try:
        example, _ = module.make_batch(1, seq)  # outside the meta context: any device works, shapes matter
        return trace_spec(module, seq, name=job.model, example_input=example)
    except (TypeError, ValueError) as e:
        raise ModelSourceError("entrypoint", str(e)) from None
    except Exception as e:
        raise ModelSourceError("entrypoint", f"tracing the model failed: {type(e).__name__}: {e}") from None


def check_data(job: JobSpec) -> None:
    if job.data is not None and not Path(job.data).is_file():
        raise ModelSourceError("data", f"no such text file {job.data!r} (paths are resolved on the server)")


def vocab_of(spec: Any) -> int:
    return int(getattr(getattr(spec, "arch", None), "vocab", 256) or 256)
