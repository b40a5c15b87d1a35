"""Logits processing in one place (spec section 1): CFG mix -> temperature -> top-k -> top-p -> softmax; and the one
sampler every decoder draws its tokens with (`inverse_cdf`).

The SAME `SamplingConfig` is applied to target and draft logits, and every rule uses the
processed distributions p and q. Temperature 0 means greedy: the processed distribution is the
one-hot vector of the (CFG-mixed) argmax, so every rule then commits the target's greedy token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from coolsd.util.checks import check_int, check_number


@dataclass(frozen=True)
class SamplingConfig:
    """How raw logits become the processed distributions p (target) and q (draft).

    cfg_scale: s in uncond + s * (cond - uncond); 1.0 disables guidance (models run one row).
    temperature: logits / temperature; 0.0 = greedy (one-hot argmax).
    top_k: keep the k largest logits; 0 disables.
    top_p: keep the smallest set of tokens whose probability reaches top_p; 1.0 disables.
    """

    cfg_scale: float = 1.0
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        check_number("cfg_scale", self.cfg_scale)
        check_number("temperature", self.temperature, 0, bounds=">= 0 (0 = greedy)")
        check_number("top_p", self.top_p, 0, 1, low_open=True)
        object.__setattr__(self, "top_k", check_int("top_k", self.top_k, 0, bounds=">= 0 (0 = off)"))

    @property
    def guidance(self) -> bool:
        """True when models must run the (cond, uncond) pair."""
        return self.cfg_scale != 1.0

    @property
    def rows(self) -> int:
        """Rows a model runs per sequence: 2 (condition, null) under guidance, else 1."""
        return 2 if self.guidance else 1

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def mix(self, logits: Tensor) -> Tensor:
        """(G, ..., V) raw logits -> (..., V) guided logits (G = 1 passes through)."""
        if logits.shape[0] == 1:
            return logits[0]
        cond, uncond = logits[0], logits[1]
        return uncond + self.cfg_scale * (cond - uncond)

    def probs(self, logits: Tensor) -> Tensor:
        """(G, ..., V) raw logits -> (..., V) processed probabilities, rows sum to 1."""
        z = self.mix(logits)
        if self.greedy:
            return torch.nn.functional.one_hot(z.argmax(-1), z.shape[-1]).to(z.dtype)
        if self.temperature != 1:  # z / 1 is z, bit for bit: one op a row saved
            z = z / self.temperature
        if 0 < self.top_k < z.shape[-1]:
            kth = torch.topk(z, self.top_k, dim=-1).values[..., -1:]
            z = z.masked_fill(z < kth, -math.inf)
        if self.top_p < 1:
            sorted_z, order = torch.sort(z, dim=-1, descending=True)
            sorted_p = sorted_z.softmax(-1)
            mass_before = sorted_p.cumsum(-1) - sorted_p  # mass of strictly better tokens
            drop_sorted = mass_before >= self.top_p  # the first token is always kept
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            z = z.masked_fill(drop, -math.inf)
        return z.softmax(-1)


def inverse_cdf(probs: Tensor, u: float | Tensor) -> Tensor:
    """Token ids drawn from the rows of `probs` by the inverse CDF: the first id whose cumulative mass exceeds
    u * (the row's total).

    probs: (..., V) non-negative rows (need not sum to 1); u: uniforms in [0, 1), a host float (every row the same
    u: one row, in practice) or (..., 1) on probs' device, one per row, float64 as `torch.rand` makes them.
    Returns (..., 1) int64 on probs' device, never synchronising with the host.
    P(id = y) = probs[y] / total: the cumulative mass rises by probs[y] at y, so an id of probability 0 is never
    picked; and u * total rounds below total for every u < 1 that `torch.rand` makes (multiples of the dtype's
    epsilon / 2), so the search never runs past the last id.
    """
    cdf = probs.cumsum(-1)
    return torch.searchsorted(cdf, cdf[..., -1:] * u, right=True)
