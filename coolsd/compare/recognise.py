"""What a model's own classifier sees in a decoded image: the class it recognises (the digit; the emoji and its
drawing style) and how sure it is (softmax probability), beside the condition that was asked for.

UI-free. The app shows it under each finished picture of a race and in the race's stats JSON; the delta sweep
(`coolsd.bench.delta_sweep`) counts how often it matches. It reads the shipped classifiers exactly as the
benchmark does (`coolsd.compare.metrics.classifier_outputs`, `coolsd.compare.lab.load_classifier`):

    classifier = shipped_classifier("emoji")                 # None for a model without one (tiny, LlamaGen)
    (reading,) = recognise(classifier, image[None])          # image (C, H, W) in [0, 1]
    reading.describe(bundle.conditions, asked=cond)          # {"class": "cat face", "class_p": 0.93, ...}
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from coolsd.compare.lab import load_classifier
from coolsd.compare.likeness import RealPictures
from coolsd.compare.metrics import classifier_outputs
from coolsd.models.conditions import Conditions
from coolsd.util.paths import EMBEDDED_CLASSIFIER, EMOJI_CLASSIFIER

# ModelBundle.kind -> the classifier folder shipped with that model (the benchmark's and the lab's judge)
SHIPPED = {"embedded": EMBEDDED_CLASSIFIER, "emoji": EMOJI_CLASSIFIER}


@dataclass(frozen=True)
class Reading:
    """One image as the classifier reads it.

    cls: the class index it picks (argmax of its class logits); cls_p: that class's softmax probability over the
    classes, in [0, 1]; style / style_p: the same over the drawing styles of a class + style classifier (the emoji
    one), None for a classifier without styles.
    """

    cls: int
    cls_p: float
    style: int | None = None
    style_p: float | None = None

    def condition(self, styles: int) -> int:
        """The engine condition it reads: class * styles + style (the class itself without styles)."""
        return self.cls * styles + (self.style or 0) if styles else self.cls

    def describe(self, names: Conditions, asked: int | None = None) -> dict:
        """JSON-ready: "class" (its name), "class_p", "style" (its name or None), "style_p", and against the engine
        condition `asked` (None: not judged) "asked" (its label), "class_ok" and "style_ok" (None without styles)."""
        out = {"class": _name(names.classes, self.cls), "class_p": self.cls_p,
               "style": None if self.style is None else _name(names.styles, self.style), "style_p": self.style_p}
        if asked is None:
            return out
        styles = len(names.styles)
        want_cls, want_style = divmod(int(asked), styles) if styles else (int(asked), None)
        return out | {"asked": names.label(int(asked)) if int(asked) < max(names.count, 1) else str(asked),
                      "class_ok": self.cls == want_cls,
                      "style_ok": None if self.style is None or want_style is None else self.style == want_style}


def _name(names, index: int) -> str:
    """The name at `index`, or the index as text when the classifier knows more classes than the names."""
    return names[index] if 0 <= index < len(names) else str(index)


def read_logits(logits: Tensor, num_styles: int = 0) -> list[Reading]:
    """Readings of (N, V) classifier logits: V = classes, or classes + `num_styles` (class logits, then style
    logits: the emoji classifier's layout, `coolsd.compare.metrics.predicted`); each head's softmax is its own."""
    if logits.ndim != 2 or logits.shape[1] <= num_styles:
        raise ValueError(f"logits must be (N, V) with V > {num_styles} styles, got shape {tuple(logits.shape)}")
    logits = logits.double()
    heads = (logits[:, : logits.shape[1] - num_styles], logits[:, logits.shape[1] - num_styles :])
    cls_p, cls = heads[0].softmax(-1).max(-1)
    if not num_styles:
        return [Reading(int(c), float(p)) for c, p in zip(cls, cls_p)]
    style_p, style = heads[1].softmax(-1).max(-1)
    return [Reading(int(c), float(p), int(s), float(q)) for c, p, s, q in zip(cls, cls_p, style, style_p)]


def num_styles(classifier) -> int:
    """The styles a class + style classifier tells apart (config `num_styles`), 0 for a class-only one."""
    return int(getattr(classifier.config, "num_styles", 0) or 0)


@torch.no_grad()
def recognise(classifier, images01: Tensor) -> list[Reading]:
    """What `classifier` (a `ResNetForImageClassification`, as shipped) sees in each of `images01`:
    (N, C, H, W) float in [0, 1], resized to the classifier's 32 x 32 like the benchmark's scoring. N readings."""
    if images01.ndim != 4:
        raise ValueError(f"images must be (N, C, H, W), got shape {tuple(images01.shape)}")
    logits = classifier_outputs(classifier, images01.float())[1]  # (N, V) float64
    return read_logits(logits, num_styles(classifier))


def shipped_classifier(kind: str):
    """The classifier shipped with a model of `ModelBundle.kind` `kind` (fp32, eval mode), or None when that
    model ships none (tiny, LlamaGen) or its folder is missing."""
    return load_classifier(SHIPPED[kind]) if kind in SHIPPED else None


def shipped_real_pictures(kind: str) -> RealPictures | None:
    """The real picture of each class shipped beside a model's classifier (`coolsd.compare.likeness`: the emoji
    model's), or None when that model ships none."""
    return RealPictures.beside(SHIPPED[kind]) if kind in SHIPPED else None
