"""Tessera's fast memory formula: the peak of one device of one stage, composed layer by layer.

A training step's peak is the largest live total over the moments of the step (notes/memory-and-time-
estimation.md §6), not states + activations. The formula walks those moments at the granularity of layers:

* **What each layer does to the allocator** comes from tables measured once per layer class (family
  structure, precision, recompute, attention) by ``bench/memory_calibrate.py`` on small probe models: for
  every allocation of a layer's forward and backward, the bytes its own storages hold at that moment, as
  a sum of terms ``bytes per element × dimensions`` (``2:T*h`` = a half-precision tokens × hidden tensor).
  The terms are re-evaluated here at the configuration's sizes, each storage rounded to the caching
  allocator's 512-B block, so saved activations, backward transients and the order in which they come and
  go are exact per op. A layer's table also says what it leaves for the rest of the forward (saved
  tensors, autocast's cast cache), for its backward, and after its backward (its gradients).
* **A stage** is the chain [embedding] + blocks + [head]: a layer's forward sits on what the layers
  before it left; its backward on what the layers below still hold and those above left behind. Blocks
  are identical, so the extremes over the block index are at its ends (first, second, second-to-last,
  last). A later stage's first block reads a received leaf (autocast caches its cast once); its last block
  gets its gradient from the pipeline; the tied head's gradient waits in autograd until the embedding's.
* **The schedule**: 1F1B stage i of S holds m = min(S - i, M) micro-batches. The peak falls in the m-th
  forward or the first backward (the others' activations held, no gradients yet), or, in the steady
  state, in a later forward and backward with the gradients made. The data loader's tokens and targets
  live to the end of the step; a later stage holds each received activation and output until its backward.
* **ZeRO-2/3 (FSDP2)**, per layer: the all-gather output and the unsharded parameters (the output kept
  until the next gather in the forward, dropped after the copy-out in the backward), the backward prefetch
  of the next layer (and FSDP's wrap-around prefetch when several forwards preceded the backward), the
  reduce-scatter input kept until the next layer's, the sharded gradients; ZeRO-2 keeps the unsharded
  parameters from the forward to their backward.
* **The optimizer step**: the gradients it reads and foreach Adam's parameter-sized temporary; ZeRO-1
  and bf16-master convert the gradients parameter by parameter (slice copies / fp32 casts).

Everything per configuration is numpy arithmetic over arrays: :func:`inputs_for` reads the model and
views once (parameter shards from the zoo, built on the meta device and cached), :func:`peak_arrays`
evaluates any number of configurations at once.
"""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import dataclass
from functools import lru_cache
from math import prod
from typing import Any

import numpy as np

from tessera.memory.layout import DeviceView
from tessera.models.spec import ModelSpec, TransformerArch

BLOCK = 512.0
PHASES = ("fwd", "bwd", "opt")
_PREC = {"fp32": 0, "bf16": 1, "fp16": 2, "bf16-master": 3}
_OPT = {"adamw": 0, "adam": 1, "sgd": 2}
NEG = -np.inf


def r(x: Any) -> Any:
    """Round a storage up to the caching allocator's block."""
    return np.ceil(np.asarray(x, dtype=np.float64) / BLOCK) * BLOCK


