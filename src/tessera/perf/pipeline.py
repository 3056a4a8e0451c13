"""Iteration time of a pipeline (GPipe or 1F1B) from per-stage times (Crius §5.1's composition).

With ``S`` stages whose per-micro-batch forward + backward times are ``t_i = f_i + b_i``, ``B`` micro-batches,
and ``p_j`` the send/recv time across boundary ``j`` for one micro-batch's activation (the gradient going back
costs the same):

    iteration = Σ_i t_i + Σ_j 2·p_j + (B − 1) · max_i t_i + dp_sync

The first micro-batch traverses every stage forward and back (the fill and drain), paying every boundary's
send/recv twice; after it, the slowest stage is busy all the time and every other transfer hides behind
compute. GPipe and 1F1B have the same time under this model (1F1B only lowers the activation memory), so the
schedule does not change the number; it stays a parameter so a finer model can tell them apart.

Rewritten as ``B · max t + (Σ t − max t) + comm`` the three parts are the bottleneck stage's busy time
(``steady_s``), the pipeline bubble (``bubble_s``) and the exposed communication.

**Interleaved 1F1B** (Megatron-LM's virtual pipeline: each device holds ``v`` chunks of ``1/v`` of its layers,
placed round-robin, so a micro-batch visits every device ``v`` times; Narayanan et al., SC 2021, §2.2.2) shrinks
the fill and drain to ``1/v`` of the plain schedule's — the bubble fraction becomes ``(S − 1)/(v · B)`` — at the
price of ``v`` times the point-to-point traffic: the first micro-batch crosses ``v · S − 1`` chunk boundaries each
way (every device boundary ``v`` times, and the last device hands back to the first ``v − 1`` times). It needs
``B`` to be a multiple of ``S`` (Megatron's schedule requirement).

Data-parallel gradient sync ends each stage's iteration after its last backward; stages sync concurrently on
disjoint devices, so the slowest stage's sync is added. ``dp_sync_s`` is what each stage leaves exposed: how much
of it the last micro-batch's backward hides depends on the plan's precision and on the gradient buckets, which
the caller knows (:func:`tessera.perf.estimate.dp_exposed_s`), not on the schedule, so it is priced there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SCHEDULES = ("gpipe", "1f1b")


@dataclass(frozen=True)
class PipelineTime:
    """One iteration's time and its parts: iteration_time_s = steady_s + bubble_s + p2p_s + dp_sync_s."""

    iteration_time_s: float
    steady_s: float  # B × slowest stage's fwd + bwd
    bubble_s: float  # Σ stage times − slowest (fill and drain)
    p2p_s: float  # boundary send/recv of the first micro-batch, forward and backward
    dp_sync_s: float  # exposed data-parallel gradient sync
    bottleneck_stage: int


def pipeline_time(
    fwd_s: Sequence[float],
    bwd_s: Sequence[float],
    micro_batches: int,
    *,
    schedule: str = "1f1b",
    p2p_s: Sequence[float] = (),
    dp_sync_s: Sequence[float] = (),
    virtual_stages: int = 1,
    wrap_p2p_s: float | None = None,
) -> PipelineTime:
    """Iteration time of ``len(fwd_s)`` stages, per the formula in the module docstring.

    ``fwd_s``/``bwd_s``: per-stage seconds for one micro-batch; ``p2p_s``: one micro-batch's send/recv seconds
    across each of the ``S − 1`` boundaries; ``dp_sync_s``: per-stage exposed gradient sync seconds (or empty).
    ``virtual_stages``: chunks per device of the interleaved 1F1B schedule (1 = plain); ``wrap_p2p_s``: the
    last device's send to the first under interleaving (default: the mean boundary time).
    """
    n = len(fwd_s)
    if n == 0 or len(bwd_s) != n:
        raise ValueError(
            f"need one forward and one backward time per stage, got {len(fwd_s)} and {len(bwd_s)}"
        )
    if micro_batches < 1:
        raise ValueError(f"micro_batches must be >= 1, got {micro_batches}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: {schedule!r} is not one of {', '.join(SCHEDULES)}")
    if p2p_s and len(p2p_s) != n - 1:
        raise ValueError(f"{len(p2p_s)} boundary times for {n} stages (need {n - 1})")
    if dp_sync_s and len(dp_sync_s) != n:
        raise ValueError(f"{len(dp_sync_s)} DP sync times for {n} stages")
    v = int(virtual_stages)
    if v < 1:
        raise ValueError(f"virtual_stages must be >= 1, got {virtual_stages}")
    if v > 1:
        if schedule != "1f1b":
            raise ValueError(f"virtual_stages: the interleaved schedule is 1F1B's, not {schedule!r}")
        if n > 1 and micro_batches % n:
            raise ValueError(
                f"virtual_stages: interleaved 1F1B needs micro_batches ({micro_batches}) to be a multiple of "
                f"the stages ({n})"
            )
    t = [f + b for f, b in zip(fwd_s, bwd_s, strict=True)]
    slowest = max(range(n), key=lambda i: t[i])
    steady = micro_batches * t[slowest]
    bubble = (sum(t) - t[slowest]) / v
    p2p = 2.0 * sum(p2p_s)
    if v > 1 and n > 1:
        wrap = wrap_p2p_s if wrap_p2p_s is not None else (sum(p2p_s) / len(p2p_s) if p2p_s else 0.0)
        p2p = v * p2p + 2.0 * (v - 1) * wrap
    dp = max(dp_sync_s) if dp_sync_s else 0.0
    return PipelineTime(
        iteration_time_s=steady + bubble + p2p + dp,
        steady_s=steady,
        bubble_s=bubble,
        p2p_s=p2p,
        dp_sync_s=dp,
        bottleneck_stage=slowest,
    )
