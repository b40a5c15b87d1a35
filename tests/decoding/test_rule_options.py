"""The options a variant builds its rule from (coolsd.decoding.variants): named by the rule's own dataclass fields,
any left out at the rule's default, the variant's fixed options over them, an unknown one refused by name; and the
one omega-list grammar (coolsd.decoding.rules.parse_omegas).
(The race's flat settings: tests/app/test_rule_settings.py.)"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from coolsd.decoding import variants
from coolsd.decoding.omega_text import format_omegas, parse_omegas
from coolsd.decoding.rules import (
    RULES,
    CoolSDRule,
    CustomScheduleRule,
    LanternPPRule,
    LanternRule,
    LinearDecayRule,
    UniformRSDRule,
)

TABLE = torch.arange(32).repeat(8, 1)


def test_options_are_the_rule_fields_and_the_fixed_ones_win():
    expected = CoolSDRule(delta=1.1, floor_at_one=True, residual_kind="optimal")
    assert variants.build("cool-sd", {"delta": 1.1}) == expected
    assert variants.build("cool-sd-unclipped", {"delta": 1.1, "nu": 0.2, "mu": -0.5}) == CoolSDRule(
        delta=1.1, nu=0.2, mu=-0.5, floor_at_one=False)
    # a fixed option given as an option: the variant's own wins (it is what makes the variant)
    assert variants.build("cool-sd", {"floor_at_one": False}).floor_at_one is True
    assert variants.build("lantern++-gstar", {"residual_kind": "published"}).residual_kind == "optimal"
    assert variants.build("lantern", {"k": 3, "delta": 0.4}) == LanternRule(k=3, delta=0.4)
    assert variants.build("custom", {"omegas": [4, 2, 1]}) == CustomScheduleRule((4.0, 2.0, 1.0))
    assert variants.build("linear-decay", {"slope": 0.25}) == LinearDecayRule(slope=0.25)


def test_options_left_out_take_the_rule_defaults():
    for key, v in variants.VARIANTS.items():
        rule = variants.build(key)
        if v.rule is None:
            assert rule is None
            continue
        assert rule == RULES[v.rule](**v.fixed), key
    given = {"delta": 3.0}  # the caller's mapping is not changed
    variants.at_strength("cool-sd", 1.5, given)
    assert given == {"delta": 3.0}


def test_at_strength_sets_only_the_strength_field_and_keeps_the_rest():
    rule = variants.at_strength("lantern++", 20.0, {"k": 3, "lam": 7.0}, TABLE)
    assert (rule.k, rule.lam, rule.residual_kind) == (3, 20.0, "published") and rule.neighbours is TABLE
    assert variants.at_strength("linear-decay", 1.5, {"slope": 0.25}) == LinearDecayRule(delta=1.5, slope=0.25)
    assert variants.at_strength("cool-sd", 1.5, {"nu": 0.2, "mu": -0.5}) == CoolSDRule(delta=1.5, nu=0.2, mu=-0.5)


@pytest.mark.parametrize("key, options, message", [
    ("cool-sd", {"lam": 2.0}, r"COOL-SD \(rule 'cool-sd'\) has no option 'lam'; its options: delta, nu, mu"),
    ("lantern++", {"lantern_lambda": 2.0}, r"LANTERN\+\+ \(rule 'lantern\+\+'\) has no option 'lantern_lambda'"),
    ("uniform-rsd", {"slope": 0.5}, r"UniformRSD \(rule 'uniform-rsd'\) has no option 'slope'; its options: delta"),
    ("eagle-1", {"delta": 2.0}, r"Eagle-1 \(rule 'eagle-1'\) has no option 'delta'; it takes no options"),
    ("vanilla", {"delta": 2.0}, r"Vanilla AR \(no rule\) has no option 'delta'"),
])
def test_an_unknown_option_is_refused_by_name(key, options, message):
    with pytest.raises(ValueError, match=message):
        variants.build(key, options)
    strength = variants.get(key).strength
    if strength:
        with pytest.raises(ValueError, match=message):
            variants.at_strength(key, 2.0, options)


def test_a_bad_value_is_the_rules_own_error():
    with pytest.raises(ValueError, match="delta must be > 0"):
        variants.build("cool-sd", {"delta": 0.0})
    with pytest.raises(ValueError, match="slope"):
        variants.build("linear-decay", {"slope": 2.0})


def test_every_strength_and_fixed_option_is_a_field_of_the_rule():
    for v in variants.VARIANTS.values():
        if v.rule is None:
            continue
        names = {f.name for f in dataclasses.fields(RULES[v.rule])}
        assert set(v.fixed) <= names and (v.strength is None or v.strength in names), v.key


def test_controls_ranges_live_on_the_rule_fields():
    """Every field a front end moves says its range; its default lies in it."""
    for rule, names in ((CoolSDRule, ("delta", "nu", "mu")), (LanternPPRule, ("k", "lam")),
                        (UniformRSDRule, ("delta",)), (LinearDecayRule, ("delta", "slope"))):
        for f in dataclasses.fields(rule):
            if f.name in names:
                low, high, step = f.metadata["ui"]
                assert low < high and step > 0 and (f.default is None or low <= f.default <= high), (rule, f.name)


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
    assert parse_omegas(format_omegas(CustomScheduleRule.omegas)) == CustomScheduleRule.omegas
