"""What the model's own classifier sees in each finished picture of a race (`coolsd.compare.recognise`) and the
caption under it; `Judge` loads a model's classifier on first use and runs it under a lock (shared by lab and races)."""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch

from coolsd.bench import delta_sweep
from coolsd.compare.likeness import BROKEN_BELOW, broken, likeness
from coolsd.compare.recognise import recognise, shipped_classifier, shipped_real_pictures
from coolsd.models.conditions import STYLE_SEP
from coolsd.util.checks import plain
from coolsd.util.format import percent

UNLOADED = object()
CACHE_SIZE = 512  # readings kept by their pictures' tokens (a few hundred bytes each)


class Judge:
    """A ModelBundle's classifier (its own, else `load(kind)`, or None), its `real(kind)` pictures and readings."""

    def __init__(self, model, load=shipped_classifier, real=shipped_real_pictures) -> None:
        self.names = model.conditions if model.conditioning == "class" else None
        self.chars = list(model.class_chars)
        self.kind, self._load, self._load_real = model.kind, load, real
        self._classifier = model.classifier if model.classifier is not None else UNLOADED
        self._real = UNLOADED
        self._lock = threading.Lock()
        self._seen: OrderedDict[tuple, dict | None] = OrderedDict()  # (classifier, tokens, asked) -> reading

    @property
    def classifier(self):
        """The classifier (loaded now when this is its first use), or None without one."""
        with self._lock:
            if self._classifier is UNLOADED:
                self._classifier = self._load(self.kind) if self.names is not None else None
            return self._classifier

    def real(self, asked) -> torch.Tensor | None:
        """The real picture (C, H, W) in [0, 1] of engine condition `asked`, or None."""
        with self._lock:
            if self._real is UNLOADED:
                self._real = self._load_real(self.kind) if self.names is not None else None
        return None if self._real is None or asked is None else self._real.of(asked)

    @property
    def vanilla_broken(self) -> float | None:
        """The share of vanilla AR's pictures called broken in the model's δ sweep, or None without one."""
        vanilla = delta_sweep.reference(sweep, None) if (sweep := delta_sweep.load(self.kind)) else None
        return None if vanilla is None else vanilla["broken"]

    def use(self, classifier) -> None:
        """Judge with `classifier` from now on (tests, tools: e.g. a digit classifier for the tiny model)."""
        with self._lock:
            self._classifier = classifier
            self._seen.clear()

    def read(self, images: list[torch.Tensor], asked) -> list[dict | None]:
        """Each (C, H, W) [0, 1] picture's `Reading.describe` dict (+ "likeness", "broken" given a real picture)."""
        classifier = self.classifier
        if classifier is None or not images:
            return [None] * len(images)
        with self._lock:  # (one forward at a time: the lab's threads and the races share the model)
            pictures = torch.stack([im.float().cpu() for im in images])
            readings = [r.describe(self.names, asked) for r in recognise(classifier, pictures)]
        real = self.real(asked)
        if real is None or real.shape != pictures.shape[1:]:  # (the threshold holds at the real picture's size)
            return readings
        values = likeness(pictures, real.expand_as(pictures)).tolist()
        return [r | {"likeness": v, "broken": broken(v)} for r, v in zip(readings, values)]

    def judge(self, grids: list[torch.Tensor], asked, decode) -> list[dict | None]:
        """`read` of each (T,) ids `decode`d, alone and cached by tokens (a batch's floats depend on its neighbours)."""
        classifier = self.classifier
        if classifier is None:
            return [None] * len(grids)
        out = []
        for tokens in grids:
            key = (id(classifier), tokens.cpu().numpy().tobytes(), asked)
            with self._lock:
                hit = self._seen.get(key, UNLOADED)
            if hit is UNLOADED:
                hit = self.read([decode(tokens)], asked)[0]
                with self._lock:
                    self._seen[key] = hit
                    while len(self._seen) > CACHE_SIZE:
                        self._seen.popitem(last=False)
            out.append(hit)
        return out

    def asked(self, label) -> int | None:
        """The engine condition a recorded `condition` label names; None (no verdict) for text or unreadable."""
        if self.names is None:
            return None
        try:
            return int(self.names.resolve(label))
        except (ValueError, TypeError):
            return None

    def char(self, name: str) -> str:
        """The emoji character of class `name` ("" for models without characters)."""
        classes = self.names.classes if self.names is not None else ()
        return self.chars[classes.index(name)] if len(self.chars) == len(classes) and name in classes else ""


def caption(judge: Judge, reading: dict | None) -> str:
    """`classifier_line` + " · likeness 0.91", or "✗ **broken**: likeness 0.41 < 0.65 (as are 16 % of ...) · ..."."""
    if not reading:
        return ""
    seen = classifier_line(judge, reading)
    if reading.get("likeness") is None:
        return seen
    if reading["broken"]:
        share = judge.vanilla_broken
        band = f" (as are {percent(share)} of vanilla AR's pictures)" if share is not None else ""
        return f"✗ **broken**: likeness {reading['likeness']:.2f} < {BROKEN_BELOW}{band} · {seen.lstrip('✓✗ ')}"
    return f"{seen} · likeness {reading['likeness']:.2f}"


def classifier_line(judge: Judge, reading: dict) -> str:
    """What the classifier read: "✓ classifier sees 🐱 **cat face** 93 % · Noto 71 %" ("✗ ..., not <asked>")."""
    mark = {True: "✓ ", False: "✗ "}.get(reading.get("class_ok"), "")
    what = f"{judge.char(reading['class'])} **{plain(reading['class'])}** {reading['class_p']:.0%}".strip()
    if reading.get("style") is not None:
        what += f" · {plain(reading['style'])} {reading['style_p']:.0%}"
    miss = "" if reading.get("class_ok") is not False else f", not {plain(reading['asked'].split(STYLE_SEP)[0])}"
    return f"{mark}classifier sees {what}{miss}"
