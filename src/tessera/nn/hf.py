"""Hugging Face ``transformers`` models as a Tessera layer list — the real modules, not re-implementations.

A causal LM of a supported family is cut into the layers the runtime pipelines by:
``[embedding, decoder layer 0 .. L-1, final norm + lm_head]`` (L + 2 layers, as the zoo's transformers).
Each decoder layer is the family's own module (``LlamaDecoderLayer``, ``GPT2Block``, ...) wrapped so that it
takes and returns one hidden-state tensor: the wrapper computes the positions, the rotary embedding and the
causal mask itself through ``transformers``' own ``create_causal_mask`` (sliding-window layers get theirs),
exactly what the full model computes once and passes down — so a stage needs nothing from the layers before.

Weights: every layer is built on the meta device from the model's config and allocated alone (after its TP
cut, at the shard's shapes); a pretrained model then reads only that layer's tensors from the safetensors files
(``hf_weights.read_tensors``), and a TP build only this rank's slices of them (``get_slice``: its heads' rows
or columns, its FFN columns, its vocabulary rows), never the whole model. The layer list says so
(``HFLayers.loads_own_shards``), so the runtime's ``build_stage`` takes a TP rank's layers as built here
instead of building them whole to cut them (it builds the whole layer on the meta device only, for shapes):
a TP rank reads its own stage's slices and nothing more. A ZeRO-3 rank (FSDP2) builds its layers with their
parameters left on meta (``HFModel.without_weights``), shards them, and reads only the ``Shard(0)`` rows it
keeps (``HFModel.read_rows``). ``from_scratch`` initializes each (whole) layer with
the model's own ``_init_weights`` under the runtime's per-layer seed instead (reproducible across plans), then
cuts it (nothing is read; the runtime slices the canonical whole layer as for the zoo's models).

Tied embeddings (gpt2, small qwen2): the lm_head shares the embedding's Parameter when one range holds both,
which is how the runtime finds and syncs ties across pipeline stages (``runtime.model.tied_groups``).

Tensor parallelism: every family's decoder layers are sharded. llama, mistral and qwen2: even splits through
DTensor's ``parallelize_module`` (:meth:`HFDecoderLayer.dtensor_tp_plan`, the plan ``transformers`` itself uses),
uneven ones by Tessera's own column/row layers (whole kv-head groups and FFN columns). gpt2, even or uneven, by
Tessera's own layers (DTensor's plans know only ``nn.Linear``, and its fused ``c_attn`` is q|k|v): ``c_attn``
(a ``Conv1D``, weight ``[in, out]``) keeps the q, k and v columns of this rank's whole heads, ``attn.c_proj``
the matching input rows, ``mlp.c_fc`` / ``mlp.c_proj`` FFN columns / rows; the cut modules are ``Conv1D`` again
(same layout, same checkpoint keys) inside the real ``GPT2Block``. The token embedding and the lm_head split
along the vocabulary (Megatron's vocab-parallel embedding and cross-entropy, as the zoo's); a tied lm_head
shares its embedding's vocabulary shard.

Parameter names: layer ``i``'s parameters are ``layers.{i}.{name}`` where ``name`` maps to the checkpoint key
by :func:`hf_key` (``embed_tokens.weight`` -> ``model.embed_tokens.weight``, ``block.mlp.up_proj.weight`` of
decoder layer k -> ``model.layers.{k}.mlp.up_proj.weight``, ``lm_head.weight`` -> ``lm_head.weight``).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from tessera.models.hf_weights import Part, locate_model, read_tensors
from tessera.nn.common import BatchLayout, LayerRange, shard_sizes, weight_out_dim

ATTN_IMPL = {"flash": "sdpa", "math": "eager"}


@dataclass(frozen=True)
class Family:
    """Where a family keeps its parts (attribute names under the causal-LM module)."""

    base: str  # the base model's attribute (``model`` / ``transformer``)
    embeds: tuple[str, ...]  # embedding modules of the base model, in the order they are applied
    layers: str  # the ModuleList of decoder layers
    norm: str  # the final norm
    attn: str  # the decoder layer's attention module
    rotary: bool  # rotary positions (a ``rotary_emb`` on the base model)
    drop: str | None = None  # the embedding dropout module
    conv1d: bool = False  # fused ``Conv1D`` projections (gpt2's c_attn/c_proj/c_fc), not q/k/v/o Linears


_LLAMA = Family("model", ("embed_tokens",), "layers", "norm", "self_attn", rotary=True)
FAMILIES: dict[str, Family] = {
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "qwen2": _LLAMA,
    "gpt2": Family(
        "transformer", ("wte", "wpe"), "h", "ln_f", "attn", rotary=False, drop="drop", conv1d=True
    ),
}


class HFModelError(ValueError):
    """A model this adapter cannot run (unsupported family); names the field."""


@functools.lru_cache(maxsize=16)
def _load(source: str, overrides: tuple[tuple[str, Any], ...], attn_impl: str) -> tuple[Path, Any, nn.Module]:
    """(model directory, config, the whole causal LM on the meta device) — once per process."""
    from transformers import AutoConfig, AutoModelForCausalLM

    model_dir = locate_model(source)
    config = AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    if config.model_type not in FAMILIES:
        raise HFModelError(
            f"model: {source!r} is a {config.model_type!r} model; supported families: {', '.join(FAMILIES)}"
        )
    for key, value in overrides:
        setattr(config, key, value)
    config._attn_implementation = attn_impl
    with torch.device("meta"):
        meta = AutoModelForCausalLM.from_config(config)
    return model_dir, config, meta


def _meta_state(source: str, overrides: tuple[tuple[str, Any], ...]) -> dict[str, torch.Tensor]:
    """The whole model's tensors on meta by checkpoint key (shapes and dtypes, nothing read)."""
    return _load(source, overrides, "sdpa")[2].state_dict()


