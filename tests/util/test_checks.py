"""The value checks' bounds (`coolsd.util.checks`), on both sides of every bound (issue 27), in the one dialect of
the library and the app (issue 26).

Every bound is inclusive unless the check says "open": the bound itself passes, the nearest value past it
(one integer, or the next float) is refused with a message naming the parameter, the bounds and the value.
"""

from __future__ import annotations

import math

import pytest

from coolsd.util import checks


def past(x: float, direction: float) -> float:
    return math.nextafter(x, direction)


# ---------------------------------------------------------------- both bounds inclusive
@pytest.mark.parametrize("low, high", [(0.0, 1.0), (-2.5, 2.5), (1, 64)])
def test_check_number_keeps_both_bounds_and_refuses_the_next_float(low, high):
    assert checks.check_number("x", low, low, high) == low and checks.check_number("x", high, low, high) == high
    for value in (past(low, -math.inf), past(high, math.inf)):
        with pytest.raises(ValueError, match=r"^x must be in \[.*\], got "):
            checks.check_number("x", value, low, high)


@pytest.mark.parametrize("value, message", [
    (-1, "seed must be in [0, 2147483647], got -1"), (2**31, "seed must be in [0, 2147483647], got 2147483648"),
])
def test_check_int_messages_name_both_bounds(value, message):
    with pytest.raises(ValueError) as err:
        checks.check_int("seed", value, 0, 2**31 - 1)
    assert str(err.value) == message


def test_check_int_keeps_both_bounds():
    assert checks.check_int("k", 1, 1, 5) == 1 and checks.check_int("k", 5, 1, 5) == 5
    assert checks.check_int("k", 3.0, 1, 5) == 3 and type(checks.check_int("k", 3.0, 1, 5)) is int
    for value in (0, 6):
        with pytest.raises(ValueError, match=r"k must be in \[1, 5\]"):
            checks.check_int("k", value, 1, 5)
    with pytest.raises(ValueError, match="k must be a whole number, got 2.5"):
        checks.check_int("k", 2.5, 1, 5)


def test_unbounded_sides_and_bound_texts():
    assert checks.check_number("x", -1e300) == -1e300 and checks.check_number("x", 1e300, None, None) == 1e300
    assert checks.check_number("x", -1e300, None, 0) == -1e300 and checks.check_number("x", 1e300, 0, None) == 1e300
    with pytest.raises(ValueError, match=r"^x must be <= 0, got 0.5$"):
        checks.check_number("x", 0.5, None, 0)
    with pytest.raises(ValueError, match=r"^x must be >= 0, got -0.5$"):
        checks.check_number("x", -0.5, 0, None)
    with pytest.raises(ValueError, match=r"x must be in \[0.05, 1.5\], got 2"):
        checks.check_number("x", 2, 0.05, 1.5)


@pytest.mark.parametrize("value, message", [
    (True, "must be a number, got True"), ("1", "must be a number, got '1'"), (None, "must be a number, got None"),
    (math.inf, "must be a finite number, got inf"), (-math.inf, "must be a finite number, got -inf"),
    (math.nan, "must be a finite number, got nan"),
])
def test_check_number_types(value, message):
    with pytest.raises(ValueError, match=message):
        checks.check_number("x", value, 0, 1)


def test_an_integer_too_large_for_a_float_is_one_clear_error():
    """A JSON integer of 400 digits reaches a check as a Python int; math.isfinite(10**400) raises OverflowError,
    which would leave the handler as an unexpected error instead of a line naming the parameter."""
    for value in (10**400, -(10**400)):
        with pytest.raises(ValueError, match=r"^x must be a finite number, got -?10000"):
            checks.check_number("x", value, 0, 1)
        with pytest.raises(ValueError, match="seed must be a finite number"):
            checks.check_int("seed", value, 0, 2**31 - 1)
    assert checks.check_number("x", 2**1000) == float(2**1000)  # large, but a float holds it


