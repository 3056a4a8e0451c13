"""Loaded-box thread timing for a server under test (``PYTHONPATH`` names this folder; a test aid, not a mock:
the real server runs, only two first imports are slowed).

A restarted server's gang threads make their first Ray call while the main thread builds the HTTP app. Ray
builds its serialization context at a process's first serialization (importing ``ray._common.pydantic_compat``,
which imports ``pydantic.v1``); FastAPI imports ``pydantic.v1`` while it builds its routes. On a loaded box the
two first imports can overlap, and ``pydantic.v1`` (a package that imports itself in a cycle) then fails in
one thread with ``KeyError: 'pydantic.v1'``. Here they overlap whenever the server lets them:

- the main thread's import of ``pydantic.v1`` is 2 s longer;
- a ``tessera-*`` thread (a gang) that starts Ray's serialization context waits until the main thread is inside
  that import (at most 20 s), so its own import of ``pydantic.v1`` lands in the middle of it.

A server that makes its first Ray serialization in the main thread before starting any gang thread (and so
imports ``pydantic.v1`` there first) is unaffected but for the 2 s. The sleeps run in the modules' execution,
under their own module locks (in ``find_spec`` they would hold the global import lock and serialize every
import). Any ``sitecustomize`` this one shadows still runs.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
import time

_main_in_v1 = threading.Event()


def _in_main(name: str) -> None:
    _main_in_v1.set()
    sys.stderr.write(f"[interleave] main thread imports {name} (+2 s)\n")
    time.sleep(2.0)


def _in_gang(name: str) -> None:
    sys.stderr.write(f"[interleave] {threading.current_thread().name} waits to import {name}\n")
    _main_in_v1.wait(20.0)
    time.sleep(0.2)


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, before) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.before = inner, before

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:  # type: ignore[no-untyped-def]
        self.before(module.__name__)
        self.inner.exec_module(module)


class _Interleave(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):  # type: ignore[no-untyped-def]
        t = threading.current_thread()
        if name == "pydantic.v1.dataclasses" and t is threading.main_thread():
            before = _in_main
        elif name == "ray._common.pydantic_compat" and t.name.startswith("tessera-"):
            before = _in_gang
        else:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, before)
        return spec


sys.meta_path.insert(0, _Interleave())

_here = os.path.dirname(os.path.abspath(__file__))
_shadowed = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here]
)
if _shadowed is not None and _shadowed.loader is not None:
    _shadowed.loader.exec_module(importlib.util.module_from_spec(_shadowed))
