"""How a visitor names a condition and which engine condition it means: the one place that turns a class, a
style, an emoji name or a prompt into what `decode(..., cond=...)` takes.

A class-conditional model has one name per class (`classes`: MNIST "0".."9", emoji lower-case CLDR names
such as "red apple"), optionally S drawing styles (engine condition = class * S + style) and a Unicode
group per class (the picker's filter). `resolve` accepts, in this order: an engine condition id (an int,
or digits for a model whose names are not digits), a "<class> · <style>" label, or a class name with a
style (none or "": the first style). A name is matched without regard to case, spaces or hyphens, and a
typo is forgiven when one known name is clearly the closest (stdlib `difflib`); anything else is one
ValueError line that suggests the closest names. A text model takes a prompt (its own check, length cap).

    names = Conditions(classes=("red apple", "cat face"), styles=("Twemoji", "Noto"))
    names.resolve("cat face", "Noto") == 3 == names.resolve("Cat  Face · Noto") == names.resolve("cat fase", "Noto")
    names.label(3) == "cat face · Noto"
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coolsd.util.checks import is_integer, one_line, show

STYLE_SEP = " · "  # a styled model's condition labels: "<class> · <style>"
MATCH_CUTOFF = 0.75  # (choice) difflib ratio a typo must reach to be read as a known name ...
MATCH_MARGIN = 0.1  # ... and by how much it must beat the next closest name (else: suggestions, no guess)
SUGGEST_CUTOFF = 0.5  # (choice) how close a name must be to be suggested
SUGGESTIONS = 3  # closest names an unknown name's error suggests
MAX_NAME_CHARS = 100  # longer text names no class: no fuzzy matching (its cost grows with the text)


def _key(text: str) -> str:
    """A name as compared: lower case, hyphens, underscores and runs of spaces made one space."""
    return re.sub(r"[\s_\-]+", " ", text.strip().lower())


@dataclass(frozen=True)
class Conditions:
    """The condition names of one model.

    kind: "class" or "text"; classes: one name per class; styles: S style names (() without styles);
    groups: one group name per class (() without groups); check_prompt: a text model's own prompt check
    (returns the text to use, ValueError for the visitor); max_prompt_chars: the prompt's length cap.
    """

    classes: tuple[str, ...] = ()
    styles: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    kind: str = "class"
    check_prompt: Callable[[str], str] | None = None
    max_prompt_chars: int = 300

    def __post_init__(self) -> None:
        if self.groups and len(self.groups) != len(self.classes):
            raise ValueError(f"class_groups must name one group per class: {len(self.groups)} groups for "
                             f"{len(self.classes)} classes")

    @property
    def noun(self) -> str:
        """What a class is called in messages: "digit" (MNIST), "emoji" (styled models), else "class"."""
        if self.styles:
            return "emoji"
        return "digit" if self.classes and all(c.isdigit() for c in self.classes) else "class"

    @property
    def count(self) -> int:
        """Engine conditions: classes x styles (0 for a text model)."""
        return len(self.classes) * max(1, len(self.styles))

    def label(self, cond: int) -> str:
        """The name of engine condition `cond`: "<class> · <style>" for a styled model, else the class name."""
        if not self.styles:
            return self.classes[cond]
        c, s = divmod(cond, len(self.styles))
        return f"{self.classes[c]}{STYLE_SEP}{self.styles[s]}"

    def labels(self) -> list[str]:
        """Every engine condition's label, by id."""
        return [self.label(i) for i in range(self.count)]

    def in_group(self, group: str | None) -> list[str]:
        """The class names of `group` (None, "" or an unknown group: every class), in id order."""
        if not group or not self.groups or group not in self.groups:
            return list(self.classes)
        return [c for c, g in zip(self.classes, self.groups) if g == group]

    def _scores(self, text: str) -> list[tuple[float, str]]:
        """(similarity in [0, 1], class name) for every class, best first (difflib's ratio, both ways round)."""
        key = _key(text)
        scores = [(max(_ratio(key, _key(c)), _ratio(_key(c), key)), c) for c in self.classes]
        return sorted(scores, key=lambda sc: -sc[0])

    def closest(self, text: str, n: int = SUGGESTIONS) -> list[str]:
        """Up to `n` known class names closest to `text` (best first; may be empty)."""
        words = _key(text).split()
        similar = [c for score, c in self._scores(text) if score >= SUGGEST_CUTOFF]
        word_like = [c for c in self.classes  # a word of the text close to a word of the name ("rockettt")
                     if any(_ratio(w, v) >= MATCH_CUTOFF for w in words for v in _key(c).split())]
        return list(dict.fromkeys(similar[:n] + word_like))[:n]

    def nearest(self, text: str, n: int = SUGGESTIONS) -> list[str]:
        """The `n` class names most similar to `text` however far (difflib's ratio, best first); [] when no name
        shares a single character with it. For a text no name is close to (`closest` is empty)."""
        return [c for score, c in self._scores(text[:MAX_NAME_CHARS]) if score > 0][:n]

    def match(self, text: str) -> str | None:
        """The class `text` names: exact up to case, spaces and hyphens; else the one class holding it as whole
        words ("apple" -> "red apple"); else a typo of one class clearly closer than any other."""
        keys = {_key(c): c for c in self.classes}
        key = _key(text)
        if key in keys:
            return keys[key]
        holding = [c for k, c in keys.items() if re.search(rf"(^| ){re.escape(key)}( |$)", k)] if key else []
        if len(holding) == 1:
            return holding[0]
        (best, name), second = (self._scores(text) + [(0.0, ""), (0.0, "")])[:2]
        if best >= MATCH_CUTOFF and best - second[0] >= MATCH_MARGIN:
            return name
        return None

    def style_index(self, style) -> int:
        """The index of `style` (None or "": the first), matched like a class name; ValueError naming the styles."""
        if style is None or style == "":
            return 0
        if not isinstance(style, str):
            raise ValueError(f"style must be a text such as {show(self.styles[0])}, got {show(style)}")
        keys = [_key(s) for s in self.styles]
        if _key(style) in keys:
            return keys.index(_key(style))
        raise ValueError(f"unknown style {show(style)}; choose one of {', '.join(self.styles)}")

    def is_id(self, condition) -> bool:
        """Whether `resolve` reads `condition` as an engine condition id: an int, or digits for a class model
        whose names are not digits (a digit model's "11" is an unknown digit)."""
        return self.kind == "class" and (is_integer(condition) or (
            isinstance(condition, str) and condition.strip().isdigit() and self.noun != "digit"))

    def resolve(self, condition, style=None):
        """The engine condition a visitor's `condition` (and `style`) means: an int id for a class model, the
        checked prompt for a text model; else a one-line ValueError (an unknown name gets the closest ones)."""
        if self.kind == "text":
            return self._prompt(condition)
        if self.is_id(condition):
            cond = int(condition)
            if not 0 <= cond < self.count:
                raise ValueError(f"condition id must be in [0, {self.count - 1}], got {show(condition)}")
            return cond
        if not isinstance(condition, str) or not condition.strip():
            raise ValueError(f"the {self.noun} must be a name such as {show(self.classes[0])}, got {show(condition)}")
        if self.styles and STYLE_SEP.strip() in condition:
            condition, style = (part.strip() for part in condition.rsplit(STYLE_SEP.strip(), 1))
        name = self.match(condition) if len(condition) <= MAX_NAME_CHARS else None
        if name is None:
            raise ValueError(f"unknown {self.noun} {show(condition)}{self._hint(condition)}")
        cls = self.classes.index(name)
        if not self.styles:
            return cls
        return cls * len(self.styles) + self.style_index(style)

    def _hint(self, text: str) -> str:
        """What an unknown name's error adds: "; did you mean 'a' or 'b'?" (names close to it), else "; none is
        close, the closest names: 'a', 'b', 'c'" (however far), else (no name shares a character) the first names."""
        near = self.closest(text) if len(text) <= MAX_NAME_CHARS else []
        if near:
            return f"; did you mean {' or '.join(show(n) for n in near)}?"
        nearest = self.nearest(text)
        if nearest:
            return f"; none is close, the closest names: {', '.join(show(n) for n in nearest)}"
        return f"; choose one of {', '.join(self.classes[:12])}{', ...' if len(self.classes) > 12 else ''}"

    def _prompt(self, text) -> str:
        if not isinstance(text, str) or not text.strip():
            raise ValueError("the prompt must be a non-empty text")
        if len(text) > self.max_prompt_chars:
            raise ValueError(f"the prompt is too long: {len(text)} characters (at most {self.max_prompt_chars})")
        return self.check_prompt(text) if self.check_prompt is not None else text.strip()

    def split(self, cond: int) -> tuple[str, str]:
        """(class name, style name) of engine condition `cond` (style "" without styles)."""
        if not self.styles:
            return self.classes[cond], ""
        c, s = divmod(cond, len(self.styles))
        return self.classes[c], self.styles[s]


