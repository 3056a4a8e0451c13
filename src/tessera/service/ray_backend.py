"""The Ray backend: a local Ray emulating heterogeneous GPU nodes (embedded default) or an existing cluster,
one single-bundle placement group and one actor per device, and the gang lifecycle (with fast rescale).

**We place, Ray enforces** (``notes/ray.md`` §4): the scheduler picks nodes and GPUs; each rank gets its own
placement group of one ``{GPU: 1, CPU: 1}`` bundle pinned to its node by a label selector (``ray.io/node-id``),
and its actor sits in it — per rank, so a fast rescale can free leaving ranks singly and keep the others. Nothing is left
to Ray's own choice of GPU type. The embedded cluster gives every emulated node exactly the shape of a real
GPU node — ``GPU`` count, the ``accelerator_type:<T>`` marker and the ``ray.io/accelerator-type`` label — plus
``tessera.io/gpu-type`` (the catalog name) and ``tessera.io/node``; the control path is identical either way.

A :class:`Gang` runs in its own thread: placement group → actors → rendezvous → start → poll every
``poll_s`` (telemetry, state) → finished | stopped (cooperative checkpoint) | diverged (a NaN/inf loss: every
rank ended at that step) | failed (an actor died, raised, or went silent) → tear down (kill actors, remove the placement group). Actors are named
``tessera-<job>-<attempt>-r<rank>`` in the service's namespace and detached, so a restarted server finds and
reattaches to gangs still running on an external cluster.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tessera.hardware import ClusterSpec, NodeGroupSpec, get_cluster, get_gpu, load_cluster_file
from tessera.hardware.catalog import CPU_HALF_DEVICE as HALF_CORE_DEVICE
from tessera.plan import Plan
from tessera.service import reaper
from tessera.service.reaper import kill_marked
from tessera.service.scheduling import Assignment, LiveCluster, LiveNode

RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # listeners on 127.0.0.1 only (notes/ray.md §2)
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
}
NAMESPACE = "tessera"
# What a device worker needs before its first step: Ray's idle worker processes import them ahead of time
# (``RAY_preload_python_modules``), so an actor started for a launch or rescale does not pay torch's import
# (seconds on a busy box) on the critical path. Embedded cluster only (an external one is set by its operator).
PRELOAD_MODULES = "torch,torch.distributed,tessera.service.device_worker,tessera.runtime.engine"
GPU_TYPE_LABEL = "tessera.io/gpu-type"
NODE_LABEL = "tessera.io/node"
RAY_TYPE_LABEL = "ray.io/accelerator-type"
RAY_NODE_ID_LABEL = "ray.io/node-id"

# Ray's accelerator type names (ray.util.accelerators) → the catalog. Types not listed go through the
# catalog's own fuzzy lookup; a node may also say exactly with the ``tessera.io/gpu-type`` label.
RAY_TO_CATALOG = {
    "V100": "V100-32GB",
    "P100": "P100-16GB",
    "T4": "T4",
    "A100": "A100-40GB",
    "A100-40G": "A100-40GB",
    "A100-80G": "A100-80GB",
    "H100": "H100-80GB",
    "A10G": "A10G",
    "L4": "L4",
}


def catalog_to_ray(gpu_type: str) -> str:
    """The Ray accelerator type an emulated node of this catalog type advertises."""
    for ray_name, cat in RAY_TO_CATALOG.items():
        if cat == gpu_type and ray_name not in ("A100",):
            return ray_name
    return gpu_type


def catalog_type(ray_type: str | None, labels: dict[str, str]) -> str | None:
    """A Ray node's GPU type as a catalog name (None: no GPUs / unknown)."""
    if labels.get(GPU_TYPE_LABEL):
        return get_gpu(labels[GPU_TYPE_LABEL]).name
    if not ray_type:
        return None
    name = RAY_TO_CATALOG.get(ray_type, ray_type)
    try:
        return get_gpu(name).name
    except KeyError:
        return None


def apply_ray_env() -> None:
    for k, v in RAY_ENV.items():
        os.environ.setdefault(k, v)


