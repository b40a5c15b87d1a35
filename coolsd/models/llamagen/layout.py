"""Where LlamaGen's parts live on disk, and where each comes from on the hub (research/llamagen-fidelity.md).

One folder (`$COOLSD_LLAMAGEN_DIR`) holds the shared parts and one sub-folder per resolution:

    ROOT/
        t5/               FLAN-T5-XL encoder + tokenizer files      (google/flan-t5-xl)
        vq_ds16_t2i.pt    VQ-16 tokenizer, its "model" entry        (peizesun/llamagen_t2i)
        256/target/       converted target: config.json + weights   (jadohu/LlamaGen-T2I)
                          or LlamaGen's own t2i_XL_stage1_256.pt    (peizesun/llamagen_t2i)
        256/drafter/      Eagle-1 drafter: config.json + pytorch_model.bin (jadohu/llamagen_drafter)
        512/target/       jadohu/LlamaGen-T2I-2, or t2i_XL_stage2_512.pt
        512/drafter/      jadohu/llamagen2_drafter

A flat ROOT/target + ROOT/drafter (one resolution, read from the target) is accepted too.
`python -m coolsd.fetch llamagen --resolution 256` fills this layout (coolsd/models/llamagen/fetch.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "COOLSD_LLAMAGEN_DIR"
RESOLUTIONS = (256, 512)  # pixels per side; tokens per side = pixels / 16
T5_DIR = "t5"
VQ_FILE = "vq_ds16_t2i.pt"
ORIGINAL_TARGET = {256: "t2i_XL_stage1_256.pt", 512: "t2i_XL_stage2_512.pt"}  # LlamaGen's own checkpoints
WEIGHT_FILES = (
    "model.safetensors",
    "pytorch_model.bin",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)
VQ_FACTOR = 16  # pixels per token side


@dataclass(frozen=True)
class HubPart:
    """One part to download: files of `repo_id` matching `files` go to ROOT/`dest`.

    files: glob patterns; each must match at least one file of the repo, except those in `optional`.
    weights: alternatives, first match wins (e.g. safetensors shards, else .bin shards).
    """

    name: str
    repo_id: str
    dest: str
    files: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    weights: tuple[tuple[str, ...], ...] = ()


def hub_parts(resolution: int, original: bool = False) -> list[HubPart]:
    """The parts `load_llamagen(resolution=...)` reads, as hub repos and file patterns.

    original: LlamaGen's own target checkpoint (peizesun/llamagen_t2i) instead of LANTERN's conversion.
    """
    check_resolution(resolution)
    stage = "" if resolution == 256 else "-2"
    if original:
        target = HubPart("target", "peizesun/llamagen_t2i", f"{resolution}/target", (ORIGINAL_TARGET[resolution],))
    else:
        target = HubPart(
            "target",
            f"jadohu/LlamaGen-T2I{stage}",
            f"{resolution}/target",
            ("config.json",),
            optional=("generation_config.json",),
            weights=(
                ("model.safetensors",),
                ("model-*.safetensors", "model.safetensors.index.json"),
                ("pytorch_model*.bin", "pytorch_model.bin.index.json"),
            ),
        )
    drafter = HubPart(
        "drafter",
        f"jadohu/llamagen{'2' if resolution == 512 else ''}_drafter",
        f"{resolution}/drafter",
        ("config.json",),
        weights=(("model.safetensors",), ("pytorch_model.bin",)),
    )
    vq = HubPart("vq", "peizesun/llamagen_t2i", ".", (VQ_FILE,))
    t5 = HubPart(
        "t5",
        "google/flan-t5-xl",
        T5_DIR,
        ("config.json", "spiece.model", "tokenizer_config.json"),
        optional=("tokenizer.json", "special_tokens_map.json"),
        weights=(
            ("model.safetensors",),
            ("model-*.safetensors", "model.safetensors.index.json"),
            ("pytorch_model*.bin", "pytorch_model.bin.index.json"),
        ),
    )
    return [target, drafter, vq, t5]


def check_resolution(resolution: int) -> int:
    if resolution not in RESOLUTIONS:
        raise ValueError(f"LlamaGen resolution must be one of {RESOLUTIONS} px, got {resolution!r}")
    return resolution


def original_checkpoint(folder: Path) -> Path | None:
    """LlamaGen's own `.pt` target checkpoint in `folder` when it has no converted `config.json`."""
    if (folder / "config.json").exists() or not folder.is_dir():
        return None
    found = sorted(folder.glob("t2i_*.pt")) or sorted(folder.glob("*.pt"))
    return found[0] if found else None


