"""Static shapes for the GPU path: pad a call of n new rows to a fixed block size, with masked padding.

Shared by every model with a static path (the embedded Llama's `LayerStack`, LlamaGen). A padded
row is written to a cache slot past the last real one and sees only slot 0; no real row sees a
padded slot, and the caller's length counts real rows only, so padding changes nothing that is kept.
"""

from __future__ import annotations

import torch
from torch import Tensor

STATIC_BLOCKS = (1, 2, 4, 8, 16, 32, 64)  # (choice) block sizes of the static path: few shapes, <= 2x padding


def pick_block(blocks: tuple[int, ...], n: int, start: int, slots: int) -> int | None:
    """The smallest static block size >= n that fits after `start` in `slots` cache slots, or None (eager)."""
    return next((b for b in blocks if b >= n and start + b <= slots), None)


def pad_block(x: Tensor, positions: Tensor, mask: Tensor | None, start: int, block: int, slots: int,
              pad_position: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Pad a call of n new rows to a static block of N rows written at slots [start, start + N).

    x (G, n, D) inputs; positions (n,); mask (n, start + n) bool or None (causal over every old slot).
    Returns x (G, N, D) with zero rows appended, positions (N,) (`pad_position` for padded rows),
    slots (N,) int64, and mask (N, slots): real rows see what `mask` says and never a padded slot;
    padded rows see slot 0 only, so their softmax is finite and their outputs are thrown away.
    """
    g, n, d = x.shape
    dev = x.device
    full = torch.zeros(block, slots, dtype=torch.bool, device=dev)
    if mask is None:
        full[:n, :start] = True
        full[:n, start : start + n] = torch.ones(n, n, dtype=torch.bool, device=dev).tril()
    else:
        full[:n, : start + n] = mask
    full[n:, 0] = True
    if block > n:
        x = torch.cat([x, x.new_zeros(g, block - n, d)], dim=1)
        positions = torch.cat([positions, positions.new_full((block - n,), pad_position)])
    return x, positions, torch.arange(start, start + block, device=dev), full
