"""Service tests: real SQLite, real uvicorn on loopback, real Ray (emulated GPU nodes) where marked ``ray``."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

for _k, _v in {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
}.items():
    os.environ.setdefault(_k, _v)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ray: starts a local Ray cluster emulating GPU nodes (slow)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """A Service's API on a real uvicorn server on loopback, in a background thread."""

    def __init__(self, service, port: int | None = None) -> None:
        import uvicorn

        self.service = service
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(
                service.app(), host="127.0.0.1", port=self.port, log_level="warning", access_log=False
            )
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


@contextlib.contextmanager
def ray_tmpdir(tag: str):
    """A short RAY_TMPDIR of this process for a Ray cluster a test starts (Ray's socket paths must stay under
    107 bytes), set while the cluster lives, then restored and removed."""
    import shutil

    tmp = f"/tmp/tsr-{tag}-{os.getpid()}"
    old = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = tmp
    os.makedirs(os.path.join(tmp, "ray"), exist_ok=True)
    try:
        yield tmp
    finally:
        if old is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = old
        shutil.rmtree(tmp, ignore_errors=True)


def submit(s: Served, body: dict) -> int:
    r = httpx.post(f"{s.url}/api/jobs", json=body, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["job"]["id"]


def job(s: Served, jid: int) -> dict:
    return httpx.get(f"{s.url}/api/jobs/{jid}", timeout=30).json()


def wait_for(pred, timeout_s: float, what: str, interval_s: float = 0.5):
    """Poll ``pred`` until it returns something truthy (returned), or fail naming ``what``."""
    deadline = time.time() + timeout_s
    last = None
    while time.time() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})")


def start_server_process(
    args: list[str],
    state: Path,
    port: int,
    *,
    env: dict[str, str] | None = None,
    timeout_s: float = 120,
    interval_s: float = 0.5,
) -> subprocess.Popen:
    """``tessera server --state-dir STATE --port PORT ARGS`` as its own process (its own session, so a test can
    kill exactly its group), logging under ``state``; returns once /api/health answers, or fails with the log's
    tail when the process exits first."""
    cmd = [
        sys.executable,
        "-m",
        "tessera.cli",
        "server",
        "--state-dir",
        str(state),
        "--port",
        str(port),
        *(args if "--cluster" in args else [*args, "--cluster", "local"]),  # tests emulate 2+2 GPUs
    ]
    log = state / f"server-{port}-{time.time():.3f}.log"
    with log.open("w") as out:  # the child holds its own copy of the descriptor
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200
        return False

    wait_for(up, timeout_s, "the server to answer", interval_s=interval_s)
    return proc


def assert_no_server_errors(
    url: str, *, max_examples: int, timeout_s: float, skip: tuple[str, ...] = ()
) -> list[str]:
    """Schemathesis: generated valid and invalid requests for every operation of the OpenAPI schema at ``url``
    (except the paths in ``skip``) never get a 5xx. Returns the operations seen, as "METHOD /path"."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    seen = []
    for result in schema.get_all_operations():
        op = result.ok()
        seen.append(f"{op.method.upper()} {op.path}")
        if op.path in skip:
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=op.as_strategy(generation_mode=mode))
            @settings(
                max_examples=max_examples,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                database=None,
            )
            def no_5xx(case):
                r = case.call(timeout=timeout_s)
                assert r.status_code < 500, (
                    f"{case.method} {case.formatted_path}: {r.status_code} {r.text[:300]}"
                )

            try:
                no_5xx()
            except Unsatisfiable:  # nothing invalid to generate (an operation without parameters)
                assert mode == GenerationMode.NEGATIVE
    return seen


# ------------------------------------------------------------------------------------------------ PostgreSQL
PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _pg_tool(name: str) -> str | None:
    import shutil

    found = PG_BIN / name
    return str(found) if found.is_file() else shutil.which(name)


class PostgresCluster:
    """A throwaway PostgreSQL cluster: its own data dir, loopback TCP on a free port, a private socket dir.

    PostgreSQL refuses to run as root, so as root the cluster belongs to (and runs as) the unprivileged
    ``postgres`` system user, else ``nobody``. Only this cluster is ever stopped (``pg_ctl stop`` on its own
    data dir)."""

    def __init__(self) -> None:
        import pwd
        import tempfile

        self.initdb, self.pg_ctl = _pg_tool("initdb"), _pg_tool("pg_ctl")
        if not (self.initdb and self.pg_ctl):
            pytest.skip(f"PostgreSQL server binaries (initdb, pg_ctl) not found in {PG_BIN} or on PATH")
        self.user: str | None = None  # run as this user (None: as ourselves)
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                try:
                    self.pw = pwd.getpwnam(name)
                except KeyError:
                    continue
                self.user = name
                break
            else:
                pytest.skip(
                    "running as root and neither a 'postgres' nor a 'nobody' user exists to run PostgreSQL"
                )
        # Not under pytest's tmp dir: that is 0700 root's, which the postgres user cannot enter.
        self.root = Path(tempfile.mkdtemp(prefix="tessera-pg-"))
        self.data = self.root / "data"
        self.sockets = self.root / "sock"
        self.log = self.root / "postgres.log"
        self.port = 0
        self.started = False
        if self.user:
            os.chown(self.root, self.pw.pw_uid, self.pw.pw_gid)

    def _run(self, *args: str, timeout: float = 60) -> None:
        import subprocess

        cmd = ["runuser", "-u", self.user, "--", *args] if self.user else list(args)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.root)
        if r.returncode != 0:
            log = self.log.read_text()[-2000:] if self.log.is_file() else ""
            raise RuntimeError(f"{' '.join(args[:2])} failed ({r.returncode}): {r.stdout}{r.stderr}{log}")

    def start(self) -> None:
        self._run(self.initdb, "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--locale=C", "--no-sync")  # fmt: skip
        self._run("mkdir", "-m", "0700", str(self.sockets))
        for attempt in range(3):  # the free port may be taken between the probe and the bind
            self.port = free_port()
            opts = (
                f"-c listen_addresses=127.0.0.1 -c port={self.port} -k {self.sockets} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
            )  # a throwaway cluster: durability against power loss is not what these tests are about
            self.started = True  # from here on, teardown stops it whatever happens
            try:
                self._run(self.pg_ctl, "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                          "-o", opts, "start", timeout=90)  # fmt: skip
                return
            except RuntimeError:
                self.stop()
                if attempt == 2:
                    raise

    def stop(self) -> None:
        if self.started and (self.data / "postmaster.pid").exists():
            self._run(self.pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop", timeout=90)
        self.started = False

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new empty database on this cluster; its SQLAlchemy URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def cleanup(self) -> None:
        import shutil

        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL 15 cluster for this test session (skipped, with the reason, where it cannot run)."""
    pytest.importorskip(
        "psycopg", reason="the PostgreSQL driver is not installed: pip install 'psycopg[binary]'"
    )
    cluster = PostgresCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        try:
            cluster.stop()
        finally:
            cluster.cleanup()


@pytest.fixture(scope="session")
def postgres_url(postgres) -> str:
    """The SQLAlchemy URL of a database created for this test session on the throwaway cluster."""
    return postgres.create_database("tessera")
