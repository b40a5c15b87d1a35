"""The registry of named decoder variants (coolsd.decoding.variants): one home for keys, labels, colours and rules.
(The options the variants build from, and the omega-list grammar: tests/decoding/test_rule_options.py.)"""

from __future__ import annotations

import pytest
import torch

from coolsd.decoding import variants
from coolsd.decoding.drafting import Chain, Jacobi
from coolsd.decoding.rules import (
    RULES,
    CoolSDRule,
    CustomScheduleRule,
    EagleRule,
    LanternPPRule,
    LinearDecayRule,
    UniformRSDRule,
)

TABLE = torch.arange(32).repeat(8, 1)  # any (V, >= k + 1) table: the checks only read its width


def test_every_variant_builds_and_is_recognised_from_its_config():
    for key, v in variants.VARIANTS.items():
        rule = variants.build(key, None, TABLE)
        if v.rule is None:
            assert rule is None and variants.variant_of(None) == key
            continue
        drafting = variants.drafting(key, Chain())  # (Jacobi for the no-drafter group, else the race's chain)
        assert rule.name == v.rule and variants.variant_of(rule.config(), drafting.config()) == key
        assert v.colour.startswith("#") and len(v.colour) == 7
    assert len({v.colour for v in variants.VARIANTS.values()}) == len(variants.VARIANTS)


def test_no_options_build_the_default_rules():
    assert variants.build("cool-sd") == CoolSDRule() and variants.build("eagle-1") == EagleRule()
    assert variants.build("custom") == CustomScheduleRule() and variants.build("linear-decay") == LinearDecayRule()
    assert variants.build("lantern++") == LanternPPRule() and variants.build("uniform-rsd") == UniformRSDRule()


def test_cool_sd_is_floored_and_the_unclipped_schedule_is_a_variant():
    floored, unclipped = variants.build("cool-sd", {"delta": 1.1}), variants.build("cool-sd-unclipped", {"delta": 1.1})
    assert floored == CoolSDRule(delta=1.1) and floored.floor_at_one and not unclipped.floor_at_one
    depth = torch.arange(1, 4)
    assert (floored.omega(depth, 3) >= 1).all() and (unclipped.omega(depth, 3)[1:] < 1).all()
    torch.testing.assert_close(floored.omega(depth, 3), unclipped.omega(depth, 3).clamp_min(1.0), rtol=0, atol=0)


def test_options_reach_the_rules():
    cool = {"delta": 3.0, "nu": 0.2, "mu": -0.5}
    assert variants.build("cool-sd-unclipped", cool) == CoolSDRule(delta=3.0, nu=0.2, mu=-0.5, floor_at_one=False)
    gstar = variants.build("lantern++-gstar", {"k": 3, "lam": 7.0}, TABLE)
    assert (gstar.k, gstar.lam, gstar.residual_kind) == (3, 7.0, "optimal") and gstar.neighbours is TABLE
    assert variants.build("lantern++", {"k": 3, "lam": 7.0}, TABLE).residual_kind == "published"
    assert variants.build("uniform-rsd", {"delta": 1.5}) == UniformRSDRule(delta=1.5)
    assert variants.build("linear-decay", {"delta": 2.5, "slope": 0.25}) == LinearDecayRule(delta=2.5, slope=0.25)
    assert variants.build("custom", {"omegas": (4, 2, 1)}) == CustomScheduleRule((4.0, 2.0, 1.0))
    assert variants.at_strength("lantern++", 20.0, {"k": 3, "lam": 7.0}, TABLE).lam == 20.0
    assert variants.at_strength("uniform-rsd", 4.0) == UniformRSDRule(delta=4.0)
    with pytest.raises(ValueError, match="no strength"):
        variants.at_strength("eagle-1", 2.0)


