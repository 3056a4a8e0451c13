"""A dispatch-mode tensor-memory tracker: every storage counted once, from birth to death, by category.

Semantics follow the CUDA caching allocator as ``torch.cuda.memory_allocated()`` sees it: each storage
costs its size rounded up to 512 B (CPU storages: their exact size, as the CPU allocator reports), from
the op that creates it until the StorageImpl dies (weakref callback). Views and in-place ops cost nothing.

Two corrections make it match an un-instrumented run (see notes/memory-and-time-estimation.md §3):

* **In-place gradient accumulation.** While any dispatch mode is active (FakeTensorMode is one),
  ``at::isTensorSubclassLike`` is true, so autograd's ``InputBuffer::accumulate`` computes ``old + new``
  out of place where a plain run does ``old.add_(new)``. The tracker re-applies the engine's
  ``can_accumulate_inplace`` rule (dense, the engine holds the only reference to tensor and storage):
  the sum is then charged as reusing ``old``'s block. Reference counts are read from the TensorImpl and
  StorageImpl and compared with counts calibrated on a graph whose accumulation is known to be in place.
* **Storage resizes** (FSDP2 frees and re-allocates unsharded parameters with ``UntypedStorage.resize_``)
  are followed, since they bypass dispatch.

With ``timeline=True`` the tracker also keeps the event list of the tracked iteration (every storage's
birth with its shape and dtype, its death, resizes, and caller marks such as layer boundaries): the raw
material ``bench/memory_calibrate.py`` compiles into the fast formula's per-layer event tables.
"""

from __future__ import annotations

import ctypes
import math
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten

from tessera.memory.breakdown import CATEGORIES, PHASES

aten = torch.ops.aten

#: CUDA caching allocator block granularity (c10/cuda/CUDACachingAllocator.cpp kMinBlockSize).
CUDA_BLOCK_BYTES = 512
SETUP = "setup"  # before the tracked iteration: new storages are "other" until relabelled


#: Collectives whose first argument is a buffer worth naming: FSDP2's all-gather staging buffer (comm,
#: "other") and the reduce-scatter output its sharded gradients are views of.
_COLLECTIVE_OUTPUT_LABELS = {
    "_allgather_base_": "other",
    "allgather_into_tensor_coalesced_": "other",
    "_reduce_scatter_base_": "gradients",
    "reduce_scatter_tensor_coalesced_": "gradients",
}


def round_up(nbytes: int, block: int = CUDA_BLOCK_BYTES) -> int:
    return 0 if nbytes <= 0 else int(math.ceil(nbytes / block)) * block


def tensor_use_count(t: torch.Tensor) -> int:
    """Strong reference count of the TensorImpl (``intrusive_ptr_target::combined_refcount_`` low word).

    torch exposes no Python getter; the count sits right after the vtable pointer (c10/util/intrusive_ptr.h).
    Only compared against a calibrated value, never interpreted absolutely.
    """
    return ctypes.c_uint32.from_address(t._cdata + 8).value


def storage_use_count(t: torch.Tensor) -> int:
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


def _dense(t: torch.Tensor) -> bool:
    return bool(torch._prims_common.is_non_overlapping_and_dense_or_false(t))


