"""A fake "cuda" device for CPU-only torch builds, so fake-tensor traces get CUDA semantics without a GPU.

The C++ shim (``fake_cuda_shim.cpp``) registers c10's ``FakeGuardImpl`` for the CUDA device type and a
CUDA hooks object that only *reports* CUDA. Tensors on that device must be FakeTensors: no CUDA memory,
stream or kernel exists. What it buys: CUDA dispatch keys (CUDA autocast policy, 1-byte dropout masks,
CUDA meta shapes of fused kernels) and autograd on ``FakeTensor(device="cuda")``.

Measured constraint (torch 2.13): the shim must be ``dlopen``ed **before** ``import torch``. ``import
torch`` queries the accelerator once and caches the answer (``at::getAccelerator``); a shim loaded later
registers fine but autograd still fails with "Cannot access accelerator device when none is available".
Hence traces on the fake device run in a fresh subprocess (``python -m tessera.memory.fakecuda``, request
JSON on stdin, result JSON on stdout), which also keeps the AMP monkeypatches out of the caller.

This module must not import torch at module level.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

SHIM_SOURCE = Path(__file__).with_name("fake_cuda_shim.cpp")
_SHIM_SYMBOL = "tessera_fake_cuda_version"
_loaded_path: Path | None = None


class FakeCudaError(RuntimeError):
    """The fake CUDA device cannot be built or loaded; the message says why and what to do."""


def _torch_dir() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise FakeCudaError("torch is not installed: install tessera[torch] to trace memory")
    return Path(spec.origin).parent


def _torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - torch from a source tree
        return "unknown"


def cache_dir() -> Path:
    """Where built shims live: ``TESSERA_CACHE_DIR``, else ``$TESSERA_HOME``, else ``~/.cache/tessera``."""
    root = (
        os.environ.get("TESSERA_CACHE_DIR")
        or os.environ.get("TESSERA_HOME")
        or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tessera")
    )
    return Path(root)


def shim_path() -> Path:
    """Path of the compiled shim for this torch install and shim source (content-addressed)."""
    torch_dir = _torch_dir()
    key = hashlib.sha256()
    key.update(SHIM_SOURCE.read_bytes())
    key.update(str(torch_dir).encode())
    key.update(_torch_version().encode())
    with contextlib.suppress(OSError):
        key.update(str((torch_dir / "lib" / "libtorch_cpu.so").stat().st_mtime_ns).encode())
    return cache_dir() / f"fakecuda-{_torch_version()}-{key.hexdigest()[:16]}.so"


def _cxx11_abi(torch_dir: Path) -> int:
    """The C++11 ABI flag torch was built with, read from its headers' build config without importing it."""
    # torch >= 2.x wheels are all built with the new ABI except some old manylinux2014 builds; the
    # build-time flag is recorded in torch/_C/_GLIBCXX_USE_CXX11_ABI only at runtime, so ask a child.
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return int(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() in ("0", "1") else 1


def build_shim(*, force: bool = False) -> Path:
    """Compile the shim once into the cache directory (atomic rename, so concurrent builders are safe)."""
    target = shim_path()
    if target.exists() and not force:
        return target
    cxx = (
        shutil.which(os.environ["CXX"])
        if os.environ.get("CXX")
        else shutil.which("g++") or shutil.which("c++")
    )
    if cxx is None:
        raise FakeCudaError(
            "g++ not found: the fake CUDA device is a small C++ shim compiled against torch's headers. "
            "Install g++ (e.g. `apt-get install g++`) or set CXX to a C++17 compiler."
        )
    torch_dir = _torch_dir()
    include = torch_dir / "include"
    if not (include / "c10" / "core" / "impl" / "FakeGuardImpl.h").exists():
        raise FakeCudaError(f"torch headers not found under {include}: this torch install has no C++ headers")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    lib = torch_dir / "lib"
    cmd = [
        cxx,
        "-O1",
        "-shared",
        "-fPIC",
        "-std=c++17",
        "-w",
        f"-D_GLIBCXX_USE_CXX11_ABI={_cxx11_abi(torch_dir)}",
        f"-I{include}",
        f"-I{include / 'torch' / 'csrc' / 'api' / 'include'}",
        str(SHIM_SOURCE),
        f"-L{lib}",
        "-lc10",
        "-ltorch_cpu",
        f"-Wl,-rpath,{lib}",
        "-o",
        tmp,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise FakeCudaError(f"building the fake CUDA shim failed ({' '.join(cmd)}):\n{proc.stderr[-4000:]}")
    os.replace(tmp, target)
    return target


def is_loaded() -> bool:
    """Whether this process has the fake CUDA device (shim loaded before torch)."""
    return _loaded_path is not None


def can_load_in_process() -> bool:
    """True while torch is not imported yet (or the shim is already in): the only time loading works."""
    return is_loaded() or "torch" not in sys.modules


def load() -> Path:
    """Build (once) and dlopen the shim into this process. Must run before ``import torch``."""
    global _loaded_path
    if _loaded_path is not None:
        return _loaded_path
    if "torch" in sys.modules:
        raise FakeCudaError(
            "torch is already imported in this process; the fake CUDA device must be loaded before "
            "`import torch` (torch caches the accelerator query). Use tessera.memory.trace's subprocess "
            "API, or call tessera.memory.fakecuda.load() first thing."
        )
    path = build_shim()
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    if getattr(lib, _SHIM_SYMBOL, None) is None:  # pragma: no cover - corrupt cache
        raise FakeCudaError(f"{path} is not the tessera fake CUDA shim; delete it and retry")
    _loaded_path = path
    return path


@contextlib.contextmanager
def amp_patches() -> Iterator[None]:
    """Let ``torch.autocast("cuda")`` and ``GradScaler("cuda")`` run on the fake device.

    Both consult ``torch.cuda.is_available()`` (False on a CPU build even with the shim) through
    ``amp_definitely_not_available`` and ``is_bf16_supported``; patched only inside this context.
    """
    import torch
    import torch.cuda.amp.common as amp_common

    saved = (amp_common.amp_definitely_not_available, torch.cuda.is_bf16_supported)
    amp_common.amp_definitely_not_available = lambda: False
    torch.cuda.is_bf16_supported = lambda including_emulation=True: True
    try:
        yield
    finally:
        amp_common.amp_definitely_not_available, torch.cuda.is_bf16_supported = saved
