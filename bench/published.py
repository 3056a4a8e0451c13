"""Tessera's cost model against Megatron-LM's published MFU on A100-80GB (Korthikanti et al. 2022).

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (MLSys 2023), report the
model FLOPs utilization of Megatron-LM with sequence parallelism + selective recompute on Selene (DGX A100
80GB, NVLink3 inside a node, 8 x 200 Gb/s HDR InfiniBand between nodes), seq 2048, vocab 51200, DP 1:

    22B   h 6144,  64 heads,  48 layers, TP 8, PP 1,   8 GPUs, batch 4 (micro-batch 4)   41.5 %
    175B  h 12288, 96 heads,  96 layers, TP 8, PP 8,  64 GPUs, batch 64 (micro-batch 1)  51.4 %
    530B  h 20480, 128 heads, 105 layers, TP 8, PP 35, 280 GPUs, batch 280 (micro-batch 1) 56.0 %
    1T    h 25600, 160 heads, 128 layers, TP 8, PP 64, 512 GPUs, batch 512 (micro-batch 1) 56.3 %

Their model FLOPs are 72·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) per iteration over a 312 TFLOP/s bf16 peak. Tessera's
``Estimate.mfu`` is 3 × the spec's forward FLOPs × batch / (time × Σ peak); for these GPT shapes the spec counts
the same 24·s·h² + 4·s²·h per block and 2·s·h·V for the logits, where Megatron's 72 (3/4 of their older 96,
which counted the logits 3×) leaves the logits at 2.25 × 2·s·h·V: the two differ by < 0.4 % (``flops_ratio``),
so the bench compares ``Estimate.mfu`` as is, and records Megatron's count too (``mfu_megatron_flops``).

Each configuration is estimated two ways, both from Tessera's cost model (roofline + ``EfficiencyCurve`` for
compute, alpha-beta for collectives, the 1F1B pipeline composition):

* ``tessera`` — :func:`tessera.perf.estimate.estimate_plan` on the plan, as ``tessera estimate`` prices it. The
  estimator prices *Tessera's runtime*: vocab-parallel embedding, head and cross-entropy (as Megatron), but
  every column-parallel Linear all-reduces its input gradient (q, k, v apart) and the step is PyTorch's
  foreach AdamW. That is the headline figure (``mean_abs_error``, ``meets_target``).
* ``megatron_runtime`` — the same physics composed from ``tessera.perf`` functions for *Megatron's*
  implementation: vocab-parallel embedding/head and cross-entropy, 2 + 2 TP all-reduces per block (fused QKV;
  sequence parallelism's reduce-scatter + all-gather move the same ring volume), fused Adam, and the
  memory-bound softmax/dropout traffic on the s × s scores of non-flash attention (Megatron had no flash
  attention then). It separates the cost model's physics from the runtime differences that remain.

Writes ``bench/results/published.json`` and prints a table.

    python bench/published.py [--only 175B 1T] [--out bench/results/published.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tessera.hardware import ClusterSpec, get_cluster
from tessera.models.spec import Layer, ModelSpec
from tessera.models.zoo import gpt
from tessera.perf.comm import Collective, Link, comm_time
from tessera.perf.compute import curve_for, layer_time
from tessera.perf.costmodel import CostModel
from tessera.perf.estimate import Estimate, Topology, estimate_plan
from tessera.perf.pipeline import pipeline_time
from tessera.plan import Plan, simple_plan
from tessera.planning.partition import block_range

OUT = Path(__file__).parent / "results" / "published.json"
SOURCE = (
    "Korthikanti et al. 2022, 'Reducing Activation Recomputation in Large Transformer Models', "
    "MFU with sequence parallelism + selective recompute on Selene (A100-80GB)"
)
TARGET = 0.10
CLUSTER = "megatron-selene"
GPU = "A100-80GB"
SEQ_LEN = 2048
VOCAB = 51200
PEAK_FLOPS = 312e12  # A100 dense bf16 peak, Megatron's denominator
PRECISION = (
    "bf16-master"  # Megatron's mixed precision: bf16 params/activations, fp32 main params + grads + Adam
)
RECOMPUTE = "selective"
ATTENTION = "math"  # Megatron-LM 2022: fused scale-mask-softmax, no flash attention

# Megatron's fused Adam step per parameter (bytes of HBM traffic): grad-norm read (4), multi_tensor_adam reads
# p, g, m, v and writes p, m, v in one pass (28), main fp32 → bf16 model copy (4 + 2), zeroing main_grad (4).
MEGATRON_STEP_BYTES_PER_PARAM = 42.0
# Non-flash attention traffic per s × s score element (bf16) per layer: forward writes the QKᵀ scores (2), the
# fused softmax reads + writes them (4), dropout reads + writes + stores a 1-byte mask (5), softmax·V reads
# them (2) = 13; backward ≈ 2 × forward; selective recompute repeats the forward.
SCORE_BYTES_FWD = 13.0
SCORE_BYTES_BWD = 26.0


@dataclass(frozen=True)
class Config:
    name: str
    hidden: int
    heads: int
    layers: int
    tp: int
    pp: int
    global_batch: int
    micro_batch: int
    published_mfu: float

    @property
    def gpus(self) -> int:
        return self.tp * self.pp  # DP 1

    @property
    def micro_batches(self) -> int:
        return self.global_batch // self.micro_batch


CONFIGS = (
    Config("22B", 6144, 64, 48, tp=8, pp=1, global_batch=4, micro_batch=4, published_mfu=0.415),
    Config("175B", 12288, 96, 96, tp=8, pp=8, global_batch=64, micro_batch=1, published_mfu=0.514),
    Config("530B", 20480, 128, 105, tp=8, pp=35, global_batch=280, micro_batch=1, published_mfu=0.560),
    Config("1T", 25600, 160, 128, tp=8, pp=64, global_batch=512, micro_batch=1, published_mfu=0.563),
)


def megatron_model_flops(c: Config) -> float:
    """Megatron's model FLOPs of one iteration: 72·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))."""
    h, s, l = c.hidden, SEQ_LEN, c.layers  # noqa: E741
    return 72.0 * c.global_batch * s * l * h * h * (1 + s / (6 * h) + VOCAB / (16 * l * h))


