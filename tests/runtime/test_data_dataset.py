"""Tokenized local datasets: formats, the on-disk cache, the pure (seed, step) batches, the split, errors."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from tessera.runtime import dataset
from tessera.runtime.data import SyntheticData, TextData, data_source, same_data
from tessera.runtime.dataset import DataError, TokenizedData, tokenizer_of_model

TEXTS = [f"document {i}: the quick brown fox jumps over {i % 7} lazy dogs" for i in range(120)]


def make_tokenizer(folder):
    """A tiny BPE tokenizer trained here (nothing downloaded): tokenizer.json and a save_pretrained dir."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "</s>"]))
    tok.save(str(folder / "tokenizer.json"))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", unk_token="<unk>").save_pretrained(
        str(folder / "tokdir")
    )
    return folder / "tokenizer.json", folder / "tokdir"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    import datasets

    root = tmp_path_factory.mktemp("data")
    (root / "d.jsonl").write_text("\n".join(json.dumps({"text": t, "n": i}) for i, t in enumerate(TEXTS)))
    datasets.Dataset.from_list([{"body": t} for t in TEXTS]).to_parquet(str(root / "d.parquet"))
    datasets.Dataset.from_list([{"body": t} for t in TEXTS]).save_to_disk(str(root / "saved"))
    (root / "txt").mkdir()
    for i in range(3):
        (root / "txt" / f"{i}.txt").write_text("\n".join(TEXTS[i::3]))
    tok_json, tok_dir = make_tokenizer(root)
    return {"root": root, "tok_json": str(tok_json), "tok_dir": str(tok_dir)}


def data(files, tmp_path, **kw) -> TokenizedData:
    kw.setdefault("path", str(files["root"] / "d.jsonl"))
    kw.setdefault("tokenizer", files["tok_json"])
    return TokenizedData(cache_dir=str(tmp_path / "cache"), **kw)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"tokenizer": "tok_dir"},
        {"path": "d.parquet", "text_field": "body"},
        {"path": "saved", "text_field": "body", "tokenizer": "tok_dir"},
        {"path": "txt", "tokenizer": "bytes"},
    ],
    ids=["jsonl+tokenizer.json", "jsonl+tokenizer-dir", "parquet", "save_to_disk", "text-dir+bytes"],
)
def test_formats_give_packed_shifted_batches(files, tmp_path, kw):
    kw = dict(kw)
    if "path" in kw:
        kw["path"] = str(files["root"] / kw["path"])
    if kw.get("tokenizer") == "tok_dir":
        kw["tokenizer"] = files["tok_dir"]
    d = data(files, tmp_path, **kw)
    x, y = d.batch(None, 3, 4, 16)
    assert x.shape == y.shape == (4, 16) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the next tokens
    assert int(x.max()) < d.vocab_size()


@pytest.mark.timeout(120)
def test_tokenized_once_and_cached(files, tmp_path, monkeypatch):
    d = data(files, tmp_path)
    first = d.batch(None, 0, 2, 8)
    dataset._TOKENS.clear()  # a new process: only the disk cache is left
    monkeypatch.setattr(dataset, "_tokenize", lambda _d: pytest.fail("tokenized again"))
    again = TokenizedData(**{**d.__dict__}).batch(None, 0, 2, 8)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))


