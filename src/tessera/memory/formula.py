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
@lru_cache(maxsize=4096)
def _layer_params(
    family: str, arch_items: tuple, layer: int, tp: int
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(name, shape) of every parameter of one layer's TP shard (rank 0, the largest) in module order,
    then its buffers as ("buffer:<name>", shape); built once on the meta device."""
    from tessera.models.nn_common import TPShare
    from tessera.models.zoo import build_model

    arch = TransformerArch(**dict(arch_items))
    share = TPShare(tp, 0) if tp > 1 else None
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
    for kind, by_cls in doc["tables"].items():
        names = tuple(sorted(by_cls))
        classes[kind] = names
        entries[kind] = [
            {
                k: np.stack([dense(e) for e in v]) if k in _EVENT_KEYS else dense(v)
                for k, v in by_cls[c].items()
            }
            for c in names
        ]
    return _Tables(terms, np.array(el), tuple(factors), np.array(tags), classes, entries)


def _structure(spec: ModelSpec) -> str:
    """The layer class a model's blocks belong to (what the probes were built as)."""
    arch = spec.arch
    assert isinstance(arch, TransformerArch)
    if spec.family == "llama":
        return "llama-gqa" if arch.n_kv_heads < arch.n_heads else "llama"
    base = "bert" if spec.family == "bert" else "gpt"  # MoE blocks: the GPT block's attention and norms
    return base if arch.dropout > 0 else base + "-nodrop"


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
    z: np.ndarray, kind: str, cls: np.ndarray, keys: tuple[str, ...], zero: tuple[np.ndarray, ...] = ()
) -> dict[str, np.ndarray]:
    """Per configuration and table key of its class: a vector's bytes, or an event list's largest.

    ``zero`` = (IN flags, GIN flags): configurations whose layer input / received gradient belongs to the
    pipeline harness (a stage's received activation, its output gradient) and is counted there instead."""
    tb = _tables()
    if zero:
        mask = np.ones_like(z)
        for flags, tag in zip(zero, _TAGS, strict=True):
            mask[np.ix_(flags > 0, tb.tag == tag)] = 0.0
        z = z * mask
    out = {k: np.zeros(len(cls)) for k in keys}
    for c in np.unique(cls):
        idx = np.nonzero(cls == c)[0]
        entry, zc = tb.entries[kind][int(c)], z[idx]
        for k in keys:
            table = entry.get(k)
            if table is not None:
                out[k][idx] = (zc @ table.T).max(axis=1) if table.ndim == 2 else zc @ table
    return out


# ------------------------------------------------------------------------------------------ inputs
def inputs_for(spec: ModelSpec, views: list[DeviceView], **extra: Any) -> dict[str, np.ndarray]:
    """Arrays the vectorized formula reads, one entry per view: the sizes the table terms use, the layer
    classes, the stage's shape and schedule, and its parameter-derived scalars."""
    arch = spec.arch
    if not isinstance(arch, TransformerArch):
        raise ValueError(f"model {spec.name!r}: the memory formula covers transformer models")
    rows: dict[str, list[float]] = {}

    def put(k: str, v: float) -> None:
        rows.setdefault(k, []).append(float(v))

    model = _Model.of(spec)
    structure = _structure(spec)
    d, group = arch.head_dim, arch.n_heads // arch.n_kv_heads
    for v in views:
        tp, kv = v.tp, _local(arch.n_kv_heads, v.tp)
        tied = "tied" if model.shared(v.layer_start, v.layer_end) else "untied"
        sizes = dict(b=v.micro_batch, s=spec.seq_len, T=v.micro_batch * spec.seq_len, h=arch.hidden, H=kv * group,
                     kvH=kv, d=d, dh=d // 2, hq=kv * group * d, hkv=kv * d, rep=group,
                     f=_local(arch.ffn_hidden, tp), V=_local(arch.vocab, tp), V2=arch.vocab, P=arch.max_positions)  # fmt: skip
        for k, val in sizes.items():
            put(k, val)
        put("blk_cls", _class_id("block", f"{structure}/{v.precision}/{v.recompute}/{v.attention}"))
        put("emb_cls", _class_id("emb", f"{structure}/{v.precision}/tp{1 if tp == 1 else 2}/{tied}"))
        put("head_cls", _class_id("head", f"{structure}/{v.precision}/{tied}"))
        blocks = sum(
            1 for j in range(v.layer_start, v.layer_end) if spec.layers[j].kind in ("transformer", "moe")
        )
        put("nb", blocks)
        put("has_emb", v.layer_start == 0)
        put("has_head", v.layer_end == spec.n_layers)
        put("shared", tied == "tied")
        put("m", max(1, v.in_flight))
        put("M", max(v.micro_batches, v.in_flight))
        put("prec", _PREC[v.precision])
        put("zero", v.zero)
        scalars = _stage_scalars(
            model, v.layer_start, v.layer_end, tp, v.dp, v.zero, v.precision, v.optimizer
        )
        for k, val in scalars.items():
            put(k, val)
    out = {k: np.asarray(val, dtype=np.float64) for k, val in rows.items()}
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
    qf = _layer_values(z, "block_first", blk, _BLOCK_KEYS, (no, last1))
    qb = _layer_values(z, "block", blk, _BLOCK_KEYS, ((~has_emb & fsdp) * 1.0, last1))
    q1 = {k: np.where(first_leaf, qf[k], qb[k]) for k in _BLOCK_KEYS}
    qG = _layer_values(z, "block", blk, _BLOCK_KEYS)
    qN = _layer_values(z, "block", blk, _BLOCK_KEYS, (no, (~has_head) * 1.0))
    qE = {k: v * E for k, v in _layer_values(z, "emb", x["emb_cls"].astype(int), _BLOCK_KEYS).items()}
    qH = {k: v * Hh for k, v in _layer_values(z, "head", x["head_cls"].astype(int), _HEAD_KEYS).items()}

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
        rs_h = below_head + qH["carryBend0"] + RS["head"] + pref_h + np.where(us, u_all - U["head"], 0.0)
        cands.append((own_h, rs_h + rs_keep["head"]))
        sh_h = F1 * Oh * Sh["head"]  # sharded gradients made so far (the first backward)

        def block(j: np.ndarray, q_: dict[str, np.ndarray], below: np.ndarray, above: np.ndarray,
                  rs_prev: np.ndarray, pref: np.ndarray, cond: np.ndarray) -> None:  # fmt: skip
            done = sh_h + F1 * (nb - j) * Sh["block"]
            units = np.where(us, Ur + Oe * U["emb"] + j * Ub, Ur + Ub)
            cands.append((cond & ~us, gather(below + above + q_["bstart0"], done + rs_prev + Ur, "block")))
            cands.append((cond, below + above + done + rs_prev + units + pref + q_["bev0"]))
            rs = below + above + q_["carryBend0"] + done + RS["block"] + pref + units - Ub + rs_keep["block"]
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
    grads = np.where(phase == 0, 0.0, np.where(fsdp, sh_all, G))
    held = np.where(phase == 2, loader(sim), m * hold)
    breakdown = {
        "weights": x["w"],
        "master_weights": x["mw"],
        "optimizer_state": x["os"],
        "gradients": grads,
        "activations": held,
        "temporaries": np.maximum(0.0, peak - S - grads - held),
    }
    return FormulaOut(peak_bytes=peak, phase=phase, phase_bytes=phase_bytes, breakdown=breakdown)


