"""Checkpoints any plan can resume: full (unsharded) state keyed by model-layer FQN, written atomically.

Each rank writes only what it authoritatively holds — its parameter shards (replica 0) and optimizer-state
shards (replica 0, or the owner under ZeRO) — with their ``ShardSpec``; the reader assembles full tensors and
each rank of the *new* plan slices out its own pieces. So a job saved under 2-way DP resumes under a 2-stage
pipeline, uneven TP, or another device count, like DCP's full state dict but without a collective on save.

Atomicity: everything is written into ``.tmp-step-N``, fsynced, and renamed to ``step-N`` by rank 0 only
after every rank's file is durable; ``latest`` is replaced atomically last. A crash at any point leaves the
previous checkpoint complete and ``latest`` pointing at it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from tessera.runtime.shards import ShardSpec, assemble

CKPT_VERSION = 1


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


def _encode(pieces: Iterable[tuple[str, ShardSpec, torch.Tensor]]) -> list[tuple]:
    return [(fqn, list(s.full_shape), s.dim, [list(r) for r in s.ranges], t) for fqn, s, t in pieces]


def _decode(rows: list[tuple]) -> list[tuple[str, ShardSpec, torch.Tensor]]:
    return [
        (fqn, ShardSpec(tuple(shape), dim, tuple(tuple(r) for r in ranges)), t)
        for fqn, shape, dim, ranges, t in rows
    ]


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def save(
    root: str | Path,
    step: int,
    rank: int,
    params: list[tuple[str, ShardSpec, torch.Tensor]],
    optim: list[tuple[str, ShardSpec, torch.Tensor]],
    meta: dict[str, Any],
) -> Path:
    """Collective over the default group: every rank calls it with its own pieces."""
    root = Path(root)
    tmp = root / f".tmp-step-{step:08d}"
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
    dist.barrier()
    payload = {
        "params": _encode(params),
        "optim": _encode(optim),
        "rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    path = tmp / f"rank{rank:05d}.pt"
    with open(path, "wb") as f:
        torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())
    dist.barrier()
    final = step_dir(root, step)
    if rank == 0:
        body = {"version": CKPT_VERSION, "step": step, "world_size": dist.get_world_size(), **meta}
        _write_atomic(tmp / "meta.json", json.dumps(body, indent=2).encode())
        _fsync_dir(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(root)
        _write_atomic(root / "latest", final.name.encode())
    dist.barrier()
    return final


@dataclass(frozen=True)
class Checkpoint:
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


def load(path: str | Path) -> Checkpoint:
    path = resolve(path)
    meta = json.loads((path / "meta.json").read_text())
    if meta.get("version") != CKPT_VERSION:
        raise ValueError(f"checkpoint {path}: version {meta.get('version')} is not {CKPT_VERSION}")
    params: list = []
    optim: list = []
    rng: dict[int, torch.Tensor] = {}
    for f in sorted(path.glob("rank*.pt")):
        payload = torch.load(f, map_location="cpu", weights_only=True)
        params += _decode(payload["params"])
        optim += _decode(payload["optim"])
        rng[int(f.stem[4:])] = payload["rng"]
    return Checkpoint(path, meta, assemble(params), assemble(optim) if optim else {}, rng)
