"""A study of a trace file is labelled by that file, whatever its format (issue 21: not "philly")."""

from __future__ import annotations

import gzip

from tessera.sim.report import load_trace, trace_label
from tessera.sim.trace import PHILLY_COLUMNS


def test_trace_label_strips_csv_and_gz():
    assert trace_label("/x/philly-2018.csv.gz") == "philly-2018"
    assert trace_label("helios.csv") == "helios"
    assert trace_label("a.b.csv") == "a.b"


def test_a_philly_format_file_is_labelled_by_its_file(tmp_path):
    c = PHILLY_COLUMNS
    rows = [f"{c['id']},{c['submit']},{c['duration']},{c['gpus']}", "j0,0,600,1", "j1,60,1200,2"]
    p = tmp_path / "venus-2019.csv.gz"
    with gzip.open(p, "wt") as f:
        f.write("\n".join(rows) + "\n")
    trace, label = load_trace("philly", str(p))
    assert label == "venus-2019" and len(trace) == 2
    cols = {"submit": c["submit"], "duration": c["duration"], "gpus": c["gpus"], "id": c["id"]}
    _, label = load_trace("csv", str(p), cols)
    assert label == "venus-2019"
