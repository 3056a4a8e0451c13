"""Issue 18's security and input items against the real app (FastAPI's TestClient drives the real ASGI stack:
middleware, validation, the store on SQLite, the child process that checks user code)."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import EXAMPLES
from fastapi.testclient import TestClient

from tessera.service.config import ServiceConfig
from tessera.service.server import Service

TINY = {
    "name": "tiny",
    "model": "gpt-tiny",
    "global_batch": 8,
    "seq_len": 64,
    "steps": 20,
    "precision": "fp32",
}
JSON = {"content-type": "application/json"}

# A user model whose import records the PID that ran it (and, when asked, fails, hangs or eats memory).
MODEL = """
import os, pathlib, time
pathlib.Path(__file__).with_suffix(".pid").write_text(str(os.getpid()))
{extra}
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self, *, layer_range=None, tp=None, attention="flash", recompute="none"):
        super().__init__()
        start, end = layer_range or (0, 3)
        self.layers = nn.ModuleList([nn.Linear(8, 8) for i in range(3) if start <= i < end])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def loss(self, output, targets):
        return F.cross_entropy(output.float(), targets)

    def make_batch(self, batch_size, seq_len=1, *, device=None, generator=None):
        return torch.randn(batch_size, 8, generator=generator), torch.randint(0, 8, (batch_size,), generator=generator)
