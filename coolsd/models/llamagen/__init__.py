"""LlamaGen text-to-image (GPT-XL T2I, VQ-16, Eagle-1 drafter) behind the engine's model protocol.

Local weights folder, found through the environment variable `COOLSD_LLAMAGEN_DIR`:

    $COOLSD_LLAMAGEN_DIR/
        target/          config.json + model weights     (hub: jadohu/LlamaGen-T2I)
        drafter/         config.json + pytorch_model.bin (hub: jadohu/llamagen_drafter)
        vq_ds16_t2i.pt   LlamaGen VQ-16 checkpoint ("model" entry)
        t5/              FLAN-T5-XL folder for `transformers.T5EncoderModel` + its tokenizer files

Nothing is downloaded at load time; use `loaders.load_target("jadohu/LlamaGen-T2I")` etc. where a
network exists to fill the folder's parts from the hub cache.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from coolsd.models.llamagen.caption import CaptionEmbedding, T5CaptionEncoder
from coolsd.models.llamagen.config import LlamaGenConfig
from coolsd.models.llamagen.drafter import LlamaGenDrafter
from coolsd.models.llamagen.loaders import CheckpointMismatch, load_drafter, load_target, load_vq
from coolsd.models.llamagen.target import LlamaGenT2I
from coolsd.models.llamagen.vq16 import VQ16Config, VQ16Tokenizer
from coolsd.neighbours import neighbour_table

ENV_VAR = "COOLSD_LLAMAGEN_DIR"
REQUIRED_FILES = ("target/config.json", "drafter/config.json", "vq_ds16_t2i.pt", "t5/config.json")
WEIGHT_FILES = (
    "model.safetensors",
    "pytorch_model.bin",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)

log = logging.getLogger(__name__)

__all__ = [
    "CaptionEmbedding",
    "CheckpointMismatch",
    "LlamaGen",
    "LlamaGenConfig",
    "LlamaGenDrafter",
    "LlamaGenT2I",
    "T5CaptionEncoder",
    "VQ16Config",
    "VQ16Tokenizer",
    "find_llamagen",
    "load_llamagen",
]


@dataclass
class LlamaGen:
    """Everything the engine and the app need for one model family.

    neighbours: (V, k_max + 1) int64 LANTERN++ table on the model device; grid: (H, W) tokens.
    """

    target: LlamaGenT2I
    drafter: LlamaGenDrafter
    tokenizer: VQ16Tokenizer
    neighbours: Tensor
    grid: tuple[int, int]
    name: str
    conditioning: str = "text"  # `cond` is a prompt string


def _missing_parts(root: Path) -> list[str]:
    missing = [name for name in REQUIRED_FILES if not (root / name).exists()]
    for part in ("target", "drafter"):
        if not any((root / part / name).exists() for name in WEIGHT_FILES):
            missing.append(f"{part}/<weights>")
    return missing


def find_llamagen() -> Path | None:
    """The folder named by $COOLSD_LLAMAGEN_DIR when it holds every expected file, else None."""
    root = os.environ.get(ENV_VAR)
    if not root:
        return None
    missing = _missing_parts(Path(root))
    if missing:
        log.warning("%s=%s lacks %s; LlamaGen is not available", ENV_VAR, root, ", ".join(missing))
        return None
    return Path(root)


def load_llamagen(
    path: str | Path | None = None,
    device=None,
    dtype=None,
    k_max: int = 64,
    normalise_neighbours: bool = False,
    vq_config: VQ16Config | None = None,
) -> LlamaGen:
    """Load target (+ T5), drafter, VQ decoder and neighbour table from a folder laid out as above.

    Args:
        path: the folder; default `find_llamagen()`.
        device: default CUDA when present, else CPU.
        dtype: transformer weights; default bfloat16 on CUDA (as published), float32 on CPU.
        k_max: neighbours per code in the LANTERN++ table.
        normalise_neighbours: False (default) ranks raw codebook rows by Euclidean distance, as
            LANTERN's `generate_codebook.py` does; True ranks L2-normalised codes (cosine), the
            vectors decoding uses (spec section 3).
        vq_config: VQ decoder widths; default the published VQ_16.
    """
    path = Path(path) if path is not None else find_llamagen()
    if path is None:
        raise FileNotFoundError(f"set {ENV_VAR} to a folder with {', '.join(REQUIRED_FILES)}")
    missing = _missing_parts(path)
    if missing:
        raise FileNotFoundError(f"{path} lacks {', '.join(missing)}")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    caption_len = LlamaGenConfig.from_json(path / "target" / "config.json").cls_token_num
    t5 = T5CaptionEncoder(path / "t5", device=device, dtype=dtype, max_length=caption_len)
    target = load_target(path / "target", device, dtype, caption_encoder=t5)
    drafter = load_drafter(path / "drafter", target, device, dtype)
    tokenizer = load_vq(path / "vq_ds16_t2i.pt", target.config.grid, device, config=vq_config)
    neighbours = neighbour_table(tokenizer.codebook.weight, k_max=k_max, normalise=normalise_neighbours)
    H, W = target.config.grid
    name = f"LlamaGen T2I ({H * tokenizer.factor} px)"
    return LlamaGen(target, drafter, tokenizer, neighbours.to(device), (H, W), name)
