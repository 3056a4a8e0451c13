"""Server settings: where state lives, which Ray, how often to schedule, and how failures are retried."""

from __future__ import annotations

import hashlib
import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PORT = 8470


def default_state_dir() -> Path:
    """``$TESSERA_HOME/service`` (default ``~/.cache/tessera/service``: all state under one home)."""
    home = os.environ.get("TESSERA_HOME")
    return (Path(home) if home else Path.home() / ".cache" / "tessera") / "service"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServiceConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    state_dir: Path = field(default_factory=default_state_dir)
    db_url: str | None = None  # default: SQLite in state_dir; or postgresql://…
    ray_address: str | None = None  # None: embedded local Ray emulating `cluster`
    cluster: str = "embedded"  # embedded: the nodes to emulate (preset name or YAML; default this CPU)
    scheduler: bool = True  # False: API only (another server schedules; or tests of the API alone)
    policy: str = "tessera"
    round_s: float = 300.0  # periodic scheduling round (minutes in production, seconds in the demo)
    tick_s: float = 0.25  # the control loop's reaction time to events
    token: str | None = None  # required from clients when set (always set when binding non-loopback)
    pg_timeout_s: float = 60.0  # torch.distributed process-group timeout in workers
    watchdog_s: float = 300.0  # a gang with no step for this long is failed (hung)
    backoff_s: float = 5.0  # first relaunch delay after a failure; doubles per failure, capped at 300 s
    restart_cost_s: float = 20.0  # guess of a move's cost until one is measured (then restart_measured.json)
    log_every: int = 10  # a job log line every N steps
    calibrate: bool = True  # fold measured iteration times into the cost model
    # Security (README: "Exposing the server"). User code (a job's entrypoint) is accepted on loopback, and
    # beyond it only when the operator says so; it is checked in a child process with these limits.
    allow_user_code: bool = False
    user_code_timeout_s: float = 120.0
    user_code_memory_bytes: int = 4 << 30
    # Files a spec names (data, config.json, entrypoint .py) must lie under these (empty: the defaults, the
    # working directory at start, the state dir and the package's examples).
    allow_paths: tuple[Path, ...] = ()
    max_body_bytes: int = 1 << 20  # larger request bodies get 413 before they are parsed
    # Code and data travel with the job (``tessera.service.job_files``): on a Ray cluster of other machines the
    # files a job names (entrypoint .py, model directory, data, tokenizer) are packed and sent to its nodes, up
    # to this many bytes per job; ``shared_files``: they are on every node already (a shared filesystem), and
    # the paths are used as they are. The embedded cluster never packs (every node is this machine).
    job_files_limit_bytes: int = 512 << 20
    shared_files: bool = False

    @property
    def exposed(self) -> bool:
        """Reachable beyond this machine: a token, terse health, no user code unless allowed."""
        return not is_loopback(self.host)

    @property
    def user_code_allowed(self) -> bool:
        return self.allow_user_code or not self.exposed

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def database_url(self) -> str:
        if self.db_url:
            return self.db_url
        return f"sqlite:///{(self.state_dir / 'tessera.db').resolve()}"

    @property
    def checkpoint_root(self) -> Path:
        return self.state_dir / "jobs"

    @property
    def cost_dir(self) -> Path:
        """The service's own cost model: emulated GPUs calibrate onto CPU speeds, so never the user's."""
        return self.state_dir / ("perf-emulated" if self.ray_address is None else "perf")

    @property
    def ray_tmp_dir(self) -> str:
        """Short and stable per state dir (unix sockets; a restarted server finds its predecessor's leftovers)."""
        h = hashlib.sha1(str(self.state_dir.resolve()).encode()).hexdigest()[:10]
        return f"/tmp/tsr-{h}"

    def backoff(self, failures: int) -> float:
        return min(300.0, self.backoff_s * 2 ** max(0, failures - 1))
