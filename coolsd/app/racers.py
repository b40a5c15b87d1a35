"""The Race tab's racer choices (`coolsd.decoding.variants`; variants of a rule race at its settings, the "no drafter"
group last, vanilla AR always). Old keys work (`variants.ALIASES`: "cool-sd-floor" is COOL-SD, floored at 1)."""

from __future__ import annotations

from coolsd.app.context import bad
from coolsd.decoding import variants
from coolsd.decoding.omega_text import parse_omegas as parse_omega_list
from coolsd.util.checks import show

MAX_RACERS = 4  # vanilla AR races as well, always
RACERS = {key: variants.VARIANTS[key].label for key in variants.RACERS}  # key -> label; the order of the choices
NO_DRAFTER = list(variants.NO_DRAFTER)  # the "no drafter" group (the target drafts for itself), the last choices
VANILLA = (variants.VANILLA, variants.VARIANTS[variants.VANILLA].label)
DEFAULT_RACERS = ["eagle-1", "lantern++", "cool-sd"]
SLOTS = MAX_RACERS + 1  # the race's image panels: the chosen racers in order, vanilla AR always in the last one
VANILLA_SLOT = SLOTS - 1


def parse_omegas(text) -> tuple[float, ...]:
    """The custom omega list (`rules.parse_omegas`: "2, 1, 0.5" or "2 1 0.5"), its error as one clear line."""
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


def slot_keys(keys: list[str]) -> list[str | None]:
    """Racer key shown in each image slot (None = unused): the racers in order, vanilla AR last."""
    return [*keys, *[None] * (SLOTS - 1 - len(keys)), VANILLA[0]]
