"""Nothing of the embedded Ray outlives the server, even a server killed with SIGKILL.

Ray's daemons (GCS, raylets, dashboard and runtime-env agents, workers) do not die with the process that
started them: after a ``kill -9`` of the server some lived on for minutes. The embedded cluster therefore starts
this file as a tiny watchdog process (stdlib only, run as a script: it imports nothing of Tessera, ~10 MB) in its
own session, so a signal to the server's process group does not take it down first. It polls every
``POLL_S`` whether the server is still its parent; once the server is gone it SIGKILLs every process carrying
the cluster's marker (``RAY_TMPDIR=<dir>`` in its environment — only processes the service started have it),
rescans until two scans in a row find none (a dying raylet may still fork), and exits. A clean server stop ends
the watchdog itself after shutting Ray down.

``python reaper.py SERVER_PID MARKER_DIR``
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

POLL_S = 0.5
SWEEP_S = 20.0  # longest it keeps rescanning after the server died


def marked_pids(marker_dir: str) -> list[int]:
    """Processes (other than this one) whose environment holds ``RAY_TMPDIR=<marker_dir>``."""
    me = os.getpid()
    needle = f"RAY_TMPDIR={marker_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            found.append(int(entry.name))
    return found


def kill_marked(marker_dir: str) -> list[int]:
    """SIGKILL every process of an embedded cluster of ours (see :func:`marked_pids`); the PIDs signalled."""
    killed = []
    for pid in marked_pids(marker_dir):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch(server_pid: int, marker_dir: str) -> None:
    """Wait for ``server_pid`` (our parent) to end, then kill what it left behind."""
    while os.getppid() == server_pid and _alive(server_pid):
        time.sleep(POLL_S)
    deadline = time.monotonic() + SWEEP_S
    quiet = 0
    while time.monotonic() < deadline and quiet < 2:
        quiet = 0 if kill_marked(marker_dir) else quiet + 1
        time.sleep(0.2)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the server must not end the watchdog
    watch(int(sys.argv[1]), sys.argv[2])
