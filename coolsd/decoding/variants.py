"""The named decoder variants: one registry of key, label, colour, rule, fixed options and strength knob.

A *variant* is a named way of running one rule of `coolsd.decoding.rules`: "cool-sd" is COOL-SD
floored at 1 (the rule's default), "cool-sd-unclipped" the same schedule without the floor,
"lantern++-gstar" LANTERN++ with the G* residual, "vanilla" no rule at all. Every front end reads
this table: the app's racers, the quality lab, the schedule explorer, the benchmark's settings and
labels, the plots and the How tab. A variant builds its rule from the rule's fields that the settings
set (`coolsd.decoding.knobs.RuleKnobs.options`: defaults read from the rule dataclasses, never typed
again) plus the variant's `fixed` options (what makes it that variant; also how `variant_of`
recognises a rule's config).

    rule = build("cool-sd", RuleKnobs(delta=1.1))                 # CoolSDRule(delta=1.1, floor_at_one=True)
    build("lantern++", RuleKnobs(lantern_lambda=20), neighbours=table)
    variant_of(rule.config())                                     # -> "cool-sd"

Old keys keep working where they were stored (share links, API calls): `resolve` maps an alias to
its variant ("cool-sd-floor" -> "cool-sd", the floored schedule it always named).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from torch import Tensor

from coolsd.decoding import rules
from coolsd.decoding.knobs import RuleKnobs
from coolsd.decoding.rules import Rule
from coolsd.util.checks import show

VANILLA = "vanilla"  # vanilla AR: no drafter, one target forward per token (not a rule)


# ---------------------------------------------------------------- the registry
@dataclass(frozen=True)
class Variant:
    """One named decoder variant.

    key: slug (API values, share links, benchmark families); label: display name; colour: "#rrggbb"
    in every figure; rule: slug of `coolsd.decoding.rules.RULES` (None: vanilla AR); fixed: the options
    that make this variant (always applied over the settings, and matched by `variant_of`); strength:
    the `RuleKnobs` field a sweep or the lab's slider moves (None: nothing to relax); tag: the word
    benchmark labels add to the rule slug; racer: offered in the Race tab.
    """

    key: str
    label: str
    colour: str
    rule: str | None
    fixed: dict = field(default_factory=dict)
    strength: str | None = None
    tag: str = ""
    racer: bool = True

    @property
    def name(self) -> str:
        """The label without its parenthesis: "Eagle-1 (lossless)" -> "Eagle-1"."""
        return self.label.split(" (")[0]

    def rule_options(self, knobs: RuleKnobs) -> dict:
        """The rule's keyword arguments at `knobs` (the variant's fixed options win)."""
        return knobs.options(self.rule) | self.fixed


VARIANTS: dict[str, Variant] = {v.key: v for v in (
    Variant(VANILLA, "Vanilla AR (reference)", "#7f7f7f", None, racer=False),
    Variant("eagle-1", "Eagle-1 (lossless)", "#444444", "eagle-1"),
    Variant("lantern++", "LANTERN++", "#2ca02c", "lantern++", {"residual_kind": "published"}, "lantern_lambda"),
    Variant("lantern++-gstar", "LANTERN++ (G* residual)", "#17becf", "lantern++", {"residual_kind": "optimal"},
            "lantern_lambda", tag="G*"),
    Variant("lantern", "LANTERN (absolute budget)", "#98df8a", "lantern", {}, "lantern_delta", racer=False),
    Variant("uniform-rsd", "UniformRSD", "#1f77b4", "uniform-rsd", {}, "uniform_delta"),
    Variant("linear-decay", "Linear decay", "#9467bd", "linear-decay", {}, "linear_delta"),
    Variant("cool-sd", "COOL-SD", "#d62728", "cool-sd", {"floor_at_one": True, "residual_kind": "optimal"}, "delta"),
    Variant("cool-sd-unclipped", "COOL-SD unclipped", "#ff7f0e", "cool-sd",
            {"floor_at_one": False, "residual_kind": "optimal"}, "delta", tag="unclipped"),
    Variant("custom", "Custom schedule", "#8c564b", "custom"),
)}
ALIASES = {"cool-sd-floor": "cool-sd"}  # old keys (share links, API calls) -> the variant they named
RACERS = [key for key, v in VARIANTS.items() if v.racer]  # the Race tab's choices, in this order
COLOURS = {key: v.colour for key, v in VARIANTS.items()} | {a: VARIANTS[k].colour for a, k in ALIASES.items()}
assert rules.CoolSDRule.floor_at_one is VARIANTS["cool-sd"].fixed["floor_at_one"], "'cool-sd' is the rule's default"


def resolve(key) -> str:
    """The variant key for `key` or one of its ALIASES; ValueError for anything else."""
    key = ALIASES.get(key, key) if isinstance(key, str) else key
    if not isinstance(key, str) or key not in VARIANTS:
        raise ValueError(f"unknown decoder {show(key)}; choose one of {', '.join(VARIANTS)}")
    return key


def get(key) -> Variant:
    """The Variant named `key` (aliases resolved); ValueError for an unknown key."""
    return VARIANTS[resolve(key)]


def build(key, knobs: RuleKnobs | None = None, neighbours: Tensor | None = None) -> Rule | None:
    """The rule variant `key` runs at `knobs` (None: vanilla AR); LANTERN rules get `neighbours`.

    Bad settings raise the rule's own ValueError. A LANTERN rule without a neighbour table is built
    (its checks run) but cannot decode until `with_neighbours`.
    """
    v = get(key)
    if v.rule is None:
        return None
    rule = rules.make_rule(v.rule, **v.rule_options(knobs or RuleKnobs()))
    if neighbours is not None and isinstance(rule, rules.LanternPPRule):
        rule = rule.with_neighbours(neighbours)
    return rule


def at_strength(key, value: float, knobs: RuleKnobs | None = None, neighbours: Tensor | None = None) -> Rule:
    """The rule of variant `key` with its strength knob (delta, lambda...) set to `value`; ValueError if none."""
    v = get(key)
    if v.strength is None:
        raise ValueError(f"{v.name} has no strength to set")
    return build(key, dataclasses.replace(knobs or RuleKnobs(), **{v.strength: value}), neighbours)


def variant_of(config: dict | None) -> str | None:
    """The variant key of a rule config (`Rule.config()`, or a benchmark's {"rule": slug, options});
    None (no rule) -> "vanilla". Fields the config leaves out take the rule class's defaults. A config
    that matches no variant's fixed options (e.g. COOL-SD with the lossless residual) -> None.
    """
    if config is None:
        return VANILLA
    slug = config.get("rule")
    if slug not in rules.RULES:
        return None
    fields = dataclasses.fields(rules.RULES[slug])
    defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    full = defaults | {k: v for k, v in config.items() if k != "rule"}
    for v in VARIANTS.values():
        if v.rule == slug and all(full.get(name) == value for name, value in v.fixed.items()):
            return v.key
    return None
