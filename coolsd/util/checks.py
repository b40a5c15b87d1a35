"""Value checks shared by every layer: each raises a ValueError whose message names the parameter.

One dialect for the library's own arguments (rule and config dataclasses) and for the values a user or a
client sends (app controls, API arguments, share links): `check_number`, `check_int`, `check_bool`,
`check_choice`. A message says the one thing that is wrong, in this order: the kind ("delta must be a
number, got '2'"), finiteness ("... must be a finite number, got inf"), wholeness ("seed must be a whole
number, got 2.5"), then the bounds, written as they are: "delta must be > 0, got 0", "nu must be >= 0",
"slope must be in [0, 1]", "top_p must be in (0, 1]". A whole float (3.0, what a JSON client or a number box
sends) is an integer; `check_int` returns it as an int.

The app wraps these messages in its one-line `gr.Error` (`coolsd.app.context.user_errors`); nothing here knows
about Gradio. User input quoted in a message goes through `show`: a short repr without markup characters, so
a message reads the same as plain text (API clients) and as HTML (the page); `one_line` makes any message a
visitor's error (one plain line, at most MAX_MESSAGE_CHARS); `same_value` compares a visitor's value with a
default without Python's True == 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def is_number(value) -> bool:
    """A real int or float (bool excluded: True is not a number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_integer(value) -> bool:
    """A real int (bool excluded)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite(value) -> bool:
    """Whether a real number (int or float) is finite; an int too large for a float is not (float(10**400)
    overflows: math.isfinite would raise OverflowError)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


# The three characters that make markup, swapped for look-alikes that read the same as text and as HTML.
PLAIN = str.maketrans({"<": "‹", ">": "›", "&": "＆"})
SHOWN_CHARS = 40  # user input is quoted in a message up to this many characters


def plain(text) -> str:
    """`text` as a string without markup characters (see PLAIN)."""
    return str(text).translate(PLAIN)


def show(value) -> str:
    """A short repr of user input for a message: plain text, cut at SHOWN_CHARS characters."""
    text = repr(value)
    return plain(text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "...")


MAX_MESSAGE_CHARS = 300  # an error a visitor sees: one line, at most this many characters


def one_line(message) -> str:
    """`message` as a visitor's error: plain text (">=", "<=", " > ", " < " written as "≥", "≤", " above ",
    " below "; other markup characters as PLAIN), control characters and line breaks as spaces, cut at
    MAX_MESSAGE_CHARS characters."""
    words = str(message).replace(">=", "≥").replace("<=", "≤").replace(" > ", " above ").replace(" < ", " below ")
    text = " ".join("".join(c if c.isprintable() else " " for c in plain(words)).split())
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."


def same_value(a, b) -> bool:
    """Whether a visitor's value `a` is the value `b`: numbers by value (3 == 3.0), anything else only when of one
    type, so a bool never passes for a number (True == 1.0 in Python) nor a number for a bool."""
    if is_number(a) and is_number(b):
        return a == b
    return type(a) is type(b) and a == b


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def bounds_text(minimum: float | None, maximum: float | None, low_open: bool = False) -> str:
    """How a message writes the bounds: ">= 0", "> 0", "<= 1", "in [0, 1]", "in (0, 1]"; "" when unbounded."""
    if minimum is None:
        return "" if maximum is None else f"<= {_bound(maximum)}"
    if maximum is None:
        return f"{'>' if low_open else '>='} {_bound(minimum)}"
    return f"in {'(' if low_open else '['}{_bound(minimum)}, {_bound(maximum)}]"


def check_number(name: str, value, minimum: float | None = None, maximum: float | None = None, *,
                 low_open: bool = False, bounds: str | None = None) -> float:
    """A finite real number (not a bool) within [minimum, maximum] (None: unbounded; low_open: > minimum), as a
    float. bounds: the message's wording of the bounds when it says more ("in [0, 1] (1 falls to 0)")."""
    if not is_number(value):
        raise ValueError(f"{name} must be a number, got {show(value)}")
    if not is_finite(value):  # also an int too large for a float (a 400-digit JSON integer)
        raise ValueError(f"{name} must be a finite number, got {show(value)}")
    if ((minimum is not None and (value <= minimum if low_open else value < minimum))
            or (maximum is not None and value > maximum)):
        raise ValueError(f"{name} must be {bounds or bounds_text(minimum, maximum, low_open)}, got {show(value)}")
    return float(value)


def check_int(name: str, value, minimum: int | None = None, maximum: int | None = None, *,
              bounds: str | None = None) -> int:
    """A whole number (an int, or a float with no fraction such as 3.0) within [minimum, maximum], as an int."""
    number = check_number(name, value)  # the kind and finiteness messages first, then wholeness, then range
    if not number.is_integer():
        raise ValueError(f"{name} must be a whole number, got {show(value)}")
    check_number(name, value, minimum, maximum, bounds=bounds)
    return int(value)


def check_bool(name: str, value) -> bool:
    """True or False exactly (JSON true/false); anything else, 1 and "yes" included, is refused."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {show(value)}")
    return value


def check_choice(name: str, value, choices: Sequence, suffix: str = ""):
    """`value` when it is one of `choices` (an int also matches its string: 3 and "3" name the same class), else
    "unknown <name> ...; choose one of a, b<suffix>" (the first 12 choices)."""
    if isinstance(value, int) and not isinstance(value, bool) and str(value) in choices:
        value = str(value)
    hashable = isinstance(value, (str, int, float)) and not isinstance(value, bool)
    if not hashable or value not in choices:
        shown = ", ".join(map(str, list(choices)[:12])) + (" ..." if len(choices) > 12 else "")
        raise ValueError(f"unknown {name} {show(value)}; choose one of {shown}{suffix}")
    return value