def target_resolution(folder: Path) -> int | None:
    """Pixels per side of the target in `folder` (from config.json's block_size, or the .pt file name)."""
    import json
    import math

    if (folder / "config.json").exists():
        tokens = json.loads((folder / "config.json").read_text()).get("block_size", 256)
        return math.isqrt(int(tokens)) * VQ_FACTOR
    checkpoint = original_checkpoint(folder)
    return None if checkpoint is None else resolution_from_name(checkpoint)


def resolution_from_name(path: Path) -> int | None:
    """256 or 512 when a LlamaGen checkpoint's file name ends with it (`t2i_XL_stage1_256.pt`), else None."""
    return next((r for r in RESOLUTIONS if Path(path).stem.endswith(f"_{r}")), None)


@dataclass(frozen=True)
class Parts:
    """Paths of one resolution's parts."""

    resolution: int
    target: Path
    drafter: Path
    t5: Path
    vq: Path


def _has_weights(folder: Path) -> bool:
    return any((folder / name).exists() for name in WEIGHT_FILES)


def missing_parts(parts: Parts) -> list[str]:
    """What `parts` lacks, as short relative names; [] when it can be loaded."""
    missing = []
    converted = (parts.target / "config.json").exists() and _has_weights(parts.target)
    if not (converted or original_checkpoint(parts.target)):
        missing.append("target config.json + weights (or LlamaGen's .pt)")
    if not ((parts.drafter / "config.json").exists() and _has_weights(parts.drafter)):
        missing.append("drafter config.json + weights")
    if not (parts.t5 / "config.json").exists():
        missing.append(f"{T5_DIR}/config.json")
    if not parts.vq.exists():
        missing.append(VQ_FILE)
    return missing


def _parts_in(root: Path) -> dict[int, Parts]:
    """Every resolution laid out under `root` (complete or not)."""
    shared = {"t5": root / T5_DIR, "vq": root / VQ_FILE}
    found = {}
    for resolution in RESOLUTIONS:
        sub = root / str(resolution)
        if sub.is_dir():
            found[resolution] = Parts(resolution, sub / "target", sub / "drafter", **shared)
    if (root / "target").is_dir():  # flat layout: one resolution, read from the target
        resolution = target_resolution(root / "target")
        if resolution is not None and resolution not in found:
            found[resolution] = Parts(resolution, root / "target", root / "drafter", **shared)
    return found


def llamagen_root(path: str | Path | None = None) -> Path | None:
    """`path`, else `$COOLSD_LLAMAGEN_DIR`, as a Path; None when neither is set."""
    path = path if path is not None else os.environ.get(ENV_VAR)
    return Path(path) if path else None


def available_resolutions(path: str | Path | None = None) -> list[int]:
    """Resolutions (pixels per side, ascending) whose every part is present under the LlamaGen folder.

    Args:
        path: the folder; default `$COOLSD_LLAMAGEN_DIR`. Unset or empty: [].
    """
    root = llamagen_root(path)
    if root is None:
        return []
    return sorted(r for r, parts in _parts_in(root).items() if not missing_parts(parts))


def parts_for(root: Path, resolution: int | None = None) -> Parts:
    """The parts of `resolution` (default: the lowest one present) under `root`; FileNotFoundError naming what lacks."""
    laid_out = _parts_in(root)
    if resolution is None:
        complete = [r for r, parts in sorted(laid_out.items()) if not missing_parts(parts)]
        resolution = complete[0] if complete else (min(laid_out) if laid_out else RESOLUTIONS[0])
    parts = laid_out.get(resolution)
    if parts is None:
        raise FileNotFoundError(
            f"{root} has no {resolution} px LlamaGen (expected {root / str(resolution)}/target and /drafter); "
            f"fetch it with: python -m coolsd.fetch llamagen --resolution {resolution} --dir {root}"
        )
    missing = missing_parts(parts)
    if missing:
        raise FileNotFoundError(f"{root} ({resolution} px) lacks {', '.join(missing)}")
    return parts
