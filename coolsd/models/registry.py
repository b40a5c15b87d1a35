"""The one registry of the models coolsd offers: key, label, loader, fallback (`MODELS`).

Every front end reads this table: the app's picker and `$COOLSD_MODEL`, the benchmark's `--model`,
the tools. A spec loads one `ModelBundle` per resolution (LlamaGen: 256 and 512 px; the others one);
how a visitor names a condition is the bundle's (`bundle.condition(name, style)`,
`coolsd.models.conditions`).

    bundles = load("emoji")                      # strict: BundleError when its weights are missing
    bundles, note = load_or_fallback("emoji")    # the fallback chain: emoji -> mnist -> tiny, with a note
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from coolsd.models import llamagen, tiny
from coolsd.models.bundle import BundleError, ModelBundle, load_embedded
from coolsd.models.emoji import load_emoji
from coolsd.util.paths import EMBEDDED_DIR, EMOJI_DIR

log = logging.getLogger("coolsd")


def _llamagen() -> list[ModelBundle]:
    path = llamagen.find_llamagen()
    if path is None:
        raise BundleError("LlamaGen weights not found (set COOLSD_LLAMAGEN_DIR)")
    bundles, encoder = [], None
    for resolution in llamagen.available_resolutions(path):  # (lowest first; one T5 encoder shared)
        bundle = llamagen.load_llamagen(path, resolution=resolution, caption_encoder=encoder)
        bundle.resolution = resolution  # the folder's resolution names the variant (the picker's "256" / "512")
        encoder = bundle.target.caption_encoder
        bundles.append(bundle)
    return bundles


def _mnist() -> list[ModelBundle]:
    return [load_embedded()]


def _emoji() -> list[ModelBundle]:
    return [load_emoji()]


def _tiny() -> list[ModelBundle]:
    return [tiny.tiny_bundle()]


@dataclass(frozen=True)
class ModelSpec:
    """One model on offer. key: picker key and `$COOLSD_MODEL` value; label: the picker's text; load: the
    bundles (one per resolution; BundleError when missing); present: whether its weights are here (no
    loading); fallback: the key loaded instead when it is missing (None: nothing; tiny is always there);
    conditioning: "class" or "text" (known before loading)."""

    key: str
    label: str
    load: Callable[[], list[ModelBundle]]
    present: Callable[[], bool]
    fallback: str | None = None
    conditioning: str = "class"  # "class" | "text": what the picker offers before the model is loaded


def _folder(path) -> Callable[[], bool]:
    return lambda: (path / "target" / "config.json").is_file()


MODELS: dict[str, ModelSpec] = {s.key: s for s in (
    ModelSpec("emoji", "Emoji (name an emoji, pick a style)", _emoji, _folder(EMOJI_DIR), "mnist"),
    ModelSpec("mnist", "MNIST digits", _mnist, _folder(EMBEDDED_DIR), "tiny"),
    ModelSpec("llamagen", "LlamaGen (text to image)", _llamagen, lambda: llamagen.find_llamagen() is not None,
              "mnist", "text"),
    ModelSpec("tiny", "tiny (random weights: noise images, real decoding)", _tiny, lambda: True),
)}
ALIASES = {"embedded": "mnist"}  # older names ($COOLSD_MODEL, share links) -> key
KINDS = {"embedded": "mnist"}  # ModelBundle.kind -> key where they differ


def key_of(bundle: ModelBundle) -> str:
    """The registry key of a loaded bundle."""
    return KINDS.get(bundle.kind, bundle.kind)


def resolve(key) -> str:
    """The registry key `key` names (aliases, any case); ValueError listing the keys otherwise."""
    name = (key or "").strip().lower() if isinstance(key, str) else key
    name = ALIASES.get(name, name)
    if name not in MODELS:
        raise ValueError(f"unknown model {key!r}; choose one of {', '.join(MODELS)}")
    return name


def load(key: str) -> list[ModelBundle]:
    """Model `key`'s bundles (one per resolution), strictly: BundleError when its weights are missing."""
    return MODELS[resolve(key)].load()


def load_or_fallback(key: str) -> tuple[list[ModelBundle], str]:
    """(bundles, note): model `key`, else its fallback chain (logged; `note` says what is missing, "" if none).
    An unknown key falls back to the default."""
    try:
        key = resolve(key)
    except ValueError as err:
        log.warning("%s; using %s", err, default_key())
        key = default_key()
    missing = []
    while True:
        spec = MODELS[key]
        try:
            bundles = spec.load()
        except BundleError as err:
            if spec.fallback is None:
                raise
            log.warning("%s; falling back to %s", err, spec.fallback)
            missing.append(f"the {key} model is missing ({err})")
            key = spec.fallback
            continue
        note = "; ".join(missing) + (f"; running {MODELS[key].label}" if missing else "")
        for bundle in bundles:
            bundle.note = note
        return bundles, note


def default_key() -> str:
    """$COOLSD_MODEL when set; else LlamaGen when its weights are found; else emoji when shipped; else mnist."""
    if os.environ.get("COOLSD_MODEL"):
        return os.environ["COOLSD_MODEL"]
    return next(key for key in ("llamagen", "emoji", "mnist", "tiny") if MODELS[key].present())


def available() -> list[str]:
    """Keys of the shipped models whose weights are here (tiny is never offered unasked)."""
    return [key for key, spec in MODELS.items() if key != "tiny" and spec.present()]
