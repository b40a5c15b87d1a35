"""The named decoder variants: one registry of key, label, colour, (drafting, rule), fixed options and strength field.

A *variant* is a named (drafting, rule) pair: a rule of `coolsd.decoding.rules` run on a drafting of
`coolsd.decoding.drafting` (the race's own chain or tree, or Jacobi iteration for the "no drafter" group):
"cool-sd" is COOL-SD floored at 1 (the rule's default), "cool-sd-unclipped" the same schedule without the floor,
"lantern++-gstar" LANTERN++ with the G* residual, "vanilla" no rule at all. The "no drafter" group drafts by
Jacobi iteration (the target drafts for itself, spec section 4b): "sjd" Speculative Jacobi Decoding (Jacobi +
Eagle-1's test), "sjd-reuse" the same with its redrafts coupled to the previous drafts (Jacobi(reuse=True)),
"cool-sd-jacobi" COOL-SD's relaxed test and "lantern++-jacobi" LANTERN++'s on those drafts: relaxation needs no
trained drafter. Every front end reads
this table: the app's racers, the quality lab, the schedule explorer, the benchmark's settings and
labels, the plots and the How tab. A variant builds its rule from options named by the rule's own
dataclass fields (any left out: the rule's default) plus the variant's `fixed` options (what makes it
that variant, applied over the options; also how `variant_of` recognises a rule's config).

    rule = build("cool-sd", {"delta": 1.1})                      # CoolSDRule(delta=1.1, floor_at_one=True)
    build("lantern++", {"k": 5, "lam": 20}, neighbours=table)
    drafting("sjd-reuse", Chain(1), {"window": 6})               # Jacobi(window=6, reuse=True)
    at_strength("lantern++", 20, {"k": 5}, table)                # the same rule: lam is LANTERN++'s strength
    variant_of(rule.config())                                     # -> "cool-sd"
    variant_of(EagleRule().config(), Jacobi().config())          # -> "sjd"

Old keys keep working where they were stored (share links, API calls): `resolve` maps an alias to
its variant ("cool-sd-floor" -> "cool-sd", the floored schedule it always named).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from torch import Tensor

from coolsd.decoding import rules
from coolsd.decoding.drafting import Drafting, Jacobi
from coolsd.decoding.rules import Rule
from coolsd.util.checks import show

VANILLA = "vanilla"  # vanilla AR: no drafter, one target forward per token (not a rule)


# ---------------------------------------------------------------- the registry
@dataclass(frozen=True)
class Variant:
    """One named decoder variant.

    key: slug (API values, share links, benchmark families); label: display name; colour: "#rrggbb"
    in every figure; rule: slug of `coolsd.decoding.rules.RULES` (None: vanilla AR); fixed: the rule options
    that make this variant (always applied over the given options, and matched by `variant_of`); strength:
    the rule field a sweep or the lab's slider moves (None: nothing to relax); tag: the word benchmark
    labels add to the rule slug; racer: offered in the Race tab; jacobi: None = drafts with a drafter (the
    race's chain or tree), else the fixed options of its Jacobi drafting ({} = Jacobi's defaults).
    """

    key: str
    label: str
    colour: str
    rule: str | None
    fixed: dict = field(default_factory=dict)
    strength: str | None = None
    tag: str = ""
    racer: bool = True
    jacobi: dict | None = None

    @property
    def no_drafter(self) -> bool:
        """Whether it races without a drafter: it drafts by Jacobi iteration (the "no drafter" group)."""
        return self.jacobi is not None

    @property
    def name(self) -> str:
        """The label without its parenthesis: "Eagle-1 (lossless)" -> "Eagle-1"."""
        return self.label.split(" (")[0]

    def rule_options(self, options: Mapping | None = None) -> dict:
        """The rule's keyword arguments: `options` (rule field -> value) with the variant's fixed options over
        them; a ValueError naming a field the rule does not have."""
        options = dict(options or {})
        known = [] if self.rule is None else [f.name for f in dataclasses.fields(rules.RULES[self.rule]) if f.init]
        for name in options:
            if name not in known:
                rule = f"rule {show(self.rule)}" if self.rule else "no rule"
                takes = f"its options: {', '.join(known)}" if known else "it takes no options"
                raise ValueError(f"{self.name} ({rule}) has no option {show(name)}; {takes}")
        return options | self.fixed


VARIANTS: dict[str, Variant] = {v.key: v for v in (
    Variant(VANILLA, "Vanilla AR (reference)", "#7f7f7f", None, racer=False),
    Variant("eagle-1", "Eagle-1 (lossless)", "#444444", "eagle-1"),
    Variant("lantern++", "LANTERN++", "#2ca02c", "lantern++", {"residual_kind": "published"}, "lam"),
    Variant("lantern++-gstar", "LANTERN++ (G* residual)", "#17becf", "lantern++", {"residual_kind": "optimal"},
            "lam", tag="G*"),
    Variant("lantern", "LANTERN (absolute budget)", "#98df8a", "lantern", {}, "delta", racer=False),
    Variant("uniform-rsd", "UniformRSD", "#1f77b4", "uniform-rsd", {}, "delta"),
    Variant("linear-decay", "Linear decay", "#9467bd", "linear-decay", {}, "delta"),
    Variant("cool-sd", "COOL-SD", "#d62728", "cool-sd", {"floor_at_one": True, "residual_kind": "optimal"}, "delta"),
    Variant("cool-sd-unclipped", "COOL-SD unclipped", "#ff7f0e", "cool-sd",
            {"floor_at_one": False, "residual_kind": "optimal"}, "delta", tag="unclipped"),
    Variant("custom", "Custom schedule", "#8c564b", "custom"),
    Variant("sjd", "SJD (no drafter, lossless)", "#e377c2", "eagle-1", jacobi={"reuse": False}),
    Variant("sjd-reuse", "SJD + reuse (ours, lossless)", "#bcbd22", "eagle-1", jacobi={"reuse": True},
            tag="reuse"),
    Variant("cool-sd-jacobi", "COOL-SD, no drafter", "#8b0000", "cool-sd",
            {"floor_at_one": True, "residual_kind": "optimal"}, "delta", jacobi={}),
    Variant("lantern++-jacobi", "LANTERN++, no drafter", "#006400", "lantern++",
            {"residual_kind": "published"}, "lam", jacobi={}),
)}
ALIASES = {"cool-sd-floor": "cool-sd"}  # old keys (share links, API calls) -> the variant they named
RACERS = [key for key, v in VARIANTS.items() if v.racer]  # the Race tab's choices, in this order (no drafter: last)
NO_DRAFTER = [key for key in RACERS if VARIANTS[key].no_drafter]  # the "no drafter" group of racers
COLOURS = {key: v.colour for key, v in VARIANTS.items()} | {a: VARIANTS[k].colour for a, k in ALIASES.items()}
assert rules.CoolSDRule.floor_at_one is VARIANTS["cool-sd"].fixed["floor_at_one"], "'cool-sd' is the rule's default"
assert RACERS[-len(NO_DRAFTER):] == NO_DRAFTER, "the no-drafter racers are one group, the last choices"
for _variant in VARIANTS.values():  # its strength and fixed options name fields of its rule (else: ValueError)
    _variant.rule_options(dict.fromkeys([*_variant.fixed, *[_variant.strength] * bool(_variant.strength)]))


def resolve(key) -> str:
    """The variant key for `key` or one of its ALIASES; ValueError for anything else."""
    key = ALIASES.get(key, key) if isinstance(key, str) else key
    if not isinstance(key, str) or key not in VARIANTS:
        raise ValueError(f"unknown decoder {show(key)}; choose one of {', '.join(VARIANTS)}")
    return key


def get(key) -> Variant:
    """The Variant named `key` (aliases resolved); ValueError for an unknown key."""
    return VARIANTS[resolve(key)]


def build(key, options: Mapping | None = None, neighbours: Tensor | None = None) -> Rule | None:
    """The rule variant `key` runs at `options` (rule field -> value, the rule's own names; left out: the rule's
    default; the variant's fixed options win) (None: vanilla AR); LANTERN rules get `neighbours`.

    An option the rule does not have, or a bad value, raises ValueError (the rule's own for a value). A LANTERN
    rule without a neighbour table is built (its checks run) but cannot decode until `with_neighbours`.
    """
    v = get(key)
    kwargs = v.rule_options(options)
    if v.rule is None:
        return None
    return rules.make_rule(v.rule, **kwargs).with_neighbours(neighbours)


def drafting(key, shared: Drafting, options: Mapping | None = None) -> Drafting:
    """The drafting variant `key` runs: for the "no drafter" group, Jacobi iteration at `options` (its fields:
    window, ...; left out: Jacobi's defaults) with the variant's fixed ones over them; else `shared` (the race's
    chain or tree). A bad option raises ValueError."""
    v = get(key)
    if v.jacobi is None:
        return shared
    try:
        return Jacobi(**(dict(options or {}) | v.jacobi))
    except TypeError as err:
        raise ValueError(f"{v.name}: bad Jacobi drafting options: {err}") from None


def at_strength(key, value: float, options: Mapping | None = None, neighbours: Tensor | None = None) -> Rule:
    """The rule of variant `key` with its strength field (delta, lam...) set to `value`, its other `options`
    kept (as in `build`); ValueError if the variant has no strength."""
    v = get(key)
    if v.strength is None:
        raise ValueError(f"{v.name} has no strength to set")
    return build(key, {**(options or {}), v.strength: value}, neighbours)


def variant_of(config: dict | None, drafting_config: dict | None = None) -> str | None:
    """The variant key of a (rule config, drafting config) pair (`Rule.config()`, `Drafting.config()`, or a
    benchmark's {"rule": slug, options}; no drafting config or a chain / tree: a drafter's drafting); None (no
    rule) -> "vanilla". Fields a config leaves out take the class's defaults. A pair that matches no variant's
    fixed options (e.g. COOL-SD with the lossless residual) -> None.
    """
    if config is None:
        return VANILLA
    if drafting_config is None:
        config, drafting_config = split_config(config)  # (a config from when Jacobi drafting was in the rule)
    slug = config.get("rule")
    if slug not in rules.RULES:
        return None
    fields = dataclasses.fields(rules.RULES[slug])
    defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    full = defaults | {k: v for k, v in config.items() if k != "rule"}
    jacobi = (drafting_config or {}).get("drafting") == Jacobi.name
    drafts = dataclasses.asdict(Jacobi()) | (drafting_config or {})
    for v in VARIANTS.values():
        if v.rule == slug and all(full.get(name) == value for name, value in v.fixed.items()) \
                and (v.jacobi is not None) == jacobi and all(drafts.get(k) == x for k, x in (v.jacobi or {}).items()):
            return v.key
    return None


OLD_JACOBI_RULES = {"sjd": "eagle-1", "cool-sd-jacobi": "cool-sd", "lantern++-jacobi": "lantern++"}


def racer_configs(row: dict) -> tuple[dict | None, dict | None]:
    """(rule config, drafting config) of a benchmark row or recorded racer ({"rule_config": ..., "drafting": ...});
    a row written before the drafting was recorded apart has its rule config split (`split_config`), and its
    drafting config is then None for a drafter's chain or tree (its "draft_len" and "tree" say which)."""
    drafting = row.get("drafting")
    return (row.get("rule_config"), drafting) if isinstance(drafting, dict) else split_config(row.get("rule_config"))


def split_config(config: dict | None) -> tuple[dict | None, dict | None]:
    """A racer's (rule config, drafting config) from a config recorded when Jacobi drafting was folded into the
    rule ({"rule": "sjd", "window": 8, "reuse": False, ...}); a plain rule config comes back with None."""
    if not config or config.get("rule") not in OLD_JACOBI_RULES:
        return config, None
    names = {f.name for f in dataclasses.fields(Jacobi)}
    rule = {"rule": OLD_JACOBI_RULES[config["rule"]]} | {k: v for k, v in config.items() if k not in names | {"rule"}}
    return rule, {"drafting": Jacobi.name} | {k: v for k, v in config.items() if k in names}
