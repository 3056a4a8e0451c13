"""Checkpoints any plan can resume, written with ``torch.distributed.checkpoint`` (DCP), atomically.

Layout on disk (version 2): ``ROOT/step-NNNNNNNN/`` is a DCP checkpoint — ``.metadata`` plus one
``__<rank>_0.distcp`` file per rank, readable by ``torch.distributed.checkpoint.load`` or
``FileSystemReader`` — with Tessera's ``meta.json`` (step, plan, data position and identity, model) beside it;
``ROOT/latest`` names the newest step. Keys: ``model.<fqn>`` (parameters by model-layer FQN),
``optim.state.<fqn>.<name>`` (optimizer state, e.g. ``exp_avg``), ``rng.cpu.<rank>`` (each rank's RNG state).

Pieces, not DTensors: each rank saves what it authoritatively holds (parameters on replica 0, optimizer state
by owner under ZeRO, every replica's FSDP shard) as DCP *chunks* of the full tensor — one box per range of its
``ShardSpec`` — through a planner of our own. So uneven TP shards and fused-QKV layouts (several disjoint
ranges per rank), which a DTensor placement cannot express, are ordinary DCP chunks, and the metadata records
the full shape of every tensor. On load each rank of the *new* plan asks DCP for its own boxes (its
``ShardSpec`` for every parameter it holds): DCP's resharding reads only the saved chunks that overlap them,
so a 2-way-DP checkpoint resumes under a 2-stage pipeline, uneven TP or ZeRO-3 without any rank assembling
the whole model.

Collectives: ``save`` is collective over the default process group exactly as the version-1 writer was (it
had three barriers): every rank calls it at the same step. DCP adds only small-object collectives (its save
plans and write results); an error on the coordinator while planning is sent to every rank by DCP (no rank
waits for a plan that never comes), and a dead rank is bounded by the group's timeout, as before. Loading
takes no collective at all (``no_dist=True``): each rank plans its reads from the shared ``.metadata`` alone.

Atomicity: DCP writes into ``.tmp-step-N`` (data files fsynced; ``.metadata`` last, by rank 0, after every
rank's writes are done); rank 0 then writes ``meta.json``, renames the directory to ``step-N`` and replaces
``latest``. A crash at any point leaves the previous checkpoint complete and ``latest`` pointing at it.

Version 1 checkpoints (``rank*.pt`` files of full pieces) are still read, so older runs resume.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import LoadPlan, SavePlan, TensorWriteData, WriteItem, WriteItemType
from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list

from tessera.runtime.shards import ShardSpec, assemble, replicated

CKPT_VERSION = 2
FORMAT = "torch.distributed.checkpoint"
MODEL, OPTIM, RNG = "model.", "optim.state.", "rng.cpu."

Piece = tuple[str, ShardSpec, torch.Tensor]  # (fqn or "fqn::state", where it lies in the full tensor, local)


# ------------------------------------------------------------------------------------------------ chunks
@dataclass(frozen=True)
class _Local:
    """One rank's piece of one tensor, seen by DCP as chunks: one box per range of ``spec`` (the whole tensor
    when replicated). ``local`` is the rank's tensor (``spec.local_shape``); the chunks are views into it."""

    key: str
    spec: ShardSpec
    local: torch.Tensor

    def __post_init__(self) -> None:
        if tuple(self.local.shape) != self.spec.local_shape:
            raise ValueError(
                f"checkpoint: {self.key} is {tuple(self.local.shape)} locally, its shard spec says "
                f"{self.spec.local_shape}"
            )

    def chunks(self) -> list[tuple[ChunkStorageMetadata, torch.Tensor]]:
        full = self.spec.full_shape
        if self.spec.replicated:
            return [(ChunkStorageMetadata(torch.Size([0] * len(full)), torch.Size(full)), self.local)]
        out, pos, dim = [], 0, self.spec.dim
        for a, b in self.spec.ranges:
            if b > a:
                offsets, sizes = [0] * len(full), list(full)
                offsets[dim], sizes[dim] = a, b - a
                chunk = ChunkStorageMetadata(torch.Size(offsets), torch.Size(sizes))
                out.append((chunk, self.local.narrow(dim, pos, b - a)))
            pos += b - a
        return out

    def chunk(self, index: MetadataIndex) -> torch.Tensor:
        chunks = self.chunks()
        if (
            index.index is not None
            and index.index < len(chunks)
            and chunks[index.index][0].offsets == index.offset
        ):
            return chunks[index.index][1]
        for chunk, t in chunks:
            if chunk.offsets == index.offset:
                return t
        raise ValueError(f"checkpoint: {self.key} has no chunk at {tuple(index.offset or ())}")


