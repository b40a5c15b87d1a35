"""The variant registry's strength knob (`variants.at_strength`, what the quality lab's slider and the sweeps move),
for every variant, exactly (issue 27).

For each variant: which rule field the value lands in (delta for the omega rules, lam for LANTERN++, LANTERN's
absolute delta), that it lands there and nowhere else (every other option keeps the value it was given, the
variant's fixed options stay), that a bad value is refused with the rule's message, and which variants have
no strength at all.
"""

from __future__ import annotations

import pytest
import torch

from coolsd.decoding import variants
from coolsd.decoding.drafting import Chain
from coolsd.decoding.rules import (
    CoolSDRule,
    LanternPPRule,
    LanternRule,
    LinearDecayRule,
    UniformRSDRule,
)

TABLE = torch.arange(32).repeat(8, 1)
# every option of each rule away from its default, so a value read from the wrong field (or from the defaults) shows
OPTIONS = {"cool-sd": {"delta": 3.0, "nu": 0.2, "mu": -0.5}, "lantern++": {"k": 3, "lam": 7.0},
           "lantern": {"k": 3, "delta": 0.4}, "uniform-rsd": {"delta": 1.5},
           "linear-decay": {"delta": 2.5, "slope": 0.25}, "custom": {"omegas": (4.0, 2.0, 1.0)},
           "eagle-1": {}, None: {}}
VALUE = 1.375


def options(key) -> dict:
    """The rule options above for variant `key`'s rule."""
    return OPTIONS[variants.get(key).rule]


def test_which_field_each_variant_relaxes():
    assert {key: v.strength for key, v in variants.VARIANTS.items()} == {
        "vanilla": None, "eagle-1": None, "lantern++": "lam", "lantern++-gstar": "lam", "lantern": "delta",
        "uniform-rsd": "delta", "linear-decay": "delta", "cool-sd": "delta", "cool-sd-unclipped": "delta",
        "custom": None, "sjd": None, "sjd-reuse": None, "cool-sd-jacobi": "delta", "lantern++-jacobi": "lam"}


@pytest.mark.parametrize("key, expected", [
    ("cool-sd", CoolSDRule(delta=VALUE, nu=0.2, mu=-0.5, floor_at_one=True)),
    ("cool-sd-unclipped", CoolSDRule(delta=VALUE, nu=0.2, mu=-0.5, floor_at_one=False)),
    ("uniform-rsd", UniformRSDRule(delta=VALUE)),
    ("linear-decay", LinearDecayRule(delta=VALUE, slope=0.25)),
    ("lantern++", LanternPPRule(k=3, lam=VALUE, residual_kind="published")),
    ("lantern++-gstar", LanternPPRule(k=3, lam=VALUE, residual_kind="optimal")),
    ("lantern", LanternRule(k=3, delta=VALUE - 1)),  # LANTERN's absolute budget is at most 1
    ("cool-sd-jacobi", CoolSDRule(delta=VALUE, nu=0.2, mu=-0.5, floor_at_one=True)),  # (on Jacobi drafting)
    ("lantern++-jacobi", LanternPPRule(k=3, lam=VALUE, residual_kind="published")),
])
def test_the_value_lands_in_the_strength_field_and_nothing_else_moves(key, expected):
    value = VALUE - 1 if key == "lantern" else VALUE
    given = options(key)
    rule = variants.at_strength(key, value, given, TABLE)
    if isinstance(expected, LanternPPRule):
        assert rule.neighbours is TABLE
        expected = expected.with_neighbours(TABLE)
    assert type(rule) is type(expected) and rule.config() == expected.config()
    drafting = variants.drafting(key, Chain()).config()  # (the no-drafter group: Jacobi)
    assert variants.variant_of(rule.config(), drafting) == key  # still the same variant
    assert given == options(key)  # the caller's options are not changed
    # at the variant's defaults: the same, with every other field at its default
    default = variants.at_strength(key, value)
    assert default == variants.build(key, {variants.get(key).strength: value})
    assert default != variants.build(key)


def test_the_value_is_checked_by_the_rule():
    for key, message in (("cool-sd", "delta must be > 0"), ("uniform-rsd", "delta must be > 0"),
                         ("linear-decay", "delta"), ("lantern++", "lam")):
        with pytest.raises(ValueError, match=message):
            variants.at_strength(key, 0.0, options(key), TABLE)


@pytest.mark.parametrize("key", ["eagle-1", "custom", "vanilla"])
def test_variants_without_a_strength_say_so(key):
    with pytest.raises(ValueError, match="has no strength to set"):
        variants.at_strength(key, 2.0, options(key))


def test_an_alias_relaxes_its_variant():
    cool = options("cool-sd")
    assert variants.at_strength("cool-sd-floor", VALUE, cool) == variants.at_strength("cool-sd", VALUE, cool)
