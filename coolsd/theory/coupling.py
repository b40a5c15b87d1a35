"""What same noise costs a lossless test (`coolsd.decoding.noise`): the exponential race's agreement, exactly.

Under same noise a draft at a position is the race of q, argmin_y E_y / q_y, and the lossless coupled test accepts
it iff it is the race of p with the same E. With E_y ~ Exp(1) independent, both races pick x iff
E_y > E_x max(p_y / p_x, q_y / q_x) for every y != x; given E_x that has probability exp(-E_x sum_{y != x} m_y),
and over E_x ~ Exp(1) it is 1 / (1 + sum_{y != x} m_y). So

    P(race of q = race of p) = sum_x 1 / sum_y max(p_y / p_x, q_y / q_x)     (x over the common support)

which is at most the standard test's sum_x min(p_x, q_x) (any coupling of p and q agrees at most that often).
"""

from __future__ import annotations

import torch
from torch import Tensor


def race_agreement(p: Tensor, q: Tensor) -> Tensor:
    """P(race of q = race of p) under shared Exp(1) noise, (...) float64, for rows p, q (..., V) summing to 1
    (O(V^2) per row: small vocabularies, or a few rows)."""
    p, q = p.double(), q.double()
    both = (p > 0) & (q > 0)  # a token outside either support is never the common pick
    px = p.clamp_min(torch.finfo(p.dtype).tiny).unsqueeze(-1)  # (..., V, 1): x
    qx = q.clamp_min(torch.finfo(q.dtype).tiny).unsqueeze(-1)
    m = torch.maximum(p.unsqueeze(-2) / px, q.unsqueeze(-2) / qx)  # (..., V_x, V_y)
    return torch.where(both, 1.0 / m.sum(-1), torch.zeros_like(p)).sum(-1)


def standard_agreement(p: Tensor, q: Tensor) -> Tensor:
    """The standard lossless test's acceptance rate sum_x min(p_x, q_x) = 1 - TV(p, q), (...)."""
    return torch.minimum(p.double(), q.double()).sum(-1)
