"""Job traces: the Philly CSV and any CSV with a submit time, a duration and a GPU count.

A trace row becomes a :class:`TraceJob` (submit time in seconds since the trace's epoch, observed duration,
requested GPUs). Column names are configurable; the submit column may hold seconds or date-times. A malformed
row is an error naming the file, the line and the column — never silently dropped. :func:`window` selects the
jobs submitted in [start, end) and re-bases their times to the window start.
"""

from __future__ import annotations

import csv
import gzip
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

PHILLY_EPOCH = datetime(2017, 9, 4, 10, 30, 41)  # the first submit in shared/traces/philly.csv
PHILLY_COLUMNS = {"submit": "submit_time_s", "duration": "duration_s", "gpus": "num_gpus", "id": "job_id"}
DATETIME_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d")


class TraceError(ValueError):
    """A trace that cannot be read: one line naming the file, the line and the field."""


@dataclass(frozen=True)
class TraceJob:
    """One trace row: ``submit_s`` seconds after the trace epoch, ``duration_s`` observed run time on
    ``num_gpus`` GPUs; ``line`` is the file line it came from."""

    trace_id: str
    submit_s: float
    duration_s: float
    num_gpus: int
    line: int = 0


@dataclass(frozen=True)
class Trace:
    jobs: tuple[TraceJob, ...]
    epoch: datetime | None = None  # the date-time of t = 0 (None when times are plain seconds)
    source: str = ""

    def __len__(self) -> int:
        return len(self.jobs)


def parse_time(text: str) -> datetime | None:
    for fmt in DATETIME_FORMATS:
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
    return None


def _number(path: str, line: int, col: str, raw: str | None) -> float:
    if raw is None or raw.strip() == "":
        raise TraceError(f"{path}, line {line}: column {col!r} is empty")
    try:
        x = float(raw)
    except ValueError:
        raise TraceError(f"{path}, line {line}: column {col!r}: {raw!r} is not a number") from None
    if not math.isfinite(x):
        raise TraceError(f"{path}, line {line}: column {col!r}: {raw!r} is not finite")
    return x


