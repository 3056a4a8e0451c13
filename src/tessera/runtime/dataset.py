"""A local dataset as training data: read through ``datasets``, tokenized once, packed, shuffled by seed.

Why it is built this way:

- **Tokenized once, cached on disk.** All documents are tokenized into one flat array of ids (each document
  followed by the tokenizer's end-of-sequence id, when it has one) and saved as ``.npy`` under the cache
  directory, keyed by the data files' *content* hash, the format, the text field and the tokenizer's files.
  A rank that finds the array memory-maps it; ranks on one node that start together wait on a file lock
  while one of them tokenizes. Content hashes are memoized by (path, size, mtime), so a run re-reads no file
  it has already hashed.
- **Packed into fixed-length sequences.** Sequence ``j`` is ids ``[j·L, (j+1)·L]`` (inputs the first ``L``,
  targets the last ``L``), so no token is padding and none is dropped but the tail.
- **A held-out validation split** of sequences chosen by a fixed permutation (independent of the job's seed,
  so runs with different seeds validate on the same sequences).
- **The batch of step k is a pure function of (seed, k).** Sample ``i`` of step ``k`` is training sequence
  ``perm_e[(k·B + i) mod N]`` of epoch ``e = (k·B + i) // N``, where ``perm_e`` is a permutation seeded by
  (seed, e). A resumed run — on any other Plan — therefore sees exactly the batches an uninterrupted one sees,
  and the data position a checkpoint needs is just its step.
- **An identity for checkpoints.** :meth:`TokenizedData.identity` names the content, field, tokenizer and
  split (not the path: the same files elsewhere are the same data), so resuming on other data is caught.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

FORMAT_VERSION = 1  # of the cached token arrays: bump when tokenization changes
_SUFFIX_FORMAT = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".txt": "text", ".text": "text"}
_BUILDER = {"jsonl": "json", "json": "json", "parquet": "parquet", "text": "text"}
# Files of a tokenizer directory that define it (a model directory's weights are never hashed).
_TOKENIZER_FILES = (
    "tokenizer",
    "special_tokens_map",
    "vocab",
    "merges",
    "added_tokens",
    "spiece",
    "chat_template",
)
_EOS_NAMES = ("</s>", "<|endoftext|>", "<eos>", "<|eos|>", "[SEP]", "<|im_end|>")
_SPLIT_SEED = 0x7E55E4A  # the validation split's permutation: fixed, so every seed validates on the same data


class DataError(ValueError):
    """Bad data configuration or content; the message names the ``data.*`` field."""


def default_cache_dir() -> Path:
    home = os.environ.get("TESSERA_HOME")
    return (Path(home) if home else Path.home() / ".cache" / "tessera") / "datasets"


def tokenizer_of_model(model: str | None) -> str | None:
    """The tokenizer a Hugging Face model directory (or the folder of its ``config.json``) carries, if any."""
    if not model:
        return None
    p = Path(model)
    with contextlib.suppress(OSError):
        folder = p if p.is_dir() else (p.parent if p.name == "config.json" and p.is_file() else None)
        if folder is not None and any(
            (folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")
        ):
            return str(folder)
    return None


@dataclass(frozen=True)
class TokenizedData:
    """The runtime side of a job spec's ``data:`` mapping (the same field names; plus the job's ``seed``)."""

    path: str
    format: str = "auto"  # auto | jsonl | json | parquet | text | arrow (save_to_disk)
    text_field: str = "text"
    tokenizer: str | None = None  # a tokenizer directory or tokenizer.json, or "bytes"
    val_fraction: float = 0.0
    val_samples: int | None = None
    val_every_steps: int | None = None
    cache_dir: str | None = None
    seed: int = 0

    # ------------------------------------------------------------------ public
    def check(self) -> None:
        """Cheap checks before any process starts: the files and the tokenizer exist."""
        self._files()
        self._tokenizer_path()

    def batch(self, model: torch.nn.Module, step: int, batch_size: int, seq_len: int):
        """(inputs, targets) of ``step``: ``batch_size`` training sequences of ``seq_len`` tokens."""
        _check_vocab(self, model)
        return self._rows(self.train_rows(step, batch_size, seq_len), seq_len)

    def train_rows(self, step: int, batch_size: int, seq_len: int) -> list[int]:
        """The packed-sequence indices of ``step``'s batch (a pure function of the seed and the step)."""
        train = self._split(seq_len).train
        n = len(train)
        rows = []
        for i in range(batch_size):
            j = step * batch_size + i
            rows.append(int(train[_epoch_perm(self.seed, j // n, n)[j % n]]))
        return rows

    def sequence_count(self, seq_len: int) -> int:
        """Packed sequences of ``seq_len`` tokens in the whole dataset (training and validation split), from
        the tokenized cache — tokenized now and cached if it is not yet, so a planner that asks first saves
        the runtime the work. What ``data.val_fraction`` is a fraction of."""
        return (len(_load_tokens(self)[0]) - 1) // seq_len

    def val_batch_count(self, batch_size: int, seq_len: int) -> int:
        """Full batches of the validation split (at least one when it has any sequence); 0: no validation."""
        n = len(self._split(seq_len).val)
        return 0 if n == 0 else max(1, n // batch_size)

    def val_batch(self, index: int, batch_size: int, seq_len: int):
        val = self._split(seq_len).val
        return self._rows([val[(index * batch_size + i) % len(val)] for i in range(batch_size)], seq_len)

    def val_every(self, total_steps: int) -> int:
        return self.val_every_steps or max(1, total_steps // 10)

    def identity(self) -> dict[str, Any]:
        """What the data *is* (content, field, tokenizer, split), for the checkpoint: not where it lies."""
        return {
            "kind": "dataset",
            "content": self._content_key(),
            "val_fraction": self.val_fraction,
            "val_samples": self.val_samples,
            "source": self.path,
        }

    def vocab_size(self) -> int:
        return int(_load_tokens(self)[1])

    # ------------------------------------------------------------------ files
    def _files(self) -> tuple[str, list[Path]]:
        """(format, data files) — an arrow directory's files are every file under it."""
        p = Path(self.path)
        if not _exists(p):
            raise DataError(f"data.path: no such file or directory {self.path!r}")
        if p.is_dir() and (self.format == "arrow" or _is_saved_dataset(p)):
            return "arrow", sorted(f for f in p.rglob("*") if f.is_file())
        if self.format == "arrow":
            raise DataError(f"data.format: {self.path!r} is not a directory written by save_to_disk")
        files = (
            sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in _SUFFIX_FORMAT)
            if p.is_dir()
            else [p]
        )
        if not files:
            raise DataError(f"data.path: no .jsonl, .json, .parquet or .txt files under {self.path!r}")
        if self.format != "auto":
            return self.format, files
        kinds = {_SUFFIX_FORMAT.get(f.suffix) for f in files}
        if len(kinds) != 1 or None in kinds:
            raise DataError(
                f"data.format: cannot tell the format of {self.path!r} from its file suffixes "
                f"({', '.join(sorted({f.suffix or '(none)' for f in files}))}); set jsonl, parquet or text"
            )
        return kinds.pop(), files  # type: ignore[return-value]

    def _tokenizer_path(self) -> str:
        tok = self.tokenizer
        if tok is None:
            raise DataError(
                "data.tokenizer: the data needs a tokenizer and none was given (the model is not a Hugging "
                "Face directory with one): name a tokenizer directory or tokenizer.json, or `bytes`"
            )
        if tok != "bytes" and not _exists(Path(tok)):
            raise DataError(f"data.tokenizer: no such tokenizer file or directory {tok!r}")
        return tok

    def _cache_root(self) -> Path:
        root = Path(self.cache_dir) if self.cache_dir else default_cache_dir()
        root.mkdir(parents=True, exist_ok=True)
        return root

    def _content_key(self) -> str:
        return _content_key_of(self)

    def _compute_content_key(self) -> str:
        fmt, files = self._files()
        base = Path(self.path)
        root = base if base.is_dir() else base.parent
        hashes = _file_hashes(self._cache_root(), tuple(files))
        tok = self._tokenizer_path()
        body = {
            "version": FORMAT_VERSION,
            "format": fmt,
            "field": self.text_field,
            # a single file's name is not part of what it is; a directory's layout is
            "files": [
                ["" if base.is_file() else str(f.relative_to(root)), h]
                for f, h in zip(files, hashes, strict=True)
            ],
            "tokenizer": "bytes" if tok == "bytes" else _tokenizer_hash(self._cache_root(), tok),
        }
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32]

    # ------------------------------------------------------------------ batches
    def _split(self, seq_len: int) -> _Split:
        return _split_of(self, seq_len)

    def _rows(self, rows: list[int], seq_len: int):
        tokens = _load_tokens(self)[0]
        out = np.stack([tokens[r * seq_len : r * seq_len + seq_len + 1] for r in rows]).astype(np.int64)
        t = torch.from_numpy(out)
        return t[:, :-1].contiguous(), t[:, 1:].contiguous()


def _model_vocab(model: Any) -> int | None:
    """The vocabulary of a zoo stage (``arch.vocab``), a Hugging Face adapter (``vocab``) or module (config)."""
    for v in (
        getattr(getattr(model, "arch", None), "vocab", None),
        getattr(model, "vocab", None),
        getattr(getattr(model, "config", None), "vocab_size", None),
    ):
        if isinstance(v, int):
            return v
    return None


def _check_vocab(data: TokenizedData, model: Any) -> None:
    """A token id the model's embedding cannot look up is one clear error, not an IndexError deep inside."""
    vocab = _model_vocab(model)
    if vocab is None:
        return
    top = _max_id(data)
    if top >= vocab:
        raise DataError(
            f"data.tokenizer: the data holds token id {top}, but the model's vocabulary has {vocab} entries "
            f"(tokenizer {data.tokenizer!r}: use the model's own tokenizer)"
        )


@lru_cache(maxsize=16)
def _max_id(data: TokenizedData) -> int:
    tokens = _load_tokens(data)[0]
    return int(tokens.max()) if len(tokens) else -1


@lru_cache(maxsize=16)
def _content_key_of(data: TokenizedData) -> str:
    """Once per process: the files are hashed (or their memoized hashes read) on the first use only."""
    return data._compute_content_key()


def _exists(p: Path) -> bool:
    """``Path.exists`` that answers False, not an error, for a name no file system holds (NUL, too long)."""
    try:
        return p.exists()
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class _Split:
    train: np.ndarray  # sequence indices, ascending
    val: np.ndarray


@lru_cache(maxsize=8)
def _split_of(data: TokenizedData, seq_len: int) -> _Split:
    tokens = _load_tokens(data)[0]
    n = (len(tokens) - 1) // seq_len
    if n < 1:
        raise DataError(f"data.path: {len(tokens)} tokens make no sequence of seq_len + 1 = {seq_len + 1}")
    n_val = data.val_samples if data.val_samples is not None else int(round(data.val_fraction * n))
    if data.val_fraction > 0 and n_val == 0:
        n_val = 1
    if n_val >= n:
        raise DataError(
            f"data.val_samples: {n_val} held-out sequences leave none to train on ({n} sequences of {seq_len})"
        )
    order = np.random.Generator(np.random.PCG64(_SPLIT_SEED)).permutation(n)
    return _Split(train=np.sort(order[n_val:]), val=np.sort(order[:n_val]))


@lru_cache(maxsize=4)
def _epoch_perm(seed: int, epoch: int, n: int) -> np.ndarray:
    return np.random.Generator(np.random.PCG64([seed % 2**63, epoch])).permutation(n)


# ---------------------------------------------------------------------- hashing
def _is_saved_dataset(p: Path) -> bool:
    return (
        (p / "dataset_info.json").is_file()
        or (p / "state.json").is_file()
        or (p / "dataset_dict.json").is_file()
    )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _file_hashes(cache: Path, files: tuple[Path, ...]) -> list[str]:
    """Content hashes, memoized in ``hashes.json`` by (path, size, mtime_ns)."""
    memo_path = cache / "hashes.json"
    with _locked(cache / "hashes.lock"):
        try:
            memo = json.loads(memo_path.read_text())
        except (OSError, ValueError):
            memo = {}
        out, changed = [], False
        for f in files:
            st = f.stat()
            key = f"{f.resolve()}|{st.st_size}|{st.st_mtime_ns}"
            if key not in memo:
                memo[key] = _sha256(f)
                changed = True
            out.append(memo[key])
        if changed:
            tmp = memo_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(memo))
            os.replace(tmp, memo_path)
    return out


def _tokenizer_hash(cache: Path, tok: str) -> str:
    p = Path(tok)
    files = (
        [p]
        if p.is_file()
        else sorted(f for f in p.iterdir() if f.is_file() and f.name.startswith(_TOKENIZER_FILES))
    )
    if not files:
        raise DataError(
            f"data.tokenizer: {tok!r} holds no tokenizer files (tokenizer.json, tokenizer_config.json)"
        )
    hashes = _file_hashes(cache, tuple(files))
    return hashlib.sha256(
        json.dumps([[f.name, h] for f, h in zip(files, hashes, strict=True)]).encode()
    ).hexdigest()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# ---------------------------------------------------------------------- tokenizing
_TOKENS: dict[tuple[str, str], tuple[np.ndarray, int]] = {}


def _load_tokens(data: TokenizedData) -> tuple[np.ndarray, int]:
    """(flat token ids, vocabulary size): from the disk cache, else tokenized now and cached."""
    key = data._content_key()
    cache = data._cache_root()
    mem_key = (str(cache), key)
    if mem_key in _TOKENS:
        return _TOKENS[mem_key]
    npy, meta = cache / f"{key}.npy", cache / f"{key}.json"
    with _locked(cache / f"{key}.lock"):
        if not (npy.is_file() and meta.is_file()):
            ids, vocab = _tokenize(data)
            tmp = cache / f".{key}.{os.getpid()}.npy"
            np.save(tmp, ids)
            os.replace(tmp, npy)
            meta.write_text(json.dumps({"vocab_size": vocab, "tokens": len(ids), "path": data.path}))
    tokens = np.load(npy, mmap_mode="r")
    vocab = int(json.loads(meta.read_text())["vocab_size"])
    _TOKENS[mem_key] = (tokens, vocab)
    return tokens, vocab


def _texts(data: TokenizedData) -> Iterator[list[str]]:
    """The text field, a chunk of documents at a time, through ``datasets`` (offline, local files only)."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets

    datasets.disable_progress_bars()
    fmt, files = data._files()
    if fmt == "arrow":
        ds: Any = datasets.load_from_disk(data.path)
        if isinstance(ds, datasets.DatasetDict):
            if "train" not in ds:
                raise DataError(f"data.path: {data.path!r} has splits {sorted(ds)}, none named 'train'")
            ds = ds["train"]
    else:
        kwargs = {"sample_by": "document"} if fmt == "text" else {}
        ds = datasets.load_dataset(
            _BUILDER[fmt],
            data_files=[str(f) for f in files],
            split="train",
            cache_dir=str(data._cache_root() / "hf"),
            **kwargs,
        )
    if data.text_field not in ds.column_names:
        raise DataError(
            f"data.text_field: no column {data.text_field!r} in {data.path!r} (columns: {', '.join(ds.column_names)})"
        )
    for start in range(0, len(ds), 1000):
        chunk = ds[start : start + 1000][data.text_field]
        yield ["" if t is None else str(t) for t in chunk]


def _tokenize(data: TokenizedData) -> tuple[np.ndarray, int]:
    tok = data._tokenizer_path()
    parts: list[np.ndarray] = []
    if tok == "bytes":
        vocab = 256
        for texts in _texts(data):
            parts += [np.frombuffer(t.encode(), dtype=np.uint8).astype(np.int32) for t in texts]
    else:
        encode, eos, vocab = _encoder(tok)
        for texts in _texts(data):
            for ids in encode(texts):
                parts.append(np.asarray(ids + ([eos] if eos is not None else []), dtype=np.int32))
    ids = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    if ids.size and int(ids.max()) >= vocab:
        vocab = int(ids.max()) + 1
    return ids, vocab


def _encoder(tok: str):
    """(batch encode, end-of-sequence id or None, vocabulary size) for a tokenizer directory or file."""
    p = Path(tok)
    if p.is_dir():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoTokenizer

        try:
            t = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
        except (OSError, ValueError) as e:
            raise DataError(f"data.tokenizer: cannot load a tokenizer from {tok!r}: {e}") from None
        eos = t.eos_token_id
        return (lambda texts: t(texts, add_special_tokens=True)["input_ids"]), eos, len(t)
    from tokenizers import Tokenizer

    try:
        t = Tokenizer.from_file(str(p))
    except Exception as e:  # noqa: BLE001 - the library raises a bare Exception on a bad file
        raise DataError(f"data.tokenizer: cannot read {tok!r} as tokenizer.json: {e}") from None
    eos = next((t.token_to_id(n) for n in _EOS_NAMES if t.token_to_id(n) is not None), None)
    return (
        (lambda texts: [e.ids for e in t.encode_batch(texts)]),
        eos,
        t.get_vocab_size(with_added_tokens=True),
    )