class _SavePlanner(DefaultSavePlanner):
    """Writes every rank's ``_Local`` pieces as DCP chunks; where one rank holds a tensor whole (replicated) and
    another a part of it (a tied weight sharded on one stage only), the whole one is written alone."""

    def __init__(self) -> None:
        super().__init__(flatten_state_dict=False, flatten_sharded_tensors=False)

    def create_local_plan(self) -> SavePlan:
        items = []
        for key, piece in self.state_dict.items():
            for chunk, t in piece.chunks():
                data = TensorWriteData(
                    chunk=chunk,
                    properties=TensorProperties.create_from_tensor(t),
                    size=torch.Size(piece.spec.full_shape),
                )
                index = MetadataIndex(key, chunk.offsets)
                items.append(WriteItem(index=index, type=WriteItemType.SHARD, tensor_data=data))
        self.plan = SavePlan(items)
        return self.plan

    def create_global_plan(self, all_plans: list[SavePlan]) -> tuple[list[SavePlan], Metadata]:
        whole = {
            item.index.fqn
            for plan in all_plans
            for item in plan.items
            if item.tensor_data is not None and item.tensor_data.chunk.sizes == item.tensor_data.size
        }

        def keep(item: WriteItem) -> bool:
            td = item.tensor_data
            return item.index.fqn not in whole or (td is not None and td.chunk.sizes == td.size)

        plans = [dataclasses.replace(p, items=[i for i in p.items if keep(i)]) for p in all_plans]
        return super().create_global_plan(plans)  # dedups identical chunks, validates bounds and coverage

    def lookup_object(self, index: MetadataIndex) -> Any:
        return self.state_dict[index.fqn].chunk(index).clone()  # compact: a view would save its whole storage


class _LoadPlanner(DefaultLoadPlanner):
    """Reads into each ``_Local`` piece the reads ``_reads`` planned (only the saved chunks overlapping it)."""

    def __init__(self, reads: LoadPlan) -> None:
        super().__init__(flatten_state_dict=False, flatten_sharded_tensors=False)
        self.reads = reads

    def set_up_planner(
        self, state_dict: Any, metadata: Metadata | None = None, is_coordinator: bool = False
    ) -> None:
        self.original_state_dict = self.state_dict = state_dict  # our pieces are no DCP state-dict values
        self.metadata = metadata
        self.is_coordinator = is_coordinator

    def create_local_plan(self) -> LoadPlan:
        return self.reads

    def lookup_tensor(self, index: MetadataIndex) -> torch.Tensor:
        return self.state_dict[index.fqn].chunk(index)


def _reads(where: Path, saved: Mapping[str, Any], state: Mapping[str, _Local]) -> LoadPlan:
    """DCP's resharding: for each piece, the parts of the saved chunks that overlap its boxes — checked to
    cover it whole (a clear error here, before DCP wraps it into a ``CheckpointException``)."""
    items = []
    for key, piece in state.items():
        md = saved[key]
        if tuple(md.size) != piece.spec.full_shape:
            raise ValueError(
                f"checkpoint {where}: {key} has shape {tuple(md.size)}, this plan's model has "
                f"{piece.spec.full_shape} (was it written for another model?)"
            )
        reads = create_read_items_for_chunk_list(key, md, [c for c, _ in piece.chunks()])
        if sum(math.prod(r.lengths) for r in reads) != piece.local.numel():
            raise ValueError(f"checkpoint {where}: the saved chunks of {key} do not cover it")
        items += reads
    return LoadPlan(items)


