"""Code and data travel with the job (``tessera.service.job_files``).

Unit tests (no Ray): the archive is deterministic and unpacks into the node cache with the RunSpec's paths
rewritten to the copies; a job whose files exceed the limit gets one error naming the field, its size and the
limit.

On an emulated multi-node Ray cluster (``ray.cluster_utils.Cluster``, loopback) whose two GPU nodes start in
their own working directories with their own ``TESSERA_HOME``, a job with an entrypoint model file and a
local text file, both written into a folder of the test, trains to completion — and every rank imported the
model from its node's cache and read the data from it, never from the folder the job spec names. And the
archive outlives the server process that shipped it (its owner is a detached actor): a rank handed the files
by a server that then exited still fetches and unpacks them.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path

import httpx
import pytest
from conftest import Served, job, ray_tmpdir, submit, wait_for

from tessera.jobs import JobSpec
from tessera.service import job_files as jf
from tessera.service.device_worker import RunSpec
from tessera.service.model_source import EntrypointModel, ModelSourceError

MODEL = '''
import os

import torch
import torch.nn.functional as F
from torch import nn

REPORTS = {reports!r}
if os.environ.get("RANK") is not None:  # a worker (not the server's model check): say where this file is
    with open(os.path.join(REPORTS, f"{{os.getpid()}}.json"), "w") as f:
        f.write(
            '{{"file": "%s", "cwd": "%s", "rank": %s, "home": "%s"}}'
            % (__file__, os.getcwd(), os.environ["RANK"], os.environ.get("TESSERA_HOME", ""))
        )


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return x + F.gelu(self.fc(x))


class TinyLM(nn.Module):
    """Byte-level next-token model: embedding, one block, head."""

    def __init__(self, *, layer_range=None, tp=None, attention="flash", recompute="none") -> None:
        super().__init__()
        start, end = layer_range or (0, 3)
        makers = [lambda: nn.Embedding(256, 16), lambda: Block(16), lambda: nn.Linear(16, 256)]
        self.layers = nn.ModuleList([m() for i, m in enumerate(makers) if start <= i < end])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def loss(self, output, targets):
        return F.cross_entropy(output.float().reshape(-1, output.shape[-1]), targets.reshape(-1))

    def make_batch(self, batch_size, seq_len=1, *, device=None, generator=None):
        ids = torch.randint(0, 256, (batch_size, seq_len + 1), generator=generator)
        return ids[:, :-1], ids[:, 1:]
'''


def user_files(root: Path) -> tuple[Path, Path, Path]:
    """The user's folder: model.py (reporting where workers import it from into ``reports``) and a text file."""
    src, reports = root / "user", root / "reports"
    src.mkdir(parents=True)
    reports.mkdir(parents=True)
    model = src / "model.py"
    model.write_text(MODEL.format(reports=str(reports)))
    corpus = src / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    return model, corpus, reports


