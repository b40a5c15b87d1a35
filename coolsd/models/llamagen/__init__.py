"""LlamaGen text-to-image (GPT-XL T2I, VQ-16, Eagle-1 drafter) behind the engine's model protocol.

Weights live in one local folder, `$COOLSD_LLAMAGEN_DIR`, with a sub-folder per resolution (256 and/or
512 px) beside the shared T5 encoder and VQ decoder; `layout.py` documents it and
`python -m coolsd.fetch llamagen --resolution 256|512 --dir DIR` fills it from the hub. Nothing is
downloaded at load time.

For a prompt UI (the app):
    available_resolutions()            -> [256, 512]: the resolutions whose every part is present
    load_llamagen(resolution=512)      -> ModelBundle: target, drafter, tokenizer, neighbours, grid, ...
    load_llamagen(resolution=256, caption_encoder=other.target.caption_encoder)  # share one T5 (2.4 GB bf16)
    EXAMPLE_PROMPTS, check_prompt(text) (ValueError with a user-facing message), clean_prompt(text)
    bundle.default_sampling            -> LlamaGen's published sampling (CFG 7.5, top-k 1000, T = 1)
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from coolsd.decoding.neighbours import neighbour_table
from coolsd.decoding.sampling import SamplingConfig
from coolsd.models.bundle import ModelBundle
from coolsd.models.graphs import prepare
from coolsd.models.llamagen.caption import CaptionEmbedding, T5CaptionEncoder
from coolsd.models.llamagen.clean import clean_caption
from coolsd.models.llamagen.config import LlamaGenConfig
from coolsd.models.llamagen.drafter import LlamaGenDrafter
from coolsd.models.llamagen.layout import (
    ENV_VAR,
    RESOLUTIONS,
    available_resolutions,
    hub_parts,
    llamagen_root,
    parts_for,
)
from coolsd.models.llamagen.loaders import (
    CheckpointMismatch,
    load_drafter,
    load_original_target,
    load_target,
    load_vq,
)
from coolsd.models.llamagen.prompts import EXAMPLE_PROMPTS, MAX_PROMPT_CHARS, check_prompt, clean_prompt
from coolsd.models.llamagen.target import LlamaGenT2I
from coolsd.models.llamagen.vq16 import VQ16Config, VQ16Tokenizer

log = logging.getLogger(__name__)

__all__ = [
    "ENV_VAR",
    "EXAMPLE_PROMPTS",
    "RESOLUTIONS",
    "DEFAULT_SAMPLING",
    "CaptionEmbedding",
    "CheckpointMismatch",
    "LlamaGen",
    "LlamaGenConfig",
    "LlamaGenDrafter",
    "LlamaGenT2I",
    "T5CaptionEncoder",
    "VQ16Config",
    "VQ16Tokenizer",
    "available_resolutions",
    "check_prompt",
    "clean_caption",
    "clean_prompt",
    "find_llamagen",
    "hub_parts",
    "load_llamagen",
    "load_original_target",
]

# LlamaGen's published T2I sampling (its sample_t2i defaults): CFG 7.5, top-k 1000, temperature 1
DEFAULT_SAMPLING = SamplingConfig(cfg_scale=7.5, temperature=1.0, top_k=1000)


LlamaGen = ModelBundle  # (the one bundle type; this name stays for older imports)


def find_llamagen() -> Path | None:
    """The folder named by $COOLSD_LLAMAGEN_DIR when at least one resolution is complete there, else None."""
    root = llamagen_root()
    if root is None:
        return None
    if not available_resolutions(root):
        try:
            parts_for(root)
        except FileNotFoundError as err:
            log.warning("%s=%s: %s; LlamaGen is not available", ENV_VAR, root, err)
        return None
    return root


def load_llamagen(
    path: str | Path | None = None,
    resolution: int | None = None,
    device=None,
    dtype=None,
    k_max: int = 64,
    normalise_neighbours: bool = False,
    vq_config: VQ16Config | None = None,
    caption_encoder: T5CaptionEncoder | None = None,
) -> ModelBundle:
    """Load target (+ T5), drafter, VQ decoder and neighbour table of one resolution.

    Args:
        path: the LlamaGen folder (layout.py); default `$COOLSD_LLAMAGEN_DIR`.
        resolution: 256 or 512 (pixels per side); default the lowest one present.
        device: default CUDA when present, else CPU.
        dtype: transformer weights; default bfloat16 on CUDA (as published), float32 on CPU.
        k_max: neighbours per code in the LANTERN++ table.
        normalise_neighbours: False (default) ranks raw codebook rows by Euclidean distance, as
            LANTERN's `generate_codebook.py` does; True ranks L2-normalised codes (cosine), the
            vectors decoding uses (spec section 3).
        vq_config: VQ decoder widths; default the published VQ_16.
        caption_encoder: a loaded `T5CaptionEncoder` to share (both resolutions use the same T5).
    Raises:
        FileNotFoundError naming the missing parts and the fetch command; CheckpointMismatch.
    """
    root = llamagen_root(path)
    if root is None:
        raise FileNotFoundError(f"set {ENV_VAR} to a LlamaGen folder (python -m coolsd.fetch llamagen --help)")
    parts = parts_for(root, resolution)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    target = load_target(parts.target, device, dtype)
    if caption_encoder is None:
        caption_encoder = T5CaptionEncoder(parts.t5, device=device, dtype=dtype, max_length=target.config.cls_token_num)
    target.caption_encoder = caption_encoder
    drafter = load_drafter(parts.drafter, target, device, dtype)
    prepare([target, drafter], rows=(2, 1))  # execution path (CUDA graphs on a GPU) + warm-up; logs it
    tokenizer = load_vq(parts.vq, target.config.grid, device, config=vq_config)
    neighbours = neighbour_table(tokenizer.codebook.weight, k_max=k_max, normalise=normalise_neighbours)
    H, W = target.config.grid
    pixels = H * tokenizer.factor
    name = f"LlamaGen T2I ({pixels} px)"
    return ModelBundle(name=name, target=target, drafter=drafter, tokenizer=tokenizer, neighbours=neighbours.to(device),
                       class_names=[], grid=(H, W), default_sampling=DEFAULT_SAMPLING, conditioning="text",
                       kind="llamagen", resolution=pixels, example_prompts=tuple(EXAMPLE_PROMPTS),
                       check_prompt=check_prompt, max_prompt_chars=MAX_PROMPT_CHARS)