def test_the_rules_refuse_an_integer_too_large_for_a_float():
    """The rule and config dataclasses give the usual ValueError for 10**400, not math.isfinite's OverflowError;
    the value is quoted short."""
    from coolsd.decoding.rules import CoolSDRule

    for value in (10**400, -(10**400)):
        with pytest.raises(ValueError, match=r"^delta must be a finite number, got -?1000") as err:
            CoolSDRule(delta=value)
        assert len(str(err.value)) < 80


def test_check_bool_is_exactly_true_or_false():
    assert checks.check_bool("b", True) is True and checks.check_bool("b", False) is False
    for value in (1, 0, 1.0, "true", "yes", None):
        with pytest.raises(ValueError, match="b must be true or false, got "):
            checks.check_bool("b", value)


def test_check_choice():
    assert checks.check_choice("class", 3, ["1", "3"]) == "3" and checks.check_choice("class", "1", ["1", "3"]) == "1"
    for value in (True, 2, "4", None, ["1"]):
        with pytest.raises(ValueError, match="unknown class "):
            checks.check_choice("class", value, ["1", "3"])
    with pytest.raises(ValueError, match=r"choose one of 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 \.\.\.$"):
        checks.check_choice("class", "x", [str(i) for i in range(13)])
    with pytest.raises(ValueError, match=r"choose one of 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11$"):
        checks.check_choice("class", "x", [str(i) for i in range(12)])
    assert checks.check_choice("tree", "a", ("a", "b")) == "a"
    with pytest.raises(ValueError, match=r"^unknown tree 'c'; choose one of a, b \(or chain\)$"):
        checks.check_choice("tree", "c", ("a", "b"), " (or chain)")


def test_show_cuts_at_forty_characters_and_strips_markup():
    assert checks.show("a" * 38) == "'" + "a" * 38 + "'"  # 40 characters: kept whole
    assert checks.show("a" * 39) == "'" + "a" * 36 + "..."  # 41: cut to 40
    assert len(checks.show("a" * 39)) == 40
    assert checks.show("<b>&") == "'‹b›＆'" and "<" not in checks.show("<" * 100)


# ---------------------------------------------------------------- an open lower bound, one-sided bounds, their texts
def test_check_number_low_closed_and_open():
    assert checks.check_number("delta", 0, 0) == 0 and checks.check_number("delta", 1e-300, 0, low_open=True) == 1e-300
    with pytest.raises(ValueError, match=r"^delta must be >= 0, got -1e-300$"):
        checks.check_number("delta", -1e-300, 0)
    with pytest.raises(ValueError, match=r"^delta must be > 0, got 0$"):
        checks.check_number("delta", 0, 0, low_open=True)
    assert checks.check_number("top_p", 1, 0, 1, low_open=True) == 1.0
    with pytest.raises(ValueError, match=r"^top_p must be in \(0, 1\], got 0$"):
        checks.check_number("top_p", 0, 0, 1, low_open=True)
    assert checks.check_number("x", -5) == -5.0  # no bound
    with pytest.raises(ValueError, match=r"^slope must be in \[0, 1\] \(1 falls to 0\), got 2$"):
        checks.check_number("slope", 2, 0, 1, bounds="in [0, 1] (1 falls to 0)")


def test_check_int_one_sided_and_worded_bounds():
    assert checks.check_int("n", 0, 0) == 0 and checks.check_int("n", 10**30, 0) == 10**30  # exact, not via a float
    with pytest.raises(ValueError, match=r"^n must be >= 0, got -1$"):
        checks.check_int("n", -1, 0)
    with pytest.raises(ValueError, match=r"^seed must be in \[0, 2\*\*63\), got 9223372036854775808$"):
        checks.check_int("seed", 2**63, 0, 2**63 - 1, bounds="in [0, 2**63)")
    for value in (True, "2", None):
        with pytest.raises(ValueError, match="n must be a number"):
            checks.check_int("n", value, 1, 3)