def build_spec(c: Config) -> ModelSpec:
    """Megatron's GPT in Tessera's GPT family: learned positions, GELU MLP 4h, tied embeddings, vocab 51200."""
    arch = gpt.gpt_arch(c.hidden, c.layers, c.heads, vocab=VOCAB, max_positions=SEQ_LEN)
    return gpt.spec(f"megatron-gpt-{c.name.lower()}", arch, SEQ_LEN)


def build_plan(c: Config, spec: ModelSpec) -> Plan:
    """Megatron's layout: layers/pp blocks per stage (embedding on the first, head on the last), one TP group
    of 8 per DGX node, so every TP all-reduce stays on NVLink and every stage boundary crosses InfiniBand."""
    # simple_plan's default cut with the block range: layers/pp blocks per stage, the edges riding along
    plan = simple_plan(
        spec.name, n_layers=spec.n_layers, global_batch=c.global_batch, seq_len=SEQ_LEN, tp=c.tp, pp=c.pp,
        gpu_type=GPU, micro_batches=c.micro_batches, blocks=block_range(spec), precision=PRECISION,
        recompute=RECOMPUTE, attention=ATTENTION, model_heads=c.heads,
    )  # fmt: skip
    gpn = 8
    stages = tuple(
        replace(
            st,
            devices=tuple(
                replace(d, node=f"dgx-{d.rank // gpn}", local_index=d.rank % gpn) for d in st.devices
            ),
        )
        for st in plan.stages
    )
    return replace(plan, stages=stages)


