"""The emoji model: class- and style-conditional RGB emoji (VQ tokenizer, Llama target, Eagle-1 head).

Same four `save_pretrained` folders as the MNIST model (`assets/emoji/{vq,target,drafter,classifier}`),
trained by `python -m coolsd.train STAGE --model emoji` (assets/emoji/README.md). The engine's
condition is one integer, class * S + style (`coolsd.models.embedded.num_conditions`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import torch

from coolsd.decoding.engine import DecodeConfig
from coolsd.decoding.sampling import SamplingConfig
from coolsd.models.bundle import BundleError, ModelBundle, load_vq_llama
from coolsd.models.timing import interleaved_medians
from coolsd.util.paths import EMOJI_DIR

# Sampling the emoji model is shown with (CFG over both conditions; see assets/emoji/README.md).
EMOJI_SAMPLING = SamplingConfig(cfg_scale=3.0, temperature=1.0, top_k=0, top_p=1.0)


log = logging.getLogger("coolsd")
DTYPE_ENV = "COOLSD_DTYPE"  # fp32 | bf16 | auto (default): how the emoji model's target and drafter run
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
TIMING_WARMUP, TIMING_REPEATS = 4, 15  # turns of the load-time timing (each a round of each precision)


def round_call(model, head, draft_len: int, context: int = 64) -> Callable[[], None]:
    """One default round on this machine, as a call to time: `draft_len` drafter steps of one token and
    one target verify of draft_len + 1 tokens, both CFG rows, after `context` cached tokens."""
    from coolsd.models.eagle import EagleDrafter
    from coolsd.models.embedded import LlamaClassTarget

    cfg = model.config
    target = LlamaClassTarget(model, max_tokens=context + draft_len + 1)
    drafter = EagleDrafter(head, model.model.embed_tokens.weight, model.lm_head.weight[: cfg.codebook_size],
                           context + draft_len + 1)
    with torch.no_grad():
        target.start(0, True)
        drafter.start(0, True)
        pre = target.forward(torch.zeros(context, dtype=torch.long), torch.arange(context))
        drafter.forward(torch.zeros(context, dtype=torch.long), pre.hidden, torch.arange(context))

    @torch.no_grad()
    def one_round() -> None:
        hidden = pre.hidden[:, -1:]
        for j in range(draft_len):
            hidden = drafter.forward(torch.zeros(1, dtype=torch.long), hidden, torch.tensor([context + j])).hidden
        target.forward(torch.zeros(draft_len + 1, dtype=torch.long), torch.arange(context, context + draft_len + 1))
        target.crop(context)
        drafter.crop(context)

    return one_round


def choose_dtype(root: Path, device: torch.device, draft_len: int | None = None) -> tuple[torch.dtype, str]:
    """(dtype, description): COOLSD_DTYPE when set to fp32 / bf16, else (auto) the faster of the two
    on CPU, fp16 on CUDA. Auto times a default round (`round_call`) of each precision in turns
    (`interleaved_medians`: TIMING_WARMUP untimed and TIMING_REPEATS timed turns, about 1 s in all),
    so a change of load while the page loads cannot favour the one timed second."""
    from transformers import LlamaForCausalLM

    from coolsd.models.eagle import EagleHead

    choice = os.environ.get(DTYPE_ENV, "auto").strip().lower() or "auto"
    if choice not in (*DTYPES, "auto"):
        raise BundleError(f"{DTYPE_ENV} must be fp32, bf16 or auto, got {choice!r}")
    if choice != "auto":
        return DTYPES[choice], f"{choice} (set by {DTYPE_ENV})"
    if device.type == "cuda":
        return torch.float16, "fp16 (CUDA)"
    draft_len = draft_len or DecodeConfig().draft_len
    calls = {}
    for name, dtype in DTYPES.items():
        model = LlamaForCausalLM.from_pretrained(root / "target", dtype=dtype).eval()
        head = EagleHead.from_pretrained(root / "drafter", dtype=dtype).eval()
        calls[name] = round_call(model, head, draft_len)
    ms = {name: 1e3 * s for name, s in interleaved_medians(calls, TIMING_REPEATS, TIMING_WARMUP).items()}
    best = min(ms, key=ms.get)
    how = ", ".join(f"{k} {v:.1f} ms" for k, v in ms.items())
    return DTYPES[best], (f"{best} (measured at load, median of {TIMING_REPEATS} alternating rounds: "
                          f"L={draft_len} drafts + verify takes {how})")


def load_emoji(path: str | Path | None = None, device: str | torch.device | None = None,
               with_classifier: bool = False, k_max: int = 32) -> ModelBundle:
    """Load the shipped emoji model (RGB images (3, 32, 32) in [0, 1]); the execution dtype is chosen
    by `choose_dtype` (logged, and named by `ModelBundle.execution`)."""
    root = Path(path) if path is not None else EMOJI_DIR
    if not (root / "target").is_dir() or not (root / "drafter").is_dir():
        raise BundleError(f"emoji model folder not found or incomplete: {root}")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    try:
        dtype, how = choose_dtype(root, device)
    except BundleError:
        raise
    except Exception as err:  # unreadable folders: the strict loader below names the part
        dtype, how = torch.float32, f"fp32 (timing failed: {type(err).__name__})"
    bundle = load_vq_llama(root, "emoji (Llama 14.6M + Eagle-1 head)", EMOJI_SAMPLING, device, dtype,
                           with_classifier, k_max)
    bundle.execution = how
    log.info("coolsd: emoji model runs %s", how)
    return bundle