def _ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def from_names(names: Sequence[str], styles: Sequence[str] = (), groups: Sequence[str] = ()) -> Conditions:
    """Conditions of a class model from its config's lists (`class_names`, `style_names`, `class_groups`)."""
    return Conditions(tuple(names), tuple(styles), tuple(groups))


def name_choices(names: Conditions, chars: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(label, name) of every class: with one character per class (an emoji model's `class_chars`), each name is
    shown after its character ("🐱 cat face"); else the name alone."""
    chars = chars if len(chars) == len(names.classes) else [""] * len(names.classes)
    return [(f"{c} {n}".strip(), n) for n, c in zip(names.classes, chars)]


def name_notice(names: Conditions, typed, condition: str) -> str:
    """"rockit: showing rocket" when the class name a visitor typed (`typed`, as sent) was read as another class,
    `condition` (a typo forgiven, or a word held by one name alone: "apple: showing red apple"); "" when it names
    its class (up to case, spaces, hyphens and underscores), is an engine id, a prompt, or not text."""
    if names.kind != "class" or not isinstance(typed, str) or names.is_id(typed):
        return ""
    name = (typed.rsplit(STYLE_SEP.strip(), 1)[0] if names.styles else typed).strip()  # "<class> · <style>"
    if names.match(name) != condition or _key(name) == _key(condition):
        return ""  # (another model's default class replaced by this one's is no reading of the text)
    return one_line(f"{name}: showing {condition}")  # (plain text: no markup of the visitor's)


def default_condition(names: Conditions, default_class: str | None = None, prompts: Sequence[str] = ()
                      ) -> tuple[str, str]:
    """(class, style) a page starts from: `default_class` when it is one of the classes (a model naming its own:
    "cat face"), else the class of engine condition 3, each in the first style (style "" without styles); a
    text model: (the first of `prompts`, "")."""
    if names.kind == "text":
        return (prompts[0] if prompts else ""), ""
    if default_class in names.classes:
        return default_class, (names.styles or ("",))[0]
    return names.split(3 % names.count)
