"""The HTTP API (FastAPI): submit, list, get, logs, telemetry, cancel, cluster, timeline; the dashboard.

The request body of a submission *is* the JobSpec model, so the OpenAPI schema documents every field and a
malformed spec gets a 422 whose ``loc`` names the field, with a one-line ``message`` beside pydantic's list.
A model that cannot be loaded (an entrypoint that does not import, a data file that does not exist) is a 422
naming ``entrypoint`` / ``data`` too — found before anything is stored. ``Idempotency-Key`` makes retries
safe: the same key returns the job stored the first time (200 instead of 201); the same key with a
different spec is a 409 naming that job.

Hardening (see :mod:`tessera.service.security` and the README's "Exposing the server"): a job's own model
code is checked in a child process, never imported here (:mod:`tessera.service.user_code`), and refused
outright on an exposed server unless it was started with ``--allow-user-code``; files a spec names must lie
under the allowed roots; numbers are strict and finite; bodies above 1 MiB get 413 before they are parsed;
a 422 never fails to encode what it echoes; a job no Cell of the cluster can run is refused with the
planner's reason unless it sets ``wait_for_resources``; an exposed server's health says only ``ok``.

Token auth: when the server has a token (always when it binds a non-loopback address) every ``/api`` call
needs ``Authorization: Bearer <token>``; the dashboard page itself is static and asks for the token.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import anyio
from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from tessera.jobs import JobSpec
from tessera.service.metrics import install_metrics
from tessera.service.security import BodySizeLimit, field_of_reason, finite_json
from tessera.service.states import JobState

MAX_STEPS = 2**53


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tessera")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"


TESSERA_VERSION = _version()  # beyond this a step count is not a number JSON clients can hold exactly


class JobOut(BaseModel):
    """A job as listed: id, name, state and the pending reason (like squeue's NODELIST(REASON))."""

    id: int
    name: str
    model: str
    state: JobState
    reason: str | None = None
    priority: int = 0
    submitted_at: float
    started_at: float | None = None
    finished_at: float | None = None
    steps_done: int
    total_steps: int
    last_loss: float | None = None
    first_loss: float | None = None
    gpus: dict[str, int] = Field(default_factory=dict, description="GPUs held now, by type")
    cell: str | None = None
    rescales: int = 0
    restarts: int = 0
    measured_iter_s: float | None = None
    measured_step_s: float | None = Field(
        None,
        description="seconds per step of progress: the training step plus validation, data, the stop flag (not checkpoints)",
    )
    estimate_iter_s: float | None = None


class JobDetail(JobOut):
    """Everything about one job: allocation (GPUs, Cell, Plan), estimate, progress and its history."""

    allocation: dict[str, Any] | None = None
    estimate: dict[str, Any] | None = None
    checkpoint_step: int | None = None
    attempt: int = 0
    error: str | None = None
    cancel_requested: bool = False
    spec: dict[str, Any]
    history: list[dict[str, Any]] = Field(default_factory=list, description="allocations, oldest first")
    val_loss: float | None = Field(default=None, description="latest loss on the held-out validation split")
    val_step: int | None = Field(default=None, description="the step after which val_loss was computed")


class SubmitOut(BaseModel):
    job: JobOut
    created: bool


class JobList(BaseModel):
    jobs: list[JobOut]
    counts: dict[str, int]


class LogLine(BaseModel):
    id: int
    ts: float
    line: str


class Logs(BaseModel):
    lines: list[LogLine]
    next: int = Field(description="pass as `after` to get only newer lines")
    done: bool = Field(description="the job has ended and every line was returned")


class Health(BaseModel):
    """Liveness. An exposed server (non-loopback bind) answers only ``ok``: no versions, no error text."""

    ok: bool
    version: str | None = None
    scheduler: bool | None = None
    cluster: str | None = None
    mode: str | None = None
    policy: str | None = None
    error: str | None = None
    uptime_s: float | None = None


REF_MAX_CHARS = (
    256  # a job id (< 2**63) or name (<= 128 chars); longer refs are no job (and int() refuses them)
)


def _swagger_dir() -> Any:
    """Swagger UI's files from the ``swagger-ui-bundle`` package (None when it is not installed)."""
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:  # pragma: no cover - the service extra installs it
        return None
    return swagger_ui_path


def job_out(rec: Any, cls: type[JobOut] = JobOut, **extra: Any) -> Any:
    alloc = rec.allocation or {}
    spec = rec.to_dict()["spec"]
    return cls(
        id=rec.id,
        name=rec.name,
        model=spec.get("model", ""),
        state=rec.state,
        reason=rec.reason,
        priority=rec.priority,
        submitted_at=rec.submitted_at,
        started_at=rec.started_at,
        finished_at=rec.finished_at,
        steps_done=rec.steps_done,
        total_steps=rec.total_steps,
        last_loss=rec.last_loss,
        first_loss=rec.first_loss,
        gpus=alloc.get("gpus", {}) if rec.state.active else {},
        cell=alloc.get("cell") if alloc else None,
        rescales=rec.rescales,
        restarts=rec.restarts,
        measured_iter_s=rec.measured_iter_s,
        measured_step_s=rec.measured_step_s,
        estimate_iter_s=alloc.get("estimate_iter_s") if alloc else None,
        **extra,
    )


def _message(errors: list[dict[str, Any]]) -> str:
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"job spec: {'.'.join(loc) + ': ' if loc else ''}{msg}{more}"


def create_app(service: Any) -> FastAPI:
    """The app for a :class:`tessera.service.server.Service` (store, controller, config)."""
    from tessera.service.dashboard import APP_JS, INDEX_HTML, STYLE_CSS

    exposed = bool(getattr(service.config, "exposed", False))
    app = FastAPI(
        docs_url=None,  # served below from the package's Swagger UI files: /docs works without internet
        title="Tessera",
        version="1"
        if exposed
        else TESSERA_VERSION,  # exposed: the API's major only (no build to fingerprint)
        description="Submit training jobs without GPU counts; Tessera picks GPU types, counts and the parallel "
        "plan, schedules them jointly on a heterogeneous Ray cluster and rescales them as others come and go.",
    )
    config = service.config
    app.add_middleware(BodySizeLimit, max_bytes=getattr(config, "max_body_bytes", 1 << 20))
    bearer = HTTPBearer(auto_error=False, description="the server's token (required when it has one)")

    async def auth(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        token = service.config.token
        if token is None:
            return
        if creds is None or not secrets.compare_digest(creds.credentials.encode(), token.encode()):
            raise HTTPException(
                status_code=401, detail="missing or wrong token", headers={"WWW-Authenticate": "Bearer"}
            )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        raw = [{k: v for k, v in e.items() if k not in ("url", "ctx")} for e in exc.errors()]
        # What is echoed back (``input``) may hold NaN or a 5,000-digit integer, which JSON cannot encode.
        errors = finite_json(jsonable_encoder(finite_json(raw), custom_encoder={Exception: str}))
        return JSONResponse(status_code=422, content={"detail": errors, "message": _message(errors)})

    def find(ref: str) -> Any:
        if len(ref) > REF_MAX_CHARS:
            raise HTTPException(status_code=404, detail=f"no job {ref[:40]!r}... ({len(ref)} characters)")
        rec = service.store.find(ref)
        if rec is None:
            raise HTTPException(status_code=404, detail=f"no job {ref!r}")
        return rec

    def unprocessable(field: str, msg: str) -> HTTPException:
        return HTTPException(
            status_code=422,
            detail=[{"loc": ["body", field], "msg": msg, "type": "value_error"}],
        )

    def check_paths(spec: JobSpec) -> None:
        """Files the spec names lie under the allowed roots (symlinks resolved), and user code is allowed."""
        from tessera.models.resolve import is_config_path

        if spec.entrypoint and not config.user_code_allowed:
            raise unprocessable(
                "entrypoint",
                "this server does not run user code (it is reachable beyond this machine); "
                "its operator allows it with `tessera server --allow-user-code`",
            )
        named = list(spec.data_paths())
        if spec.entrypoint:
            source = spec.entrypoint.rpartition(":")[0]
            if source.endswith(".py"):
                named.append(("entrypoint", source))
        elif is_config_path(spec.model):
            named.append(("model", spec.model))
        policy = getattr(service, "paths", None)
        for field, raw in named:
            why = policy.check(field, raw) if policy is not None else None
            if why is not None:
                raise unprocessable(field, why)

    def check(spec: JobSpec) -> None:
        """What pydantic cannot see: sizes that do not fit the store, files and imports on this server."""
        from tessera.service.model_source import ModelSourceError, check_data, model_spec

        check_paths(spec)
        for name in ("steps", "samples", "global_batch", "seq_len", "max_gpus", "checkpoint_every_steps"):
            v = getattr(spec, name)
            if v is not None and v > MAX_STEPS:
                raise unprocessable(name, f"must be <= {MAX_STEPS}, got {v}")
        if abs(spec.seed) > MAX_STEPS:
            raise unprocessable("seed", f"must be within ±{MAX_STEPS}")
        try:
            check_data(spec)
            model_spec(spec)  # zoo: cheap, and catches e.g. a seq_len beyond the model's positions
            if getattr(service.controller, "ships_files", False):  # its files travel: within the limit
                from tessera.service.job_files import check_size, job_files

                check_size(job_files(spec), config.job_files_limit_bytes)
        except ModelSourceError as e:
            field = "seq_len" if e.field == "model" and "seq_len" in e.reason else e.field
            raise unprocessable(field, e.reason) from None
        except (ValueError, OSError) as e:
            raise unprocessable("model", str(e)) from None

    def refuse_infeasible(spec: JobSpec) -> None:
        """A job no Cell of the whole cluster can run is refused with the planner's reason (as SLURM refuses
        an impossible request), unless it asks to wait for resources."""
        if spec.wait_for_resources:
            return
        adapter = service.controller.adapter if service.controller is not None else None
        infeasible = getattr(adapter, "infeasible", None)
        if infeasible is None:
            return
        from tessera.service.model_source import ModelSourceError

        try:
            reason = infeasible(spec)
        except ModelSourceError as e:
            raise unprocessable(e.field, e.reason) from None
        if reason:
            raise unprocessable(
                field_of_reason(reason),
                f"{reason} (set wait_for_resources: true to queue it for a larger cluster)",
            )

    def same_spec(rec: Any, spec: JobSpec) -> bool:
        """Both specs as parsed (defaults filled: a field added since the first submission is no conflict)."""
        from tessera.jobs import JobSpecError

        try:
            stored = rec.spec.model_dump(mode="json")
        except (JobSpecError, ValueError):  # stored under older rules: compare what was stored
            stored = rec.to_dict()["spec"]
        return stored == json.loads(json.dumps(spec.model_dump(mode="json")))

    def conflict(rec: Any) -> HTTPException:
        return HTTPException(
            status_code=409,
            detail=f"Idempotency-Key already used for job {rec.id} ({rec.name}) with a different spec; "
            "use a new key for a new job",
        )

    api = "/api"

    @app.get(f"{api}/health", response_model=Health, tags=["service"])
    def health() -> Any:
        ctl = service.controller
        if config.exposed:  # only whether it is healthy: nothing for a prober to fingerprint or read
            return JSONResponse({"ok": ctl is None or ctl.error is None})
        view = ctl.cluster_view() if ctl is not None and ctl.live is not None else {}
        return Health(
            ok=ctl is None or ctl.error is None,
            version=TESSERA_VERSION,
            scheduler=service.config.scheduler,
            cluster=view.get("name"),
            mode=view.get("mode"),
            policy=view.get("policy"),
            error=ctl.error if ctl is not None else None,
            uptime_s=time.time() - service.started_at,
        )

    @app.post(
        f"{api}/jobs",
        response_model=SubmitOut,
        status_code=201,
        tags=["jobs"],
        dependencies=[Depends(auth)],
        responses={
            200: {"model": SubmitOut, "description": "already submitted with this Idempotency-Key"},
            409: {
                "description": "this Idempotency-Key was used for a different spec (the detail names the job)"
            },
            413: {"description": "request body larger than 1 MiB"},
        },
    )
    async def submit(
        spec: JobSpec,
        response: Response,
        idempotency_key: str | None = Header(
            default=None, max_length=128, description="retries return the same job"
        ),
    ) -> SubmitOut:
        """Submit a job (no GPU counts: Tessera chooses). Returns it PENDING; a round schedules it."""
        # On the event loop: a store write takes ~2 ms and SQLite takes one writer at a time anyway, so a pool
        # of threads fighting over the GIL only slows the burst down. A user model is traced in a thread.
        if spec.entrypoint or spec.model.endswith(".json"):
            await anyio.to_thread.run_sync(check, spec)
        else:
            check(spec)
        if idempotency_key is not None:  # a retry: answered from the store, without planning again
            first = service.store.by_key(idempotency_key)
            if first is not None:
                if not same_spec(first, spec):
                    raise conflict(first)
                response.status_code = 200
                return SubmitOut(job=job_out(first), created=False)
        if not spec.wait_for_resources and getattr(
            getattr(service.controller, "adapter", None), "infeasible", None
        ):
            await anyio.to_thread.run_sync(refuse_infeasible, spec)
        rec, created = service.store.submit(spec, idempotency_key)
        if not created:
            if not same_spec(rec, spec):  # a concurrent first use of the key won with another spec
                raise conflict(rec)
            response.status_code = 200
        elif service.controller is not None:
            service.controller.wake()
        return SubmitOut(job=job_out(rec), created=created)

    @app.post(f"{api}/jobs/dry-run", tags=["jobs"], dependencies=[Depends(auth)])
    def dry_run(spec: JobSpec) -> dict[str, Any]:
        """Predicted memory, ranked Cells, the Cell the scheduler would choose now and the estimated time —
        nothing is submitted."""
        from tessera.service.model_source import ModelSourceError

        check(spec)
        adapter = service.controller.adapter if service.controller is not None else None
        if adapter is None:
            raise HTTPException(status_code=409, detail="the server has no scheduler")
        try:
            return adapter.dry_run(spec).to_dict()
        except ModelSourceError as e:
            raise unprocessable(e.field, e.reason) from None

    @app.get(f"{api}/jobs", response_model=JobList, tags=["jobs"], dependencies=[Depends(auth)])
    def list_jobs(
        state: list[JobState] | None = Query(default=None, description="only these states"),
        limit: int = Query(default=500, ge=1, le=10000),
        all_jobs: bool = Query(default=True, alias="all", description="include ended jobs"),
    ) -> JobList:
        """Jobs with their state and pending reason, oldest first."""
        states = state or (None if all_jobs else [s for s in JobState if not s.terminal])
        recs = service.store.list_jobs(states, limit=limit, newest_first=True)
        return JobList(jobs=[job_out(r) for r in reversed(recs)], counts=service.store.count())

    @app.get(f"{api}/jobs/{{job}}", response_model=JobDetail, tags=["jobs"], dependencies=[Depends(auth)])
    def get_job(job: str) -> JobDetail:
        """One job: allocation (GPUs, Cell, Plan), estimate, progress and allocation history (rescales)."""
        rec = find(job)
        val = service.store.last_val_loss(rec.id)
        return job_out(
            rec,
            JobDetail,
            allocation=rec.allocation,
            estimate=rec.estimate,
            checkpoint_step=rec.checkpoint_step,
            val_step=None if val is None else val[0] + 1,
            val_loss=None if val is None else val[1],
            attempt=rec.attempt,
            error=rec.error,
            cancel_requested=rec.cancel_requested,
            spec=rec.to_dict()["spec"],
            history=[_history(a) for a in service.store.allocations(rec.id)],
        )

    @app.get(f"{api}/jobs/{{job}}/logs", response_model=Logs, tags=["jobs"], dependencies=[Depends(auth)])
    def logs(
        job: str,
        after: int = Query(default=0, ge=0, le=2**62),
        limit: int = Query(default=1000, ge=1, le=10000),
    ) -> Logs:
        rec = find(job)
        lines = service.store.logs(rec.id, after, limit)
        nxt = lines[-1][0] if lines else after
        done = rec.state.terminal and len(lines) < limit
        return Logs(lines=[LogLine(id=i, ts=t, line=s) for i, t, s in lines], next=nxt, done=done)

    @app.get(f"{api}/jobs/{{job}}/telemetry", tags=["jobs"], dependencies=[Depends(auth)])
    def telemetry(job: str, max_points: int = Query(default=400, ge=10, le=100000)) -> dict[str, Any]:
        """Per-step loss, iteration time and throughput (down-sampled), with each allocation's estimate."""
        rec = find(job)
        steps = service.store.steps(rec.id)
        if len(steps) > max_points:
            stride = -(-len(steps) // max_points)
            steps = steps[::stride] + ([steps[-1]] if (len(steps) - 1) % stride else [])
        return {
            "job": rec.id,
            "steps": steps,
            "allocations": [_history(a) for a in service.store.allocations(rec.id)],
        }

    @app.post(
        f"{api}/jobs/{{job}}/cancel", response_model=JobOut, tags=["jobs"], dependencies=[Depends(auth)]
    )
    def cancel(job: str) -> JobOut:
        rec = find(job)
        out = service.store.request_cancel(rec.id)
        if service.controller is not None:
            service.controller.wake()
        return job_out(out)

    @app.get(f"{api}/cluster", tags=["cluster"], dependencies=[Depends(auth)])
    def cluster() -> dict[str, Any]:
        """GPUs by node and type, free or held (and by which job), the policy and the last round."""
        ctl = service.controller
        if ctl is None or ctl.live is None:
            raise HTTPException(status_code=409, detail="the server has no cluster")
        return ctl.cluster_view()

    @app.get(f"{api}/timeline", tags=["cluster"], dependencies=[Depends(auth)])
    def timeline() -> dict[str, Any]:
        """Every allocation of every job (the dashboard's allocation timeline)."""
        names = {j.id: j.name for j in service.store.list_jobs()}
        rows = service.store.allocations()
        return {
            "now": time.time(),
            "allocations": [{**_history(a), "job_name": names.get(a["job_id"])} for a in rows],
        }

    swagger = _swagger_dir()

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        """Swagger UI from the package's own files: the page works without internet."""
        if swagger is None:  # pragma: no cover
            return HTMLResponse("<p>Swagger UI is not installed: pip install swagger-ui-bundle</p>", 404)
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url="/docs/static/swagger-ui-bundle.js",
            swagger_css_url="/docs/static/swagger-ui.css",
            swagger_favicon_url="/docs/static/favicon-32x32.png",
        )

    @app.get("/docs/static/{name}", include_in_schema=False)
    def docs_static(name: str) -> Response:
        allowed = {"swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"}
        if swagger is None or name not in allowed:
            raise HTTPException(status_code=404, detail="no such file")
        return FileResponse(str(swagger / name))

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index() -> HTMLResponse:
        return HTMLResponse(INDEX_HTML)

    @app.get("/dashboard/app.js", include_in_schema=False)
    def app_js() -> Response:
        return Response(APP_JS, media_type="text/javascript")

    @app.get("/dashboard/style.css", include_in_schema=False)
    def style_css() -> Response:
        return Response(STYLE_CSS, media_type="text/css")

    install_metrics(app, service)
    return app


def _history(a: dict[str, Any]) -> dict[str, Any]:
    plan = a.get("plan") or {}
    return {
        "job_id": a["job_id"],
        "attempt": a["attempt"],
        "kind": a["kind"],
        "cell": a["cell"],
        "gpus": a["gpus"],
        "stages": [
            {
                "layers": [s["layer_start"], s["layer_end"]],
                "dp": s["dp_degree"],
                "tp": s["tp_degree"],
                "gpu_types": sorted({d["gpu_type"] for d in s["devices"]}),
            }
            for s in plan.get("stages", [])
        ],  # fmt: skip
        "estimate_iter_s": a["estimate_iter_s"],
        # what the estimate was corrected by (rows planned before the factor was applied have neither)
        "estimate_basis": (plan.get("meta") or {}).get("estimate_basis"),
        "speed_factor": (plan.get("meta") or {}).get("speed_factor"),
        "measured_iter_s": a["measured_iter_s"],
        "measured_step_s": a.get("measured_step_s"),
        "started_at": a["started_at"],
        "ended_at": a["ended_at"],
        "end_reason": a["end_reason"],
        "from_step": a["from_step"],
        "to_step": a["to_step"],
    }
