"""The one number formatter (`coolsd.util.format`): digits for a finite real number, numpy scalars too, a dash for
anything else; the benchmark's tables use it with their own dash (issue 26)."""

from __future__ import annotations

import math

import numpy as np

from coolsd.bench import report
from coolsd.util.format import MISSING, number, small, subscript


def test_number_writes_finite_reals_and_a_dash_for_the_rest():
    assert number(2.345) == "2.35" and number(3, ".1f", "×") == "3.0×" and number(np.float32(2.25)) == "2.25"
    assert number(np.int64(7), "d") == "7" and number(10**400, "d") == MISSING  # too large for a float: no error
    for value in (None, math.nan, math.inf, -math.inf, True, "2", np.bool_(True)):
        assert number(value) == MISSING and number(value, missing="-") == "-"


def test_small_switches_to_scientific_below_a_thousandth():
    assert small(0.5) == "0.5000" and small(0.0) == "0.0000" and small(2e-4) == "2.00e-04" and small(None) == MISSING
    assert subscript(12) == "₁₂"


def test_the_benchmark_tables_write_a_hyphen_for_a_missing_value():
    assert report._f(None) == report._f(math.nan) == "-" and report._f(1.234, ".1f") == "1.2"
    assert report._f(np.float64(3.0)) == "3.00" and report._f(4) == "4.00"
