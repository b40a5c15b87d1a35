"""The per-depth schedule rules (spec section 3, "Other schedules"): linear decay and custom, against the oracle."""

from __future__ import annotations

import math

import pytest
import torch
from test_rules import RuleContract

from coolsd.decoding.drafting import Chain
from coolsd.decoding.engine import DecodeConfig, run
from coolsd.decoding.rules import (
    CoolSDRule,
    CustomScheduleRule,
    EagleRule,
    LinearDecayRule,
    UniformRSDRule,
    g_star,
    lossless_residual,
    make_rule,
)
from coolsd.theory.oracle import exact, rule_step, sequence_probs

V, L = 8, 3  # contract batches (as tests/decoding/test_rules.py)
ORACLE = (3, 5, 3)  # tabular V, T, L of the whole-sequence checks (243 sequences; round 1 drafts all L depths)


def depths(n: int) -> torch.Tensor:
    return torch.arange(1, n + 1)


@pytest.fixture(scope="module")
def toy():
    from coolsd.theory.tabular import random_tables

    return random_tables(ORACLE[0], ORACLE[1], seed=3)


# ---------------------------------------------------------------- the shared contract
class TestLinearDecay(RuleContract):
    name = "linear-decay"

    @pytest.mark.parametrize("draft_len", [2, 3, 5, 8])
    @pytest.mark.parametrize("slope", [0.0, 0.3, 1.0])
    def test_closed_form_and_mean(self, draft_len, slope):
        rule = LinearDecayRule(delta=1.3, slope=slope)
        omega = rule.omega(depths(draft_len), draft_len)
        expected = [1.3 * (1 + slope * (draft_len + 1 - 2 * i) / (draft_len - 1)) for i in range(1, draft_len + 1)]
        torch.testing.assert_close(omega, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12)
        assert math.isclose(float(omega.mean()), 1.3, rel_tol=1e-12)
        assert math.isclose(float(omega[0]), 1.3 * (1 + slope)) and math.isclose(float(omega[-1]), 1.3 * (1 - slope),
                                                                                   abs_tol=1e-12)

    def test_one_draft_is_delta(self):
        assert float(LinearDecayRule(delta=1.7, slope=1.0).omega(depths(1), 1)) == 1.7

    def test_slope_zero_is_uniform(self, toy):
        target, drafter = toy
        linear = exact(target, drafter, LinearDecayRule(delta=1.8, slope=0.0), ORACLE[2])
        uniform = exact(target, drafter, UniformRSDRule(delta=1.8), ORACLE[2])
        torch.testing.assert_close(linear.dist, uniform.dist, rtol=0, atol=1e-12)
        assert math.isclose(linear.tau, uniform.tau, rel_tol=1e-12)

    def test_slope_one_last_depth_accepts_nothing_and_stays_exact(self, probs, gen):
        """omega_L = 0: the last draft is always rejected and G* = p there (zero step error)."""
        rule = LinearDecayRule(delta=1.0, slope=1.0)
        p, q = probs(V, generator=gen), probs(V, generator=gen)
        step = rule_step(rule, p, q, L, L)
        assert step.accept_rate == 0
        torch.testing.assert_close(step.kernel, p, rtol=0, atol=1e-12)

    def test_floor_at_one(self):
        omega = LinearDecayRule(delta=1.2, slope=0.9, floor_at_one=True).omega(depths(4), 4)
        assert (omega >= 1).all() and float(omega[0]) == pytest.approx(1.2 * 1.9)

    @pytest.mark.parametrize("kwargs, message", [
        ({"slope": 1.5}, "slope must be in [0, 1]"), ({"slope": -0.1}, "slope must be in [0, 1]"),
        ({"delta": 0.0}, "delta must be > 0"), ({"delta": math.inf}, "delta must be a finite number"),
        ({"delta": "2"}, "delta must be a number"), ({"floor_at_one": "yes"}, "floor_at_one must be true"),
    ])
    def test_bad_values(self, kwargs, message):
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            make_rule("linear-decay", **kwargs)


