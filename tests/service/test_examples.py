"""The demo's job specs: the YAML in examples/demo is what `tessera demo` submits, and it parses as users see it."""

from __future__ import annotations

from pathlib import Path

from conftest import EXAMPLES

from tessera.commands.demo import demo_jobs
from tessera.jobs import load_job, parse_job


def test_demo_specs_match_the_demo_and_resolve_their_files():
    files = sorted((EXAMPLES / "demo").glob("*.yaml"))
    by_name = {load_job(f).name: load_job(f) for f in files}
    expected = {j["name"]: parse_job(j) for j in demo_jobs(str(EXAMPLES / "data" / "corpus.txt"))}
    assert set(by_name) == set(expected)
    for name, spec in by_name.items():
        want = expected[name]
        if spec.data:
            assert Path(spec.data).is_file() and Path(spec.data).resolve() == Path(want.data).resolve()
        if spec.entrypoint:
            src = spec.entrypoint.rpartition(":")[0]
            assert (
                Path(src).is_file()
                and Path(src).resolve() == Path(want.entrypoint.rpartition(":")[0]).resolve()
            )
        strip = {"data": None, "entrypoint": None}
        assert spec.model_copy(update=strip) == want.model_copy(update=strip)
        assert not {"gpus", "num_gpus", "devices"} & set(spec.model_dump())  # never a GPU assignment
