"""Shared test fixtures: seeded generators, random distributions, tiny tabular models, one rule of each kind."""

from __future__ import annotations

import pytest
import torch

from coolsd.neighbours import neighbour_table
from coolsd.rules import LanternPPRule, Rule, make_rule
from coolsd.tabular import random_tables

# Tests use tiny tensors on a small shared CPU: intra-op threads only add contention (about 10x slower).
torch.set_num_threads(1)

# One non-trivial configuration per registered rule (a new rule adds its line here).
RULE_KWARGS: dict[str, dict] = {
    "eagle-1": {},
    "uniform-rsd": {"delta": 1.7},
    "cool-sd": {"delta": 2.0, "nu": 0.7},  # omega < 1 at depth 3 of L = 3
    "lantern++": {"k": 2, "lam": 3.0},
    "lantern": {"k": 2, "delta": 0.2},
}


def random_probs(*shape: int, generator: torch.Generator, zeros: float = 0.0, sharpness: float = 1.5) -> torch.Tensor:
    """(..., V) float64 rows on the simplex; a fraction `zeros` of entries set to 0 (the row argmax is kept)."""
    z = sharpness * torch.randn(*shape, generator=generator, dtype=torch.float64)
    if zeros > 0:
        drop = torch.rand(*shape, generator=generator, dtype=torch.float64) < zeros
        drop &= z < z.max(-1, keepdim=True).values
        z = z.masked_fill(drop, -torch.inf)
    return z.softmax(-1)


@pytest.fixture
def gen() -> torch.Generator:
    """A seeded CPU generator (seed 0); tests that need several streams reseed it."""
    return torch.Generator().manual_seed(0)


@pytest.fixture
def probs():
    """random_probs(*shape, generator=..., zeros=..., sharpness=...) as a fixture."""
    return random_probs


@pytest.fixture
def tabular():
    """tabular(vocab_size, num_tokens, seed, **kw) -> (TabularLM P, TabularDrafter Q), see coolsd.tabular."""
    return random_tables


@pytest.fixture
def tiny_models():
    """V = 4, T = 3 tabular target and drafter (64 sequences), seed 0."""
    return random_tables(4, 3, seed=0)


@pytest.fixture
def build_rule():
    """build_rule(name, codebook=None, **overrides) -> Rule: RULE_KWARGS[name] with overrides.

    LANTERN rules get a neighbour table from `codebook` (V, C); without one a random 2-D codebook of
    8 codes is used, so the rule works for V = 8.
    """

    def build(name: str, codebook: torch.Tensor | None = None, **overrides) -> Rule:
        if name not in RULE_KWARGS:
            raise KeyError(f"rule {name!r} is registered but tests/conftest.py: RULE_KWARGS has no entry for it")
        rule = make_rule(name, **(RULE_KWARGS[name] | overrides))
        if isinstance(rule, LanternPPRule):
            if codebook is None:
                codebook = torch.randn(8, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
            rule = rule.with_neighbours(neighbour_table(codebook))
        return rule

    return build
