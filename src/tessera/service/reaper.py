"""Nothing of the embedded Ray outlives the server, even a server killed with SIGKILL.

Ray's daemons (GCS, raylets, dashboard and runtime-env agents, workers) do not die with the process that
started them: after a ``kill -9`` of the server some lived on for minutes. The embedded cluster therefore starts
this file as a tiny watchdog process (stdlib only, run as a script: it imports nothing of Tessera, ~10 MB) in its
own session, so a signal to the server's process group does not take it down first. While the server lives, it
records the server's process tree every ``TREE_S`` (PID + start time, so a reused PID is never killed). Once the
server is gone it SIGKILLs every recorded process still running, their descendants, and every process carrying
the cluster's marker (``RAY_TMPDIR=<dir>`` in its environment) — the marker alone is not enough: Ray's agents
retitle themselves (``ray::DashboardAgent``), which can overwrite the environment ``/proc`` shows — then rescans
until two scans in a row find nothing (a dying raylet may still fork), and exits. A clean server stop ends the
watchdog itself after shutting Ray down.

``python reaper.py SERVER_PID MARKER_DIR``
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

POLL_S = 0.5  # how often it checks that the server still runs
TREE_S = 1.0  # how often it records the server's process tree
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


def process_table() -> dict[int, tuple[int, int, str]]:
    """Every process: pid → (parent pid, start time in clock ticks, state letter)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            out[int(entry.name)] = (int(fields[1]), int(fields[19]), fields[0])
    return out


def descendants(roots: set[int], table: dict[int, tuple[int, int, str]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out: set[int] = set()
    todo = list(roots)
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def watch(server_pid: int, marker_dir: str) -> None:
    """Record ``server_pid``'s process tree while it (our parent) runs, then kill what it left behind."""
    me = os.getpid()
    known: dict[int, int] = {}  # pid → start time
    last_tree = 0.0
    while os.getppid() == server_pid and _alive(server_pid):
        if time.monotonic() - last_tree >= TREE_S:
            table = process_table()
            for pid in descendants({server_pid}, table):
                known[pid] = table[pid][1]
            last_tree = time.monotonic()
        time.sleep(POLL_S)
    deadline = time.monotonic() + SWEEP_S
    quiet = 0
    while time.monotonic() < deadline and quiet < 2:
        table = process_table()
        targets = {p for p, start in known.items() if p in table and table[p][1] == start}
        targets |= set(marked_pids(marker_dir))
        targets |= descendants(targets, table)
        targets = {p for p in targets if p != me and p in table and table[p][2] != "Z"}
        for pid in targets:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        quiet = 0 if targets else quiet + 1
        time.sleep(0.2)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the server must not end the watchdog
    watch(int(sys.argv[1]), sys.argv[2])
