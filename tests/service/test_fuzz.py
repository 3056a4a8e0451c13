"""Fuzz the HTTP API through its ASGI interface: a few hundred generated requests, never a server error.

Schemathesis reads the app's own ``/openapi.json`` and generates valid and invalid requests (paths, queries,
headers, bodies) for every operation; they go through the real FastAPI app of a real :class:`Service` (SQLite
store in a throwaway state dir, no scheduler: nothing is launched) in-process, so the run is quick and
reproducible (``derandomize``). A 5xx answer is a bug: the test collects every one with its request instead of
stopping at the first, and checks it really sent the requests it claims. ``bench/chaos.py`` runs the same kind
of fuzzing (≥ 1,000 requests) against a live server with an embedded Ray.
"""

from __future__ import annotations

import pytest

from tessera.service.config import ServiceConfig
from tessera.service.server import Service

schemathesis = pytest.importorskip("schemathesis")

EXAMPLES_PER_MODE = 12  # per operation and generation mode: ~200 requests over the API's operations
MIN_REQUESTS = 150


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    service = Service(
        ServiceConfig(cluster="local", state_dir=tmp_path_factory.mktemp("fuzz"), scheduler=False)
    )
    service.start()
    yield service.app()
    service.stop()


@pytest.mark.timeout(300)
def test_generated_requests_never_get_a_server_error(app):
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    ops = [r.ok() for r in schema.get_all_operations()]
    seen = {f"{op.method.upper()} {op.path}" for op in ops}
    assert {"POST /api/jobs", "GET /api/jobs/{job}", "POST /api/jobs/{job}/cancel"} <= seen
    sent: dict[str, int] = {}
    errors: list[str] = []
    for op in ops:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=op.as_strategy(generation_mode=mode))
            @settings(
                max_examples=EXAMPLES_PER_MODE,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def one(case) -> None:
                name = f"{case.method.upper()} {case.operation.path}"
                r = case.call()
                sent[name] = sent.get(name, 0) + 1
                if r.status_code >= 500:
                    errors.append(f"{name} {case.formatted_path} body={str(case.body)[:200]!r}: "
                                  f"{r.status_code} {r.text[:300]}")  # fmt: skip

            try:
                one()
            except Unsatisfiable:  # nothing invalid to generate (an operation without parameters)
                assert mode == GenerationMode.NEGATIVE
    total = sum(sent.values())
    print(f"{total} generated requests, {len(errors)} server errors: {sent}")
    assert total >= MIN_REQUESTS, f"only {total} requests were generated: {sent}"
    assert set(sent) == seen, f"operations never called: {seen - set(sent)}"
    assert not errors, f"{len(errors)} of {total} generated requests got a 5xx:\n" + "\n".join(errors[:10])