# ------------------------------------------------------------------------------------------ leftovers
def kill_leftovers(marker_dir: str) -> list[int]:
    """SIGKILL processes of an earlier embedded cluster of ours (found by ``RAY_TMPDIR`` in their
    environment: only processes this service started carry it). The watchdog (:mod:`tessera.service.reaper`)
    does this the moment a server dies; a restarted server also does it before it starts its own Ray."""
    return kill_marked(marker_dir)


def start_reaper(marker_dir: str) -> subprocess.Popen:
    """The watchdog that kills this embedded cluster's processes once this process is gone (even by SIGKILL):
    a stdlib-only script in its own session, without the marker in its own environment."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_TMPDIR"}
    return subprocess.Popen(
        [sys.executable, reaper.__file__, str(os.getpid()), marker_dir],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True,
    )  # fmt: skip


def pin_tree(pid: int, cores: set[int]) -> None:
    """Every thread of ``pid`` and of its descendants on ``cores`` (Linux; a thread may fork, and its
    children inherit its own mask, not the process's). Processes gone meanwhile are skipped."""
    if not hasattr(os, "sched_setaffinity"):
        return
    for p in {pid} | reaper.descendants({pid}, reaper.process_table()):
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{p}/task"):
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(tid), cores)


# ------------------------------------------------------------------------------------------ the cluster
@dataclass
class RayCluster:
    """The Ray the service runs on: embedded (emulated GPU nodes from a cluster spec) or joined by address."""

    address: str | None = None  # None: embedded
    emulate: ClusterSpec | None = None  # embedded: the nodes to emulate (default the `local` preset)
    tmp_dir: str | None = None  # embedded: RAY_TMPDIR (short: unix socket paths)
    cpus_per_gpu: int = 1
    _cluster: Any = None
    _reaper: subprocess.Popen | None = None
    _node_ids: dict[str, str] = field(default_factory=dict)  # cluster-spec node name → Ray node id
    _lost: set[str] = field(default_factory=set)  # nodes seen gone before Ray's health checks said so
    spec: ClusterSpec | None = None

    @property
    def embedded(self) -> bool:
        return self.address is None

    def start(self) -> None:
        apply_ray_env()
        import ray

        if self.embedded:
            emulate = self.emulate or get_cluster("local")
            tmp = self.tmp_dir or "/tmp/tessera-ray"
            os.environ["RAY_TMPDIR"] = tmp
            if (
                os.environ.get("TESSERA_RAY_PRELOAD", "1") != "0"
            ):  # the raylets' worker processes import these
                os.environ.setdefault("RAY_preload_python_modules", PRELOAD_MODULES)
            # Ray starts its workers at niceness 15; the devices are priced from profiles taken at the default
            # priority, so at 15 any other process on this machine (even a `nice -n 19` one) takes their CPU
            # and the measured steps part from the estimate (gpt-a: 400 steps in 40 s beside a helper
            # session's `nice -n 19` processes, 15 s on a quiet box)
            os.environ.setdefault("RAY_worker_niceness", "0")
            kill_leftovers(tmp)
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(os.path.join(tmp, "ray"), exist_ok=True)
            self._reaper = start_reaper(tmp)  # before the first Ray process exists
            from ray.cluster_utils import Cluster

            nodes = emulate.nodes()
            if not nodes:
                raise ValueError("cluster: the emulated cluster has no nodes")
            args = [self._node_args(n.name, n.gpu_type, n.n_gpus) for n in nodes]
            self._cluster = Cluster(
                initialize_head=True, head_node_args={**args[0], "include_dashboard": False}
            )
            for a in args[1:]:
                self._cluster.add_node(**a)
            ray.init(
                address=self._cluster.address,
                namespace=NAMESPACE,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
        else:
            ray.init(
                address=self.address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING
            )
        self.refresh()
        if self.embedded:
            self._pin_nodes()

    def _pin_nodes(self) -> None:
        """Each emulated CPU node's raylet, and every worker process it has started or will start, on the cores
        of that node's devices. A launch (a worker's interpreter, Ray and the preloaded torch: seconds of CPU)
        then runs on the core of the device it launches for, which waits for it anyway; unpinned, it could run on
        any core, a ``cpu-core`` device's included. The factor (estimated ÷ measured) that bench/fidelity.py's
        settle runs — short jobs, a launch beside each — gave llama-tiny|8|64 on the core, as the bench printed
        it: 1.17-1.25 before this, 1.02-1.06 after."""
        from ray._private import ray_constants

        by_id = {nid: name for name, nid in self._node_ids.items()}
        for node in [self._cluster.head_node, *self._cluster.worker_nodes]:
            name = by_id.get(node.node_id) if node is not None else None
            spec_node = next((n for n in self.spec.nodes() if n.name == name), None) if self.spec else None
            if spec_node is None:
                continue
            cores = {c for i in range(spec_node.n_gpus) if (c := self.device_core(name, i)[0]) is not None}
            procs = node.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET) or []
            if cores and procs:
                pin_tree(procs[0].process.pid, cores)

    def _node_args(self, name: str, gpu_type: str, n_gpus: int) -> dict[str, Any]:
        ray_type = catalog_to_ray(gpu_type)
        return {
            "num_cpus": n_gpus * self.cpus_per_gpu,
            "num_gpus": n_gpus,
            "resources": {f"accelerator_type:{ray_type}": 1},
            "labels": {RAY_TYPE_LABEL: ray_type, GPU_TYPE_LABEL: gpu_type, NODE_LABEL: name},
            "node_ip_address": "127.0.0.1",
            "dashboard_agent_listen_port": None,
            "object_store_memory": 100 * 2**20,
        }

    def refresh(self) -> LiveCluster:
        """The live cluster: GPU nodes Ray reports, by type, as a ClusterSpec (node names stable)."""
        import ray

        found: list[tuple[str, str, int, bool, str | None]] = []  # (node id, type, gpus, alive, our name)
        for n in ray.nodes():
            gpus = int(n.get("Resources", {}).get("GPU", 0) or 0)
            labels = n.get("Labels") or {}
            ray_type = labels.get(RAY_TYPE_LABEL) or next(
                (k.split(":", 1)[1] for k in n.get("Resources", {}) if k.startswith("accelerator_type:")),
                None,
            )
            t = catalog_type(ray_type, labels)
            if gpus and t:
                found.append((n["NodeID"], t, gpus, bool(n.get("Alive")), labels.get(NODE_LABEL)))
        if self.spec is None:
            self.spec = self._spec_from(found)
        alive = {nid for nid, _, _, a, _ in found if a}
        nodes = []
        for node in self.spec.nodes():
            nid = self._node_ids.get(node.name)
            if nid is None:  # a node (re)joined: match a free Ray node of the same type and size
                nid = next(
                    (f[0] for f in found if f[1] == node.gpu_type and f[2] == node.n_gpus and f[3]
                     and f[0] not in self._node_ids.values() and f[4] in (None, node.name)),
                    None,
                )  # fmt: skip
                if nid is not None:
                    self._node_ids[node.name] = nid
            nodes.append(
                LiveNode(node.name, node.gpu_type, node.n_gpus, nid in alive and node.name not in self._lost)
            )
        return LiveCluster(self.spec, tuple(nodes))

    def probe_lost(self, names: set[str]) -> list[str]:
        """The nodes among ``names`` that are gone now, and from here on shown dead. Ray's own view lags by its
        health checks (tens of seconds), long enough for a gang on a dead node to be charged a worker failure
        and relaunched onto the same node; so the embedded cluster asks its nodes' raylet processes directly,
        an external one what Ray reports."""
        import ray

        lost = names & self._lost
        if self.embedded and self._cluster is not None:
            by_id = {
                n.node_id: n for n in [self._cluster.head_node, *self._cluster.worker_nodes] if n is not None
            }
            for name in names:
                node = by_id.get(self._node_ids.get(name, ""))
                if node is None or any(kind == "raylet" for kind, _ in node.dead_processes()):
                    lost.add(name)
        else:
            with contextlib.suppress(Exception):
                alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
                lost |= {name for name in names if self._node_ids.get(name) not in alive}
        self._lost |= lost
        return sorted(lost)

    def _spec_from(self, found: list[tuple[str, str, int, bool, str | None]]) -> ClusterSpec:
        """Embedded: the emulated spec (Ray nodes matched by their ``tessera.io/node`` label). External: one
        node group per (GPU type, GPUs per node), nodes named ``<type>-<i>`` in node-id order."""
        if self.embedded:
            spec = self.emulate or get_cluster("local")
            for nid, _, _, _, name in found:
                if name:
                    self._node_ids[name] = nid
            return spec
        if not found:
            raise RuntimeError(f"ray cluster {self.address}: no node has GPUs of a known type")
        groups: dict[tuple[str, int], list[str]] = {}
        for nid, t, g, _, _ in sorted(found):
            groups.setdefault((t, g), []).append(nid)
        node_groups = []
        for (t, g), ids in sorted(groups.items()):
            name = f"{t.lower()}x{g}"
            node_groups.append(NodeGroupSpec(name=name, count=len(ids), gpu=t, gpus_per_node=g))
            for i, nid in enumerate(ids):
                self._node_ids[f"{name}-{i}"] = nid
        return ClusterSpec(name=f"ray-{self.address}", node_groups=tuple(node_groups))

    def node_id(self, name: str) -> str:
        return self._node_ids[name]

    def device_core(self, node: str, index: int | None) -> tuple[int | None, bool]:
        """(core, busy neighbour) of an embedded CPU device: devices are laid on this machine's cores in the
        spec's node order, one each (wrapping when there are more devices than cores); a ``cpu-half`` device
        shares its core with a busy neighbour. (None, False) for GPU types and external clusters."""
        if not self.embedded or self.spec is None:
            return None, False
        gpu = get_gpu(next(n.gpu_type for n in self.spec.nodes() if n.name == node))
        if gpu.arch != "cpu" or gpu.threads is None:
            return None, False
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if not cores:
            return None, False
        seq = 0
        for n in self.spec.nodes():
            if n.name == node:
                seq += index or 0
                break
            seq += n.n_gpus
        return cores[seq % len(cores)], gpu.name == HALF_CORE_DEVICE.name

    def remove_node(self, name: str) -> None:
        """Embedded only (tests): kill an emulated node's processes. The node is shown lost first: Ray
        terminates the raylet, which stops its workers before it exits itself, so a gang that died of it could
        find the raylet still running (on a loaded box for a while) and be charged a worker failure."""
        nid = self._node_ids[name]
        for node in list(self._cluster.worker_nodes):
            if node.node_id == nid:
                self._lost.add(name)
                self._cluster.remove_node(node)
                return
        raise ValueError(f"node {name} is the head or unknown")

    def shutdown(self) -> None:
        import ray

        with contextlib.suppress(Exception):
            ray.shutdown()
        if self._cluster is not None:
            with contextlib.suppress(Exception):
                self._cluster.shutdown()
            self._cluster = None
            if self.tmp_dir:
                kill_leftovers(self.tmp_dir)
                shutil.rmtree(self.tmp_dir, ignore_errors=True)
        if self._reaper is not None:  # Ray is down: the watchdog has nothing left to guard
            self._reaper.kill()
            self._reaper.wait(timeout=10)
            self._reaper = None


