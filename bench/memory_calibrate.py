"""Compile the memory formula's per-layer event tables from exact traces of small probe models.

The fast formula (``tessera.memory.formula``) composes a stage's peak from what each layer does to the
allocator. What a layer does is measured here, once per layer class, on a probe: a 3-block model of the
class (family structure, precision, recompute, attention), traced on the fake GPU with the timeline on
(``StageTraceRequest(timeline=True)``): every storage's birth with its shape and dtype, its death, and the
layer boundaries. Every storage is named by its shape in the probe's dimensions, chosen all distinct
(b = 5, s = 20, h = 192, 12 heads of 16, tp = 2, f = 300, V = 1000, ...), so ``[5, 20, 192] bf16`` becomes
the term ``2:T*h``: 2 bytes × tokens × hidden. A term is re-evaluated at any size by the formula, rounded
to the allocator's 512-B block, so the tables are exact per op wherever the op sequence is the same.

Each layer owns the storages born in its forward or backward, plus its input (the previous layer's output,
tagged IN) and the gradient it receives (tagged GIN). Per layer the tables hold:

* ``fev``: the layer's live bytes at each allocation of its forward (the head: up to its output; ``lev``:
  the loss after it), ``fstart`` at its start;
* ``carryF`` / ``carryB``: what it leaves alive for the rest of the forward / for its backward;
* ``bev0`` / ``bev1``: live bytes at each allocation of its backward, in the first backward of the step
  (gradients born) and in a later one (gradients accumulate); ``lbev*`` the loss backward before the head;
  ``bstart*`` at its start; ``carryBend*`` what outlives it (its gradients).

Classes: 6 block structures (GPT and BERT with and without dropout, LLaMA with and without GQA) × 4
precisions × 3 recompute modes × 2 attentions, each as a generic block (probe layer 2) and as a later
stage's first block (reading a received leaf: probe ``mid``, layer 1); math attention also with one sample
per micro-batch (its batched matmuls then reshape by views, without copies); embeddings per structure,
precision, tp = 1 / > 1 (the vocabulary-sharded lookup) and tied / untied; heads per structure,
precision, tied / untied. 528 probes, about 4.5 min of tracing and 3 min of compiling on 2 cores.

Events dominated by another one of the same segment are dropped, then those that never come within
0.1 % of their segment's largest over a box of realistic sizes (h 512-8192, tp 1-8, s 128-8192, b 1-8).
``tests/memory/test_layer_tables.py`` recompiles a few classes from fresh probes and compares.

    python bench/memory_calibrate.py            # probe, compile, print the table statistics
    python bench/memory_calibrate.py --write    # ... and write the tables into tessera/memory/formula.py
"""

from __future__ import annotations

import argparse
import base64
import gzip
import itertools
import json
import random
import re
import time
import zlib
from collections import Counter
from math import prod
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FORMULA = ROOT / "src" / "tessera" / "memory" / "formula.py"
RESULTS = ROOT / "bench" / "results"

STRUCTURES = {  # family, dropout, kv heads (GQA when fewer than the 24 heads)
    "gpt": ("gpt", 0.1, 24),
    "gpt-nodrop": ("gpt", 0.0, 24),
    "bert": ("bert", 0.1, 24),
    "bert-nodrop": ("bert", 0.0, 24),
    "llama": ("llama", 0.0, 24),
    "llama-gqa": ("llama", 0.0, 8),
}
PRECISIONS = ("fp32", "bf16", "fp16", "bf16-master")
RECOMPUTES = ("none", "selective", "full")
ATTENTIONS = ("flash", "math")
PROBE_B, PROBE_S, PROBE_MAXPOS = 7, 20, 64  # with 24 heads of 10: every size distinct, none equal to 1 or 2
EL = {"float32": 4, "bfloat16": 2, "float16": 2, "bool": 1, "uint8": 1, "int64": 8, "int32": 4,
      "float64": 8, "uint64": 8}  # fmt: skip


# ------------------------------------------------------------------------------------------- probes
def probe_arch(structure: str) -> dict[str, Any]:
    family, dropout, kv = STRUCTURES[structure]
    arch: dict[str, Any] = dict(hidden=240, n_heads=24, n_kv_heads=kv, ffn_hidden=600, vocab=1000,
                                dropout=dropout, n_layers=3, max_positions=PROBE_MAXPOS)  # fmt: skip
    if family == "llama":
        arch.update(norm="rmsnorm", mlp="swiglu", position="rope", tied_embeddings=False, bias=False)
    if family == "bert":
        arch.update(type_vocab=2, causal=False)
    return arch


