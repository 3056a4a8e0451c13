"""`tessera export RUN_DIR OUT_DIR`: a run's checkpoint as a Hugging Face model directory.

Users take their model away: the newest checkpoint of the run (or the step directory named) — a
``torch.distributed.checkpoint`` directory, whatever plan wrote it — is read by DCP into full tensors (the
parameters, not the optimizer state), renamed to the keys ``save_pretrained`` writes
(``model.layers.3.mlp.up_proj.weight``, ...) and written as ``model.safetensors`` beside the source model's
``config.json`` (and its tokenizer and generation files), so ``AutoModelForCausalLM.from_pretrained(OUT_DIR)`` loads exactly the trained weights. A tied
lm_head is not written twice (``transformers`` re-ties it on load, as for its own checkpoints).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import typer

from tessera.commands.common import console, fail

# Files of the source model directory that travel with the weights (whatever of them exists).
COMPANIONS = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
)


def _checkpoint_path(run_dir: Path) -> Path:
    """The run's checkpoint root (``RUN_DIR/checkpoints``), or RUN_DIR itself when it is one (or a step)."""
    nested = run_dir / "checkpoints"
    return nested if nested.is_dir() else run_dir


def export_hf(run_dir: str | Path, out_dir: str | Path, *, model: str | None = None) -> tuple[Path, int, int]:
    """Write the Hugging Face directory; returns (out_dir, checkpoint step, tensors written)."""
    from tessera.models.hf_weights import HFModelNotFound, locate_model, write_safetensors
    from tessera.nn.hf import FAMILIES, HFModel, hf_key, n_model_layers
    from tessera.runtime import checkpoint

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if not run_dir.exists():
        raise ValueError(f"RUN_DIR: {str(run_dir)!r} does not exist")
    try:
        ckpt = checkpoint.load(_checkpoint_path(run_dir), optimizer=False)
    except FileNotFoundError as e:
        raise ValueError(f"RUN_DIR: {e}") from None
    source = model or str(ckpt.meta.get("model", ""))
    try:
        src_dir = locate_model(source)
    except HFModelNotFound as e:
        hint = "" if model else " (the run's model; give the Hugging Face model it trained with --model)"
        raise ValueError(f"{e}{hint}") from None
    factory = HFModel(str(src_dir))
    config = factory.config()
    family = FAMILIES[config.model_type]
    n = n_model_layers(config)
    tensors = {}
    for fqn, value in ckpt.params.items():
        try:
            tensors[hf_key(family, n, fqn)] = value
        except (KeyError, ValueError):
            raise ValueError(
                f"checkpoint {ckpt.path}: parameter {fqn!r} is not one of {src_dir}'s layers "
                "(was this run trained on another model?)"
            ) from None
    if getattr(config, "tie_word_embeddings", False):
        tensors.pop("lm_head.weight", None)
    _check_complete(factory, family, n, tensors, ckpt.path)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ValueError(f"OUT_DIR: {str(out_dir)!r} exists and is not empty")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in COMPANIONS:
        if (src_dir / name).is_file():
            shutil.copy2(src_dir / name, out_dir / name)
    write_safetensors(out_dir, tensors)
    return out_dir, ckpt.step, len(tensors)


def _check_complete(factory, family, n: int, tensors: dict, where: Path) -> None:
    """Every parameter of the model is in the checkpoint (a partial export would load with random holes)."""
    import torch

    from tessera.nn.hf import hf_key

    with torch.device("meta"):
        full = factory(layer_range=None, tp=None, attention="flash", recompute="none")
    wanted = {hf_key(family, n, name) for name, _ in full.named_parameters()}
    missing = sorted(wanted - set(tensors))
    if missing:
        raise ValueError(f"checkpoint {where}: no value for {', '.join(missing[:4])}")


def export(
    run_dir: Path = typer.Argument(
        ..., help="a run directory (its checkpoints/), a checkpoint root or a step"
    ),
    out_dir: Path = typer.Argument(..., help="the Hugging Face model directory to write (new or empty)"),
    model: str | None = typer.Option(
        None, "--model", help="the Hugging Face model the run trained (default: the one its checkpoint names)"
    ),
) -> None:
    """Write a run's checkpoint as a Hugging Face directory (`AutoModelForCausalLM.from_pretrained` loads it)."""
    try:
        out, step, count = export_hf(run_dir, out_dir, model=model)
    except ValueError as e:
        raise fail(str(e), 2) from None
    console.print(f"exported step {step} of {run_dir}: {count} tensors to {out}", highlight=False)
