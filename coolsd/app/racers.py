"""Which decoders race: the racer choices of the Race tab, read from the variant registry.

A racer is a named decoder variant (`coolsd.decoding.variants`: key, label, colour, how its rule is
built from the settings). Variants of one rule (LANTERN++ with its published or the G* residual;
COOL-SD floored at 1 or unclipped) share that rule's knobs, so they race at the same parameters.
Vanilla AR always races as the reference. Old keys still work (`variants.ALIASES`: "cool-sd-floor"
is COOL-SD, floored at 1, as it always was).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from coolsd.app.context import Context, bad
from coolsd.decoding import variants
from coolsd.decoding.knobs import RuleKnobs
from coolsd.decoding.knobs import parse_omegas as parse_omega_list
from coolsd.decoding.rules import Rule
from coolsd.util.checks import show

MAX_RACERS = 4  # vanilla AR races as well, always
RACERS = {key: variants.VARIANTS[key].label for key in variants.RACERS}  # key -> label; the order of the choices
VANILLA = (variants.VANILLA, variants.VARIANTS[variants.VANILLA].label)
DEFAULT_RACERS = ["eagle-1", "lantern++", "cool-sd"]
SLOTS = MAX_RACERS + 1  # the race's image panels: the chosen racers in order, vanilla AR always in the last one
VANILLA_SLOT = SLOTS - 1
DEFAULTS = {f: getattr(RuleKnobs(), f) for f in ("uniform_delta", "linear_delta", "linear_slope", "custom_omegas")}
RULE_SETTINGS = [f.name for f in dataclasses.fields(RuleKnobs) if f.name != "lantern_delta"]  # the race's rule knobs


def parse_omegas(text) -> tuple[float, ...]:
    """The custom omega list (`knobs.parse_omegas`: "2, 1, 0.5" or "2 1 0.5"), its error as one clear line."""
    try:
        return parse_omega_list(text)
    except ValueError as err:
        raise bad(f"{RACERS['custom']}: {err}") from None


def check_racers(value) -> list[str]:
    """A list of 1..MAX_RACERS distinct racer keys (old aliases accepted), else one clear error."""
    if isinstance(value, str):
        value = [v for v in value.split(",") if v]
    if not isinstance(value, (list, tuple)):
        raise bad(f"racers must be a list of racer names, got {show(value)}")
    keys = []
    for v in value:
        if not isinstance(v, str):
            raise bad(f"racers must be a flat list of racer names such as ['eagle-1', 'cool-sd'], got {show(value)}")
        key = variants.ALIASES.get(v, v)
        if key not in RACERS:
            raise bad(f"unknown racer {show(v)}; choose from {', '.join(RACERS)}")
        keys.append(key)
    if len(set(keys)) != len(keys):
        raise bad(f"each racer may race once, got {show(list(value))}")
    if not 1 <= len(keys) <= MAX_RACERS:
        raise bad(f"choose 1 to {MAX_RACERS} racers (vanilla AR always races), got {len(keys)}")
    return [k for k in RACERS if k in keys]  # the panels' order, whatever the order given


def make_racer_rule(ctx: Context, key: str, settings: Mapping) -> Rule:
    """The rule racer `key` runs at the race `settings` (name -> value; missing knobs at the rule's default);
    a rule's own ValueError becomes its clear error."""
    if key not in RACERS:
        raise bad(f"unknown racer {show(key)}; choose from {', '.join(RACERS)}")
    knobs = RuleKnobs(**{name: settings[name] for name in RULE_SETTINGS if name in settings})
    knobs = dataclasses.replace(knobs, custom_omegas=parse_omegas(knobs.custom_omegas)) if key == "custom" else knobs
    try:
        return variants.build(key, knobs, ctx.model.neighbours)
    except ValueError as err:
        raise bad(f"{RACERS[key]}: {err}") from None


def make_rules(ctx: Context, keys: list[str], settings: Mapping) -> dict[str, Rule]:
    """key -> rule for every chosen racer, in the given order, at the race `settings` (name -> value)."""
    return {key: make_racer_rule(ctx, key, settings) for key in keys}


def slot_keys(keys: list[str]) -> list[str | None]:
    """Racer key shown in each image slot (None = unused): the racers in order, vanilla AR last."""
    return [*keys, *[None] * (SLOTS - 1 - len(keys)), VANILLA[0]]
