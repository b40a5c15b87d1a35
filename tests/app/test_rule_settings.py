"""The race's rule settings (coolsd.app.settings): each /race argument that sets a rule names the rule field(s) it
sets, takes that field's default and its control's range, and `rule_options` turns the race's flat settings into
each racer's rule options (no model is loaded: the rules are built with a stand-in neighbour table)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import gradio as gr
import pytest
import torch

from coolsd.app import racers
from coolsd.app.settings import RaceSettings, make_racer_rule, make_rules, rule_options, rule_spec
from coolsd.decoding import variants
from coolsd.decoding.drafting import Chain, Jacobi
from coolsd.decoding.omega_text import format_omegas
from coolsd.decoding.rules import (
    CoolSDRule,
    CustomScheduleRule,
    LanternPPRule,
    LanternRule,
    LinearDecayRule,
    UniformRSDRule,
)

TABLE = torch.arange(32).repeat(8, 1)
CTX = SimpleNamespace(model=SimpleNamespace(neighbours=TABLE))  # what make_racer_rule reads of a context
RULE_ARGUMENTS = ["delta", "nu", "mu", "mean_omega", "lantern_k", "lantern_lambda", "uniform_delta", "linear_delta",
                  "linear_slope", "custom_omegas"]
# every rule setting away from its default, so a value read from the wrong setting (or a default) shows
SETTINGS = {"delta": 3.0, "nu": 0.2, "mu": -0.5, "mean_omega": False, "lantern_k": 3, "lantern_lambda": 7.0,
            "uniform_delta": 1.5, "linear_delta": 2.5, "linear_slope": 0.25, "custom_omegas": "4 2 1", "sjd_window": 5}


def rule_fields() -> dict[str, dict]:
    return {f.name: f.metadata for f in dataclasses.fields(RaceSettings) if "sets" in f.metadata}


def test_the_rule_arguments_keep_their_names_order_and_defaults():
    names = RaceSettings.names()
    assert list(rule_fields()) == RULE_ARGUMENTS  # the /race API's rule arguments, in its order
    assert names.index("delta") == 7 and names[7:13] == RULE_ARGUMENTS[:6]
    assert names[names.index("racers") + 1:names.index("resolution")] == RULE_ARGUMENTS[6:10]
    assert names[-2:] == ["sjd_window", "noise"]  # appended after model and style: older calls keep their meaning
    assert {name: m["default"] for name, m in rule_fields().items()} == {
        "delta": 2.0, "nu": 0.7, "mu": 0.0, "mean_omega": True, "lantern_k": 10, "lantern_lambda": 5.0,
        "uniform_delta": 2.0, "linear_delta": 2.0, "linear_slope": 0.5, "custom_omegas": "2, 1, 0.5"}


def test_the_drafting_arguments_take_the_draftings_defaults_and_ranges():
    """draft_len is Chain's L and sjd_window Jacobi's W (their defaults and control ranges: `knob`); the racers
    with a drafter share the race's drafting, the no-drafter group drafts by Jacobi iteration at sjd_window."""
    for name, cls, field in (("draft_len", Chain, "draft_len"), ("sjd_window", Jacobi, "window")):
        spec = {f.name: f for f in dataclasses.fields(RaceSettings)}[name].metadata["spec"](CTX)
        ui = {f.name: f for f in dataclasses.fields(cls)}[field].metadata["ui"]
        assert (spec.default, spec.minimum, spec.maximum, spec.step) == (getattr(cls, field), *ui)
    settings = RaceSettings(**{f.name: None for f in dataclasses.fields(RaceSettings)}).replace(
        draft_len=2, drafting="chain", sjd_window=5)
    assert settings.drafting_of("cool-sd") == Chain(2) and settings.drafting_of("sjd") == Jacobi(5)
    assert settings.drafting_of("sjd-reuse") == Jacobi(5, reuse=True)
    assert settings.replace(drafting="eagle-25").drafting_of("eagle-1").shape == "eagle-25"


