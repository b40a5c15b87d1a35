"""The one number formatter of the pages and reports: a value in a format spec, or a dash when it is missing."""

from __future__ import annotations

import numbers

from coolsd.util.checks import is_finite

MISSING = "–"  # what a missing or non-finite value reads as
SUBSCRIPT_DIGITS = dict(zip("0123456789", "₀₁₂₃₄₅₆₇₈₉"))


def shown(value) -> bool:
    """Whether `number` writes `value` as digits: a finite real number (numpy scalars too; a bool is not one)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and is_finite(value)


def number(value, spec: str = ".2f", suffix: str = "", missing: str = MISSING) -> str:
    """`value` formatted by `spec` plus `suffix` ("2.35×"); `missing` for None, a non-number or a non-finite one."""
    return format(value, spec) + suffix if shown(value) else missing


def small(value, digits: int = 4) -> str:
    """A probability-like value with `digits` decimals, or in scientific notation when it is below 10^-3 (not 0)."""
    if shown(value) and value != 0 and abs(value) < 1e-3:
        return format(value, ".2e")
    return number(value, f".{digits}f")


def subscript(n: int) -> str:
    """`n` in subscript digits: 12 -> "₁₂" (a label can write ω₁ where markup cannot)."""
    return "".join(SUBSCRIPT_DIGITS[d] for d in str(n))


def percent(value, digits: int = 0, missing: str = MISSING) -> str:
    """A share in [0, 1] as a percentage with `digits` decimals and " %", rounded half up from the value as written
    (0.885 -> "89 %", as a reader rounds it; float formatting would give 88 or 89 by the binary value): the one
    rounding of shares on the page, the model cards and the docs (tests/app/test_docs_figures.py checks it)."""
    from decimal import ROUND_HALF_UP, Decimal

    if not shown(value):
        return missing
    scaled = Decimal(repr(float(value))) * 100
    return f"{scaled.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)} %"
