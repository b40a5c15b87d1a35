"""LANTERN++ latent neighbourhoods (spec section 3): for each code, the other codes by distance."""

from __future__ import annotations

import torch
from torch import Tensor


def neighbour_table(codebook: Tensor, k_max: int = 64, normalise: bool = False, chunk: int = 1024) -> Tensor:
    """Nearest other codes of every code, nearest first.

    Args:
        codebook: (V, C) float code vectors as the tokenizer uses them.
        k_max: neighbours kept per code (the table has k_max + 1 columns, as LANTERN reads k+1).
        normalise: L2-normalise codes first (cosine ranking; LlamaGen's quantiser uses unit codes).
        chunk: rows per distance block, so a 16384-code book never needs a V x V matrix.
    Returns:
        (V, min(k_max + 1, V - 1)) int64 code ids; row c never contains c.
    """
    codes = codebook.detach().float()
    if normalise:
        codes = torch.nn.functional.normalize(codes, dim=-1)
    n_keep = min(k_max + 1, codes.shape[0] - 1)
    rows = []
    for start in range(0, codes.shape[0], chunk):
        d = torch.cdist(codes[start : start + chunk], codes)  # (chunk, V)
        idx = torch.arange(start, start + d.shape[0])
        d[torch.arange(d.shape[0]), idx] = float("inf")  # a code is not its own neighbour
        # stable ordering on ties: sort by (distance, code id)
        rows.append(torch.sort(d, dim=1, stable=True).indices[:, :n_keep])
    return torch.cat(rows)
