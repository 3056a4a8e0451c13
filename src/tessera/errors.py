"""Errors every layer raises for bad names, so the CLI and API can answer with one clear line."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


class UnknownNameError(KeyError):
    """A catalog lookup that failed; the message lists the nearest known names."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        known = list(known)
        near = difflib.get_close_matches(name, known, n=3, cutoff=0.4)
        if not near:
            low = name.lower()
            near = [k for k in known if low[:3] and low[:3] in k.lower()][:3]
        hint = f"; did you mean {', '.join(near)}?" if near else f"; known: {', '.join(sorted(known)[:12])}"
        self.message = f"unknown {kind} {name!r}{hint}"
        super().__init__(self.message)
        self.kind = kind
        self.name = name
        self.suggestions = near

    def __str__(self) -> str:
        return self.message


def validation_message(source: str, err: Any) -> str:
    """One line for a pydantic ``ValidationError``: the source, the first failing field and its reason."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    where = f"{loc}: " if loc else ""
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{source}: {where}{msg}{more}"
