"""coolsd.theory.annealing and the oracle's per-depth numbers: exact identities, and the report's plumbing."""

from __future__ import annotations

import json
import math

import pytest
import torch

from coolsd.decoding.rules import CoolSDRule, CustomScheduleRule, EagleRule, LinearDecayRule, UniformRSDRule
from coolsd.theory import annealing
from coolsd.theory.oracle import exact, rule_step, sequence_probs

V, T, L = 3, 5, 3  # 243 sequences; round 1 drafts all L depths


@pytest.fixture(scope="module")
def close_models():
    return annealing.mixed_tables(V, T, seed=1, eps=0.2)


def test_mixed_tables():
    target, drafter = annealing.mixed_tables(V, T, seed=2, eps=0.0)
    for prefix, p in target.table.items():
        torch.testing.assert_close(drafter.table[prefix], p, rtol=0, atol=1e-15)
    _, far = annealing.mixed_tables(V, T, seed=2, eps=0.7)
    for prefix, q in far.table.items():
        assert math.isclose(float(q.sum()), 1.0, abs_tol=1e-12) and not torch.allclose(q, target.table[prefix])
    with pytest.raises(ValueError, match=r"eps must be in \[0, 1\]"):
        annealing.mixed_tables(V, T, seed=0, eps=1.5)


@pytest.mark.parametrize("rule", [EagleRule(), CoolSDRule(delta=2.0), LinearDecayRule(delta=1.5, slope=1.0),
                                  CustomScheduleRule((3.0, 0.5, 1.2))], ids=lambda r: r.name)
def test_per_depth_numbers_add_up(close_models, rule):
    """sum of the per-depth bound = bound; T = E[rounds] + E[accepted drafts] (a round commits n + 1 tokens)."""
    target, drafter = close_models
    out = exact(target, drafter, rule, L)
    assert len(out.depth_tests) == len(out.depth_accepts) == len(out.depth_bound) == L
    assert math.isclose(sum(out.depth_bound), out.bound, rel_tol=1e-12, abs_tol=1e-15)
    assert math.isclose(out.expected_rounds + sum(out.depth_accepts), T, rel_tol=1e-12)
    for i in range(L):
        assert 0 <= out.depth_accepts[i] <= out.depth_tests[i] + 1e-12
    for i in range(1, L):  # reaching depth i + 1 needs an accepted draft at depth i
        assert out.depth_tests[i] <= out.depth_accepts[i - 1] + 1e-12


def test_target_probs_argument_changes_nothing(close_models):
    target, drafter = close_models
    rule = CoolSDRule(delta=1.5)
    a, b = exact(target, drafter, rule, L), exact(target, drafter, rule, L, sequence_probs(target))
    assert a.tv == b.tv and a.tau == b.tau and torch.equal(a.dist, b.dist)


@pytest.mark.parametrize("omega", [1.0, 1.3, 2.0, 5.0])
def test_step_error_is_the_acceptance_gained_over_eagle(probs, gen, omega):
    """With G* and omega >= 1: step TV = beta(omega) - beta(1), the identity behind the floored schedule's win."""
    for _ in range(5):
        p, q = probs(6, generator=gen), probs(6, generator=gen)
        step = rule_step(UniformRSDRule(delta=omega), p, q, 1, 1)
        eagle = rule_step(EagleRule(), p, q, 1, 1)
        assert math.isclose(step.tv, step.accept_rate - eagle.accept_rate, abs_tol=1e-12)


def test_floor_changes_speed_not_the_output(close_models):
    """Flooring moves omega_i < 1 up to 1: both steps are exact with G*, so the output is the same, only faster."""
    target, drafter = close_models
    plain = exact(target, drafter, CoolSDRule(delta=1.5, floor_at_one=False), L)
    floored = exact(target, drafter, CoolSDRule(delta=1.5, floor_at_one=True), L)
    assert CoolSDRule(delta=1.5, floor_at_one=False).omega(torch.tensor(L), L) < 1  # the comparison is not empty
    torch.testing.assert_close(plain.dist, floored.dist, rtol=0, atol=1e-12)
    assert math.isclose(plain.bound, floored.bound, rel_tol=1e-12) and floored.tau > plain.tau