# ------------------------------------------------------------------------------------------------ writing
def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _barrier() -> None:
    if _distributed():
        dist.barrier()


@contextlib.contextmanager
def _single_process_intended() -> Iterator[None]:
    """DCP warns on every ``no_dist`` call that it assumes one process; here that is the intent."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def save(
    root: str | Path,
    step: int,
    rank: int,
    params: Iterable[Piece],
    optim: Iterable[Piece],
    meta: dict[str, Any],
) -> Path:
    """Collective over the default group: every rank calls it with its own pieces (``Trainer.param_pieces``,
    ``Trainer.optim_pieces``, whose optimizer keys are ``fqn::state``). Returns once ``step-N`` is complete."""
    root = Path(root)
    tmp = root / f".tmp-step-{step:08d}"
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)  # a writer that died half-way through this step before
        tmp.mkdir()
    _barrier()
    state: dict[str, _Local] = {}
    for fqn, spec, t in params:
        state[MODEL + fqn] = _Local(MODEL + fqn, spec, t.detach().cpu())
    for key, spec, t in optim:
        fqn, _, name = key.partition("::")
        state[f"{OPTIM}{fqn}.{name}"] = _Local(f"{OPTIM}{fqn}.{name}", spec, t.detach().cpu())
    rng = torch.get_rng_state()
    state[f"{RNG}{rank}"] = _Local(f"{RNG}{rank}", replicated(rng.shape), rng)
    with _single_process_intended():
        writer = dcp.FileSystemWriter(tmp)
        dcp.save(state, storage_writer=writer, planner=_SavePlanner(), no_dist=not _distributed())
    final = step_dir(root, step)
    if rank == 0:
        world = dist.get_world_size() if _distributed() else 1
        body = {"version": CKPT_VERSION, "format": FORMAT, "step": step, "world_size": world, **meta}
        _write_atomic(tmp / "meta.json", json.dumps(body, indent=2).encode())
        _fsync_dir(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(root)
        _write_atomic(root / "latest", final.name.encode())
    _barrier()
    return final


# ------------------------------------------------------------------------------------------------ reading
@dataclass(frozen=True)
class Want:
    """What one rank of a plan reads: its own piece of each parameter (fqn → ``ShardSpec``), and the optimizer
    state of the parameters in ``optim`` (those whose state it holds: its ZeRO share). Optimizer state shaped
    like its parameter is read with the parameter's spec, any other (``step``) whole."""

    params: Mapping[str, ShardSpec]
    optim: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Checkpoint:
    """Full tensors (``load(path)``), or one rank's pieces of them (``load(path, want)``): ``params`` by FQN,
    ``optim`` by ``fqn::state``."""

    path: Path
    meta: dict[str, Any]
    params: dict[str, torch.Tensor]
    optim: dict[str, torch.Tensor]
    rng: dict[int, torch.Tensor]

    @property
    def step(self) -> int:
        return int(self.meta["step"])


def resolve(path: str | Path) -> Path:
    """A step directory, or a checkpoint root whose ``latest`` names one (else its newest complete step)."""
    path = Path(path)
    if (path / "meta.json").is_file():
        return path
    latest = path / "latest"
    if latest.is_file():
        candidate = path / latest.read_text().strip()
        if (candidate / "meta.json").is_file():
            return candidate
    steps = sorted(p for p in path.glob("step-*") if (p / "meta.json").is_file())
    if not steps:
        raise FileNotFoundError(f"checkpoint: no complete checkpoint under {path}")
    return steps[-1]


