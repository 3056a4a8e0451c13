"""Service tests: real SQLite, real uvicorn on loopback, real Ray (emulated GPU nodes) where marked ``ray``."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

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
