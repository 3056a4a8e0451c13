"""`tessera profile …`: measure what the cost model would otherwise assume (layer times, collectives)."""

from __future__ import annotations

import typer

profile_app = typer.Typer(
    help="Measure layer times and collective tables on the machine at hand; saved for every later estimate.",
    no_args_is_help=True,
)
