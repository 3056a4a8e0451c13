"""Code and data travel with the job: a job's files reach every node that runs it, without a shared filesystem.

The files a worker reads are the ones its job spec names: the ``entrypoint`` .py file (imported on the worker
as a single module, so that one file), the ``model`` when it is a Hugging Face model directory (or a cached
repository's snapshot), and ``data`` — a text file, or a dataset's ``data.path`` (file or directory) and
``data.tokenizer``. (``data.cache_dir`` is where a node *writes* tokenized data: it never travels, each node
uses its own default.)

On a Ray cluster of other machines (``--ray-address``) the service packs them at launch into one tar archive,
deterministic (sorted entries, no timestamps or owners) and named by its content hash, puts it into Ray's
object store once per job (again only when a file changed) through a detached actor that owns it
(:class:`ArchiveOwner`: the archive outlives the server process, so a job the next server reattaches to never
depends on an object of the dead one), and hands its reference to the workers. A worker unpacks it once per
node into ``$TESSERA_HOME/job-files/<digest>`` (default ``~/.cache/tessera/job-files``; a later attempt on the
node finds it there and fetches nothing) and rewrites the RunSpec's paths to the copies before the runtime
sees them. Packing reads bytes; it never imports the user's code.

Above ``ServiceConfig.job_files_limit_bytes`` (512 MiB by default) a job is refused at submission (and failed
at launch, if its files grew since) with one error naming the largest field, its size and the limit. The
embedded cluster skips all this (every node is this machine: the paths are already right, and a model
directory of any size keeps working), and so does a server started with ``--shared-files`` (the files are
on every node already, e.g. a shared filesystem).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

MIB = 1 << 20
DEFAULT_LIMIT_BYTES = 512 * MIB


@dataclass(frozen=True)
class JobFile:
    """One file or directory a worker reads: the spec field naming it and its path on the server."""

    field: str  # entrypoint | model | data | data.path | data.tokenizer
    path: Path

    @property
    def arcname(self) -> str:
        """Where it lies in the archive (and under the node's copy): one folder per field, its own name kept
        (a dataset's suffix tells its format; a tokenizer.json must keep its name)."""
        return f"{self.field}/{self.path.name}"


@dataclass(frozen=True)
class Packed:
    """A job's files as one archive: its bytes, content digest and where each field's copy lies in it."""

    digest: str
    data: bytes
    paths: dict[str, str]  # field → path inside the archive


def job_files(spec: Any) -> list[JobFile]:
    """Every file or directory of ``spec`` (a JobSpec) that a worker reads, by the field naming it."""
    out: list[JobFile] = []
    if spec.entrypoint:
        source = spec.entrypoint.rpartition(":")[0]
        if source.endswith(".py"):  # a dotted module is imported by name: installed on every node
            out.append(JobFile("entrypoint", Path(source).resolve()))
    else:
        from tessera.models.resolve import is_hf_model_dir

        if is_hf_model_dir(spec.model):  # a zoo name or a config.json: nothing a worker reads
            from tessera.models.hf_weights import locate_model

            out.append(JobFile("model", locate_model(spec.model).resolve()))
    for field, raw in spec.data_paths():
        if field != "data.cache_dir":
            out.append(JobFile(field, Path(raw).resolve()))
    return out


def _members(path: Path) -> list[tuple[Path, os.stat_result]]:
    """The regular files of a file or directory (symlinks followed: a Hugging Face cache snapshot is links)."""
    if path.is_file():
        return [(path, path.stat())]
    out = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            p = Path(root) / name
            try:
                st = p.stat()
            except OSError:  # a dangling link
                continue
            out.append((p, st))
    return out


def sizes(files: list[JobFile]) -> dict[str, int]:
    """Bytes of each field's files."""
    out: dict[str, int] = {}
    for f in files:
        out[f.field] = out.get(f.field, 0) + sum(st.st_size for _, st in _members(f.path))
    return out


def check_size(files: list[JobFile], limit_bytes: int) -> None:
    """One clear error when the job's files together exceed the limit, naming the largest field."""
    by_field = sizes(files)
    total = sum(by_field.values())
    if total <= limit_bytes:
        return
    from tessera.service.model_source import ModelSourceError

    field = max(by_field, key=lambda k: by_field[k])
    path = next(f.path for f in files if f.field == field)
    others = "" if len(by_field) == 1 else f" (the job's files {_mib(total)} in all)"
    raise ModelSourceError(
        field,
        f"{path} is {_mib(by_field[field])}{others}, above the {_mib(limit_bytes)} limit on the files that "
        "travel with a job to the cluster's nodes; raise it (`tessera server --job-files-limit-mib`), or put "
        "the files on every node (a shared filesystem) and start the server with --shared-files",
    )


def _mib(n: int) -> str:
    """A size as people read it (MiB, KiB or bytes)."""
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} bytes"


def signature(files: list[JobFile]) -> tuple[Any, ...]:
    """What the archive depends on, read from file metadata alone (a repack is needed when it changes)."""
    return tuple(
        (f.field, str(f.path), tuple((str(p), st.st_size, st.st_mtime_ns) for p, st in _members(f.path)))
        for f in files
    )


def pack(files: list[JobFile], limit_bytes: int) -> Packed:
    """The files as one deterministic tar archive (same bytes → same digest), refused above the limit."""
    check_size(files, limit_bytes)

    def plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
        info.mode = 0o755 if info.isdir() or info.mode & 0o111 else 0o644
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, dereference=True) as tar:
        for f in files:
            tar.add(str(f.path), arcname=f.arcname, recursive=True, filter=plain)  # sorted when recursing
    data = buf.getvalue()
    return Packed(hashlib.sha256(data).hexdigest()[:24], data, {f.field: f.arcname for f in files})