def _core_fraction(spec: ModelSpec, layer: Layer) -> float:
    """Share of a block's forward FLOPs in QKᵀ and softmax·V: what selective recompute repeats."""
    if layer.kind != "transformer" or layer.fwd_flops_per_sample <= 0:
        return 0.0
    return min(1.0, 4.0 * spec.seq_len**2 * spec.arch.hidden / layer.fwd_flops_per_sample)


def _ar(cost: CostModel, nbytes: float, n: int, link: Link) -> float:
    return comm_time(Collective.ALL_REDUCE, nbytes, n, link, cost.comm_table) * cost.comm_factor(link.kind)


def megatron_runtime(
    c: Config, spec: ModelSpec, plan: Plan, topo: Topology, cost: CostModel
) -> dict[str, Any]:
    """One iteration of Megatron's implementation of ``plan``, from Tessera's compute, comm and pipeline model.

    Every layer splits over the TP group (blocks by heads, embedding/head by vocabulary). TP collectives per
    micro-batch, of the b·s·h bf16 activation: a block 2 forward + 2 backward, the embedding 1 forward, the
    head 1 backward (its input gradient) + the vocab-parallel cross-entropy's 3 all-reduces of b·s fp32.
    Stage boundaries send b·s·h bf16. After the pipeline: the tied embedding's gradient all-reduce between the
    first and last stage, and the fused Adam step (``MEGATRON_STEP_BYTES_PER_PARAM``), slowest stage.
    """
    mb, m = c.micro_batch, c.micro_batches
    act_bytes = mb * SEQ_LEN * c.hidden * 2.0
    fwd_s, bwd_s, tp_s, score_s, tails = [], [], [], [], []
    for i, st in enumerate(plan.stages):
        gpu = topo.gpu(st.devices[0])
        link = topo.link(st.devices)
        mem_Bps = gpu.memory_bandwidth_Bps * curve_for(gpu, cost.curves).memory_fraction
        f = b = tf = tb = 0.0
        params = 0.0
        n_blocks = 0
        for layer in spec.layers[st.layer_start : st.layer_end]:
            t = layer_time(
                layer, gpu, tp=c.tp, micro_batch=mb, precision=PRECISION, recompute=RECOMPUTE,
                attention_core_fraction=_core_fraction(spec, layer), curves=cost.curves,
            )  # fmt: skip
            f += t.fwd_s * cost.compute_factor(gpu.name)
            b += t.bwd_s * cost.compute_factor(gpu.name)
            params += layer.params / c.tp
            if layer.kind == "transformer":
                n_blocks += 1
                tf += 2 * _ar(cost, act_bytes, c.tp, link)
                tb += 2 * _ar(cost, act_bytes, c.tp, link)
            elif layer.kind == "embedding":
                tf += _ar(cost, act_bytes, c.tp, link)
            elif layer.kind == "head":
                tb += _ar(cost, act_bytes, c.tp, link)
                tf += 3 * _ar(cost, mb * SEQ_LEN * 4.0, c.tp, link)
        scores = mb * (c.heads / c.tp) * SEQ_LEN**2 * n_blocks
        sf = SCORE_BYTES_FWD * scores / mem_Bps
        sb = (SCORE_BYTES_BWD + (SCORE_BYTES_FWD if RECOMPUTE == "selective" else 0.0)) * scores / mem_Bps
        fwd_s.append(f + sf + tf)
        bwd_s.append(b + sb + tb)
        tp_s.append(tf + tb)
        score_s.append(sf + sb)
        tied = 0.0
        if c.pp > 1 and i in (0, c.pp - 1):  # the head's copy of the word embedding, synced with stage 0
            if i == c.pp - 1:
                params += VOCAB * c.hidden / c.tp
            pair = (plan.stages[0].devices[0], plan.stages[-1].devices[0])
            tied = _ar(cost, 4.0 * VOCAB * c.hidden / c.tp, 2, topo.link(pair))
        tails.append((MEGATRON_STEP_BYTES_PER_PARAM * params / mem_Bps, tied))
    p2p = [
        comm_time(Collective.SEND_RECV, act_bytes, 2, topo.link(a.devices + b.devices), cost.comm_table)
        for a, b in zip(plan.stages, plan.stages[1:], strict=False)
    ]
    pt = pipeline_time(fwd_s, bwd_s, m, schedule=plan.schedule.value, p2p_s=p2p)
    opt_s, sync_s = max(tails, key=sum)
    it = pt.iteration_time_s + opt_s + sync_s
    k = pt.bottleneck_stage
    peak = sum(topo.gpu(d).peak_flops(PRECISION) for d in plan.devices)
    return {
        "mfu": 3.0 * spec.fwd_flops_per_sample * c.global_batch / (it * peak),
        "iteration_time_s": it,
        "compute_s": m * (fwd_s[k] + bwd_s[k] - tp_s[k]) + opt_s,
        "comm_s": m * tp_s[k] + pt.p2p_s + sync_s,
        "bubble_s": pt.bubble_s,
        "optimizer_s": opt_s,
        "attention_scores_s": m * score_s[k],
    }


