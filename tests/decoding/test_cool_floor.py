"""The floored COOL-SD schedule, exactly (issue 27): omega_i = max(1, delta exp(-nu i - mu)), mu mean-normalised over
the round's L depths BEFORE the floor, and what the floor does to the acceptance and the residual.

Expected values are computed here with `math` from the formula of docs/rules-and-theory.md (spec section 3,
revised); every other test of the floor compares the rule with itself (floored == unclipped.clamp_min(1)).
"""

from __future__ import annotations

import math

import pytest
import torch

from coolsd.decoding.drafting import Chain
from coolsd.decoding.engine import DecodeConfig, generate
from coolsd.decoding.rules import CoolSDRule, CustomScheduleRule, EagleRule, LinearDecayRule, UniformRSDRule
from coolsd.theory import annealing
from coolsd.theory.tabular import random_tables


def schedule(delta: float, nu: float, L: int, floor: bool = True, mu: float | None = None) -> list[float]:
    if mu is None:
        mu = math.log(sum(math.exp(-nu * i) for i in range(1, L + 1)) / L)
    w = [delta * math.exp(-nu * i - mu) for i in range(1, L + 1)]
    return [max(1.0, x) for x in w] if floor else w


@pytest.mark.parametrize("delta, nu, L", [(1.1, 0.7, 3), (2.0, 0.7, 3), (1.5, 0.3, 5), (0.5, 0.7, 1), (3.0, 2.0, 1),
                                          (1.2, 1.0, 2), (0.9, 0.5, 4)])
def test_floored_omega_by_hand(delta, nu, L):
    depth = torch.arange(1, L + 1)
    floored = CoolSDRule(delta=delta, nu=nu).omega(depth, L).tolist()
    unclipped = CoolSDRule(delta=delta, nu=nu, floor_at_one=False).omega(depth, L).tolist()
    assert floored == pytest.approx(schedule(delta, nu, L), rel=1e-14, abs=0)
    assert unclipped == pytest.approx(schedule(delta, nu, L, floor=False), rel=1e-14, abs=0)
    assert sum(unclipped) / L == pytest.approx(delta, rel=1e-12)  # mu normalises the schedule before the floor


def test_the_three_cases_at_delta_1_1():
    """delta 1.1, nu 0.7, L = 3 (the paper's delta): omega_1 > 1 kept, omega_2 and omega_3 < 1 floored to 1."""
    raw = schedule(1.1, 0.7, 3, floor=False)
    assert raw[0] > 1 > raw[1] > raw[2]
    assert CoolSDRule(delta=1.1).omega(torch.arange(1, 4), 3).tolist() == [pytest.approx(raw[0], rel=1e-14), 1.0, 1.0]
    assert CoolSDRule(delta=0.5).omega(torch.tensor([1]), 1).tolist() == [1.0]  # L = 1: omega_1 = max(1, delta)
    assert CoolSDRule(delta=1.0, nu=0.0).omega(torch.arange(1, 4), 3).tolist() == [1.0, 1.0, 1.0]


def test_explicit_mu_and_other_shapes_of_depth():
    w = CoolSDRule(delta=2.0, nu=0.5, mu=0.75).omega(torch.tensor([[1, 2], [3, 4]]), 4)
    assert w.shape == (2, 2) and w.dtype == torch.float64
    assert w.flatten().tolist() == pytest.approx(schedule(2.0, 0.5, 4, mu=0.75), rel=1e-14, abs=0)


def test_a_floored_depth_accepts_and_resamples_exactly_as_eagle(probs, gen):
    """Where delta exp(-nu i - mu) < 1 the floored rule is Eagle-1 there: a = min(1, p/q), residual Norm([p - q]+);
    where it is above 1, a = min(1, omega p / q)."""
    L, V = 3, 6
    p, q = probs(L, V, generator=gen), probs(L, V, generator=gen)
    depth, rule = torch.arange(1, L + 1), CoolSDRule(delta=1.1, nu=0.7)
    x = torch.tensor([0, 3, 5])
    a, eagle = rule.accept_all(p, q, depth, L), EagleRule().accept_all(p, q, depth, L)
    w1 = schedule(1.1, 0.7, L)[0]
    torch.testing.assert_close(a[0], (w1 * p[0] / q[0]).clamp(max=1), rtol=1e-14, atol=0)
    torch.testing.assert_close(a[1:], eagle[1:], rtol=0, atol=0)
    torch.testing.assert_close(rule.residual(p, q, x, depth, L)[1:], EagleRule().residual(p, q, x, depth, L)[1:],
                               rtol=1e-12, atol=1e-15)
    unclipped = CoolSDRule(delta=1.1, nu=0.7, floor_at_one=False).accept_all(p, q, depth, L)
    assert (unclipped[1:] <= a[1:]).all() and (unclipped[1:] < a[1:]).any()  # the floor only adds acceptance


def test_a_chain_decode_reports_the_floored_schedule_of_the_configured_L():
    L, T = 3, 7
    target, drafter = random_tables(4, T, seed=2)
    expected = schedule(1.1, 0.7, L)
    seen = set()
    for seed in range(6):
        for e in generate(target.fork(), drafter.fork(), CoolSDRule(delta=1.1), cond=None, num_tokens=T,
                          config=DecodeConfig(Chain(L)), seed=seed):
            n = e.n_drafted  # the last rounds draft fewer: the first n values of L's schedule
            assert e.omega.tolist() == pytest.approx(expected[:n], rel=1e-14, abs=0)
            seen.add(n)
    assert seen == {0, 1, 2, 3}  # also rounds cut short by the image's end


@pytest.mark.parametrize("kind, kwargs, expected", [
    ("exponential", {"delta": 1.1, "floor_at_one": True}, CoolSDRule(delta=1.1)),
    ("exponential", {"delta": 1.1, "floor_at_one": None}, CoolSDRule(delta=1.1)),
    ("uniform", {"delta": 1.5, "floor_at_one": True}, UniformRSDRule(delta=1.5)),  # above 1: kept
    ("uniform", {"delta": 1.0, "floor_at_one": True}, UniformRSDRule(delta=1.0)),
    ("uniform", {"delta": 0.8, "floor_at_one": False}, UniformRSDRule(delta=0.8)),
    ("custom", {"omegas": [2, 0.5], "floor_at_one": True}, CustomScheduleRule((2.0, 0.5), floor_at_one=True)),
    ("custom", {"omegas": [2, 0.5], "floor_at_one": False}, CustomScheduleRule((2.0, 0.5))),
    ("linear", {"delta": 1.0, "slope": 0.5, "floor_at_one": False}, LinearDecayRule(delta=1.0, slope=0.5)),
])
def test_schedule_family_floors(kind, kwargs, expected):
    assert annealing.schedule_rule(kind, **kwargs) == expected
