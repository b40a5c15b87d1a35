"""The accept/reject maths every rule shares, as functions of tensors (spec section 3): p, q (..., V) target / draft
probabilities, x (...) draft ids."""

from __future__ import annotations

import torch
from torch import Tensor


def pick(v: Tensor, x: Tensor) -> Tensor:
    """v (..., V), x (...) -> v[..., x] (...)."""
    return v.gather(-1, x.unsqueeze(-1)).squeeze(-1)


def normalise(v: Tensor, fallback: Tensor) -> Tensor:
    """Norm(v) = v / sum(v) per row; rows whose mass is only rounding noise fall back to `fallback` (p).
    v, fallback: (..., V); one row (V,) (a chain round's residual) has its total read on the host."""
    tiny = 16 * torch.finfo(v.dtype).eps
    if v.dim() == 1:
        total = float(v.sum())
        return v / total if total > tiny else fallback
    total = v.sum(-1, keepdim=True)
    return torch.where(total > tiny, v / total.clamp_min(tiny), fallback)


def ratio_accept(p: Tensor, q: Tensor, omega: Tensor | float) -> Tensor:
    """min(1, omega * p / q) elementwise, (..., V); 1 where q == 0 (such tokens are never drafted)."""
    r = omega * p / q.clamp_min(torch.finfo(q.dtype).tiny)
    return torch.where(q > 0, r.clamp(max=1.0), torch.ones_like(r))


def g_star(p: Tensor, q: Tensor, a_all: Tensor) -> Tensor:
    """Optimal residual G* = Norm([p - q * a]_+) for the acceptance a (..., V) of every token."""
    return normalise((p - q * a_all).clamp_min(0), p)


def lossless_residual(p: Tensor, q: Tensor) -> Tensor:
    """Norm([p - q]_+): the residual of exact speculative sampling."""
    return normalise((p - q).clamp_min(0), p)
