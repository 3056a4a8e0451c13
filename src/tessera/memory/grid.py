"""The configuration grid the memory benchmark and tests compare estimators on (seeded, reproducible).

Each point is one device of one stage: a transformer shape (GPT, LLaMA or BERT family), a layer range and
every option the memory model distinguishes. ``arch_factory`` lets the trace worker build any shape.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

from tessera.models.spec import TransformerArch

FAMILY_SHAPES: dict[str, list[dict[str, Any]]] = {
    "gpt": [
        dict(hidden=h, n_heads=h // 64, n_kv_heads=h // 64, ffn_hidden=4 * h, vocab=50257, dropout=0.1)
        for h in (512, 768, 1024, 2048)
    ],
    "llama": [
        dict(hidden=h, n_heads=h // 128, n_kv_heads=kv, ffn_hidden=f, vocab=32000, norm="rmsnorm", mlp="swiglu",
             position="rope", tied_embeddings=False, dropout=0.0, bias=False)
        for h, kv, f in ((512, 4, 1408), (1024, 4, 2816), (2048, 8, 5632), (4096, 8, 11008))
    ],
    "bert": [
        dict(hidden=h, n_heads=h // 64, n_kv_heads=h // 64, ffn_hidden=4 * h, vocab=30522, type_vocab=2, causal=False,
             dropout=0.1)
        for h in (512, 768, 1024)
    ],
}  # fmt: skip


@dataclass(frozen=True)
class GridPoint:
    family: str
    arch: dict[str, Any]  # TransformerArch fields
    seq_len: int
    micro_batch: int
    layer_range: tuple[int, int]
    n_stages: int
    stage_index: int
    micro_batches: int
    precision: str
    recompute: str
    attention: str
    optimizer: str
    tp: int
    dp: int
    zero: int
    schedule: str = "1f1b"

    def transformer_arch(self) -> TransformerArch:
        return TransformerArch(**self.arch)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GridPoint:
        return cls(**{**d, "layer_range": tuple(d["layer_range"])})

    def trace_request(self) -> Any:
        from tessera.memory.trace import StageTraceRequest

        return StageTraceRequest(
            model="tessera.memory.grid:arch_factory",
            seq_len=self.seq_len,
            micro_batch_size=self.micro_batch,
            precision=self.precision,
            optimizer=self.optimizer,
            recompute=self.recompute,
            attention=self.attention,
            layer_range=self.layer_range,
            tp_degree=self.tp,
            dp_degree=self.dp,
            zero=self.zero,
            n_stages=self.n_stages,
            stage_index=self.stage_index,
            schedule=self.schedule,
            micro_batches=self.micro_batches,
            model_kwargs={"arch": self.arch, "family": self.family},
        )


def arch_factory(*, arch: dict[str, Any], family: str, **kw: Any) -> Any:
    """Trace-worker factory: a zoo nn model of any transformer shape."""
    from tessera.nn.zoo import build_model

    return build_model(TransformerArch(**arch), family=family, **kw)


def make_grid(n: int, seed: int = 0) -> list[GridPoint]:
    """``n`` distinct points drawn over families, shapes, sequence, batch, precision, recompute,
    attention, tp ∈ {1, 2, 4, 8}, pipeline stage position, ZeRO and optimizer."""
    rng = random.Random(seed)
    out: list[GridPoint] = []
    seen: set[str] = set()
    while len(out) < n:
        family = rng.choice(list(FAMILY_SHAPES))
        shape = dict(rng.choice(FAMILY_SHAPES[family]))
        n_layers = rng.choice((2, 3, 4))
        shape["n_layers"] = n_layers
        seq = rng.choice((128, 256, 512, 1024, 2048))
        shape["max_positions"] = max(seq, 512)
        tp = rng.choice([t for t in (1, 2, 4, 8) if shape["n_kv_heads"] % t == 0])
        n_stages, stage_index = rng.choice(((1, 0), (1, 0), (2, 0), (2, 1), (4, 0), (4, 1), (4, 3)))
        total = n_layers + 2
        if n_stages == 1:
            layer_range = (0, total)
        else:
            per = rng.choice((1, 2))
            if stage_index == 0:
                layer_range = (0, 1 + per)
            elif stage_index == n_stages - 1:
                layer_range = (total - 1 - per, total)
            else:
                layer_range = (1, 1 + per)
        dp = rng.choice((1, 1, 2, 4))
        zero = rng.choice((0, 1, 2, 3)) if dp > 1 else 0
        p = GridPoint(
            family=family,
            arch=shape,
            seq_len=seq,
            micro_batch=rng.choice((1, 2, 4)),
            layer_range=layer_range,
            n_stages=n_stages,
            stage_index=stage_index,
            micro_batches=max(n_stages, rng.choice((1, 4, 8))),
            precision=rng.choice(("fp32", "bf16", "fp16", "bf16-master")),
            recompute=rng.choice(("none", "selective", "full")),
            attention=rng.choice(("flash", "flash", "math")),
            optimizer=rng.choice(("adamw", "adamw", "adam", "sgd")),
            tp=tp,
            dp=dp,
            zero=zero,
        )
        key = repr(p.to_dict())
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def point_spec_and_view(p: GridPoint) -> tuple[Any, Any]:
    """The ModelSpec and DeviceView the estimators read for a grid point."""
    from tessera.memory.layout import DeviceView
    from tessera.models.zoo import FAMILIES

    arch = p.transformer_arch()
    spec = FAMILIES[p.family].spec(f"{p.family}-grid", arch, p.seq_len)
    in_flight = p.micro_batches if p.schedule == "gpipe" else min(p.n_stages - p.stage_index, p.micro_batches)
    view = DeviceView(
        layer_start=p.layer_range[0],
        layer_end=p.layer_range[1],
        micro_batch=p.micro_batch,
        in_flight=in_flight,
        dp=p.dp,
        tp=p.tp,
        precision=p.precision,
        recompute=p.recompute,
        attention=p.attention,
        optimizer=p.optimizer,
        zero=p.zero,
        micro_batches=p.micro_batches,
    )
    return spec, view
