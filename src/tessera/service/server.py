"""The service process: store + controller (+ Ray) + the HTTP API, started and stopped together."""

from __future__ import annotations

import os
import secrets
import signal
import threading
import time
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from tessera.service.config import ServiceConfig, is_loopback
from tessera.service.controller import Controller
from tessera.service.model_source import UserCodeLimits, set_limits
from tessera.service.ray_backend import RayCluster, emulated_spec
from tessera.service.security import PathPolicy, default_roots
from tessera.service.store import Store


def ensure_token(config: ServiceConfig) -> ServiceConfig:
    """A server on a non-loopback address always has a token: the one given, else one made and saved
    (``<state_dir>/token``, mode 0600) so that clients on this machine can read it."""
    if config.token or is_loopback(config.host):
        return config
    path = config.state_dir / "token"
    if path.is_file():
        token = path.read_text().strip()
    else:
        token = secrets.token_urlsafe(24)
        config.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
    return replace(config, token=token)


def path_policy(config: ServiceConfig) -> PathPolicy:
    """The roots a job spec's files must lie under (``allow_paths``, else the working directory now, the state
    dir and the examples); the server's token and SQLite files are refused even there."""
    roots = config.allow_paths or default_roots(config.state_dir)
    denied = [config.state_dir / "token"]
    if config.database_url.startswith("sqlite:///"):
        db = Path(config.database_url.removeprefix("sqlite:///"))
        denied += [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]
    return PathPolicy.of(roots, denied)


def warm_planning() -> None:
    """Import torch and build one tiny model on the meta device, as every Cell estimate first does: the first
    submission's feasibility check would otherwise pay both (~10 s on a busy 2-core host) and time out."""
    from tessera.nn.zoo import build_model

    build_model("gpt-tiny", layer_range=(0, 2), device="meta")


class Service:
    """Everything one ``tessera server`` runs."""

    def __init__(self, config: ServiceConfig) -> None:
        config = ensure_token(config)
        config.state_dir.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.paths = path_policy(config)
        set_limits(UserCodeLimits(config.user_code_timeout_s, config.user_code_memory_bytes))
        self.store = Store(config.database_url)
        cluster = None
        if config.scheduler:
            cluster = RayCluster(
                address=config.ray_address,
                emulate=emulated_spec(config.cluster) if config.ray_address is None else None,
                tmp_dir=config.ray_tmp_dir if config.ray_address is None else None,
            )
        self.controller = Controller(self.store, config, cluster)
        if config.scheduler:  # in the background, beside Ray's start-up
            threading.Thread(target=warm_planning, name="tessera-warm-planning", daemon=True).start()
        self.started_at = time.time()
        self._started = False

    def start(self) -> None:
        if not self._started:
            self.controller.start()
            self._started = True

    def stop(self) -> None:
        if self._started:
            self.controller.stop()
            self._started = False
        self.store.close()

    def app(self, *, manage: bool = False) -> Any:
        """The FastAPI app. ``manage``: its lifespan starts and stops the service (only where that runs in the
        main thread's stead is harmless: never with an embedded Ray, whose start needs the main thread)."""
        from tessera.service.api import create_app

        app = create_app(self)
        if manage:

            @asynccontextmanager
            async def lifespan(_app: Any):
                import anyio

                await anyio.to_thread.run_sync(self.start)
                try:
                    yield
                finally:
                    await anyio.to_thread.run_sync(self.stop)

            app.router.lifespan_context = lifespan
        return app


def serve(config: ServiceConfig, *, announce: Any = None) -> None:
    """Run the service until SIGINT/SIGTERM: Ray and the controller start in the main thread (Ray installs
    signal handlers), then uvicorn serves; on exit running jobs are checkpointed and Ray is shut down.
    ``announce(service)`` is called once it is up."""
    import uvicorn

    service = Service(config)
    # the app first: its imports (FastAPI, pydantic) are done before any gang thread exists, so no first import
    # of a shared module can race one (a pydantic.v1 race once broke a restarted server's reattach)
    app = service.app()
    service.start()
    # uvicorn handles SIGINT/SIGTERM while it serves and re-raises them once it stopped; what it re-raises into
    # must not end the process before the service stopped (Ray's own SIGTERM handler would exit at once).
    previous = {s: signal.signal(s, lambda *_: None) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=config.host,
                port=config.port,
                log_level="warning",
                access_log=False,
                timeout_keep_alive=30,  # clients (the CLI, dashboards) keep connections; 5 s races their reuse
            )
        )
        if announce is not None:
            announce(service)
        server.run()
    finally:
        service.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
