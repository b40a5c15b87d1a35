"""Which decoders race: the racer choices, each a `coolsd.decoding.rules` rule built from the settings column.

A racer is a key (its slug in the API and the share link), a label, and the rule it runs, built
with `make_rule` from the race settings (`RuleParams`). Variants of one rule (LANTERN++ with its
published or the G* residual; COOL-SD unclipped or floored at 1) share that rule's knobs, so
they race at the same parameters. Vanilla AR always races as the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

from coolsd.app.context import Context, bad
from coolsd.decoding.rules import CustomScheduleRule, LinearDecayRule, Rule, UniformRSDRule, make_rule
from coolsd.util.checks import show

MAX_RACERS = 4  # vanilla AR races as well, always
RACERS = {  # key -> label; the order of the choices
    "eagle-1": "Eagle-1 (lossless)",
    "lantern++": "LANTERN++",
    "lantern++-gstar": "LANTERN++ (G* residual)",
    "uniform-rsd": "UniformRSD",
    "linear-decay": "Linear decay",
    "cool-sd": "COOL-SD",
    "cool-sd-floor": "COOL-SD (floored at 1)",
    "custom": "Custom schedule",
}
VANILLA = ("vanilla", "Vanilla AR (reference)")
DEFAULT_RACERS = ["eagle-1", "lantern++", "cool-sd"]
SLOTS = MAX_RACERS + 1  # the race's image panels: the chosen racers in order, vanilla AR always in the last one
VANILLA_SLOT = SLOTS - 1
DEFAULTS = {"uniform_delta": UniformRSDRule().delta, "linear_delta": LinearDecayRule().delta,
            "linear_slope": LinearDecayRule().slope,
            "custom_omegas": ", ".join(f"{w:g}" for w in CustomScheduleRule().omegas)}


@dataclass(frozen=True)
class RuleParams:
    """The rule knobs of the settings column (already range-checked by their components)."""

    delta: float
    nu: float
    mu: float
    mean_omega: bool
    lantern_k: int
    lantern_lambda: float
    uniform_delta: float = DEFAULTS["uniform_delta"]
    linear_delta: float = DEFAULTS["linear_delta"]
    linear_slope: float = DEFAULTS["linear_slope"]
    custom_omegas: str = DEFAULTS["custom_omegas"]


def parse_omegas(text) -> tuple[float, ...]:
    """"2, 1, 0.5" -> (2.0, 1.0, 0.5); anything else -> a clear error (the rule checks the values)."""
    if not isinstance(text, str):
        raise bad(f"the custom omega list must be text such as '2, 1, 0.5', got {show(text)}")
    parts = [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]
    try:
        return tuple(float(p) for p in parts)
    except ValueError:
        raise bad(f"the custom omega list must be numbers separated by commas, got {show(text)}") from None


def check_racers(value) -> list[str]:
    """A list of 1..MAX_RACERS distinct racer keys, else one clear error."""
    if isinstance(value, str):
        value = [v for v in value.split(",") if v]
    if not isinstance(value, (list, tuple)):
        raise bad(f"racers must be a list of racer names, got {show(value)}")
    for v in value:
        if not isinstance(v, str):
            raise bad(f"racers must be a flat list of racer names such as ['eagle-1', 'cool-sd'], got {show(value)}")
        if v not in RACERS:
            raise bad(f"unknown racer {show(v)}; choose from {', '.join(RACERS)}")
    if len(set(value)) != len(value):
        raise bad(f"each racer may race once, got {show(list(value))}")
    if not 1 <= len(value) <= MAX_RACERS:
        raise bad(f"choose 1 to {MAX_RACERS} racers (vanilla AR always races), got {len(value)}")
    return [k for k in RACERS if k in value]  # the panels' order, whatever the order given


def make_racer_rule(ctx: Context, key: str, p: RuleParams) -> Rule:
    """The rule racer `key` runs at the settings `p`; a rule's own ValueError becomes its clear error."""
    try:
        if key == "eagle-1":
            return make_rule("eagle-1")
        if key in ("lantern++", "lantern++-gstar"):
            kind = "optimal" if key == "lantern++-gstar" else "published"
            rule = make_rule("lantern++", k=p.lantern_k, lam=p.lantern_lambda, residual_kind=kind)
            return rule.with_neighbours(ctx.model.neighbours)
        if key == "uniform-rsd":
            return make_rule("uniform-rsd", delta=p.uniform_delta)
        if key == "linear-decay":
            return make_rule("linear-decay", delta=p.linear_delta, slope=p.linear_slope)
        if key in ("cool-sd", "cool-sd-floor"):
            return make_rule("cool-sd", delta=p.delta, nu=p.nu, mu=None if p.mean_omega else p.mu,
                             floor_at_one=key == "cool-sd-floor")
        if key == "custom":
            return make_rule("custom", omegas=parse_omegas(p.custom_omegas))
    except ValueError as err:
        raise bad(f"{RACERS[key]}: {err}") from None
    raise bad(f"unknown racer {show(key)}; choose from {', '.join(RACERS)}")


def make_rules(ctx: Context, keys: list[str], p: RuleParams) -> dict[str, Rule]:
    """key -> rule for every chosen racer, in the given order."""
    return {key: make_racer_rule(ctx, key, p) for key in keys}


def slot_keys(keys: list[str]) -> list[str | None]:
    """Racer key shown in each image slot (None = unused): the racers in order, vanilla AR last."""
    return [*keys, *[None] * (SLOTS - 1 - len(keys)), VANILLA[0]]
