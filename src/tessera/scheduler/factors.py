"""Speed factors: estimated ÷ measured iteration time, per configuration and per the GPU types it ran on.

An estimate's error has a part that belongs to the job (its model, its shapes) and a part that belongs to the
device type (how well that type's profile and calibration match it). A factor measured on one type and applied
on another carries the first type's error there: on the embedded cluster a job measured on ``cpu-half`` (whose
estimates ran about 1.4x low) was then priced 40 % slow on ``cpu-core``. So a factor is kept per
(configuration, GPU types); where an allocation's types were never measured for a configuration, the rule
(:meth:`SpeedFactors.resolve`) treats the two parts as multiplicative and moves the factor from the types it
was measured on to these by the ratio of the two types' factors for the configurations measured on both. Read
from configurations measured on only one of them, the ratio would carry their own errors: on the embedded
cluster a small model whose loop overhead the cost model does not price (its factor about 0.5) pulled
cpu-core's part down, and a job moved half → core was then estimated 28–50 % slow (the demo's summaries).
Configurations are keyed by their ``speed_key``: a job's limits on where it may run do not change how fast a
step runs where it does.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

from tessera.scheduler.state import GPUs, JobConfig

TypesKey = tuple[str, ...]  # the sorted GPU type names of an allocation


def types_of(gpus: GPUs) -> TypesKey:
    """The allocation's GPU types, sorted (counts left out: the cost model scales with the count)."""
    return tuple(sorted({t for t, n in gpus if n > 0}))


class FactorBasis(StrEnum):
    """What a factor was read from (:meth:`SpeedFactors.resolve`'s rules, in order): a user is shown whether an
    estimate already knew how fast its configuration runs, or only how its device types err. The value is what
    an allocation records: the configuration measured on these GPU types, on other types (moved by
    :meth:`SpeedFactors.ratio`), other configurations measured on these types, the median of every measured
    configuration, nothing measured."""

    THESE_TYPES = "these_types"
    OTHER_TYPES = "other_types"
    DEVICE_TYPES = "device_types"
    ALL = "all"
    NONE = "none"

    @property
    def knows_configuration(self) -> bool:
        """The estimate was corrected by a measurement of the configuration itself."""
        return self in (FactorBasis.THESE_TYPES, FactorBasis.OTHER_TYPES)


@dataclass(frozen=True)
class SpeedFactors:
    """Measured factors by (configuration's ``speed_key``, GPU types); :meth:`of` answers for any
    allocation of any configuration."""

    measured: Mapping[tuple[JobConfig, TypesKey], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        keys = [(c.speed_key, t) for c, t in self.measured]
        if len(set(keys)) != len(keys):
            raise ValueError("measured: two factors for one configuration's speed_key and GPU types")

    @cached_property
    def _by_types(self) -> dict[TypesKey, float]:
        """Each GPU-types key's part: the median factor of the configurations measured on it."""
        vals: dict[TypesKey, list[float]] = {}
        for (_, types), f in self.measured.items():
            vals.setdefault(types, []).append(f)
        return {t: statistics.median(v) for t, v in vals.items()}

    @cached_property
    def _by_config(self) -> dict[JobConfig, dict[TypesKey, float]]:
        out: dict[JobConfig, dict[TypesKey, float]] = {}
        for (config, types), f in self.measured.items():
            out.setdefault(config.speed_key, {})[types] = f
        return out

    @cached_property
    def _median(self) -> float:
        return statistics.median(self.measured.values()) if self.measured else 1.0

    def of(self, config: JobConfig, gpus: GPUs) -> float:
        """The factor for ``config`` on ``gpus`` (:meth:`resolve`)."""
        return self.resolve(config, gpus)[0]

    def resolve(self, config: JobConfig, gpus: GPUs) -> tuple[float, FactorBasis]:
        """The factor for ``config`` on ``gpus`` and what it was read from, in this order:

        1. measured on these GPU types: that factor;
        2. measured on other types: the median over them of that factor × :meth:`ratio` (these types ÷ those);
        3. never measured: these types' part (the median factor of the configurations measured on them), else
           the median of every factor, else 1.0.
        """
        types = types_of(gpus)
        mine = self._by_config.get(config.speed_key)
        if mine:
            f = mine.get(types)
            if f is not None:
                return f, FactorBasis.THESE_TYPES
            return statistics.median(
                f * self.ratio(types, t) for t, f in mine.items()
            ), FactorBasis.OTHER_TYPES
        if types in self._by_types:
            return self._by_types[types], FactorBasis.DEVICE_TYPES
        if self.measured:
            return self._median, FactorBasis.ALL
        return 1.0, FactorBasis.NONE

    def ratio(self, here: TypesKey, there: TypesKey) -> float:
        """How a factor measured on ``there`` moves to ``here``: the median over the configurations measured on
        both of their factor here ÷ their factor there; 1.0 where none was (the cost model's relative speeds of
        the two types stand)."""
        pairs = [c[here] / c[there] for c in self._by_config.values() if here in c and there in c]
        return statistics.median(pairs) if pairs else 1.0


__all__ = ["FactorBasis", "SpeedFactors", "TypesKey", "types_of"]