OWNER_NAME = "tessera-job-files"  # the detached actor that owns the archives (in the service's Ray namespace)


class ArchiveOwner:
    """Ray actor body (detached, on the server's node): owns every shipped archive in Ray's object store.

    An object belongs to the process that put it and is lost when that process dies. A reattached job must
    not depend on the server process that launched it (``kill -9`` the server: its gangs train on, and a rank
    that had not unpacked its files yet must still find them), so the server hands the bytes to this actor,
    which puts them and keeps the reference until the job ends. It outlives the server and serves the next
    one (``get_if_exists``); archives are dropped by job id, so a restarted server drops those of the jobs it
    finds ended. Stdlib only, like the rest of this module (the actor is wrapped with ``ray.remote`` by the
    caller)."""

    def __init__(self) -> None:
        self._kept: dict[int, dict[str, Any]] = {}  # job id → digest → its ObjectRef

    def keep(self, job_id: int, digest: str, data: bytes) -> list[Any]:
        """Put ``data`` (once per digest) and keep it for ``job_id``; returns ``[ref]`` (a list: a bare
        ObjectRef returned by a task would be resolved to its value)."""
        import ray

        for refs in self._kept.values():
            if digest in refs:  # the same files in another job, or another attempt: one copy
                ref = refs[digest]
                break
        else:
            ref = ray.put(data)
        self._kept[job_id] = {digest: ref}  # a job's previous archive (its files changed) goes
        return [ref]

    def drop(self, job_ids: list[int]) -> None:
        """These jobs ended: their archives may leave the object store (once no worker holds them either)."""
        for j in job_ids:
            self._kept.pop(j, None)

    def jobs(self) -> list[int]:
        return sorted(self._kept)


