"""JobSpec: the versioned YAML/JSON job spec every command reads. It says *what* to train, never on which GPUs."""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

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


# ``path/to/model.py:Factory`` or ``package.module:build``: where a user's own nn.Module comes from.
_ENTRYPOINT = re.compile(r"^(?P<source>[^:]+?):(?P<attr>[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*)$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class JobSpecError(ValueError):
    """One line: the source, the field and the reason."""


# Numbers are strict (a JSON ``"10"`` or ``true`` is not a step count) and finite (``NaN``, ``Infinity`` and
# ``1e309``, which JSON parsers read as inf, are refused naming the field): pydantic's lax mode would coerce them.
_INT = {"strict": True}
_FLOAT = {"strict": True, "allow_inf_nan": False}


class DataSpec(BaseModel):
    """A local dataset read through ``datasets``, tokenized once (cached on disk), packed into ``seq_len``
    sequences and shuffled by the job's seed, with an optional held-out validation split."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(
        min_length=1,
        description="a .jsonl/.json/.parquet/.txt file, a directory of such files, or a directory written by "
        "`datasets.Dataset.save_to_disk`",
    )
    format: Literal["auto", "jsonl", "json", "parquet", "text", "arrow"] = Field(
        default="auto", description="auto: from the file suffixes (a save_to_disk directory: arrow)"
    )
    text_field: str = Field(default="text", min_length=1, description="the column holding the text")
    tokenizer: str | None = Field(
        default=None,
        min_length=1,
        description="a tokenizer directory (`save_pretrained`) or tokenizer.json, or `bytes` (byte-level ids); "
        "default: the model directory's",
    )
    val_fraction: float = Field(
        default=0.0, ge=0.0, lt=1.0, description="share of the packed sequences held out", **_FLOAT
    )
    val_samples: int | None = Field(
        default=None, ge=1, description="held-out sequences (instead of val_fraction)", **_INT
    )
    val_every_steps: int | None = Field(
        default=None, ge=1, description="steps between validation losses (default: ~10 per run)", **_INT
    )
    cache_dir: str | None = Field(
        default=None,
        min_length=1,
        description="where tokenized data is cached (default: $TESSERA_HOME/datasets or "
        "~/.cache/tessera/datasets)",
    )

    @model_validator(mode="after")
    def _one_val_size(self) -> DataSpec:
        if self.val_samples is not None and self.val_fraction > 0:
            raise ValueError("give val_fraction or val_samples, not both")
        return self

    def to_runtime(self) -> dict[str, Any]:
        """Plain data for ``tessera.runtime.dataset.TokenizedData(**...)`` (the runtime never sees a JobSpec)."""
        return self.model_dump(mode="json")


class JobSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = JOBSPEC_VERSION
    name: str = Field(default="job", min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$")
    # Declared before ``model``: with an entrypoint, ``model`` is just the model's name, not a zoo lookup.
    entrypoint: str | None = Field(
        default=None,
        description="the model source when it is your own code: `path/to/file.py:Factory` or `pkg.module:build`, "
        "a callable taking (layer_range=, tp=, attention=, recompute=) and returning an nn.Module with `.layers`, "
        "`.loss(output, targets)` and `.make_batch(batch, seq_len, generator=)`; replicate/split annotations "
        "in it are kept",
    )
    model: str = Field(
        min_length=1,
        description="zoo model name, or a path to a Hugging Face config.json; with `entrypoint`: any name",
    )
    global_batch: int = Field(ge=1, description="samples per optimizer step", **_INT)
    seq_len: int | None = Field(
        default=None, ge=1, description="tokens per sample; default: the model's", **_INT
    )
    steps: int | None = Field(default=None, ge=1, **_INT)
    samples: int | None = Field(default=None, ge=1, **_INT)
    optimizer: Literal["adamw", "adam", "sgd"] = "adamw"
    precision: Literal["fp32", "bf16", "fp16", "bf16-master"] = "bf16"
    recompute: Literal["auto", "none", "selective", "full"] = "auto"
    learning_rate: float = Field(default=3e-4, gt=0, **_FLOAT)
    deadline_s: float | None = Field(default=None, gt=0, description="seconds after submission", **_FLOAT)
    priority: int = Field(default=0, ge=-100, le=100, **_INT)
    gpu_types: tuple[str, ...] = Field(default=(), description="preferred GPU types, best first")
    exclude_gpu_types: tuple[str, ...] = ()
    max_gpus: int | None = Field(default=None, ge=1, **_INT)
    seed: int = Field(default=0, **_INT)
    checkpoint_every_steps: int | None = Field(
        default=None,
        ge=1,
        description="steps between checkpoints (default: the service picks ~10 per job)",
        **_INT,
    )
    max_restarts: int = Field(
        default=3, ge=0, le=100, description="relaunches from the last checkpoint after a failure", **_INT
    )
    wait_for_resources: bool = Field(
        default=False,
        strict=True,
        description="queue the job even when no Cell of the cluster can run it now (it waits for larger "
        "or more GPUs); by default such a job is refused at submission with the planner's reason",
    )
    data: Annotated[str, Field(min_length=1)] | DataSpec | None = Field(
        default=None,
        description="a local text file read as byte-level tokens, or a dataset mapping (path, text_field, "
        "tokenizer, val_fraction | val_samples, val_every_steps, cache_dir); default: seeded synthetic tokens",
    )
    force_data_change: bool = Field(
        default=False,
        strict=True,
        description="resume from a checkpoint written on other data (by default such a resume is refused)",
    )
    warmup_steps: int = Field(
        default=0, ge=0, description="learning rate rises linearly from 0 over these steps", **_INT
    )
    lr_schedule: Literal["constant", "linear", "cosine"] = Field(
        default="constant",
        description="after warm-up: keep, or decay linearly / by cosine to min_learning_rate",
    )
    min_learning_rate: float = Field(
        default=0.0, ge=0, description="where linear or cosine decay ends (at the last step)", **_FLOAT
    )
    grad_clip_norm: float | None = Field(
        default=None,
        gt=0,
        description="clip the gradient to this global L2 norm (default: no clipping)",
        **_FLOAT,
    )
    weight_decay: float | None = Field(
        default=None,
        ge=0,
        description="default: the optimizer's (adamw 0.01, adam and sgd 0); applied to every parameter",
        **_FLOAT,
    )
    dropout: float | None = Field(
        default=None,
        ge=0,
        lt=1,
        description="dropout probability of every dropout in the model (default: the model's own)",
        **_FLOAT,
    )
    from_scratch: bool = Field(
        default=False,
        strict=True,
        description="keep random initialization for pre-training; with a Hugging Face model directory the "
        "weights are loaded unless this is set",
    )
    on_nonfinite_loss: Literal["fail", "skip"] = Field(
        default="fail",
        description="a NaN or infinite loss: `fail` ends the job FAILED at that step (no relaunch); `skip` "
        "skips that step's optimizer update and goes on",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_gpu_assignment(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, why in _FORBIDDEN.items():
                if key in data:
                    raise ValueError(f"field {key!r} is not allowed: {why}")
            for key in data:  # a typo gets the nearest field; anything else pydantic's "extra" error
                if isinstance(key, str) and key not in cls.model_fields:
                    near = difflib.get_close_matches(key, list(cls.model_fields), n=1, cutoff=0.75)
                    if near:
                        raise ValueError(f"unknown field {key!r}; did you mean {near[0]!r}?")
        return data

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint_form(cls, v: str | None) -> str | None:
        """Only the form is checked here (importing user code is the service's job, which names this field)."""
        if v is None:
            return v
        m = _ENTRYPOINT.match(v.strip())
        if not m:
            raise ValueError(
                f"{v!r} is not SOURCE:ATTRIBUTE (e.g. models/my_model.py:Factory or pkg.mod:build)"
            )
        source = m.group("source")
        if not source.endswith(".py") and not _MODULE.match(source):
            raise ValueError(f"{source!r} is neither a .py file nor a dotted module name")
        return v.strip()

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str, info: ValidationInfo) -> str:
        """A zoo name (nearest matches on a typo) or a Hugging Face config.json path, checked at parse time."""
        from tessera.models.resolve import is_config_path
        from tessera.models.zoo import get_arch

        if info.data.get("entrypoint"):
            return v
        if is_config_path(v):
            return v
        try:
            get_arch(v)
        except KeyError as e:
            raise ValueError(e.args[0] if e.args else str(e)) from None
        return v

    @field_validator("data", mode="before")
    @classmethod
    def _data_form(cls, v: Any) -> Any:
        """A path string or a dataset mapping; a mapping's error names its own field (``data.text_field``)."""
        if isinstance(v, dict):
            try:
                return DataSpec.model_validate(v)
            except ValidationError as e:
                first = e.errors()[0]
                loc = ".".join(str(p) for p in first["loc"])
                msg = first["msg"].removeprefix("Value error, ")
                raise ValueError(f"{loc}: {msg}" if loc else msg) from None
        if isinstance(v, str) and not v.strip():
            raise ValueError("an empty path")
        if v is not None and not isinstance(v, str | DataSpec):
            raise ValueError(f"expected a file path or a mapping, got {type(v).__name__}")
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
        if self.min_learning_rate > self.learning_rate:
            raise ValueError(
                f"min_learning_rate {self.min_learning_rate} is above learning_rate {self.learning_rate}"
            )
        clash = set(self.gpu_types) & set(self.exclude_gpu_types)
        if clash:
            raise ValueError(f"GPU types both preferred and excluded: {', '.join(sorted(clash))}")
        return self

    def data_options(self) -> str | dict[str, Any] | None:
        """``data`` as plain data for ``tessera.runtime.data.data_source`` (a path, a mapping, or None)."""
        return self.data.to_runtime() if isinstance(self.data, DataSpec) else self.data

    def data_paths(self) -> list[tuple[str, str]]:
        """(field, path) of every file or folder ``data`` names (what a server checks against its roots)."""
        if self.data is None:
            return []
        if isinstance(self.data, str):
            return [("data", self.data)]
        out = [("data.path", self.data.path)]
        if self.data.tokenizer is not None and self.data.tokenizer != "bytes":
            out.append(("data.tokenizer", self.data.tokenizer))
        if self.data.cache_dir is not None:
            out.append(("data.cache_dir", self.data.cache_dir))
        return out

    def training_options(self) -> dict[str, Any]:
        """The optimizer-side fields as plain data for ``tessera.runtime.schedule.Training(**...)``."""
        return {
            "learning_rate": self.learning_rate,
            "warmup_steps": self.warmup_steps,
            "lr_schedule": self.lr_schedule,
            "min_learning_rate": self.min_learning_rate,
            "grad_clip_norm": self.grad_clip_norm,
            "weight_decay": self.weight_decay,
            "dropout": self.dropout,
        }

    @property
    def total_steps(self) -> int:
        if self.steps is not None:
            return self.steps
        assert self.samples is not None
        return -(-self.samples // self.global_batch)

    @property
    def checkpoint_interval_steps(self) -> int:
        """Steps between the service's checkpoints: the job's own interval, else about ten per job."""
        return self.checkpoint_every_steps or max(1, self.total_steps // 10)

    @property
    def checkpoints(self) -> int:
        """How many checkpoints an uninterrupted run writes: every interval, and at the last step."""
        every, total = self.checkpoint_interval_steps, self.total_steps
        return total // every + (1 if total % every else 0)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", exclude_defaults=False), sort_keys=False)


class _YAMLLoader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 floats: ``3e-4`` is a number, not the string PyYAML 1.1 makes of
    it (the strict spec no longer turns strings into numbers)."""


_YAMLLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


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
        data = json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=_YAMLLoader)  # noqa: S506
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        raise JobSpecError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {e}") from None
    if isinstance(data, dict):
        data = resolve_paths(data, path.parent)
    return parse_job(data, str(path))


def resolve_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """Relative file references of a spec (HF config or model directory, entrypoint file, data) made absolute against
    ``base`` when the file exists there, so the spec means the same thing wherever it is sent."""
    out = dict(data)
    model = out.get("model")
    if isinstance(model, str) and model.endswith(".json") and (base / model).is_file():
        out["model"] = str((base / model).resolve())
    elif isinstance(model, str) and model and (base / model / "config.json").is_file():
        out["model"] = str((base / model).resolve())  # a Hugging Face model directory beside the spec
    entry = out.get("entrypoint")
    if isinstance(entry, str) and ":" in entry:
        source, _, attr = entry.rpartition(":")
        if source.endswith(".py") and (base / source).is_file():
            out["entrypoint"] = f"{(base / source).resolve()}:{attr}"
    data_file = out.get("data")
    if isinstance(data_file, str) and (base / data_file).is_file():
        out["data"] = str((base / data_file).resolve())
    elif isinstance(data_file, dict):
        data_map = dict(data_file)
        for key in ("path", "tokenizer", "cache_dir"):
            value = data_map.get(key)
            if isinstance(value, str) and value != "bytes" and (base / value).exists():
                data_map[key] = str((base / value).resolve())
        out["data"] = data_map
    return out
