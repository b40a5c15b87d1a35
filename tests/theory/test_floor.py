"""COOL-SD floored at 1 (the default) against Eagle-1, exactly (spec section 3, revised; issue 17 part 1).

Theorem (prefix-independent tables): when P(. | prefix) = p and Q(. | prefix) = q for every prefix, a draft at
depth i is drawn from q whatever happened before, so its acceptance is sum_x min(q(x), omega_i p(x)) >=
sum_x min(q(x), p(x)) when omega_i >= 1: every step accepts at least as much as Eagle-1, hence tau too.
On prefix-dependent tables this is not guaranteed (a relaxed step changes which prefixes later steps see):
`coolsd.theory.annealing.floor_vs_eagle` reports it there, nothing asserts it.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from coolsd.decoding import variants
from coolsd.decoding.rules import CoolSDRule, CustomScheduleRule, EagleRule, LinearDecayRule, UniformRSDRule
from coolsd.theory import annealing
from coolsd.theory.oracle import exact
from coolsd.theory.tabular import TabularDrafter, TabularLM

V, T, L = 4, 5, 3


def constant_tables(seed: int, sharpness: float = 1.5) -> tuple[TabularLM, TabularDrafter]:
    """One p and one q for every prefix (the tables do not depend on the prefix)."""
    gen = torch.Generator().manual_seed(seed)
    p = (sharpness * torch.randn(V, generator=gen, dtype=torch.float64)).softmax(-1)
    q = (sharpness * torch.randn(V, generator=gen, dtype=torch.float64)).softmax(-1)
    prefixes = [pre for n in range(T) for pre in itertools.product(range(V), repeat=n)]
    codebook = torch.randn(V, 2, generator=gen, dtype=torch.float64)
    return (TabularLM({pre: p for pre in prefixes}, V, T, codebook),
            TabularDrafter({pre: q for pre in prefixes}, V, T, codebook))


SCHEDULES = [CoolSDRule(delta=1.1), CoolSDRule(delta=2.0), CoolSDRule(delta=1.1, nu=2.0), CoolSDRule(delta=0.5),
             UniformRSDRule(delta=1.0), UniformRSDRule(delta=3.0), CustomScheduleRule((1.0, 4.0, 1.0)),
             LinearDecayRule(delta=1.2, slope=1.0, floor_at_one=True)]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("rule", SCHEDULES, ids=lambda r: repr(r)[:40])
def test_every_omega_at_least_one_accepts_at_least_eagle_at_every_step(seed, rule):
    target, drafter = constant_tables(seed)
    omega = rule.omega(torch.arange(1, L + 1), L)
    assert (omega >= 1).all()  # the premise: CoolSDRule floors at 1 by default
    mine, eagle = exact(target, drafter, rule, L), exact(target, drafter, EagleRule(), L)
    for i in range(L):  # acceptance per test at depth i (the chance a draft there is kept)
        assert mine.depth_accepts[i] / mine.depth_tests[i] >= eagle.depth_accepts[i] / eagle.depth_tests[i] - 1e-12
    assert mine.tau >= eagle.tau - 1e-12


def test_the_unclipped_schedule_can_accept_less_than_eagle():
    """The counterpart that makes the floor matter: at delta 1.1 the unclipped schedule's late omega_i < 1."""
    rule = variants.build("cool-sd-unclipped", {"delta": 1.1})
    assert rule.omega(torch.tensor(L), L) < 1
    slower = [exact(*constant_tables(s), rule, L).tau < exact(*constant_tables(s), EagleRule(), L).tau
              for s in range(4)]
    assert any(slower)


def test_floor_vs_eagle_reports_prefix_dependent_models():
    report = annealing.floor_vs_eagle(n_models=2, deltas=(1.1, 2.0))
    assert report["n"] == 4 and 0 <= report["floored_at_least_eagle"] <= 4
    assert 0 <= report["unclipped_at_least_eagle"] <= 4 and len(report["rows"]) == 4
    text = annealing.format_floor_vs_eagle(report)  # what the docs quote, per delta
    gap = [r["floored_tv"] - r["unclipped_tv"] for r in report["rows"] if r["delta"] == 2.0]
    tv = sum(r["floored_tv"] for r in report["rows"] if r["delta"] == 2.0) / 2
    assert f"floored {tv:.4f}" in text and f"(floored - unclipped in [{min(gap):+.4f}, {max(gap):+.4f}])" in text
