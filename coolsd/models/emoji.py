"""The emoji model: class- and style-conditional RGB emoji (VQ tokenizer, Llama target, Eagle-1 head).

Same four `save_pretrained` folders as the MNIST model (`assets/emoji/{vq,target,drafter,classifier}`),
trained by `python -m coolsd.train STAGE --model emoji` (assets/emoji/README.md). The engine's
condition is one integer, class * S + style (`coolsd.models.embedded.num_conditions`).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import torch

from coolsd.decoding.sampling import SamplingConfig
from coolsd.models.bundle import BundleError, ModelBundle, load_vq_llama
from coolsd.models.graphs import FUSED, choose_path
from coolsd.util.paths import EMOJI_DIR

# Sampling an emoji model is shown with, unless its target config stores its own (`default_sampling`): CFG over
# both conditions (the retired 15-class model). The 187-emoji model stores CFG 1, T 1: its unconditional row draws
# no emoji (the first 187-emoji model: recognised 92 % at CFG 1 vs 5 % at CFG 3, 128 training pairs).
EMOJI_SAMPLING = SamplingConfig(cfg_scale=3.0, temperature=1.0, top_k=0, top_p=1.0)


log = logging.getLogger("coolsd")
DTYPE_ENV = "COOLSD_DTYPE"  # fp32 | bf16 | auto (default: the precision stored with the model)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
PRECISION_FILE = "precision.json"  # {"fused": "bf16", "why": ...}: the weights' type on the fused CPU path


def stored_precision(root: Path, device: torch.device, path: str) -> tuple[torch.dtype, str]:
    """(dtype, description) target and drafter run in on `device` and execution `path`: $COOLSD_DTYPE when set to
    fp32 / bf16; else, on the fused CPU path, the type stored beside the model (PRECISION_FILE: the kernel widens
    bf16 weights exactly to fp32, so bf16 is the fp32 maths of bf16-rounded weights from half the bytes); else fp16
    on CUDA and fp32 on a CPU's eager path (torch's bf16 products there run slower than fp32 where the CPU has no
    bf16 units). What a CPU can do picks the path (`coolsd.models.graphs.choose_path`), the path the type."""
    choice = os.environ.get(DTYPE_ENV, "auto").strip().lower() or "auto"
    if choice not in (*DTYPES, "auto"):
        raise BundleError(f"{DTYPE_ENV} must be fp32, bf16 or auto, got {choice!r}")
    if choice != "auto":
        return DTYPES[choice], f"{choice} (set by {DTYPE_ENV})"
    if device.type == "cuda":
        return torch.float16, "fp16 (CUDA)"
    stored = _read_json(root / PRECISION_FILE).get(FUSED) if path == FUSED else None
    if stored in DTYPES:
        return DTYPES[stored], f"{stored} weights, fp32 maths (stored with the model for the fused path)"
    return torch.float32, "fp32"


def _read_json(file: Path) -> dict:
    """A JSON object from `file`, {} where it is missing or not an object."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def stored_sampling(root: Path, fallback: SamplingConfig = EMOJI_SAMPLING) -> SamplingConfig:
    """The sampling a model folder's target config names (`default_sampling`: SamplingConfig's fields), else
    `fallback`. A bad stored value fails like any bad SamplingConfig (ValueError naming the field)."""
    try:
        stored = json.loads((root / "target" / "config.json").read_text(encoding="utf-8")).get("default_sampling")
    except (OSError, ValueError, AttributeError):
        stored = None
    return SamplingConfig(**stored) if isinstance(stored, dict) else fallback


def target_millions(root: Path) -> float:
    """The target's parameter count in millions, read from its config (no weights loaded)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig.from_pretrained(root / "target"))
    return sum(p.numel() for p in model.parameters()) / 1e6


def load_emoji(path: str | Path | None = None, device: str | torch.device | None = None,
               with_classifier: bool = False, k_max: int = 32, execution_path: str | None = None) -> ModelBundle:
    """Load the shipped emoji model (RGB images in [0, 1], size read from its config) on the execution path
    `execution_path` (None: `coolsd.models.graphs.choose_path`; named by `bundle.path`), in the precision that
    path takes (`stored_precision`: logged, and named by `ModelBundle.execution`)."""
    root = Path(path) if path is not None else EMOJI_DIR
    if not (root / "target").is_dir() or not (root / "drafter").is_dir():
        raise BundleError(f"emoji model folder not found or incomplete: {root}")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    execution_path = choose_path(device, execution_path)
    dtype, how = stored_precision(root, device, execution_path)
    bundle = load_vq_llama(root, f"emoji (Llama {target_millions(root):.1f}M + Eagle-1 head)", stored_sampling(root),
                           device, dtype, with_classifier, k_max, execution_path)
    bundle.execution, bundle.kind = how, "emoji"
    log.info("coolsd: emoji model runs %s", how)
    return bundle