# ------------------------------------------------------------------------------------------------ unit
def test_archive_is_deterministic_and_localize_rewrites_every_path(tmp_path):
    model, corpus, _ = user_files(tmp_path)
    tok = tmp_path / "user" / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    spec = JobSpec.model_validate(
        {"model": "tiny", "entrypoint": f"{model}:TinyLM", "global_batch": 4, "steps": 2,
         "data": {"path": str(corpus), "tokenizer": str(tok), "cache_dir": str(tmp_path / "cache")}}
    )  # fmt: skip
    files = jf.job_files(spec)
    # (data.cache_dir is where a node writes: it never travels)
    want = [("entrypoint", model), ("data.path", corpus), ("data.tokenizer", tok)]
    assert [(f.field, f.path) for f in files] == want
    first = jf.pack(files, 1 << 20)
    os.utime(corpus, (1, 1))  # timestamps are not content
    again = jf.pack(files, 1 << 20)
    assert first.digest == again.digest and first.data == again.data
    corpus.write_text(corpus.read_text() + "!")
    assert jf.pack(files, 1 << 20).digest != first.digest

    shipped = {"digest": first.digest, "archive": first.data, "paths": first.paths}
    run = RunSpec(
        job_id=1, attempt=1, total_steps=2, learning_rate=1e-3, seed=0, checkpoint_dir="/ck",
        checkpoint_every=1, resume=False, backend="gloo", pg_timeout_s=10.0,
        model_factory=EntrypointModel(f"{model}:TinyLM"), data_config=spec.data_options(), files=shipped,
    )  # fmt: skip
    node = tmp_path / "node-home" / "job-files"
    local, model_dir = jf.localize(run, node)
    here = node / first.digest
    assert model_dir is None
    assert local.model_factory == EntrypointModel(f"{here / 'entrypoint' / 'model.py'}:TinyLM")
    assert local.data_config["path"] == str(here / "data.path" / "corpus.txt")
    assert local.data_config["tokenizer"] == str(here / "data.tokenizer" / "tok")
    assert local.data_config["cache_dir"] is None
    assert (here / "entrypoint" / "model.py").read_text() == model.read_text()
    assert (here / "data.tokenizer" / "tok" / "tokenizer.json").read_text() == "{}"
    # a later attempt on this node finds the copy: nothing is fetched (no archive needed)
    assert jf.localize(RunSpec(**{**run.__dict__, "files": {**shipped, "archive": None}}), node)[0] == local
    with pytest.raises(RuntimeError, match="digest"):  # a corrupted archive is never unpacked
        jf.unpacked({**shipped, "digest": "0" * 24}, tmp_path / "other")


def test_a_model_directory_travels_with_its_links_followed(tmp_path):
    """A Hugging Face model directory (here laid out like a hub cache snapshot: files are links to blobs)
    travels as regular files; the worker builds the model and finds the tokenizer in its copy."""
    from tessera.runtime.dataset import tokenizer_of_model
    from tessera.runtime.model import ZooModel

    blobs, snap = tmp_path / "blobs", tmp_path / "snapshot"
    blobs.mkdir()
    snap.mkdir()
    for name, text in {"config.json": '{"model_type": "gpt2"}', "tokenizer.json": "{}"}.items():
        (blobs / name).write_text(text)
        (snap / name).symlink_to(blobs / name)
    data = tmp_path / "train.jsonl"
    data.write_text('{"text": "hello"}\n')
    spec = JobSpec.model_validate(
        {"model": str(snap), "global_batch": 4, "steps": 2, "data": {"path": str(data)}}
    )
    files = jf.job_files(spec)
    assert [(f.field, f.path) for f in files] == [("model", snap), ("data.path", data)]
    packed = jf.pack(files, 1 << 20)
    run = RunSpec(
        job_id=1, attempt=1, total_steps=2, learning_rate=1e-3, seed=0, checkpoint_dir="/ck",
        checkpoint_every=1, resume=False, backend="gloo", pg_timeout_s=10.0, data_config=spec.data_options(),
        files={"digest": packed.digest, "archive": packed.data, "paths": packed.paths},
    )  # fmt: skip
    local, model_dir = jf.localize(run, tmp_path / "node")
    copy = tmp_path / "node" / packed.digest / "model" / "snapshot"
    assert model_dir == str(copy) and local.model_factory == ZooModel(str(copy))
    assert not (copy / "config.json").is_symlink() and (copy / "config.json").read_text().startswith("{")
    assert local.data_config["tokenizer"] is None  # the runtime takes the model copy's own tokenizer:
    assert tokenizer_of_model(model_dir) == str(copy)


