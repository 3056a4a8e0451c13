"""A small HTTP client of the API (what the CLI uses): errors become one clear line."""

from __future__ import annotations

import os
from typing import Any

import httpx

from tessera.service.config import DEFAULT_PORT


class ClientError(RuntimeError):
    """The server answered with an error, or could not be reached; the message says which."""

    def __init__(self, message: str, status: int | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


def default_url() -> str:
    return os.environ.get("TESSERA_URL", f"http://127.0.0.1:{DEFAULT_PORT}")


class Client:
    def __init__(self, url: str | None = None, token: str | None = None, timeout_s: float = 30.0) -> None:
        self.url = (url or default_url()).rstrip("/")
        self.token = token if token is not None else os.environ.get("TESSERA_TOKEN")
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            r = self.http.request(method, "/api" + path, **kw)
        except httpx.ConnectError:
            raise ClientError(
                f"no Tessera server at {self.url} (start one with `tessera server`, or set --url / TESSERA_URL)"
            ) from None
        except httpx.HTTPError as e:
            raise ClientError(f"{self.url}: {type(e).__name__}: {e}") from None
        if r.status_code >= 400:
            try:
                body = r.json()
            except ValueError:
                body = r.text
            raise ClientError(_error_text(r.status_code, body), r.status_code, body)
        return r.json()

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health")

    def submit(self, spec: dict[str, Any], *, key: str | None = None) -> dict[str, Any]:
        headers = {"Idempotency-Key": key} if key else {}
        return self._call("POST", "/jobs", json=spec, headers=headers)

    def dry_run(self, spec: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", "/jobs/dry-run", json=spec, timeout=300)

    def jobs(self, *, all_jobs: bool = True, limit: int = 500) -> dict[str, Any]:
        return self._call("GET", "/jobs", params={"all": str(all_jobs).lower(), "limit": limit})

    def job(self, ref: str | int) -> dict[str, Any]:
        return self._call("GET", f"/jobs/{ref}")

    def logs(self, ref: str | int, after: int = 0) -> dict[str, Any]:
        return self._call("GET", f"/jobs/{ref}/logs", params={"after": after})

    def telemetry(self, ref: str | int) -> dict[str, Any]:
        return self._call("GET", f"/jobs/{ref}/telemetry")

    def cancel(self, ref: str | int) -> dict[str, Any]:
        return self._call("POST", f"/jobs/{ref}/cancel")

    def cluster(self) -> dict[str, Any]:
        return self._call("GET", "/cluster")

    def timeline(self) -> dict[str, Any]:
        return self._call("GET", "/timeline")


def _error_text(status: int, body: Any) -> str:
    if isinstance(body, dict):
        if body.get("message"):
            return str(body["message"])
        detail = body.get("detail")
        if isinstance(detail, list) and detail and isinstance(detail[0], dict):
            d = detail[0]
            loc = ".".join(str(p) for p in d.get("loc", ()) if p != "body")
            return f"job spec: {loc + ': ' if loc else ''}{d.get('msg', '')}"
        if detail:
            return str(detail)
    return f"HTTP {status}: {body}"