@pytest.mark.parametrize("name, rule, field", [
    ("delta", CoolSDRule, "delta"), ("nu", CoolSDRule, "nu"), ("mu", CoolSDRule, "mu"),
    ("lantern_k", LanternPPRule, "k"), ("lantern_k", LanternRule, "k"), ("lantern_lambda", LanternPPRule, "lam"),
    ("uniform_delta", UniformRSDRule, "delta"), ("linear_delta", LinearDecayRule, "delta"),
    ("linear_slope", LinearDecayRule, "slope"), ("custom_omegas", CustomScheduleRule, "omegas"),
])
def test_each_argument_sets_its_rule_field_with_the_rules_default(name, rule, field):
    meta = rule_fields()[name]
    assert meta["sets"][rule.name] == field
    default = getattr(rule(), field)
    if name == "mu":  # the race's mu box shows 0; the rule's None is "mean omega" (on by default)
        assert default is None and meta["default"] == 0.0 and rule_fields()["mean_omega"]["default"] is True
    elif name == "custom_omegas":
        assert meta["default"] == format_omegas(default)
    else:
        assert meta["default"] == default
    if "ui" in {f.name: f for f in dataclasses.fields(rule)}[field].metadata:  # its control's range is the rule's
        spec = rule_spec(rule, field, name, name)
        assert (spec.minimum, spec.maximum, spec.step) == {f.name: f for f in dataclasses.fields(rule)}[
            field].metadata["ui"]


def test_sets_names_only_real_rule_fields():
    for name, meta in rule_fields().items():
        for slug, field in meta["sets"].items():
            rule = next(v.rule for v in variants.VARIANTS.values() if v.rule == slug)
            assert field in {f.name for f in dataclasses.fields(variants.rules.RULES[rule])}, (name, slug)


def test_no_settings_build_the_default_rules():
    for key in racers.RACERS:
        v = variants.get(key)
        assert variants.build(key, rule_options(key, {})) == variants.build(key), key
        assert make_racer_rule(CTX, key, {}) == variants.build(key, None, TABLE), key
        assert v.rule is None or rule_options(key, {}).keys() <= {f.name for f in dataclasses.fields(
            variants.rules.RULES[v.rule])}


@pytest.mark.parametrize("key, expected", [
    ("cool-sd", CoolSDRule(delta=3.0, nu=0.2, mu=-0.5, floor_at_one=True)),
    ("cool-sd-unclipped", CoolSDRule(delta=3.0, nu=0.2, mu=-0.5, floor_at_one=False)),
    ("lantern++", LanternPPRule(k=3, lam=7.0, residual_kind="published")),
    ("lantern++-gstar", LanternPPRule(k=3, lam=7.0, residual_kind="optimal")),
    ("uniform-rsd", UniformRSDRule(delta=1.5)), ("linear-decay", LinearDecayRule(delta=2.5, slope=0.25)),
    ("custom", CustomScheduleRule((4.0, 2.0, 1.0))), ("eagle-1", variants.rules.EagleRule()),
    ("sjd", variants.rules.EagleRule()), ("sjd-reuse", variants.rules.EagleRule()),  # (on Jacobi drafts)
    ("cool-sd-jacobi", CoolSDRule(delta=3.0, nu=0.2, mu=-0.5, floor_at_one=True)),
    ("lantern++-jacobi", LanternPPRule(k=3, lam=7.0, residual_kind="published")),
])
def test_each_racer_at_non_default_settings_is_the_rule_built_by_hand(key, expected):
    rule = make_racer_rule(CTX, key, {**SETTINGS, "racers": [key], "seed": 3})  # (other settings: not read)
    if isinstance(expected, LanternPPRule):
        assert rule.neighbours is TABLE
        expected = expected.with_neighbours(TABLE)
    assert rule == expected and rule.config() == expected.config()


def test_lantern_k_sets_the_k_of_lantern_too():
    assert rule_options("lantern", SETTINGS) == {"k": 3}  # (its absolute delta is not a race setting)


def test_mean_omega_reads_mu_as_none():
    assert rule_options("cool-sd", {**SETTINGS, "mean_omega": True})["mu"] is None
    assert rule_options("cool-sd", {"mu": -0.5})["mu"] is None  # mean omega left out: on, as the rule's mu=None
    assert rule_options("cool-sd", {"mean_omega": False})["mu"] == 0.0  # the mu box's own default


def test_a_bad_custom_list_stops_only_the_custom_racer():
    settings = {**SETTINGS, "custom_omegas": "2, x"}
    rules = make_rules(CTX, ["cool-sd", "linear-decay"], settings)
    assert rules["cool-sd"].delta == 3.0
    with pytest.raises(gr.Error, match="Custom schedule: the omega list: 'x' is not a number"):
        make_racer_rule(CTX, "custom", settings)
    with pytest.raises(gr.Error, match="Custom schedule: omega_2 must be"):
        make_racer_rule(CTX, "custom", {"custom_omegas": "2, -1"})
    with pytest.raises(gr.Error, match="COOL-SD: delta must be above 0"):
        make_racer_rule(CTX, "cool-sd", {"delta": 0.0})
    with pytest.raises(gr.Error, match="unknown racer"):
        make_racer_rule(CTX, "vanilla", {})
