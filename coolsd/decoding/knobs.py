"""The rule knobs: `RuleKnobs`, one setting per rule field a front end moves, and the omega-list grammar.

A rule's own fields, their defaults and the bounds a control offers live on its dataclass
(`coolsd.decoding.rules`, `rules.knob`). `RuleKnobs` puts the knobs of every rule side by side (the race's
argument names: `lantern_lambda` is LANTERN++'s `lam`), so one set of settings runs several rules at once.
Each of its fields names the rule field it sets and takes that field's default, so nothing is typed twice;
`options(rule)` reads the fields of one rule back. The named variants (`coolsd.decoding.variants`) build
their rules from these options plus their own fixed ones.

    RuleKnobs(delta=1.1).options("cool-sd")                  # {"delta": 1.1, "nu": 0.7, "mu": None}
    RuleKnobs(lantern_k=3).options("lantern")                # {"k": 3, "delta": 0.1}
    parse_omegas("2 1 0.5") == parse_omegas("2, 1, 0.5") == (2.0, 1.0, 0.5)
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from coolsd.decoding.rules import (
    CoolSDRule,
    CustomScheduleRule,
    LanternPPRule,
    LanternRule,
    LinearDecayRule,
    Rule,
    UniformRSDRule,
)
from coolsd.util.checks import show


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
        raise ValueError(f"the omega list must be numbers such as '2, 1, 0.5', got {show(value)}")
    values = []
    for part in parts:
        if isinstance(part, bool):
            raise ValueError(f"the omega list must hold numbers, got {show(part)}")
        try:
            number = float(part)
        except (TypeError, ValueError):
            raise ValueError(f"the omega list: {show(part)} is not a number; write numbers separated by commas "
                             "or spaces, e.g. 2, 1, 0.5") from None
        if not math.isfinite(number):
            raise ValueError(f"the omega list must be finite numbers, got {show(part)}")
        values.append(number)
    if not values:
        raise ValueError("the omega list is empty: give at least one number (omega_1), e.g. 2, 1, 0.5")
    return tuple(values)


def format_omegas(omegas) -> str:
    """(2.0, 1.0, 0.5) -> "2, 1, 0.5" (what `parse_omegas` reads back)."""
    return ", ".join(f"{w:g}" for w in omegas)


# ---------------------------------------------------------------- the knobs of every rule, side by side
def sets(name: str, *rules: type[Rule], default=dataclasses.MISSING, read: Callable | None = None):
    """A RuleKnobs field that sets field `name` of each of `rules`. default: the first rule's (read from its
    dataclass) unless given; read(knobs): the value the rules get, when it is not the knob's own."""
    if default is dataclasses.MISSING:
        default = {f.name: f for f in dataclasses.fields(rules[0])}[name].default
    return field(default=default, metadata={"sets": name, "rules": tuple(r.name for r in rules), "read": read})


@dataclass(frozen=True)
class RuleKnobs:
    """The rule knobs of a decode's settings (the race's argument names); defaults = the rule dataclasses'.

    mu is used only when mean_omega is off (mean_omega on: mu mean-normalised, the rule's mu=None).
    custom_omegas: text or numbers, read with `parse_omegas`. lantern_k is the k of LANTERN++ and LANTERN;
    lantern_delta: LANTERN's (not ++) absolute budget. The order of the fields is the race's argument order
    (positional construction stays valid).
    """

    delta: float = sets("delta", CoolSDRule)
    nu: float = sets("nu", CoolSDRule)
    mu: float = sets("mu", CoolSDRule, default=0.0, read=lambda k: None if k.mean_omega else k.mu)
    mean_omega: bool = CoolSDRule.mu is None  # (read by mu)
    lantern_k: int = sets("k", LanternPPRule, LanternRule)
    lantern_lambda: float = sets("lam", LanternPPRule)
    uniform_delta: float = sets("delta", UniformRSDRule)
    linear_delta: float = sets("delta", LinearDecayRule)
    linear_slope: float = sets("slope", LinearDecayRule)
    custom_omegas: str | tuple[float, ...] = sets("omegas", CustomScheduleRule,
                                                  default=format_omegas(CustomScheduleRule.omegas),
                                                  read=lambda k: parse_omegas(k.custom_omegas))
    lantern_delta: float = sets("delta", LanternRule)

    def options(self, rule: str | None) -> dict:
        """The fields these knobs set on rule `rule` (a slug of `rules.RULES`; None or a rule without knobs: {}).
        Only that rule's knobs are read, so a bad custom list does not stop COOL-SD."""
        out = {}
        for f in dataclasses.fields(self):
            if rule in f.metadata.get("rules", ()):
                read = f.metadata["read"]
                out[f.metadata["sets"]] = read(self) if read else getattr(self, f.name)
        return out
