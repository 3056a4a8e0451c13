"""A job's own model code (its ``entrypoint``) runs here: in a short-lived child process, never in the server.

The server must know a user model's shape (its ModelSpec, traced on meta tensors) and its Whale annotations to
plan it, and that means importing and calling the user's code. Done in the server, that code would run with
the server's rights and memory — even for a submission that is then refused. So the server starts
``python -m tessera.service.user_code`` for it with

- a wall-clock timeout (the whole process group is killed when it passes),
- an address-space limit (``RLIMIT_AS``), a file-size limit and no core dumps, set before anything is imported,
- a minimal environment (no token, no database URL; no GPUs visible),

and reads back only JSON (never a pickle: unpickling what user code could have written would run code in
the server). :func:`tessera.service.model_source.entrypoint_info` calls it and caches the answer.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MAX_RESULT_BYTES = 64 << 20  # a traced spec is a few KB per layer
# What the child may inherit from the server's environment: enough to find Python and its packages.
_ENV_KEEP = ("PATH", "HOME", "LANG", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR", "SYSTEMROOT")


class UserCodeTimeout(Exception):
    """The child checking a user model ran past its time limit (it was killed)."""


def user_code_env() -> dict[str, str]:
    """The environment a child running a user's code gets: enough to find Python and its packages."""
    env = {k: v for k, v in os.environ.items() if k in _ENV_KEEP or k.startswith("LC_")}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill what the child started too (it leads its own session, so its group is exactly its processes)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_user_code(request: dict[str, Any], *, timeout_s: float, memory_bytes: int) -> dict[str, Any]:
    """Run :func:`main` in a child on ``request`` ({entrypoint, model, seq_len}); its JSON answer:
    ``{"ok": true, "spec": ..., "taskgraphs": ..., "stage_count": ...}`` or ``{"ok": false, "reason": ...}``.
    Raises :class:`UserCodeTimeout` when it runs past ``timeout_s``."""
    with tempfile.TemporaryDirectory(prefix="tessera-usercode-") as tmp:
        req, out, log = Path(tmp, "request.json"), Path(tmp, "result.json"), Path(tmp, "stderr.txt")
        req.write_text(json.dumps(request))
        cmd = [sys.executable, "-m", "tessera.service.user_code", str(req), str(out), str(int(memory_bytes))]
        with log.open("wb") as err:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=user_code_env(),
                start_new_session=True,
                close_fds=True,
            )
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                proc.wait()
                raise UserCodeTimeout(
                    f"checking the model took longer than {timeout_s:g} s (the server's limit); "
                    "does importing or building it wait for something?"
                ) from None
            finally:
                _kill_group(proc)
        try:
            if out.is_file() and out.stat().st_size <= MAX_RESULT_BYTES:
                answer = json.loads(out.read_text())
                if isinstance(answer, dict):
                    return answer
        except (OSError, ValueError):
            pass
        tail = log.read_bytes()[-600:].decode(errors="replace").strip() if log.is_file() else ""
        how = f"was killed by signal {-rc}" if rc < 0 else f"exited with {rc}"
        hint = (
            f" (the memory limit is {memory_bytes / 2**30:.1f} GiB)"
            if rc < 0 or "MemoryError" in tail
            else ""
        )
        return {"ok": False, "reason": f"the model check {how}{hint}: {tail[-400:]}".rstrip(": ")}


def _limit(memory_bytes: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_RESULT_BYTES, MAX_RESULT_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main(argv: list[str] | None = None) -> None:
    """The child: limits first, then the user's code; the answer goes to the result file, then the process
    ends at once (no user ``atexit`` hook or thread keeps it alive)."""
    req_path, out_path, memory = argv if argv is not None else sys.argv[1:4]
    _limit(int(memory))
    try:
        request = json.loads(Path(req_path).read_text())
        from tessera.service.model_source import ModelSourceError, inspect_entrypoint

        try:
            answer: dict[str, Any] = {
                "ok": True,
                **inspect_entrypoint(request["entrypoint"], request["model"], int(request["seq_len"])),
            }
        except ModelSourceError as e:
            limit = f" (out of memory: the server lets the check use {int(memory) / 2**30:.1f} GiB)"
            answer = {"ok": False, "reason": e.reason + (limit if "MemoryError" in e.reason else "")}
    except MemoryError:
        answer = {
            "ok": False,
            "reason": f"the model check ran out of memory (limit {int(memory) / 2**30:.1f} GiB)",
        }
    except BaseException as e:  # SystemExit or KeyboardInterrupt from user code included
        answer = {"ok": False, "reason": f"the model check failed: {type(e).__name__}: {e}"}
    try:
        Path(out_path).write_text(json.dumps(answer, allow_nan=False))
    except (ValueError, OSError) as e:
        Path(out_path).write_text(json.dumps({"ok": False, "reason": f"the model check's answer: {e}"}))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