def _ri(n: float) -> int:
    return -(-int(n) // 512) * 512


@dataclass(frozen=True)
class FormulaOut:
    peak_bytes: np.ndarray
    phase: np.ndarray  # index into PHASES
    phase_bytes: np.ndarray  # [n, 3]
    breakdown: dict[str, np.ndarray]

    @property
    def phase_names(self) -> list[str]:
        return [PHASES[i] for i in self.phase]


def evaluate(spec: ModelSpec, views: list[DeviceView]) -> FormulaOut:
    """Peak bytes of each device view of one model (see :func:`peak_arrays` for the vectorized core)."""
    return peak_arrays(inputs_for(spec, views))


# ---------------------------------------------------------------------------------------- parameters
def _skip_init() -> Any:
    """A torch function mode (this thread only) under which weight initializers do nothing: only shapes are
    read here, and initializing on the meta device runs torch's Python reference kernels — a BERT
    embedding's ``normal_`` took ~0.2 s, most of a cold table build's memory pricing."""
    import torch
    from torch.overrides import TorchFunctionMode

    inits = {
        getattr(torch.nn.init, n) for n in dir(torch.nn.init) if n.endswith("_") and not n.startswith("_")
    }
    fills = ("normal_", "uniform_", "fill_", "zero_")

    class SkipInit(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if func in inits or getattr(func, "__name__", "") in fills:
                return args[0] if args else kwargs.get("tensor", kwargs.get("self"))
            return func(*args, **kwargs)

    return SkipInit()


@lru_cache(maxsize=4096)
def _layer_params(
    family: str, arch_items: tuple, layer: int, tp: int
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(name, shape) of every parameter of one layer's TP shard (rank 0, the largest) in module order,
    then its buffers as ("buffer:<name>", shape); built once on the meta device."""
    from tessera.nn.common import TPShare
    from tessera.nn.zoo import build_model

    arch = TransformerArch(**dict(arch_items))
    share = TPShare(tp, 0) if tp > 1 else None
    with _skip_init():
        m = build_model(arch, family=family, layer_range=(layer, layer + 1), tp=share, device="meta")
    out = [(name, tuple(p.shape)) for name, p in m.layers[0].named_parameters()]
    out += [("buffer:" + name, tuple(b.shape)) for name, b in m.layers[0].named_buffers()]
    return tuple(out)


@dataclass(frozen=True)
class _Model:
    """The hashable part of a ModelSpec the parameter caches key on."""

    family: str
    arch_items: tuple
    kinds: tuple[str, ...]

    @classmethod
    def of(cls, spec: ModelSpec) -> _Model:
        arch = spec.arch
        assert isinstance(arch, TransformerArch)
        return cls(
            spec.family, tuple(sorted(arch.__dict__.items())), tuple(layer.kind for layer in spec.layers)
        )

    def params(self, j: int, tp: int) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Layer j's parameters and buffers; identical transformer blocks share block 1's cache entry."""
        return _layer_params(self.family, self.arch_items, 1 if self.kinds[j] == "transformer" else j, tp)

    def shared(self, start: int, end: int) -> bool:
        """The stage holds both ends of a tied model: the head's projection is the embedding's table."""
        return bool(dict(self.arch_items).get("tied_embeddings")) and start == 0 and end == len(self.kinds)

    def kind(self, j: int) -> str:
        return "emb" if j == 0 else "head" if j == len(self.kinds) - 1 else "block"


def _local(total: int, tp: int) -> int:
    """Units TP rank 0 holds (the zoo's split: whole units, the remainder to the first ranks)."""
    return -(-total // tp) if tp > 1 else total


_HELD = {  # the parameter whose gradient FSDP's reduce-scatter still references: its layer's last op's
    ("block", "gpt"): ("mlp.fc_out.bias", "mlp.fc_out.weight"),
    ("block", "bert"): ("mlp.fc_out.bias", "mlp.fc_out.weight"),
    ("block", "llama"): ("mlp.down.weight",),
    ("emb", "gpt"): ("pos",),
    ("emb", "bert"): ("norm.bias",),
    ("emb", "llama"): ("tok.weight",),
    ("head", "gpt"): ("out.weight",),
    ("head", "bert"): ("decoder.bias",),
    ("head", "llama"): ("out.weight",),
}


@lru_cache(maxsize=4096)
def _stage_scalars(
    model: _Model, start: int, end: int, tp: int, dp: int, zero: int, prec: str, opt: str
) -> dict[str, float]:
    """What one device of a stage holds, from its parameter shards: the persistent states (weights,
    master weights, optimizer state), the optimizer step's gradient conversions, and the FSDP unit sizes
    (embedding, one block, head, and the root holding a tied embedding + head)."""
    shared = model.shared(start, end)
    params = []  # (layer, name, shape) in model.parameters() order, the tied table once
    buffers = []
    for j in range(start, end):
        for name, shape in model.params(j, tp):
            if name.startswith("buffer:"):
                buffers.append(prod(shape))
            elif not (shared and j == end - 1 and name in ("out.weight", "decoder.weight")):
                params.append((j, name, shape))
    family = model.family if model.family in ("llama", "bert") else "gpt"
    master, adam = prec == "bf16-master", opt != "sgd"
    n_state = 2.0 if adam else 1.0
    ns = [prod(s) for _, _, s in params]
    steps = 4.0 * len(ns) if adam else 0.0  # Adam's step counters: 4-B host tensors, unrounded
    scaler = 1024.0 if prec == "fp16" else 0.0  # GradScaler's scale and growth tracker
    p4, p2 = float(sum(_ri(4 * n) for n in ns)), float(sum(_ri(2 * n) for n in ns))
    out: dict[str, float] = {"G": p2 if master else p4}  # the model's gradients once made
    if zero >= 2:
        # FSDP shards each parameter by rows; its fp32 shards are the parameters (the masters under
        # mixed precision), the optimizer state follows them, buffers stay whole
        sh = float(sum(_ri(4 * -(-s[0] // dp) * prod(s[1:])) if s else 512 for _, _, s in params))
        out.update(w=(0.0 if master else sh) + sum(_ri(4 * k) for k in buffers), mw=sh if master else 0.0)
        out.update(os=n_state * sh + steps + scaler, opt_tmp=sh if adam else 0.0, opt_grads=0.0, conv=0.0)
    else:
        d = dp if zero == 1 else 1
        sl = [-(-n // d) for n in ns]  # ZeRO-1: the optimizer's slice of each flattened parameter
        s4 = float(sum(_ri(4 * k) for k in sl))
        if master:
            out.update(w=p2 + sum(_ri(2 * k) for k in buffers), mw=s4)
        else:
            out.update(w=p4 + sum(_ri(4 * k) for k in buffers), mw=0.0)
        out.update(os=n_state * s4 + steps + scaler, opt_tmp=s4 if adam else 0.0)
        out["opt_grads"] = s4 if (zero == 1 or master) else p4
        e = 2 if master else 4
        conv = 0.0
        if zero == 1:  # each full gradient becomes its slice (a copy; fp32 under bf16-master), then freed
            base = float(sum(_ri(e * n) for n in ns))
            for n, k in zip(ns, sl, strict=True):
                conv = max(conv, base + _ri(e * k))
                if master:
                    conv = max(conv, base - _ri(e * n) + _ri(e * k) + _ri(4 * k))
                base += _ri(4 * k) - _ri(e * n)
        elif master:  # bf16 gradient -> fp32 master gradient, one parameter at a time
            done, rest = 0.0, p2
            for n in ns:
                conv = max(conv, done + _ri(4 * n) + rest)
                done, rest = done + _ri(4 * n), rest - _ri(2 * n)
        out["conv"] = conv
    out["S"] = out["w"] + out["mw"] + out["os"]
    # FSDP units: one per layer, a tied embedding and head together in the root; param dtype e
    e = 2 if master else 4
    units: dict[str, dict[str, float]] = {}
    for j in range(start, end):
        kind = model.kind(j)
        if kind == "block" and "block" in units:
            continue
        unit = "root" if shared and kind != "block" else kind
        u = units.setdefault(unit, dict(U=0.0, pad=0.0, gl=0.0))
        held = _HELD.get((kind, family), ())
        for jj, name, s in params:
            if jj == j:
                u["U"] += _ri(e * prod(s))
                u["pad"] += -(-s[0] // dp) * dp * prod(s[1:]) if s else dp
                if name in held and (unit != "root" or kind == "head"):
                    u["gl"] = float(_ri(e * prod(s)))
    for name in ("emb", "block", "head", "root"):
        u = units.get(name, dict(U=0.0, pad=0.0, gl=0.0))
        out[name + "_U"] = u["U"]  # the unsharded parameters (and their gradients)
        out[name + "_Fl"] = float(_ri(e * u["pad"]))  # the all-gather output
        out[name + "_RS"] = float(_ri(4 * u["pad"]))  # the reduce-scatter input (fp32 reduce)
        out[name + "_Sh"] = float(_ri(4 * u["pad"] // dp))  # the sharded gradients
        out[name + "_gl"] = u["gl"]
        out[name + "_inc"] = float(_ri(2 * u["pad"] // dp)) if master else 0.0  # bf16 all-gather input
    return out


# ------------------------------------------------------------------------------------- layer tables
_EVENT_KEYS = ("fev", "lev", "bev0", "bev1", "lbev0", "lbev1")
_TAGS = ("IN", "GIN")


@dataclass(frozen=True)
class _Tables:
    """The decoded tables. Term i is ``el[i]`` bytes × Π dims[factors[i]]; its tag marks a layer's input
    (IN), the gradient it receives (GIN) or sends (GOUT), or a neighbour's storage it frees (X, < 0)."""

    terms: tuple[str, ...]
    el: np.ndarray
    factors: tuple[tuple[str, ...], ...]
    tag: np.ndarray
    classes: dict[str, tuple[str, ...]]  # kind -> class names (index = class id)
    entries: dict[str, list[dict[str, np.ndarray]]]  # kind -> per class: key -> [terms] or [events, terms]


@lru_cache(maxsize=1)
def _tables() -> _Tables:
    doc = json.loads(zlib.decompress(base64.b64decode("".join(_EVENT_TABLES))))
    terms = tuple(doc["terms"])
    el, factors, tags = [], [], []
    for t in terms:
        tag, _, body = t.rpartition("|")
        tags.append(tag)
        size, _, mono = body.partition(":")
        el.append(float(size) if mono else 0.0)
        factors.append(tuple(mono.split("*")) if mono not in ("", "1") else ())

    def dense(pairs: list[list[int]]) -> np.ndarray:
        v = np.zeros(len(terms))
        for i, c in pairs:
            v[i] = c
        return v

    classes, entries = {}, {}
    tag = np.array(tags)
    for kind, by_cls in doc["tables"].items():
        names = tuple(sorted(by_cls))
        classes[kind] = names
        entries[kind] = []
        for c in names:
            full = {
                k: np.stack([dense(e) for e in v]) if k in _EVENT_KEYS else dense(v)
                for k, v in by_cls[c].items()
            }
            # only the terms this class uses: a few dozen of the vocabulary
            cols = np.nonzero(np.any([np.atleast_2d(t).any(axis=0) for t in full.values()], axis=0))[0]
            entry: dict[str, Any] = {k: t[..., cols] for k, t in full.items()}
            entry["_cols"] = cols
            entry["_tags"] = tuple(np.nonzero(tag[cols] == t)[0] for t in _TAGS)
            entries[kind].append(entry)
    return _Tables(terms, np.array(el), tuple(factors), tag, classes, entries)


def _structure(spec: ModelSpec) -> str:
    """The layer class a model's blocks belong to (what the probes were built as)."""
    arch = spec.arch
    assert isinstance(arch, TransformerArch)
    if spec.family == "llama":
        return "llama-gqa" if arch.n_kv_heads < arch.n_heads else "llama"
    base = "bert" if spec.family == "bert" else "gpt"  # MoE blocks: the GPT block's attention and norms
    return base if arch.dropout > 0 else base + "-nodrop"


@lru_cache(maxsize=1024)
def _class_id(kind: str, name: str) -> int:
    names = _tables().classes[kind]
    if name not in names:
        raise ValueError(f"no {kind} event table for {name!r}: rerun bench/memory_calibrate.py --write")
    return names.index(name)


def _term_sizes(x: dict[str, np.ndarray]) -> np.ndarray:
    """[configurations, terms]: the bytes of one storage of each term, rounded to the allocator block."""
    tb = _tables()
    out = np.empty((len(x["T"]), len(tb.terms)))
    for i, (e, fs) in enumerate(zip(tb.el, tb.factors, strict=True)):
        v = np.full(len(x["T"]), e)
        for f in fs:
            v = v * (x[f] if f in x else float(f))
        out[:, i] = v
    return r(out)


def _layer_values(
    z: np.ndarray,
    kind: str,
    cls: np.ndarray,
    keys: tuple[str, ...],
    variants: tuple[tuple[np.ndarray, ...], ...],
) -> list[dict[str, np.ndarray]]:
    """Per configuration and table key of its class, a vector's bytes or an event list's largest, once per
    variant. A variant (IN flags, GIN flags) marks configurations whose layer input / received gradient
    belongs to the pipeline harness (a stage's received activation, its output gradient) and is counted
    there instead; ``()`` counts them in the layer."""
    tb = _tables()
    n = len(cls)
    outs = [{k: np.zeros(n) for k in keys} for _ in variants]
    for c in np.unique(cls):
        idx = np.nonzero(cls == c)[0]
        entry = tb.entries[kind][int(c)]
        zc = z[np.ix_(idx, entry["_cols"])]
        for k in keys:
            table = entry.get(k)
            if table is None:
                continue
            full = zc @ table.T
            for out, flags in zip(outs, variants, strict=True):
                v = full
                for f, cols in zip(flags, entry["_tags"], strict=False):
                    on = f[idx] > 0
                    if cols.size and on.any():  # take the tagged storages back out where flagged
                        v = v - on.reshape((-1,) + (1,) * (full.ndim - 1)) * (
                            zc[:, cols] @ table[..., cols].T
                        )
                out[k][idx] = v.max(axis=1) if table.ndim == 2 else v
    return outs


# ------------------------------------------------------------------------------------------ inputs
def _class_names(spec: ModelSpec, structure: str, tied: str, v: DeviceView) -> tuple[str, str, str]:
    """The block, embedding and head event-table classes of one view."""
    # one sample per micro-batch: math attention's batched matmuls reshape by views, copying nothing
    one_sample = "/b1" if v.micro_batch == 1 and v.attention == "math" else ""
    return (
        f"{structure}/{v.precision}/{v.recompute}/{v.attention}{one_sample}",
        f"{structure}/{v.precision}/tp{1 if v.tp == 1 else 2}/{tied}",
        f"{structure}/{v.precision}/{tied}",
    )


def check_covered(spec: ModelSpec, views: list[DeviceView]) -> None:
    """Raise the ValueError :func:`inputs_for` would raise for these views (a model or a layer class the
    tables do not cover), without building the inputs."""
    arch = spec.arch
    if not isinstance(arch, TransformerArch):
        raise ValueError(f"model {spec.name!r}: the memory formula covers transformer models")
    model = _Model.of(spec)
    structure = _structure(spec)
    seen: set[tuple[str, str, str]] = set()
    for v in views:
        tied = "tied" if model.shared(v.layer_start, v.layer_end) else "untied"
        names = _class_names(spec, structure, tied, v)
        if names not in seen:
            seen.add(names)
            for kind, name in zip(("block", "emb", "head"), names, strict=True):
                _class_id(kind, name)


# the per-view columns of inputs_for, in order; then the stage scalars' keys
_SIZE_KEYS = ("b", "s", "T", "h", "H", "kvH", "d", "dh", "hq", "hkv", "rep", "f", "V", "V2", "P")
_VIEW_KEYS = _SIZE_KEYS + ("blk_cls", "emb_cls", "head_cls", "nb", "rope", "full", "has_emb", "has_head",
                           "shared", "m", "M", "prec", "zero")  # fmt: skip


def inputs_for(spec: ModelSpec, views: list[DeviceView], **extra: Any) -> dict[str, np.ndarray]:
    """Arrays the vectorized formula reads, one entry per view: the sizes the table terms use, the layer
    classes, the stage's shape and schedule, and its parameter-derived scalars."""
    arch = spec.arch
    if not isinstance(arch, TransformerArch):
        raise ValueError(f"model {spec.name!r}: the memory formula covers transformer models")
    model = _Model.of(spec)
    structure = _structure(spec)
    d, group = arch.head_dim, arch.n_heads // arch.n_kv_heads
    seq = spec.seq_len
    rope = arch.position == "rope"
    # everything but the micro-batch size and the schedule is shared by the views of one stage layout
    static: dict[tuple, tuple[tuple[float, ...], tuple[float, ...], tuple[str, ...]]] = {}
    rows: list[tuple[float, ...]] = []
    scalar_keys: tuple[str, ...] | None = None
    for v in views:
        skey = (v.layer_start, v.layer_end, v.tp, v.dp, v.zero, v.precision, v.optimizer, v.recompute,
                v.attention, v.micro_batch == 1)  # fmt: skip
        hit = static.get(skey)
        if hit is None:
            tp, kv = v.tp, _local(arch.n_kv_heads, v.tp)
            tied = "tied" if model.shared(v.layer_start, v.layer_end) else "untied"
            blk, emb, head = _class_names(spec, structure, tied, v)
            blocks = sum(
                1 for j in range(v.layer_start, v.layer_end) if spec.layers[j].kind in ("transformer", "moe")
            )
            mid = (arch.hidden, kv * group, kv, d, d // 2, kv * group * d, kv * d, group,
                   _local(arch.ffn_hidden, tp), _local(arch.vocab, tp), arch.vocab, arch.max_positions,
                   _class_id("block", blk), _class_id("emb", emb), _class_id("head", head), blocks, rope,
                   v.recompute == "full", v.layer_start == 0, v.layer_end == spec.n_layers, tied == "tied")  # fmt: skip
            scalars = _stage_scalars(
                model, v.layer_start, v.layer_end, tp, v.dp, v.zero, v.precision, v.optimizer
            )
            tail = (_PREC[v.precision], v.zero, *scalars.values())
            hit = static[skey] = (tuple(float(x) for x in mid), tuple(float(x) for x in tail), tuple(scalars))
        mid, tail, keys = hit
        if scalar_keys is None:
            scalar_keys = keys
        elif keys != scalar_keys:
            raise AssertionError("stage scalars differ in their keys")
        b = float(v.micro_batch)
        head_row = (b, float(seq), float(v.micro_batch * seq))
        sched = (float(max(1, v.in_flight)), float(max(v.micro_batches, v.in_flight)))
        rows.append(head_row + mid + sched + tail)
    out: dict[str, np.ndarray] = {}
    if rows:
        cols = np.array(rows, dtype=np.float64).T.copy()  # one contiguous row per key
        assert scalar_keys is not None
        for k, col in zip(_VIEW_KEYS + scalar_keys, cols, strict=True):
            out[k] = col
    for k, val in extra.items():
        out[k] = np.asarray(val, dtype=np.float64)
    return out


# -------------------------------------------------------------------------------------- the formula
_BLOCK_KEYS = ("fev", "bev0", "bev1", "fstart", "bstart0", "carryF", "carryB", "carryBend0", "carryBend1")
_HEAD_KEYS = ("fev", "lev", "lbev0", "lbev1", "bev0", "bev1", "fstart", "bstart0", "carryB", "carryBend0",
              "carryBend1")  # fmt: skip


def _top(*cands: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Largest value among (condition, value) pairs, per configuration (-inf where none holds)."""
    out = np.full(np.broadcast(*(c for c, _ in cands)).shape, NEG)
    for cond, val in cands:
        out = np.maximum(out, np.where(cond, val, NEG))
    return out


def peak_arrays(x: dict[str, np.ndarray]) -> FormulaOut:
    """The vectorized core: every argument an array over configurations."""
    n = len(x["T"])
    z = _term_sizes(x)
    one, no = np.ones(n, dtype=bool), np.zeros(n)
    has_emb, has_head, shared = x["has_emb"] > 0, x["has_head"] > 0, x["shared"] > 0
    nb, m, M, zero = x["nb"], x["m"], x["M"], x["zero"]
    fsdp, z3 = zero >= 2, zero == 3
    E, Hh = has_emb * 1.0, has_head * 1.0
    b2, b3 = nb >= 2, nb >= 3
    xh = r(np.where(x["prec"] == 3, 2.0, 4.0) * x["T"] * x["h"])  # a received activation, an output, a grad
    ids = r(8 * x["T"])
    S, G = x["S"], x["G"]

    # ---- what each layer does: the tables of its class at these sizes. Positions: the first block (a
    # later stage's reads a received leaf; under FSDP through a view, so its own table with IN the
    # harness's), interior blocks, the last block (its gradient from the pipeline on a non-last stage)
    blk = x["blk_cls"].astype(int)
    last1 = ((nb == 1) & ~has_head) * 1.0
    first_leaf = ~has_emb & ~fsdp
    (qf,) = _layer_values(z, "block_first", blk, _BLOCK_KEYS, ((no, last1),))
    qb, qG, qN = _layer_values(
        z, "block", blk, _BLOCK_KEYS, (((~has_emb & fsdp) * 1.0, last1), (), (no, (~has_head) * 1.0))
    )
    q1 = {k: np.where(first_leaf, qf[k], qb[k]) for k in _BLOCK_KEYS}
    # FSDP's mixed precision casts parameters, not buffers: under bf16-master LLaMA's RoPE tables stay fp32
    # and every block casts its cos / sin slices for q and k (4 × [s, d] bf16, saved for the backward),
    # as autocast does; the probes (plain bf16 buffers) have no such casts
    # (full recompute keeps none: they come back with the recomputed forward, in the backward)
    rope = np.where(fsdp & (x["prec"] == 3) & (x["rope"] > 0), 4 * r(2 * x["s"] * x["d"]), 0.0)
    kept = np.where(x["full"] > 0, 0.0, rope)
    for q in (q1, qG, qN):
        for k in ("fev", "bev0", "bev1"):
            q[k] = q[k] + rope
        for k in ("bstart0", "carryF", "carryB"):
            q[k] = q[k] + kept
    (qE,) = _layer_values(z, "emb", x["emb_cls"].astype(int), _BLOCK_KEYS, ((),))
    (qH,) = _layer_values(z, "head", x["head_cls"].astype(int), _HEAD_KEYS, ((),))
    qE = {k: v * E for k, v in qE.items()}
    qH = {k: v * Hh for k, v in qH.items()}

    # one in-flight micro-batch between its forward and backward: every layer's saved set, the received
    # input and the output a later / earlier stage holds
    hold = qE["carryB"] + q1["carryB"] + (nb - 1) * qG["carryB"] + qH["carryB"]
    hold = hold + np.where(has_emb, 0.0, xh) + np.where(has_head, 0.0, xh)

    def loader(
        k: np.ndarray,
    ) -> np.ndarray:  # tokens (first stage) and targets (head stage) of k micro-batches
        return k * (E + Hh) * ids

    def base_f(
        o: np.ndarray, k: np.ndarray
    ) -> np.ndarray:  # + this micro-batch's input and (no head) targets
        return S + o * hold + loader(k) + np.where(has_emb, 0.0, xh) + np.where(has_head, 0.0, ids)

    def base_b(
        o: np.ndarray, k: np.ndarray
    ) -> np.ndarray:  # + the received input, the output and its gradient
        return S + o * hold + loader(k) + np.where(has_emb, 0.0, xh) + np.where(has_head, 0.0, 2 * xh)

    aE, a1, aG = qE["carryF"], q1["carryF"], qG["carryF"]  # what a layer leaves to later forwards
    acc_mid, acc_last, acc_head = aE + a1 + (nb - 3) * aG, aE + a1 + (nb - 2) * aG, aE + a1 + (nb - 1) * aG
    cE, c1, cG = qE["carryB"], q1["carryB"], qG["carryB"]  # what a layer holds until its backward
    below_head = cE + c1 + (nb - 1) * cG

    # ---- ZeRO-0/1: the parameters stay put
    def fwd0(o: np.ndarray, g: np.ndarray, k: np.ndarray) -> np.ndarray:
        return (base_f(o, k) + g) + _top(
            (has_emb, qE["fev"]),
            (one, aE + q1["fev"]),
            (b3, acc_mid + qG["fev"]),
            (b2, acc_last + qN["fev"]),
            (has_head, acc_head + np.maximum(qH["fev"], qH["lev"])),
        )

    def bwd0(o: np.ndarray, g: np.ndarray, k: np.ndarray, s: str) -> np.ndarray:
        eH, eG, e1 = qH["carryBend" + s], qG["carryBend" + s], q1["carryBend" + s]
        return (base_b(o, k) + g) + _top(
            (has_head, below_head + np.maximum(qH["lbev" + s], qH["bev" + s])),
            (b2, cE + c1 + (nb - 2) * cG + eH + qN["bev" + s]),
            (b3, cE + c1 + (nb - 3) * cG + eG + eH + qG["bev" + s]),
            (b3, cE + c1 + (nb - 2) * eG + eH + qG["bev" + s]),
            (one, cE + (nb - 1) * eG + eH + q1["bev" + s]),
            (has_emb, e1 + (nb - 1) * eG + eH + qE["bev" + s]),
        )

    steady = m < M  # 1F1B's steady state: a forward, then a backward, with the gradients made
    cool = ~steady & (M >= 2)  # all forwards first: the second backward, one micro-batch fewer
    fwd_z = np.maximum(fwd0(m - 1, no, m), np.where(steady, fwd0(m - 1, G, m + 1), NEG))
    bwd_z = _top(
        (one, bwd0(m - 1, no, m, "0")), (steady, bwd0(m - 1, G, m + 1, "1")), (cool, bwd0(m - 2, G, m, "1"))
    )

    # ---- ZeRO-2/3 (FSDP2): per-layer units, a tied embedding and head in the root
    U, Fl, RS, Sh, gl, inc = ({u: x[f"{u}_{q}"] for u in ("emb", "block", "head", "root")}
                              for q in ("U", "Fl", "RS", "Sh", "gl", "inc"))  # fmt: skip
    own_e, own_h, root = has_emb & ~shared, has_head & ~shared, shared
    Oe, Oh, R = own_e * 1.0, own_h * 1.0, shared * 1.0
    Ur, Ub = R * U["root"], U["block"]
    u_all = Ur + Oe * U["emb"] + nb * Ub + Oh * U["head"]
    sh_all = R * Sh["root"] + Oe * Sh["emb"] + nb * Sh["block"] + Oh * Sh["head"]
    z2 = fsdp & ~z3
    # the reduce-scatter output is made while the gradient of the unit's last op is still referenced
    rs_keep = {u: np.maximum(0.0, gl[u] + Sh[u] - U[u]) for u in U}

    def gather(act: np.ndarray, live: np.ndarray, u: str) -> np.ndarray:
        """An all-gather: (its bf16 input under mixed precision,) the flat output, then the copy-out."""
        return act + live + Fl[u] + np.maximum(U[u], inc[u])

    def fwd3(o: np.ndarray, k: np.ndarray, sh: np.ndarray, fresh: np.ndarray) -> np.ndarray:
        # ZeRO-3 holds a layer's unit while it runs, ZeRO-2 every unit gathered so far; the all-gather
        # output lives until the next gather; a ZeRO-2 forward after another one finds all gathered
        gath = z3 | fresh
        kept = lambda j: np.where(z2, Oe * U["emb"] + (j - 1) * Ub, 0.0)  # noqa: E731

        def blk(
            acc: np.ndarray, q: dict[str, np.ndarray], j: np.ndarray, prev: np.ndarray, cond: np.ndarray
        ) -> list:
            live = np.where(gath, Ur + kept(j) + Ub + Fl["block"], u_all)
            return [
                (gath & cond, gather(acc + q["fstart"], Ur + kept(j) + prev, "block")),
                (cond, acc + live + q["fev"]),
            ]

        head_live = np.where(root, Ur + np.where(z2, nb * Ub, 0.0) + Fl["block"],
                             U["head"] + Fl["head"] + np.where(z2, Oe * U["emb"] + nb * Ub, 0.0))  # fmt: skip
        return (base_f(o, k) + sh) + _top(
            (gath & root, gather(no, no, "root")),
            (gath & own_e, gather(qE["fstart"], no, "emb")),
            (
                has_emb,
                np.where(gath, np.where(root, Ur + Fl["root"], U["emb"] + Fl["emb"]), u_all) + qE["fev"],
            ),
            *blk(aE, q1, one * 1.0, Oe * Fl["emb"] + R * Fl["root"], one),
            *blk(acc_mid, qG, nb - 1, Fl["block"], b3),
            *blk(acc_last, qN, nb, Fl["block"], b2),
            (gath & own_h, gather(acc_head + qH["fstart"], Fl["block"] + kept(nb + 1), "head")),
            (has_head, acc_head + np.where(gath, head_live, u_all) + qH["fev"]),
            (has_head, acc_head + np.where(z2, u_all, 0.0) + qH["lev"]),  # the loss, every unit resharded
        )

    lo_G, lo_1 = qG["carryBend0"] - Ub, q1["carryBend0"] - Ub  # a block's leftovers after its reduce-scatter
    h_above = Oh * (qH["carryBend0"] - U["head"]) + R * qH["carryBend0"]  # the root reduces at the very end

    def bwd3(
        o: np.ndarray, k: np.ndarray, q: np.ndarray, first: np.ndarray, sh_pre: np.ndarray
    ) -> np.ndarray:
        # FSDP frees the unsharded gradients every backward, so each backward makes them anew (tables 0)
        us = z2 & (q >= 1)  # ZeRO-2 right after forwards: every unit still unsharded
        pre = (q >= 1) & ~us  # the backward prefetches the next unit (FSDP2's implicit prefetch)
        wrap = q >= 2  # several forwards since the last backward: the first unit prefetches the last one
        F1 = first * 1.0
        cands: list[tuple[np.ndarray, np.ndarray]] = []
        # the loss's backward, then the head: its own unit or the root gathered (and the last block prefetched)
        cands.append((has_head, below_head + np.where(us, u_all, 0.0) + qH["lbev0"]))
        act_h = below_head + qH["bstart0"]
        pref_h = np.where(pre & (nb >= 1), Fl["block"], 0.0)
        cands.append((has_head & ~us, np.where(root, gather(act_h, no, "root"), gather(act_h, no, "head"))))
        cands.append(
            (has_head, below_head + np.where(us, u_all, np.where(root, Ur, U["head"])) + pref_h + qH["bev0"])
        )
        # a unit's reduce-scatter runs once its input's gradient exists (xh: the next layer's, or sent on)
        rs_h = below_head + qH["carryBend0"] + xh + RS["head"] + pref_h + np.where(us, u_all - U["head"], 0.0)
        cands.append((own_h, rs_h + rs_keep["head"]))
        sh_h = F1 * Oh * Sh["head"]  # sharded gradients made so far (the first backward)

        def block(j: np.ndarray, q_: dict[str, np.ndarray], below: np.ndarray, above: np.ndarray,
                  rs_prev: np.ndarray, pref: np.ndarray, cond: np.ndarray) -> None:  # fmt: skip
            done = sh_h + F1 * (nb - j) * Sh["block"]
            units = np.where(us, Ur + Oe * U["emb"] + j * Ub, Ur + Ub)
            cands.append((cond & ~us, gather(below + above + q_["bstart0"], done + rs_prev + Ur, "block")))
            cands.append((cond, below + above + done + rs_prev + units + pref + q_["bev0"]))
            rs = (
                below
                + above
                + q_["carryBend0"]
                + xh
                + done
                + RS["block"]
                + pref
                + units
                - Ub
                + rs_keep["block"]
            )
            cands.append((cond, rs))

        pref_b = np.where(pre, Fl["block"], 0.0)
        # block 1 as the first unit (no embedding of its own) wraps to the last: the head, or the last block
        wrap_1 = np.where(wrap, Oh * Fl["head"] + np.where(has_head | ~b2, 0.0, Fl["block"]), 0.0)
        block(nb, qN, cE + c1 + (nb - 2) * cG, h_above, Oh * RS["head"], pref_b, b2)
        block(nb - 1, qG, cE + c1 + (nb - 3) * cG, lo_G + h_above, RS["block"], pref_b, b3)
        block(2 * one, qG, cE + c1, (nb - 2) * lo_G + h_above, RS["block"], pref_b, b3)
        pref_1 = np.where(own_e, np.where(pre, Fl["emb"], 0.0), wrap_1)
        block(
            one * 1.0,
            q1,
            cE,
            (nb - 1) * lo_G + h_above,
            np.where(b2, RS["block"], Oh * RS["head"]),
            pref_1,
            one,
        )
        # the embedding: its own unit (prefetched by block 1, or gathered) wrapping to the last unit, or the
        # root's part, whose reduce-scatter ends the backward
        done_e = sh_h + F1 * nb * Sh["block"]
        above_e = lo_1 + (nb - 1) * lo_G + h_above
        wrap_e = np.where(own_e & wrap, Oh * Fl["head"] + np.where(has_head, 0.0, Fl["block"]), 0.0)
        cands.append((own_e & ~us, gather(above_e + qE["bstart0"], done_e + RS["block"], "emb")))
        cands.append(
            (has_emb, above_e + done_e + RS["block"] + np.where(root, Ur, U["emb"]) + wrap_e + qE["bev0"])
        )
        rs_e = np.where(root, RS["root"] + rs_keep["root"], RS["emb"] + rs_keep["emb"])
        cands.append((has_emb, above_e + qE["carryBend0"] + done_e + rs_e + wrap_e))
        return (base_b(o, k) + sh_pre) + _top(*cands)

    fwd_f = np.maximum(
        fwd3(m - 1, m, no, z3 | (m == 1)), np.where(steady, fwd3(m - 1, m + 1, sh_all, one), NEG)
    )
    bwd_f = _top(
        (one, bwd3(m - 1, m, m, one, no)),
        (steady, bwd3(m - 1, m + 1, one * 1.0, ~one, sh_all)),
        (cool, bwd3(m - 2, m, no, ~one, sh_all)),
    )

    # ---- the optimizer step: the simulated micro-batches' loader tensors, the gradients it reads and
    # foreach Adam's parameter-sized temporary, or ZeRO-1's / bf16-master's gradient conversion
    sim = np.minimum(M, m + 1)
    opt = (
        S
        + loader(sim)
        + np.where(fsdp, sh_all + x["opt_tmp"], np.maximum(x["conv"], x["opt_grads"] + x["opt_tmp"]))
    )

    phase_bytes = np.stack([np.where(fsdp, fwd_f, fwd_z), np.where(fsdp, bwd_f, bwd_z), opt], axis=1)
    phase = np.argmax(phase_bytes, axis=1)
    peak = phase_bytes[np.arange(n), phase]
    # what the peak is made of (sums to it): states, the gradients present then (all of them in the
    # steady state and at the step), the in-flight micro-batches' saved activations, and the rest
    made = np.where(fsdp, sh_all, G)
    grads = np.where(phase == 2, np.where(fsdp, sh_all, x["opt_grads"]), np.where(steady | cool, made, 0.0))
    held = np.where(phase == 2, loader(sim), m * hold)
    rest = peak - S - grads
    held = np.minimum(held, np.maximum(rest, 0.0))
    breakdown = {
        "weights": x["w"],
        "master_weights": x["mw"],
        "optimizer_state": x["os"],
        "gradients": grads,
        "activations": held,
        "temporaries": rest - held,
    }
    return FormulaOut(peak_bytes=peak, phase=phase, phase_bytes=phase_bytes, breakdown=breakdown)


# ---- BEGIN GENERATED LAYER EVENT TABLES (bench/memory_calibrate.py --write) ----
_EVENT_TABLES = (
    "eNrtfUuvHUmO3n/pZUNC38iI87i9nIXH3tizGA8MFAaGqkvqGkw91JKmAWPs/+6rk694kAwyHpl5zmEtJNW9SWZmBMn4yGB8+Z9/"
    "+PvHL1//7fff/vBn8+4P3z5++fXrH/78wx+GP//zHz/94d3b39Off/z59vf05x9//tv4j+9/ubdrv//8v/33/zv/c5j+fvv/tz+N"
    "/9NR4r/+8fsvrn82tz+Htz//0RN3fx7//DT936fxZ7Pw7a9//B//858XAfNd4R+/3u4x/8st//r+26/Lb+d//fy35bLxR7cH+Hn6"
    "7af5qumi+e+vy6P+POke/54e5+dZ0zwC/+j9+/bP6XLv324dlnHQ3fpsn6abzA/90/T3P9/+nB/x53//+zxCt3/dbjj96+3v9S7z"
    "dcvPhmmE/2n6+1+m4RxnZ7zLME3eP01/j9f8r/87X/39bv8y/mZ+npsuM931X0bN8xPOgzWOyr++Gd2HH3/5+GZ1//mHH3/5/S//"
    "fvvHxy/f/vTjJ3P+06f/+OWXP3365cPXn7///NPHv79Z5w8/vLwb/vXdD+adeftzuP1pb3+6d+7tz9M7+/bn+faTy9ufb3+9SXz/"
    "v+vtz1luuMkNpBx97evtJ+fbv28Sb6/z6eu3D1++fX/MUccf/vLhy5f/81++/4BW5l/+D578jx///nJ7azO+9vjn9SZpzPgXqdiM"
    "Q/R6+9F5FBjHy7jxr1P4zuNgvdyEr+9O632G249G3YvWcQhuEzL9FShPtCZPPz+3IXVfRqWsW5j0wQeecptTfh0vCcc99+RDTvl1"
    "vMRMmobFDs1ksouO8/e/Xm+qhnEsZx2jxhMp5laxwUwG+2Zf5k7sq6dhpbq/j83NmW/uF7zE9AuT/mJ034+//TQK0fNgA4nv2v71"
    "/72Lo9+vH74FwW8Y32GYHthMY2aX+RhcYBfPGSzXURp8r73AYxVZ6CQ8OcQ00mK/GFzqF9h9jH8f0i8WrUnczWhluAekO4i7mVuQ"
    "cZdUbnPKM3EXVj6gyhd1q/MMzjNpzHFNy4D7TDba0ziFc3u04P6nH00Q38dbDufp3T1DuIx/jWhheIXC7ssU4deJtmay0++ydjK5"
    "V1bItuOkWuvdMIjakx522A6u/wdfwxq4l9cflte3JhwFt46CdeELTeL2ND7yOV3EXpJns8Z/xEW9GUfAjSPgyJt5MzaN2YvnD283"
    "OCWqp5Bqp8ey4aQiqoM3MPEbRDe4VN/HZF4hiN+SO6QRfJrj5AYD9waBqayuYjPRPPaIMdi+qRlGNTkUPsu/hA8lXBzsOVkcnsUP"
    "ujtAsdkEphEuGOEI+CtG9JumS8Zvv//2Ma2GdMvbOCi9zb3j7C5YIvB7gGk9qpFRSCEUWqz6cIMIUyLqqz3zyw/Q4+bz5Fxim9Ha"
    "ug5DV2B8cyiow3SqwHSum+xkTo3tqI8B+VojMN7C35eBDNB8W83tYzte6+FkiN1TQ8aC0OXeQ5QzMO8BVh88jXGxqEah788nzjyc"
    "+VWS8XGlqXgud85orS8XSQpF6fKQKRd1KhQ1KRG1LA4d0iYbG2MfK2RPZbT8NIku4PLTWHOf5QetRrHS0G3yT1Ylqv0TDPMThKsR"
    "dJ/gDkSKGmmNq2BlSteKj41ydnRmYNVnTtGKVwCw2VqSSHObOli2PFVbButX/2pU+GpZqjqcsXaw0n7mKZ/ccQKjxatVMFrmIFjA"
    "2mtvuoh9/fjLx798+7e/NyySCdOf2tsMJaUvOKmRyUJYkVeBAJMKSc2BVsBAgFQCIqlIUbkGr/hEpRUb1ZlaTmj5TFZPYVFNKIO/"
    "y5V0ilJ0aw+QtYDlHg1tGtr2DW3ZMuXA6Wk0GiblYVI4+k8TVhlNNXEZA+qtmaBuQdmgoGJRdTO4ODFD9RxGx+oQXHk6iyO1nCEt"
    "QSo0ZVfMpJzOxiNdWP7NSryholhYDmPl30im57ZO47eda2RimOk4Ks3KvOmUOz+tgqmDkvQSpwTz8TpFLaPv+18/fP328QtyXmdB"
    "GMO6NtiwP32qEYCnLWyKTm0CT23SEm75B2jG+Bps/IZbvhZ+vnm5D9Y8kypM95AtcmgFWP4tU1NwiCTE5Oe4sfPCR03Nxyb7LpG3"
    "BOoD8w9/E9kzMQB8U8YzNC83W958gmBmDFWpMe9r/smzX4DJS/aoSKsYzQHXYXwdpKuM1pBTQfoIrGJ63et8WuaEOEc7VzroOPOH"
    "55BeiAJ6D71bD7aboIvXBb99mXt8DSy06gq9LkXsST+7RfrZ15p5AuujtXpcpN1L+HDJRsOwOtAMlkBlA0NLcHLAcrVMY4860/SL"
    "y2hT8ImDs49YBj+tMf4c4FtN3UZTMALQm4beE97f957oN429R9wwTKzynFUo0mwFmonaoEzNPnDPVsO9cLIfDfTZEuhXZgfoStVC"
    "XQ8HzYLMSwlyePVwZsZtSZUWVkk2ZLLk8fbLDTCnLcecqaMeDHluOpD10FJoPah7V+np5dc52OpgWAKgGwjXsEBqRqtFtJI9blwV"
    "e8BgWwaDwWO0CobXOmxbSCw2KRxD16pq7PtFXUiC1RqHMdj6zJVgQ2d46eCh5GixkADiSLQr9i19xXg95CLa3OomlOxm07KKqBp8"
    "S4NHgNW1O7Dcylnod3xch5IWN5vgwkQPBwkKhOImAjkyWXZ1hfgObxg4OKJrPFLtURtj+nGcJhdu4HSfPiuNpNJIKo2k0kg+I43k"
    "Gv2URlJpJJVGUmkklUbyYWgkw+CuNJJKI6k0kkojqTSSSiNJLxlKI6k0kkojqTSSSiP5UDSSa2xXGkmlkVQaSaWRVBpJpZHcjEYy"
    "XH6URlJpJJVGUmkklUZSaSTviEbytogpjaRyrSmNpNJIHpbvLIpSSiOpoU1pJJVGUmkkm4dVpZFUGkmlkVQaSaWR3CD1tgPNHzkN"
    "qFmh5nd7HTxMEDXzs7vEuYdmgj3d5c5ufSp8Lz55uGBT2w3TPoKvi39WJdZlAF3Z0yNmljOj3DUTMmAtyyQxAog/OzHw2mWoD3d6"
    "Y3YJLMUbQ4YzYXO6m+fgBPnEbk6UPPQl24/uvOPFlBGQzebOY5jMOxpPScbDYlDt7/hO88I5G1DtTAcfcsYwHc0LkYxgXKad9fvT"
    "V0rJKYPxQfx3r3MrDACFLHuTkt0QP6/1IwKZnmCFYm59TF6T7tWvBTjnJ8KJuoGjZ3qsEHvn9fBbtN/0nIKzC4RhTBM3eZezUSMv"
    "snPVc2wlgwG98O79x2++RPYf59f9wuZiWLElFQOVxjI1BwGSth5IQjvKiifREefByiLTwpfBBuraO3wWwl7KMYm8oxTUaGNkjHeL"
    "MuWx3tCNca2twLWQwx8M3u40quUIVmhMqKdX6enj4jl87Ij2vgA4gYippGUv1moRrUQ3Hl/FTnjbFuLtYNIVdlNDbJqjb7GR4XC9"
    "VlXTWJDvn6payWEd1NrNlYhRunQlmZYQ6Yoci8nW4GPB7I5DRoPngtVTKNnJR0SlXfWf5v6DILfrVhh2Q8eh3/ZBfUtasG0CQRM9"
    "HNApEIo7KwpQz9zCIIeSFuoOuDfw2H7g2gNEhkEQFdzTTiDw/W+///Tl98/jV3mVeXP11e6UiI25NnuSbPZh13xgWs0jGk8XqzlW"
    "D0YazBK8zmXQDL8OGl1olGqzH/dgK0bMLhyYjVkv2/JctiC4PET4PKB1tTUr7owdNKLGWdqz0lZ2Zthryi3Zj02yB39ke8bIR6OK"
    "PJTtdTA6+TQeiLoxCJtwB9Uu1I1dORvbkTW2ptVrTKfYh0exD4EiONfoU1qGvoMxMR7GVhobCc6V2IEk8WDsiGn4RPL4xRpP2Wx+"
    "Sz7EPgyIDTgPmzHKteIhbMw82Jhr0OKf/UOfy1KKamkK9+YnPIT9tDKc/IDGLUAteQEPwgQIh1oqweccod+F+68f218jfr+mJGkt"
    "+fY6MOx14NQjagIur8tydUkZ+fan4tvdrloalGB4QTK81vR3ByK8C2I10bfZmxWqFR1UEQ9UBcdPOX1TNW9TNWFTBoRS6HNP/rrt"
    "Zqt8mmTpdQbX7ceIhESHXObM+pKkxhKNJbWxZBE975K73kUkyg7T48eq2tRzG9q2lnxtxURtlaxdTIyPZHhNmNlyyRydxdURuu3O"
    "vbbN9CW5WRVdmpD1rJ7ubF+eMz9Ovf/1w9dvH7+QTdJTEhh3+g3+D69eu55NEZJNIJJNuvEso1nZprQC4Z6NTR7WxjXquZ/RxltV"
    "kab4fYFVj6viOvdnXhMkOC6IHqUDqsJrYYNUeF1DFwZMaDeSxWPIEo5aHoKHCloewt9ErkKMl9hLgNzDa6q1cY6xj+/glXjrnYqK"
    "5zjawUCc5jV8/Gh/CnGTVMiu/cJj5MUco40P9BkRwVgY3igc2exTGDt4a9ZyOullbicz0Y/N2mW2/tj4PY42xak2PdqWnltDuhgD"
    "FBstsePa6l7Cp1xKo8bHISk+CJ4XaRhc5BwpR9r+9IsxLbBw2+jZRxGDD9GNP6Rxbb3R4PCGxXjDwhkQ6MVDpwgfzneK6Dd9nILf"
    "AEessZxo/xKyobNUQkUkmfwdoLBwJhWLLalP5XgW4DKhjaHLWZWejn6OY74LuPwnUzyhC46/R0osrIRookIljoUOU/d9UIxoZUjR"
    "d8NCvJg1CNQBhZKdXY6HNyM4AwEZFqxM9FhED9BGwxHaHZyaZ4Wo83Pyh6g9XGUYCo5o5cJ9PFPWnyFY9ASrHX+ZE8Zx2cJWsqId"
    "FnuKB8SIBsSk9S0aPOaWqX3XJ7IPgaoFqm+QaG/wsc2Vg/ZiQHTuDhGP4kLIyz+gf0mLjoXoTwb7RHhPjmJ6IzXXDqkVQDQpNqsH"
    "ZQ4BZWVobBcYdvs0oHJZKZeVclkpl9W9c1mtwYxG0EpRpRRVx6eowrvPmZ+LVqaqfZiqmBN30LAJJ0YRYZV3jEsJq5Swam/CKqjz"
    "Pex5V96q++Gtys/mAemrbkFU6auUvkrpq5S+SumrysMnkrov1nihE3ilr1L6qkegr6rO/pXFCjwzzBrXJyKzCgMvlfzHJ4qhGoCS"
    "WSmZ1bOQWTUoOiinVZbTilkMeEJqq1vkVmorpaNRaiultspFh1xWzdoW11iisaQ2lsSGd/XzL8PMa+Mk7rxLcnwvNFms0Xr88Feb"
    "2ypblrJlsdiykJTFbZ4Y3iFpVn7sHpk76/aVb7gbe/nUuA/Llm/C+81MwtbBbHNgsCVEfcedalwNtr+Wr7pb6KvueI9vrMQAn4Yf"
    "mEqCL8RT/ghrmRYPw/FOfyIW59x2VIuH89DdvrOzJMmNm2fnFDrLTh4UVPOpuY7aGp3IZzCxjJd4Ytb3ixy5YzNP6Dw6kmExmfE4"
    "qO3HyHZcKJ2POr+bukt7p8Yfewvx8uOCnktOV+X44tOjrPjDrc+LdasFVWLn5rTKg2+rggGWHEbJEPg5UpL5zUtn/b5SeoLnkX6Z"
    "HzpsZVvcou1QccfIrGPEGhxoAI7SkffmI3BHXn7xlbbbwRotqdH3lDL5u8Ro0N6aQjVvcE2LweUBN5nV4WtdjZ5ubo/DwguEC7DZ"
    "5bSBucz7p+RaTInDYkjIix8dSpqzEFEG3igEllkLQb1RKNnV/3jQNMQ6IMjhIdBYj0X0BK7IFzoEjlU4u7qicMTag1uG8eD4Vy7c"
    "w1eJFpKqRVGwGvKXQWloly58hSveQZBqj9ExwtFBoGbBOrbnAkZ0ToDFRfUUPjYcJJ6CoabzVpjyUD6FDMSj+Zu0oFkIF2U4UQQQ"
    "C3DORsDONQZ2JW8qh3ItMJxDMFwZeNsWtf3187fxC3A1XF1DIW2NL2f8j82wBbuy15jx7eemo0ujE89pCe+FQzMSaTVMrdzTtg7o"
    "rCu6B35oNl+gjdQD9DJBI1qs0LFIZjgqXKQiKNs+glnIzhZ7ui+ZW+y1ixkGsgRcTzY/3nVqXMS/vHsu4O560CCYjFxgNxd4/F79"
    "ZtmoJjrxRU8dUcGEiF0KO84I3c4At+PxOrn8u6TKuSd10bhbeCv85CwYfsG7TOrhs6w2nl8khB4/kKtpl5m27Kx0unYccrWIU8NT"
    "8OJ+9+gpRxwk5ywLO2RO5LoR8BwHst2py+IxCfrcoVPQ3tDMpMdxEX5U9vbOQzLc+Zb1C+PkNXXPdIoFrFWm7A7iM8J1L0TdAjmN"
    "bLN3mm6BHJ61mVUhtAgZPZoL6NEGr03dCljSHFSNGIC2tHWtUNtvYPulJ7ex2+3XELYsIEgjWJgjnpvliBzAH967lKjNMJrL0DsR"
    "1E8m33SGDp5IrTCdziW+z1dr4aPsbSsu92MQW1VZ2vghDr976G8ehLM1nxzdW5zeSfK6c0Vex2kEZDxCKUkcGNqFNyQ4pqAILxzR"
    "jPYWeXEuddXCT6vCz2FWlUc2woYlmkLrgDpPm8YUvE214226LFq50lOWTmDAk+q6HPPMyjF5LbRVD0JQ7BmyB5e4q4B0y1Atu+Jb"
    "nJtm1EJCNa1adaxaneYvuB2xdvXgFtq6tiSxG8g2orWveSAi2r9736vlKkh0iZcW0YS5VWm9jMyfeCkzlSPxih4EPpTUN/JqstRc"
    "zHwGL2NJc5b7r1htNnlMji/JVq3YviurS9tgcqI9f6AScMuvJmlU06jGrsTgVUuoHeXOCzIPGDTrJvRZ4y6/FycuiNhsQWRCxQW1"
    "j4KiB/tmEPciWdiYNHPo5ajiRdRrlOclzKf1c3IGqalN3aFiWIYBMZ/B01mee/TqAGlJZ8ySkFnncztydAkJH007M6o1lXxBoMyB"
    "iRaXFvoahvT3v374+u3jF+RcEYSXbEwKPvg/XCTWS4PgaxMEbBP4ajNo1Ke89jezw21sO1VIENQRrKOmUJWhkIdA4fJOaUep81KW"
    "FXh4ko6WdKAkgef2Hd3I+4K7BH4U/ibyiGAczkHqxHaGbGZp17MjY2xZBiMGkWYl2bdUKrKDa9FvdVnNJppvbPcOsaRpqUOVGEAJ"
    "Ykklqkg/JRXGAzOsUwl5m4E8dEfffrDpJWYjHoHjBJFcmmTXkwZTamQjiBVil/W3Lz5sBYTWq8NAkSZAaeLC3T/1wV8IHicrnY5V"
    "5PaGhvXU3ovfr12jLTjWYYQ6wwnCnH3tgz95HeTwd+2dD0ZPi+9OmQZHNkhDMVnOnuIhZi1xAWwko/P6gbbgTH74m7b+zOogZ4In"
    "zuIdabYCzUQtWKYGQ+CuC0a07XB4ONlHQ+OWj8aPMNJkadMWPCBR3ixS18HRZej/kppCGYLiBAaOZgtr5rQOs9RkW4QRG24IFG27"
    "bCCNFveeE9h8TnDMKStC+GWmjIakFuo6hSRZLuEAWFmKCFl5BE+5RZRzOkK5moR5i2uIgMWZBqgTPJr+cDmMbZbD7DqDhZlMqZHj"
    "GVAjjW2jF793sAwQ4RASwz5cCUb+A69mPACekS3GKQdNYBoPFTctyS33QsleviHfb3hN9gfUl5r7Eo1Lr3eC+bcc8/yI4Uj+Iby4"
    "oOBvkxJ+Ezye6OFAb4FQ3KBUCqMgLqWnxryV41kHSxkGgCNQuXC9K96+9qzMuMqMq8y4yox7z8y4ayBTZlxlxlVmXGXGVWZcZcbl"
    "rRbKjKvMuMqMq8y4yoyrzLiSBUSZcZUZV5lxlRlXmXH3YcZdg7Ay4yozrjLjKjOuMuMqM+7BmXHDRUuZcZUZV5lxlRlXmXGVGfeZ"
    "mHFvq6Ay4yqHpDLjKjPu7gyNUTRSZlyNasqMq0FTmXG3j7vKjKvMuMqMq8y4yox7n8y4nz7bgabEHV3fjU+2YInBAxDRYnxer6Rx"
    "L/dUT7Bbvdz5tD4VZ38/VmKXJ52VXNi9ArEuA+ji9oq8hq9jZJhulnZ5aQacO8hA79tpPPtDJqt004uZ8cWs7xzLJYN/yQlyld18"
    "C3yd1/CJL9zG+RkPo3bD2Q6NlKB2U6Ar56BkGhAOzbBOJieJO4R7P9hcZyfmYFGEzpECFOKs3+G/MtxOJ0KC1OAtUrgZAQ2wEH/L"
    "l32kINqqGDHY+iCn9TFFG0PXuXBjRnV2fYEqddPTmSAlYmsN5yiTVAyj1hMARjMZxGn1XWdBNJtJHhytIL/DeJRpTJwCG9S928nf"
    "/JtsJxdCKX6VGFZsScVAXbhMjY/MRVjv3BBbQ+0Lh4LYFoHYTUcMrDUKZzVXb6xS19zVWIAcQDV1cKa44xdUnMD9bB8vUw3Qr1uC"
    "t84NITbop4+DtC3dqNp69EtAb5lFCbs1Zeq6RAUZwHbs3ss8Kqrop4yVW0R5vkeSrwkA8zn0VoCaYa3BVD8NJLciSN5hMgoRdaml"
    "SVvdxBpbBpB8Q1sVLoB1UBCAKxHj8MKlJZYuWsOPhK5LxgEE0gWro1Cyjx2XYGSbdjyp2TeBrtd7gq51Y8odjsd0OXmFF+l1qcaa"
    "iR4OrBQIJe0oxfjEQm0RigtTatS9ICDDKrI9DpsDu/e//f7Tl98/jx9x35UotSvVH/QVtqaMlo2pLLvSbfTj2Zj0rh1InL7ZqZPr"
    "+KR692ZEj0iEmsarGMKXEaGGPczTd6UiKbMXfWrX0Bgf+3Do+2c4IuHj6GxnybNCNuaB7Mpt0YvN4kn4S9UoO3Bd1JJcHCDQR4nj"
    "5hymvXlIpeQRpyKmxB7ciN05FXqyKDwf6eejGFoHaoQWnAgbN1gFwRLus2qfvDCg6QZEna0ZOrtwJj5KOs8Hd7yk/jDnc7vMerf8"
    "mz/puaJDGLW6sWwekV4zjZl0JWEZcUYS0i/7YATdDSg0W5NmdiER1Pz+6FF3g2nvkkHLZp0qGxTn4t0oJo9IKgmHakYtQM6h0Ccv"
    "YhUPtiKO7EIV2Y8YTwsLd8i8sJU59Ev/GeZw9vfqOxYT+lIqHpZEMYj6ROupGFYL8XRbnrEKgrFa8qdWjGBNCA61tsCdtkZkXblZ"
    "S2GqqDjAApc7E3IhEYWZ9wuIEDUk3V9IQljsrn5iZgoS8DjTO9dn9Bo7Dx87pRP/dAG3S/ZekK8XJOodOA9ryQ5bshw2ojfsRDoY"
    "GMaU+uYC3pq03utnDlpwD7YkHWxBE9iMH/AIxIB+pHv/64ev3z5+IdvppzAWt4Xa5YdBDLIJArQJirMYNrN+7F97VINNt3C7zU45"
    "fvx0yCoq0LSs5Gn/q/PQzIqrPUlHSzpQEgITyYDUDkXNIMQP6/WQBGJBD0n4m8iCg7E5B4mA1HjxzGhYu5jHEGRjyNXdvuHdI8Ta"
    "p3AbzUSsgjTznIr1tachgazUpJa9arC+BsvXsKtXMaeheAI4wsnAHd6rUPg7rP2n8+q1nAB88ZGK/2OzrsI2RbA2PfWYHmnMbeiY"
    "GICEq/60trrpWTLVeuNrcQItlFOsnZbegVELpgaeWyw5gdelyZENkD4mS22J+ANaMpTGG0r5IBKDFW0+BGqCjYPwN138hd/LSCy/"
    "nPXmJaz6sFRCNTSZ/DZYLZyLoyE2W4LYWg5LH/QmNAh0VarS088nmcjwQsEdpCduWuw5XgvrsrCufAMbKrgp5kzd9YmRp61Hnk0m"
    "ozEK5dofGhbKFPSNBxJMGyGsENysQPeUwBoWvsXUWUQd3h7Fke2Kmc1jI2dbiZxrh3UrFM02KgJvl+ro4vWyhhzBmi5YxfnrdtHi"
    "ULE2Hxk1i1+W+ZoiLJxb33Zd0TitIUkB9DWueD69EyAA9VoNUM93AlC3c0RioKgBeVSXrUCi1dhThjZF+HJbLOiOiAVL0V9rvOdo"
    "vFeG8PbAdLdvlCrxmxK/KfGbEr/dAfHbGq9obP68FG7KvNbzZDZ+KqDdZ+sPdTQ7CCUX2KWUgK3m+DhpQseMu2SCFfGwpacGlYdN"
    "edhYusFDs4PSsT0hHVveJg7LynYLncrKpqxsysqmrGzKyiaMmbktOMvOTJSVTVnZDp/7KznbYcjZavP0p+RoCwM3o04Qn/IGMw/l"
    "aFOOtrsvOihV2z1QtbUoNDw5Y9ttDVDGNmVsU9YhZWzrEVGYNYETvyagIUkZ2zLp37k+29cQekfEbaL5f7rw2yWzV/62w/G3IemQ"
    "q0yLlcbtEDRukKnU58pOkis/JA3cp892QLrq3eAtrcuSM0ytqZYHJ7MtocHmnRumdtRbBdv49sHZyo51jU/qAl3cbfF5zTyN0kaG"
    "UGZpl5emwAl7cGpHpWQ4jtPwN5swlm3539F2YwTz7HkDI18fRGTrMNpzMiPHlMT9u9PASPKO9ASFM1nC1EM5mHRiimeElEZG8ZgO"
    "huDpYBV1AXp8u8gFuMj7sVlXcBYkFrTEBvV55+Y8yrvj9JgZ6BCM3vTIqx4n0MPgEh5GdRbKOWh0eFrN3Fk4aaGBoaMVQG4DDXHZ"
    "2Jp1bAsGlRi4gzRWvnkQ3FgZr85BUHQlXZOwRktq9B2qTH4nQAft0B4K19kqXNd2jFqhPJmB4GtWjZ5eDkpjyNcQSV7yYCDxZ0EL"
    "nsuMD9pYxxTcCZ+CPqswlYgXO81PI9DKtcpsG5lMQc8IIQDBWFPYdcY8w4rfQswjavSK1VlEHRQu+LK9QfaTYW1bibVbjPRGyJtv"
    "a/l+IrGODqGA6BqqWvsFqz1/fS9cMerW8EOsnB3fvBg/F6yAO655+WYWEBqfoNF8bocgQe21Bag93xOo3dY1s+P2PD5cA16r4aoM"
    "oEog6S7g0R0bPJbDxfYA0WUAYhkk3BQE/vLLh18/jB+JRPbMp26naPvQ6xMzUWdUTNlkM783nhYLXUWvpr4Qg5PO3e529lrTzjjp"
    "17oqZM41X+NWsUWrIbVe8gRlYR8dV60tUQsqPLdTONrQxVOIExD8sJDKrpYXSb16c/7DcuEpd2F8yRBdEvZS9rGXE6oVnQeb1+ri"
    "vs/8s1pmHb3cxNvZDLhtVL2VnNoBJ07SHy6HTqxGB+EfKqzGp2I5ThN1iLv8iWWOBUJaL4JOY5FaW6IWVHhupxALsti3sa2vKfhE"
    "tvGPE4Tx9GhxehsD5ETtSKvNa+VEbUjrhXPKv9RnmhlhjdkdIMYzvpUOnlBNe4Y9qq+oaWjpTTYx/Z6EeC8wFynNXmAV9mU6yEMd"
    "ER7W5Gkm46YblVO7w46m2zLVLKXn5krXFPQy6ga/1n0OGdtDu7FYiF1PG5i0Nx4MnmvveJj7IteeyGuH5NrcGfYgdNmXcAjP0FkU"
    "uQG5UfUpq9qKVUNPfSIOyNsi68/7V1vrrzVNyArbNKGJ4zJG5dckS2OdJS3NsXKkfS31euWOJylMiFkBj1KfoIsPWiYoMInmtpCr"
    "OzRyXuIkagf9TSIxXQUJyQAirD9AWP9ds0yugBawMA/LcgHW6UVrLE9SDRGTDT5QUURS8dDaRIGNtTauxsWOVrPBJTNsor/ZwkKX"
    "XsisZSBy53b5agFtoTDTDFPMHFdhE+VPXSBaazlPXyca6DoRowSkdRqpofSwvv7Fn4ZBiEu82PImtesVSbbIyV6EaQtvmSYzlGIV"
    "wsJSPu/IZRr5FAPHZ+xsglKRTRyOUQQiIL18smH0XjDlRTNVMUXFtRkWWq5V1S7QMMsuVlB20VD1+KHqBJDqHbrGobFPGPsKZ/mZ"
    "4manqgKzjlBSQGBi3WytoErPWhZgZki8CkAu5+cl+3gSJMrrBWrkKZU7dgrPTNozuTTTxHiJOdPQym2j0ihqzYCRWRe5LJFEt9BX"
    "GY7f//rh67ePX5DTJjN38e2+cS+zXX4YhEyb4E6bwEib7KaN4Wle2M8xye+0mxruoNqpnLCstbOS8fkuMeEyV8kofoX5mmElifR5"
    "5aMO2Z4tePkJu9z5l4/XzRcM0QVBAJmH4pRyTxvxeNp0UuRKkpmtnlPeM0StUYH+oDUq/E3oV/GYC5wqx9Bv1k15Gx4n2MLvglQ1"
    "54XJ5MDSiPtlpUm/A8SsL+Yl2aEHHdM/4ZFDvJU57oibMqWTOS+fbfqu2LQdx11JRvepF3xem2ecMXNZj6zb/o/NijhsmmHYJMOw"
    "Sa5gc98vG1ZMFgJEN8YQNz1F5vPX05NeyuRn8WsgjsghfhrkeLE04KjLy5rs9SGuoq5PaPZt9lNhZsXpIXZjDqDx2NDlE1gz9aZ4"
    "6i09YRF2DtQEKDj8TQtHhtuSl4jl4ohFYLrMEhvpPLF0BmWAMgUKnEULc3C54ucK/Cy1V3T9rlPULErQ6Hyxm2H9tHYODyXRhRdI"
    "KGWnWBne35qXVOx/kBCjKQArBWDbNx5qyjQ0jTG5lGLggGaz1glBrMZKLzB1J0Qd3uDIkdWUZZ+UJYHimrmUZi5smydynFIdLWIQ"
    "0RFXC1okMEUATKRQRAo+2HDjvpISaf7BTzWkWUVRAlGSK3RYsrnf1o1zgxM4QOpYchx/vi8cf59eyZqFB3DgCuBdDbVl4FoEp+UA"
    "Wg6Ze4BkdxcgWQ6L5UBYNnetwK6jwW4ZvN0A0N6+u6yUqEqJqpSoSomqlKiMOElnLzMNyNyDbpQSVSlRj0WJWnJ+SplRlX2kDVlI"
    "8em9fSM+me46+EA6TJA6kOynSqWqVKqyo1rKqKqMqrswqlYdJtyeWPUWz5VYVYlVlVhViw1KrLojseoaiXNnuOzaHhrnCEaJVZVY"
    "9WjEqscsrSi/6n3zqzYqmTwbzWq4zNAFHJLFwCjNqtKs3iPN6uFqSMq2+gxsqw0LQ89LunpbvZR0VUlXlXhQSVd7kgdGgYZZkjkJ"
    "SjIaqp6FdDW2kivDSuj6B5wBnw9fV9HQWszpWjLZzxSdO1UylNpVqV05+Zs7dtlAGV4bM7yyreH5iF4/fbYDdnhmvGW0NznEXd80"
    "xs12Xwd7tm/ar8t67Ay7DyNWsi7MqxLLVjJKX1NpqhViFpueHIwUFsFj2PWlncTxcJz8OzlmH0OsxAITI1aSzm7ttNKPsH3H7exO"
    "WBLqJohlxrc4hb61gcOtD8LzO3hL0DEdjpbOeFoqZqOUxxmcp/2InokMH+qgrMFHPZMlnU588YyTN0Wm7gBuimQjCyS4uar1e8zf"
    "LnI+M7z/Yw9N8VrY+W3rwVbi262uK2Sani+zORLsv63PeilTsIK2a6AAkaQ+qGBHBaz2bRu8tRF2fGdFJI3fwX7a23iegvtIxnNS"
    "YMtmtMoWTLEtWHry9miQfvNruEE6xhIuiV/SRmhY44nU6Lt5mbwCZ+HyLC98KnxG1mWZweLLeI2eJtGBBud+VdYZsL7rMsFE0Hvr"
    "MoOBNtcyBRX4HyeyKPxnwH+ufWe7OGUKmgWWXDoxcMDyBMocBspErZaxuhOiDooyfFlNV46RrmT7ETVr4WctfDfIN+eJddSGJKL3"
    "rgq6CMAKH55IAYkUgrBBx/FggxQoSKEBGwyIlv/QkQrW8a1W7nznGJgXnKCBUXcSYfjz/WH4+3RGzkTcs9fWgO5qmC0D1hIoXQCe"
    "C+ByN4Ds7gsgF0DiEhAsm8xWQNdlgG4ZtN0CzL7/69+mD8QjjSpTyAkW6QwroS9CkBNSlyUchcjFLKpCX7aeCNbX1pwPNqe8jjcl"
    "r72MPoXQe26uty2LyulldpKBxUEIXw9hHOBKEYFsnZ1l2ssJ5fUMLznlLYheakanyNY24Jj1LYYbsPHzODdrNTPrbDAxSbPU4i3P"
    "Fu2FdDC+7uY0tTnldcwqee1lBCuE3nNzvcxzRiAVRmT8tuV5oEys39TKBJG/OVNLTnkLwpaa0SmxtAa2dazlAj0gZOJXOQ3zd1ps"
    "0rSHkM36g1nOORtMSRPq2ei5OpCIRHdoyiUi0H3upZt1NghyiITbwTY4GxRGXBY7bSKSJ6kFRYq4aqNR7kBZy7lDHetJdId+5CdZ"
    "Z+3iQ40seyM6W2H0L2S2FaVZLY7lixJT+ZH9EvX84/wPXb0p5T09WBGHVZrR6kljG+plPNXcueVTKWIAqLhN60WArhiNs7DWjRye"
    "5QxtKHYz+Vx7pt1MklpLuMtTX8q7+9BFolKi1EeuFWk5p7GtdTKyPmWixhPWiJtXdJse6xddwsIzNaygVcjdK0zqW1H4ZvPwBky+"
    "hffQklxDlt+nqMwNrMqckPpXa2G1ltXRajers7UPc1UkwXX3ariMMmmD1yRwIBFABTOn9BZZns4KhWCZD9FnqDGgODwL9VmRPlAT"
    "k9+To7CWmLhjuQ4ZX0fNP1GgKzGnPM9mkRE0mP1m054ptBWNGqe0Vq+4SxSVVdSsvKKmUVmjcn1UPkkLvL3LXhr07y7oN7EjXT74"
    "pM0tC1rMEtaqc2hI6AxkP8mN5PTOhVppsmcg5Q6VFlA/A1lxopNPBM3VJqL+lSstS+MTm72PqhOzzkSZH4tHOmvS5azSWcNuZX1N"
    "za6toRXSUAsDjZCUuk57u1Xp/a8fvn77+AU5Czie55jWmPj0hl1+GKwONsk0bJIq2GRPfHzpGT55m5+D30ERdk3YqYi24JRZyfh8"
    "F1+JFSgZxa+x+CQGKkmkpzcwkXRotInUKSMVzMN4+XzdAF8XBLR5fE7xZt9AvBo2yDadKbmSZLqrJ5r3DFF7ZqA/aM8MfxP6HTL0"
    "QqfLfV/JJKDbhsettnDPoL6Rc9ZkumBpxEuz0qR7AmLWF/P26AMPuyc3hocTcWrmZCDezJRODKHcBOi7YnN5SK8mv8szHZVZF/3b"
    "sM1Qx77Mn9UYoh97aMemqZlNUjObpFWW3rmffHic1HAr1Y2hxk1PAe8KBqeD7Ej4WSA/i18DcUQOcedgEzGWxv15eWfDFQs3+Cix"
    "ARGzmU3vBdafkr1E5qhO8rZsVmvswRTbg6VnMULxgZoAgYe/aezv8EGLJca5OMYRCDKzUkc6TyydQUWlTIHC9Ir1PZBStF6P1qVG"
    "jMKAOkU9ogidCyyWNAQpwYkBtJIgxIs3lLJTkpCgHfR5Sc00jhyJNOFgJRxso8cjUpmGXqEol8AMSQKDQ3SzFj9BEMhKZjB1J0Qd"
    "3gLNkdUE6UAJUgL8NU8qzZPYjkBkVKU6GocqorEVwD5hO0BpygVpySRZsAiVVoUSCNpJV7VYzOZSJ1DgIZKl+M2Y6ZFIDJuvgpmS"
    "Jz3ULTNpDinazUWLshsHjqP6dKVP4wA3HPp7T10eLy5IZu+RI0l9chKmI2H7hSQrCeEPoSfYheELLTEFyjxAyRgpQimHRNDPNRK5"
    "kpQjbNS508wDyjWYo5omGSzBoqk3ZVMPZhfEvEWbr3nzxrMLuXCDSPPps1KiKyW6UqIrJbqSet0FJfoasOnEMjqxEh1VMUqJrpTo"
    "j0iJHusVnEJVZnSl0uJQXlWY2LEWD7KWgBCkhzQeEUH6sOZ3YUrpM6MrlbpSqTN0g3w4gzKqK6P6vTGqSw38cMTqt1VDidWVWF2J"
    "1ZVYXYnVn5NYfV0Eckc3bdKnjWRHRonVlVj97onV76TipEWhu+RXb1tsUpp1cDWjC2Ec4pUwGVSadaVZf3Ca9YNX7ZRtXdnW+9bg"
    "lHQdXlSVdF3pfZV0Xfl3lXS9TRSVVducvNqmUVmjcivSdcQqz3yrpEtirT7hqQzvyvDe+ouwumSxz6m1Kqkp0bsSvW9F9F74jQLl"
    "e1e+9yK+94bfxFDa99saZQfsoON496gJYYjPwNA5Tva8SdC18ab9uiAbZ9jdXbGSFdSsSixbySh9TaWpXqpZbHpyKmQZBB9nxCqP"
    "18VjdPLv65gdULESC8yWWEk65bVzTT/CricNZnfDChjzEa/b3E+nls1aUXi3lV+uz8NzT3jD3zH9kpbOOGQqZqNM1Rn8KzN348DI"
    "mKJ+zJoR1IFZ0qk1FJsBeVNkPo/lzUhutwCQmzGM7u3sCAcWcOP8j9P4P/agH+/YD/+MT7D9/3ar64rhpufLbEUG2+Prs17KFKwo"
    "8hooQCSpr0bZUYHkBIsJXt6UnX3JShYcgQk2uN8G+RTcTjLIkwJbNs1VBmKKDcTSM7rzAZA394cPgMQgxSURT3rCA9Z4IjX6YaBM"
    "XmF61SpfXP1WsI4s7zIrxtFAjZ7W0YNOBfyK+poQnPIoK4k5gpZ/lxketJmfKahpxsEDkCYbjGSDa/TZjnCZgh7xJ5e8DEnygkPz"
    "Ce05DO2JOrRjdSdEHRSM+LKaHB04Oco2J2uOxM+R+L6Rb7wV62gYuYiGWgABrcCJSZ0FxGJAhx90uBJLqAEWtlAAxjzAwpaIWUhs"
    "hTfw9ed7xCkAMknezhCDaPGxp8TQKZPPFZ3wZK0KxRZCyS6uWZLZOGj81JPLPRlHtuGgP0La8njhQDCBDxk+GiQmQSqyXjtIM5IA"
    "5xB6glSEL7TWWqGsAxSNMSGYbkgkwzwjkSxMN1Y9j5B1gHkGd5DTBIMlWWYLpswWwMyCmMMowchbPJFZiIXLA89b5Pnxl9//8u//"
    "+9O/ffn67XuQ+fHjl2+3j0wgHVE+16/xv9M1fdPg1mE3rSEhk+/gSQwrHT0gEWqHr10bl4OYFUSrvB4/TgXh52X6sMewPvqEEMin"
    "WmrqjiI8upnmy8SAYGM2iCmL9b+7+upxHk/z6qsN9CVPPD+rIbVe5mO4pHKTPuzAU2txtdM0heObe9oBV7s8oPHoom9XBBUtMx0e"
    "eB07C15uDjK32p48HmxMzC1iQWg8sOn0sRlfK9CJAvSgpDGLHmILYqYoVMWJ1jCEZziMR5MyhvNx4t008c8R2dZRGfxRuUCj4tnc"
    "JDYZ90LfIrTxpcjvwuM/4R0CghjSxiNKmCU8EvoYpg5p9cIjoZwMj6Rai6vNhEdY7QCoBVxgyqfoOHeEqPrYZtvHXtlTv3fUjvLb"
    "ITzmMH9uyazz4Z1ruK1j4WeITTSJ87fPZihvUqHwauNfvZw+wKMxQxUajsPTb+C7Oi/Zn5fuSc6eRsM+p+vBC/Q4A6A35HRx8F2g"
    "zzVbXzNI6RIeOxkoncEzm/iZQaqbohuYzEMHgJWlOg3J0wSCHFO05sAAVjO3ZHT2jDpmwcnF55moHwrTlHcHckGcflx77mfIcmMY"
    "Jxzo/ARaPluHbaTbs0/aQwTdNjdM8yK/YRS9B5j3ohoZdQVCoYUT8zAj9NU6fn6eSQwRGJNLDA9VovDN4fCFCg5C3qhcsZNFNjbF"
    "zUseLULGOxCDt9Xcfk3ACzD5nK1jsoYvIV1uOERHj5j3ACsFnsa4gFOj0HdfVqbs+BWNTDrL8OLDF3XSBeXxSjubr0NHNuvG9nys"
    "ak+TAAUuWI0191mw0NoTI3/tnLgSC1fzmw7LTYPFC7pPcAciuY20xiWvMqVrzceS+X1WtausV3k1A5stKh2pEmaeth52mrXsVRU7"
    "nMl3sPWjV8mahbR3UMGtg/amyx5xYqC0nsZJtGp1DyVlOTh9kslCkJJX2gDTF0kxg1bAAIpUqiOpllFZDa8wRiUw91MDa2kT5cZQ"
    "bQVF9aoM0i9X0im61fYCaTDUYLhDMMxWTAdO443RwLpLYBVO4NME4tr2nglNF9Q3eNWUKv1w4WROAHLIH6uRcOXp3JDU4iAtQYI1"
    "5WzMggFdKYh0YbUBVlEAKs6FbSWs2gCSP7r7LDFsazHI9DJLBag0qypAlwPyxiEwALDNpsC1wVpBnaKW8fr9rx++fvv4BTnxY4I2"
    "d3OLVH63fAB9iKZ15lkbb4m34Tet0yMR9gp3CQQwwaSaGA0kLl37bU7FMkRpc/45bM4nQFKX98cfOzLua2qmV9DgqLdj2xqepi3f"
    "tL05ql0/GR5YWyeLTB7j4o91sq1Fzt4Utq9Yu/iQN9tXbM9wyNtrJDu90gJMT4ih1tjzYUYv++77Gz8KjRcc7K2P/rJw+/HLDD1M"
    "dFmJzceV6wQGRwhgXI7cC9ZaO/jfYrC4loESDzr6bVZ8GjjYov01/gQcATijUN9kdnPaDxXnLYO3ic4fv6Snil+6WDKrGdjzTHQx"
    "Y9fLLEcZUSBjym8MT2w5PAnn8I5BihVBlYJpfQeF+Co9PbwpC4ouooX0VdYCiYzFa9IaIhPE2xd7oidbgJ5Sd9oPQ20zSiVYSTL9"
    "oNuVKejlbzkc5uBeC3/hT5d8Qf9WqMjGisierKzsphjPCjEeeHbziZDe/LhVeE9oE+8ggFiso7FP8ltU2IscvsQny1r2UjYujIIy"
    "DwK+wluSrOWpD7ATv8aymnDhGrpEcEW6GSCzPKVmWYCarh1QUz9bpt7jQQydXYoqBT2JKAlzOFfH26WClXnZcuKCF3wz9DhwpdUw"
    "tIAk2fkDQYhAqoEz3D5OrTR3SnOnNHdKc3dsmrs1VCnNndLcKc2d0twpzd3xae7CqK00d0pzpzR3SnOnNHcHp7m7hW2luVOaO6W5"
    "U5o7pblTmrtgTVCaO6W5U5o7pblTmjuluTswzV24YCnNndLcKc2d0twpzZ3S3D00zd1t2VOaO2V2Upo7pbl7OHalKLopzZ0GQ6W5"
    "08CqNHcHCMRKc6c0d0pzpzR3SnN3QJq7T5/tQPPbTQM6s4m5YV3B3nkXlRPcBVvWi3o335TRapDQo7hh2u7wtXD6R2ItBtBCdHSY"
    "wcNKbjrMSUSRWH4ZawbWgs94bjyYO5/9mG0Xy/dG33YLX56bx/cUGm8vC0+e40JsTjrvLC41c0jruVs48fL2nxcnDd+Huv42s5tI"
    "X8jEpMLGDzec5EDs7RAI7h6XNmcjDr0pQbCzE7hwsVwvq+fQG9fh6Q4rIHHz/bONu1c//3bOzxwTPQOpYHqQELkSCrjI8KZgCjI0"
    "nBvmWb2J0DwrXQaO9cLBS+3Qd/xm12TfcX7ZkzQVw9osog2oxkkV7A6JbA0kgjZ0nx4ZnZmdoiJToYo+hYra+2gWjF3kyzW7iRNU"
    "Y1d4h7dmZiWxFszNcJstwm2pd+4M3zYfNxlOE5kFp/GNq6GPJ+ZQIMjgFwANAGGwW9NiRTZWRLSbMWS3RphWijCDSXxyoDktibV4"
    "U2glnD4dvo6mPprvxpEvh7AgvADmr41xKT9YT1Gav6zFAtyFbH9g2WVQMLgoWojYMp3MmlmWU2OvRG3Xnqits5VTb/UgLsAuxJWC"
    "rkSUhFmcq+OdaAkUmPd6BeDJQjufB4ZLDUelBSTKzii1Abkh7Hn/2+8/ffn98/gtxGfmF+zIDteMUbDPOf3WHIKPRR54LLtobBB7"
    "7hWnkSfBptze4Li575ReaJ6JULAHqVo9+1/jo+HNGP5aHfy+azK/45hMK1vJT8lBQl6cizwFyV4vOrE2hHgdDv42Jb1reKz3/vnt"
    "jmFKLW1IMEf70M4FgQzuAtmOdq4r31w7ornWfF6NqeA2yy0bkL+Bc40+pT1Cxrr5Qa/DmNtmKWsHgreDMbulYTeXMp+IlLk7l1sf"
    "9rYGfG3NqKxacahtlRqX8aTZ+BP2jATZ3lWmvT232iFMcLdUuymn2UFYzODgXJzcb8Vb1o+prBE3WVNqppZcYd2KBGajUsGQ12Xv"
    "ouywI43Y7tZ5oLpDc+quA5F1BdGd6BLswk/TipimiJGmgiqknEimmkGmmjomA3cpnHvn3FvbTXj5TMtS/wyC3I+bBYkqxRvhGn00"
    "+lRFn0n0fK959V3EruxIP350a7Xn3Y5yqiXXVDHJVCVXEDNzQLLPJqxSuUSTzjDryKgehDdqGyNI8sYqqichY1M9VdO+HE1+ZHv/"
    "64ev3z5+yTZPh92E64L5SvXY5LqVPfZFmx45Dzej7JVa6cbuIRtvvmEbui5d8rKyy6J3TSDkuAx6p/nRLV+DyC5NkRAcaDtM8gGi"
    "paLujWvavXEFrZcaBanhAinHMG8hhp2zTe0Y//yL9Q4JLVNC7XasBvwK74MhJutdbeMkCzbScnts/LqcFzXkKx7G9lJAuMTy21Gd"
    "l3ltNvP/mznk3/7fMBoWM82IAeqLyBXHVcS9xJVa4y+1Nl1kqfa/RcDBApaIkn5NNu3qPKOw1YDl69o3z7yz8d6ZfNvgrULLnB7A"
    "t8z5R30sk+5q81wMXUryFRXL0QKVUJiCh4QL4QQ9DWiwRdDBT4i4AEJiJO+gkF+moKMb4uDkAvUweOP3KulQspEc0XaUXro3pEnd"
    "6o6BjWXCG9892CCHnkrQI7ginX0gA5Ki1Txdx7NtIKuojUWB1g7y6h3QlXlkjDU/EuP9W+Ct7BS/gyCZQKqPqzB25tmrA2dZYKwH"
    "3JjIXAFEof9A4In/tob3tsarOdDoBw3rO8VzcqMXrLo8k83Gh7mvJFyJV/tzB3Czg02Db3bvls6u8fBxCxOw8JCKYInuBjVcDdSQ"
    "YAw2uKhAFS6pL8rgxLY44vadJKXAUQocpcBRCpxN+SDWyIMAQmW2UWabHZlt8P7Tuq9fKsFN7ak71swcJK7B8B/u+VuOdSjPjfLc"
    "NDlwBrWY+s2lSndzGLqb/FTty3pzC2vKeqOsN8p6o6w3ynqzFevNGnZzWfIFy5KV9UZZb+6W9aZXFq7kN7uk4Y/MgROG6uLEXzlw"
    "lAPngTlwepQklArnSDWJZ2DEucV6ZcRRTgplxFFGnF5RpXpfXKOPRp+C6AM1ozq/XsPJuePs8Hyvifu9sOuwBvzxA2arDXcl2VGS"
    "nVwi5O40ab1Drp38DDwy5c7tY75wl/byLeHJxOaPOI/DxuhMxLp4gh0v6nvL8CZisK+3fH3Zwt+iTvcOY3EDfLx5yIrv8jX2jcat"
    "YMAO1Ps723OS47h55E+zPfcx72BfgPM58WArJGfQkABpwpNA8OFx2/Nz6p3en/viBnnjg5hkjCLHJcbZ6ajS+q1qM///smjdTnUN"
    "Ncw81/nT3OyPeodl3ORT5xb6qHfBN84lHze31R83bzUO2QEw6wDQbx683X6NeG+GCjfi5ZceVpcdrMYiavz0RCp5N2AD2tl6Qsxx"
    "LoQe4SYjgUAk9gPWJAo1dPNRHN9cwrUSnjli/96RLxpWDbLXHgoWpc72KOhociHhMDCxUmaW4R4arkxXB8mgrRAIAAiA8JJY1Mai"
    "gZ8wrt4Jpj0NWpvWGO5wtMBu2WmHK0N8qR7OQzQfyBcT1irCWT74AZO/YIhXih2BWNv3N+z3T5CUaBXYJ/wTG91REejZDTrYMc0a"
    "NAQWzj3B0o5GD77qvbsCu/jEx0FMAMRDPpI1vjdwcdXARfQ2AqhShVESEiEhONkIlfz187fxQzcUg1COmSPslcmzbcwSRkLmUXLU"
    "nTrjbsZ3m1sgLo0OpPpFmZfgnMcpQxbj1vYWUh/YjWTIc26LSQi148cPc+U0T3HAXucmBjqv/SVW5TItQBxhuBHobqccoPIjzmF6"
    "Wi+o8i13acIgk2DFyXqndgpLfi7QJwJ62NCUjEgw+xd4XF79nrylqDWRpE7dD8EQi90AP4jl38gANyK9IVJruGozcRB62jAOim+C"
    "n/ADw2Gkf1K8aEy+OP9KdVW6sKvyKCFVTZWnlhG/IeWXw0TsOKU5Ba/p93alX0DE+I1AUqSA5mjajD+RkTtmUmoejuN3DfpRHdCP"
    "OqypgJ1oTZeS6ajl7ZWGZPzyfaYXxlFO8GbpZMGUOSdItRGqBls1LXHMsPAVKN3ISUaL32LS7SLKfkt8jtElCa33acEh6DQ0mbi8"
    "JrnRFwqJVlEH5ciD37ayxmm1YalqvNnVEccvk/ts2WWyhG2kuyTMf86tOJjwaBve0BXe0JAdK+g9CPYXQ3WyoKMkUCjICXM53KMX"
    "A/gQtH9J4NiT3b8M0MKX4K6etpqbx8psUSL4EEE2r+EmNOfihIbomGDc1xXeN4q9wlsRrC5hCBYOHam3NvPLpWhaqpCWKnYN+I9m"
    "Wk1KC0UzH/fgNIwFcKdblxt0WUlyxZIhzjNzyVd91nXmkEDha0rVvR1+bwO38RG3g8/zuZzyuJoj0H1uk0/iZy616NKj6EIfz928"
    "9PJwBtesQiKxhmDGowWocdCAe0a73aTlQkS0lpbWgDiZR2m5B8kueDkjnEHw8noQbUlSeEpBBvQz0D5eheEj+vssuHSdGBZk5m7D"
    "CW20ojjSG70S3bwDlW5aTjFEw85zhR1u/QzqCLiresLdx7OayXqWYMhvfojzeYvn8xOGLEjdeTk7W78D9MN5+aQyC3Sx3Dtq5CBo"
    "pPI56pyTQPLFeShUm8nQRBHpKJ3VuAfKcUnDOMOGkc4lM2XNKWGlpZJ8NG8VxTNP5LMlzgbmrHWKGkbV+fva8FmDFHaEdIoBNHEF"
    "dFjhwuItt8G2Y7jhuHwlPVqsXfyxdJEOQ63XHE3L46d9cc6D44P3YfblfpiIC0UIkLP10EV+kX4nvs3n4EEzzeZCNvyCxi2qRkBq"
    "YfuF0XVbM6cf8LLgt2V6sH0VZManBeGa2ZsaqBkX6SCdBdYUv/yw0i1Dlm8CN9nUs+53togxfgUWs82dNofZ4y8ieBDCX6lvP35Z"
    "MVd4WYl/IhVkH7WEcGcyo5dMTX5YD8K8+I2dRWqC/mzDVRaOLuZqa1PsCeWY9ZxtGo2T30lLCgVpTSLE2ZrZaS4S40yGKTpS+pIe"
    "G33p4VSsdlIOKmAX8SxHGVG1Y8pj4NC1RTi2AUQM53B/oGgZQHGfYSSLUlbySERdSqangzvKgOnFm+ACCCHvNkTG6jVp9SiSz3YK"
    "IlbYAg7ZBhA2deY7ArKWALJHmQgZOi0wQjBGVOnpFCNkONhxOs5oeCTvIgv12VgfpzMsq0KIv10LzMcHzqAy8KzkPWNxW4/FN54X"
    "KSIvM893EJKvVdU2nPA7itjIAQdUCUjIXsrA8dE6wcOamJB8QT8MEK8eBy68RldJrkgvC5aWdNcZUVOvx67X42HXviOZHw4Akd6p"
    "W0mLrmk7RAmuTERJCMm5Ou5YEOMHiLLi4SFc6WAVgq3sRIK4SiBV7ym3z9sptZ5S6ym1nlLr9SJqWoOMUusptZ5S6ym1nlLrHZta"
    "L4zYSq2ntGR6ylup9ZRa7+DUerewrdR6Sq2n1HpKrafUesxYqdR6Sq2n1HpKrafUekqtV7+SKLWeUusptZ5S6ym1nlLrbUytd1uI"
    "lFpPOa6Uikqp9QqDhlLradhRaj2l1ntOaj0gGCq1nlLrKbWeUusptV5FVLUDzak3uqmbycbcsKzJ3lp3riDVC3YXF/Wn+aa53ddY"
    "3E6Ps4pfGHu4sRYDaMnvz7+GD2+4mGeWc3k5Eu7sOJTbt0HOhptJi9z0GmZ8jZBlz3kA10Use/0MH3zC1/BRLvkm3Bn2oZNNb1RF"
    "4uhki7Tk/AbBtuEQDPNs5LKO3fztrmcwM+g7uzIN6oPl2dmIe29qCrezy7oZBQzRZc2490acsd7oNN+fW7S/zim/GfXY+QFL9UzP"
    "YwKknlcXDnAG+Q6juvDMKA1zTytOdTY6OEojXIdI5jdz9pucxFyTEdu+//TNycj+UxF4yJb9YG0W0QYU+qQKfFgpAjPnJvAQ2sbd"
    "HSXaBCU2GhmwwCSaMarIVKiouaewkGWy6pcu99LWQVCbB1mzDYFZBUDjXwn8ODfBkaCD3SuctFj3W7vxlaG8EgsRtINxFXVxYRmi"
    "ZLDY5XCFtGEr1mdjffkmLIYKAMnmsI4EQMLqghl8RFhqebC05UhLwWWZxQj6bPiqWvp3vptGvtLCgvCimr82hqTiUB7LCVfFvYGm"
    "7H1BTClae9gyfcywBC5avw3j2e2Vg1yux0VxpaPGe+3H8A9pdS/dmC+BXYkoibA4Vyd75/LV3EL7u08HkcrHr7TUdioBPgKpNs7z"
    "/rfff/ry++fxi5Kbs8A1JeqAPvLRiNirGaNXpwPbPU5qTxrX1gdOl9zUJnI0nqJ7MI37Z3lLY0kMVaUsb2FP4vRxhOh6sw0rXNNQ"
    "FfdSO/TtUMIs+AQk28ApiqxmpFidjkG3P/j8kORsT2lkrQ5El5+E3inMRhnPBtRsXSIi91DxSUYj1ZQ4qt/J2y5nbR+a2ex+7abl"
    "Adqqk7Pdm0KCgAX3hrQG6Hhw6spG1o6GrDGF1D3nnXwclMs+dz0q1nhGO6SL/AnFM+IwtHSgEjsWh1ga2uiUdxnfLArvAb/xqNiV"
    "J6wdM1hjZiXNT/cPi12ntHE2KJtROOEtyCg7sGkdiz8LjqKMjFZw3rZHopCPp904stqyYnXgDtIk+WindLtPcoeMljHJZ3+rtGli"
    "3IlE6ni0UUH8JfrdxAiUAz1bEbcUMbaUs2/UE61UEjs9dZ4MTkk1E0puRnxEJ0p0M2hsN7YTxPGZOSyL+kljxmFiBsLwc/UTESNK"
    "JuOc5lyTl2pA2zWgyabz4eNf2+yzIN/kJZot+Z2KiZ2aMDrVUjm15lkKZnjK4HIxaE3B7oCYuIpuqQnPUhVBUj0z0q6USH7omT9U"
    "TvXfXqO2NSunlpgXIgt/Ez7YOgk3TZYPxb+EvUTxisRRsSyEBvlguF0+/f06vfNyP0zEhSLQ6pu8dPHrFr3oK7Dvfk333a+NvuqN"
    "WhcO7Ye1G3JmKGpmeXCRH7HDKXxdkYo+aYCo7LB+znc6oo18qv41qhfb6WGHNefJiW5s4czBlQ8rKZWMypEsHAVvw9rKdovxtwMy"
    "L+vyPP2/mdejYks/+z3I/hobLnPT0uJe6IKq8cUdR5yy07V5y6IY1bPUBZx6HV+kUAA8EyGqJO2PlmicjDdOghGCRiKqAb+k9duX"
    "jibMb4/CVqB81cRytEBlEqZgZ8ARjvT+sMOKYEeTV28FQSQT+w4K52UK+nkOE95cwIUeabJ5Ze30huI2Es+3w6QS26Cn1JseHEPZ"
    "CgxVN8TVeIplOaCfCiX7OigbnaHtGytkO0VLPbclY9UQowyizYIU6gMBzcMAQVsKBIvHrB8oZFrFOxA+ioW7eKNsm59eAzmrHmOd"
    "k4XdkrXsWCCQ/0K5V+FBO3R12Gc94Ow3R0WpdVoe10YRvHUtx1vn4+Gtnp5BjAL4tg/gPCWIqgRDMVETDydtBG3cztBGDGaawReH"
    "HfiTAZZNIcrt80vKQ6M8NMpDozw0lVvrayyhAeaj8sooKUyLQ3d412uLr1fufuoucPYL7AbKDWPqDOMYEZDMEiKKmPjkiVLEPMHp"
    "N6i7NexrVaaYx2CKyc/0EQhjbuFLCWOUMEYJY5Qw5rEIY9bQltv8sExoroQxShizbe6qvDEb8saUZ5tPQx8TxlRGthsf4AOBudLH"
    "KH3MARJoZZHZnUWmKml+OjKZWzRWMhklk1Huhecik4kcn5nfnjj5rcaMxyeTiROdc03OqnHtIJwygll9+GjYNjNVapmtqGUQ/O9K"
    "sztlmOnPMAPNfEWu51i53oNQ09y+qwr34i5fdZ0sZv4GbwFjQrABs3zO1qKfs4X3oWItBvgobn57crtv+kauwh6E8reXvPZ+/Uqz"
    "xWFZgwu/a32aza+VNa73ERlljHaczBpT8SH9NvOJjaDBTzvbA33RGqkpcge9YLQROXCcjmH9CEoMFh9nJw6b9YPBw/z/Zl7jin3g"
    "Sn4y2eKfTE4USD85XfKtabvlt6YH6lvT1PgJB86sAycZMWhUduvhejNquIcrXrWC6MOntYHVWESNn5VIJTfHLNC21u7QxRZCl1Zj"
    "UQNkJBMO1hMKNfTyKRomvYZg6UItmpHz5femHTkQ4G5zVmRzGAY62LOhMVuHxqrHvgKb8SyL7GHhivZ0YTbWAzpSrjNIGFZs44OE"
    "vCfHGmKAAvoyQ6gboHxcXGlLcWXVMHZDmVxjIVsb+MIdXJRoYJAvnazFkrM8ioNy6RK42yLU5Q1FWFG0mOyyfOT32EEYeArH64Gt"
    "lwRw1zoAdz4ugOvvO5mReUT3KoJoJaCMCcNYwGtbpOQOg5QKsFFDNITx7kjxzzaI55dfPvz6YfwCDrLXN3VKLHsqXheJifopVhIM"
    "i/7GeJI2/D3qFeuVOOuOu+k9e80pZ5wGZQ2x6HG5a9w4sugzpL4LRdMSds9wFVqZQlDVuYWq0QYuniroVOoPC7mcWfuCwutfp42L"
    "+ZITfkn8y2H5ZdgR1Xr+T6g+dIwtpc/FHVv557PZime5mbawgag+X7RpBswrI0rRnyiEzkedg5aQo4ez+IQVx7ijjktHnW/jWA2k"
    "78Lq7hMptDKFoKpzC1VwcEO/3X72+AMXJGz8ptswmu0VGXubEidORvospY8TJyF9F/pEZ6nFV5tTmQHtEE8ZnzwEjjsFvXoe3cnc"
    "irB0AZqYKSjDEcQPktMT+vNpX6ZWdOrk2LBCfDu2tmJtgKmpYAcQrVAnS9u5nbY1GbqMSsNP8Z1DUtT0e+lAWPP7bv0gB0Qtv+1y"
    "yruQi07wRUN0EXE2MQgb9iUcnzPUVy0wBDfqPGV1Wr5O6DlPxIlHK7PbvEs0stti2wrMqLRfRRz/MIKhBvkEdeioNB3AqYTaaPQy"
    "6gfOgAUsRXsmwliuq7lpdqIbzjCe5jZxOuTgUlPNTYIknXSHRzkjcDuE4PZdo7SET1BUlFWQrESlGtEc/4FzcgHh0d2m5rzsW7Pl"
    "rM20MpYmiXer8c6TKFVqbhbh6TIACeIHKBdslZRx6ZKE+ZSfSBEcSXVan6xksRYZnqJyMSCVC0ZtQusIJClTQyvqUZVoFiIY3E5N"
    "tNcuEiSfEwfBc6A7bylEUHqBsLDiQWHvHNqmYDaObBiImhImwPN+1QkQ3EonL8WxBVMoHP+CgS8qGmTQY7mSdjGAWQ+wrHqAxo87"
    "jB8ngNXnQMm3hqIkFBXN2iMHsNbpLjPBZWa2TNCHJ7FlCtZ8lYn8M6lpLhnNZKE4uOclnAJ5QY7gDpNbMrNJLNdj2kgmY2RainyO"
    "i2eFytwK/AJO0qoUVYay+WvA2AdT5w8g+52KJYQgo3PPC9o55tKbdqHCnaf1e8yz9Hj/S0xZmJUe5a4w1SEgHYidV97GkCHRhted"
    "sOuc98Xo+TdzH2johfN7nlJqRsMfJZuOsUA6maHyucncNerPSD+MDX//OhlCvoGzPxPvfw+13viDpCbnCsBXyAMxxAdwMcL404+d"
    "L9d7mVdozft5BzweiK/khhFxkpxYMmkF02Xwb82nw7+Tl7C/Bz99CH75bvj0/8tHyou9JeKjvyZYxI3wGfiIefBdgelJLkLBWe4a"
    "yEGfS4/dI4b5i1jsH/4LGfzCEAmAF0ZkreTnFsyK8EJ8kRsW/yP0gokomjsjnzuLDHyE2tKv08NfoC/zH7gTcAkGLg4GEPbAU7lQ"
    "zYlWE+RwQknFbevKFFyn8A2DbyITewetY4UamrktDQ4XMxjmr+kRi37k59weM2wEiCYyQkTxZx8vVxjKNULYzYWiTf07B2sHEu2Z"
    "tUADoBJud9GqIQZfRPMQKaTYuR129mGjQmgQQjMN8x0ItsXCLfyfaDopWLNZqzRnXWavxOy1N7/aHhYds4EwA/Oy4a0MyYpAa8v1"
    "i/strBiknsJBeBITJ6HM+XiA8riOwRjNe3OeEgRYgvmYKI+H6wRIToDdmqI1dxi0JsBnAkTGHPxq1OUQ1CXEWT2R1e2DZMr0pUxf"
    "yvSlTF+HZfpaoxSNmYMvx06n45TpS5m+Ko8Ty1vYlfBLCb/SHuuCoxDbR1fG92iBT9Am3+gEuL2UGuxxqMHYHfHKEKYne8vO4pYd"
    "utiCKOwWMJUoTInClChMicKUKCwXJHOd+nbuwkrRsFGiMCUKe4rMXvnCjssXVp23PwNtWBjv6SoCeVbTKG2Y0obtQxt2gKqGsofd"
    "L3tYi4rFM5GI3ZYMJRFTEjFl7nlaErEoBjBrBSdWrUDjx92SiMUTfs1OOJ6Yw0nc+WCpvsY4gp1MPnmPHCBbJ9dKUvZwJGV0KuIO"
    "k8k+JVcZe3IemrLs9ll1pPV8/lr9tOczrF2bUgqaYKvrTdF1WZLmb8aT286x+ApcVnHLEB/lrqkcvP87C0zPCXqfTSAGdqWkXTB+"
    "4ZOv3WU3b2NxCwy3QDydrfJpwm67TYvdbOtYgrN+lvj2zKfZ8Fv5wXofnjvE+yeO6QeYHOkAoYCNwLUzGKvmvq6CDA3qMZkhRV0l"
    "I5dOYcHcITcCp2IHj0EQr/fh2bdns/NxTbfyfU7/v6z+xX4TbJ68abyu2O12Y7yoHOw/rM9yEUqueO8aSMYiFAGtHSXphkobvJnh"
    "Nl/i17J6MIONhLdROgWaWaM0SVrhzJRNppFPpkUmYZuWxTd3glsW47XTJeGB1ZoIqzkhavyETyqp2K6q0PT0CE9ibmAdqFBDE/el"
    "8aNfvHQxsZkj/TzfGeHItwbbHrIiik97u7ui1Be+RZI9VlzRZn6eQ70DCQQnhOJghJJ391hDDMVAh2cIKbTuB62pbiFF2FEoyNkq"
    "2UHDF64NB0SDjHwtZ63enPWav0Lz12TGKrz3aspfP/krJmONZK6KoZ2LFrn+y1q+yQPEsKdwAJ7G0kl4cz4u3jy2h+QH9p6cqAgg"
    "lkBCJghkwT4J0JNAu/Zgzh0PzEngmwiwMWejGpQ5DJQJYVhX4PX+r3+bvg6I7E9Pjh6sVyilkH8xyCwEX5AQDCWX5RgxVoFi9jT/"
    "ng1J1HJqS4+C5/VKT4QTGs8NNbY6GH56mc17yNAIxVdCq3twjYh1rdRuMj2QhNqag+o5tXXn1cvGosh2mhOzhVbCC5f0h6BPZqZq"
    "C4Y+aoK42fqjRFnhmXX/CRpyu+XUlp4Hz+uVHgsnNJ4bauR/ydoCqkzTD1qjkXYj2xHE3Ybny3Nq646Zl42F3H6qLGbfME1/7tp/"
    "8NMw02nbqPMm5W7zR0tE4cYPpcRZ0ujuLU9AR6rbHIQWKD03V8r71LVvCMmB1qovXvuGmyN7S64lON+Aa6XUb9EQtmSA46guPKQd"
    "qe5wVjvrX22tv9Y027PDCYNtIVGcIGuoOLcoSKhkZxplivnnHR+uciAnHDtAASFTHNAsvsoy2ptEBRVdyWSJDk0W3aB1fKZrFuOY"
    "r5ULh6P7oZaxjsxamhHXkZlXDX9dTnEpjd3DVS/kPGWPU8TQakOVBTU2nZb1i8ZTUk14x7xBj+WErq3g6QtWaZES4ony1ypevGzO"
    "WUOPJ1WupaIytrNHqxgNdMVIyKenFRuBofSwvo5loNZBqJR5r/AmDdcuJhffmggN5IIrZdaS6iV4topUgVUoRJPBXxbj4CrUZJma"
    "QB1Zfi6OqnK2v8bVJGQEHT6rSP1Ibh40Z1bR1FbNafVkEnWgotGhKz81KrsEOFnBx0oKPhoqNVRmyjGsUmKPqozG4EPF4AZ2oXG8"
    "c6WFWVtZlQ11XIlAGpDoFjAnStXRPIpAKhlqk7AqAklfoozBschVw2NclGsT5qWJ1R2uHMIsgOBmlKNozNpkAWFj1jJrrajRTEs5"
    "HUX+y2d4LFTbLoa///XD128fvyAnbMbO7WvUpl3C3zW+zQwUvD2nwd9xDneZ7XWe41l6vP/Fl7Yc6VHuGstN1w9wi8YsNj2sicQ8"
    "UwsuP2UuHyaUcvIuiDrjwzgwv/wp3mMZsMeHhs6mAy+QTqatfMIyd416w65pb9gV8gFsJGUOkOO9NxE4XE83tPCRIPfNecw61rAY"
    "4iq4GOEj4fXWv97bqAys/WhOBA8S4lK5sUV8KSeWzGTBHCL3gedkf2ciOdKnpvR1wRsdavouuTXTLE/97NbUONXZO6Q0YZVwA8mN"
    "eYd7ATdIgs56O34lUyI4y10DuVgA8qJ4I2URQ9zIfy+TvT7c5ACvH8DriZ27BRCekh2U3FiZ9bP0ktkpmlAjn1CLzEaEH19S7PfS"
    "xc3gnuYlfLg4fEBIB8+KQzUnWk2QAAslFSViC1xwuYLFDFgU2d07aDks1NDDrWkouhjGECDSE4UmonDAbWLFxoRoTyVEFO1uGAwU"
    "9HItE44GQtFeYSAHoocIRIPY0qxVJwDucBsPVw0xqiMaCkkhReqdkboPUhWwg4Cdaa3vQGgvFm4cJohuMWDp93cORdg/EMyg/eha"
    "Ct+HO5nxYp+uCfH1FsXw4JV3g9rjp8/hdN712LhLRlyAvsGbZPA2LNPNZ4pgtgvHSr2LDZ7Dzop7wND36Zr8WXgYL65AySEuDjdg"
    "M/A4XPAhUd+bOVcv/gxBYEDEAz4Q9mVJ+KA3ERBh33Cz/cAQGAK9ubFK0S4tIZs7I5w7EOZC4x/tAuVsEIS5AqkGXn772q6Sfirp"
    "p5J+Kumnkn7ywyWdzkR9zVFDs1HSTyX9PArpZ6yRffRHuT+fm/uz2HD2Ddpk9opQgIZnkuc0YliTlDATmj/EqyyhD8kSmj9oE56w"
    "UbJQJQvdlixUaqF7cobeorNyhipnqHKGahFAOUMPxxm6xufcmR0bdUii6YBRzlDlDD0SZ+iBayBarDgodWir8sdTM4iGiwtdmuGc"
    "Ow9TI2UQVQbRwzOIHq6apESiz0Ak2rBEpHyi80qmfKJKkqd8oson+og8dFGAkxWDnKQYpKFSQyVVqoEM7Mw1MLxi0+YLSEpb+tC0"
    "pdUfyNJVo2+VR9lLlb1UzF5aSJ2rJKb3SmLagiv5SblMP322A3ZiaLztsqk7rO3sUja5YJP7TdF1Wc6dYTSxxOIrrFzFLUN8lLum"
    "cnDjyCwwPSfl+CYBeRmBggMs8Sic/Hu5bLtHLG6BORCIp1NYPnfYbTfvLJ59AUuH5yMWt7mczuYtx9rbuct6O57XxPuhjukumBzp"
    "J6GAjbIgZzBC8AN6FDJeqGNlxhn1qIxcOq8FE4rcCJyffR0LyRiWNfk2raOnOTs7l1vZx6f/X8BJsXsFW5xvGq8rQL3dGN+0CTYE"
    "12e5CCVXGHsNJGMRimLfjpKsXnITvKARtp/jIpIu9GAv723oTsENWEM3SVrhdJXNsJHPsEVmZvNW7Devg1ux40XZJQGF1WsNqzkh"
    "avxsWSqpSLJ9ffHp8aTEBsHiXKGG1u5No1W/mL1i1hOFL6JwkO+NcuQ4gB1PWRFFw7tEBcXEL3wzJTs0uaI9wkEOYw8RxgZh5wR9"
    "HAx98lEh1hBjPDAuMIQUyG8M5KlmQcXzUcTIGTDZD8cXbhg1iD43ABKsGIKKAUDYCwR9189fu3g8sD74l6YgAFgfEgEbCqzrPXzl"
    "+cjLN7BgJ29hwAGy+IjCAugUSMYeA+cZmwAXXrZMF98pQeEuHCd1MgG29kfxviD2/fooe0IewptrQHQAm9eLBgZ6DhZ/SDSAzYyr"
    "1+IZhJABGQ8FgdCYJRJi4kRECo1XBfeCkEFMnB26FAzTIsLJNMLJBFEwNBcRGM6ZJYyC+VLlTv/m9R9//fG7Y//48cu38YPc3z6b"
    "P/3Hb9/+7eNPQZX8JT7MjVfCw0vjajfw29Upw18C0fm8vtz3H57GKTmdF+bB5c0XOivomtNlvTQ0VPET+GqXe3p3iSut8fvD1VT8"
    "qnC2w5cLXgsI8f4sD8Asn6bU8CU5HHt6JXc/YEGzCPoWkL92sQf40mG+1Jub6cpkihalyyU5k8lLDJDyjJF5I7jYWpe3S8zRuyZ4"
    "rPV5VuPMTA1oqmyZVoZr/qTB6fGDk4YmDU33FZrmT0qQAOo6pYpDPkatAwvFqOC3cYy6emcflo95XD0W/aVFbLz+bDydduXxxC45"
    "D8uVUIDi3z64r1muXO4Bxyff5IBviRBXhRMdvpr/Urx5zkOodbqFccp/+Fycgq5F4pQ/M5MPLBM0XRnPU+rIGaPJCwyLwOr/tJXl"
    "Y1SbN0vs0bsmeKh8iEpmBbRVtkxby0Ux1L3Hp/OwWFeHyHQeAJLno8UkjUgdIhJmV1sHIcgCDx13bscktab04GnbNMtaU9LE7b4S"
    "tyU8aXB6/OCkoUlD0z2FJjsocnr84HSbZUVOGp7uNDw9bHA6XVbj6hGWbvqPG5A0HPUJR6hZbR6BIAM8dNB5/9vvP335/TPVqPTK"
    "+PInEm/gQBN4eeTszQEPeTMhtsnEkB7BI5ofAtQs1jpABs0vTrOiCSeMACOPeN3hIIvg0VvgEVFM2DIYaCg4cijQQKCBoH8goJtw"
    "1v053J6QbW14P9vfOYx2lRu31lB3EnbRZLaqO+xRwzNEwIMrGBWS7dVsVGBtWnN2q9PhR/Z3j9Ucw3/sFp0voq3nfnvOWDy482jA"
    "7kkQhwqoqeA4QUJDROtulTZRgWhFOVggIHpQNEc4QI6Q7x7RLEGzhLbGpuWCY4cCDQQaCHoHArS/QkPBIUJBrjNCg4EGg9bB4P5D"
    "AX/DWR4ooB3jI4QIDRA9OhEaxQSizeAIYeCvnznMJ+f8kbi0eQloWIo+2Ya4WeLcUP8RS1W29xFvL0IG19dID2e+qfEsP4eW6xnK"
    "9AlB5sM042vqX+svgXCc6zGsfpToGYQNhdx+HtrV+NaAdgqqa5W4ljqWOhafdaKNh13DXQJkNynZwIJPYpuaPexJC37SGtlC8PYO"
    "eKPK4XjY2tWuvvmI9mzia0IzB3Ye87QLlY8SPYOQZIF7wJneVxIbBUGfsK+jvfsh2AJs4ng078EWHvhc/pfOXF+Xy1MKbOZlebIA"
    "xYoCfMA+la9o8QnQYu6ou7pWiWupY6ljZQ9qq2vJh1NXLXWuz/ljxnu71rsfgt2UJq5Gnw3u6nPP5XHplPV1svyB2638inGSlvQs"
    "7HvSp2A4Yps/xR85WoYdEcM/isT+ULd8MJgdJzkHQC0fM/lTakoZq0uukSwkrNvB9+EuFllrbm7GWxtxFEveBsy+e19g3HNwCBRs"
    "ZO1q63dn6/ljjmKjn+pzU80wrg/Ppy2u8QBjYvH13sfe0zJiccWw6mBhc6MOx4JToY2vEW3BsG4H34e7zZKt/NaWfCVn9XqaNFV+"
    "55g4UkffwtYfzdIZOyFtLZ/eA9nMBYjNj+eD4rIjYQpPjgNP0G0GheJ5a1dbvzNbRyv/zxiyJed11IwPaMY7h+ziUL2ldT+abTOq"
    "4W1tna6D9zX62zeu6aK3KbB4NDC3iMCsd9kr6ooiXJzF7Rkd86Oaq7EVGApeRWtRLhsEr7RXiUxUjkpoa3YsZdGDS+budxZRdk69"
    "HzSikKnC3VnIrkj/MS3k/V//9lDIxH8ftZQulvJYCAV4LUUpLVHKbYAfCKn476MRpnmEeSDE4r+PWkoTS3kb2p8/friN4vIV4rR+"
    "6Lxv3p5PIW/n7X/OCdHIJbatH/wHiA0susXgaz1fPIbT8zqSwXrnbr+9vnPBEw6YlnnonbcIhS8Giw1+c28oDV5/e5tXkNxnkrbA"
    "3QCJtwEdO0YHkyzpB353wUtPlyavufrB8qI5G0kcRCgZrcaOnBs7P3TsXJHg7IC/+EbLtXk7P9ykwFQpELp1rGsZqeDb5dD6onFD"
    "40bRu69cVo/h/g/s90uaRzn/xDCfOrcVeDfgz7N4zqGT17GJQRpgMGwyGBfj3ZfhTdwb48Of3BHzCOAuuBNAF8N2nxkS1OwHlvUD"
    "5rq8KWbwpAxo44AhTxKQJWcWMrVl+saPZMR3Yr1j9UTRl6Ivzdo0a+Oit1vU0KxN44ZmbU+VtY0VdJggfXY4W+DU4I0XRb7/gle6"
    "ZKIW87vE0YCa0slr1udfZ6DBfdcbGvyGnvlnB8Uz+Ny1kYmHTycw8UAQWOGi53CJRfyCDilw7Wy/9NuF1ol+y0PtM3PfRzHM41hk"
    "eNBewZKCJU2yNMligq0geGiupeFDc61nyrVAsgfdXNCNsnvdKIMMWvfLdL/M3aMR67aZQjLN6DSjK4J0unum4UMzuqfN6HQTTTfR"
    "DruJFhip7qXpXtoRDHP97CkGmbyg7H8kuhQeYWn4NJho+WDwQIEvF63noGrQtFzmwgm1oKZ8tAcD8Al2X6IkkRGhEAn1LXB+JkLY"
    "B+IOUknCwCGHSV2FyC/UWY7iLHfvJffqHtkdFdOg/GzE5eeBLP9SxkqIYNbELQAbWQF4To2G+u0LU1D5NeLKr8lWfmOrycRWtZu+"
    "dnMfBkNvEegarIBVAavvKgpYFbAqYIXdI18wNq0qcYZdiRsiw8nX0CCJXC3MCGphhlcLo42lqDprBEUwwy6CGdASslVZtYUOtnAY"
    "I+AdKtAlU/Gl4kvAYxRmKsxUmJnxEi2PanlUVO0SNner+WiVFPj+nS7MCmYVzPKWaa2ZKphVMJv3Ei2dauk0NgitoD5vBdX7aCJ3"
    "9TTVx22gyGVAg+OuobEYumAZ0FaSBev87pR214sWzz5PJF0uDWXmIkHe0mlaLZ0mPIEiXkBxec4yahj+guf1bhyO4LSSOLGHlISR"
    "JsnsV5H0wNIFOTd9So7vXJAiQLH2C1oiiFUOiS7fXhlX00WCglPX9CwgVQKJEGEyq0hYJ/C+SqkhW0O2hmxWyEaRbmDFQwXSNTEa"
    "RZGuiY/2ZI5QcQy7RjeFl9G3AvAydi0PLxedvTI+Bh5ovIxfG+Nl+EWAT3lqANYArAGYE4CTr5kqblbcvD1uXr+RqqFbQ7eGbnbo"
    "Vvys+LkaP7/99/8BaBoKlw=="
)
# ---- END GENERATED LAYER EVENT TABLES ----