def names_hf_model(name: str) -> bool:
    """Whether ``name`` is no zoo model but a Hugging Face model directory or cached repository here."""
    from tessera.models.resolve import is_hf_model_dir

    return is_hf_model_dir(name)


def _ambient_meta() -> bool:
    return torch.empty(0).device.type == "meta"


class HFEmbedding(nn.Module):
    """Token (and, for gpt2, learned position) embeddings, then the model's embedding dropout."""

    def __init__(self, family: Family, parts: dict[str, nn.Module]) -> None:
        super().__init__()
        self.names = [n for n in family.embeds if n in parts]
        for name, mod in parts.items():
            self.add_module(name, mod)
        self.positional = len(self.names) > 1

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = getattr(self, self.names[0])(ids)
        if self.positional:  # gpt2: wte(ids) + wpe(0..T-1), as GPT2Model adds them
            pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
            x = x + getattr(self, self.names[1])(pos)
        if hasattr(self, "drop"):
            x = self.drop(x)
        return x


class VocabShardEmbedding(nn.Module):
    """Rows ``[vocab_start, vocab_start + rows)`` of a token embedding (Megatron's VocabParallelEmbedding
    without its all-reduce, which the runtime adds): ids outside the shard give zeros; the model's
    ``padding_idx`` row, when it is in this shard, gets no gradient, as in ``nn.Embedding``."""

    def __init__(self, full: nn.Embedding, start: int, stop: int) -> None:
        super().__init__()
        w = full.weight
        self.weight = nn.Parameter(torch.empty(stop - start, w.shape[1], device=w.device, dtype=w.dtype))
        if w.device.type != "meta":
            with torch.no_grad():
                self.weight.copy_(w[start:stop])
        self.vocab_start = start
        pad = full.padding_idx
        self.padding_idx = pad - start if pad is not None and start <= pad < stop else None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.vocab_start
        outside = (local < 0) | (local >= self.weight.shape[0])
        out = F.embedding(local.masked_fill(outside, 0), self.weight, padding_idx=self.padding_idx)
        return out.masked_fill(outside.unsqueeze(-1), 0.0)