@pytest.mark.timeout(120)
def test_batches_are_a_pure_function_of_seed_and_step(files, tmp_path):
    d = data(files, tmp_path, seed=7, val_fraction=0.1)
    seq, batch = 8, 3
    split = d._split(seq)
    n = len(split.train)
    # one epoch covers every training sequence once, in an order set by the seed
    seen = [r for k in range(-(-n // batch)) for r in d.train_rows(k, batch, seq)][:n]
    assert sorted(seen) == split.train.tolist() and seen != split.train.tolist()
    tokens = torch.from_numpy(np.asarray(dataset._load_tokens(d)[0], dtype=np.int64))
    x, y = d.batch(None, 2, batch, seq)
    for row, r in zip(x, d.train_rows(2, batch, seq), strict=True):
        assert torch.equal(row, tokens[r * seq : r * seq + seq])
    # the same step from a fresh object (another rank, a resumed run) is the same batch; another seed is not
    assert torch.equal(
        d.batch(None, 5, batch, seq)[0], TokenizedData(**d.__dict__).batch(None, 5, batch, seq)[0]
    )
    other = TokenizedData(**{**d.__dict__, "seed": 8})
    assert not torch.equal(d.batch(None, 0, batch, seq)[0], other.batch(None, 0, batch, seq)[0])


@pytest.mark.timeout(120)
def test_validation_split_is_held_out(files, tmp_path):
    d = data(files, tmp_path, val_samples=5)
    split = d._split(8)
    assert len(split.val) == 5 and not set(split.val) & set(split.train)
    assert d.val_batch_count(2, 8) == 2 and d.val_batch_count(8, 8) == 1
    assert data(files, tmp_path).val_batch_count(2, 8) == 0  # no split asked for: no validation
    # the split does not depend on the job's seed: every run validates on the same sequences
    assert np.array_equal(TokenizedData(**{**d.__dict__, "seed": 3})._split(8).val, split.val)
    with pytest.raises(DataError, match="data.val_samples"):
        data(files, tmp_path, val_samples=10**6)._split(8)


@pytest.mark.timeout(120)
def test_identity_is_content_not_path(files, tmp_path):
    d = data(files, tmp_path)
    copy = tmp_path / "elsewhere.jsonl"
    shutil.copy(files["root"] / "d.jsonl", copy)
    moved = data(files, tmp_path, path=str(copy))
    assert same_data(d.identity(), moved.identity())
    changed = tmp_path / "changed.jsonl"
    changed.write_text(json.dumps({"text": "something else entirely"}))
    assert not same_data(d.identity(), data(files, tmp_path, path=str(changed)).identity())
    assert not same_data(d.identity(), data(files, tmp_path, val_samples=3).identity())  # another split
    assert not same_data(d.identity(), SyntheticData(0).identity())
    assert same_data(None, d.identity())  # a checkpoint from before identities existed


@pytest.mark.timeout(120)
def test_errors_name_the_field(files, tmp_path):
    with pytest.raises(DataError, match="data.path: no such"):
        data(files, tmp_path, path=str(tmp_path / "missing.jsonl")).check()
    with pytest.raises(DataError, match="data.tokenizer: the data needs a tokenizer"):
        data(files, tmp_path, tokenizer=None).check()
    with pytest.raises(DataError, match="data.text_field: no column 'body'"):
        data(files, tmp_path, text_field="body").batch(None, 0, 2, 8)
    with pytest.raises(DataError, match="data.format"):
        data(files, tmp_path, path=str(files["root"]), tokenizer="bytes").check()  # mixed suffixes


def test_model_directory_tokenizer_is_the_default(files, tmp_path):
    assert tokenizer_of_model(files["tok_dir"]) == files["tok_dir"]
    assert tokenizer_of_model("gpt-tiny") is None
    assert tokenizer_of_model(str(tmp_path)) is None
    cfg = {"path": str(files["root"] / "d.jsonl"), "cache_dir": str(tmp_path / "c")}
    d = data_source(cfg, seed=3, model=files["tok_dir"])  # a model folder carrying its tokenizer
    assert isinstance(d, TokenizedData) and d.tokenizer == files["tok_dir"] and d.seed == 3
    with pytest.raises(DataError, match="data.tokenizer"):
        data_source(cfg, seed=0, model="gpt-tiny").check()  # type: ignore[union-attr]
    assert isinstance(data_source("corpus.txt", seed=0), TextData) and data_source(None, seed=0) is None


def test_text_file_identity(tmp_path):
    f = tmp_path / "a.txt"
    f.write_bytes(b"hello world " * 10)
    ident = TextData(str(f)).identity()
    assert ident["kind"] == "text" and same_data(ident, TextData(str(f)).identity())
