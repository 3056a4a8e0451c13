"""The service's path for real data: a job spec's ``data:`` mapping and training fields reach the device worker
(without Ray: one rank in this process), its validation loss reaches the store, and a relaunch on other data
is refused."""

from __future__ import annotations

import json
import time

import pytest
from helpers import plan, stage
from models import n_layers

from tessera.jobs import parse_job
from tessera.service.device_worker import DeviceWorker, RunSpec, free_port
from tessera.service.store import Store, sqlite_url


def _spec(tmp_path, name: str):
    return parse_job(
        {
            "name": "data-job", "model": "gpt-tiny", "global_batch": 4, "seq_len": 16, "steps": 4,
            "precision": "fp32", "learning_rate": 1e-3, "warmup_steps": 2, "lr_schedule": "linear",
            "grad_clip_norm": 1.0,
            "data": {"path": str(tmp_path / name), "tokenizer": "bytes", "val_samples": 4, "val_every_steps": 2,
                     "cache_dir": str(tmp_path / "cache")},
        }
    )  # fmt: skip


def _run(tmp_path, spec, *, resume: bool) -> dict:
    n = n_layers("gpt-tiny")
    p = plan("gpt-tiny", [stage(0, n, [0])], batch=4, seq=16)
    run = RunSpec(
        job_id=1, attempt=0, total_steps=spec.total_steps, learning_rate=spec.learning_rate, seed=spec.seed,
        checkpoint_dir=str(tmp_path / "ck"), checkpoint_every=2, resume=resume, backend="gloo", pg_timeout_s=60,
        data_config=spec.data_options(), training=spec.training_options(), force_data_change=spec.force_data_change,
    )  # fmt: skip
    w = DeviceWorker(0, 1, "cpu")
    w.start(p.to_json(), run.__dict__, ("127.0.0.1", free_port()))
    deadline = time.time() + 120
    while (out := w.poll(0))["state"] == "running":
        assert time.time() < deadline
        time.sleep(0.2)
    return out


@pytest.mark.timeout(180)
def test_dataset_job_through_the_device_worker(tmp_path):
    rows = [{"text": f"line {i} " + "xyz" * (i % 9)} for i in range(200)]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps({"text": r["text"].upper()}) for r in rows))
    out = _run(tmp_path, _spec(tmp_path, "a.jsonl"), resume=False)
    assert out["state"] == "finished", out["error"]
    steps = [m for m in out["messages"] if m["kind"] == "step"]
    assert [m["val_loss"] is not None for m in steps] == [False, True, False, True]
    assert [m["learning_rate"] for m in steps] == [5e-4, 1e-3, 1e-3, 5e-4]
    assert all(m["grad_norm"] > 0 for m in steps)
    meta = json.loads((tmp_path / "ck" / "step-00000004" / "meta.json").read_text())
    assert meta["data"]["kind"] == "dataset" and meta["data"]["seq_len"] == 16

    # the store keeps the validation loss without a column of its own; the API's status reads the latest
    from tessera.runtime.telemetry import RankStep, merge

    store = Store(sqlite_url(tmp_path / "t.db"))
    rec, _ = store.submit(_spec(tmp_path, "a.jsonl"))
    fields = set(RankStep.__dataclass_fields__)
    records = [
        json.loads(merge([RankStep(**{k: v for k, v in m.items() if k in fields})], 4).to_json())
        for m in steps
    ]
    store.add_steps(rec.id, 0, records)
    assert [r["val_loss"] is not None for r in store.steps(rec.id)] == [False, True, False, True]
    assert store.last_val_loss(rec.id) == (3, steps[3]["val_loss"])

    # a relaunch of the job on other data is refused, naming the way out
    failed = _run(tmp_path, _spec(tmp_path, "b.jsonl").model_copy(update={"steps": 6}), resume=True)
    assert failed["state"] == "failed" and "force_data_change" in failed["error"]


def test_submission_checks_the_dataset(tmp_path):
    """The service refuses at submission a dataset whose files or tokenizer are missing, naming the field."""
    from tessera.service.model_source import ModelSourceError, check_data

    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "hello"}))
    base = {"model": "gpt-tiny", "global_batch": 2, "steps": 1}
    check_data(parse_job({**base, "data": {"path": str(tmp_path / "a.jsonl"), "tokenizer": "bytes"}}))
    for data, field in [
        ({"path": str(tmp_path / "missing.jsonl"), "tokenizer": "bytes"}, "data.path"),
        ({"path": str(tmp_path / "a.jsonl")}, "data.tokenizer"),  # gpt-tiny is no folder with a tokenizer
        ({"path": str(tmp_path / "a.jsonl"), "tokenizer": str(tmp_path / "nope")}, "data.tokenizer"),
    ]:
        with pytest.raises(ModelSourceError) as e:
            check_data(parse_job({**base, "data": data}))
        assert e.value.field == field
