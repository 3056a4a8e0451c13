"""The service's :class:`~tessera.scheduler.speed.ModelSource`: zoo and Hugging Face models as the simulator
finds them, plus users' own models (entrypoints) through :mod:`tessera.service.model_source`, which inspects
user code outside the server process. The speed source is the simulator's; only where models come from
differs."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from tessera.jobs import JobSpec
from tessera.plan import Device, Plan
from tessera.scheduler.speed import config_of
from tessera.scheduler.state import JobConfig
from tessera.service import model_source


class ServiceModels:
    """Answers for a configuration from the job spec it came from (registered by the adapter)."""

    def __init__(self) -> None:
        self._specs: dict[JobConfig, JobSpec] = {}
        self._lock = threading.Lock()

    def register(self, spec: JobSpec) -> JobConfig:
        """Remember ``spec`` as its configuration's source; returns the configuration."""
        config = config_of(spec)
        with self._lock:
            self._specs.setdefault(config, spec)
        return config

    def job_spec(self, config: JobConfig) -> JobSpec:
        """A job spec of this configuration (one registered, else one rebuilt from the configuration)."""
        with self._lock:
            spec = self._specs.get(config)
        if spec is None:
            spec = JobSpec(
                name="speed", model=config.model, entrypoint=config.entrypoint, global_batch=config.global_batch,
                seq_len=config.seq_len, precision=config.precision, optimizer=config.optimizer,
                recompute=config.recompute, gpu_types=config.gpu_types,
                exclude_gpu_types=config.exclude_gpu_types, max_gpus=config.max_gpus, steps=1,
            )  # type: ignore[arg-type]  # fmt: skip
        return spec

    def spec(self, config: JobConfig) -> Any:
        return model_source.model_spec(self.job_spec(config))

    def annotation_stage_count(self, config: JobConfig) -> int | None:
        return model_source.annotation_stage_count(self.job_spec(config))

    def entry_plan(self, config: JobConfig, devices: Sequence[Device], n_stages: int, seq_len: int) -> Plan:
        return model_source.entrypoint_plan(self.job_spec(config), list(devices), n_stages, seq_len)


__all__ = ["ServiceModels"]