@pytest.mark.parametrize("kind, kwargs, expected", [
    ("exponential", {"delta": 1.5, "nu": 0.7}, CoolSDRule(delta=1.5, nu=0.7)),  # floored, the default
    ("exponential", {"delta": 1.5, "floor_at_one": False}, CoolSDRule(delta=1.5, floor_at_one=False)),
    ("linear", {"delta": 2.0, "slope": 0.3}, LinearDecayRule(delta=2.0, slope=0.3)),  # not floored by default
    ("linear", {"delta": 2.0, "slope": 0.3, "floor_at_one": True}, LinearDecayRule(delta=2.0, slope=0.3,
                                                                                   floor_at_one=True)),
    ("uniform", {"delta": 0.8}, UniformRSDRule(delta=0.8)),
    ("uniform", {"delta": 0.8, "floor_at_one": True}, UniformRSDRule(delta=1.0)),
    ("custom", {"omegas": [2, 1]}, CustomScheduleRule((2.0, 1.0))),
])
def test_schedule_rule(kind, kwargs, expected):
    assert annealing.schedule_rule(kind, **kwargs) == expected


@pytest.mark.parametrize("kind, kwargs, message", [
    ("spiral", {}, "unknown schedule 'spiral'"), ("exponential", {"nu": -1.0}, "nu must be >= 0"),
    ("linear", {"slope": 2.0}, "slope must be in"), ("custom", {"omegas": [1, 0]}, "omega_2 must be > 0"),
])
def test_schedule_rule_errors(kind, kwargs, message):
    with pytest.raises(ValueError, match=message):
        annealing.schedule_rule(kind, **kwargs)


@pytest.mark.parametrize("drafts", list(annealing.DRAFTS))
def test_explore_matches_the_twin(drafts):
    rule = CoolSDRule(delta=2.0, floor_at_one=False)  # omega_3 < 1: the explorer says so
    out = annealing.explore(rule, drafts=drafts, vocab_size=V, num_tokens=T, draft_len=L, iters=40)
    json.dumps(out)
    s, twin = out["schedule"], out["twin"]
    assert twin is not None and abs(twin["tau"] - s["tau"]) < 1e-8
    assert twin["omega"] == [twin["delta"]] * L
    assert out["below_one"] == [i + 1 for i, w in enumerate(s["omega"]) if w < 1] == [3]
    assert s["tv"] <= s["bound"] + 1e-12 and out["eagle"]["tv"] < 1e-9


def test_explore_says_when_no_twin_exists():
    """A schedule slower than any UniformRSD in the bracket (omega tiny everywhere) has no twin, and says why."""
    out = annealing.explore(CustomScheduleRule((0.001,)), vocab_size=V, num_tokens=T, draft_len=L)
    assert out["twin"] is None and "no uniform schedule reaches" in out["twin_note"]
    with pytest.raises(ValueError, match="unknown drafts"):
        annealing.explore(EagleRule(), drafts="nearby")


def test_compare_schedules_plumbing():
    """Counts and means are consistent (the verdict itself is reported, never asserted: spec section 3)."""
    report = annealing.compare_schedules(n_close=1, n_far=1, deltas=(1.5,), vocab_size=V, num_tokens=T,
                                         close_eps=(0.2,), far_eps=(0.7,), iters=40)
    json.dumps(report)
    assert [(r["variant"], r["drafts"]) for r in report["rows"]] == [
        ("floored", "close"), ("floored", "far"), ("unclipped", "close"), ("unclipped", "far")]
    for r in report["rows"]:
        assert r["n"] + r["unmatched"] == 1 and 0 <= r["wins_tv"] <= r["n"] and 0 <= r["wins_bound"] <= r["n"]
        if r["n"]:
            assert r["mean_tv"] <= r["mean_bound"] + 1e-12
            assert math.isclose(sum(r["depth_bound"]), r["mean_bound"], rel_tol=1e-9)
    floored, unclipped = report["rows"][0], report["rows"][2]
    assert math.isclose(floored["mean_tv"], unclipped["mean_tv"], rel_tol=1e-9)  # same output (see above)
    assert floored["mean_tau"] > unclipped["mean_tau"]
    text = annealing.format_schedules(report)
    assert "| floored | close |" in text and "| unclipped | far |" in text
