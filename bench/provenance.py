"""What a bench's JSON says about the run it came from: the command, the code (commit, and whether the working
tree differed from it) and the machine — so a committed figure can be traced to the code that printed it."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def code_version() -> dict[str, str | bool | None]:
    """The checkout's commit and whether tracked files differ from it (None outside a git checkout)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


# the code as the bench started (this module is imported then): a commit made while a long bench runs is not its
AT_START = code_version()


def run_header(benchmark: str, script: str) -> dict[str, object]:
    """The fields every JSON of ``script`` (bench/<name>.py) starts with; ``code`` as the bench started."""
    return {
        "benchmark": benchmark,
        "command": f"python bench/{script} " + " ".join(sys.argv[1:]),
        "code": AT_START,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }
