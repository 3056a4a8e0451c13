"""Where a Hugging Face model lives on this machine, and reading/writing its safetensors one tensor at a time.

A model is named by a directory as ``save_pretrained`` writes it (``config.json`` + ``*.safetensors``), by its
``config.json``, or by a repository id already in the local Hugging Face cache (``$HF_HUB_CACHE``, else
``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``). Nothing is downloaded: a model that is not there is one
:class:`HFModelNotFound` naming every place looked at.

Reading goes through ``safetensors.safe_open`` key by key, so a pipeline stage reads only its own layers'
tensors (never the whole checkpoint), and a tensor-parallel build of a layer only its slices of them (``get_slice``: the
rows or columns of its heads, FFN columns or vocabulary). What is read can be watched, for tests, inside
:func:`recording_reads` (nothing is kept outside it, so a long-lived worker accumulates nothing).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import torch

# A part of a tensor: (dim, ranges) -> the concatenation along ``dim`` of its ``[start, stop)`` ranges.
Part = tuple[int, tuple[tuple[int, int], ...]]
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


_RECORDERS: list[list[tuple[str, tuple[int, ...]]]] = []  # the open recording_reads() lists, innermost last


@contextmanager
def recording_reads() -> Iterator[list[tuple[str, tuple[int, ...]]]]:
    """A list that receives ``(key, shape of what was read)`` — a slice's shape, or the whole tensor's — for
    every tensor :func:`read_tensors` reads in this process while the block runs, in order (nested blocks each
    see their reads)."""
    reads: list[tuple[str, tuple[int, ...]]] = []
    _RECORDERS.append(reads)
    try:
        yield reads
    finally:
        _RECORDERS[:] = [r for r in _RECORDERS if r is not reads]  # by identity: empty lists compare equal


class HFModelNotFound(FileNotFoundError):
    """No model directory, config.json or cached repository under the given name (says where it looked)."""


def hub_cache() -> Path:
    """The Hugging Face hub cache as the environment names it now (read at call time, not import time)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _cached_snapshot(repo_id: str, cache: Path) -> Path | None:
    """``models--org--name/snapshots/<rev>`` of ``repo_id`` (the revision ``refs/main`` names, else the newest)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not _is_dir(snapshots):
        return None
    ref = repo / "refs" / "main"
    if _is_file(ref):
        candidate = snapshots / ref.read_text().strip()
        if _is_file(candidate / "config.json"):
            return candidate
    found = sorted(
        (p for p in snapshots.iterdir() if _is_file(p / "config.json")), key=lambda p: p.stat().st_mtime
    )
    return found[-1] if found else None


def locate_model(source: str | os.PathLike[str]) -> Path:
    """The local directory holding ``config.json`` of the model ``source`` names (no download)."""
    text = str(source)
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # "~nobody/…": no such user's home; the name as written
        path = Path(text)
    if _is_file(path) and path.name == "config.json":
        return path.parent
    if _is_dir(path):
        if _is_file(path / "config.json"):
            return path
        raise HFModelNotFound(f"model: {path} is a directory without config.json (not a Hugging Face model)")
    cache = hub_cache()
    if _REPO_ID.match(text):
        snap = _cached_snapshot(text, cache)
        if snap is not None:
            return snap
    raise HFModelNotFound(
        f"model: {text!r} is neither a model directory (looked at {os.path.abspath(path)}) nor a repository in the "
        f"local Hugging Face cache (looked in {cache}); nothing is downloaded: `save_pretrained` it to a "
        "directory or fetch it into the cache first"
    )


def is_hf_model(source: str) -> bool:
    """Whether ``source`` names a Hugging Face model this machine holds (directory, config.json or cache)."""
    try:
        locate_model(source)
    except (HFModelNotFound, OSError, ValueError):  # also names no file system could hold (NUL, too long)
        return False
    return True


def weight_map(model_dir: Path) -> dict[str, Path]:
    """Tensor key -> the safetensors file holding it (from the shard index, else each file's header)."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        mapping = json.loads(index.read_text())["weight_map"]
        return {k: model_dir / f for k, f in mapping.items()}
    from safetensors import safe_open

    out: dict[str, Path] = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(f), framework="pt", device="cpu") as handle:
            for k in handle.keys():  # noqa: SIM118 (safe_open is not a Mapping)
                out[k] = f
    return out


def read_tensors(
    model_dir: Path, keys: Iterable[str], parts: Mapping[str, Part] | None = None
) -> dict[str, torch.Tensor]:
    """The tensors ``keys`` only, each read on its own through ``safe_open`` (no file is loaded whole); a key in
    ``parts`` is read as that part only (its slices, concatenated), never whole."""
    from safetensors import safe_open

    wanted = list(keys)
    where = weight_map(model_dir)
    if not where:
        raise HFModelNotFound(
            f"model: {model_dir} holds no *.safetensors weights (use from_scratch for none)"
        )
    missing = [k for k in wanted if k not in where]
    if missing:
        raise KeyError(f"model: {model_dir}: weights {missing[:4]} are not in its safetensors files")
    by_file: dict[Path, list[str]] = {}
    for k in wanted:
        by_file.setdefault(where[k], []).append(k)
    out: dict[str, torch.Tensor] = {}
    for f, names in by_file.items():
        with safe_open(str(f), framework="pt", device="cpu") as handle:
            for k in names:
                out[k] = _read_part(handle, k, parts[k]) if parts and k in parts else handle.get_tensor(k)
                for reads in _RECORDERS:
                    reads.append((k, tuple(out[k].shape)))
    return out


def _read_part(handle: object, key: str, part: Part) -> torch.Tensor:
    dim, ranges = part
    sl = handle.get_slice(key)  # type: ignore[attr-defined]
    rank = len(sl.get_shape())
    if not 0 <= dim < rank or not ranges:
        raise ValueError(f"model: part (dim {dim}, ranges {ranges}) of {key} (shape {sl.get_shape()})")
    lead = (slice(None),) * dim
    return torch.cat([sl[(*lead, slice(a, b))] for a, b in ranges], dim=dim)


def has_key(model_dir: Path, key: str) -> bool:
    return key in weight_map(model_dir)


def write_safetensors(out_dir: Path, tensors: Mapping[str, torch.Tensor]) -> Path:
    """One ``model.safetensors`` with ``tensors`` (contiguous copies), as ``save_pretrained`` names it."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "model.safetensors"
    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(path), {"format": "pt"})
    return path
