"""`tessera server`: the job store, the scheduler loop on Ray, the HTTP API and the dashboard."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from tessera.service.config import DEFAULT_PORT, ServiceConfig, default_state_dir, is_loopback

err = Console(stderr=True)


def server(
    host: str = typer.Option("127.0.0.1", "--host", help="address to bind (non-loopback requires a token)"),
    port: int = typer.Option(DEFAULT_PORT, "--port", min=1, max=65535),
    state_dir: Path = typer.Option(
        None,
        "--state-dir",
        help="store, checkpoints, calibration (default: $TESSERA_HOME/service, ~/.cache/tessera/service)",
    ),
    db: str | None = typer.Option(
        None,
        "--db",
        help="SQLAlchemy URL, e.g. postgresql://user@host/tessera (default: SQLite in the state dir)",
    ),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="join this Ray cluster (real GPUs) instead of the embedded one"
    ),
    cluster: str = typer.Option(
        "embedded",
        "--cluster",
        help="embedded Ray: the nodes to emulate (preset or YAML; default `embedded`: this machine's CPU as "
        "cpu-core + cpu-half devices; GPU presets such as `local` are labels only, never calibrated)",
    ),
    round_s: float = typer.Option(
        300.0,
        "--round",
        min=0.1,
        help="seconds between scheduling rounds (rounds also run at every arrival and completion)",
    ),
    policy: str = typer.Option("tessera", "--policy", help="scheduling policy"),
    token: str | None = typer.Option(
        None,
        "--token",
        envvar="TESSERA_TOKEN",
        help="clients must send it (made up when binding non-loopback)",
    ),
    api_only: bool = typer.Option(False, "--api-only", help="serve the API without a scheduler or Ray"),
    allow_user_code: bool = typer.Option(
        False,
        "--allow-user-code",
        help="accept jobs with an entrypoint (their own model code) on a non-loopback bind; always checked "
        "in a child process with a time and memory limit, and run on the workers",
    ),
    allow_path: list[Path] = typer.Option(
        None,
        "--allow-path",
        metavar="DIR",
        help="a directory job specs may name files under (data, config.json, entrypoint .py); repeatable "
        "(default: the current directory, the state dir and the package's examples)",
    ),
    shared_files: bool = typer.Option(
        False,
        "--shared-files",
        help="a job's files (entrypoint, model directory, data) are on every Ray node already, at the same "
        "paths (a shared filesystem): use them as they are instead of sending them with the job",
    ),
    job_files_limit_mib: int = typer.Option(
        512,
        "--job-files-limit-mib",
        min=1,
        help="on a Ray cluster of other machines: the most a job's files may weigh to travel with it (MiB)",
    ),
) -> None:
    """Run the Tessera service: submit jobs without GPU counts; it places, scales and recovers them."""
    from tessera.service.server import serve

    config = ServiceConfig(
        host=host, port=port, state_dir=state_dir or default_state_dir(), db_url=db, ray_address=ray_address,
        cluster=cluster, round_s=round_s, policy=policy, token=token, scheduler=not api_only,
        allow_user_code=allow_user_code, allow_paths=tuple(p.resolve() for p in allow_path or ()),
        shared_files=shared_files, job_files_limit_bytes=job_files_limit_mib << 20,
    )  # fmt: skip

    def announce(service) -> None:  # type: ignore[no-untyped-def]
        cfg = service.config
        view = service.controller.cluster_view() if service.controller.live else {}
        gpus = ", ".join(f"{v['total']}×{t}" for t, v in view.get("by_type", {}).items())
        mode = view.get("mode", "none")
        err.print(
            f"[bold]Tessera[/] on {cfg.url}  (dashboard {cfg.url}/ · API docs {cfg.url}/docs)",
            highlight=False,
        )
        if mode != "none":
            where = "embedded local Ray, emulated" if mode == "embedded" else f"Ray at {cfg.ray_address}:"
            err.print(
                f"cluster {view.get('name')}: {where} {gpus}; policy {view.get('policy')}, round {cfg.round_s:g} s",
                highlight=False,
            )
        err.print(f"state in {cfg.state_dir} (store {cfg.database_url.split('://')[0]})", highlight=False)
        if cfg.token and not is_loopback(cfg.host):
            err.print(f"token required: {cfg.state_dir / 'token'}", highlight=False)
        roots = ", ".join(str(r) for r in service.paths.roots)
        code = (
            "accepted (checked in a child process)"
            if cfg.user_code_allowed
            else "refused (--allow-user-code)"
        )
        err.print(f"job files under: {roots}; user code {code}", highlight=False)

    serve(config, announce=announce)
