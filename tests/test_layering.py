"""The package's layering, stated once and checked against its real imports (function-local ones included),
and the absence of import cycles among its modules.

The rules are the design notes' (DESIGN.md, "Layers"): data flows one way; a lower layer never imports a
higher one; the runtime imports only the plan (and errors), the torch-side model package and torch. Every
``import`` in ``src/tessera`` is read with :mod:`ast` — inside functions too, since a function-local import
still ties the layers together — so a violation fails here with the module, line and the rule it breaks.
"""

from __future__ import annotations

import ast
import graphlib
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# The torch side ("nn"), exactly the ``tessera.nn`` package: the zoo's torch modules, the Hugging Face adapters,
# TP / vocab-parallel layers, DTensor plans, the tracer of user modules and the CPU pinning the runtime and the
# profiler share.
NN = "tessera.nn"
BASE = ("tessera.hardware", "tessera.models", "tessera.plan", "tessera.errors", "tessera.jobs")
LAYERS = ("memory", "perf", "planning", "scheduler", "runtime", "sim", "service")
ALL = {"base", "nn", *LAYERS, "face"}
# layer -> the layers it may import (its own included)
MAY: dict[str, set[str]] = {
    "base": {"base"},
    "nn": {"base", "nn"},
    "memory": {"base", "nn", "memory"},
    "perf": {"base", "nn", "memory", "perf"},
    "planning": {"base", "nn", "memory", "perf", "planning"},
    "scheduler": {"base", "nn", "memory", "perf", "planning", "scheduler"},
    "runtime": {"nn", "runtime"},  # and, of the base layer, only the plan and errors
    "sim": ALL - {"service", "face"},
    "service": ALL - {"sim", "face"},
    "face": ALL,  # the CLI, its commands and the public API
}
RUNTIME_BASE = ("tessera.plan", "tessera.errors")


def _under(mod: str, prefix: str) -> bool:
    return mod == prefix or mod.startswith(prefix + ".")


def layer_of(mod: str) -> str:
    if _under(mod, NN):
        return "nn"
    for name in LAYERS:
        if _under(mod, f"tessera.{name}"):
            return name
    if any(_under(mod, p) for p in BASE):
        return "base"
    return "face"


def may_import(src: str, dst: str) -> bool:
    src_layer, dst_layer = layer_of(src), layer_of(dst)
    if dst_layer in MAY[src_layer]:
        return True
    return src_layer == "runtime" and dst_layer == "base" and any(_under(dst, p) for p in RUNTIME_BASE)


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the Tessera module (or package) imported
    line: int
    top_level: bool  # executed when the module is imported (not inside a function or a TYPE_CHECKING block)


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / "tessera").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(module: str, path: Path, known: dict[str, Path]) -> list[Import]:
    """Every import of a Tessera module in ``path`` (``from pkg import sub`` names the submodule)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(child, False)
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                visit(child, False)  # checked against the rules, never executed
                continue
            if isinstance(child, ast.Import):
                found.extend(Import(module, a.name, child.lineno, top) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*up, *([child.module] if child.module else [])])
                for a in child.names:
                    sub = f"{base}.{a.name}"
                    found.append(Import(module, sub if sub in known else base, child.lineno, top))
            visit(child, top)

    visit(ast.parse(path.read_text()), True)
    return [i for i in found if _under(i.target, "tessera")]


def _all_imports() -> list[Import]:
    known = _modules()
    return [i for m, p in sorted(known.items()) for i in _imports(m, p, known)]


def test_no_module_imports_a_layer_above_its_own():
    bad = [
        f"{i.module}:{i.line} imports {i.target} ({layer_of(i.module)} may not import {layer_of(i.target)})"
        for i in _all_imports()
        if not may_import(i.module, i.target)
    ]
    assert not bad, "\n".join(bad)


def test_the_rules_catch_what_they_forbid(tmp_path):
    # the checker itself: what the design notes forbid is refused, what they allow passes
    assert not may_import("tessera.runtime.engine", "tessera.perf.estimate")
    assert not may_import("tessera.runtime.engine", "tessera.hardware.catalog")
    assert may_import("tessera.runtime.engine", "tessera.plan")
    assert may_import("tessera.runtime.engine", "tessera.nn.zoo.gpt")
    assert not may_import("tessera.runtime.model", "tessera.models.zoo")  # the catalog only through nn.zoo
    assert layer_of("tessera.models.zoo.gpt") == "base" and layer_of("tessera.nn.common") == "nn"
    assert layer_of("tessera.nn") == "nn" and layer_of("tessera.nnx") == "face"
    assert may_import("tessera.nn.zoo", "tessera.models.zoo") and may_import("tessera.nn.hf", "tessera.jobs")
    assert not may_import("tessera.models.zoo", "tessera.nn.zoo")  # the catalog never reaches the torch side
    assert not may_import("tessera.nn.trace", "tessera.memory.trace")
    assert not may_import("tessera.perf.estimate", "tessera.scheduler.core")
    assert not may_import("tessera.scheduler.core", "tessera.service.store")
    assert not may_import("tessera.nn.zoo.gpt", "tessera.runtime.engine")
    assert may_import("tessera.commands.train", "tessera.service.model_source")
    assert not may_import("tessera.sim.simulator", "tessera.service.store")
    module = tmp_path / "x.py"
    module.write_text("def f():\n    from tessera.service import store\n")
    imports = _imports("tessera.perf.x", module, {"tessera.service.store": Path()})
    assert [(i.target, i.top_level) for i in imports] == [("tessera.service.store", False)]


def test_no_import_cycle_among_the_modules():
    # what runs when a module is imported (top-level imports; a package's __init__ importing its own
    # submodules is how packages re-export, so the edge from a submodule up to its package is not followed)
    graph: dict[str, set[str]] = {}
    for i in _all_imports():
        if i.top_level and i.target != i.module and not _under(i.module, i.target):
            graph.setdefault(i.module, set()).add(i.target)
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        raise AssertionError(f"import cycle: {' -> '.join(e.args[1])}") from None
    assert "tessera.plan" in order and "tessera.runtime.engine" in order


def test_the_base_layer_and_the_runtime_load_what_their_layer_allows():
    # what the import reader cannot see (``importlib`` by a string): import the base layer's packages and a
    # runtime worker in a fresh interpreter and list the Tessera modules and torch that got loaded. The runtime
    # reaches the base layer through ``nn`` (the zoo's catalog), never the estimators, planner or backends
    import subprocess
    import sys

    probe = (
        "import sys; import tessera.models, tessera.models.zoo, tessera.hardware, tessera.jobs; "
        "tessera.models.zoo.get_spec('gpt-tiny'); print(sorted(m for m in sys.modules if m.startswith('tessera')"
        " or m == 'torch'))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "torch" not in eval(loaded) and not any(
        layer_of(m) != "base" for m in eval(loaded) if m != "tessera"
    )
    probe = (
        "import sys; import tessera.runtime.worker, tessera.runtime.model; "
        "print(sorted(m for m in sys.modules if m.startswith('tessera.')))"
    )
    loaded = eval(
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    )
    assert {layer_of(m) for m in loaded} == {"base", "nn", "runtime"}, loaded