def test_predicates():
    assert checks.is_number(1) and checks.is_number(1.5) and not checks.is_number(True)
    assert checks.is_integer(1) and not checks.is_integer(1.0) and not checks.is_integer(False)
    assert checks.check_number("x", -0.0) == 0.0 and checks.check_number("x", 2**1000) == 2**1000


def test_one_line_writes_comparisons_in_words_and_no_markup_survives():
    assert checks.one_line("lam must be >= 1") == "lam must be ≥ 1"
    assert checks.one_line("x must be <= 2 and omega_2 must be > 0 or < 9") == (
        "x must be ≤ 2 and omega_2 must be above 0 or below 9")
    text = checks.one_line("got <b>x</b> &amp;\nmore")
    assert not any(c in text for c in "<>&\n") and text.startswith("got ‹b›x‹/b›")


# ---------------------------------------------------------------- what the mutation run found untested (issue 27)
def test_bounds_text_writes_each_kind_of_bound_closed_unless_told():
    """The wording of a bound on its own (check_number only asks for it with a bound set): closed by default,
    nothing at all when unbounded."""
    assert checks.bounds_text(None, None) == "" and checks.bounds_text(None, None, True) == ""
    assert checks.bounds_text(0, None) == ">= 0" and checks.bounds_text(0, None, True) == "> 0"
    assert checks.bounds_text(None, 1.5) == "<= 1.5" and checks.bounds_text(0, 1) == "in [0, 1]"


def test_check_bool_quotes_the_value_it_refused():
    for value, shown in ((1, "1"), ("yes", "'yes'"), (None, "None")):
        with pytest.raises(ValueError) as err:
            checks.check_bool("overlay", value)
        assert str(err.value) == f"overlay must be true or false, got {shown}"


@pytest.mark.parametrize("choices", [["True", "False"], [0, 1], (1, 2.0), ["1", "0", "True"]])
def test_a_bool_is_never_a_choice_even_where_one_equals_it(choices):
    """True == 1 and str(True) == "True" in Python; a dropdown of numbers (or of those words) still refuses a
    bool, as check_bool refuses a number."""
    for value in (True, False):
        with pytest.raises(ValueError, match=f"^unknown flag {value}; choose one of "):
            checks.check_choice("flag", value, choices)
    assert checks.check_choice("flag", 1, [0, 1]) == 1 and type(checks.check_choice("flag", 1, [0, 1])) is int


def test_one_line_turns_every_control_character_into_one_space():
    """Control characters that are not whitespace (NUL, ESC, a direction override) become spaces too, and runs
    of spaces fold into one."""
    assert checks.one_line("a\x00b\x1b[31mc\u202ed\n\te") == "a b [31mc d e"
    assert checks.one_line("line one\r\nline two") == "line one line two"


def test_one_line_cuts_at_three_hundred_characters_with_an_ellipsis():
    assert checks.MAX_MESSAGE_CHARS == 300
    assert checks.one_line("a" * 300) == "a" * 300  # exactly the limit: kept whole
    cut = checks.one_line("a" * 301)
    assert cut == "a" * 297 + "..." and len(cut) == 300
    assert checks.one_line("b" * 5000) == "b" * 297 + "..."


@pytest.mark.parametrize("a, b, same", [
    (3, 3.0, True), (3.0, 3, True), (0.5, 0.5, True), (2, 3, False),  # numbers by value
    ("a", "a", True), ("a", "b", False), (None, None, True), ([1], [1], True),
    (True, 1.0, False), (1, True, False), (False, 0, False), (True, True, True),  # a bool is no number, nor back
    ("3", 3, False), (3, "3", False), ([1], (1,), False),  # other types never
])
def test_same_value_compares_numbers_by_value_and_nothing_else_across_types(a, b, same):
    assert checks.same_value(a, b) is same
