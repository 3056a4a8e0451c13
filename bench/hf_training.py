"""Real ``transformers`` models trained under Tessera's plans: exact against the plain model, and how fast.

    python bench/hf_training.py [--families llama qwen2] [--steps 30] [--out bench/results/hf_training.json]

Tiny llama- and qwen2-family models are created from local configs (``save_pretrained`` into a temporary
directory; nothing is downloaded; qwen2 ties its head to the embedding) and trained for two steps under each
of these Plans, every rank loading only its own layers' (and shard's) tensors from the safetensors:

* ``dp2-uneven`` — data parallelism on 2 processes with batch shares 6:2;
* ``tp2-uneven`` — tensor parallelism on 2 processes, head/feature split 3:1 (Tessera's own layers);
* ``pp2-1f1b`` — a 2-stage pipeline cut between decoder layers (3 micro-batches);
* ``dp2-zero3`` — ZeRO-3 through FSDP2 on 2 processes, shares 5:3;
* ``bridge-dp2-to-1`` — a pipeline whose first stage is 2-way data parallel (3:1) feeding a 1-device stage
  (3 processes: the bridge re-splits the activations between the degrees).

Each run's loss and every first-step gradient are compared with the plain single-process
``AutoModelForCausalLM`` on the same batches (fp32, dropout off): ``max_rel_loss_error`` and
``max_rel_grad_error`` (largest per-tensor max|Δ| / max|reference|).

Throughput: a larger model of each family (hidden 256, 4 decoder layers, vocab 4096, batch 8 × 128 tokens)
trains ``--steps`` steps in one Tessera process and in the plain ``transformers`` loop (forward, cross-entropy,
backward, AdamW), alternately in the same run and with the same thread count; ``throughput_ratio_vs_plain`` is
Tessera's median iteration time over the plain loop's (target ≤ 1.05), the worst over the families.

Writes ``bench/results/hf_training.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "runtime"))  # the tests' tiny models and plain reference

from helpers import max_rel, rel, stage  # noqa: E402
from hf_models import N_DECODER, hf_reference, save_tiny  # noqa: E402

from tessera.nn.hf import HFModel  # noqa: E402
from tessera.nn.resolve import resolve_spec  # noqa: E402
from tessera.plan import Plan  # noqa: E402
from tessera.runtime import RunOptions, launch, launch_many  # noqa: E402

OUT = HERE / "results" / "hf_training.json"
N = N_DECODER + 2  # the runtime's layers: embedding, decoder layers, head
EXACT_STEPS = 2
TARGET_RATIO = 1.05


def _plan(stages, *, batch: int = 8, seq: int = 16, micro: int = 1, **kw) -> Plan:
    return Plan(model="hf", global_batch=batch, seq_len=seq, stages=tuple(stages), micro_batches=micro, **kw)


def plans_2() -> dict[str, Plan]:
    return {
        "dp2-uneven": _plan([stage(0, N, [0, 1], dp=2, shares=(6, 2))], micro=2),
        "tp2-uneven": _plan([stage(0, N, [0, 1], tp=2, ratios=(0.75, 0.25))], micro=2),
        "pp2-1f1b": _plan([stage(0, 2, [0]), stage(2, N, [1])], micro=3),
        "dp2-zero3": _plan([stage(0, N, [0, 1], dp=2, shares=(5, 3))], micro=2, zero=3),
    }


def plans_3() -> dict[str, Plan]:
    return {"bridge-dp2-to-1": _plan([stage(0, 2, [0, 1], dp=2, shares=(6, 2)), stage(2, N, [2])], micro=4)}


def exactness(families: list[str], root: Path) -> list[dict]:
    """Every (family, plan) run against the plain model: loss and gradient errors."""
    rows = []
    for i, fam in enumerate(families):
        model_dir = save_tiny(fam, root / fam, seed=i)
        for group in (plans_2(), plans_3()):
            jobs = [
                (p, RunOptions(steps=EXACT_STEPS, model=HFModel(str(model_dir)), capture_grads=True,
                               pg_timeout_s=120, watchdog_s=300))
                for p in group.values()
            ]  # fmt: skip
            for (name, p), result in zip(group.items(), launch_many(jobs), strict=True):
                losses, grads = hf_reference(model_dir, p, steps=EXACT_STEPS)
                loss_err = max(rel(a, b) for a, b in zip(result.losses, losses, strict=True))
                grad_err = max_rel(result.grads, grads)
                rows.append({"family": fam, "plan": name, "processes": p.world_size, "rel_loss_error": loss_err,
                             "rel_grad_error": grad_err})  # fmt: skip
                print(f"  {fam:6s} {name:16s} loss {loss_err:.1e}  grad {grad_err:.1e}", flush=True)
    return rows


def _small_dir(family: str, out: Path) -> Path:
    """A model big enough that its step is compute, not per-call overhead."""
    import transformers as tf

    small = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
                 num_key_value_heads=4, vocab_size=4096, max_position_embeddings=256)  # fmt: skip
    config = (
        tf.LlamaConfig(**small) if family == "llama" else tf.Qwen2Config(**small, tie_word_embeddings=True)
    )
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(str(out))
    return out


def plain_step_s(model_dir: Path, batch: int, seq: int, steps: int, threads: int) -> float:
    """Median step of the plain transformers training loop (the same batches' shapes, AdamW)."""
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.config._attn_implementation = "sdpa"
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    times = []
    for _ in range(steps):
        ids = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=ids[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab).float(), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[2:])