def test_files_above_the_limit_get_one_error_naming_the_field_and_sizes(tmp_path):
    model, corpus, _ = user_files(tmp_path)
    big = tmp_path / "user" / "big.txt"
    big.write_bytes(b"x" * (300 << 10))
    spec = JobSpec.model_validate(
        {"model": "tiny", "entrypoint": f"{model}:TinyLM", "global_batch": 4, "steps": 2, "data": str(big)}
    )
    with pytest.raises(ModelSourceError) as e:
        jf.Shipper(256 << 10).ship(1, spec)  # refused before anything is packed or put into Ray
    assert e.value.field == "data"
    text = str(e.value)
    assert text.startswith(f"data: {big} is 300.0 KiB (the job's files ")
    assert "above the 256.0 KiB limit" in text and "--shared-files" in text
    jf.check_size(jf.job_files(spec), 1 << 20)  # within a larger limit: no error


# ------------------------------------------------------------------------------------------------ on Ray
@pytest.fixture(scope="module")
def two_node_ray(tmp_path_factory):
    """A head without GPUs and two V100 nodes, each started in its own working directory with its own
    TESSERA_HOME (what separate machines would have); yields (address, [(cwd, home)] per GPU node)."""
    from ray.cluster_utils import Cluster

    root = tmp_path_factory.mktemp("nodes")
    old_cwd = os.getcwd()
    common = {"node_ip_address": "127.0.0.1", "object_store_memory": 80 * 2**20,
              "dashboard_agent_listen_port": None}  # fmt: skip
    head = {**common, "num_cpus": 1, "num_gpus": 0, "include_dashboard": False}
    with ray_tmpdir("jf"):
        cluster = Cluster(initialize_head=True, head_node_args=head)
        nodes = []
        try:
            for i in range(2):
                cwd, home = root / f"node{i}-cwd", root / f"node{i}-home"
                cwd.mkdir()
                home.mkdir()
                os.chdir(cwd)  # the raylet, and the workers it starts, run here
                cluster.add_node(
                    **common, num_cpus=1, num_gpus=1, resources={"accelerator_type:V100": 1},
                    labels={"ray.io/accelerator-type": "V100"}, env_vars={"TESSERA_HOME": str(home)},
                )  # fmt: skip
                nodes.append((cwd, home))
            os.chdir(old_cwd)
            yield cluster.address, nodes
        finally:
            os.chdir(old_cwd)
            cluster.shutdown()


@pytest.mark.ray
@pytest.mark.timeout(360)
def test_job_files_reach_nodes_in_other_working_directories(two_node_ray, tmp_path):
    from tessera.runtime.checkpoint import resolve
    from tessera.service.config import ServiceConfig
    from tessera.service.server import Service

    address, nodes = two_node_ray
    model, corpus, reports = user_files(tmp_path)
    big = tmp_path / "user" / "big.txt"
    big.write_bytes(b"y" * (300 << 10))
    config = ServiceConfig(
        state_dir=tmp_path / "state", ray_address=address, round_s=2.0, restart_cost_s=1.0, pg_timeout_s=20.0,
        watchdog_s=90.0, backoff_s=1.0, allow_paths=(tmp_path / "user",), job_files_limit_bytes=256 << 10,
    )  # fmt: skip
    service = Service(config)
    service.start()
    served = Served(service)
    try:
        assert service.controller.ships_files
        body = {"name": "travel", "model": "tiny-lm", "entrypoint": f"{model}:TinyLM", "global_batch": 8,
                "seq_len": 16, "steps": 30, "precision": "fp32", "learning_rate": 3e-3,
                "checkpoint_every_steps": 10}  # fmt: skip
        # above the limit: refused at submission, one error naming the field, the size and the limit
        r = httpx.post(f"{served.url}/api/jobs", json={**body, "data": str(big)}, timeout=120)
        assert r.status_code == 422, r.text
        detail = r.json()["detail"][0]
        assert detail["loc"] == ["body", "data"], detail
        assert "is 300.0 KiB" in detail["msg"] and "above the 256.0 KiB limit" in detail["msg"], detail

        jid = submit(served, {**body, "data": str(corpus)})
        final = wait_for(
            lambda: (j := job(served, jid))["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") and j,
            240, "the job to end",
        )  # fmt: skip
        logs = [x["line"] for x in httpx.get(f"{served.url}/api/jobs/{jid}/logs", timeout=30).json()["lines"]]
        assert final["state"] == "SUCCEEDED", (final["error"], logs)
        assert final["last_loss"] is not None and math.isfinite(final["last_loss"]), final
        digest = next(line for line in logs if "job files: archive" in line).split("archive ")[1].split()[0]

        # every rank imported the model from its node's cache, in its node's working directory
        seen = [json.loads(p.read_text()) for p in reports.glob("*.json")]
        world = len(service.store.allocations(jid)[-1]["gpus"])
        assert set(range(world)) <= {s["rank"] for s in seen}, (world, seen)
        by_home = {str(home): cwd for cwd, home in nodes}
        for s in seen:
            assert s["home"] in by_home, s
            assert s["file"] == str(Path(s["home"]) / "job-files" / digest / "entrypoint" / "model.py"), s
            assert s["cwd"] == str(by_home[s["home"]]), s
        # and read the data from there (rank 0 records its data's source in the checkpoint)
        ckpt = resolve(config.checkpoint_root / str(jid) / "checkpoints")
        source = json.loads((ckpt / "meta.json").read_text())["data"]["source"]
        copies = [str(home / "job-files" / digest / "data" / "corpus.txt") for _, home in nodes]
        assert source in copies, (source, copies)
    finally:
        served.close()
        with contextlib.suppress(Exception):
            service.stop()


