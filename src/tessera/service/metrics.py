"""``/metrics``: the service in Prometheus' text format, for the tools operators already run.

Every figure is read from the job store and the controller at scrape time by one custom collector, so nothing
is counted twice or drifts from what ``/api/jobs`` says, and a restarted server reports the same totals (they
live in the store). One registry per app: two servers in one process (tests) never share metrics.

Metrics (all prefixed ``tessera_``):

* ``jobs{state}`` — jobs by state, every state listed (0 when none);
* ``queue_length`` and ``queue_oldest_wait_seconds`` — pending jobs and how long the oldest has waited;
* ``job_queue_wait_seconds`` — histogram of submission → first start over the jobs that started;
* ``gpus{gpu_type}`` / ``gpus_allocated{gpu_type}`` — GPUs of live nodes, and GPUs held by active jobs;
* ``scheduler_last_decision_seconds``, ``scheduler_last_round_timestamp_seconds``,
  ``scheduler_last_round_decided``, ``scheduler_last_round_changes``, ``scheduler_round_interval_seconds`` —
  the controller's last round (the controller keeps no history of rounds, so neither do these);
* ``jobs_submitted_total`` — submissions accepted (idempotent retries count once);
* ``job_restarts_total`` / ``job_rescales_total`` — relaunches after failures and rescales, over all jobs;
* per active job (labels ``job_id``, ``name``): ``job_samples_per_second`` (global batch / measured iteration
  time), ``job_iteration_seconds`` (measured), ``job_estimated_iteration_seconds``, ``job_steps_done``,
  ``job_total_steps``, ``job_restarts``.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tessera.service.states import ACTIVE, JobState

#: upper bounds (s) of the queue-wait histogram: from a demo's seconds to a busy cluster's days
WAIT_BUCKETS_S = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 12 * 3600, 86400, 3 * 86400)


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


class ServiceCollector(Collector):
    """Reads the store and the controller of one :class:`tessera.service.server.Service` at every scrape."""

    def __init__(self, service: Any) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        jobs = self.service.store.list_jobs()
        yield from self._jobs(jobs, now)
        yield from self._gpus(jobs)
        yield from self._scheduler()
        yield from self._per_job(jobs)

    # -------------------------------------------------------------- jobs, queue, totals
    def _jobs(self, jobs: list[Any], now: float) -> Iterator[Metric]:
        by_state = GaugeMetricFamily("tessera_jobs", "Jobs by state.", labels=["state"])
        counts = {s: 0 for s in JobState}
        for j in jobs:
            counts[j.state] += 1
        for s, n in counts.items():
            by_state.add_metric([s.value], n)
        yield by_state
        pending = [j for j in jobs if j.state == JobState.PENDING]
        yield GaugeMetricFamily(
            "tessera_queue_length", "Jobs waiting for GPUs (PENDING).", value=len(pending)
        )
        oldest = max((now - j.submitted_at for j in pending), default=0.0)
        yield GaugeMetricFamily(
            "tessera_queue_oldest_wait_seconds",
            "How long the longest-waiting pending job has waited since submission (0: empty queue).",
            value=max(0.0, oldest),
        )
        waits = sorted(max(0.0, j.started_at - j.submitted_at) for j in jobs if j.started_at is not None)
        buckets, i = [], 0
        for bound in WAIT_BUCKETS_S:
            while i < len(waits) and waits[i] <= bound:
                i += 1
            buckets.append((str(float(bound)), i))
        buckets.append(("+Inf", len(waits)))
        yield HistogramMetricFamily(
            "tessera_job_queue_wait_seconds",
            "Submission to first start, over the jobs that have started.",
            buckets=buckets,
            sum_value=sum(waits),
        )
        yield CounterMetricFamily(
            "tessera_jobs_submitted",
            "Submissions accepted (a retried submission with the same Idempotency-Key counts once).",
            value=len(jobs),
        )
        yield CounterMetricFamily(
            "tessera_job_restarts",
            "Relaunches from a checkpoint after a failure, over all jobs.",
            value=sum(j.restarts for j in jobs),
        )
        yield CounterMetricFamily(
            "tessera_job_rescales",
            "Rescales and migrations, over all jobs.",
            value=sum(j.rescales for j in jobs),
        )

    # -------------------------------------------------------------- GPUs
    def _gpus(self, jobs: list[Any]) -> Iterator[Metric]:
        total = GaugeMetricFamily("tessera_gpus", "GPUs of live nodes, by type.", labels=["gpu_type"])
        allocated = GaugeMetricFamily(
            "tessera_gpus_allocated", "GPUs held by active jobs, by type.", labels=["gpu_type"]
        )
        types: dict[str, int] = {}
        live = getattr(self.service.controller, "live", None)
        for n in getattr(live, "nodes", ()) or ():
            if getattr(n, "alive", True):
                types[n.gpu_type] = types.get(n.gpu_type, 0) + int(n.n_gpus)
        used = dict.fromkeys(types, 0)
        for j in jobs:
            if j.state in ACTIVE and j.allocation:
                for t, k in (j.allocation.get("gpus") or {}).items():
                    used[t] = used.get(t, 0) + int(k)
        for t, n in sorted(types.items()):
            total.add_metric([t], n)
        for t, n in sorted(used.items()):
            allocated.add_metric([t], n)
        yield total
        yield allocated

    # -------------------------------------------------------------- the scheduler's last round
    def _scheduler(self) -> Iterator[Metric]:
        ctl = self.service.controller
        last = dict(getattr(ctl, "last_round", None) or {})
        yield GaugeMetricFamily(
            "tessera_scheduler_round_interval_seconds",
            "Seconds between periodic scheduling rounds (rounds also run at submissions and job ends).",
            value=float(self.service.config.round_s),
        )
        if not last:
            return
        yield GaugeMetricFamily(
            "tessera_scheduler_last_round_timestamp_seconds",
            "Unix time of the last scheduling round.",
            value=_finite(last.get("at")) or 0.0,
        )
        yield GaugeMetricFamily(
            "tessera_scheduler_last_round_decided",
            "1 when the policy was asked in the last round (something happened), else 0.",
            value=1.0 if last.get("decided") else 0.0,
        )
        yield GaugeMetricFamily(
            "tessera_scheduler_last_decision_seconds",
            "Wall time the policy took to decide in the last round (0 when it was not asked).",
            value=_finite(last.get("decision_s")) or 0.0,
        )
        yield GaugeMetricFamily(
            "tessera_scheduler_last_round_changes",
            "Jobs started, rescaled, migrated or preempted by the last round.",
            value=len(last.get("changes") or ()),
        )

    # -------------------------------------------------------------- per active job
    def _per_job(self, jobs: list[Any]) -> Iterator[Metric]:
        labels = ["job_id", "name"]
        fams = {
            "sps": GaugeMetricFamily(
                "tessera_job_samples_per_second",
                "Training throughput of an active job: global batch / measured iteration time.",
                labels=labels,
            ),
            "iter": GaugeMetricFamily(
                "tessera_job_iteration_seconds", "Measured iteration time of an active job.", labels=labels
            ),
            "est": GaugeMetricFamily(
                "tessera_job_estimated_iteration_seconds",
                "The cost model's iteration time of an active job's allocation.",
                labels=labels,
            ),
            "done": GaugeMetricFamily(
                "tessera_job_steps_done", "Steps done by an active job.", labels=labels
            ),
            "total": GaugeMetricFamily("tessera_job_total_steps", "Steps an active job runs.", labels=labels),
            "restarts": GaugeMetricFamily(
                "tessera_job_restarts_current", "Relaunches of an active job so far.", labels=labels
            ),
        }
        for j in jobs:
            if j.state not in ACTIVE:
                continue
            key = [str(j.id), j.name]
            measured = _finite(j.measured_iter_s)
            if measured:
                fams["iter"].add_metric(key, measured)
                batch = _finite(json.loads(j.spec_json).get("global_batch"))
                if batch:
                    fams["sps"].add_metric(key, batch / measured)
            est = _finite((j.estimate or {}).get("iteration_time_s"))
            if est is not None:
                fams["est"].add_metric(key, est)
            fams["done"].add_metric(key, j.steps_done)
            fams["total"].add_metric(key, j.total_steps)
            fams["restarts"].add_metric(key, j.restarts)
        yield from fams.values()


def install_metrics(app: FastAPI, service: Any) -> CollectorRegistry:
    """Serve ``GET /metrics`` (Prometheus text format) for ``service`` on ``app``; returns the app's registry.

    When the server has a token, a scrape must send it (``Authorization: Bearer …``; Prometheus'
    ``authorization: {credentials: …}``), as for the API: job names are not for everyone."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(service))

    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        token = service.config.token
        if token is not None:
            given = request.headers.get("authorization", "")
            scheme, _, cred = given.partition(" ")
            if scheme.lower() != "bearer" or not secrets.compare_digest(cred.encode(), token.encode()):
                return Response(
                    "missing or wrong token\n",
                    status_code=401,
                    media_type="text/plain",
                    headers={"WWW-Authenticate": "Bearer"},
                )
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.state.metrics_registry = registry
    return registry