def _rel(est: float, truth: float) -> float:
    return (est - truth) / truth


def evaluate_config(c: Config, cluster: ClusterSpec, cost: CostModel | None = None) -> dict[str, Any]:
    cost = cost or CostModel()
    spec = build_spec(c)
    plan = build_plan(c, spec)
    topo = Topology(cluster)
    e: Estimate = estimate_plan(plan, spec, topo, cost=cost)
    mega = megatron_runtime(c, spec, plan, topo, cost)
    meg_flops = megatron_model_flops(c)
    peak = c.gpus * PEAK_FLOPS
    published_it = meg_flops / (c.published_mfu * peak)  # the iteration time the published MFU implies
    gib = 2**30
    return {
        "name": c.name,
        "hidden": c.hidden,
        "heads": c.heads,
        "layers": c.layers,
        "vocab": VOCAB,
        "seq_len": SEQ_LEN,
        "tp": c.tp,
        "pp": c.pp,
        "dp": 1,
        "gpus": c.gpus,
        "global_batch": c.global_batch,
        "micro_batch": c.micro_batch,
        "micro_batches": c.micro_batches,
        "published_mfu": c.published_mfu,
        "published_iteration_s": published_it,
        "estimated_mfu": e.mfu,
        "relative_error": _rel(e.mfu, c.published_mfu),
        "abs_relative_error": abs(_rel(e.mfu, c.published_mfu)),
        "mfu_megatron_flops": meg_flops / (e.iteration_time_s * peak),
        "flops_ratio": 3.0 * spec.fwd_flops_per_sample * c.global_batch / meg_flops,
        "iteration_time_s": e.iteration_time_s,
        "compute_s": e.compute_s,
        "comm_s": e.comm_s,
        "bubble_s": e.bubble_s,
        "optimizer_s": e.optimizer_s,
        "stage_time_max_s": max(e.stage_times_s),
        "stage_time_min_s": min(e.stage_times_s),
        "feasible": e.feasible,
        "peak_device_gib": max(e.device_bytes_per_device) / gib,
        "megatron_runtime": {
            **mega,
            "relative_error": _rel(mega["mfu"], c.published_mfu),
            "abs_relative_error": abs(_rel(mega["mfu"], c.published_mfu)),
        },
    }