def test_old_keys_resolve_and_unknown_keys_fail():
    assert variants.resolve("cool-sd-floor") == "cool-sd" and variants.get("cool-sd-floor").fixed["floor_at_one"]
    assert variants.COLOURS["cool-sd-floor"] == variants.COLOURS["cool-sd"]
    for bad in ("cool", None, 3, ["cool-sd"]):
        with pytest.raises(ValueError, match="unknown decoder"):
            variants.resolve(bad)
    with pytest.raises(ValueError) as err:  # the message names what was sent and lists every key, comma-separated
        variants.resolve("cool")
    assert str(err.value) == "unknown decoder 'cool'; choose one of " + ", ".join(variants.VARIANTS)


def test_variant_of_fills_defaults_and_rejects_unnamed_configs():
    assert variants.variant_of({"rule": "cool-sd", "delta": 2}) == "cool-sd"  # the default is floored
    assert variants.variant_of({"rule": "cool-sd", "floor_at_one": False}) == "cool-sd-unclipped"
    assert variants.variant_of({"rule": "cool-sd", "residual_kind": "lossless"}) is None
    assert variants.variant_of({"rule": "lantern++", "k": 5, "lam": 10}) == "lantern++"
    assert variants.variant_of({"rule": "nope"}) is None
    assert set(v.rule for v in variants.VARIANTS.values() if v.rule) <= set(RULES)


def test_racers_are_the_offered_variants_in_order():
    assert variants.RACERS == ["eagle-1", "lantern++", "lantern++-gstar", "uniform-rsd", "linear-decay", "cool-sd",
                               "cool-sd-unclipped", "custom", "sjd", "sjd-reuse", "cool-sd-jacobi", "lantern++-jacobi"]
    assert variants.NO_DRAFTER == ["sjd", "sjd-reuse", "cool-sd-jacobi", "lantern++-jacobi"]  # the last group


def test_relaxed_racers_without_a_drafter():
    """The no-drafter racers are (Jacobi drafting, rule) pairs: "COOL-SD, no drafter" is COOL-SD's rule (floored,
    G*) on Jacobi drafts, its strength delta; LANTERN++'s keeps the published residual; SJD is Eagle-1's test.
    Each is recognised from its (rule config, drafting config) pair; a config recorded when Jacobi drafting was
    folded into the rule splits into the pair (`split_config`)."""
    cool = variants.build("cool-sd-jacobi", {"delta": 4.0})
    drafting = variants.drafting("cool-sd-jacobi", Chain(3), {"window": 6})
    assert cool == CoolSDRule(delta=4.0) and drafting == Jacobi(window=6)
    assert variants.at_strength("cool-sd-jacobi", 8.0).delta == 8.0
    assert variants.variant_of(cool.config(), drafting.config()) == "cool-sd-jacobi"
    assert variants.variant_of(cool.config()) == "cool-sd" and variants.variant_of(cool.config(), Chain().config())
    lantern = variants.build("lantern++-jacobi", {"k": 5, "lam": 10.0})
    assert lantern.residual_kind == "published"
    assert variants.variant_of(lantern.config(), Jacobi().config()) == "lantern++-jacobi"
    assert variants.drafting("sjd-reuse", Chain(), {"window": 8}) == Jacobi(8, reuse=True)
    assert variants.drafting("eagle-1", Chain(3), {"window": 8}) == Chain(3)  # (a drafter's: the race's own)
    assert variants.variant_of(EagleRule().config(), Jacobi(8, reuse=True).config()) == "sjd-reuse"
    assert variants.split_config({"rule": "sjd", "window": 8, "reuse": True, "init": "last"}) == (
        {"rule": "eagle-1"}, {"drafting": "jacobi", "window": 8, "reuse": True, "init": "last"})
    assert variants.split_config({"rule": "cool-sd-jacobi", "delta": 2.0, "window": 8}) == (
        {"rule": "cool-sd", "delta": 2.0}, {"drafting": "jacobi", "window": 8})
    assert variants.split_config({"rule": "cool-sd", "delta": 2.0}) == ({"rule": "cool-sd", "delta": 2.0}, None)
    assert all(variants.VARIANTS[k].no_drafter for k in variants.NO_DRAFTER)
    assert not any(variants.VARIANTS[k].no_drafter for k in ("vanilla", "eagle-1", "cool-sd"))
