"""Layouts the memory model answers for: a regular dp × tp × pp layout of one job, and one device's view of it."""

from __future__ import annotations

from dataclasses import dataclass

from tessera.models.spec import ModelSpec

PRECISIONS = ("fp32", "bf16", "fp16", "bf16-master")
RECOMPUTES = ("none", "selective", "full")
ATTENTIONS = ("flash", "math")
OPTIMIZERS = ("adamw", "adam", "sgd")
SCHEDULES = ("1f1b", "gpipe")


class LayoutError(ValueError):
    """An impossible layout; the message names the field and the reason."""

    def __init__(self, field_name: str, reason: str) -> None:
        super().__init__(f"{field_name}: {reason}")
        self.field = field_name


def interleaved_chunk_passes(n_stages: int, stage: int, micro_batches: int, virtual_stages: int) -> int:
    """Chunk forwards whose activations stage ``stage`` holds at its peak under interleaved 1F1B.

    torch's ``ScheduleInterleaved1F1B`` (``_get_warmup_ops``) runs ``(v − 1)·R + 2·(S − 1 − stage)`` forward
    chunk-passes before its first backward (``R``, a round's micro-batches: ``S`` when ``micro_batches`` is a
    multiple of the stages), then one forward before each backward: one more at the peak, capped by the
    ``v · micro_batches`` passes of the step."""
    v, S, B = virtual_stages, n_stages, micro_batches
    rounds = max(1, B // S)
    warmup = (v - 1) * (B // rounds) + 2 * (S - 1 - stage)
    return min(warmup + 1, v * B)


def pipeline_in_flight(
    schedule: str, n_stages: int, stage: int, micro_batches: int, virtual_stages: int = 1
) -> int:
    """Micro-batches whose activations a stage holds at its peak, in whole-stage micro-batches: GPipe all of
    them, 1F1B stage i of S holds S − i; interleaved (``virtual_stages`` = v > 1), its
    :func:`interleaved_chunk_passes` of chunks holding about 1/v of its layers each, rounded up (Megatron's
    ``1 + (S − 1)/(S·v)`` more than plain 1F1B on the first stage)."""
    if schedule == "gpipe":
        return micro_batches
    if virtual_stages > 1:
        passes = interleaved_chunk_passes(n_stages, stage, micro_batches, virtual_stages)
        return min(-(-passes // virtual_stages), micro_batches)
    return min(n_stages - stage, micro_batches)


@dataclass(frozen=True)
class Layout:
    """A regular layout: every stage has the same dp × tp; blocks split evenly over pp stages."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    micro_batch: int = 1
    global_batch: int | None = None  # default: dp × micro_batch × pp micro-batches (1F1B needs ≥ pp)
    precision: str = "bf16"
    recompute: str = "none"
    attention: str = "flash"
    optimizer: str = "adamw"
    zero: int = 0
    schedule: str = "1f1b"

    @property
    def n_gpus(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def batch(self) -> int:
        return self.global_batch if self.global_batch is not None else self.dp * self.micro_batch * self.pp

    @property
    def micro_batches(self) -> int:
        return self.batch // (self.dp * self.micro_batch)

    def in_flight(self, stage: int) -> int:
        """Micro-batches whose activations a stage holds at its peak: 1F1B stage i of S holds S − i."""
        return pipeline_in_flight(self.schedule, self.pp, stage, self.micro_batches)

    def validate(self, spec: ModelSpec) -> None:
        for name, allowed in (
            ("precision", PRECISIONS),
            ("recompute", RECOMPUTES),
            ("attention", ATTENTIONS),
            ("optimizer", OPTIMIZERS),
            ("schedule", SCHEDULES),
        ):
            if getattr(self, name) not in allowed:
                raise LayoutError(name, f"{getattr(self, name)!r} is not one of {', '.join(allowed)}")
        for name in ("dp", "tp", "pp", "micro_batch"):
            if getattr(self, name) < 1:
                raise LayoutError(name, f"must be >= 1, got {getattr(self, name)}")
        if self.zero not in (0, 1, 2, 3):
            raise LayoutError("zero", f"ZeRO stage must be 0-3, got {self.zero}")
        if self.batch % (self.dp * self.micro_batch):
            raise LayoutError(
                "global_batch",
                f"{self.batch} is not a multiple of dp × micro-batch = {self.dp * self.micro_batch}",
            )
        if self.micro_batches < 1:
            raise LayoutError(
                "global_batch", f"{self.batch} < dp × micro-batch = {self.dp * self.micro_batch}"
            )
        arch = spec.arch
        heads = getattr(arch, "n_heads", None)
        if heads is not None and self.tp > 1:
            kv = arch.n_kv_heads  # type: ignore[union-attr]
            if heads % self.tp or kv % self.tp:
                raise LayoutError(
                    "tp",
                    f"{self.tp} does not divide the {heads} attention heads ({kv} key/value heads) of {spec.name}",
                )
        blocks = sum(
            1 for layer in spec.layers if layer.kind not in ("embedding", "stem", "head", "classifier")
        )
        if self.pp > blocks:
            raise LayoutError("pp", f"{self.pp} stages for the {blocks} blocks of {spec.name}")
        if self.schedule == "1f1b" and self.micro_batches < self.pp:
            raise LayoutError(
                "global_batch",
                f"1F1B needs micro-batches >= stages: {self.micro_batches} micro-batches for {self.pp} stages",
            )


@dataclass(frozen=True)
class DeviceView:
    """What one device of one stage holds: the memory model's unit of work."""

    layer_start: int
    layer_end: int
    micro_batch: int
    in_flight: int
    dp: int
    tp: int
    precision: str
    recompute: str
    attention: str
    optimizer: str
    zero: int
    micro_batches: int = 1  # per step; more than in_flight means 1F1B reaches its steady state


def device_views(spec: ModelSpec, layout: Layout) -> list[DeviceView]:
    """One view per pipeline stage (every device of a regular stage holds the same)."""
    layout.validate(spec)
    return [
        DeviceView(
            layer_start=a,
            layer_end=b,
            micro_batch=layout.micro_batch,
            in_flight=layout.in_flight(i),
            dp=layout.dp,
            tp=layout.tp,
            precision=layout.precision,
            recompute=layout.recompute,
            attention=layout.attention,
            optimizer=layout.optimizer,
            zero=layout.zero,
            micro_batches=layout.micro_batches,
        )
        for i, (a, b) in enumerate(spec.even_partition(layout.pp))
    ]