def run(configs: tuple[Config, ...] = CONFIGS, cost: CostModel | None = None) -> dict[str, Any]:
    cluster = get_cluster(CLUSTER)
    rows = [evaluate_config(c, cluster, cost) for c in configs]
    errs = [r["abs_relative_error"] for r in rows]
    mega = [r["megatron_runtime"]["abs_relative_error"] for r in rows]
    mean, mega_mean = statistics.fmean(errs), statistics.fmean(mega)
    from tessera.hardware import get_gpu

    curve = curve_for(get_gpu(GPU), (cost or CostModel()).curves)
    return {
        "source": SOURCE,
        "cluster": CLUSTER,
        "plan": {"precision": PRECISION, "recompute": RECOMPUTE, "attention": ATTENTION, "schedule": "1f1b"},
        "mfu_definition": (
            "Estimate.mfu = 3 x spec forward FLOPs x batch / (iteration time x sum of bf16 peaks); within 0.4 % "
            "of Megatron's 72·B·s·l·h²·(1 + s/6h + V/16lh) for these shapes (flops_ratio), so used as is"
        ),
        "a100_curve": asdict(curve),
        "configs": rows,
        "mean_abs_error": mean,
        "max_abs_error": max(errs),
        "target": TARGET,
        "meets_target": mean <= TARGET,
        "megatron_runtime": {
            "mean_abs_error": mega_mean,
            "max_abs_error": max(mega),
            "meets_target": mega_mean <= TARGET,
            "each_within_target": all(x <= TARGET for x in mega),
        },
        "notes": [
            "mean_abs_error is estimate_plan as is: it prices Tessera's runtime (embedding and head replicated "
            "in each TP group, 3 + 1 input-gradient all-reduces per block in backward, foreach AdamW), not "
            "Megatron's; with 2 layers per stage the replicated 2·s·h·V logits make the last stage the "
            "bottleneck (stage_time_max_s vs stage_time_min_s).",
            "megatron_runtime composes the same tessera.perf physics for Megatron's implementation "
            "(vocab-parallel embedding/head, fused QKV, fused Adam, non-flash attention score traffic).",
            "feasible/peak_device_gib are Tessera's memory formula, which does not model sequence "
            "parallelism (LayerNorm/dropout activations are not split over TP), so the deep pipelines' first "
            "stages read over 80 GB where Megatron fits.",
        ],
    }


def print_table(result: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console(width=160)
    t = Table(title=f"Megatron-LM published MFU vs Tessera ({result['cluster']}, A100-80GB)")
    for col in ("config", "plan", "published", "tessera", "err", "megatron-rt", "err", "iter s pub/tess/mrt"):
        t.add_column(col, justify="right")
    t.add_column("tessera compute/comm/bubble/opt s", justify="right")
    for r in result["configs"]:
        mr = r["megatron_runtime"]
        t.add_row(
            r["name"],
            f"TP{r['tp']} PP{r['pp']} B{r['global_batch']}/{r['micro_batch']}",
            f"{r['published_mfu']:.1%}",
            f"{r['estimated_mfu']:.1%}",
            f"{r['relative_error']:+.1%}",
            f"{mr['mfu']:.1%}",
            f"{mr['relative_error']:+.1%}",
            f"{r['published_iteration_s']:.2f}/{r['iteration_time_s']:.2f}/{mr['iteration_time_s']:.2f}",
            f"{r['compute_s']:.2f}/{r['comm_s']:.2f}/{r['bubble_s']:.2f}/{r['optimizer_s']:.2f}",
        )
    console.print(t)
    mr = result["megatron_runtime"]
    console.print(
        f"mean |rel. error| of MFU: tessera {result['mean_abs_error']:.3f} (target {result['target']}, "
        f"{'meets' if result['meets_target'] else 'misses'} it); megatron-runtime composition "
        f"{mr['mean_abs_error']:.3f} (max {mr['max_abs_error']:.3f})"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--only", nargs="*", metavar="NAME", help="configs to run (22B 175B 530B 1T); default all"
    )
    ap.add_argument("--out", type=Path, default=OUT, help="where to write the JSON")
    args = ap.parse_args(argv)
    configs = CONFIGS
    if args.only:
        wanted = {n.upper() for n in args.only}
        configs = tuple(c for c in CONFIGS if c.name.upper() in wanted)
        if not configs:
            ap.error(f"--only: none of {args.only} is one of {', '.join(c.name for c in CONFIGS)}")
    result = run(configs)
    print_table(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