class TestCustomSchedule(RuleContract):
    name = "custom"

    def test_list_becomes_a_tuple(self):
        rule = make_rule("custom", omegas=[2, 1, 0.5])
        assert rule.omegas == (2.0, 1.0, 0.5) and rule == CustomScheduleRule((2.0, 1.0, 0.5))
        assert hash(rule) == hash(CustomScheduleRule((2.0, 1.0, 0.5)))

    def test_depths_beyond_the_list_reuse_the_last(self):
        omega = CustomScheduleRule((3.0, 0.5)).omega(depths(4), 4)
        assert omega.tolist() == [3.0, 0.5, 0.5, 0.5]

    def test_accept_uses_omega_per_depth(self, probs, gen):
        rule = CustomScheduleRule((4.0, 1.0, 0.25))
        p, q = probs(L, V, generator=gen), probs(L, V, generator=gen)
        a_all = rule.accept_all(p, q, depths(L), L)
        expected = (torch.tensor([4.0, 1.0, 0.25], dtype=torch.float64)[:, None] * p / q).clamp(max=1)
        torch.testing.assert_close(a_all, expected, rtol=0, atol=1e-14)
        r = rule.residual(p, q, torch.zeros(L, dtype=torch.long), depths(L), L)
        torch.testing.assert_close(r, g_star(p, q, expected), rtol=0, atol=1e-14)
        torch.testing.assert_close(r[:2], lossless_residual(p, q)[:2], rtol=0, atol=1e-12)  # omega >= 1: lossless
        assert not torch.allclose(r[2], lossless_residual(p[2], q[2]))  # omega < 1: G* differs

    def test_ones_are_eagle(self, toy):
        target, drafter = toy
        custom = exact(target, drafter, CustomScheduleRule((1.0, 1.0, 1.0)), ORACLE[2])
        eagle = exact(target, drafter, EagleRule(), ORACLE[2])
        torch.testing.assert_close(custom.dist, eagle.dist, rtol=0, atol=1e-12)
        assert custom.tv < 1e-9 and math.isclose(custom.tau, eagle.tau, rel_tol=1e-12)

    def test_cool_sd_schedule_reproduces_cool_sd(self, toy):
        target, drafter = toy
        cool = CoolSDRule(delta=2.0, nu=0.7)
        omegas = tuple(cool.omega(depths(ORACLE[2]), ORACLE[2]).tolist())
        a = exact(target, drafter, CustomScheduleRule(omegas), ORACLE[2])
        b = exact(target, drafter, cool, ORACLE[2])
        torch.testing.assert_close(a.dist, b.dist, rtol=0, atol=1e-12)
        assert math.isclose(a.bound, b.bound, rel_tol=1e-9)

    @pytest.mark.parametrize("omegas, message", [
        ((), "at least one number"), ((1.0, 0.0), "omega_2 must be > 0"), ((1.0, -2.0), "omega_2 must be > 0"),
        ((math.nan,), "omega_1 must be a finite number"), ("2,1", "must be a list of positive numbers"),
        (3.0, "must be a list of positive numbers"), ((1.0,) * 65, "at most 64 numbers"),
    ])
    def test_bad_values(self, omegas, message):
        with pytest.raises(ValueError, match=message):
            make_rule("custom", omegas=omegas)


# ---------------------------------------------------------------- exact facts on whole sequences
@pytest.mark.parametrize("rule", [
    CustomScheduleRule((1.0, 0.6, 0.2)), CustomScheduleRule((0.5,)), LinearDecayRule(delta=0.5, slope=1.0),
], ids=["custom-below-one", "custom-half", "linear-below-one"])
def test_omega_at_most_one_is_lossless_but_slower(toy, rule):
    """With G*, every schedule with omega_i <= 1 outputs P exactly; omega_i < 1 only costs acceptance."""
    target, drafter = toy
    out = exact(target, drafter, rule, ORACLE[2])
    assert out.tv < 1e-9 and out.bound < 1e-9
    torch.testing.assert_close(out.dist, sequence_probs(target), rtol=0, atol=1e-12)
    assert out.tau < exact(target, drafter, EagleRule(), ORACLE[2]).tau


@pytest.mark.parametrize("rule", [
    LinearDecayRule(delta=1.5, slope=0.8), LinearDecayRule(delta=3.0, slope=0.3), LinearDecayRule(delta=2.0, slope=1.0,
                                                                                                   floor_at_one=True),
    CustomScheduleRule((2.5, 1.0, 0.4)), CustomScheduleRule((0.5, 3.0)),
], ids=["linear-1.5-0.8", "linear-3-0.3", "linear-floored", "custom-falling", "custom-rising"])
def test_tv_within_bound_and_relaxed(toy, rule):
    target, drafter = toy
    out = exact(target, drafter, rule, ORACLE[2])
    assert out.dist.sum() == pytest.approx(1, abs=1e-12) and (out.dist >= 0).all()
    assert 0 < out.tv <= out.bound + 1e-12
    assert out.tau > 1


def test_floor_never_loses_acceptance(toy):
    target, drafter = toy
    plain = exact(target, drafter, LinearDecayRule(delta=1.2, slope=0.9), ORACLE[2])
    floored = exact(target, drafter, LinearDecayRule(delta=1.2, slope=0.9, floor_at_one=True), ORACLE[2])
    assert floored.tau > plain.tau


@pytest.mark.statistical
@pytest.mark.parametrize("rule", [LinearDecayRule(delta=1.5, slope=0.8), CustomScheduleRule((2.5, 1.0, 0.4))],
                         ids=["linear-decay", "custom"])
def test_engine_samples_follow_the_oracle(toy, distribution_test, rule):
    """The sampling engine's whole sequences match the oracle's exact distribution (chi-square, alpha 1e-3)."""
    target, drafter = toy
    probs = exact(target, drafter, rule, ORACLE[2]).dist
    samples = [run(target, drafter, rule, cond=None, num_tokens=ORACLE[1], config=DecodeConfig(Chain(ORACLE[2])),
                   seed=s).tokens
               for s in range(3000)]
    stat, critical, df = distribution_test(samples, probs, ORACLE[0])
    assert stat < critical, f"chi2 = {stat:.1f} > {critical:.1f} (df {df}) against the oracle"
    stat_p, critical_p, _ = distribution_test(samples, sequence_probs(target), ORACLE[0])
    assert stat_p > critical_p  # the test has power: the same draws are far from P itself