def tessera_step_s(model_dir: Path, batch: int, seq: int, steps: int) -> float:
    """Median iteration time of one Tessera process training the same model (its rank gets every core's
    thread, as the plain loop does: ``cpu_count // world size``)."""
    layers = resolve_spec(str(model_dir), seq).n_layers
    p = Plan(model="hf", global_batch=batch, seq_len=seq, stages=(stage(0, layers, [0]),), micro_batches=1)
    result = launch(
        p, RunOptions(steps=steps, model=HFModel(str(model_dir)), pg_timeout_s=120, watchdog_s=600)
    )
    return statistics.median(r.iter_time_s for r in result.records[2:])


def throughput(families: list[str], root: Path, steps: int) -> list[dict]:
    rows = []
    batch, seq = 8, 128
    for fam in families:
        model_dir = _small_dir(fam, root / f"{fam}-small")
        tess, plain = [], []
        for _ in range(2):  # alternately, so a slow spell of the host lands on both
            tess.append(tessera_step_s(model_dir, batch, seq, steps))
            plain.append(plain_step_s(model_dir, batch, seq, steps, max(1, os.cpu_count() or 1)))
        ratio = statistics.median(tess) / statistics.median(plain)
        rows.append({"family": fam, "tessera_step_s": statistics.median(tess), "plain_step_s": statistics.median(plain),
                     "ratio": ratio, "batch": batch, "seq_len": seq})  # fmt: skip
        print(f"  {fam:6s} tessera {statistics.median(tess) * 1e3:.1f} ms, plain {statistics.median(plain) * 1e3:.1f} ms"
              f" → {ratio:.3f}×", flush=True)  # fmt: skip
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="+", default=["llama", "qwen2"], choices=["llama", "qwen2"])
    ap.add_argument("--steps", type=int, default=30, help="steps of each throughput run")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tessera-hf-bench-") as tmp:
        root = Path(tmp)
        print("exactness against the plain transformers model…", flush=True)
        exact = exactness(args.families, root)
        print("throughput, one process against the plain training loop…", flush=True)
        speed = throughput(args.families, root, args.steps)
    ratio = max(r["ratio"] for r in speed)
    out = {
        "benchmark": "hf_training",
        "command": "python bench/hf_training.py " + " ".join(sys.argv[1:]),
        "families": args.families,
        "plans": len(exact),
        "max_rel_loss_error": max(r["rel_loss_error"] for r in exact),
        "max_rel_grad_error": max(r["rel_grad_error"] for r in exact),
        "throughput_ratio_vs_plain": ratio,
        "throughput_target": TARGET_RATIO,
        "meets_target": ratio <= TARGET_RATIO,
        "runs": exact,
        "throughput": speed,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    print(f"{len(exact)} plan × family runs: max loss error {out['max_rel_loss_error']:.1e}, max grad error "
          f"{out['max_rel_grad_error']:.1e}; throughput ratio {ratio:.3f} (target ≤ {TARGET_RATIO}) → {args.out}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