def read_meta(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """(the step directory, its ``meta.json``), without reading any tensor."""
    path = resolve(path)
    return path, json.loads((path / "meta.json").read_text())


def load(path: str | Path, want: Want | None = None, *, optimizer: bool = True) -> Checkpoint:
    """Every tensor whole (``want=None``: export, inspection; ``optimizer=False`` skips the optimizer state),
    or only this rank's pieces of them."""
    path, meta = read_meta(path)
    version = meta.get("version")
    if version == 1:
        return _load_v1(path, meta, want, optimizer)
    if version != CKPT_VERSION:
        raise ValueError(
            f"checkpoint {path}: version {version!r} is not one this Tessera reads (1 or {CKPT_VERSION}); "
            "it was written by another release"
        )
    reader = dcp.FileSystemReader(path)
    saved = reader.read_metadata().state_dict_metadata
    state: dict[str, _Local] = {}
    for key, md in saved.items():
        if not isinstance(md, TensorStorageMetadata):
            continue
        spec = _spec_for(key, tuple(md.size), want, optimizer)
        if spec is not None:
            state[key] = _Local(key, spec, torch.empty(spec.local_shape, dtype=md.properties.dtype))
    if want is not None:
        missing = sorted(f for f in want.params if MODEL + f not in saved)
        if missing:
            raise ValueError(
                f"checkpoint {path}: no parameter {', '.join(missing[:4])} (was it written for another model?)"
            )
    with _single_process_intended():  # each rank plans its own reads from the metadata: no collective
        dcp.load(state, storage_reader=reader, planner=_LoadPlanner(_reads(path, saved, state)), no_dist=True)
    params = {k[len(MODEL) :]: p.local for k, p in state.items() if k.startswith(MODEL)}
    optim = {}
    for k, p in state.items():
        if k.startswith(OPTIM):
            fqn, name = k[len(OPTIM) :].rsplit(".", 1)
            optim[f"{fqn}::{name}"] = p.local
    rng = {int(k[len(RNG) :]): p.local for k, p in state.items() if k.startswith(RNG)}
    return Checkpoint(path, meta, params, optim, rng)


def _spec_for(key: str, shape: tuple[int, ...], want: Want | None, optimizer: bool) -> ShardSpec | None:
    """How this rank reads the saved tensor ``key`` (None: not at all)."""
    if key.startswith(OPTIM) and not optimizer:
        return None
    if want is None or key.startswith(RNG):
        return replicated(shape)
    if key.startswith(MODEL):
        return want.params.get(key[len(MODEL) :])
    if key.startswith(OPTIM):
        fqn = key[len(OPTIM) :].rsplit(".", 1)[0]
        if fqn not in want.optim:
            return None
        spec = want.params[fqn]
        return spec if shape == spec.full_shape and shape else replicated(shape)
    return None


def _load_v1(path: Path, meta: dict[str, Any], want: Want | None, optimizer: bool) -> Checkpoint:
    """Version 1: each rank's ``rank*.pt`` holds (fqn, shape, dim, ranges, tensor) rows; assembled whole."""
    params: list[Piece] = []
    optim: list[Piece] = []
    rng: dict[int, torch.Tensor] = {}

    def decode(rows: list[tuple]) -> list[Piece]:
        return [(f, ShardSpec(tuple(s), d, tuple(tuple(r) for r in rs)), t) for f, s, d, rs, t in rows]

    for f in sorted(path.glob("rank*.pt")):
        payload = torch.load(f, map_location="cpu", weights_only=True)
        params += decode(payload["params"])
        optim += decode(payload["optim"]) if optimizer else []
        rng[int(f.stem[4:])] = payload["rng"]
    full_params, full_optim = assemble(params), assemble(optim) if optim else {}
    if want is None:
        return Checkpoint(path, meta, full_params, full_optim, rng)
    mine, states = slice_for(want, full_params, full_optim, where=path)
    return Checkpoint(path, meta, mine, states, rng)


def slice_for(
    want: Want, params: dict[str, torch.Tensor], optim: dict[str, torch.Tensor], *, where: Path | str = ""
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """One rank's pieces cut out of full tensors (what ``load(path, want)`` reads directly)."""
    missing = sorted(f for f in want.params if f not in params)
    if missing:
        raise ValueError(f"checkpoint {where}: no parameter {', '.join(missing[:4])}")
    mine = {f: spec.slice(params[f]) for f, spec in want.params.items()}
    states = {}
    for key, v in optim.items():
        fqn = key.split("::")[0]
        if fqn in want.optim:
            spec = want.params[fqn]
            states[key] = spec.slice(v) if tuple(v.shape) == spec.full_shape and v.dim() > 0 else v.clone()
    return mine, states
