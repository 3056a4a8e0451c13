"""What the estimator knows beyond datasheets, in one bundle: measured layer profiles, measured communication
tables, efficiency curves, and the calibration factors learned from runtime telemetry.

Why one bundle: the profiler, ``tessera profile comm`` and calibration each add to it, and every estimate (Cells,
tuner, ``tessera estimate``) reads all of it; keeping it in one directory (``$TESSERA_HOME/perf``, default
``~/.cache/tessera/perf``) means a measurement taken once is used everywhere afterwards.

Files in the directory: ``profile.json`` (:class:`Profile`), ``comm.json`` (:class:`CommTable`),
``calibration.json`` (curves and scale factors). Missing files mean "nothing measured yet".
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tessera.perf.comm import CommTable
from tessera.perf.compute import EfficiencyCurve, Profile

PROFILE_FILE = "profile.json"
COMM_FILE = "comm.json"
CALIBRATION_FILE = "calibration.json"


def default_dir() -> Path:
    """Where measurements persist: ``$TESSERA_HOME/perf`` or ``~/.cache/tessera/perf``."""
    home = os.environ.get("TESSERA_HOME")
    base = Path(home) if home else Path.home() / ".cache" / "tessera"
    return base / "perf"


@dataclass
class CostModel:
    """Measured inputs of the cost model. Empty = pure roofline + alpha-beta from the datasheets.

    ``compute_scale[device_type]`` multiplies every layer time on that device type (roofline or profile) and
    ``comm_scale[link_kind]`` every collective on that link class: calibration's correction of what the model
    still gets wrong after profiling (framework overhead, contention), learned from measured iterations.
    """

    profile: Profile = field(default_factory=Profile)
    comm_table: CommTable = field(default_factory=CommTable)
    curves: dict[str, EfficiencyCurve] = field(default_factory=dict)
    compute_scale: dict[str, float] = field(default_factory=dict)
    comm_scale: dict[str, float] = field(default_factory=dict)

    def compute_factor(self, device_type: str) -> float:
        return self.compute_scale.get(device_type, 1.0)

    def comm_factor(self, link_kind: str) -> float:
        return self.comm_scale.get(link_kind, 1.0)

    # ------------------------------------------------------------------ persistence
    def calibration_dict(self) -> dict[str, Any]:
        return {
            "curves": {k: asdict(v) for k, v in self.curves.items()},
            "compute_scale": dict(self.compute_scale),
            "comm_scale": dict(self.comm_scale),
        }

    def save(self, directory: str | Path | None = None) -> Path:
        d = Path(directory) if directory is not None else default_dir()
        d.mkdir(parents=True, exist_ok=True)
        self.profile.save(d / PROFILE_FILE)
        self.comm_table.save(d / COMM_FILE)
        (d / CALIBRATION_FILE).write_text(json.dumps(self.calibration_dict(), indent=1))
        return d

    @classmethod
    def load(cls, directory: str | Path | None = None) -> CostModel:
        """The bundle saved in ``directory`` (default: :func:`default_dir`); absent files load as empty."""
        d = Path(directory) if directory is not None else default_dir()
        model = cls()
        if (d / PROFILE_FILE).exists():
            model.profile = Profile.load(d / PROFILE_FILE)
        if (d / COMM_FILE).exists():
            model.comm_table = CommTable.load(d / COMM_FILE)
        if (d / CALIBRATION_FILE).exists():
            raw = json.loads((d / CALIBRATION_FILE).read_text())
            model.curves = {k: EfficiencyCurve(**v) for k, v in raw.get("curves", {}).items()}
            model.compute_scale = {k: float(v) for k, v in raw.get("compute_scale", {}).items()}
            model.comm_scale = {k: float(v) for k, v in raw.get("comm_scale", {}).items()}
        return model
