"""bench/provenance.py: every bench JSON that uses it names the commit it ran on."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _provenance() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_provenance", ROOT / "bench" / "provenance.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_header_names_this_checkouts_commit() -> None:
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    header = _provenance().run_header("x", "x.py")
    assert header["benchmark"] == "x" and header["command"].startswith("python bench/x.py")
    assert header["code"]["commit"] == head
    assert isinstance(header["code"]["dirty"], bool)
    assert header["machine"]["cpus"] >= 1
