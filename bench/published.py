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
  foreach AdamW. That is the headline figure (``mean_abs_error``, ``meets_target``). Its blocks' memory-bound
  kernels are priced as the published system ran them (``estimate_plan(kernels=...)``): Megatron-LM's fused
  LayerNorm, bias-GeLU, bias-dropout-add and scale-mask-softmax with sequence parallelism here; every other run
  names its own (``kernels`` on its row).
* ``megatron_runtime`` — the same physics composed from ``tessera.perf`` functions for *Megatron's*
  implementation: vocab-parallel embedding/head and cross-entropy, 2 + 2 TP all-reduces per block (fused QKV;
  sequence parallelism's reduce-scatter + all-gather move the same ring volume), fused Adam, and the
  memory-bound softmax/dropout traffic on the s × s scores of non-flash attention (Megatron had no flash
  attention then). It separates the cost model's physics from the runtime differences that remain.

**Published FSDP runs** (``FSDP_RUNS``): the PyTorch/IBM blog's Table 1 — Llama 2 7B-70B pre-trained with
PyTorch FSDP (full shard, bf16 mixed precision, SDPA flash attention, 2 sequences of 4096 per GPU) on 128 A100-80GB
(400 Gb/s inter-node) and 96 H100-80GB (800 Gb/s); the figure compared is the published tokens/s per GPU against
``Estimate.tokens_per_s_per_gpu`` of the same plan (ZeRO-3 over all GPUs, nodes of 8).

**Published Megatron-style scaling** (``NEMO_RUNS``): the NeMo Megatron launcher README's tokens/s of GPT-3 5B
(TP 2, 1-20 DGX A100 nodes) and 175B (TP 8 x PP 8, 16-128 nodes), compared as tokens/s of the whole job.
**Published DDP runs** (``DP_RUNS``): NVIDIA DeepLearningExamples' BERT-large pre-training throughput on DGX
A100 80GB (1 GPU to 32 nodes, seq 128 and 512, fp16 AMP, gradient accumulation), compared as sequences/s.

Every row names its source (``SOURCES``). The sources were split once, before any comparison, into a set one may
calibrate on (Korthikanti et al., Megatron-style) and a set that is only reported (all the others); nothing in
the cost model is fitted to either. ``reported_mean_abs_error``/``reported_worst_abs_error`` are over the
report set, ``megatron_mean_abs_error`` over the Megatron-style rows (``estimate_plan``), ``mean_abs_error``
over all rows.

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
from tessera.hardware.cluster import network_cluster
from tessera.models.spec import Layer, ModelSpec
from tessera.models.zoo import bert, gpt, llama
from tessera.perf.comm import Collective, Link, comm_time
from tessera.perf.compute import EAGER, Kernels, curve_for, layer_time
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
# The kernels that ran the published runs' memory-bound work (tessera.perf.compute.Kernels): Megatron-LM's fused
# LayerNorm, bias-GeLU, bias-dropout-add and scale-mask-softmax (also in NeMo and Megatron-DeepSpeed), with
# sequence parallelism where the source used it (Korthikanti et al. 2022 introduce it; NeMo's 175B config sets
# it); the IBM/PyTorch FSDP runs are eager PyTorch (IBM's Foundation Model Stack Llama, SDPA flash attention).
MEGATRON = Kernels(fused=True)
MEGATRON_SP = Kernels(fused=True, sequence_parallel=True)

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


SOURCES: dict[str, dict[str, str]] = {
    "korthikanti2022": {
        "citation": SOURCE + ", Table 5 (MFU, present work); arXiv 2205.05198",
        "set": "calibrate",
        "style": "megatron",
    },
    "pytorch-ibm-fsdp-2024": {
        "citation": (
            "Team PyTorch at IBM and Meta, 'Maximizing training throughput using PyTorch FSDP', PyTorch blog, "
            "13 Mar 2024 (pytorch.org/blog/maximizing-training/; also research.ibm.com/blog/pytorch-fsdp), "
            "Table 1: throughput tokens/sec/GPU of Llama 2 7B-70B on 128 A100 80GB (400 Gbps) and 96 H100 80GB "
            "(800 Gbps)"
        ),
        "set": "report",
        "style": "fsdp",
    },
    "nemo-megatron-2022": {
        "citation": (
            "NVIDIA NeMo Megatron launcher (BigNLP-Scripts, later github.com/NVIDIA/NeMo-Megatron-Launcher) "
            "README.md section 7.1.2 'Training Performance Results': tokens per second of GPT-3 5B on 1-20 and "
            "GPT-3 175B on 16-128 DGX A100 80GB nodes; layouts from its conf/training/gpt3/5b.yaml and 175b.yaml"
        ),
        "set": "report",
        "style": "megatron",
    },
    "nvidia-dle-bert-2021": {
        "citation": (
            "NVIDIA DeepLearningExamples, PyTorch/LanguageModeling/BERT/README.md (pytorch:21.11-py3), 'Training "
            "performance: NVIDIA DGX A100 (8x A100 80GB)': the 'Pre-training NVIDIA DGX A100 (8x A100 80GB)' and "
            "'... Multi-node Scaling' tables, mixed-precision throughput (sequences/s) of BERT-large pre-training "
            "phase 1 (seq 128) and phase 2 (seq 512) on 1 GPU to 32 nodes"
        ),
        "set": "report",
        "style": "ddp",
    },
    "bigscience-bloom-2022": {
        "citation": (
            "BigScience, BLOOM-176B training (github.com/bigscience-workshop/bigscience, "
            "train/tr11-176B-ml/README.md for the layout and its logged GBS-16 iteration; chronicles.md "
            "2022-03-18 for the logged GBS-2048 iteration 12695: 'elapsed time per iteration (s): 105.22')"
        ),
        "set": "report",
        "style": "megatron",
    },
}


@dataclass(frozen=True)
class FSDPRun:
    """One published FSDP training run: a Llama 2 shape, the cluster, and the throughput as published."""

    name: str
    source: str
    gpu: str
    gpus: int
    inter_node_Bps: float  # the node's network, one direction, as the source states it
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    recompute: str  # Tessera's nearest setting to the source's activation checkpointing
    published_tokens_per_s_per_gpu: float
    published_mfu: float
    seq_len: int = 4096
    batch_per_gpu: int = 2
    gpus_per_node: int = 8
    note: str = ""
    checkpoint_every: int = 1  # ``recompute`` on every n-th block (the blog's "checkpoint every n-th block")


_A100_NET = 400e9 / 8  # "128 GPUs and 400Gbps inter-node interconnect"
_H100_NET = 800e9 / 8  # "96 GPUs and 800Gbps inter-node interconnect"
_SEL = (
    "blog: 'checkpoint every n-th block' (n not stated); its HFU/MFU, 0.59/0.51 = 1.157 on A100 and 0.40/0.35 = "
    "1.143 on H100, is what re-running every 2nd block's forward adds (1 + 1/2 x 2/6 = 1.167; every 3rd: 1.111): "
    "priced as half the blocks under full recompute (the mean of the none and full estimates)"
)
_L34 = "34B: the blog gives no shape; Code Llama 34B's (h 8192, 48 layers, 64 heads, 8 kv heads, ffn 22016)"
FSDP_RUNS = (
    FSDPRun("llama2-7b A100x128", "pytorch-ibm-fsdp-2024", "A100-80GB", 128, _A100_NET, 4096, 32, 32, 32, 11008,
            "none", 3700, 0.57),
    FSDPRun("llama2-13b A100x128", "pytorch-ibm-fsdp-2024", "A100-80GB", 128, _A100_NET, 5120, 40, 40, 40, 13824,
            "full", 1800, 0.51, note=_SEL, checkpoint_every=2),
    FSDPRun("llama2-34b A100x128", "pytorch-ibm-fsdp-2024", "A100-80GB", 128, _A100_NET, 8192, 48, 64, 8, 22016,
            "full", 700, 0.47, note=_L34),
    FSDPRun("llama2-70b A100x128", "pytorch-ibm-fsdp-2024", "A100-80GB", 128, _A100_NET, 8192, 80, 64, 8, 28672,
            "full", 370, 0.50),
    FSDPRun("llama2-7b H100x96", "pytorch-ibm-fsdp-2024", "H100-80GB", 96, _H100_NET, 4096, 32, 32, 32, 11008,
            "none", 7500, 0.37),
    FSDPRun("llama2-13b H100x96", "pytorch-ibm-fsdp-2024", "H100-80GB", 96, _H100_NET, 5120, 40, 40, 40, 13824,
            "full", 3800, 0.35, note=_SEL, checkpoint_every=2),
    FSDPRun("llama2-34b H100x96", "pytorch-ibm-fsdp-2024", "H100-80GB", 96, _H100_NET, 8192, 48, 64, 8, 22016,
            "full", 1550, 0.32, note=_L34),
    FSDPRun("llama2-70b H100x96", "pytorch-ibm-fsdp-2024", "H100-80GB", 96, _H100_NET, 8192, 80, 64, 8, 28672,
            "full", 800, 0.34),
)  # fmt: skip


@dataclass(frozen=True)
class PipelineRun:
    """One published Megatron-style (TP x PP x DP) GPT run whose iteration time was published."""

    name: str
    source: str
    gpu: str
    hidden: int
    layers: int
    heads: int
    vocab: int
    seq_len: int
    tp: int
    pp: int
    dp: int
    micro_batch: int
    global_batch: int
    layer_cuts: tuple[int, ...] | None  # stage boundaries over [embedding, blocks..., head]; None: Megatron's
    # even division of the blocks (embedding and head ride on the first and last stage)
    recompute: str
    attention: str
    zero: int
    inter_node_Bps: float
    published_iteration_s: float
    gpus_per_node: int = 8
    schedule: str = "1f1b"
    note: str = ""
    published_tokens_per_s: float | None = None  # set where the source publishes throughput, not a time
    kernels: Kernels = MEGATRON  # Megatron-LM's fused kernels (Megatron-DeepSpeed, NeMo)
    # the GPUs' link one direction where the source states a node other than a DGX's (None: the catalog's)
    intra_node_Bps: float | None = None

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp


# tr11-176B-ml README, "Hardware": "8 GPUs per node Using NVLink 4 inter-gpu connects, 4 OmniPath links" (the
# BLOOM paper, arXiv 2211.05100 §3.4: four NVLink GPU-to-GPU interconnects inside a node): 4 NVLink3 links of
# 25 GB/s each way per GPU, not a DGX's 12
_JZ_NVLINK = 4 * 25e9
PIPELINE_RUNS = (
    # tr11-176B-ml README: 384 A100 80GB in 48 nodes of 8, TP 4, PP 12, DP 8, MBS 2, GBS 2048, seq 2048,
    # h 14336, 70 layers, 112 heads, vocab 250880, GELU, activation checkpointing, bf16, ZeRO-1, 4 Omni-Path
    # links per node; pp rank 0 [embed | 5 blocks], ranks 1-10 6 blocks, rank 11 [5 blocks | embed];
    # chronicles.md 2022-03-18, the logged iteration 12695 at GBS 2048: "elapsed time per iteration (s): 105.22"
    # ("TFLOPs: 149.02", the run's hardware count with recomputation)
    PipelineRun("bloom-176b A100x384", "bigscience-bloom-2022", "A100-80GB", 14336, 70, 112, 250880, 2048,
                tp=4, pp=12, dp=8, micro_batch=2, global_batch=2048,
                layer_cuts=tuple(range(6, 67, 6)), recompute="full", attention="math", zero=1,
                inter_node_Bps=4 * 100e9 / 8, published_iteration_s=105.22, intra_node_Bps=_JZ_NVLINK,
                note="ALiBi priced as learned positions (2048 x h extra parameters); Omni-Path links at their "
                     "100 Gb/s line rate (the README gives the link count, not the rate)"),
    # the same README, "Global batch size": the logged iteration at GBS 16 (MBS 2, one micro-batch per replica)
    # "elapsed time per iteration (s): 15.23 | global batch size: 16"
    PipelineRun("bloom-176b A100x384 GBS16", "bigscience-bloom-2022", "A100-80GB", 14336, 70, 112, 250880, 2048,
                tp=4, pp=12, dp=8, micro_batch=2, global_batch=16,
                layer_cuts=tuple(range(6, 67, 6)), recompute="full", attention="math", zero=1,
                inter_node_Bps=4 * 100e9 / 8, published_iteration_s=15.23, schedule="gpipe",
                intra_node_Bps=_JZ_NVLINK,
                note="one micro-batch per replica: priced as GPipe (1F1B needs as many micro-batches as "
                     "stages; with one they are the same schedule)"),
    # the same README's "Update": the run started at "GBS=192/MBS=1 @ 73 TFLOPs". The logger's TFLOPs is
    # k * GBS / iteration time with one k for this model, sequence and GPU count (the two logged lines give
    # k = 8.04 * 15.23 / 16 = 7.653 and 149.02 * 105.22 / 2048 = 7.656), so 73 TFLOPs at GBS 192 is
    # 7.655 * 192 / 73 = 20.13 s per iteration
    PipelineRun("bloom-176b A100x384 GBS192", "bigscience-bloom-2022", "A100-80GB", 14336, 70, 112, 250880, 2048,
                tp=4, pp=12, dp=8, micro_batch=1, global_batch=192,
                layer_cuts=tuple(range(6, 67, 6)), recompute="full", attention="math", zero=1,
                inter_node_Bps=4 * 100e9 / 8, published_iteration_s=20.13, intra_node_Bps=_JZ_NVLINK,
                note="iteration time from the published 73 TFLOPs through the logger's own TFLOPs-per-time "
                     "ratio (two logged iterations agree on it to 0.04 %)"),
)  # fmt: skip


# NeMo Megatron (BigNLP-Scripts) README, "7.1.2. Training Performance Results": tokens per second of GPT-3 5B
# on 1-20 DGX A100 80GB nodes and GPT-3 175B on 16-128 nodes of a DGX SuperPOD. The layouts are the launcher's
# predefined configs (conf/training/gpt3/5b.yaml, 175b.yaml): 5B h 4096, 24 layers, 32 heads, TP 2, PP 1,
# MBS 2, GBS 1440, no activation checkpointing (method block over 0 layers); 175B h 12288, 96 layers, 96 heads,
# TP 8, PP 8, MBS 2, GBS 1536, selective recompute, sequence parallel; seq 2048, bf16 O2 (fp32 main params),
# fused Adam, GPT-2 BPE vocab 50257 padded to a multiple of 128 x TP; DGX A100 nodes, 8 x 200 Gb/s HDR IB.
_NEMO_5B = ((1, 39543), (2, 79128), (5, 195047), (9, 344523), (10, 383500), (18, 670254), (20, 731791))
_NEMO_175B = ((16, 20642), (32, 38025), (128, 141306))
_SUPERPOD_NET = 8 * 200e9 / 8  # DGX A100: 8 HDR InfiniBand NICs of 200 Gb/s per node
_NEMO_NOTE = (
    "GBS held at the config's value at every node count (the README does not give it per row; "
    "every count divides it); Megatron fused-softmax attention (no flash attention in that release)"
)


def _nemo(size: str, nodes: int, tokens_per_s: float) -> PipelineRun:
    five = size == "5b"
    tp, pp, mbs, gbs = (2, 1, 2, 1440) if five else (8, 8, 2, 1536)
    dp = nodes * 8 // (tp * pp)
    return PipelineRun(
        f"nemo-gpt3-{size} A100x{nodes * 8}", "nemo-megatron-2022", "A100-80GB",
        4096 if five else 12288, 24 if five else 96, 32 if five else 96,
        50432 if five else 51200, 2048, tp=tp, pp=pp, dp=dp, micro_batch=mbs, global_batch=gbs, layer_cuts=None,
        recompute="none" if five else "selective", attention="math", zero=0, inter_node_Bps=_SUPERPOD_NET,
        published_iteration_s=gbs * 2048 / tokens_per_s, published_tokens_per_s=tokens_per_s, note=_NEMO_NOTE,
        kernels=MEGATRON if five else MEGATRON_SP,
    )  # fmt: skip


NEMO_RUNS = tuple(_nemo("5b", n, t) for n, t in _NEMO_5B) + tuple(_nemo("175b", n, t) for n, t in _NEMO_175B)
PIPELINE_RUNS = PIPELINE_RUNS + NEMO_RUNS


@dataclass(frozen=True)
class DataParallelRun:
    """One published data-parallel (DDP, gradient accumulation) BERT pre-training run, sequences/s as published."""

    name: str
    source: str
    gpu: str
    gpus: int
    seq_len: int
    micro_batch: int  # sequences per GPU per forward/backward
    accumulation: int  # micro-batches per GPU per optimizer step
    published_sequences_per_s: float  # all GPUs together
    inter_node_Bps: float
    hidden: int = 1024
    layers: int = 24
    heads: int = 16
    vocab: int = 30528  # BERT's 30522 word pieces padded to a multiple of 8, as the DLE BERT code does
    precision: str = "fp16"  # the README's "mixed precision" column: PyTorch AMP fp16
    # the README's changelog (January 2022): pre-training "with native AMP, native DDP, and TorchScript with
    # NVFuser backend" (elementwise chains fused), apex's FusedLayerNorm in modeling.py
    kernels: Kernels = Kernels(fused=True)
    gpus_per_node: int = 8
    note: str = ""
    # the tokens a sequence is padded to on average, where the run does not pad every sequence to ``seq_len``
    computed_len: int | None = None

    @property
    def global_batch(self) -> int:
        return self.gpus * self.micro_batch * self.accumulation


# NVIDIA DeepLearningExamples PyTorch/LanguageModeling/BERT/README.md, "Training performance: NVIDIA DGX A100
# (8x A100 80GB)" (pytorch:21.11-py3): BERT-large pre-training, mixed-precision throughput in sequences/s. Phase 1
# (seq 128) runs 256 sequences per GPU per micro-batch, phase 2 (seq 512) 32; the accumulated batch per GPU is
# 8192 / 4096 on one node and halves as the nodes double (global batch 65536 / 32768 at every node count).
# Accumulation steps are accumulated batch / batch per GPU (the 4-node phase-1 row prints "16 and 18" where
# 2048 / 256 = 8).
_DLE_BERT = (
    # (GPUs, seq, batch/GPU, accumulated batch/GPU, mixed-precision sequences/s, table)
    (1, 128, 256, 8192, 580, "single-node"), (8, 128, 256, 8192, 4591, "single-node"),
    (1, 512, 32, 4096, 210, "single-node"), (8, 512, 32, 4096, 1657, "single-node"),
    (8, 128, 256, 8192, 4553, "multi-node"), (16, 128, 256, 4096, 9191, "multi-node"),
    (32, 128, 256, 2048, 18119, "multi-node"), (64, 128, 256, 1024, 35774, "multi-node"),
    (128, 128, 256, 512, 70555, "multi-node"), (256, 128, 256, 256, 138294, "multi-node"),
    (8, 512, 32, 4096, 1648, "multi-node"), (16, 512, 32, 2048, 3291, "multi-node"),
    (32, 512, 32, 1024, 6464, "multi-node"), (64, 512, 32, 512, 13005, "multi-node"),
    (128, 512, 32, 256, 25570, "multi-node"), (256, 512, 32, 128, 49663, "multi-node"),
)  # fmt: skip
_DLE_NOTE = (
    "DDP with gradient all-reduce once per accumulated step (as the DLE script's allreduce_post_accumulation); "
    "Tessera prices AdamW where the run uses fused LAMB (same state, one more norm pass), the MLM head over "
    "every position where the run predicts only the masked ones, no NSP head, math attention with fused "
    "elementwise kernels (TorchScript + NVFuser), no activation checkpointing; inter-node: the DGX A100 "
    "SuperPOD's 8 x 200 Gb/s HDR (the README states no network)"
)
# Phase 2 does not pad every sequence to 512: the README's changelog (January 2022) has "Binned pretraining for
# phase2 with LDDL using a bin size of 64" (each batch padded to the end of its 64-token length bin), and on
# English Wikipedia + BooksCorpus "the percentage of padding among all the input tokens is 17% and 48%,
# respectively, when the max sequence length is set to 128 and 512" (abstract of a study of BERT's padding,
# openreview.net/forum?id=3nzKUh9a4M). A phase-2 sequence holds 0.52 x 512 = 266 tokens on average and is padded
# to its bin's end, half a bin (32) further on average: 298 tokens priced. Phase 1 is not binned: 128.
_DLE_PHASE2_LEN = round(0.52 * 512) + 64 // 2
_DLE_NOTE_2 = _DLE_NOTE + (
    "; phase 2 binned by length (LDDL, bins of 64): priced at the mean padded length, 298 tokens (48 % padding "
    "at 512 on Wikipedia + BooksCorpus, plus half a bin)"
)
DP_RUNS = tuple(
    DataParallelRun(
        f"dle-bert-large s{seq} A100x{g} ({table})", "nvidia-dle-bert-2021", "A100-80GB", g, seq, mb, acc // mb,
        float(tput), _SUPERPOD_NET, note=_DLE_NOTE if seq == 128 else _DLE_NOTE_2,
        computed_len=None if seq == 128 else _DLE_PHASE2_LEN,
    )
    for g, seq, mb, acc, tput, table in _DLE_BERT
)  # fmt: skip


def _on_nodes(plan: Plan, gpus_per_node: int, prefix: str = "node") -> Plan:
    """The plan's devices placed rank by rank on nodes ``{prefix}-0``, ``{prefix}-1``, … of ``gpus_per_node``."""
    gpn = gpus_per_node
    stages = tuple(
        replace(st, devices=tuple(replace(d, node=f"{prefix}-{d.rank // gpn}", local_index=d.rank % gpn)
                                  for d in st.devices))
        for st in plan.stages
    )  # fmt: skip
    return replace(plan, stages=stages)


def _estimate_on_network(
    plan: Plan,
    spec: ModelSpec,
    r: DataParallelRun | PipelineRun | FSDPRun,
    cost: CostModel | None,
    kernels: Kernels = EAGER,
) -> tuple[Plan, Estimate]:
    """The run's plan on nodes of its size (named node-0.. as ``network_cluster`` names them) and its estimate
    over the network the source states, its blocks' memory-bound work run by ``kernels``."""
    plan = _on_nodes(plan, r.gpus_per_node)
    cluster = network_cluster(
        r.gpu, r.gpus, gpus_per_node=r.gpus_per_node, inter_node_bandwidth_Bps=r.inter_node_Bps,
        intra_node_bandwidth_Bps=getattr(r, "intra_node_Bps", None),
    )  # fmt: skip
    return plan, estimate_plan(plan, spec, Topology(cluster), cost=cost or CostModel(), kernels=kernels)


def _row(
    r: DataParallelRun | PipelineRun | FSDPRun,
    e: Any,
    *,
    plan: str,
    metric: str,
    published: float,
    estimated: float,
    err: float,
    extra: dict[str, Any] | None = None,
    times: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One published run's JSON row: where it comes from, the figure compared, the estimate's times
    (``times``: the breakdown that kind of run reports) and ``extra`` published figures beside the metric."""
    return {
        "name": r.name,
        "source": r.source,
        "style": SOURCES[r.source]["style"],
        "set": SOURCES[r.source]["set"],
        "gpu": r.gpu,
        "gpus": r.gpus,
        "plan": plan,
        "metric": metric,
        "published": published,
        **(extra or {}),
        "estimated": estimated,
        "relative_error": err,
        "abs_relative_error": abs(err),
        "iteration_time_s": e.iteration_time_s,
        **(times if times is not None else {"compute_s": e.compute_s, "comm_s": e.comm_s}),
        "feasible": e.feasible,
        "note": r.note,
    }


def evaluate_dp(r: DataParallelRun, cost: CostModel | None = None) -> dict[str, Any]:
    """``estimate_plan`` of one published DDP BERT run: DP over all GPUs, ``accumulation`` micro-batches."""
    arch = bert.bert_arch(r.hidden, r.layers, r.heads, vocab=r.vocab, max_positions=512)
    seq = r.computed_len or r.seq_len
    spec = bert.spec(f"bert-large-s{seq}", arch, seq)
    plan = simple_plan(
        spec.name, n_layers=spec.n_layers, global_batch=r.global_batch, seq_len=seq, dp=r.gpus,
        gpu_type=r.gpu, micro_batches=r.accumulation, precision=r.precision, recompute="none", attention="math",
    )  # fmt: skip
    plan, e = _estimate_on_network(plan, spec, r, cost, r.kernels)
    estimated = r.global_batch / e.iteration_time_s
    err = _rel(estimated, r.published_sequences_per_s)
    return _row(
        r, e, plan=f"DDP x{r.gpus}, {r.precision} AMP, {r.micro_batch}x{r.seq_len}/GPU x {r.accumulation} "
        f"accumulated, global batch {r.global_batch}, no recompute, math attention",
        metric="sequences_per_s", published=r.published_sequences_per_s, estimated=estimated, err=err,
    )  # fmt: skip


def evaluate_pipeline(r: PipelineRun, cost: CostModel | None = None) -> dict[str, Any]:
    """``estimate_plan`` of one published Megatron-style run: its own stage cut, TP groups inside a node."""
    arch = gpt.gpt_arch(r.hidden, r.layers, r.heads, vocab=r.vocab, max_positions=r.seq_len)
    spec = gpt.spec(f"gpt-{r.name.split()[0]}", arch, r.seq_len)
    plan = simple_plan(
        spec.name, n_layers=spec.n_layers, global_batch=r.global_batch, seq_len=r.seq_len, tp=r.tp, pp=r.pp,
        dp=r.dp, gpu_type=r.gpu, micro_batches=r.global_batch // (r.micro_batch * r.dp),
        layer_cuts=r.layer_cuts, blocks=block_range(spec) if r.layer_cuts is None else None, precision=PRECISION, recompute=r.recompute, attention=r.attention,
        zero=r.zero, model_heads=r.heads, schedule=r.schedule,
    )  # fmt: skip
    plan, e = _estimate_on_network(plan, spec, r, cost, r.kernels)
    err = _rel(r.published_iteration_s, e.iteration_time_s)  # throughput error: published time / estimate - 1
    tokens = r.global_batch * r.seq_len
    metric, published, estimated = "iteration_time_s", r.published_iteration_s, e.iteration_time_s
    if r.published_tokens_per_s is not None:  # the same error, on the figure the source printed
        metric, published, estimated = "tokens_per_s", r.published_tokens_per_s, tokens / e.iteration_time_s
    return _row(
        r, e, plan=f"TP{r.tp} PP{r.pp} DP{r.dp} B{r.global_batch}/{r.micro_batch}, {r.recompute} recompute, "
        f"ZeRO-{r.zero}, {r.attention} attention",
        metric=metric, published=published, estimated=estimated, err=err,
        times={"stage_blocks": [st.layer_end - st.layer_start for st in plan.stages]},
    )  # fmt: skip


def evaluate_fsdp(r: FSDPRun, cost: CostModel | None = None) -> dict[str, Any]:
    """``estimate_plan`` of one published FSDP run: ZeRO-3 (FSDP2) over all GPUs, nodes of ``gpus_per_node``,
    bf16 mixed precision, flash attention, one micro-batch of ``batch_per_gpu`` sequences per GPU."""
    arch = llama.llama_arch(r.hidden, r.layers, r.heads, r.kv_heads, r.ffn, max_positions=r.seq_len)
    spec = llama.spec(f"llama-{r.name.split()[0]}", arch, r.seq_len)

    def priced(recompute: str) -> Estimate:
        plan = simple_plan(
            spec.name, n_layers=spec.n_layers, global_batch=r.batch_per_gpu * r.gpus, seq_len=r.seq_len,
            dp=r.gpus, gpu_type=r.gpu, micro_batches=1, precision="bf16", recompute=recompute, attention="flash",
            zero=3,
        )  # fmt: skip
        return _estimate_on_network(plan, spec, r, cost)[1]

    e = priced(r.recompute)
    if r.checkpoint_every > 1:  # 1 in n blocks re-runs its forward: the line between none and every block
        share = 1.0 / r.checkpoint_every
        plain = priced("none")
        it = share * e.iteration_time_s + (1.0 - share) * plain.iteration_time_s
        e = replace(
            e, iteration_time_s=it, tokens_per_s_per_gpu=e.tokens_per_s_per_gpu * e.iteration_time_s / it,
            compute_s=share * e.compute_s + (1.0 - share) * plain.compute_s,
            comm_s=share * e.comm_s + (1.0 - share) * plain.comm_s,
        )  # fmt: skip
    err = _rel(e.tokens_per_s_per_gpu, r.published_tokens_per_s_per_gpu)
    every = f" every {r.checkpoint_every}th block" if r.checkpoint_every > 1 else ""
    return _row(
        r, e, plan=f"FSDP (ZeRO-3) x{r.gpus}, bf16, recompute {r.recompute}{every}, flash, "
        f"{r.batch_per_gpu}x{r.seq_len}/GPU",
        metric="tokens_per_s_per_gpu", published=r.published_tokens_per_s_per_gpu, estimated=e.tokens_per_s_per_gpu,
        err=err, extra={"published_mfu": r.published_mfu},
    )  # fmt: skip


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
    return _on_nodes(plan, 8, "dgx")


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
    e: Estimate = estimate_plan(plan, spec, topo, cost=cost, kernels=MEGATRON_SP)
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


def _megatron_row(r: dict[str, Any]) -> dict[str, Any]:
    """A Megatron config's result in the common row shape (MFU is the compared figure)."""
    return {
        "name": f"megatron-gpt-{r['name']}",
        "source": "korthikanti2022",
        "style": SOURCES["korthikanti2022"]["style"],
        "set": SOURCES["korthikanti2022"]["set"],
        "gpu": GPU,
        "gpus": r["gpus"],
        "plan": f"TP{r['tp']} PP{r['pp']} B{r['global_batch']}/{r['micro_batch']}, {RECOMPUTE} recompute",
        "metric": "mfu",
        "published": r["published_mfu"],
        "estimated": r["estimated_mfu"],
        "relative_error": r["relative_error"],
        "abs_relative_error": r["abs_relative_error"],
        "iteration_time_s": r["iteration_time_s"],
        "feasible": r["feasible"],
    }


def run(
    configs: tuple[Config, ...] = CONFIGS,
    cost: CostModel | None = None,
    fsdp_runs: tuple[FSDPRun, ...] = FSDP_RUNS,
    pipeline_runs: tuple[PipelineRun, ...] = PIPELINE_RUNS,
    dp_runs: tuple[DataParallelRun, ...] = DP_RUNS,
) -> dict[str, Any]:
    cluster = get_cluster(CLUSTER)
    detail = [evaluate_config(c, cluster, cost) for c in configs]
    rows = (
        [_megatron_row(r) for r in detail]
        + [evaluate_pipeline(r, cost) for r in pipeline_runs]
        + [evaluate_fsdp(r, cost) for r in fsdp_runs]
        + [evaluate_dp(r, cost) for r in dp_runs]
    )
    errs = [r["abs_relative_error"] for r in rows]
    meg = [r["abs_relative_error"] for r in rows if r["style"] == "megatron"]
    reported = [r for r in rows if r["set"] == "report"]
    mega = [r["megatron_runtime"]["abs_relative_error"] for r in detail]
    from tessera.hardware import get_gpu

    curve = curve_for(get_gpu(GPU), (cost or CostModel()).curves)
    used = sorted({r["source"] for r in rows})
    return {
        "source": SOURCE,
        "sources": {k: SOURCES[k] for k in used},
        "split": {
            "calibrate": [k for k in used if SOURCES[k]["set"] == "calibrate"],
            "report": [k for k in used if SOURCES[k]["set"] == "report"],
            "how": "by source, fixed before any comparison; nothing in the cost model is fitted to either set",
        },
        "rows": rows,
        "reported_rows": len(reported),
        "reported_mean_abs_error": statistics.fmean(r["abs_relative_error"] for r in reported)
        if reported
        else None,
        "reported_worst_abs_error": max((r["abs_relative_error"] for r in reported), default=None),
        "megatron_mean_abs_error": statistics.fmean(meg) if meg else None,
        "mean_abs_error": statistics.fmean(errs),
        "max_abs_error": max(errs),
        "target": TARGET,
        "meets_target": statistics.fmean(meg) <= TARGET if meg else None,
        "cluster": CLUSTER,
        "plan": {"precision": PRECISION, "recompute": RECOMPUTE, "attention": ATTENTION, "schedule": "1f1b"},
        "mfu_definition": (
            "Estimate.mfu = 3 x spec forward FLOPs x batch / (iteration time x sum of bf16 peaks); within 0.4 % "
            "of Megatron's 72·B·s·l·h²·(1 + s/6h + V/16lh) for these shapes (flops_ratio), so used as is"
        ),
        "a100_curve": asdict(curve),
        "configs": detail,
        "megatron_runtime": {
            "mean_abs_error": statistics.fmean(mega),
            "max_abs_error": max(mega),
            "meets_target": statistics.fmean(mega) <= TARGET,
            "each_within_target": all(x <= TARGET for x in mega),
        },
        "notes": [
            "rows: every published run compared; metric mfu (Korthikanti rows, Estimate.mfu), tokens_per_s_per_gpu "
            "(FSDP rows), iteration_time_s (BLOOM), tokens_per_s (NeMo GPT-3) or sequences_per_s (DLE BERT); relative_error is the throughput error "
            "(estimated - published) / published, for iteration times published / estimated - 1.",
            "mean_abs_error is over all rows (before the FSDP rows were added it was over the 4 Megatron rows, "
            "now megatron_mean_abs_error).",
            "41 runs from 5 sources; the calibrate set is Korthikanti et al. only, every other source is "
            "reported. Added to the report set after the split, without touching the cost model: the NeMo "
            "Megatron launcher README's GPT-3 5B/175B scaling table (10 rows) and the DeepLearningExamples "
            "BERT-large pre-training tables (16 rows).",
            "Physics changed after the first report (26.3 % reported mean, 79.5 % worst, Megatron-style 20.9 %), "
            "each from a cited measurement or a documented property of the system that ran, nothing fitted to a "
            "row: (1) the blocks' memory-bound kernels counted kernel by kernel (norms, residual adds, dropout, "
            "RoPE, layout copies, activations; math attention's s x s score traffic), eager as Tessera's "
            "runtime runs them or fused as Megatron-LM/NeMo/Megatron-DeepSpeed/DLE run them, with sequence "
            "parallelism where the source used it (tessera.perf.compute.Kernels), and under AMP over fp32 "
            "parameters (DLE BERT's fp16 AMP) the residual stream's kernels in fp32 (autocast's widest-input "
            "rule); (2) NVLink figures one "
            "direction per GPU (the catalog held both directions' total); (3) compute beside an FSDP collective "
            "runs 18.9 % slower (Lee et al. 2025, arXiv 2507.03114); (4) rows restated to what their sources "
            "say: BLOOM's 4-NVLink nodes, the FSDP 13B runs' checkpointing of every 2nd block (their HFU/MFU), "
            "DLE BERT phase 2's length-binned sequences (48 % padding at 512, bins of 64).",
            "Still off (reported, not fitted): FSDP Llama 2 on H100 (+20 % to +35 %, the estimate faster; the "
            "blog itself names H100's HBM bandwidth and 10 % exposed network); BLOOM-176B at small global "
            "batch (+23 % to +25 %: the README documents GBS 32 running as slow as GBS 16, a fixed per-step cost "
            "not modeled); FSDP Llama 2 70B on A100 (-11 %: priced with Tessera's fp32 gradient reduce-scatter "
            "where the run reduced in bf16); the Korthikanti rows sit at -8 % to -9 % (estimate_plan prices "
            "Tessera's runtime: 3 + 1 "
            "input-gradient all-reduces per block in backward and foreach AdamW, where Megatron runs 2 and fused "
            "Adam).",
            "Not applied: FlashAttention-2's causal speedup ('around 1.7-1.8x' from skipping the tiles above the "
            "diagonal, Dao 2023 §3.1.1): the estimate charges a causal model's flash core for the full s x s. "
            "Applying 1.75x moved the FSDP Llama rows 4-12 points more optimistic (H100 7B +47 %) and priced "
            "64k-token sequences below the old roofline, against issue 20 item 4's measured long-sequence "
            "over-prediction; left open.",
            "configs[*] keep the Megatron detail: estimate_plan prices Tessera's runtime (vocab-parallel "
            "embedding/head, 3 + 1 input-gradient all-reduces per block in backward, foreach AdamW); "
            "megatron_runtime composes the same tessera.perf physics for Megatron's implementation.",
            "feasible is Tessera's memory formula, which does not model sequence parallelism, so the deep "
            "Megatron pipelines' first stages read over 80 GB where Megatron fits.",
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
    f = Table(title="Published runs (all sources)")
    for col in ("run", "source", "set", "GPUs", "metric", "published", "tessera", "err"):
        f.add_column(col, justify="right")
    for r in result["rows"]:
        fmt = {"mfu": "{:.1%}", "iteration_time_s": "{:.2f} s"}.get(r["metric"], "{:,.0f}")
        f.add_row(
            r["name"], r["source"], r["set"], f"{r['gpus']} {r['gpu']}", r["metric"],
            fmt.format(r["published"]), fmt.format(r["estimated"]), f"{r['relative_error']:+.1%}",
        )  # fmt: skip
    console.print(f)
    mr = result["megatron_runtime"]
    rep = result["reported_mean_abs_error"]
    console.print(
        f"rows {len(result['rows'])} from {len(result['sources'])} sources; reported set {result['reported_rows']} "
        f"rows: mean |error| {rep:.3f}, worst {result['reported_worst_abs_error']:.3f}; Megatron-style "
        f"{result['megatron_mean_abs_error']:.3f} (target {result['target']}); all rows "
        f"{result['mean_abs_error']:.3f}; megatron-runtime composition {mr['mean_abs_error']:.3f} "
        f"(max {mr['max_abs_error']:.3f})"
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
