"""What every `tessera` command shares: the consoles, one-line errors, flags that render as flags, and the
formatting of numbers that may be missing.

Its own module so that `tessera.cli` and `tessera.commands.*` both import it and never each other: the CLI
registers commands, commands render through these helpers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import wraps
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version
from typing import Any

import typer
import typer.core
from rich.console import Console

GiB = 2**30

console = Console()
if not console.is_terminal:  # piped or captured: wide tables instead of ellipses
    console = Console(width=200)
err_console = Console(stderr=True)


def tessera_version() -> str:
    """The installed distribution's version (what `tessera --version` prints)."""
    try:
        return _dist_version("tessera")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without an install
        return "0+unknown"


def fail(msg: str, code: int = 1) -> typer.Exit:
    """Print ``error: msg`` in red on stderr; the caller raises the returned Exit (exit code ``code``)."""
    err_console.print(f"[bold red]error:[/] {msg}", highlight=False)
    return typer.Exit(code)


def clean_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn expected user errors (KeyError, ValueError) into one red line and exit code 2, never a traceback."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (KeyError, ValueError) as e:
            msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            raise fail(str(msg), 2) from None

    return wrapper


# ------------------------------------------------------------------------------ numbers that may be missing
def num(x: float | None, fmt: str = ".4g", unit: str = "") -> str:
    """``x`` formatted (``-`` when missing or not finite): status lines never show ``None`` or 17 digits."""
    if x is None or not isinstance(x, int | float) or not math.isfinite(x):
        return "-"
    return f"{x:{fmt}}{unit}"


def ms(seconds: float | None, unit: str = " ms") -> str:
    """Seconds as milliseconds with two decimals (``-`` when missing)."""
    return "-" if seconds is None else num(seconds * 1e3, ".2f", unit)


# ------------------------------------------------------------------------------ an allocation's estimate
def measured_step(a: Mapping[str, Any]) -> float | None:
    """An allocation's (or job's) measured seconds per step of progress — the loop iteration a calibrated
    estimate predicts — or its training step where the loop was not timed."""
    return a.get("measured_step_s") or a.get("measured_iter_s")


def estimate_error(a: Mapping[str, Any] | None) -> float | None:
    """An allocation's estimate against its measured step: estimate ÷ measured − 1 (positive: estimated slow)."""
    measured = measured_step(a) if a else None
    if not a or not a.get("estimate_iter_s") or not measured:
        return None
    return a["estimate_iter_s"] / measured - 1.0


def knew_configuration(a: Mapping[str, Any]) -> bool:
    """The allocation's estimate was corrected by a measurement of its own configuration (on these GPU types
    or others): an estimate made after that configuration's first calibration."""
    # imported here: the scheduler's import is slow for every command
    from tessera.scheduler.factors import FactorBasis

    basis = a.get("estimate_basis")
    return basis is not None and FactorBasis(basis).knows_configuration


def correction_text(a: Mapping[str, Any]) -> str:
    """How an allocation's estimate corrected the cost model's (× 1 / its speed factor) and what the factor was
    read from, e.g. ``×1.61 (these types)``; ``-`` for allocations planned before estimates recorded it."""
    basis, factor = a.get("estimate_basis"), a.get("speed_factor")
    if basis is None or not factor:
        return "-"
    return f"×{1 / factor:.2f} ({str(basis).replace('_', ' ')})"


def allocation_steps(a: Mapping[str, Any]) -> int:
    """The steps an allocation ran (0 while its end is unknown)."""
    return (a.get("to_step") or 0) - (a.get("from_step") or 0)


# ------------------------------------------------------------------------------ flags rendered as flags
def _flags_as_flags(params: list[Any]) -> list[Any]:
    """Typer's rich help prints a boolean flag's type (``--json <bool>``) as if it took a value; a flag takes
    none, so its type column is left empty (help, completion and version flags included)."""
    for p in params:
        if isinstance(p, typer.core.TyperOption) and p.is_flag and p.metavar is None:
            p.metavar = ""
    return params


class FlagsCommand(typer.core.TyperCommand):
    """A command whose help shows boolean flags without a ``<bool>`` value."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_as_flags(super().get_params(ctx))


class FlagsGroup(typer.core.TyperGroup):
    """A command group whose help shows boolean flags without a ``<bool>`` value."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_as_flags(super().get_params(ctx))


class Typer(typer.Typer):
    """``typer.Typer`` whose commands and groups render boolean flags as flags (see :class:`FlagsCommand`)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", FlagsGroup)
        super().__init__(**kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", FlagsCommand)
        return super().command(*args, **kwargs)


# ------------------------------------------------------------------------------ shell completion of names
def complete_gpus(incomplete: str) -> list[str]:
    """GPU types of the catalog (``--gpu`` completion)."""
    from tessera.hardware import gpu_catalog

    return [n for n in gpu_catalog() if n.lower().startswith(incomplete.lower())]


def complete_clusters(incomplete: str) -> list[str]:
    """Shipped cluster presets (``--cluster`` completion; a YAML path completes as a file by the shell)."""
    from tessera.hardware import cluster_presets

    return [n for n in cluster_presets() if n.startswith(incomplete)]


def complete_models(incomplete: str) -> list[str]:
    """Zoo model names (``--model`` completion)."""
    from tessera.models.zoo import list_models

    return [e.name for e in list_models() if e.name.startswith(incomplete)]
