"""What keeps the HTTP API safe to expose: confined file paths, a body-size limit, 422s that always encode.

The server reads files a job spec names (a ``data`` text file, a Hugging Face ``config.json`` as ``model``, the
``.py`` file of an ``entrypoint``) on the server's own file system. Only paths under the roots the operator
allows are accepted (``tessera server --allow-path DIR``; by default the directory the server started in,
its state directory and the package's examples), after symlinks are resolved, so ``/etc/shadow``,
``/proc/self/environ`` or ``../../etc/passwd`` are refused naming the field. The server's own secrets (its
token file, its SQLite database) are refused even under an allowed root.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import HTTPException

MAX_BODY_BYTES = 1 << 20  # 1 MiB: a job spec is a few hundred bytes; anything near this is not one

EXAMPLES_DIR = Path(__file__).resolve().parents[3] / "examples"  # a source checkout's examples folder


def default_roots(state_dir: Path, cwd: Path | None = None) -> tuple[Path, ...]:
    """The roots allowed when the operator names none: the server's working directory at start, its state
    directory and the package's examples (where they exist)."""
    roots = [Path.cwd() if cwd is None else cwd, state_dir]
    if EXAMPLES_DIR.is_dir():
        roots.append(EXAMPLES_DIR)
    return tuple(Path(r).resolve() for r in roots)


@dataclass(frozen=True)
class PathPolicy:
    """Roots a spec's files must lie under (resolved), and files refused even there."""

    roots: tuple[Path, ...]
    denied: tuple[Path, ...] = ()

    @classmethod
    def of(cls, roots: Iterable[Path], denied: Iterable[Path] = ()) -> PathPolicy:
        return cls(tuple(Path(r).resolve() for r in roots), tuple(Path(d).resolve() for d in denied))

    def check(self, field: str, raw: str) -> str | None:
        """None when ``raw`` (a path as the spec gives it) is allowed, else the reason, naming ``field``."""
        try:
            path = Path(raw).resolve()  # symlinks and ``..`` resolved before the check
        except (OSError, RuntimeError, ValueError) as e:  # a loop of links, a NUL byte
            return f"{field}: cannot resolve {raw!r}: {e}"
        if path in self.denied:
            return f"{raw!r} is one of the server's own files"
        if not any(path == r or path.is_relative_to(r) for r in self.roots):
            allowed = ", ".join(str(r) for r in self.roots) or "(none)"
            return (
                f"{raw!r} is outside the directories this server reads files from ({allowed}); "
                "the operator allows more with `tessera server --allow-path DIR`"
            )
        return None


def finite_json(value: Any, depth: int = 0) -> Any:
    """``value`` with everything JSON cannot hold made printable: non-finite floats become their name
    (``"NaN"``, ``"Infinity"``), integers too long for ``str`` (Python's 4,300-digit limit) a short note,
    and very deep nesting is cut — so an error echoing a client's input never fails to encode (a 500)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4000:
        return f"<an integer of about {int(value.bit_length() * 0.30103)} digits>"
    if depth > 32:
        return "<nested too deeply>"
    if isinstance(value, dict):
        return {str(finite_json(k, depth + 1)): finite_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(v, depth + 1) for v in value]
    return value


class BodyTooLarge(HTTPException):
    """The request body grew beyond the limit while it was being read (an HTTPException, so FastAPI's body
    parser lets it through as the 413 it is rather than a 400 parse error)."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"request body larger than {max_bytes} bytes (the limit of this server)")


class BodySizeLimit:
    """ASGI middleware: a request body above ``max_bytes`` gets 413 before anything parses it — at once when
    its Content-Length says so, else as soon as the streamed bytes pass the limit (chunked uploads)."""

    def __init__(self, app: Any, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _too_large(self, send: Any) -> None:
        body = b'{"detail":"request body larger than %d bytes (the limit of this server)"}' % self.max_bytes
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = self.max_bytes + 1  # not a length: refuse rather than guess
                if declared > self.max_bytes:
                    await self._too_large(send)
                    return
        seen = 0
        started = False

        async def limited_receive() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._too_large(send)


def field_of_reason(reason: str) -> str:
    """The spec field an infeasibility reason is about: the time it names is the global batch's fault when a
    single step takes longer than a day, else the step count's; a plan that fits nowhere is the model's (or
    the GPU exclusions' / cap's when it names them)."""
    import re

    low = reason.lower()
    per_step = re.search(r"([0-9.]+(?:e[+-]?[0-9]+)?) s per step", low)
    if per_step:
        return "global_batch" if float(per_step.group(1)) > 86400 else "steps"
    if "excluded" in low:
        return "exclude_gpu_types"
    if "max_gpus" in low:
        return "max_gpus"
    return "model"