class HFDecoderLayer(nn.Module):
    """One real ``transformers`` decoder layer (``self.block``), fed the positions, rotary tables and causal
    mask its base model would pass it, computed here from the hidden states alone."""

    def __init__(
        self,
        family: Family,
        config: Any,
        block: nn.Module,
        index: int,
        rotary: nn.Module | None,
        recompute: str,
    ) -> None:
        super().__init__()
        self.block = block
        self.rotary = rotary  # no parameters; its inv_freq buffer is not persistent
        self.config = config
        self.family = family
        self.recompute_full = recompute == "full"
        from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

        types = getattr(config, "layer_types", None)
        sliding = (
            types[index] == "sliding_attention"
            if types
            else config.model_type == "mistral" and getattr(config, "sliding_window", None) is not None
        )
        self._mask_fn = create_sliding_window_causal_mask if sliding else create_causal_mask
        if recompute == "selective":  # recompute the attention core only, keep the MLP activations
            attn = getattr(block, family.attn)
            inner = attn.forward

            def forward(*args: Any, **kwargs: Any) -> Any:
                return checkpoint(inner, *args, use_reentrant=False, **kwargs)

            attn.forward = forward

    def dtensor_tp_plan(self) -> dict[str, object] | None:
        """DTensor's plan for an even TP split (the runtime's ``parallelize_module``): q/k/v, gate/up
        column-wise and o/down row-wise, as ``transformers``' own ``base_model_tp_plan``; ``None`` for gpt2,
        whose fused ``Conv1D`` projections DTensor cannot split (its layers are cut by Tessera's own)."""
        if self.family.conv1d:
            return None
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

        col = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
        row = ("self_attn.o_proj", "mlp.down_proj")
        plan: dict[str, object] = {f"block.{n}": ColwiseParallel() for n in col}
        plan |= {f"block.{n}": RowwiseParallel() for n in row}
        return plan

    def _run(self, x: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
        # on meta (planning traces) no positions: transformers' packed-sequence check would read their values
        mask = self._mask_fn(
            config=self.config,
            inputs_embeds=x,
            attention_mask=None,
            cache=None,
            position_ids=None if x.device.type == "meta" else pos,
        )
        if self.rotary is None:  # gpt2: (hidden_states, cache, attention_mask)
            out = self.block(x, None, mask)
        else:
            out = self.block(
                x, attention_mask=mask, position_ids=pos, position_embeddings=self.rotary(x, pos)
            )
        return out[0] if isinstance(out, tuple) else out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute_full and torch.is_grad_enabled():
            return checkpoint(self._run, x, use_reentrant=False)
        return self._run(x)


class HFHead(nn.Module):
    """The final norm and the output projection (``lm_head``) to the vocabulary."""

    def __init__(self, family: Family, norm: nn.Module, lm_head: nn.Module) -> None:
        super().__init__()
        self.add_module(family.norm, norm)
        self.lm_head = lm_head
        self._norm = family.norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(getattr(self, self._norm)(x))


class HFLayers(LayerRange):
    """Layers ``[layer_start, layer_start + len(layers))`` of a Hugging Face causal LM (the runtime's model).

    ``loads_own_shards``: a layer built with a TP share already holds that share's canonical weights, read as
    slices from the safetensors files (a pretrained model), so the runtime must not build it whole to cut it;
    ``False`` from scratch (the canonical weights are the whole layer's seeded init, then cut).
    """

    def __init__(
        self,
        config: Any,
        layers: list[nn.Module],
        *,
        layer_start: int,
        n_model_layers: int,
        loads_own_shards: bool = False,
    ) -> None:
        super().__init__(layers, layer_start=layer_start, n_model_layers=n_model_layers)
        self.config = config
        self.loads_own_shards = loads_own_shards
        self.vocab = int(config.vocab_size)
        self.hidden = int(_hidden(config))

    def batch_layout(self, batch_size: int, seq_len: int) -> BatchLayout:
        """Tokens into the embedding, hidden states into a later stage; a target token per position."""
        tokens = self.layer_start == 0
        inputs = (batch_size, seq_len) if tokens else (batch_size, seq_len, self.hidden)
        return BatchLayout(inputs, (batch_size, seq_len), self.vocab, self.vocab if tokens else None)


def _hidden(config: Any) -> int:
    return int(getattr(config, "hidden_size", None) or config.n_embd)


def n_model_layers(config: Any) -> int:
    return int(config.num_hidden_layers) + 2


def hf_key(family: Family, n_layers: int, fqn: str) -> str:
    """The checkpoint key (as ``save_pretrained`` names it) of Tessera parameter ``layers.{i}.{name}``."""
    _, index, name = fqn.split(".", 2)
    i = int(index)
    if i == 0:
        return f"{family.base}.{name}"
    if i == n_layers - 1:
        return name if name.startswith("lm_head.") else f"{family.base}.{name}"
    if not name.startswith("block."):
        raise KeyError(f"{fqn}: not a parameter of a decoder layer")
    return f"{family.base}.{family.layers}.{i - 1}.{name[len('block.') :]}"


def tessera_key(family: Family, n_layers: int, key: str) -> str | None:
    """Inverse of :func:`hf_key` (``None`` for keys of no layer, e.g. buffers)."""
    if key.startswith("lm_head."):
        return f"layers.{n_layers - 1}.{key}"
    prefix = f"{family.base}."
    if not key.startswith(prefix):
        return None
    rest = key[len(prefix) :]
    head, _, tail = rest.partition(".")
    if head in family.embeds or head == family.drop:
        return f"layers.0.{rest}"
    if head == family.norm:
        return f"layers.{n_layers - 1}.{rest}"
    if head == family.layers:
        k, _, name = tail.partition(".")
        return f"layers.{int(k) + 1}.block.{name}"
    return None


def _part(module: nn.Module, meta_model: nn.Module, from_scratch: bool) -> nn.Module:
    """A deep copy of a meta submodule. ``from_scratch``: allocated on CPU and initialized whole by the model's
    own ``_init_weights`` (the values a TP shard is then cut from); else it stays on meta until its layer, cut to
    this rank's shapes, is allocated and loaded (:func:`_allocate`)."""
    m = copy.deepcopy(module)
    if from_scratch and not _ambient_meta():
        m.to_empty(device="cpu")
        with torch.no_grad():
            for sub in m.modules():
                meta_model._init_weights(sub)
    return m


def _allocate(layer: nn.Module) -> None:
    """Allocate on CPU the tensors still on meta, leaving those built for real (rotary tables) as they are."""
    for sub in layer.modules():
        own = [*sub._parameters.values(), *sub._buffers.values()]
        if any(t is not None and t.is_meta for t in own):
            sub.to_empty(device="cpu", recurse=False)


class Side(Enum):
    """Which features of a projection a TP cut keeps: its outputs (column-parallel) or inputs (row-parallel)."""

    OUT = "out"
    IN = "in"


@dataclass(frozen=True)
class Cut:
    """The part of a projection one TP rank holds: output features ``ranges`` (column-parallel; the bias is cut
    alike) or input features (row-parallel; the bias stays whole: the runtime adds it once, after the reduction).
    Several ranges are concatenated (gpt2's fused q|k|v columns of this rank's heads)."""

    side: Side
    ranges: tuple[tuple[int, int], ...]


def _weight_dim(mod: nn.Module, side: Side) -> int:
    """The weight dimension of ``side``: nn.Linear is ``[out, in]``, ``Conv1D`` ``[in, out]``."""
    out = weight_out_dim(mod) or 0
    return out if side is Side.OUT else 1 - out


def _take(t: torch.Tensor, dim: int, ranges: tuple[tuple[int, int], ...]) -> torch.Tensor:
    return torch.cat([t.narrow(dim, a, b - a) for a, b in ranges], dim=dim)


def _cut(mod: nn.Module, cut: Cut) -> nn.Module:
    """A projection of the same kind (nn.Linear or Conv1D) holding ``cut`` of ``mod``; its values are copied
    when ``mod`` has any (from scratch), else it stays on meta for the loader to fill with its slices."""
    w = mod.weight
    dim = _weight_dim(mod, cut.side)
    shape = list(w.shape)
    shape[dim] = sum(b - a for a, b in cut.ranges)
    has_bias = mod.bias is not None
    with torch.device("meta"):
        if weight_out_dim(mod) == 1:
            new: nn.Module = type(mod)(shape[1], shape[0])  # Conv1D(nf=out, nx=in), weight [in, out]
        else:
            new = nn.Linear(shape[1], shape[0], bias=has_bias)
    new = new.to(dtype=w.dtype)
    if w.device.type != "meta":
        new.to_empty(device=w.device)
        with torch.no_grad():
            new.weight.copy_(_take(w, dim, cut.ranges))
            if has_bias:
                new.bias.copy_(_take(mod.bias, 0, cut.ranges) if cut.side is Side.OUT else mod.bias)
    return new


def _apply_cuts(root: nn.Module, cuts: dict[str, Cut], prefix: str) -> dict[str, Part]:
    """In place: replace each projection ``cuts`` names under ``root``; the parts to read, by parameter name."""
    parts: dict[str, Part] = {}
    for path, cut in cuts.items():
        owner, _, attr = path.rpartition(".")
        parent = root.get_submodule(owner)
        mod = getattr(parent, attr)
        parts[f"{prefix}{path}.weight"] = (_weight_dim(mod, cut.side), cut.ranges)
        if mod.bias is not None and cut.side is Side.OUT:
            parts[f"{prefix}{path}.bias"] = (0, cut.ranges)
        setattr(parent, attr, _cut(mod, cut))
    return parts


def _own(sizes: list[int], rank: int, unit: int = 1) -> tuple[int, int]:
    """``[start, stop)`` of rank ``rank``'s units (``sizes`` per rank), in elements of ``unit``."""
    return sum(sizes[:rank]) * unit, sum(sizes[: rank + 1]) * unit


def _decoder_cuts(family: Family, block: nn.Module, config: Any, tp: Any) -> dict[str, Cut]:
    """This TP rank's cuts of a decoder layer; sets its attention's local head count where the module reads it.

    llama/mistral/qwen2: whole kv-head groups of q/k/v (o's matching inputs) and FFN columns of gate/up (down's
    rows). gpt2: whole heads of the fused ``c_attn`` — its q, k and v column blocks cut alike — with
    ``attn.c_proj``'s matching input rows, FFN columns of ``mlp.c_fc`` and rows of ``mlp.c_proj``.
    """
    ratios = tuple(tp.ratios) or (1.0,) * tp.degree
    heads = _heads(config)
    if family.conv1d:
        hidden = _hidden(config)
        hd = hidden // heads
        q = _own(shard_sizes(heads, ratios), tp.rank, hd)
        attn = block.attn
        attn.split_size = q[1] - q[0]  # c_attn(x).split(split_size): this rank's q | k | v
        attn.num_heads = attn.split_size // hd
        inner = int(getattr(config, "n_inner", None) or 4 * hidden)
        f = _own(shard_sizes(inner, ratios), tp.rank)
        return {
            "attn.c_attn": Cut(Side.OUT, tuple((c * hidden + q[0], c * hidden + q[1]) for c in range(3))),
            "attn.c_proj": Cut(Side.IN, (q,)),
            "mlp.c_fc": Cut(Side.OUT, (f,)),
            "mlp.c_proj": Cut(Side.IN, (f,)),
        }
    kv = int(getattr(config, "num_key_value_heads", None) or heads)
    hd = int(block.self_attn.head_dim)
    group = heads // kv
    q = _own(shard_sizes(kv, ratios), tp.rank, group * hd)
    k = _own(shard_sizes(kv, ratios), tp.rank, hd)
    f = _own(shard_sizes(int(config.intermediate_size), ratios), tp.rank)
    return {
        "self_attn.q_proj": Cut(Side.OUT, (q,)),
        "self_attn.k_proj": Cut(Side.OUT, (k,)),
        "self_attn.v_proj": Cut(Side.OUT, (k,)),
        "self_attn.o_proj": Cut(Side.IN, (q,)),
        "mlp.gate_proj": Cut(Side.OUT, (f,)),
        "mlp.up_proj": Cut(Side.OUT, (f,)),
        "mlp.down_proj": Cut(Side.IN, (f,)),
    }


def _load_layer(
    layer: nn.Module, i: int, family: Family, n: int, model_dir: Path, tied: bool, parts: dict[str, Part]
) -> None:
    """Copy layer ``i``'s tensors (and only those; of a TP shard only its ``parts``) from the model's
    safetensors files into ``layer``."""
    keys = {name: hf_key(family, n, f"layers.{i}.{name}") for name, _ in layer.named_parameters()}
    # a tied head is the embedding (as ``from_pretrained`` ties it; save_pretrained drops the head's copy)
    if tied and i == n - 1 and "lm_head.weight" in keys:
        keys["lm_head.weight"] = f"{family.base}.{family.embeds[0]}.weight"
    tensors = read_tensors(
        model_dir, sorted(set(keys.values())), {keys[name]: part for name, part in parts.items()}
    )
    with torch.no_grad():
        for name, p in layer.named_parameters():
            p.copy_(tensors[keys[name]].to(p.dtype))


def build_hf_layers(
    source: str,
    *,
    layer_range: tuple[int, int] | None,
    tp: Any = None,
    attention: str = "flash",
    recompute: str = "none",
    from_scratch: bool = False,
    overrides: tuple[tuple[str, Any], ...] = (),
    read: bool = True,
) -> HFLayers:
    """Layers ``layer_range`` of the Hugging Face model ``source`` (all by default), with their weights.

    ``read=False`` (a pretrained model): the parameters stay on the meta device, unread, while the buffers
    (rotary tables) are built for real — the skeleton whose parameters the runtime shards first and then fills
    with only the rows it keeps (:meth:`HFModel.read_rows`)."""
    if attention not in ATTN_IMPL:
        raise ValueError(f"attention: {attention!r} is not one of {', '.join(ATTN_IMPL)}")
    model_dir, config, meta = _load(source, tuple(overrides), ATTN_IMPL[attention])
    family = FAMILIES[config.model_type]
    n = n_model_layers(config)
    start, end = layer_range if layer_range is not None else (0, n)
    if not 0 <= start < end <= n:
        raise ValueError(f"layer_range ({start}, {end}) outside the model's {n} layers")
    sharded = tp is not None and tp.degree > 1
    base = getattr(meta, family.base)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    layers: list[nn.Module] = []
    for i in range(start, end):
        if i == 0:
            mods = {e: _part(getattr(base, e), meta, from_scratch) for e in family.embeds}
            if family.drop is not None:
                mods[family.drop] = copy.deepcopy(getattr(base, family.drop))
            layer: nn.Module = HFEmbedding(family, mods)
        elif i == n - 1:
            norm = _part(getattr(base, family.norm), meta, from_scratch)
            layer = HFHead(family, norm, _part(meta.lm_head, meta, from_scratch))
        else:
            block = _part(getattr(base, family.layers)[i - 1], meta, from_scratch)
            rotary = None
            if family.rotary:
                rotary = type(base.rotary_emb)(config=config)  # on meta when building under meta
            layer = HFDecoderLayer(family, config, block, i - 1, rotary, recompute)
        parts: dict[str, Part] = {}
        if sharded and 0 < i < n - 1:
            parts = _apply_cuts(layer.block, _decoder_cuts(family, layer.block, config, tp), "block.")
        elif sharded:  # the token embedding and the lm_head split along the vocabulary
            rows = _own(shard_sizes(int(config.vocab_size), tuple(tp.ratios) or (1.0,) * tp.degree), tp.rank)
            if i == 0:
                name = family.embeds[0]
                setattr(layer, name, VocabShardEmbedding(getattr(layer, name), *rows))
                parts = {f"{name}.weight": (0, (rows,))}
            else:
                parts = _apply_cuts(layer, {"lm_head": Cut(Side.OUT, (rows,))}, "")
        if read and not from_scratch and not _ambient_meta():
            _allocate(layer)
            _load_layer(layer, i, family, n, model_dir, tied, parts)
        _describe(layer, i, n, config)
        layers.append(layer)
    if tied and start == 0 and end == n:  # one Parameter, as in the plain model
        layers[-1].lm_head.weight = getattr(layers[0], family.embeds[0]).weight
    return HFLayers(config, layers, layer_start=start, n_model_layers=n, loads_own_shards=not from_scratch)


def _describe(layer: nn.Module, i: int, n: int, config: Any) -> None:
    """What the planner's trace reads from a layer: its name, kind and how TP shards it (as the zoo's)."""
    from tessera.models.spec import TPShard

    if 0 < i < n - 1:
        heads = int(getattr(config, "num_key_value_heads", None) or _heads(config))
        layer.spec_name, layer.kind = f"block_{i - 1}", "transformer"
        layer.tp_shard, layer.tp_units = TPShard.HEADS, heads
    else:
        layer.spec_name = layer.kind = "embedding" if i == 0 else "head"
        layer.tp_shard, layer.tp_units = TPShard.VOCAB, int(config.vocab_size)


def _heads(config: Any) -> int:
    return int(getattr(config, "num_attention_heads", None) or config.n_head)


def hf_model_spec(source: str, seq_len: int | None = None, *, name: str | None = None) -> Any:
    """The planner's ModelSpec of a Hugging Face model, read from the ``transformers`` module itself.

    The layer list is built on the meta device (no weights, no memory) and traced layer by layer
    (``tessera.nn.trace``): parameters, forward FLOPs and saved activations are those of the real modules,
    so a family needs no hand-written closed form; where the zoo has one (``spec_from_hf_config``) the two
    agree on layers, parameters, FLOPs and TP sharding (tests/nn/test_hf_modules.py).
    """
    from tessera.models.hf import arch_from_hf_config
    from tessera.nn.trace import trace_spec

    factory = HFModel(source)
    config = factory.config()
    with torch.device("meta"):
        model = factory(layer_range=None, tp=None, attention="flash", recompute="none")
    arch = arch_from_hf_config(locate_model(source) / "config.json")
    return trace_spec(
        model,
        seq_len or arch.max_positions,
        name=name or str(source),
        family="gpt" if config.model_type == "gpt2" else "llama",
        arch=arch,
    )


@dataclass(frozen=True)
class HFModel:
    """The runtime's model factory for a Hugging Face model: a ``save_pretrained`` directory, its
    ``config.json``, or a repository id in the local cache. Picklable (workers rebuild their own layers).

    ``from_scratch`` keeps random initialization (each layer seeded by the runtime) instead of loading the
    weights; ``overrides`` sets config fields, e.g. ``(("attention_dropout", 0.0),)``. ``unread`` builds the
    layers of a pretrained model with their parameters left on meta (:meth:`without_weights`).
    """

    source: str
    from_scratch: bool = False
    overrides: tuple[tuple[str, Any], ...] = ()
    unread: bool = False

    def __call__(
        self, *, layer_range: tuple[int, int] | None, tp: Any, attention: str, recompute: str
    ) -> HFLayers:
        return build_hf_layers(
            self.source,
            layer_range=layer_range,
            tp=tp,
            attention=attention,
            recompute=recompute,
            from_scratch=self.from_scratch,
            overrides=self.overrides,
            read=not self.unread,
        )

    def without_weights(self) -> HFModel:
        """This model whose layers keep their parameters on meta, unread (buffers built): a ZeRO-3 rank shards
        that skeleton first and then reads only the rows it keeps (:meth:`read_rows`)."""
        return replace(self, unread=True)

    def read_rows(self, rows: Mapping[str, tuple[int, int] | None]) -> dict[str, torch.Tensor]:
        """Parameters ``layers.{i}.{name}`` read from the safetensors files: rows ``[start, stop)`` along dim 0 of
        each (``None``: the whole tensor), each key once, nothing else (a ZeRO-3 rank's ``Shard(0)`` chunks). A
        tied head reads the embedding's tensor, as the layers do; an empty row range reads nothing."""
        model_dir, config, _ = _load(self.source, tuple(self.overrides), "sdpa")
        family = FAMILIES[config.model_type]
        n = n_model_layers(config)
        tied = bool(getattr(config, "tie_word_embeddings", False))
        keys = {}
        for fqn in rows:
            key = hf_key(family, n, fqn)
            if tied and key == "lm_head.weight":
                key = f"{family.base}.{family.embeds[0]}.weight"
            keys[fqn] = key
        if len(set(keys.values())) != len(keys):
            raise ValueError(f"read_rows: {sorted(rows)} name one checkpoint tensor twice")
        empty = {fqn for fqn, r in rows.items() if r is not None and r[0] >= r[1]}
        parts: dict[str, Part] = {
            keys[f]: (0, (r,)) for f, r in rows.items() if r is not None and f not in empty
        }
        got = read_tensors(model_dir, [keys[f] for f in rows if f not in empty], parts)
        out = {fqn: got[keys[fqn]] for fqn in rows if fqn not in empty}
        if empty:
            whole = _meta_state(self.source, tuple(self.overrides))
            for fqn in empty:
                shape = whole[keys[fqn]].shape
                out[fqn] = torch.empty((0, *shape[1:]), dtype=whole[keys[fqn]].dtype)
        return out

    def config(self) -> Any:
        return _load(self.source, tuple(self.overrides), "sdpa")[1]

    def n_layers(self) -> int:
        return n_model_layers(self.config())