def _plain_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Tensors in a pytree, with traceable wrapper subclasses (DTensor) opened down to their inner tensors."""
    leaves, _ = tree_flatten(obj)
    stack = [x for x in leaves if isinstance(x, torch.Tensor)]
    while stack:
        t = stack.pop()
        if is_traceable_wrapper_subclass(t):
            attrs, _ = t.__tensor_flatten__()
            stack.extend(x for x in (getattr(t, a) for a in attrs) if isinstance(x, torch.Tensor))
        else:
            yield t


@dataclass
class _Record:
    nbytes: int
    category: str
    rounded: bool
    node_id: int  # autograd node (sequence nr) that created it in backward, -1 otherwise
    counted: bool = True  # False once its bytes were handed to an in-place accumulation result


@dataclass(frozen=True)
class Snapshot:
    peak_bytes: int
    peak_phase: str
    breakdown: dict[str, int]
    phase_peaks: dict[str, int]
    phase_breakdowns: dict[str, dict[str, int]]
    current_bytes: int
    start_bytes: int


class MemoryTracker(TorchDispatchMode):
    """Counts live tensor storages; ``phase`` and ``label`` say what new and existing tensors are.

    Enter it *inside* ``FakeTensorMode`` (so it sees ops before the fake mode turns them into fakes).
    """

    def __init__(
        self,
        *,
        block_bytes: int = CUDA_BLOCK_BYTES,
        emulate_inplace_accumulation: bool = True,
        timeline: bool = False,
    ) -> None:
        super().__init__()
        #: events of the tracked iteration (``reset_peak`` restarts it), when asked for:
        #: ["A", key, nbytes, rounded, shape, dtype, category] birth; ["F", key, rounded] death;
        #: ["R", key, nbytes, rounded, previous rounded] resize; ["M", label, layer] mark
        self.timeline: list[list[Any]] | None = [] if timeline else None
        self.block_bytes = block_bytes
        self.emulate_inplace_accumulation = emulate_inplace_accumulation
        self._phase = SETUP
        self.current_bytes = 0
        self.by_category: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
        self.phase_peaks: dict[str, int] = {}
        self.phase_breakdowns: dict[str, dict[str, int]] = {}
        self._records: dict[int, _Record] = {}
        self._refs: dict[int, weakref.ref] = {}
        self.inplace_accumulations = 0
        self._calibrated: tuple[int, int] | None = None
        self._calibrating: list[tuple[int, int]] | None = None
        self._orig_resize: Any = None
        self.reset_peak()

    # ------------------------------------------------------------------ state
    @property
    def phase(self) -> str:
        """One of setup / fwd / bwd / opt: names new tensors and the phase a peak belongs to."""
        return self._phase

    @phase.setter
    def phase(self, phase: str) -> None:
        self._phase = phase
        self.mark("phase:" + phase)
        # a phase that allocates nothing still has a level: what is live when it starts
        if self.current_bytes > self.phase_peaks.get(phase, -1):
            self.phase_peaks[phase] = self.current_bytes
            self.phase_breakdowns[phase] = dict(self.by_category)

    def mark(self, label: str, layer: int = -1) -> None:
        """Note a moment in the timeline (layer boundaries, autocast exit); a no-op without a timeline."""
        if self.timeline is not None:
            self.timeline.append(["M", label, layer])

    def reset_peak(self) -> None:
        """Forget the peak so far: the tracked iteration starts from what is live now."""
        if self.timeline is not None:
            self.timeline.clear()
        self.peak_bytes = self.current_bytes
        self.peak_phase = self.phase
        self.peak_breakdown = dict(self.by_category)
        self.phase_peaks: dict[str, int] = {}
        self.phase_breakdowns: dict[str, dict[str, int]] = {}
        self.start_bytes = self.current_bytes

    def snapshot(self) -> Snapshot:
        return Snapshot(
            peak_bytes=self.peak_bytes,
            peak_phase=self.peak_phase,
            breakdown={k: v for k, v in self.peak_breakdown.items() if v},
            phase_peaks={p: self.phase_peaks[p] for p in (*PHASES, SETUP) if p in self.phase_peaks},
            phase_breakdowns={
                p: {k: v for k, v in self.phase_breakdowns[p].items() if v}
                for p in (*PHASES, SETUP)
                if p in self.phase_breakdowns
            },
            current_bytes=self.current_bytes,
            start_bytes=self.start_bytes,
        )

    def live_by_category(self) -> dict[str, int]:
        return {k: v for k, v in self.by_category.items() if v}

    def _bump(self, nbytes: int, category: str) -> None:
        self.current_bytes += nbytes
        self.by_category[category] += nbytes
        if nbytes > 0:
            cur = self.current_bytes
            if cur > self.phase_peaks.get(self.phase, -1):
                self.phase_peaks[self.phase] = cur
                self.phase_breakdowns[self.phase] = dict(self.by_category)
            if cur > self.peak_bytes:
                self.peak_bytes = cur
                self.peak_phase = self.phase
                self.peak_breakdown = dict(self.by_category)

    def _new_category(self) -> str:
        phase = self.phase
        if phase == "fwd":
            return "activations"
        if phase == "bwd":
            # checkpoint recomputation runs forward ops with grad enabled inside backward
            return "activations" if torch.is_grad_enabled() else "bwd_tmp"
        if phase == "opt":
            return "opt_tmp"
        return "other"

    # ------------------------------------------------------------- registry
    def _track(self, t: torch.Tensor, category: str | None, relabel: bool) -> None:
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse / nested layouts: no single storage
            return
        key = st._cdata
        rec = self._records.get(key)
        rounded = t.device.type != "cpu"
        nbytes = round_up(st.nbytes(), self.block_bytes) if rounded else st.nbytes()
        if rec is None:
            node_id = -1
            if self.phase == "bwd" and not torch.is_grad_enabled():
                node = torch._C._current_autograd_node()
                node_id = node._sequence_nr() if node is not None else -1
            cat = category or self._new_category()
            rec = _Record(nbytes, cat, rounded, node_id)
            self._records[key] = rec
            if self.timeline is not None:
                dtype = str(t.dtype).removeprefix("torch.")
                self.timeline.append(["A", key, st.nbytes(), nbytes, list(t.shape), dtype, cat])
            self._refs[key] = weakref.ref(st, partial(self._on_free, key))
            self._bump(nbytes, cat)
            return
        if rec.counted and nbytes != rec.nbytes:  # resized in place (resize_, set_)
            if self.timeline is not None:
                self.timeline.append(["R", key, st.nbytes(), nbytes, rec.nbytes])
            self._bump(nbytes - rec.nbytes, rec.category)
            rec.nbytes = nbytes
        if relabel and category is not None and category != rec.category:
            if rec.counted:
                self.by_category[rec.category] -= rec.nbytes
                self.by_category[category] += rec.nbytes
            rec.category = category

    def _on_free(self, key: int, _ref: weakref.ref) -> None:
        rec = self._records.pop(key, None)
        self._refs.pop(key, None)
        if rec is not None and rec.counted and self.timeline is not None:
            self.timeline.append(["F", key, rec.nbytes])
        if rec is not None and rec.counted:
            self.current_bytes -= rec.nbytes
            self.by_category[rec.category] -= rec.nbytes

    def label(self, tensors: Iterable[Any] | Any, category: str) -> None:
        """Register (or relabel) the storages of ``tensors`` as ``category`` (params, states, inputs...)."""
        if category not in self.by_category:
            raise ValueError(f"unknown category {category!r}; expected one of {', '.join(CATEGORIES)}")
        for t in _plain_tensors(list(tensors) if not isinstance(tensors, torch.Tensor) else [tensors]):
            self._track(t, category, relabel=True)

    def relabel_live(self, from_categories: Iterable[str], to_category: str) -> None:
        """Move every live storage of ``from_categories`` to ``to_category`` (e.g. leftovers -> other)."""
        src = set(from_categories)
        for rec in self._records.values():
            if rec.category in src and rec.category != to_category:
                if rec.counted:
                    self.by_category[rec.category] -= rec.nbytes
                    self.by_category[to_category] += rec.nbytes
                rec.category = to_category

    def category_of(self, t: torch.Tensor) -> str | None:
        rec = self._records.get(t.untyped_storage()._cdata)
        return rec.category if rec is not None else None

    def watch_grads(self, params: Iterable[torch.Tensor]) -> list[Any]:
        """Relabel each parameter's ``.grad`` as a gradient once autograd has accumulated it."""

        def hook(p: torch.Tensor) -> None:
            if p.grad is not None:
                self.label(p.grad, "gradients")

        return [p.register_post_accumulate_grad_hook(hook) for p in params if p.requires_grad]

    # ------------------------------------------------------- accumulation
    def calibrate(self, device: torch.device | str) -> tuple[int, int]:
        """Reference counts the engine's accumulation buffer shows when it holds the only reference.

        Runs ``x.exp() + x.sin()`` backward: ``x``'s two incoming gradients are fresh, uniquely owned
        tensors, which a plain run accumulates in place.
        """
        saved_phase = self._phase
        self._calibrating = []
        try:
            self._phase = "bwd"
            with torch.enable_grad():
                x = torch.zeros(64, device=device, requires_grad=True)
                ((x.exp() + x.sin()).sum()).backward()
            seen = self._calibrating
        finally:
            self._calibrating = None
            self._phase = saved_phase
        if len(seen) != 1:
            raise RuntimeError(f"accumulation calibration saw {len(seen)} engine additions, expected 1")
        self._calibrated = seen[0]
        return self._calibrated

    def _is_inplace_accumulation(self, func: Any, args: tuple, kwargs: dict) -> bool:
        if func is not aten.add.Tensor or self.phase != "bwd" or torch.is_grad_enabled():
            return False
        if len(args) != 2 or kwargs.get("alpha", 1) != 1:
            return False
        old, new = args
        if not (isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor)):
            return False
        if is_traceable_wrapper_subclass(old) or old.shape != new.shape or old.dtype != new.dtype:
            return False
        if not _dense(old):
            return False
        counts = (tensor_use_count(old), storage_use_count(old))
        if self._calibrating is not None:
            self._calibrating.append(counts)
            return False
        if counts != self._calibrated:
            return False
        rec = self._records.get(old.untyped_storage()._cdata)
        if rec is None or not rec.counted:
            return False
        # formula-internal sums add two tensors made by the node now running; the engine adds a buffered
        # gradient made by an earlier node
        node = torch._C._current_autograd_node()
        return node is None or rec.node_id != node._sequence_nr()

    # --------------------------------------------------------------- mode
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        inplace = (
            self._calibrating is not None
            or (self.emulate_inplace_accumulation and self._calibrated is not None)
        ) and self._is_inplace_accumulation(func, args, kwargs)
        out = func(*args, **kwargs)
        if inplace:
            old_rec = self._records[args[0].untyped_storage()._cdata]
            # the sum takes over old's block: release old's bytes now, charge the result below
            old_rec.counted = False
            if self.timeline is not None:
                self.timeline.append(["F", args[0].untyped_storage()._cdata, old_rec.nbytes])
            self.current_bytes -= old_rec.nbytes
            self.by_category[old_rec.category] -= old_rec.nbytes
            self.inplace_accumulations += 1
            self._track(out, old_rec.category, relabel=False)
            return out
        for t in _plain_tensors(out):
            self._track(t, None, relabel=False)
        if func.namespace == "c10d" and args:
            label = _COLLECTIVE_OUTPUT_LABELS.get(func._opname)
            if label is not None:
                for t in _plain_tensors(args[0]):
                    self._track(t, label, relabel=True)
        return out

    def __enter__(self) -> MemoryTracker:
        self._patch_resize()
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self._unpatch_resize()

    def _patch_resize(self) -> None:
        if self._orig_resize is not None:
            return
        orig = torch.UntypedStorage.resize_
        tracker = self

        def resize_(st: torch.UntypedStorage, size: int) -> Any:
            result = orig(st, size)
            rec = tracker._records.get(st._cdata)
            if rec is not None and rec.counted:
                nbytes = round_up(st.nbytes(), tracker.block_bytes) if rec.rounded else st.nbytes()
                if tracker.timeline is not None:
                    tracker.timeline.append(["R", st._cdata, st.nbytes(), nbytes, rec.nbytes])
                tracker._bump(nbytes - rec.nbytes, rec.category)
                rec.nbytes = nbytes
            return result

        self._orig_resize = orig
        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign]

    def _unpatch_resize(self) -> None:
        if self._orig_resize is not None:
            torch.UntypedStorage.resize_ = self._orig_resize  # type: ignore[method-assign]
            self._orig_resize = None


@contextmanager
def tracking(tracker: MemoryTracker) -> Iterator[MemoryTracker]:
    with tracker:
        yield tracker