# ---- BEGIN GENERATED LAYER EVENT TABLES (bench/memory_calibrate.py --write) ----
_EVENT_TABLES = (
    "eNrtfd2v3UaO5/+Sx4aDSFU6H/bjPOzsvMzuQ29jASNY2B073WgnTjueAIuZ/d/3+hzpSFVFssj6kEo67Ifr9L0qSmKRP7JIivzP"
    "7/748OX3v3/+9bs3/avvvn748svv3715+13/5s9/+tt3r74b3vz3P/359u/4808fx3//Nv37z5f/uL7pbz/Ny89/+/f/mv/+cfz3"
    "289/df9y//19/ct/fPun/3a3P/1++6/fb/8Oj9+Y8d5mpGCme5s3919/HH89/pz+OP4zkXl5honCvy7/+3/8rz8/Hs68+Wm65fSQ"
    "//hjet3bf5nH78zjd8Ob/zm97Pjof7n9//5G5Xr7acZrzHiNGa/53/81XT28MeMV5sHiv9z+7ce73f/fX6Ynu1OZnml6lft7/fiy"
    "o+/ef/rwsqX/+d37T5//+o9v//Hzb19/+PibNT/8+vnXDz98/PTu9799+/XHD3+87Pzbt90r8+Ort/2r/uWneTW8/LS33wyvTi8/"
    "T7ffnG9/vdx+Xl9+/vhyp4+/f3335es3ErffvPrur+++fPm//+3bL3CSFic5EviXDALvP/zRje/UB+vtbf3wWP/6fs390iWxvl/Q"
    "hGn1Hq3e3H71+v7YUZLGYXAPELgRvT9zP9x+6a8dYmuH+1q72LIX/vRl+fON6E0OupRtc9gyEurzCd3l6MOvP90eymfP2WPPcsG3"
    "m//4/155KvPLu6+OxvQj3+9P0F9uDzXtS397wMtix8bLx3d6LDKEvjF0jE3VulSXapZO46FpDxI9SoIULE8zGOQ4ugdThTfM3Cid"
    "cEVqSnPr8DvGGUDXE2QHVfdsWgU1/vcPnz789evf/0AtZYbOdjL17ESa2PHRHLRwGfrViD0TvztkvcTC220tpwnmyTq7r1Kdio3X"
    "nViNdC4ymbB7dfr4H58+QYjfg/L59vFoJpC4gas3gWaEsi87mTEOLvDWZ55+Wjz2GFgNNmao50Kh/lBVKWfZC8hSuJ7ZdMUJ0IBt"
    "9IV5LsOOHPzjmfzQgkBu9uHneKceQ5x69r6zKcesNTHi/cf+TEcJr/d/Xt9ImvvemRER7+9j7kw1d56YO4IsMfP+wmkRxcfth4zb"
    "98zoI3gzsyTPouubc5CFArKwUbreX/T1TY5mqvbOkj6P+Os7HZ/fKFUjcArAW0BELQAdlqbd3y803fSo5i4Tvad9AjS7s4xPg+GO"
    "7FAgKNWIEH8tjyfnKmIszFyWfmkopt01c54eftSfy/2p7QL9JoM1m0vKQpqzt8dCqL8EUJAYzQ4eZMh5kJ4bACdv60oFeocwPM5l"
    "cOwGDAdlps9FgKzbMIzDhbYOyTcDyWN2gnbJHoTtrD+An8lwlhs3Ok8gkXzrdEHMUxFZYSZNsvBGlFIpeKeCRi6acEm1REITlHfE"
    "IM0M28+gTAnbWyS0RuobxknF0Z8L+8RBQArtB3H7V91INmjSaJnowLMwrQC1KrgV9dBRqxH30BUCFQKHXO+WOiQCsrd/J/fQEJu7"
    "vU+G03Bmd3w6T13dXTiNwf2lmPbXSUd7HipCKa9Je0Sraehm0OLmmx/7dikY45crl4arHc1tCE33KhcrRa3XT9kx0vqjF0q5n15o"
    "WAEyUmAwm91BEHpn5KiDOM0lNwJfKEan4eK1wsXNxIlV1psJRG9aPKaFIVoYooUhWhiihSEbF4bMUKyFIVoYooUhWhiihSFaGHKw"
    "wpCbkdPCEM2KamGIFobsKOHo4ZYWhigEamGIQqwWhrSI01oYooUhWhiihSHHLAyZIU4LQ7QwRAtDtDBEC0O0MKRG+eH3v7z7/euH"
    "L8z6kAVHl9Z0aUHNJUDt+6+okITl0qWCDwIiqHM8MGhcl6RC58aVioV9FRPs4/EaCd15/0AbPji6Pyv9cv0QX++EjsxSIFDPc3Om"
    "08dmK3086tQsJ+bqesD2s8d2trJHPUu7cPhG0+AJBIz8KGTcX5UFECzSFibNKAVg0okl/PGAyP2nr4CwUTE8SU6hyUQQknQgEKNj"
    "cyJAoAfRow30aX4vSYZ7LxVNQsckHQWuIvQqYJcgsZwGPZ0cZToxoHRSeWMbvMjyPETYgQdRnn1s7yCmUl1L2iM0/zbcTVW32upG"
    "24PrTg3w2pvBYSNqVvet7lRjbO+JLm6EeOLPxY/gshU71NuoWp5qHARLHLvbP28bgcJtx2ZXt3DVWUkzUmzgxe2nPYdQ+4WXfqHy"
    "iltoGv9wj51zZGf8QqelMkfeY591Tfyse6RtTzsdrww13//6+acvn3+jJvcVndmXMa0vfU4fNEvBiif0HWs236o8ETMDSjjlz/vb"
    "dNJfqGmBUfc6/6OT/h7X9ZnD/QhC1Dw/ybJZCcFVpOD5wgZSSBm5BDJaNKuCmrFg9zLkb+0dISnAfISAgCV+OAgkLC8PAERwOEOh"
    "2SrMVdoUodjzhL8q75tq8cSivb0wS0zaCeDhE8o8ZYyu+cbovBNjtJbmxXh1TA2Fw6vQtDS7mK1WZFraCueM3UwG5DAjgwtFjlkr"
    "1vWFIkrbD8hyrCLDKznKemaJa5BkK9L2oNApZQM9IgbrwbHQFTqnrdQzrXi3tEoNrKp+HFbts7CRqnHSAcwif3MX3j21qKm09dW+"
    "/xJsfUd+AedBWLXGZy22PAtBFHFGgo97TqKWZ8gnGkJYTutytl5jsxq9zOo1c6r9iVi1r8KernvYWjJQvodXmgx04Ddl+Y3Aqvb+"
    "arPdlwPwRPw9FZOlYFyjzU1mg5si3UYKNqQp1I1L3Vf5JhZsFhPdxBDkxI4oD5g2bwmDYBDX0xS17lIcOxaOIc2Wro7t7xNcPl/K"
    "zgWcSIXcvUGuXBKeB6nb6eG1QpOZKpHiUNaLdlg6TFi1IDo2AYs7FKUDtukKwYz2OAVtuhyvBAuG9k2091oBO32/fRBEiJkBqexA"
    "cew+BXoSaTy1eWhWSV0x6psTqd2kHkfrCLSOQOsItI5A6wgKgCjuazNGp/VaR6B1BCv5vYb2Vo43p0HLCdJ3X6sKQrjXqgKtKtAU"
    "l1YVbJSris0FQ/zOk8jvVBzTqgJ+VYGhU8ppLqUi736LC4QC8Ty4rTUGWmOgNQZaY7D3GgNiIpjWClBhSM3vHy3O2VKAkzE+q9c0"
    "f+ForDyCulFRGD1cq/xYrcyBWnmjtGaRsrkTsA48+2o9LmWwBx8yU2Yo1vbjsFAtjUb3iHFYDCQXTMBCqHGGXkmXRpO4VjhxwSeT"
    "NwbD34LEptxI42i71zlWG+wVhwzAXRxP2JKKY0kiiXo4Ik5XCkBBBAMSxU8Wn6OMlKrFAfary4xuVC2aUgSuVT0BG6wqw7SH1zL2"
    "8LxXe7i+AlMcJLl0PF0n8yz+iJuZ47bkjJvaR6t9T4Gi2JPLlxpnzY1GtsSHRHEGP60r+OudBPS4lqx+/E3K2J3SB7Q1lfD9hy9f"
    "qYlJY/0DMGBiSJ2bhJNkTk9KJOBPQCTfKfJVyDwybiH/U/PeIeyjbMFHgonEGu9jtPpFvhHut3+esz0QgakNcI8vpdreb8DWHpG+"
    "cJZo/sSlPEL5aQ5PU7ExipfxcZwpS85guSl7A+8Qp6AxSo6auCRf7A9UZL0HUrnlDMdb5rEiysshwFFcj864Xctu8ITSFlLUjdjY"
    "s14fyiQKRAbPOiYTKam6RJiyy1XLTqaInUj1ugQp6fi2EV4iUqgmrF8VBpGWTawI3eaiHzNdrkCoVuRoBYiz11XMzBoaQb7i/nWG"
    "GiU/7c4ATJAJWVpugswGbr7JOD3psYmYqrRl2ZYn5RKjMLpv7vSkbbUCOn5hTvO6brdJPL20emxpjcVpR5pVtYwYptR54+VzOhKl"
    "xwKL3N5FSChiKG2xElD0jaCUINVvZvZ2Z7LnGNlFRXUXPO7DKoib93DJCr/8MIuS+T5KvI/VZEeJW4w4//MnE1b5h1TdOndaTW9P"
    "/hpxAhqSp9KCVEeCFlTBsG+exj84CcSBS1EuDvGII8Vr0WQwY1q2QVJKoLnsExgiKp3cl8Xg0epkmv5XyPGdOUcpe/Ae+D3pTYT4"
    "lKWfrYC2g6DPtR4Xynyg9AXfiYEWZOkwEg01B8qglLI97ctpBQGtJpmCnaXSHBkYBFqt8sRLGq5oWiS3h8qwxnEEsS1shwE2I+Ll"
    "kCayHUEQwqXeH02E3bwDhXzpEYFAd/aBgADyFd3/wnuct7kldjXVbY/AXRadOsiG++XMwVhXZJ8VERURG0NExpnTGcFR2cN9YngV"
    "b8bRATm/N1Wf15dluZwFoUaSqCrRzqVmTgBOW/J7EhGRaYBq6fg0cIseevCU8HRAu2CQOtLdhQThaF+X0ojcjojVlK2m0vDEMK0T"
    "d5hWSourw0OpOPhOJbTLx+Cp5HdC06IAnCOEi8SAo3eJIvSFhmiSfG4gOKwfSA8HlwToZxXcyhIr3uwGKrS0dkRrR7R2RGtHtHbk"
    "oLUjxHgvrR3R2hGtHdHaEa0d0dqR9mpHYoPKNFOqmVKtHdHakf2lKmPjz7R2RBFRa0e0dkRrR9YEZK0d0doRrR3R2hGtHQGRUWtH"
    "tHZEa0e0dkRrR7R25FFWSI9jI2x51lA2n27SaLYMIix/2Aadn6gW7r4vMkCNxq3nNQDPFvqflEaxCHqOYawPNdSpe2U+9dHXoo+y"
    "WZPY8omVavwdn8R2WjYwnzD8ggA1voWC0TEkTc44mTQCaOo9JpdI53fPBhie7vqN8GEqTL2Fic3N6HtiRsB50dy/oJpvxtxeyI9L"
    "PMcaEyx8dEwWoRq6n5hD5Wt1J9fjTqy5XaI4sS2rJ0BSOxpOuahvNTPemJ4U06XLf9eUxEdNnnU5p+pQSR0QOL6uaJ5W1afYOx9P"
    "6ah2xvPuDfBMJ4jhZUc6rXwGMblntUMf0iSns9UHJsXnlZFGZPT5/PllzSgCfOrDnPC1XXmTc07ayQGpSdbnHZ/WVtJptiAx3Kzo"
    "WLOMgWbpo8xy28ZDDeMtf3zZMQaXrcTEPo+JnMRv/pSzbeebhTobGNap9f/FnQfQZ440u5DvHWos6/pZTS8cEfPF6sJXTmSNaFSM"
    "27jertPTvyZj+gTG9DRHIKWjRQHXNMm6CupFxPwyFImtQVzVkYmGSFn2OGasMDt6CTsQqyOW/AZEHjUrJ4chqga4sTDygWIeoJ5X"
    "MTFNaAz88rtWJjiYB81asovJTC7rCs5favkgpCegRLa1VuwaKgDLkGymFI0cO57hvMFmRcIJYwsRJ2aGbdbxqXqvp4Jdnor34yne"
    "ialSD6ZK3ZewTUcf00bpNdbHqSmJKS0qaLOlGm2WGmuwFEKq7zUEXwScYl/KbNJTqWobpUKdk4o2oSnazKhC/6IKLYtmUYzC7YXC"
    "W5dWgY5HW7c6akywSkoUh79+nKJwj6GG2go5cE1EyVfqolG4f0Zy54zMFgiZ/S6KdLoo0uOCgYwEJG7dLWiDXczbPrm7GOtmtmUf"
    "CQRbov4g98tpBSMFo7XAaF593qj55O6wjMG1A+Odts+JR+zX6GpSumVO1WY5ddrkHLpBTrtCVEd6WswQ4hOVBO1wvO8E/Et77ZwD"
    "o2j1niEl+9tUa2lTvotNhcY1JTrWNAK7bUtdeXHj72E7ZRua09actua0NaetOe3ikAr4uYz2b73mtDWn/aw5bSrMv2aP84Ontpls"
    "fr4Md2x+jiaVNKmkGW7NcBfAlqh3yI1wKhgpGK0GRr6QXh3HoWf6Z777cd7Gy9tlupzJvANjqGbNNWuuWXPNmj9D1hyfJaOpcE2F"
    "HzsVnh8M1Ix4Ixlx9la2VK1ED2opP6IlczhL3liWEj1sZ6mzyaNYyg5hYXbM7gP7X7SDaX3W9gVYK+0xXGj2SwNTX1Clx32ui9e9"
    "uC/QAz8gw2iCz1/Dc4Co9riBbbHMPviBsyFshB901LUr9h+uzK4+lV09l08XRiZP0DZfvLaikoozdYKpS6IJS5JpSvK21GKFy5nA"
    "0rzJTGJSL2YSPewlbcxRWzoTiSjQZWGqSVGbZdKmtgQofl6z2357ioey5FBqSSY1/BkXMwd99LYhauWOvmj6YKgnQoinycxsfc4M"
    "qjliW7aZPjV2/HrOc5eIQVknrRUV5NOnd7+840x3uTfivMeQL7nTXZbETrLpLuylQVPj+8rrbeXZ66rK7srbewx4HSRkkeX3hVdv"
    "ITHQZFpyfnRqdZaM2Qb/6hN69YBc/dqpU7FOhVfQ2vjOhJPH/TAVyuhsfE5d7u9gxt5R94WHwsTFLzoURkrC1fJwuzhqHTRYHtHr"
    "MmLi3EXZmwnzuI5CAY7mE4ROxIQYybJZ48FVsOb7EgMuhbU+spTU+HCRXSyyj0bGvha3ixAg42CkYPEcRgnWUn+nE/eYvB+8XRBy"
    "sEQYR42E5ZmIQc60SUYAts5ztVyk1yJNZupuU/on0jiRjjG1iq9H/qwOoUasrAMS03kC+KGqEsHN857M3I7UjMH23agjNibHBnVI"
    "dvGSJUfi6OlxMT1Ez43sc2NKIVqaetCGapqO4k7UWUF/9Cy2pr7pKWwjPaQn/Qz3wO95jhHb+FcLaX2QhqCGl3ErGw2/liW8zBRe"
    "g/i5dcPoGG/ixteJ47Op2hSqELkzZakTqM7KEbf/g7PGFg/3XG/XYjI9cOUh/LInWczi7kCGrBWTh9KSEPsAqZDe4vhZ5QYlcBjx"
    "h8ApQTOXLXy290zPnP3jIvslECl+1Dy420l2N0uE1gvS9n2+mTRX7S4IxsP2H/x6iE/YphEGKYYxjGzCCNj7PpDzdUwgxtYTY9KF"
    "rW0yfKngGpBQ4Gju5ojya8bu5chzSYGrIGp50oVnP0psTSxFUv4emVaIrjRnGg6pxWC/PW0ccsgkOPdxyI+DfBzdCV1gAzlJI4LZ"
    "7TjlFJgmbf3rPIebgkjmruXtV5brzEOpAuSKARLXN7Yi31hB7QlBrYd6C7XtiCpMZsFk8qY/BcjCqUqPlxZsQhO2dAsA1sYv6R1i"
    "FrwyUn/gLOM0jioS3y4YrttRaHhfMeHM9FQ1SdFgdI3g8SpJMyp5DY55Cpu/vDo4wJYLOteLbO0vUvucIdoiBQZriKKGh1uL5dav"
    "ZdIaCq2h0BoKdVu1hmLLGgp8HNVskMKpVIFJ6bWGQmsodlBDkZb10FIKLaUQuN8ZqTWtqJhsklZUaPJRU4VaUdFCsi8ymgvzlE8i"
    "T1lB7XkrKsC5WVHRodxSzBU5N+/vKgwXqthI2/unwHIt3NDCDS3c0MINLdyQACbt97qTxpxpn1q4oYUbbRdutBkX1vqN56zfKBdA"
    "XqOqj56DZvs7ncdWXvwxTuJBaAHJU5zkErrT1j+Qfl5+DcR+tEoAFa8L9UykD9gyijaLyLj6ik2YJhrVz6vPi17c/nxqCy85EUsG"
    "YsnjWuNfu4SumTsnaExhL2SxhfZJSiTc7OxdZjyCq89CyUWbi2fR8VqRhzsqgAvapZxlBxqr5oIlhTO8OTQ0uZNPDi8O4KxF/EYG"
    "tgSDHhACKK5ECcQwBVhpnZXLIZ4+OOwFgjC2ooDE3RcUjLgEAMnIEQn61vjGXmL5alIN8Gk7qTQKwRKRd86GGBmoiGAkATgSoEIC"
    "Dvt2LxKcCYnrkOAoJLoFaU5Abd0S2v0TzCtVw2wbfd6zjd6/HjM3aMc6jw6us9BEravz9oVGaumBXaKJelIvcVJPHeyVpWbRwqQe"
    "nnm3nirqabcx/dVjrvyYu4Juf//zP3VU3w6HLVgzZU16fg/4eZHhVM4Bl+schubn9y13jav2/HlE1gJjiXSi336nSLQAJDpgYg9j"
    "/oTAIpr494AVbs1U8DIhBXqoGXQ9MdvMuZw54sxbE5l0Bl3d7UyTQ9313oo10Iy/Btkf6c5IhwniN6OHmBHrauhdglUfyGGDqqUM"
    "LcVx3uHyvk32QRSdv137xwUdd9jsCVzP3hvMQExRH844RNCW6lTEHZ5n9STb0KhEvrrmTU20wxQ1Nys1/qPuWKL/XwJ9yWf0MYZl"
    "fX0ZJ57y1SRFNbs3IEy84JeZhYNv8Y9qJAIk/2oyRr3Ex5MSpS4hQJVEJ7+nYPJWCr+rT79PYRPAGkpjT1P9H7gZfeHxjR5z1ulA"
    "SN60TCNC7i3S+xFGOZf53SmDftrHoiThAk0KEfoZzcQD8S/ZU5znRvM/+4xKXu7Xn9EblPkINCp/FSSvnswVEbMS3Qpl4pHVtFB4"
    "q3LWjt3GcDZ2JvL0Wf2/5LdhdAPLIoocajCaPckPqlNYKkUrowiTYnYRY1HMbJRY86CC8XggJYE8naQJF6OXV5o8FJGEkjIQPXGk"
    "MZB5zChBvAbaCg8YNuWAofit+F0Bv/uEQ3DlU4Dah53bh0JipbZmtjVI4h7ch2inM3cZ1fAscmXY9wxdwGp/5q4u0WYyJ+j7xGmP"
    "Pec7iuZya0uYpl3Wzo+snYRmTCH1TgbQkcBtbfnsuF882VI9Zrv3nIQmI1aWOM12lM52rJCTWLUeUQuctMBJC5y0wEkLnJ60wEk4"
    "TXU+ZZwIM1dstqoWOGmBU0sFTkbi7Jkftc5J65wyzhRZ0qblTjzbp+VOmi7XcidNZ2u507poKzxuDCnHDcVvxe965U6YqJ4Foioe"
    "iJv2hZEWV6k14pwxMr5fUwNHzOnVGiutsdIaK62x0sxPkzVW3IHBnnmEnDutsdIaq+epsdpNPkRLrY5TalU8LbJyNa9OHz7sMCNX"
    "/CQzUTxPgTNkDFqig44OMJJ4ubFCOJFMKXRreXRI8VONbWoKqXSk04EmF6ehl3SIsRv1TXeDIDpR3wdeRDs83hrBZNVgZXzAKrzE"
    "HtCfCd6U7cQIV+JbmbSHKT4Kdd+oY0IurqnPaS7JEJ2frAiQjQCU6fG24lD+xrGRRLaxRwQfneC866CHRjtaG+ucoYasCc+I3ddB"
    "z0eOGGioYE/Tn2kIeMGA958+//Uf/+fj37/8/vWbvv/821dqHHTnVAXcUjdjEgmaWuuot6PYOB0L0VkigHjpAyq6BQxPK+0jA+YM"
    "PEE+b/22mxCV3qPSm3HGjIkQMw73emDpcM9Q3eT8volvncQduWq4r7KuMhbggyupsi15vP5SpFNJuLLvs+HsswEwgq7EB3Zv5K83"
    "8mbuy3N6AYCbkt8vHN/Dm7QIKQquHGxSE2vc6HvC6tmaTot7dDEpKQ/BZhDiKI1PD96HeSI1ogcbKltpjtIc8KPNUlkAdTODSkH1"
    "JELNXZKadVyN6pjK0/ER1bMmSSqxoe0QvCNkKQSy120nZgmmwI57+oziyMCna5MIncIn1svuTvbhAFznDPgbxtmV06vOUjNQ4r2U"
    "YFdIJQeKiBsO712yF9+K+258ed2AZUDtHVB1V0EcWSjs4i80lfXmHL2qLMyswwLkJHPPDDIHG4GyDBd97765AX3zfe2X7ABQW1GJ"
    "YavdFCgzYYitX343MYaqzP3dzWmRITHjlHQjiys97jlk3LOPxqDA25gl4QhF3wyCvGITDKH+ER89ETlhOVmnHHzmK0rPsIwpSBwi"
    "ZwE9txjVKQvRTY9n7vvde8rDgpsxiM5eTRrwnWw2JeQRsq8l0cM8ZaKCiqUol0ZM2rVx+xS8PPbl/rx2gVcX5wNp3EjNH4qkYfHF"
    "U2dZ7DK4+5Bz9z4e7iRv6G48QDsMhnI5SZOOOAMzZa4aJ96Agd4XGr4TbgMSxoAcc3nclNkwSYfvtZGOZoP24KByxjccF8RyZMkB"
    "IxSegRPsQHmRexS0PNEweqqR4FiHPPccsQBsKw+jPNsbAxVA6ntRROLAHEdkwonmo+6OXebqm8RGNQzOEp3fCPRk0akCL1HvFoVy"
    "yrtVjFKMCj0C6qwUiNH+HMQDoV/e1h0cPNECeBMqm8vt0xg8NlALmThqubmPSQOY61AkjRKIJAUf+3EpFjmWqcVzxkbbwLg97Xn1"
    "EOk6aRxGvnV02yh/bXBbZD0RbGGGbWDHbyO5xiCWcMkL4xaIFGkosnQoctMYpMru6uHN1StrNGGvCXtN2GvCXhP2UsTUhL0m7DVh"
    "rwl7Tdhrwn6NhH1s0p0mwzQZpikrTdiXgRdN2CtGacJe0U8T9mzw1IS9Juw1Ya8J+43SOJqw14S9Juw1Ya+ye+CEfXz2lG+Jg4E2"
    "RtqX8eq5+AQp6tDMWY36kENs8dhoE3IThrAnpw2an9CU+ngwgUXQ67Dq0xgcPZ0UdFw4xBc6kYyIh7YBR+njn2U/EHX4E1DxOqX6"
    "PD1jfkNMJaM+mF24SSM4T9sMQy+q0UbcOjKgZj1qjOxsjEAsBYsf1+eWuwR+G54siogxFRymGezsciQXoqq9q9xboUKDO0Ryc3r+"
    "aGaQlFEQSfIIVQATQa6PDQmdQPs7vqJ3bIlhmxJsXaKmNml4S/CGbVRRwe+akHGh1bSLPVJtKGu3ru3brfos5vAotEZ70z+qyefy"
    "Udwx917cLr3TJ/+UKtrRrINdiyc6w9GBNXkIDKcAplJUlFmxuXBnbxjnryckS1Na6pknQcjBFhwIC/jnmUenw5yZDHFm2ukuCo9X"
    "1VX7+18///Tl82/UnJn8CTNJs2VSpspA/ZStYJ7MnifJrPTu7Jf2AwU5E2k2mkUTKgcyig3I5zxm0Tyu6FPGzxCr4YkzvAX+yDbv"
    "elJ6ZokB18oGFYD8Y/approv2zYH0KzHbWQtxCl4LDopQrCWihaW11AiYifVO4amxXVLtr/7mTtT+L0kVkQgjVvKn8RMnBwuHU1A"
    "KYC/5gD8uUmAr6kaNDf2rjxwKMwdB2IfA0PkZ/+q3nGj02k4L530tsmHgMoFOqFE0UjsYnA5Yavu5j2nN20yvGkpfzP855WEnBj3"
    "Aoe1avWNqd4xpmCvmOKNPip9s1Dha4WRnnFis8y6V3OXyXa7ABTf1gqfJQi2tUM+w/CQpkLbl7YavoRYhxj0oFr9xGz4gtQlC3FT"
    "0ONljbYuZTu51Gh9Ue9ThgpfLxy8g0r9/S3ZzSRtfzvvq4ecZiiV+p+01vLEwV4itpoKmiy0LNtJILmHQOYH4EW+/M/uS6IOIL5B"
    "Rb7Nj27QEoXErlwMPzb8Ah+BCq6vxmxfokCzC6BBWlNcHQvbi5wmX2DOWQ6Y4mBLOCjd3+MC57YdTCp80l8hCunKaqFOFLuO4RXB"
    "rM3AaicCsvsmJSHQ0M4Zq0mJY+mxmFu/QVuTCljmu64DO8zICItkRhupO2R1cNAoXQMgqZJXIX6YFvlbrXxBM7ua2dXMrmZ2j5/Z"
    "JSZ6SEZ59JrZ1cxuqs9oaJ/AaIJ3rwle0c4+eZ43NuFC0y+a59X8huZ5Q6jgem4npuemQPPUeV5DpwONpnsPke4VbfNxYVSzvpr1"
    "1ayvZn2rJxQiWd+ny+Fq9nWPkbStQ2iM0Q69JmETY3yS6NyKBTP0yIciwx5SxzwkDniYJcMmj2c4xmCGFTiRwgKg03rmqIYNhzSg"
    "uhQNHEFDGhggyumpFhAgRzGw10STa5bbAdlfn9hs2meptNMn0rDS7mC6wpo7QK4HWAcoOE/GYOWWrq2n2OIMEq2sPPVkKaRcAHY4"
    "76D4W8Zfj2mrcOFtQ1y5xui03K+nkWjEjFwzzch5B2ZkDY2i2AOzYNdaRwa9H83eZz6mNOGq5tjvZkQBxYLkdy9zmlmtsXl8dAE5"
    "laCsSK7gkOpZwGSeBVJ4nu/911WI9x++fKV6/I8ZWqBx8yDq9I/Tifb7Fy/1p9mQD4/WXc8zRRZx26mL4BA2a7TeY8DLYz1yQyr9"
    "I8mCtcY9T8Fxf+nUibDHF8HdaldlXB+IUDi4KWdGQCqJ/Gixp1zYbJzL+CAXYCjJFOyG9oA7YRSiAc8IkCxDpolSDwxUfDgjVJaR"
    "fVLTYkvjWracvHIZb9Wj/VDPy/RTslatzqiefE1yYCe1+XDZTMLykhoWncop1aGOqzUdU0860YZ3XKsTXsyU/s3sSmEWIDZDILvd"
    "htIaMwp2MUpTRZgD4NdqAF5LfIlX2Z9oU6MrJ84PTlv1JbuS2qqv6q6aJD//aR181LOvWqfhiSMPZEev5eTMnawksqHvDzl7azmK"
    "RuxRt+FKb88+iYNdXeCJxv/+UFqTUWErjPkUuaeJxofA2xAfsZtY2EhK0EYx0zC/6wxLEgmzg0Qs8TYIXLL420fIxk3llaxcNSzi"
    "aLztEaiPVu+bsBwWMM+Ppww/7hko5CLKTQcG4kWmSm8vlKWlsY4YxiKLebBBBRxLUS5uHBBvCC6uCxtJBSY2KC4SAv3Fsy7MuGbZ"
    "2xoiFEreifok3+CB0mSalvJaTFoDAc8kBI5QJDtGdIjgU+bq+YWyNwR9rsW5UCYHpc8wOhfK6iz9yNdAo0XHuSR96kbsVfvCXkHK"
    "q4m3QDyosH4GkMWD/kWIlzR20ZRAqungmKoydzCJRx3YAImXWzCsyfQYQfCXuok0EaZSEcZCeiAh7AL7+EGZgJ0dNgoLSp6ElBCN"
    "1ENCBCiz6NTBRPwUgFoZ/xSgKKoo2iSKxg+0zpzfPfjTTwzJ4h09OojHiuR7bhsGv6DbcNswPFSj5yKxiWXK2NQiWeAKKY4w8Ump"
    "wj6i7bsIszeCry1Iz8rR8ZWSlVR2XuKJPjv2CUP47GhaZiQfS6xzIm17CiQ/QQR5/dDxEwhzi/HiFcqytEpFq1S0SkWrVLRKRatU"
    "UOOgVSpapaJVKlqlolUqWqVy0CqV2GAdza9qflWrVDQl+kxVKrEJQlqloiiqVSpapaJVKq2DuFapaJWKVqlolcquq1SIAUlapaJV"
    "KlqlolUqWqVyxCqV+Hgn4pgiHfLkk5KNekpZjfqjy8OWDbpEgT29fX9hgLpWW8++0z4gNYSApuQNh4v2RKa8q1q86PE3oM+EaQOe"
    "MqiU6jAdH/B0WjbFvsEoBJX4/ogy8oY/30m4Ek2jxyTLbxLu4a3haZhB4NqItMujMncq74m28OeprXuuFq7PuZ71zpGUpZHPZkqj"
    "UEMnBUlIttJ1AjXr+IrVSQWCbZ4MEidmq0tV05PyVsiMjS5BWLs2xDNqN2w0hKxCy8H4a1WMryzu5HvtXRmoBrvLs5gfcXKiould"
    "dqt7xyb5pHCUIwLrbLDCXJj4iCQYfZdD4x2pqyabwPEBcglX8yhNki/enhPeCEOlvnl93ZimiBGjk/KHJiWNS0oZlJTeCBxqAW45"
    "w5H2OBapOpv6VDbRWbKc6UlbzU0KFSwwPlO79svUvb1PGZV0IV7QVazIlbM2XThyMsvGhatDwNXMQRlua3Jbry97nVfvRa/ew+/s"
    "a8WFlGxIFXgrKsg/EZ6RyjtD0OMSzt1fpky3P7io2Av3vBcOvX2+mG4qnyhIn8YXfzppXZZwMoYTebB1rgbVG4g09Hq7knM49OIO"
    "hbGPsTEzW9JGxLTmlD+VNy5jzLZVaqGMRmC4lsRu6Pgex+NlvSzTx11L8ojJQ+t2c6nex6VgB5fibTKKd1mpVPFdqbMKtunoY9oo"
    "vSP2aGlK7ErLG26EK7RQaax5SgjGvhsQVPGe8GL19fqlVG2RUqgrStHeEEUblVQoKa/QjmSWvChEXyiMdmkVqEU/RBuTxqSzpFhy"
    "NsmPIRTuH9JQyxAH4omocM2v3Qt/5578hXvmV8aZ36UX+SK9yLfoDEwlwPQQnUA2EIU8GZA7p7EeR1t+742gUtT7ZH0qqQCmAFYV"
    "wMbV5z23sdsd/jFYf2CM1NYYYPqgbluDcu0wVg2LZsVDD9X8okX5WC9+uWoqB0wiSvy34LN4MNLYa1uMt29rtgAo08Ji7RBjcmyx"
    "zXhgK4HAzURp43jgivUXmgXXLLhmwTULrlnwzbPg+CQRXsumXrPgmgV/kiw4dbLbXQ/igyfDmXv1fDnx2DQNTSlpSklz4poTXzff"
    "E5lnkRYnVQBTAKsHYIFMXh0Po+d5g4Gfct6xT7nLBDtzBw6Mu5pn1zy75tk1z95inh2fLKG5c82d7zF3XjGKqCn0JqKIqxYh0dMX"
    "isxdSJ24kDhrIattKCY1rPkKhSYrsHoDTzTKNV2tybc+h2/sZq25Ixy2HN6A6iTitzyGN5BTz2W5UKoNN+Ni3F2I9iqNYDbQiTsw"
    "z9xW3EFfU1u1xWstXvRiXvQ0E2KpLE7Hbv6iilrDSk7xh5rwBpiwhpUIevfyFSFpgkKDJkbGgZ7PAWQ8g3CKSCMijVuDk3dSfWYJ"
    "h2PrJMYHiHiu2/l7U02A33fHChIPQfvRmOUheAQHWRe2xk4Zz3u8kHOqoekPqDDzgb68bG/uvx/Xcee9vdBVryqlnz69++UdZwLD"
    "vYniPSB3SZrAsKRw4k5gYCwKmr3e11xva85ec0tGL9Pee8fXXnoJWHhfcvWWgMMIpovPj1aZzsW3UOzyuhN63RBc99pJnNvRLwya"
    "vd5f8+Tx1M/pRHq9nuUL/R1J2gv4XvCwhpjwkMMa+ItdNQQ2gaF3QbPZEUIuIxT1j+jzY1bD4wpcQQmlJFafwMkNvAWzMoLXw0o5"
    "bz64CFZIdBGhjO7ldnG5fbS49dVse7UFmQKrb4STsOpGFvl7Jt4t5B4Q+31FZggdrMSihZkKTE6WkKklQxHjqsdUNqZ6RRVqQ9Vg"
    "KgNT/KMCzxFxvxU/W2RXE1KJqTk5731kKaZw6dyiWWhQ9qNsbFY7sKEUdlE6YB8vkzyG4qlOJnomSSr7SJNdGtSn4QbT5IpSYq0+"
    "fr4CPLF3X0Ml6Ckawz3Wdp7jcTZeOyuohBrpn0T0LVkkVYbkMrNxDYKS1o1NYkygDJUTD2XTszJ6EKEzbtWE9GbZpqzk4Fxti5zw"
    "r7erMMEceLvslocniw1lOjNkp8Aul9tfqsasgL5hX/QUJV0CIhGvYS5stXPx/MxTC50WF+g/pz+4cHvxxCUatwxucZLdwoLBzSJU"
    "fe9oJsrVnQsCvL6VDbZJRtJKSYK0wrNxBkkQgZd+xYOIhSTSevELxM2rgeD+XnPxPGxRgvEvXSgxL62EZJYRoIKikyotcOS5BPPx"
    "8HRJ6pnmgC6rZOI4C8DZL4thdRqBBAeYQuA45lJgSwg0A1fJ1SiEbuu4wgiXsJUhmCXtp3gv0nYh2b2MAUgWoWJYwfUfLdN/VKQ5"
    "AtIE5vfcmLOmqBVBrcRNPCTawakhj2cW+pDc+Yx4gXGW+mPvELDeNXjKdXEtUdRcIP5ZKB7UeCyx5SBiQpKhws5rxDInzlgt9UFl"
    "A0e/DP9S/dVOga1U3LFOjGQf0btjh+2SE7N1hUrDhOtH9uoUYmjWWbPOmnXWrLNmnaMQiXun7jfGFwjbe806a9Z53axzSjhbk89P"
    "nnxOyoE8bQ6aMXdCM0Oag9ZsjuagY9MgMG/yxPQmFWkOlIMOpOAalwLMdcMM+7kxb1DxkJ3dTtnLQ8KpJrk1ya1Jbk1yt5/kxkc+"
    "uCbfHfmwGLmkSW5Nch87Sqi57iPluksEEmtVG9HjJWx/p/PYpovfd5+T3w6onAgqy6OzcOEDaOd110BiR+DvA2P8aBM5r+6Dlx6F"
    "kl49LrtiQ+6gzq3zsvOiIaY/G896156Iawfo2sdFD+PnoMj86qeA4U5f1gjjLMR29upw09J3i7qpq2ISYQM7LKcR8DqAAhvE11/a"
    "n5pFwZlP4YIUrvHc3CrOBiJ1Si5CHCiGls/9iZGVqIbjK2ntdpdYZ8kC/QNtbQkFMGahmBBlM4oH0ZXA1ibtKXIzZIPINB6l51Dj"
    "dfHiQpBAJONStJyp1zxNluiuRFtZ+rkbWyuxrCw7KrGaUhsptIjVhF1oBE8eP55RISJ4eG7dYO1DlTiM3o2+oQM9rDPkYDGcU9yb"
    "Tk9xD3XQ41v0+MYfspAl8tFahd4bAlJOH/T0U1d79Nizhkp9//M/dVpJOz2BrZkixT2nM+p8uaGrWpwLdYTJpiNM3E3j6SW/xby1"
    "Tqd5HWrSUMPj9bVbJ51sN+lEqOeioScPLTeiqRHLZfTwCPdKYobE4kLGKAnvanSiBHRd16iShWrlPX1kfATnaoTffE7z56lAN6AH"
    "R4AraihGghUckHkrz6xAOI4u2LYXE7cz7eOyf39qqhNfaiuHnuuKjYFJkW3ORBjP7uhgmC2MiJ6QKk6L4WtO3uAYO0zRS1Ozkw91"
    "m7yGPiLKks8LY5xJ/EYmTlb2hQtFL6PZD0y2yPczBeIt8aJsvljIvnOJ0c373IWvjbliUVwgcpoEJWyW8AvElDsURmdWz3F7mip0"
    "QNb3xSbYeAyp2FKIvFNuZ6E48fQGQxEWZXw6xKAs/eqHJJnVdQihnNQ7M5DkMi00Y24n/1ueiDzlfNITJZ37ZU9UqorKU3lJyhSe"
    "3CZE3K3P6kXEvkk548PuTjTbHhN5bnkHETltsp9IIjnE/ceo9cSLY71GUmlZLi2YSLQPCYtWcv+j0i49xsWB2F/Uj08RlkhnkLRd"
    "ztzfEjtL+uZpjIo65HlkawCh0BW3MldcQVVBlQOqfcLJr4K/rHDdMFwXEZNnBn0kXQrym2in4i6Au6qg14TNVYBLYz1Wlksyekil"
    "RRifLFq+nzB5dl6unsRohL5WQH2NhCJjHJPnIEOe8eMbl4PibeGoe9Xo3x6j1c8apq4oRxoBbzJaXb28SotEtEhEi0TUBdUikfaK"
    "RIQjpmbH+0TYmwIDp7RIRItEqnrfRuJAmR+1VkRrRUR9ZmPpOi0ZAU2RloxodlNLRjQH+cwlIynTunjJ2djsLgVVBVXJdLCZ5Jkt"
    "daJZYSkfJWhpyvOUphT4hOWJbYxWqGiFilaoaIWKVqgk4Gak7blriiCXSCtUtEKl7QqVpmPkWqiyp0KVgqHyFWoQdUjbbtr7L4WH"
    "2afctV707AvnWm393+zkNtAj4em3ZH7Nsv5BZ7ntbprBVmChkw7aHfCWhhzSWW/LkJ/QJ3CWRh0B72ra+ruBSNbYq2AJMf0Kvtbu"
    "1LgHbxO36Nwl+JbI9kJksME7Ra00vKqmgqXZ5wEfM6e6KLK6bihrf8Z3/8os2KD9K74OutvuJKxH4MrT7zJUgjUIz7d/Og+vvROk"
    "Hh23GJJHa96L6n345f039fr5t6/3jvBff+t/+I9fv/79w09LreucsDTsOXZ+xLbzIrHdI/+3CLfb8+K39gL+9gFEk3QIKPkkZo52"
    "2IdLHfG90XgT67N+QjKHjw1y8dXyFUwRrn676BomLGqz1wBiau/moFvk44aOTkc4KwLmg3+eHSr3do9rluwbDVTAxQe58Brj/DHY"
    "w8U7zT5J0SfxHgG598LdDrgEbjx1WYYYPI8QhCpbdd8hrd5kq2/9UdQwvS3GR+ViPhfV/jy3/XmIgQrBMzshapnK+PRqmYpxUS2T"
    "gpJaJnVPHoF0ykDdY+S52DqV1k8BoaFf/now8K8tDK9MYgEVH2GBkGlHVNaNt7nTY3K1UZ6+Wr6NKcXjb5dZLNBXndlRqzbWQqyG"
    "aBNvOi/XNv46ZCiAJH345PCWRlGtwNP4j4Hdn0Y2KLFOXJYvFs8lFKFC1xYDSOe32Pjvf/3805fPv1FpKvKcgJZFnJfG3vfqR7s+"
    "T2h+sB1Zds2f6Myw7wEz1mYFGZVmsAaJL1fkEWFAHh6diYMECg8YMLjc4PidwTUSJ5d1O/g+XE826sPmeq/Bzh1t3xg5nbL7SKdz"
    "VttQIpPzfNiNpmNWxu6X7R1efd+nY7hDYBWeKZbvDstj+RLdt1ZtsEJ2yAyFbCnPFLL3qvoK2Ts0tXTsn45QY3g1BWkMGDse44Qm"
    "SJpiy2z+ZwaCsFEsdF+dJVQMj8MiJBRXn1cEcs+xwhoQ4HKFF9PsyLxGJJTOuiFyJ3a0PBouLRUoZQbK97yHjLh46T2lI+J1N/f9"
    "hy+MzzQWnX/JHOR8JZCP9P7o5SbNo2nawg46raC6qfPgKTTUU3OiR6kMcM3ktXZw/pL/AGnVOfPLE5U60EXehjpv5rxTdHsPubnj"
    "4aPWtuIfomy+odH89fI1JfnK5UNHcpfQpXAec7kRiDMcbAuQyozIR3yFAYjH4CKaKy/zcmSpkKwoKNiXeIEQsaScxKq8lpdXFAHX"
    "FtHo5z2NSWX0KyD1e/bs90Q+TtLNPcDmqg+kPtC+rI36QCqvO/HZ1Ts6dFRIvaOjb656R2pt9mVt1DtSed2NN8/8GtKOjxIzpP3M"
    "VsCSun8Nv+ybp9wtk42Lxm1mMqZnIEM6XjN/AwhdNBUP4F8A8h8i8QvMfil66BeC4FXeljsv6LwZd8sPvOHDSKHeTuPffbazxZwP"
    "RO2MMwJ75Dx9xCCB16LfChr3UrAwwdslwMLEJIaxxCyWdFxU4XyUWuYNye8Whd+phjsU/3aRWlNcjFWIqwkxipQbiG30u9rWBJXx"
    "Aa7hDFOEIxBw7ME59Hfu2b94nIG6mTSmEIkm1IgjRL8J3t/u8LPn8r2D8t/b7xrzM4nwXMe3B6zjNedgDfAcK5xv7djMf/Qih2LR"
    "cbjiQTjlw2oVNXENTyHpIip0WhMoojhHfYIGrAtaXaO7087uqO1X278aVKvtV1Gr72aqV9B2pEC9guZ3R70CherVoFq9AhW1NRxQ"
    "RnuKWFYey8cjmXg3P+QlwytUWdD3ExdUxPLsVTLsot4ZO9wvfn4wZTehBF9D28ht6xF0BpbknnlZZ1a+GdoCrJ9EgxURkscvU+4g"
    "yx+vkTlO6Uii4pdYy1BM4IhChTZE7DY+mu4L3id050NbEZboOYi18XLeZaueeaI+Z36/nS17pNFcJbsP70xCNm6Ee1AJIZud7g5D"
    "VELqYEj08JogKXj3xBJtEq3gnTZr9ydsrBe6O1u25SM5/P3P/zyUf7J8H8WXkvhy4+yB/JTl+6ikFJeUA/kry/dRSamCKQfzW4D3"
    "Ut+lnO/ywua/fXh3Y+V9qqw1eB3HZaEDV1+O3i5v6wvT2+G6DFBdFvmnq8dr+EozK1gohOwVM0/jzzOzN3qtx+nrkltUzsy59OWP"
    "n1AmDAHfP6GvD1w7WQv6RebRwtb8oCKwvgjMjf8bkYSbTwd4Ha+h1EhAhC8ZED3/EUFBucP9hPpjJH258JG9I2gvN8m/Hr1wTOmb"
    "14hAbvBkyCMtJP7xUNgdAcnnrvE0wHlKWgMWl7qizxELC2uCeCkl2pC2hHqiWrILLaGfbE/KApqL3ejM7RSotkVti9qWuJ6olqht"
    "Udsi8semeFHMxIxVeJdAYcxFoDGAqkzrcV0JVj6eApdiYg0qX+HllGRBV8My5dbEXXMAGBCFx4uhYkQuggUIkJxxCSA6KjjbC47d"
    "l/w4vRc0kPrUgVS3D4dKwtPHU52Ps/Xoq0dfPfpSbrzby0CVRU/AegIWqo4GWdXSqKWRqYsqi1oatTQpTpqGXDXkmh4y08irRl5T"
    "xWieaB2NudpSkTbLjrR9ixudOtC8XcMwoHvli/n4dqPT/SNp1AAXuG9/vxK5UyzOZwVxPsuL8+GMyI3/WkG4z7LDfXZpGhcz1lUe"
    "k+473/AQYskPRq8lndEw9O3FjGc4biywQYur5EOQnamf8LPQgBrmwXlIg5FxzxOjcXZfDl638M+D5eACC8mIWS430P2AJa7UI05G"
    "k+8/t2uEPJzYlhPuDm8pdSyTqG/ck45Lr50eC/GHhBTESoqlpjwcUBRQFCj9/pIXH68NXvUo+EEHeY4AI9FcgwKJAom6E4d3JyJJ"
    "FEUBRQF1J9Sd4JxKOAklWyIhYOUJgSF4QygM74exA57YUGeHxa056sm9N4wQ/t1QDWGnJKwoJRHlSLIdlWYmrDwzYXmZCV5qSyWZ"
    "e28KUnYs0HZnci372EETHZp4Wym1IfnyQsVS82+bCqmm4fTErHGzp4+bMb92UTBQMNDwmYbPmGiiSTnFE3Uu1LngfeCkYKBgoM6F"
    "OheCo4qm6DRFd4AUnewjNBVozdTtRrwXwyahHF2/9LlMRjKk91tFocmQ3o+LR7IRpyAbgSc8UmhT2Qz0rYBsBnYtr5lVUnatXyYj"
    "DJ24wK/1Exfwi3hzKdltRfr8MwOEOj3YP43dL8Ffh/Ym6MHeZ0FvAp6YbvBI4p4IPdW4TbaS1x+hL9ZTpHf9X3l7BJwAq0lCj7Z/"
    "W4zrVMVRxVHFkSkOfdS04whxdya61DUHqbjWOvDN5zVh1GF6udAzPgWesXOtMzws/QZXtNlEQNQE1Jz5YozLI+0mEo6Kke1AnGnR"
    "Kkp85jWAOz3PRlWXWl3qAi71PEJVvQP1DtQ7EHkH81RZVR5VHlUeufKoe63udQvu9cv//j+uWrg1"
)
# ---- END GENERATED LAYER EVENT TABLES ----
