"""JobSpec: the versioned YAML/JSON job spec every command reads. It says *what* to train, never on which GPUs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tessera.errors import validation_message

JOBSPEC_VERSION = 1

# Fields users reach for that Tessera decides itself; each gets a pointed error instead of "extra field".
_FORBIDDEN = {
    "gpus": "Tessera chooses GPU types and counts; use max_gpus / gpu_types / exclude_gpu_types to constrain it",
    "num_gpus": "Tessera chooses the GPU count; use max_gpus to cap it",
    "gpu_count": "Tessera chooses the GPU count; use max_gpus to cap it",
    "devices": "a job spec never assigns devices; Tessera places the job",
    "plan": "a job spec never carries a plan; `tessera plan` or the scheduler makes one",
}


class JobSpecError(ValueError):
    """One line: the source, the field and the reason."""


class JobSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = JOBSPEC_VERSION
    name: str = Field(default="job", min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$")
    model: str = Field(min_length=1, description="zoo model name, or a path to a Hugging Face config.json")
    global_batch: int = Field(ge=1, description="samples per optimizer step")
    seq_len: int | None = Field(default=None, ge=1, description="tokens per sample; default: the model's")
    steps: int | None = Field(default=None, ge=1)
    samples: int | None = Field(default=None, ge=1)
    optimizer: Literal["adamw", "adam", "sgd"] = "adamw"
    precision: Literal["fp32", "bf16", "fp16", "bf16-master"] = "bf16"
    recompute: Literal["auto", "none", "selective", "full"] = "auto"
    learning_rate: float = Field(default=3e-4, gt=0)
    deadline_s: float | None = Field(default=None, gt=0, description="seconds after submission")
    priority: int = Field(default=0, ge=-100, le=100)
    gpu_types: tuple[str, ...] = Field(default=(), description="preferred GPU types, best first")
    exclude_gpu_types: tuple[str, ...] = ()
    max_gpus: int | None = Field(default=None, ge=1)
    seed: int = 0

    @model_validator(mode="before")
    @classmethod
    def _no_gpu_assignment(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, why in _FORBIDDEN.items():
                if key in data:
                    raise ValueError(f"field {key!r} is not allowed: {why}")
        return data

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str) -> str:
        """A zoo name (nearest matches on a typo) or a Hugging Face config.json path, checked at parse time."""
        from tessera.models.resolve import is_config_path
        from tessera.models.zoo import get_arch

        if is_config_path(v):
            return v
        try:
            get_arch(v)
        except KeyError as e:
            raise ValueError(e.args[0] if e.args else str(e)) from None
        return v

    @field_validator("gpu_types", "exclude_gpu_types")
    @classmethod
    def _known_gpus(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        from tessera.hardware import get_gpu

        try:
            return tuple(get_gpu(name).name for name in v)
        except KeyError as e:
            raise ValueError(str(e)) from None

    @model_validator(mode="after")
    def _work_and_preferences(self) -> JobSpec:
        if (self.steps is None) == (self.samples is None):
            raise ValueError("give exactly one of steps or samples (the amount of work)")
        clash = set(self.gpu_types) & set(self.exclude_gpu_types)
        if clash:
            raise ValueError(f"GPU types both preferred and excluded: {', '.join(sorted(clash))}")
        return self

    @property
    def total_steps(self) -> int:
        if self.steps is not None:
            return self.steps
        assert self.samples is not None
        return -(-self.samples // self.global_batch)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", exclude_defaults=False), sort_keys=False)


def parse_job(data: Any, source: str = "job spec") -> JobSpec:
    if not isinstance(data, dict):
        raise JobSpecError(f"{source}: expected a mapping of fields, got {type(data).__name__}")
    try:
        return JobSpec.model_validate(data)
    except ValidationError as e:
        raise JobSpecError(validation_message(source, e)) from None


def load_job(path: str | Path) -> JobSpec:
    """Read a job spec from YAML or JSON; relative model paths resolve against the spec's folder."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise JobSpecError(f"{path}: cannot read: {e.strerror}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        raise JobSpecError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {e}") from None
    if isinstance(data, dict) and isinstance(data.get("model"), str) and data["model"].endswith(".json"):
        candidate = path.parent / data["model"]
        if candidate.is_file():
            data = {**data, "model": str(candidate)}
    return parse_job(data, str(path))
