"""The rule knobs (coolsd.decoding.knobs): RuleKnobs' defaults are the rule dataclasses', each knob reaches the rule
field it names and no other rule's, and the one omega-list grammar."""

from __future__ import annotations

import dataclasses

import pytest

from coolsd.decoding.knobs import RuleKnobs, format_omegas, parse_omegas
from coolsd.decoding.rules import (
    RULES,
    CoolSDRule,
    CustomScheduleRule,
    LanternPPRule,
    LanternRule,
    LinearDecayRule,
    UniformRSDRule,
)


def test_defaults_are_the_rule_dataclasses():
    cool, lantern, custom = CoolSDRule(), LanternPPRule(), CustomScheduleRule()
    k = RuleKnobs()
    assert (k.delta, k.nu, k.mean_omega) == (cool.delta, cool.nu, cool.mu is None)
    assert (k.lantern_k, k.lantern_lambda, k.lantern_delta) == (lantern.k, lantern.lam, LanternRule().delta)
    assert (k.uniform_delta, k.linear_delta, k.linear_slope) == (UniformRSDRule().delta, LinearDecayRule().delta,
                                                                 LinearDecayRule().slope)
    assert parse_omegas(k.custom_omegas) == custom.omegas
    for slug, rule in RULES.items():  # every rule at the default knobs is the rule at its defaults
        assert rule(**k.options(slug)) == rule(), slug


def test_each_knob_sets_its_rule_field_and_no_other_rule():
    k = RuleKnobs(delta=3.0, nu=0.2, mu=-0.5, mean_omega=False, lantern_k=3, lantern_lambda=7.0, uniform_delta=1.5,
                  linear_delta=2.5, linear_slope=0.25, custom_omegas="4 2 1", lantern_delta=0.4)
    assert k.options("cool-sd") == {"delta": 3.0, "nu": 0.2, "mu": -0.5}
    assert k.options("lantern++") == {"k": 3, "lam": 7.0}
    assert k.options("lantern") == {"k": 3, "delta": 0.4}  # LANTERN's absolute budget, not LANTERN++'s lambda
    assert k.options("uniform-rsd") == {"delta": 1.5}
    assert k.options("linear-decay") == {"delta": 2.5, "slope": 0.25}
    assert k.options("custom") == {"omegas": (4.0, 2.0, 1.0)}
    assert k.options("eagle-1") == {} and k.options(None) == {}


def test_mean_omega_sets_mu_to_none_and_a_bad_list_stops_only_the_custom_rule():
    k = RuleKnobs(mu=-0.5, mean_omega=True, custom_omegas="2, x")
    assert k.options("cool-sd")["mu"] is None
    with pytest.raises(ValueError, match="'x' is not a number"):
        k.options("custom")


def test_knobs_field_order_is_the_race_argument_order():
    names = [f.name for f in dataclasses.fields(RuleKnobs)]
    assert names[:10] == ["delta", "nu", "mu", "mean_omega", "lantern_k", "lantern_lambda", "uniform_delta",
                          "linear_delta", "linear_slope", "custom_omegas"]


@pytest.mark.parametrize("text", ["2 1 0.5", "2, 1, 0.5", "2,1,0.5", "2; 1; 0.5", " 2 ,1\t0.5 ", [2, 1, 0.5],
                                  (2.0, "1", 0.5)])
def test_one_omega_grammar(text):
    assert parse_omegas(text) == (2.0, 1.0, 0.5)


@pytest.mark.parametrize("value, message", [
    ("2, x", "'x' is not a number; write numbers separated by commas"), ("", "give at least one number"),
    (" , ;", "give at least one number"), ("1, inf", "must be finite numbers"), ("nan", "must be finite numbers"),
    (3, "must be numbers such as"), (None, "must be numbers such as"), ([True, 1], "must hold numbers"),
])
def test_omega_grammar_errors(value, message):
    with pytest.raises(ValueError, match=message):
        parse_omegas(value)
    assert format_omegas((2.0, 1.0, 0.5)) == "2, 1, 0.5"
