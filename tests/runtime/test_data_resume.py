"""A run on a tokenized dataset interrupted and resumed — on the same Plan and on another — continues on
exactly the batches (and so the losses) of an uninterrupted run; a resume on other data is refused unless
forced. One spawned 2-process group runs every job in turn (gloo, tiny GPT)."""

from __future__ import annotations

import json

import pytest
from helpers import plan, stage
from models import factory, n_layers

from tessera.runtime import LaunchError, RunOptions, launch_many
from tessera.runtime.dataset import TokenizedData

STEPS, CUT = 6, 3


def _data(tmp_path, name: str, seed: int = 5) -> TokenizedData:
    return TokenizedData(
        path=str(tmp_path / name),
        tokenizer="bytes",
        val_samples=6,
        val_every_steps=3,
        cache_dir=str(tmp_path / "c"),
        seed=seed,
    )


@pytest.mark.timeout(300)
def test_resume_on_another_plan_sees_the_same_batches(tmp_path):
    rows = [{"text": f"row {i}: " + "abcdefghij"[i % 10] * (5 + i % 13)} for i in range(300)]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps({"text": r["text"][::-1]}) for r in rows))
    n = n_layers("gpt-tiny")
    dp = plan("gpt-tiny", [stage(0, n, [0, 1], dp=2, shares=(5, 3))], micro=2)
    pp = plan("gpt-tiny", [stage(0, 2, [0]), stage(2, n, [1])], micro=2)
    ck, ck_other = tmp_path / "ck", tmp_path / "ck2"
    base = dict(
        model=factory("gpt-tiny"), data=_data(tmp_path, "a.jsonl"), warmup_steps=2, lr_schedule="cosine",
        grad_clip_norm=1.0, pg_timeout_s=60, watchdog_s=120,
    )  # fmt: skip
    full, first, resumed, forced = launch_many(
        [
            (dp, RunOptions(steps=STEPS, **base)),
            (dp, RunOptions(steps=CUT, checkpoint_dir=str(ck), **base)),
            (pp, RunOptions(steps=STEPS, resume_from=str(ck), checkpoint_dir=str(ck_other), **base)),
            # other data, forced: it runs (and starts from the checkpoint's step)
            (pp, RunOptions(steps=CUT + 1, resume_from=str(ck), force_data_change=True, **{**base, "data": _data(tmp_path, "b.jsonl")})),
        ]
    )  # fmt: skip
    losses = [r.loss for r in first.records] + [r.loss for r in resumed.records]
    assert len(losses) == STEPS and resumed.records[0].step == CUT
    for a, b in zip(losses, full.losses, strict=True):
        assert abs(a - b) <= 1e-5 * abs(b), (losses, full.losses)
    vals = {r.step: r.val_loss for r in full.records if r.val_loss is not None}
    assert sorted(vals) == [2, 5]  # after steps 3 and 6
    assert abs(resumed.records[-1].val_loss - vals[5]) <= 1e-5 * vals[5]
    assert [r.step for r in forced.records] == [CUT]
    meta = json.loads((ck / "step-00000003" / "meta.json").read_text())
    assert meta["data"]["kind"] == "dataset" and meta["data"]["source"].endswith("a.jsonl")

    with pytest.raises(LaunchError, match="force_data_change"):
        launch_many(
            [
                (
                    pp,
                    RunOptions(
                        steps=STEPS, resume_from=str(ck), **{**base, "data": _data(tmp_path, "b.jsonl")}
                    ),
                )
            ]
        )