def probe_dims(structure: str, tp: int, b: int = PROBE_B) -> dict[str, int]:
    """Probe size of every symbol a shape can carry; canonical names first (equal sizes keep the first:
    with one sample per micro-batch, tokens are the sequence)."""
    a = probe_arch(structure)
    heads = a["n_heads"] // tp
    kv = a["n_kv_heads"] // tp
    d = a["hidden"] // a["n_heads"]
    s = PROBE_S
    return {
        "b": b, "s": s, "T": b * s, "h": a["hidden"], "hq": heads * d, "hkv": kv * d, "f": a["ffn_hidden"] // tp,
        "V": -(-a["vocab"] // tp), "H": heads, "kvH": kv, "d": d, "P": PROBE_MAXPOS, "V2": a["vocab"],
        "rep": heads // kv, "bH": b * heads, "bkvH": b * kv, "dh": d // 2,
    }  # fmt: skip


def probe_requests(structures: list[str]) -> list[tuple[tuple, Any]]:
    """(key, request): per class a full model and a middle stage; per structure and precision the
    embedding without head (tp 2 and 1), the head without embedding, the full model at tp 1."""
    from tessera.memory.trace import StageTraceRequest

    def req(structure: str, prec: str, rec: str, attn: str, tp: int, layers: tuple[int, int] | None,
            b: int = PROBE_B) -> Any:  # fmt: skip
        return StageTraceRequest(
            model="tessera.memory.grid:arch_factory", seq_len=PROBE_S, micro_batch_size=b, precision=prec,
            recompute=rec, attention=attn, tp_degree=tp, layer_range=layers, micro_batches=2, timeline=True,
            model_kwargs={"arch": probe_arch(structure), "family": STRUCTURES[structure][0]},
        )  # fmt: skip

    out = []
    for st, prec in itertools.product(structures, PRECISIONS):
        for rec, attn in itertools.product(RECOMPUTES, ATTENTIONS):
            out.append(((st, prec, rec, attn, "full", 2), req(st, prec, rec, attn, 2, None)))
            out.append(((st, prec, rec, attn, "mid", 2), req(st, prec, rec, attn, 2, (1, 4))))
            if (
                attn == "math"
            ):  # one sample per micro-batch: math attention's batched matmuls reshape by views
                out.append(((st, prec, rec, attn, "full-b1", 2), req(st, prec, rec, attn, 2, None, 1)))
                out.append(((st, prec, rec, attn, "mid-b1", 2), req(st, prec, rec, attn, 2, (1, 4), 1)))
        out.append(((st, prec, "none", "flash", "first", 2), req(st, prec, "none", "flash", 2, (0, 4))))
        out.append(((st, prec, "none", "flash", "first", 1), req(st, prec, "none", "flash", 1, (0, 4))))
        out.append(((st, prec, "none", "flash", "full", 1), req(st, prec, "none", "flash", 1, None)))
        out.append(((st, prec, "none", "flash", "last", 2), req(st, prec, "none", "flash", 2, (1, 5))))
    return out


# ---------------------------------------------------------------------------------- timeline → tables
def term_of(shape: list[int], dtype: str, nbytes: int, sym: dict[int, str]) -> str:
    """``"<bytes per element>:<symbol>*<symbol>"`` for a storage, from its shape in probe sizes."""
    el = EL[dtype]
    n = nbytes // el
    if n == 0:
        return "0"
    if prod(shape) != n:
        raise ValueError(f"storage of {nbytes} B is not its shape {shape} × {el} B: cannot name it")
    names = [sym.get(x, str(x)) for x in shape if x != 1]
    for merged, parts in (("bH", ["b", "H"]), ("bkvH", ["b", "kvH"])):  # batched matmuls fold b into heads
        if merged in names:
            names.remove(merged)
            names += parts
    for a, b, c in (("b", "s", "T"), ("kvH", "rep", "H"), ("H", "d", "hq"), ("kvH", "d", "hkv")):
        while a in names and b in names:
            names.remove(a)
            names.remove(b)
            names.append(c)
    bad = [x for x in names if not re.fullmatch(r"[A-Za-z]\w*|[12]", x)]
    if bad:  # a size no dimension explains would not scale: refuse rather than guess
        raise ValueError(f"shape {shape}: sizes {bad} match no probe dimension")
    return f"{el}:{'*'.join(sorted(names)) or '1'}"


class Probe:
    """One probe's timeline parsed into storages with lifetimes, layer segments and owners."""

    def __init__(self, timeline: list[list[Any]], dims: dict[str, int]) -> None:
        self.sym: dict[int, str] = {}
        for k, v in dims.items():
            self.sym.setdefault(v, k)
        self.events = timeline
        self.tensors: list[dict[str, Any]] = []
        live: dict[int, dict[str, Any]] = {}
        self.marks: list[tuple[int, str, int]] = []
        for i, e in enumerate(timeline):
            if e[0] == "A":
                t = dict(key=e[1], nb=e[3], term=term_of(e[4], e[5], e[2], self.sym), birth=i, death=None)
                self.tensors.append(t)
                live[e[1]] = t
            elif e[0] == "F":
                t = live.pop(e[1], None)
                if t is not None:
                    t["death"] = i
            elif e[0] == "R":
                raise ValueError("resizes in a probe timeline: probes run without FSDP")
            elif e[0] != "M":
                raise ValueError(f"unknown timeline event {e[0]!r}")
            else:
                self.marks.append((i, e[1], e[2]))
        self._segments()
        self._owners()

    def _segments(self) -> None:
        layers = sorted({L for _, k, L in self.marks if k == "F0"})
        self.first, self.last = layers[0], layers[-1]
        self.segs: dict[tuple[str, int, int], list[int]] = {}  # (F|B, layer, mb) -> [start, end)
        self.f1_last: dict[int, int] = {}
        self.ax: dict[int, int] = {}
        self.bgo_last: dict[int, int] = {}
        mb_f = mb_b = -1
        cur: tuple[str, int, int] | None = None

        def close(i: int) -> None:
            nonlocal cur
            if cur is not None:
                self.segs[cur][1] = i
                cur = None

        for i, kind, L in self.marks:
            if kind == "F0":
                close(i)
                mb_f += self.first == L
                cur = ("F", L, mb_f)
                self.segs[cur] = [i, len(self.events)]
            elif kind == "F1" and self.last == L:
                self.f1_last[mb_f] = i
            elif kind == "autocast-exit" and cur is not None and cur[0] == "F":
                self.ax.setdefault(mb_f, i)
            elif kind == "phase:bwd":
                close(i)
                mb_b += 1
                cur = ("B", self.last, mb_b)
                self.segs[cur] = [i, len(self.events)]
            elif kind == "Bgo":
                if self.last == L:
                    self.bgo_last[mb_b] = i
                    continue
                close(i)
                cur = ("B", L, mb_b)
                self.segs[cur] = [i, len(self.events)]
            elif kind.startswith("phase:"):
                close(i)
        close(len(self.events))
        self.seg_at = [None] * (len(self.events) + 1)
        for key, (a, b) in self.segs.items():
            for i in range(a, b):
                self.seg_at[i] = key

    def _owners(self) -> None:
        """Owner = the layer whose segment made it; a forward output that the next layer holds (or drops)
        is that layer's input (IN); a gradient made for the layer below is that layer's GIN."""
        for t in self.tensors:
            t["role"] = ""
            bs = self.seg_at[t["birth"]]
            ds = self.seg_at[t["death"]] if t["death"] is not None else None
            t["bseg"], t["dseg"] = bs, ds
            if bs is None:
                t["owner"] = None  # the harness: data loader, received gradient
                continue
            kind, L, mb = bs
            t["owner"] = L
            if ds is None or ds[2] != mb:
                continue
            after_ax = ds[0] == "F" and mb in self.ax and t["death"] >= self.ax[mb]
            if kind == "F" and ds[1] == L + 1 and not after_ax:
                t["owner"], t["role"] = L + 1, "IN"
            elif kind == "B" and ds[0] == "B" and ds[1] == L - 1:
                t["owner"], t["role"] = L - 1, "GIN"

    def layer_tables(self, L: int, mb: int) -> dict[str, Any]:
        F = self.segs[("F", L, mb)]
        B = self.segs[("B", L, mb)]
        last = self.last == L
        ax = self.ax.get(mb, F[1])
        f_end = min(F[1], ax) if last else F[1]
        f1 = self.f1_last.get(mb, f_end) if last else f_end
        b_split = self.bgo_last.get(mb, B[0]) if last else B[0]
        b_start = self.segs[("B", self.last, mb)][0]
        mine = [t for t in self.tensors if t["owner"] == L and t["bseg"] is not None and t["bseg"][2] == mb]

        def tag(t: dict[str, Any]) -> str:
            if t["owner"] == L and t["role"]:
                return t["role"] + "|" + t["term"]
            if t["owner"] == L - 1 and t["role"] == "GIN":
                return "GOUT|" + t["term"]
            return t["term"]

        def alive(t: dict[str, Any], i: int) -> bool:
            return t["birth"] <= i and (t["death"] is None or t["death"] > i)

        def sweep(seg: tuple[str, int, int], a: int, b: int) -> tuple[list[Counter], Counter]:
            """Live bytes (as term counts) at each allocation in [a, b), and at a."""
            made_here = [t for t in self.tensors if t["bseg"] == seg and t["owner"] != L]
            pool = {id(t): t for t in mine + made_here}
            foreign = [t for t in self.tensors if t["bseg"] is not None and t["bseg"][2] == mb
                       and t["owner"] not in (L, None)
                       and id(t) not in pool and t["death"] is not None and a <= t["death"] < b and t["birth"] < a]  # fmt: skip
            cur = Counter(tag(t) for t in pool.values() if alive(t, a - 1) and t["birth"] < a)
            start = Counter(cur)
            by_birth: dict[int, list] = {}
            by_death: dict[int, list] = {}
            for t in pool.values():
                by_birth.setdefault(t["birth"], []).append(t)
                if t["death"] is not None:
                    by_death.setdefault(t["death"], []).append(t)
            for t in foreign:
                by_death.setdefault(t["death"], []).append(dict(t, _foreign=True))
            out = []
            for i in range(a, b):
                for t in by_birth.get(i, ()):
                    cur[tag(t)] += 1
                for t in by_death.get(i, ()):
                    if t.get("_foreign"):
                        cur["X|" + t["term"]] -= 1
                    else:
                        cur[tag(t)] -= 1
                if self.events[i][0] == "A":
                    out.append(Counter({k: c for k, c in cur.items() if c}))  # X (freed neighbours) < 0
            return out, Counter({k: c for k, c in start.items() if c})

        fev, fstart = sweep(("F", L, mb), F[0], f1)
        tables: dict[str, Any] = {"fev": fev or [Counter()], "fstart": fstart}
        if last:
            lev, _ = sweep(("F", L, mb), f1, f_end)
            tables["lev"] = lev or [Counter()]
            lbev, _ = sweep(("B", L, mb), B[0], b_split)
            tables["lbev"] = lbev or [Counter()]
        bev, bstart = sweep(("B", L, mb), b_split, B[1])
        tables.update(
            bev=bev or [Counter()],
            bstart=bstart,
            carryF=Counter(tag(t) for t in mine if t["birth"] < F[1] and (t["death"] is None or t["death"] >= F[1]))
            if not last else Counter(),
            carryB=Counter(tag(t) for t in mine if t["birth"] < b_start and (t["death"] is None or t["death"] >= b_start)),
            carryBend=Counter(tag(t) for t in mine if t["birth"] < B[1] and (t["death"] is None or t["death"] >= B[1])),
        )  # fmt: skip
        return tables


def layer_entry(p: Probe, L: int) -> dict[str, Any]:
    """Tables of layer L from the first backward (mb 0) and a later one (mb 1)."""
    a, b = p.layer_tables(L, 0), p.layer_tables(L, 1)
    out = {k: a[k] for k in ("fev", "fstart", "carryF", "carryB")}
    for k in ("bev", "bstart", "carryBend", "lbev"):
        if k in a:
            out[k + "0"], out[k + "1"] = a[k], b[k]
    if "lev" in a:
        out["lev"] = a["lev"]
    return out


# ------------------------------------------------------------------------------------------ pruning
def size_of(term: str, dims: dict[str, float]) -> float:
    tm = term.rpartition("|")[2]
    if tm == "0":
        return 0.0
    el, mono = tm.split(":")
    n = float(el)
    if mono != "1":
        for f in mono.split("*"):
            n *= dims[f] if f in dims else float(f)
    return -(-n // 512) * 512


def realistic_dims(n: int = 400, seed: int = 7) -> list[dict[str, float]]:
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        h = rng.choice((512, 1024, 2048, 4096, 8192))
        hd = rng.choice((64, 128))
        tp = rng.choice((1, 2, 4, 8))
        if (h // hd) % tp:
            continue
        H = h // hd // tp
        kvH = rng.choice((H, max(1, H // 4)))
        f = int(h * rng.choice((2.6875, 4.0))) // tp
        b, s = rng.choice((1, 2, 4, 8)), rng.choice((128, 512, 2048, 8192))
        out.append(dict(b=b, s=s, T=b * s, h=h, hq=H * hd, hkv=kvH * hd, f=f, V=50000 // tp, H=H, kvH=kvH,
                        d=hd, dh=hd // 2, P=max(512, s), V2=50000, rep=H // kvH))  # fmt: skip
    return out


TAG_VARIANTS = ((), ("IN",), ("GIN",), ("IN", "GIN"))


def _dominates(b: Counter, a: Counter, earlier: bool) -> bool:
    """b holds at least a's bytes at any size: no fewer storages of any term (X terms are negative)."""
    return all(b[k] >= a[k] for k in set(a) | set(b)) and (a != b or earlier)


def prune_events(events: list[Counter], dims: list[dict[str, float]], tol: float = 1e-3) -> list[Counter]:
    """Drop dominated events, then those never within ``tol`` of the largest (any tag variant, any size)."""
    uniq: list[Counter] = []
    for e in events:
        if e not in uniq:
            uniq.append(e)
    keep: set[int] = set()
    for zero in TAG_VARIANTS:
        vs = [
            Counter({k: c for k, c in e.items() if not any(k.startswith(z + "|") for z in zero)})
            for e in uniq
        ]
        alive = [
            i
            for i in range(len(vs))
            if not any(j != i and _dominates(vs[j], vs[i], j < i) for j in range(len(vs)))
        ]
        for d in dims:
            vals = {i: sum(c * size_of(k, d) for k, c in vs[i].items()) for i in alive}
            top = max(vals.values())
            keep.update(i for i, v in vals.items() if v >= top * (1 - tol))
    return [uniq[i] for i in sorted(keep)]


# ------------------------------------------------------------------------------------------ assembly
def compile_tables(traces: dict[tuple, Any]) -> dict[str, Any]:
    """Layer tables from probe traces keyed as :func:`probe_requests` keys them (any subset of them)."""
    dims = realistic_dims()
    tables: dict[str, dict[str, Any]] = {"block": {}, "block_first": {}, "emb": {}, "head": {}}
    cache: dict[tuple, Probe] = {}

    def entry(key: tuple, layer: int) -> dict[str, Any]:
        if key not in cache:
            b = 1 if key[4].endswith("-b1") else PROBE_B
            cache[key] = Probe(traces[key].meta["timeline"], probe_dims(key[0], key[5], b))
        tables = layer_entry(cache[key], layer)
        return {k: (prune_events(v, dims) if isinstance(v, list) else v) for k, v in tables.items()}

    for key in sorted(traces):
        st, prec, rec, attn, shape, tp = key
        tied = STRUCTURES[st][0] != "llama"
        if shape == "full" and tp == 2:
            tables["block"][f"{st}/{prec}/{rec}/{attn}"] = entry(key, 2)
            if tied and (rec, attn) == ("none", "flash"):
                tables["emb"][f"{st}/{prec}/tp2/tied"] = entry(key, 0)
                tables["head"][f"{st}/{prec}/tied"] = entry(key, 4)
        elif shape == "full":
            if tied:
                tables["emb"][f"{st}/{prec}/tp1/tied"] = entry(key, 0)
        elif shape == "mid":
            tables["block_first"][f"{st}/{prec}/{rec}/{attn}"] = entry(key, 1)
        elif shape == "full-b1":
            tables["block"][f"{st}/{prec}/{rec}/{attn}/b1"] = entry(key, 2)
        elif shape == "mid-b1":
            tables["block_first"][f"{st}/{prec}/{rec}/{attn}/b1"] = entry(key, 1)
        elif shape == "first":
            tables["emb"][f"{st}/{prec}/tp{tp}/untied"] = entry(key, 0)
        elif shape == "last":
            tables["head"][f"{st}/{prec}/untied"] = entry(key, 4)
    return tables


def encode(tables: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Compact JSON (terms by index) → zlib → base64: the literal the formula decodes at import."""
    terms: list[str] = []
    index: dict[str, int] = {}

    def vec(c: Counter) -> list[list[int]]:
        out = []
        for k, n in sorted(c.items()):
            if n:
                if k not in index:
                    index[k] = len(terms)
                    terms.append(k)
                out.append([index[k], n])
        return out

    body = {
        kind: {cls: {k: ([vec(e) for e in v] if isinstance(v, list) else vec(v)) for k, v in entry.items()}
               for cls, entry in by_cls.items()}
        for kind, by_cls in tables.items()
    }  # fmt: skip
    doc = {"version": 1, "terms": terms, "tables": body}
    raw = json.dumps(doc, separators=(",", ":")).encode()
    blob = base64.b64encode(zlib.compress(raw, 9)).decode()
    stats = {"terms": len(terms), "json_bytes": len(raw), "blob_chars": len(blob),
             "classes": {k: len(v) for k, v in tables.items()},
             "events": sum(len(v) for by in tables.values() for e in by.values() for v in e.values() if isinstance(v, list))}  # fmt: skip
    return blob, stats


class _Timeline:
    """A cached probe: only its timeline is needed."""

    def __init__(self, timeline: list[list[Any]]) -> None:
        self.meta = {"timeline": timeline}


BEGIN = "# ---- BEGIN GENERATED LAYER EVENT TABLES (bench/memory_calibrate.py --write) ----"
END = "# ---- END GENERATED LAYER EVENT TABLES ----"


def write_formula(blob: str) -> None:
    text = FORMULA.read_text()
    lines = [blob[i : i + 100] for i in range(0, len(blob), 100)]
    body = "_EVENT_TABLES = (\n" + "".join(f'    "{ln}"\n' for ln in lines) + ")\n"
    new = f"{BEGIN}\n{body}{END}"
    if BEGIN in text:
        text = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda m: new, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n\n" + new + "\n"
    FORMULA.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="write the tables into tessera/memory/formula.py")
    ap.add_argument("--structures", default=",".join(STRUCTURES), help="comma-separated subset (testing)")
    ap.add_argument("--cache", type=Path, default=None,
                    help="keep the probe timelines in this gzip JSON file and reuse them when present")  # fmt: skip
    args = ap.parse_args()
    structures = args.structures.split(",")
    from rich.progress import Progress

    from tessera.memory.trace import trace_stages

    reqs = probe_requests(structures)
    t0 = time.perf_counter()
    traces: dict[tuple, Any] = {}
    if args.cache is not None and args.cache.exists():
        stored = json.loads(gzip.decompress(args.cache.read_bytes()))
        traces = {tuple(k): _Timeline(v) for k, v in stored}
        reqs = [(k, r) for k, r in reqs if k not in traces]
    with Progress() as progress:
        task = progress.add_task("probe traces", total=len(reqs))
        for i in range(0, len(reqs), 24):
            part = reqs[i : i + 24]
            for (key, _), r in zip(part, trace_stages([r for _, r in part], in_process=False, timeout_s=3600),
                                   strict=True):  # fmt: skip
                traces[key] = r
            progress.advance(task, len(part))
    t_trace = time.perf_counter() - t0
    if args.cache is not None:
        args.cache.write_bytes(
            gzip.compress(json.dumps([[list(k), t.meta["timeline"]] for k, t in traces.items()]).encode())
        )
    tables = compile_tables(traces)
    blob, stats = encode(tables)
    stats.update(
        probes=len(traces), trace_s=round(t_trace, 1), compile_s=round(time.perf_counter() - t0 - t_trace, 1)
    )
    print(json.dumps(stats, indent=1))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "memory_calibrate.json").write_text(json.dumps(stats, indent=1))
    if args.write:
        write_formula(blob)
        print(f"wrote {len(blob)} characters of tables into {FORMULA.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