SHIP_AND_DIE = """
import sys
from pathlib import Path

import ray

from tessera.jobs import JobSpec
from tessera.service.job_files import Shipper
from tessera.service.ray_backend import NAMESPACE

ray.init(address=sys.argv[1], namespace=NAMESPACE)
spec = JobSpec.model_validate({"model": "gpt-tiny", "global_batch": 4, "steps": 2, "data": sys.argv[2]})
files = Shipper(1 << 20).ship(7, spec)


@ray.remote
class Rank:
    '''A rank whose server dies before it unpacked the job's files.'''

    def __init__(self, files):
        self.files = files

    def unpack(self, root):
        from tessera.service.job_files import unpacked

        return str(unpacked(self.files, Path(root)))


rank = Rank.options(name="rank-of-7", lifetime="detached", num_cpus=0).remote(files)
ray.get(rank.__ray_ready__.remote())
print(files["digest"])
"""

UNPACK_LATER = """
import sys

import ray

from tessera.service.job_files import Shipper
from tessera.service.ray_backend import NAMESPACE

ray.init(address=sys.argv[1], namespace=NAMESPACE)
rank = ray.get_actor("rank-of-7")
try:
    print(ray.get(rank.unpack.remote(sys.argv[2]), timeout=60))
finally:
    ray.kill(rank)
    Shipper(1 << 20).forget(7)
"""


@pytest.mark.ray
@pytest.mark.timeout(180)
def test_the_archive_outlives_the_server_that_shipped_it(two_node_ray, tmp_path):
    """A server killed between a launch and its ranks' unpacking (a restarted server reattaches to them): the
    archive belongs to the detached ArchiveOwner, not to the dead server, so the ranks still fetch it."""
    import subprocess
    import sys

    address, _ = two_node_ray
    _, corpus, _ = user_files(tmp_path)
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}

    def driver(script: str, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", script, address, *args], env=env, capture_output=True, text=True,
            timeout=120, start_new_session=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.strip().splitlines()[-1]

    digest = driver(SHIP_AND_DIE, str(corpus))  # the "server": ships, hands the files to a rank, exits
    here = Path(driver(UNPACK_LATER, str(tmp_path / "node-cache")))  # the rank unpacks after it is gone
    assert here == tmp_path / "node-cache" / digest
    assert (here / "data" / "corpus.txt").read_bytes() == corpus.read_bytes()