def load_csv(
    path: str | Path,
    *,
    submit: str = "submit_time_s",
    duration: str = "duration_s",
    gpus: str = "num_gpus",
    job_id: str | None = None,
    epoch: datetime | None = None,
) -> Trace:
    """Read a CSV trace. ``submit`` holds seconds (relative to ``epoch`` if given) or date-times (then the
    earliest is the epoch unless ``epoch`` is given); ``duration`` seconds > 0; ``gpus`` an integer >= 1."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{p}: no such trace file")
    src = str(p)
    rows: list[TraceJob] = []
    stamps: list[datetime | None] = []
    with gzip.open(p, "rt", newline="") if p.suffix == ".gz" else p.open(newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        for col, what in ((submit, "submit"), (duration, "duration"), (gpus, "gpus")):
            if col not in header:
                raise TraceError(
                    f"{src}, line 1: no {what} column {col!r} (columns: {', '.join(header) or 'none'})"
                )
        if job_id is not None and job_id not in header:
            raise TraceError(f"{src}, line 1: no id column {job_id!r} (columns: {', '.join(header)})")
        for k, row in enumerate(reader):
            line = reader.line_num
            if None in row:
                raise TraceError(f"{src}, line {line}: more fields than the header has")
            raw_submit = row.get(submit)
            if raw_submit is None or raw_submit.strip() == "":
                raise TraceError(f"{src}, line {line}: column {submit!r} is empty")
            stamp: datetime | None = None
            try:
                t = float(raw_submit)
                if not math.isfinite(t):
                    raise ValueError
            except ValueError:
                stamp = parse_time(raw_submit)
                if stamp is None:
                    raise TraceError(
                        f"{src}, line {line}: column {submit!r}: {raw_submit!r} is neither seconds nor a date-time"
                    ) from None
                t = 0.0
            d = _number(src, line, duration, row.get(duration))
            if d <= 0:
                raise TraceError(f"{src}, line {line}: column {duration!r}: duration must be > 0, got {d:g}")
            g = _number(src, line, gpus, row.get(gpus))
            if g < 1 or g != int(g):
                raise TraceError(
                    f"{src}, line {line}: column {gpus!r}: GPU count must be an integer >= 1, got {g:g}"
                )
            tid = row[job_id] if job_id else str(k)
            rows.append(TraceJob(str(tid), t, d, int(g), line))
            stamps.append(stamp)
    kinds = {s is None for s in stamps}
    if len(kinds) > 1:
        bad = next(r.line for r, s in zip(rows, stamps, strict=True) if (s is None) != (stamps[0] is None))
        raise TraceError(f"{src}, line {bad}: column {submit!r} mixes seconds and date-times")
    if stamps and stamps[0] is not None:
        base = epoch or min(s for s in stamps if s is not None)
        rows = [
            replace(r, submit_s=(s - base).total_seconds())  # type: ignore[operator]
            for r, s in zip(rows, stamps, strict=True)
        ]
        epoch = base
    rows.sort(key=lambda r: (r.submit_s, r.line))
    return Trace(tuple(rows), epoch, src)


def load_philly(path: str | Path | None = None) -> Trace:
    """The Philly job table (``shared/traces/philly.csv`` layout: seconds since 2017-09-04 10:30:41)."""
    p = Path(path) if path is not None else default_philly_path()
    c = PHILLY_COLUMNS
    return load_csv(
        p, submit=c["submit"], duration=c["duration"], gpus=c["gpus"], job_id=c["id"], epoch=PHILLY_EPOCH
    )


def default_philly_path() -> Path:
    """Where the Philly trace is looked for: ``$TESSERA_PHILLY``, else the copy shipped with the package
    (``tessera/sim/traces/philly.csv.gz``, CC BY 4.0 — see the README beside it)."""
    import os

    env = os.environ.get("TESSERA_PHILLY")
    if env:
        return Path(env)
    shipped = Path(__file__).resolve().parent / "traces" / "philly.csv.gz"
    if shipped.is_file():
        return shipped
    raise TraceError("philly trace not found: pass --trace-file or set TESSERA_PHILLY")


def resolve_time(trace: Trace, value: str | float | None, flag: str) -> float | None:
    """A window bound as seconds since the trace epoch: a number of seconds, or a date-time when the trace
    has an epoch."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(value)
    except ValueError:
        pass
    stamp = parse_time(value)
    if stamp is None:
        raise TraceError(f"{flag}: {value!r} is neither seconds nor a date (YYYY-MM-DD[ HH:MM:SS])")
    if trace.epoch is None:
        raise TraceError(f"{flag}: this trace's times are plain seconds; give the bound in seconds")
    return (stamp - trace.epoch).total_seconds()


def window(trace: Trace, start: str | float | None = None, end: str | float | None = None) -> Trace:
    """The jobs submitted in [start, end), times re-based so the window starts at 0 (the epoch moves too)."""
    lo = resolve_time(trace, start, "--start")
    hi = resolve_time(trace, end, "--end")
    if lo is not None and hi is not None and hi <= lo:
        raise TraceError(f"--end must be after --start ({end} <= {start})")
    base = lo if lo is not None else (trace.jobs[0].submit_s if trace.jobs else 0.0)
    sel = [
        replace(j, submit_s=j.submit_s - base)
        for j in trace.jobs
        if (lo is None or j.submit_s >= lo) and (hi is None or j.submit_s < hi)
    ]
    epoch = trace.epoch + timedelta(seconds=base) if trace.epoch is not None else None
    return Trace(tuple(sel), epoch, trace.source)


def densify(trace: Trace, density: float) -> Trace:
    """Submit times divided by ``density`` (Pollux's load scaling; Crius §8.7 raises submission density to
    study heavy load): the same jobs, arriving ``density`` times as fast."""
    if density <= 0:
        raise TraceError(f"--density: must be > 0, got {density}")
    if density == 1:
        return trace
    return Trace(
        tuple(replace(j, submit_s=j.submit_s / density) for j in trace.jobs), trace.epoch, trace.source
    )


def window_length(trace: Trace, start: str | float | None, end: str | float | None) -> float | None:
    lo, hi = resolve_time(trace, start, "--start"), resolve_time(trace, end, "--end")
    if lo is None or hi is None:
        return None
    return hi - lo


__all__: Sequence[str] = [
    "PHILLY_EPOCH",
    "Trace",
    "TraceError",
    "TraceJob",
    "load_csv",
    "load_philly",
    "window",
]