"""


def user_model(folder: Path, name: str, extra: str = "") -> Path:
    path = folder / f"{name}.py"
    path.write_text(MODEL.format(extra=textwrap.dedent(extra)))
    return path


def entry_job(path: Path, **more) -> dict:
    return {
        "name": path.stem,
        "model": "mine",
        "entrypoint": f"{path}:Net",
        "global_batch": 8,
        "steps": 5,
        **more,
    }


def make_client(tmp: Path, **config) -> tuple[Service, TestClient]:
    state = tmp / "state"
    service = Service(ServiceConfig(cluster="local", state_dir=state, scheduler=False, **config))
    service.start()  # API only: no Ray, but the scheduling adapter (dry-run, feasibility) is there
    client = TestClient(service.app())
    if service.config.token:
        client.headers["Authorization"] = f"Bearer {service.config.token}"
    return service, client


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """A folder the servers below allow (``allow_paths``), holding the user models."""
    return tmp_path_factory.mktemp("user-files")


@pytest.fixture(scope="module")
def local(tmp_path_factory, files):
    """A loopback server that reads files under ``files`` and the examples, with short user-code limits."""
    service, client = make_client(
        tmp_path_factory.mktemp("local"),
        allow_paths=(files, EXAMPLES),
        user_code_timeout_s=60.0,
        user_code_memory_bytes=3 << 30,
    )
    yield service, client
    service.stop()


def field_in(r, field: str) -> bool:
    body = r.json()
    return field in json.dumps(body.get("detail")) + body.get("message", "")


# --------------------------------------------------------------------------- 1. user code never runs here
@pytest.mark.timeout(300)
def test_user_code_runs_in_a_child_never_in_the_server(local, files):
    service, client = local
    path = user_model(files, "recorded")
    # (other tests of this process may have run `tessera train` or `tessera profile` in it — the user's own
    # CLI, which builds the user's model where it runs: only what this submission imports counts)
    before = {m for m in sys.modules if m.startswith("tessera_user_")}
    r = client.post("/api/jobs", json=entry_job(path))
    assert r.status_code == 201, r.text
    ran_in = int(path.with_suffix(".pid").read_text())
    assert ran_in != os.getpid()  # the server (this process) never imported it
    assert not [m for m in sys.modules if m.startswith("tessera_user_") and m not in before]
    # the scheduler's view of it comes from the child's answer, still without importing it here
    from tessera.jobs import parse_job
    from tessera.service.model_source import annotation_stage_count, model_spec

    spec = parse_job(entry_job(path))
    assert model_spec(spec).n_layers == 3 and annotation_stage_count(spec) is None
    from tessera.plan import Device
    from tessera.service.model_source import entrypoint_plan

    devices = [Device(i, "A100-40GB", node="n0", local_index=i) for i in range(2)]
    assert entrypoint_plan(spec, devices, 1, 1).stages[0].dp_degree == 2
    assert not [m for m in sys.modules if m.startswith("tessera_user_") and m not in before]
    assert int(path.with_suffix(".pid").read_text()) == ran_in  # planning did not import it here either
    path.with_suffix(".pid").unlink()
    assert client.post("/api/jobs", json=entry_job(path, name="again")).status_code == 201
    assert not path.with_suffix(".pid").exists()  # cached by content: the child did not even run again


@pytest.mark.timeout(300)
def test_failing_hanging_and_greedy_user_code_get_422_naming_entrypoint(tmp_path, files):
    service, client = make_client(
        tmp_path, allow_paths=(files,), user_code_timeout_s=30.0, user_code_memory_bytes=3 << 30
    )
    try:
        broken = user_model(files, "broken", "raise RuntimeError('model import exploded')")
        r = client.post("/api/jobs", json=entry_job(broken))
        assert r.status_code == 422 and field_in(r, "entrypoint") and "model import exploded" in r.text, (
            r.text
        )
        assert int(broken.with_suffix(".pid").read_text()) != os.getpid()

        hangs = user_model(files, "hangs", "time.sleep(10_000)")
        r = client.post("/api/jobs", json=entry_job(hangs))
        assert r.status_code == 422 and field_in(r, "entrypoint") and "longer than 30 s" in r.text, r.text

        greedy = user_model(files, "greedy", "hog = bytearray(8 << 30)")
        r = client.post("/api/jobs", json=entry_job(greedy))
        assert r.status_code == 422 and field_in(r, "entrypoint") and "memory" in r.text, r.text
        assert service.store.list_jobs() == []
    finally:
        service.stop()


@pytest.mark.timeout(300)
def test_exposed_server_refuses_user_code_unless_allowed(tmp_path, files):
    path = user_model(files, "exposed")
    service, client = make_client(tmp_path / "a", host="0.0.0.0", allow_paths=(files,))
    try:
        r = client.post("/api/jobs", json=entry_job(path))
        assert r.status_code == 422 and field_in(r, "entrypoint") and "--allow-user-code" in r.text, r.text
        assert not path.with_suffix(".pid").exists()  # refused before anything ran, anywhere
    finally:
        service.stop()
    service, client = make_client(tmp_path / "b", host="0.0.0.0", allow_paths=(files,), allow_user_code=True)
    try:
        r = client.post("/api/jobs", json=entry_job(path))
        assert r.status_code == 201, r.text
        assert int(path.with_suffix(".pid").read_text()) != os.getpid()
    finally:
        service.stop()


# --------------------------------------------------------------------------- 2. confined paths
def test_files_outside_the_allowed_roots_get_422_naming_the_field(local, files, tmp_path):
    service, client = local
    before = len(service.store.list_jobs())
    (files / "passwd-link.txt").unlink(missing_ok=True)
    (files / "passwd-link.txt").symlink_to("/etc/passwd")  # inside an allowed root, pointing outside
    outside = tmp_path / "config.json"
    outside.write_text((EXAMPLES.parent / "README.md").read_text()[:10])
    cases = [
        ({"data": "/etc/shadow"}, "data"),
        ({"data": "/proc/self/environ"}, "data"),
        ({"data": "../../../../../../etc/passwd"}, "data"),
        ({"data": str(files / "passwd-link.txt")}, "data"),
        ({"data": str(service.config.state_dir / "token")}, "data"),
        ({"model": str(outside)}, "model"),
        ({"model": "mine", "entrypoint": "/etc/hosts.py:Net"}, "entrypoint"),
    ]
    for change, field in cases:
        r = client.post("/api/jobs", json={**TINY, **change})
        assert r.status_code == 422 and field_in(r, field), (change, r.text)
    assert len(service.store.list_jobs()) == before
    corpus = files / "corpus.txt"
    corpus.write_text("hello " * 100)
    assert client.post("/api/jobs", json={**TINY, "name": "inside", "data": str(corpus)}).status_code == 201


def test_default_roots_are_cwd_state_dir_and_examples(tmp_path):
    from tessera.service.server import path_policy

    state = tmp_path / "state"
    policy = path_policy(ServiceConfig(cluster="local", state_dir=state))
    assert set(policy.roots) == {Path.cwd().resolve(), state.resolve(), EXAMPLES.resolve()}
    assert policy.check("data", str(EXAMPLES / "data" / "corpus.txt")) is None
    assert "outside" in policy.check("data", "/etc/passwd")
    assert "own files" in policy.check("data", str(state / "tessera.db"))


# --------------------------------------------------------------------------- 3. health when exposed
def test_health_is_terse_when_exposed(tmp_path):
    service, client = make_client(tmp_path / "x", host="0.0.0.0")
    try:
        assert client.get("/api/health").json() == {"ok": True}
        assert client.get("/api/health", headers={"Authorization": ""}).status_code == 200
        from tessera.service.api import TESSERA_VERSION

        schema = client.get("/openapi.json").json()
        assert schema["info"]["version"] == "1" != TESSERA_VERSION  # the API's major, not the build
    finally:
        service.stop()
    service, client = make_client(tmp_path / "y")
    try:
        out = client.get("/api/health").json()
        assert out["ok"] is True and "version" in out and "uptime_s" in out
    finally:
        service.stop()


# --------------------------------------------------------------------------- 4 + 5. strict input, no 500s
@pytest.mark.parametrize(
    "fragment, field",
    [
        ('"steps": "10"', "steps"),
        ('"steps": true', "steps"),
        ('"steps": 10, "learning_rate": NaN', "learning_rate"),
        ('"steps": 10, "learning_rate": Infinity', "learning_rate"),
        ('"steps": 10, "learning_rate": -Infinity', "learning_rate"),
        ('"steps": 10, "deadline_s": 1e309', "deadline_s"),
        ('"steps": 10, "global_batch": 8.0', "global_batch"),
        ('"steps": 10, "wait_for_resources": "yes"', "wait_for_resources"),
        ('"step": 10', "did you mean 'steps'"),
    ],
)
def test_loose_numbers_get_422_naming_the_field(local, fragment, field):
    _, client = local
    batch = "" if "global_batch" in fragment else '"global_batch": 8, '
    body = '{"model": "gpt-tiny", "seq_len": 64, ' + batch + fragment + "}"
    r = client.post("/api/jobs", content=body, headers=JSON)
    assert r.status_code == 422, r.text
    assert field_in(r, field), r.text
    json.loads(r.text)  # strict JSON: no NaN echoed back


def test_no_server_errors_on_huge_inputs(local):
    _, client = local
    assert client.get("/api/jobs/" + "1" * 4400).status_code == 404
    assert client.get("/api/jobs/" + "1" * 4400 + "/logs").status_code == 404
    r = client.post("/api/jobs", content='{"model": "gpt-tiny", "global_batch": 8, "steps": ' + "9" * 5000 + "}",
                    headers=JSON)  # fmt: skip
    assert 400 <= r.status_code < 500
    r = client.post("/api/jobs", json={**TINY, "name": "x" * 5000})
    assert r.status_code == 422


def test_bodies_above_1_mib_get_413_before_parsing(local):
    service, client = local
    before = len(service.store.list_jobs())
    big = json.dumps({**TINY, "name": "big", "pad": "x" * (1 << 20)})
    r = client.post("/api/jobs", content=big, headers=JSON)
    assert r.status_code == 413 and "1048576" in r.text

    def chunks():  # no Content-Length: the streamed size is counted
        for _ in range(40):
            yield b" " * 65536

    r = client.post("/api/jobs", content=chunks(), headers=JSON)
    assert r.status_code == 413
    assert len(service.store.list_jobs()) == before
    assert client.post("/api/jobs", json={**TINY, "name": "small"}).status_code == 201


# --------------------------------------------------------------------------- 6. infeasible at submission
@pytest.mark.timeout(300)
def test_infeasible_job_is_refused_unless_it_waits(local):
    service, client = local
    adapter = service.controller.adapter if service.controller is not None else None
    if getattr(adapter, "infeasible", None) is None:
        pytest.skip("SchedulingAdapter.infeasible is not there yet (another part of issue 18)")
    before = len(service.store.list_jobs())
    huge = {**TINY, "name": "huge", "model": "llama2-70b", "seq_len": 4096}  # fits no GPU of the cluster
    r = client.post("/api/jobs", json=huge)
    assert r.status_code == 422 and field_in(r, "model") and "wait_for_resources" in r.text, r.text
    absurd = {**TINY, "name": "absurd", "global_batch": 10**15}  # fits, but an iteration would take years
    r = client.post("/api/jobs", json=absurd)
    assert r.status_code == 422 and field_in(r, "global_batch"), r.text
    assert len(service.store.list_jobs()) == before
    r = client.post("/api/jobs", json={**huge, "wait_for_resources": True})
    assert r.status_code == 201 and r.json()["job"]["state"] == "PENDING"


# --------------------------------------------------------------------------- 7. idempotency conflicts
def test_idempotency_key_with_a_different_body_is_409(local):
    _, client = local
    key = {"Idempotency-Key": "conflict-1"}
    first = client.post("/api/jobs", json={**TINY, "name": "first"}, headers=key)
    assert first.status_code == 201
    jid = first.json()["job"]["id"]
    again = client.post("/api/jobs", json={**TINY, "name": "first"}, headers=key)
    assert again.status_code == 200 and again.json()["job"]["id"] == jid
    other = client.post("/api/jobs", json={**TINY, "name": "second"}, headers=key)
    assert other.status_code == 409 and f"job {jid}" in other.json()["detail"], other.text


# --------------------------------------------------------------------------- 13. /docs offline
def test_docs_page_uses_only_local_assets(local):
    _, client = local
    page = client.get("/docs")
    assert page.status_code == 200 and "SwaggerUIBundle" in page.text
    urls = re.findall(r'(?:src|href)="([^"]+)"', page.text) + re.findall(r"url: '([^']+)'", page.text)
    assert urls and not re.search(r"https?://", page.text)
    for url in urls:
        assert url.startswith("/"), url
        r = client.get(url)
        assert r.status_code == 200 and len(r.content) > 100, url


def test_server_options_reach_the_config(tmp_path, monkeypatch):
    """``tessera server --allow-user-code --allow-path DIR`` (the serving itself is replaced: only the options
    are under test here; the config's effect is tested above)."""
    from typer.testing import CliRunner

    import tessera.service.server as server_module
    from tessera.cli import app as cli_app

    seen = []
    monkeypatch.setattr(server_module, "serve", lambda config, announce=None: seen.append(config))
    args = ["server", "--api-only", "--state-dir", str(tmp_path / "s"), "--allow-path", str(tmp_path)]
    r = CliRunner().invoke(cli_app, [*args, "--allow-path", str(EXAMPLES), "--allow-user-code"])
    assert r.exit_code == 0, r.output
    assert seen[0].allow_user_code and seen[0].allow_paths == (tmp_path.resolve(), EXAMPLES.resolve())
    r = CliRunner().invoke(cli_app, ["server", "--api-only", "--state-dir", str(tmp_path / "s")])
    assert not seen[1].allow_user_code and seen[1].allow_paths == ()


@pytest.mark.parametrize(
    "reason, field",
    [
        ("Infeasible: no plan fits in memory on A100-40GB, V100-32GB", "model"),
        (
            "Infeasible: the fastest Cell (2xA100-40GB S1) needs 1.18e+11 s per step, 2.7e+07 days",
            "global_batch",
        ),
        (
            "Infeasible: the fastest Cell (2xA100-40GB S1) needs 0.02 s per step, 400 days for 2e9 steps",
            "steps",
        ),
        ("Infeasible: every GPU type of the cluster is excluded", "exclude_gpu_types"),
    ],
)
def test_infeasibility_names_the_field_to_change(reason, field):
    from tessera.service.security import field_of_reason

    assert field_of_reason(reason) == field


@pytest.mark.timeout(300)
def test_stand_in_module_plans_exactly_like_the_user_model(local):
    """The server plans a user model on a stand-in with the child's per-layer TaskGraphs; the Plan equals the
    one the real module gives (built here in a separate process, as the server never builds it)."""
    import subprocess

    from tessera.jobs import parse_job
    from tessera.plan import Device
    from tessera.service.model_source import annotation_stage_count, entrypoint_plan

    target = f"{EXAMPLES / 'whale_resnet_classifier.py'}:Factory"
    job = parse_job({"name": "whale", "model": "whale", "entrypoint": target, "global_batch": 16, "steps": 5})
    devices = [
        Device(i, t, node=t, local_index=i % 4) for i, t in enumerate(["A100-40GB"] * 4 + ["V100-32GB"] * 4)
    ]
    ours = entrypoint_plan(job, devices, 1, 1)
    assert annotation_stage_count(job) == 2 and len(ours.stages) == 2
    real = textwrap.dedent("""
        import json, sys
        from tessera.jobs import parse_job
        from tessera.plan import Device
        from tessera.hardware import get_gpu
        from tessera.runtime.annotations import Config, plan_from_annotations
        from tessera.service.model_source import build_entrypoint_module
        job = parse_job(json.loads(sys.argv[1]))
        devices = [Device(**d) for d in json.loads(sys.argv[2])]
        module = build_entrypoint_module(job.entrypoint)
        flops = {d.gpu_type: get_gpu(d.gpu_type).peak_flops(job.precision) for d in devices}
        plan = plan_from_annotations(module, devices, model_name=job.model, global_batch=job.global_batch,
            seq_len=1, config=Config(num_micro_batch=1, num_task_graph=1), device_flops=flops,
            precision=job.precision, optimizer=job.optimizer, recompute="none")
        print(plan.to_json(indent=None))
    """)
    devs = json.dumps(
        [
            {"rank": d.rank, "gpu_type": d.gpu_type, "node": d.node, "local_index": d.local_index}
            for d in devices
        ]
    )
    out = subprocess.run(
        [sys.executable, "-c", real, job.model_dump_json(), devs], capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == json.loads(ours.to_json(indent=None))
