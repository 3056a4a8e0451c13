"""Trace loading: Philly layout, configurable columns, date-times, windows, and clear errors per line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.sim.trace import TraceError, load_csv, load_philly, window


def _write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_generic_csv_with_custom_columns_and_datetimes(tmp_path):
    p = _write(
        tmp_path,
        "id,when,secs,gpu\na,2020-01-01 00:10:00,600,2\nb,2020-01-01 00:00:00,60,1\n",
    )
    tr = load_csv(p, submit="when", duration="secs", gpus="gpu", job_id="id")
    assert [j.trace_id for j in tr.jobs] == ["b", "a"]  # sorted by submit
    assert [j.submit_s for j in tr.jobs] == [0.0, 600.0]
    assert tr.jobs[1].num_gpus == 2 and tr.jobs[1].line == 2
    w = window(tr, "2020-01-01 00:05:00", "2020-01-02")
    assert [j.trace_id for j in w.jobs] == ["a"] and w.jobs[0].submit_s == 300.0


@pytest.mark.parametrize(
    "row, msg",
    [
        ("5,abc,1", "line 3: column 'duration_s': 'abc' is not a number"),
        ("5,10,0", "line 3: column 'num_gpus': GPU count must be an integer >= 1"),
        ("5,10,1.5", "line 3: column 'num_gpus'"),
        ("5,-3,1", "line 3: column 'duration_s': duration must be > 0"),
        (",10,1", "line 3: column 'submit_time_s' is empty"),
        ("yesterday,10,1", "neither seconds nor a date-time"),
        ("5,10,1,9", "line 3: more fields than the header"),
    ],
)
def test_malformed_row_names_file_line_and_column(tmp_path, row, msg):
    p = _write(tmp_path, f"submit_time_s,duration_s,num_gpus\n0,10,1\n{row}\n")
    with pytest.raises(TraceError, match=msg):
        load_csv(p)


def test_missing_column_is_named(tmp_path):
    p = _write(tmp_path, "t,d\n0,1\n")
    with pytest.raises(TraceError, match="no submit column 'submit_time_s'"):
        load_csv(p)
    with pytest.raises(TraceError, match="no such trace file"):
        load_csv(tmp_path / "nope.csv")


def test_window_bounds_are_checked(tmp_path):
    tr = load_csv(_write(tmp_path, "submit_time_s,duration_s,num_gpus\n0,10,1\n100,10,1\n"))
    assert len(window(tr, 50, None)) == 1
    with pytest.raises(TraceError, match="--end must be after --start"):
        window(tr, 100, 50)
    with pytest.raises(TraceError, match="plain seconds"):
        window(tr, "2020-01-01", None)


def test_shipped_philly_trace_and_its_dense_window():
    tr = load_philly()  # the gzip copy shipped in the package: every row of the real trace
    assert len(tr) == 82247
    w = window(tr, "2017-10-09", "2017-10-23")
    assert len(w) == 26936
    assert sum(1 for j in w.jobs if j.num_gpus > 1) == 870