class Shipper:
    """The server's side: one archive per job, owned by :class:`ArchiveOwner`, repacked only when a file
    changed."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._by_job: dict[int, tuple[tuple[Any, ...], dict[str, Any]]] = {}
        self._owner: Any = None

    def owner(self, *, create: bool = True) -> Any:
        """The archives' owner actor (started on this node the first time a job ships; None: none runs and
        ``create`` is False)."""
        if self._owner is None:
            import ray

            from tessera.service.ray_backend import NAMESPACE

            if not create:
                try:
                    self._owner = ray.get_actor(OWNER_NAME, namespace=NAMESPACE)
                except ValueError:
                    return None
            else:
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                here = ray.get_runtime_context().get_node_id()
                self._owner = (
                    ray.remote(ArchiveOwner)
                    .options(
                        name=OWNER_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
                        num_cpus=0, max_restarts=0,
                        scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True),
                    )
                    .remote()
                )  # fmt: skip
        return self._owner

    def ship(self, job_id: int, spec: Any) -> dict[str, Any] | None:
        """``RunSpec.files`` for a launch of the job (None: it names no file). Raises ModelSourceError when
        its files are above the limit."""
        files = job_files(spec)
        if not files:
            return None
        try:
            sig = signature(files)
            hit = self._by_job.get(job_id)
            if hit is not None and hit[0] == sig:
                return hit[1]
            packed = pack(files, self.limit_bytes)
        except OSError as e:  # a file gone or unreadable since submission: the job's error, naming its field
            from tessera.service.model_source import ModelSourceError

            name = str(e.filename or "")
            field = next((f.field for f in files if name.startswith(str(f.path))), files[0].field)
            raise ModelSourceError(field, f"cannot pack {name or 'its files'}: {e.strerror or e}") from None
        import ray

        try:
            [ref] = ray.get(self.owner().keep.remote(job_id, packed.digest, packed.data), timeout=300)
        except ray.exceptions.RayActorError:  # the owner died (its node went): start another, once
            self._owner = None
            [ref] = ray.get(self.owner().keep.remote(job_id, packed.digest, packed.data), timeout=300)
        shipped = {
            "digest": packed.digest,
            "archive": ref,  # owned by the ArchiveOwner actor: it outlives this process
            "paths": packed.paths,
            "bytes": len(packed.data),
        }
        self._by_job[job_id] = (sig, shipped)
        return shipped

    def forget(self, job_id: int) -> None:
        """The job ended: its archive may leave the object store (a dead owner has dropped it already)."""
        import ray

        self._by_job.pop(job_id, None)
        owner = self.owner(create=False)
        if owner is not None:
            with contextlib.suppress(ray.exceptions.RayError):
                owner.drop.remote([job_id])

    def keep_only(self, job_ids: set[int]) -> None:
        """A (re)started server: drop the archives of every job not in ``job_ids`` (those that ended while no
        server ran). Nothing to do when no owner runs, or it died (its archives went with it)."""
        import ray

        owner = self.owner(create=False)
        if owner is None:
            return
        try:
            kept = ray.get(owner.jobs.remote(), timeout=60)
        except ray.exceptions.RayError:
            self._owner = None
            return
        ended = [j for j in kept if j not in job_ids]
        if ended:
            owner.drop.remote(ended)


# ------------------------------------------------------------------------------------------ the worker's side
def node_cache_root() -> Path:
    """Where this node keeps unpacked job files: ``$TESSERA_HOME/job-files`` (default ``~/.cache/tessera``)."""
    home = os.environ.get("TESSERA_HOME")
    return (Path(home) if home else Path.home() / ".cache" / "tessera") / "job-files"


def unpacked(files: dict[str, Any], root: Path | None = None) -> Path:
    """The node's copy of a job's archive, fetched and unpacked on first use (atomically: ranks on one node
    may race; the first rename wins and the others drop theirs)."""
    root = root or node_cache_root()
    final = root / files["digest"]
    if final.is_dir():
        return final
    data = files["archive"]
    if not isinstance(data, bytes | bytearray | memoryview):  # a Ray object: this node fetches it once
        import ray

        data = ray.get(data)
    got = hashlib.sha256(bytes(data)).hexdigest()[: len(files["digest"])]
    if got != files["digest"]:
        raise RuntimeError(f"job files: the archive's digest is {got}, expected {files['digest']}")
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{files['digest']}-", dir=root))
    try:
        with tarfile.open(fileobj=io.BytesIO(bytes(data)), mode="r") as tar:
            tar.extractall(tmp, filter="data")  # no absolute paths, links out or devices
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def localize(run: Any, root: Path | None = None) -> tuple[Any, str | None]:
    """``run`` (a RunSpec with ``files``) with every shipped path rewritten to this node's copy, and the
    model directory's copy (None: the model is not a shipped directory)."""
    files = run.files
    if not files:
        return run, None
    here = unpacked(files, root)
    p = {field: str(here / rel) for field, rel in files["paths"].items()}
    factory = run.model_factory
    if "entrypoint" in p and isinstance(getattr(factory, "target", None), str):
        attr = factory.target.rpartition(":")[2]
        factory = replace(factory, target=f"{p['entrypoint']}:{attr}")
    model = p.get("model")
    if model is not None and factory is None:
        from tessera.runtime.model import ZooModel

        factory = ZooModel(model)
    config = run.data_config
    if isinstance(config, dict):
        config = dict(config)
        for key in ("path", "tokenizer"):
            if f"data.{key}" in p:
                config[key] = p[f"data.{key}"]
        config["cache_dir"] = None  # the server's folder: this node caches under its own default
    data_path = p.get("data", run.data_path)
    local = replace(run, model_factory=factory, data_path=data_path, data_config=config, files=None)
    return local, model
