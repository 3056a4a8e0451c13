"""`tessera calibrate TELEMETRY.jsonl --plan PLAN.json`: learn from a measured run."""

from __future__ import annotations

import typer


def calibrate(
    telemetry: str = typer.Argument(..., help="telemetry JSONL written by `tessera train`"),
) -> None:
    """Update the cost model from a run's measured iteration times (not built yet)."""
    raise typer.Exit(2)
