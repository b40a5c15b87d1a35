"""The named decoder variants: one registry of key, label, colour and how to build the rule from settings.

A *variant* is a named way of running one rule of `coolsd.decoding.rules`: "cool-sd" is COOL-SD
floored at 1 (the rule's default), "cool-sd-unclipped" the same schedule without the floor,
"lantern++-gstar" LANTERN++ with the G* residual, "vanilla" no rule at all. Every front end reads
this table: the app's racers, the quality lab, the schedule explorer, the benchmark's settings and
labels, the plots and the How tab. A variant's rule options come from `RuleKnobs`, whose defaults are
read from the rule dataclasses (never typed again), plus the variant's `fixed` options (what makes
it that variant; also how `variant_of` recognises a rule's config).

    rule = build("cool-sd", RuleKnobs(delta=1.1))                 # CoolSDRule(delta=1.1, floor_at_one=True)
    build("lantern++", RuleKnobs(lantern_lambda=20), neighbours=table)
    variant_of(rule.config())                                     # -> "cool-sd"
    parse_omegas("2 1 0.5") == parse_omegas("2, 1, 0.5") == (2.0, 1.0, 0.5)

Old keys keep working where they were stored (share links, API calls): `resolve` maps an alias to
its variant ("cool-sd-floor" -> "cool-sd", the floored schedule it always named).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from torch import Tensor

from coolsd.decoding import rules
from coolsd.decoding.rules import Rule

VANILLA = "vanilla"  # vanilla AR: no drafter, one target forward per token (not a rule)


# ---------------------------------------------------------------- one omega-list grammar
def parse_omegas(value) -> tuple[float, ...]:
    """A custom schedule omega_1..omega_L from "2, 1, 0.5", "2 1 0.5", "2; 1; 0.5" or a list of numbers.

    Separators: commas, semicolons and/or white space. Returns floats; a one-line ValueError for
    anything else (not text or a list, a part that is not a finite number, nothing at all). Whether
    the values are positive and how many there may be is the rule's check (`rules.CustomScheduleRule`).
    """
    if isinstance(value, (list, tuple)):
        parts = list(value)
    elif isinstance(value, str):
        parts = [p for p in re.split(r"[,;\s]+", value.strip()) if p]
    else:
        raise ValueError(f"the omega list must be numbers such as '2, 1, 0.5', got {_short(value)}")
    values = []
    for part in parts:
        if isinstance(part, bool):
            raise ValueError(f"the omega list must hold numbers, got {_short(part)}")
        try:
            number = float(part)
        except (TypeError, ValueError):
            raise ValueError(f"the omega list: {_short(part)} is not a number; write numbers separated by commas "
                             "or spaces, e.g. 2, 1, 0.5") from None
        if not math.isfinite(number):
            raise ValueError(f"the omega list must be finite numbers, got {_short(part)}")
        values.append(number)
    if not values:
        raise ValueError("the omega list is empty: give at least one number (omega_1), e.g. 2, 1, 0.5")
    return tuple(values)


def format_omegas(omegas) -> str:
    """(2.0, 1.0, 0.5) -> "2, 1, 0.5" (what `parse_omegas` reads back)."""
    return ", ".join(f"{w:g}" for w in omegas)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# ---------------------------------------------------------------- the settings a variant reads
@dataclass(frozen=True)
class RuleKnobs:
    """The rule knobs of a decode's settings (the race's argument names); defaults = the rule dataclasses'.

    mu is used only when mean_omega is off (mean_omega on: mu mean-normalised). custom_omegas: text or
    numbers, read with `parse_omegas`. lantern_delta: LANTERN's (not ++) absolute budget. The order of the
    fields is the race's argument order (positional construction stays valid).
    """

    delta: float = rules.CoolSDRule.delta
    nu: float = rules.CoolSDRule.nu
    mu: float = 0.0
    mean_omega: bool = rules.CoolSDRule.mu is None
    lantern_k: int = rules.LanternPPRule.k
    lantern_lambda: float = rules.LanternPPRule.lam
    uniform_delta: float = rules.UniformRSDRule.delta
    linear_delta: float = rules.LinearDecayRule.delta
    linear_slope: float = rules.LinearDecayRule.slope
    custom_omegas: str | tuple[float, ...] = format_omegas(rules.CustomScheduleRule.omegas)
    lantern_delta: float = rules.LanternRule.delta


def _cool(k: RuleKnobs) -> dict:
    return {"delta": k.delta, "nu": k.nu, "mu": None if k.mean_omega else k.mu}


# ---------------------------------------------------------------- the registry
@dataclass(frozen=True)
class Variant:
    """One named decoder variant.

    key: slug (API values, share links, benchmark families); label: display name; colour: "#rrggbb"
    in every figure; rule: slug of `coolsd.decoding.rules.RULES` (None: vanilla AR); options(knobs):
    the rule's fields read from the settings; fixed: the options that make this variant (always
    applied, and matched by `variant_of`); strength: the `RuleKnobs` field a sweep or the lab's
    slider moves (None: nothing to relax); tag: the word benchmark labels add to the rule slug;
    racer: offered in the Race tab.
    """

    key: str
    label: str
    colour: str
    rule: str | None
    options: Callable[[RuleKnobs], dict] = field(default=lambda k: {}, repr=False, compare=False)
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
        return self.options(knobs) | self.fixed


VARIANTS: dict[str, Variant] = {v.key: v for v in (
    Variant(VANILLA, "Vanilla AR (reference)", "#7f7f7f", None, racer=False),
    Variant("eagle-1", "Eagle-1 (lossless)", "#444444", "eagle-1"),
    Variant("lantern++", "LANTERN++", "#2ca02c", "lantern++",
            lambda k: {"k": k.lantern_k, "lam": k.lantern_lambda}, {"residual_kind": "published"}, "lantern_lambda"),
    Variant("lantern++-gstar", "LANTERN++ (G* residual)", "#17becf", "lantern++",
            lambda k: {"k": k.lantern_k, "lam": k.lantern_lambda}, {"residual_kind": "optimal"}, "lantern_lambda",
            tag="G*"),
    Variant("lantern", "LANTERN (absolute budget)", "#98df8a", "lantern",
            lambda k: {"k": k.lantern_k, "delta": k.lantern_delta}, {}, "lantern_delta", racer=False),
    Variant("uniform-rsd", "UniformRSD", "#1f77b4", "uniform-rsd", lambda k: {"delta": k.uniform_delta}, {},
            "uniform_delta"),
    Variant("linear-decay", "Linear decay", "#9467bd", "linear-decay",
            lambda k: {"delta": k.linear_delta, "slope": k.linear_slope}, {}, "linear_delta"),
    Variant("cool-sd", "COOL-SD", "#d62728", "cool-sd", _cool, {"floor_at_one": True, "residual_kind": "optimal"},
            "delta"),
    Variant("cool-sd-unclipped", "COOL-SD unclipped", "#ff7f0e", "cool-sd", _cool,
            {"floor_at_one": False, "residual_kind": "optimal"}, "delta", tag="unclipped"),
    Variant("custom", "Custom schedule", "#8c564b", "custom", lambda k: {"omegas": parse_omegas(k.custom_omegas)}),
)}
ALIASES = {"cool-sd-floor": "cool-sd"}  # old keys (share links, API calls) -> the variant they named
RACERS = [key for key, v in VARIANTS.items() if v.racer]  # the Race tab's choices, in this order
COLOURS = {key: v.colour for key, v in VARIANTS.items()} | {a: VARIANTS[k].colour for a, k in ALIASES.items()}
assert rules.CoolSDRule.floor_at_one is VARIANTS["cool-sd"].fixed["floor_at_one"], "'cool-sd' is the rule's default"


def resolve(key) -> str:
    """The variant key for `key` or one of its ALIASES; ValueError for anything else."""
    key = ALIASES.get(key, key) if isinstance(key, str) else key
    if not isinstance(key, str) or key not in VARIANTS:
        raise ValueError(f"unknown decoder {_short(key)}; choose one of {', '.join(VARIANTS)}")
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