def emulated_spec(cluster: str) -> ClusterSpec:
    """A preset name or a YAML file: the nodes the embedded Ray emulates."""
    if cluster.endswith((".yaml", ".yml")) or os.path.sep in cluster:
        return load_cluster_file(cluster)
    return get_cluster(cluster)


# ------------------------------------------------------------------------------------------ gangs
@dataclass
class GangEvents:
    """Callbacks from a gang's thread to the service (each must be thread-safe)."""

    on_ready: Callable[[Gang, int], None]  # all ranks built their model; the step they start from
    on_steps: Callable[[Gang, list[dict[str, Any]]], None]  # merged StepRecords (as dicts), in step order
    # the gang ended: outcome finished | stopped | diverged | failed | killed, the error, the last checkpoint step
    on_end: Callable[[Gang, str, str | None, int | None], None]
    on_checkpoint: Callable[[Gang, int], None] = lambda gang, step: None  # a complete checkpoint at this step


class PlacementCancelled(RuntimeError):
    """The gang was asked to stop (or killed) before its GPUs were placed: nothing ran, nothing to save."""


def wait_placed(
    ray: Any,
    pgs: list[Any],
    timeout_s: float,
    *,
    handing_over: Callable[[], bool] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> None:
    """Wait until every placement group is ready, at most ``timeout_s`` — counted again from whenever
    ``handing_over()`` last said the GPUs are still held by a gang this service is stopping (its final
    checkpoint may take minutes): a launch queued behind a stop is the service's hand-over, not the job's
    failure."""
    deadline = time.time() + timeout_s
    pending = [pg.ready() for pg in pgs]
    while pending:
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
        if not pending:
            return
        if cancelled is not None and cancelled():
            raise PlacementCancelled("cancelled while placing")
        if handing_over is not None and handing_over():
            deadline = time.time() + timeout_s
        elif time.time() > deadline:
            raise RuntimeError(f"placement group not ready after {timeout_s:.0f} s")


class Gang:
    """One allocation of one job: a placement group, one actor per rank, a thread that watches them."""

    def __init__(
        self,
        cluster: RayCluster,
        job_id: int,
        attempt: int,
        assignment: Assignment,
        run: dict[str, Any],
        events: GangEvents,
        *,
        poll_s: float = 0.5,
        placement_timeout_s: float = 120.0,
        watchdog_s: float = 300.0,
    ) -> None:
        self.cluster = cluster
        self.job_id = job_id
        self.attempt = attempt
        self.assignment = assignment
        self.plan: Plan = assignment.plan
        self.run = run
        self.events = events
        self.poll_s = poll_s
        self.placement_timeout_s = placement_timeout_s
        self.watchdog_s = watchdog_s
        self.actors: list[Any] = []
        self.pids: list[int] = []
        self.pgs: list[Any] = []  # one single-bundle placement group per rank: a rescale frees ranks singly
        # fast rescale: ``keep_on_stop`` (set by the controller before a resize/migrate stop) leaves the
        # actors alive when the gang ends ``stopped``, in ``kept``; the next gang takes them as ``reuse``
        self.keep_on_stop = False
        self.keep_on_finish = False  # a completed gang's actors become warm spares for the next launch here
        self.kept: list[tuple[Any, Any, Any]] | None = None  # (actor, its placement group, its Device)
        self.reuse: list[tuple[Any, Any, Any]] | None = None
        self.reused = 0  # ranks of this gang that are actors kept from the previous gang
        # whether another gang of this service still holds GPUs this one places on (see ``wait_placed``)
        self.handing_over: Callable[[], bool] | None = None
        self.created_s = time.time()  # its timings are from here on (what calibration may learn from)
        self.fast_note = ""  # why the fast path was (not) used
        self._stop = threading.Event()
        self._kill = threading.Event()
        self._thread: threading.Thread | None = None
        self.started_at = time.time()
        self.ready_at: float | None = None
        self.marks: dict[str, float] = {}  # when placement, worker processes and start-up finished
        self.outcome: str | None = None
        self.reattached = False

    @property
    def name(self) -> str:
        return f"tessera-{self.job_id}-{self.attempt}"

    def startup_text(self) -> str:
        """Where the launch time went: placement group, worker processes, model build + process group."""
        t0, m = self.started_at, self.marks
        if self.ready_at is None or "placed" not in m or "workers" not in m:
            return self.fast_note
        text = (
            f"placement {m['placed'] - t0:.1f} s, worker processes {m['workers'] - m['placed']:.1f} s, "
            f"model + process group {self.ready_at - m['workers']:.1f} s"
        )
        return f"{text}; {self.fast_note}" if self.fast_note else text

    def actor_name(self, rank: int) -> str:
        return f"{self.name}-r{rank}"

    # ------------------------------------------------------------ control (any thread)
    def start(self, *, reattach: bool = False) -> None:
        self.reattached = reattach
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        """Checkpoint at the next step every rank agrees on, then end (outcome ``stopped``)."""
        self._stop.set()
        for a in list(self.actors):
            with contextlib.suppress(Exception):
                a.request_stop.remote()

    def kill(self) -> None:
        """End now without a checkpoint (cancel)."""
        self._kill.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ------------------------------------------------------------ the gang's thread
    def _main(self) -> None:
        import ray

        outcome, error, ckpt = "failed", None, None
        try:
            if self.reattached:
                self._attach()
            else:
                self._launch()
            outcome, error, ckpt = self._watch()
        except PlacementCancelled:  # stopped or killed before anything ran: the reason asked decides
            outcome, error = "killed", None
        except Exception as e:  # noqa: BLE001 - reported as the gang's failure
            outcome, error = "failed", f"{type(e).__name__}: {e}".splitlines()[0][:500]
        finally:
            keep = (self.keep_on_stop and outcome == "stopped") or (
                self.keep_on_finish and outcome == "finished"
            )
            self._teardown(ray, keep=keep)
            self.outcome = outcome
            self.events.on_end(self, outcome, error, ckpt)

    def _launch(self) -> None:
        import ray

        devices = sorted(self.plan.devices, key=lambda d: d.rank)
        kept: dict[int, tuple[Any, Any]] = {}  # rank → (actor, placement group) kept from the last gang
        if self.reuse:
            try:
                kept = self._adopt(ray, devices)
            except Exception as e:  # noqa: BLE001 - fall back to a cold launch, saying why
                self.fast_note = f"fast rescale failed ({type(e).__name__}: {str(e)[:200]}); cold launch"
                self._release(ray, [(a, pg) for a, pg, _ in self.reuse])
                kept = {}
            self.reuse = None
        self.reused = len(kept)
        self.actors = [a for a, _ in kept.values()]  # so a failure from here on still stops them
        self.pgs = [pg for _, pg in kept.values()]
        fresh = [d for d in devices if d.rank not in kept]
        pgs = self._place(ray, fresh)
        self.marks["placed"] = time.time()
        actors = self._spawn(ray, fresh, pgs)
        by_rank = {**kept, **{d.rank: (a, pg) for d, a, pg in zip(fresh, actors, pgs, strict=True)}}
        self.actors = [by_rank[d.rank][0] for d in devices]
        self.pgs = [by_rank[d.rank][1] for d in devices]
        self.pids = ray.get([a.pid.remote() for a in self.actors], timeout=self.placement_timeout_s)
        self.marks["workers"] = time.time()
        master = ray.get(self.actors[0].address.remote(bool(self.run.get("loopback", True))), timeout=60)
        plan_json = self.plan.to_json(indent=None)
        ray.get([a.start.remote(plan_json, self.run, tuple(master)) for a in self.actors], timeout=60)
        if self._stop.is_set():
            for a in self.actors:
                a.request_stop.remote()

    def _adopt(self, ray: Any, devices: list[Any]) -> dict[int, tuple[Any, Any]]:
        """Fast rescale: give the kept actors on nodes of the new allocation its ranks (``reform``: they
        re-form the process group and reshard from the checkpoint they just wrote), stop the rest. Raises
        when an actor cannot be reused (the caller stops them all and launches cold)."""
        assert self.reuse is not None
        pool: dict[str, list[tuple[Any, Any]]] = {}
        for a, pg, d in self.reuse:
            pool.setdefault(d.node, []).append((a, pg))
        kept: dict[int, tuple[Any, Any]] = {}
        for d in devices:
            if pool.get(d.node):
                kept[d.rank] = pool[d.node].pop(0)
        leaving = [x for xs in pool.values() for x in xs]
        self._release(ray, leaving)  # before placing the new ranks: their GPUs may be the ones freed
        self.reuse = [(a, pg, None) for a, pg in kept.values()]  # a failure below releases these
        world = len(devices)
        by_rank = {d.rank: d for d in devices}
        oks = ray.get(
            [a.reform.remote(r, world, by_rank[r].gpu_type) for r, (a, _) in kept.items()],
            timeout=60,
        )
        if not all(oks):
            raise RuntimeError("a kept worker had not stopped cleanly")
        if kept:
            self.fast_note = f"fast rescale: kept {len(kept)} of {world} worker(s), stopped {len(leaving)}"
        else:
            self.fast_note = "fast rescale not used: no kept worker is on the new allocation's nodes"
        return kept

    def _place(self, ray: Any, devices: list[Any]) -> list[Any]:
        """One single-bundle placement group per device, pinned to its node (detached like the actors: a
        placement group dies with the driver that made it, and its actors with it)."""
        from ray.util.placement_group import placement_group

        pgs = []
        for d in devices:
            pgs.append(
                placement_group(
                    [{"GPU": 1, "CPU": self.cluster.cpus_per_gpu}],
                    strategy="PACK",
                    name=f"{self.name}-r{d.rank}",
                    bundle_label_selector=[{RAY_NODE_ID_LABEL: self.cluster.node_id(d.node)}],
                    lifetime="detached",
                )
            )
        self.pgs.extend(pgs)  # so a failure while placing still removes them
        # a stop asked while still placing (a round moved the job on before its GPUs were free) ends the
        # launch here: otherwise the gang waits behind the jobs given those GPUs, holding the job's place
        wait_placed(
            ray,
            pgs,
            self.placement_timeout_s,
            handing_over=self.handing_over,
            cancelled=lambda: self._kill.is_set() or self._stop.is_set(),
        )
        return pgs

    def _spawn(self, ray: Any, devices: list[Any], pgs: list[Any]) -> list[Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from tessera.service.device_worker import DeviceWorker

        worker = ray.remote(DeviceWorker)
        world = self.plan.world_size
        out = []
        for d, pg in zip(devices, pgs, strict=True):
            opts = {
                "name": self.actor_name(d.rank),
                "namespace": NAMESPACE,
                "lifetime": "detached",
                "num_cpus": self.cluster.cpus_per_gpu,
                "num_gpus": 1,
                "max_restarts": 0,
                "scheduling_strategy": PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0),
            }
            core, neighbour = self.cluster.device_core(d.node, d.local_index)
            out.append(worker.options(**opts).remote(d.rank, world, d.gpu_type, core, neighbour))
            self.actors.append(out[-1])  # so a failure from here on still kills it
        return out

    @staticmethod
    def _release(ray: Any, pairs: list[tuple[Any, Any]]) -> None:
        from ray.util.placement_group import remove_placement_group

        for a, pg in pairs:
            with contextlib.suppress(Exception):
                ray.kill(a, no_restart=True)
            if pg is not None:
                with contextlib.suppress(Exception):
                    remove_placement_group(pg)

    @staticmethod
    def release_now(pairs: list[tuple[Any, Any]]) -> None:
        """Stop actors and remove their placement groups (warm spares the service lets go)."""
        import ray

        Gang._release(ray, pairs)

    def release_kept(self) -> None:
        """Stop the actors this gang kept for a fast rescale that will not happen (idempotent)."""
        import ray

        kept, self.kept = self.kept, None
        if kept:
            self._release(ray, [(a, pg) for a, pg, _ in kept])

    def _attach(self) -> None:
        import ray
        from ray.util.placement_group import get_placement_group

        world = self.plan.world_size
        # the placement groups first: a reattach that fails after this (a worker that does not answer) still
        # removes them in its teardown — recorded after the first call, such a failure left them holding the
        # GPUs and every relaunch waited for placement groups that never became ready
        for r in range(world):
            with contextlib.suppress(Exception):
                self.pgs.append(get_placement_group(f"{self.name}-r{r}"))
        self.actors = [ray.get_actor(self.actor_name(r), namespace=NAMESPACE) for r in range(world)]
        self.pids = ray.get([a.pid.remote() for a in self.actors], timeout=30)
        self.ready_at = time.time()  # its "ready" messages went to the previous server

    def _watch(self) -> tuple[str, str | None, int | None]:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        from tessera.runtime.telemetry import RankStep, merge

        world = len(self.actors)
        cursors = [0] * world
        pending: dict[int, list[RankStep]] = {}
        ready: set[int] = set()
        start_step = 0
        last_progress = time.time()
        stop_sent = False
        while True:
            if self._kill.is_set():
                return "killed", None, None
            if self._stop.is_set() and not stop_sent:
                for a in self.actors:
                    a.request_stop.remote()
                stop_sent = True
            try:
                replies = ray.get(
                    [a.poll.remote(c) for a, c in zip(self.actors, cursors, strict=True)], timeout=60
                )
            except RayActorError as e:
                return "failed", _actor_error(e), None
            except GetTimeoutError:
                return "failed", "a worker did not answer for 60 s", None
            records = []
            for r, rep in enumerate(replies):
                cursors[r] = rep["next"]
                for m in rep["messages"]:
                    kind = m.get("kind")
                    if kind == "ready":
                        ready.add(r)
                        start_step = int(m["start_step"])
                    elif kind == "step":
                        fields = {k: v for k, v in m.items() if k != "kind"}
                        parts = pending.setdefault(fields["step"], [])
                        parts.append(RankStep(**fields))
                        if len(parts) == world:
                            rec = merge(pending.pop(fields["step"]), self.plan.global_batch)
                            d = _record_dict(rec)
                            records.append(d)
                    elif (
                        kind == "checkpoint" and r == 0
                    ):  # rank 0 renames it into place after every rank wrote
                        self.events.on_checkpoint(self, int(m["step"]))
                    elif kind == "error":
                        return "failed", f"rank {m['rank']}: {m['error']}", None
            if len(ready) == world and self.ready_at is None:
                self.ready_at = time.time()
                self.events.on_ready(self, start_step)
            if records:
                last_progress = time.time()
                records.sort(key=lambda d: d["step"])
                self.events.on_steps(self, records)
            states = [rep["state"] for rep in replies]
            ended = ("diverged", "failed", "finished", "stopped")
            if any(s == "diverged" for s in states) and all(s in ended for s in states):
                # every rank ended at that step, so every rank's record of it is in these replies
                err = next(rep["error"] for rep in replies if rep["state"] == "diverged")
                return "diverged", err, replies[0]["checkpoint_step"]
            if any(s == "failed" for s in states):
                err = next(rep["error"] for rep in replies if rep["state"] == "failed")
                return "failed", err, None
            if all(s in ("finished", "stopped") for s in states):
                ck = replies[0]["checkpoint_step"]
                return ("stopped" if any(s == "stopped" for s in states) else "finished"), None, ck
            if self.ready_at is not None and time.time() - last_progress > self.watchdog_s:
                return "failed", f"no step finished for {self.watchdog_s:.0f} s (hung)", None
            if (
                self.ready_at is None
                and time.time() - self.started_at > self.watchdog_s + self.placement_timeout_s
            ):
                return "failed", "workers did not get ready", None
            time.sleep(self.poll_s)

    def _teardown(self, ray: Any, *, keep: bool = False) -> None:
        """Kill the actors and remove the placement groups — or, ``keep`` (a clean stop for a fast
        rescale), hand every rank's actor and placement group to :attr:`kept` for the next gang."""
        if self.reuse:  # kept actors never adopted (failed or cancelled before ``_launch`` took them)
            self._release(ray, [(a, pg) for a, pg, _ in self.reuse])
            self.reuse = None
        devices = sorted(self.plan.devices, key=lambda d: d.rank)
        if keep and len(self.actors) == len(devices) and len(self.pgs) == len(devices):
            self.kept = list(zip(self.actors, self.pgs, devices, strict=True))
        else:
            pgs = self.pgs + [None] * (len(self.actors) - len(self.pgs))
            self._release(ray, list(zip(self.actors, pgs, strict=False)))
            for pg in self.pgs[len(self.actors) :]:
                self._release(ray, [(None, pg)])
        self.actors = []
        self.pgs = []


def _record_dict(rec: Any) -> dict[str, Any]:
    import json

    return json.loads(rec.to_json())


def _actor_error(e: Exception) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return f"a worker died ({type(e).__name__}): {text[:300]}"


def find_gang_actors(job_id: int, attempt: int, world: int) -> bool:
    """Whether every rank's actor of this gang still exists (a restarted server may reattach)."""
    import ray

    try:
        for r in range(world):
            ray.get_actor(f"tessera-{job_id}-{attempt}-r{r}", namespace=NAMESPACE)
        return True
    except ValueError:
        return False
