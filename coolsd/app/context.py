"""The app's shared state: each model loaded once (`Catalogue`), its `Context`, and one-line errors (`bad`)."""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import queue
import threading
from dataclasses import dataclass, field

import gradio as gr
import torch

from coolsd.app.judge import Judge
from coolsd.app.plots import display_size, fill_ids, placeholder, token_image
from coolsd.compare.race import fork_models
from coolsd.compare.trace import TraceSettings
from coolsd.models import registry
from coolsd.models.bundle import BundleError, ModelBundle
from coolsd.util.checks import check_choice, one_line, plain, show

try:  # ZeroGPU: holds a GPU for the whole call; a no-op elsewhere (and absent locally)
    import spaces

    gpu = spaces.GPU(duration=120)
except ImportError:
    def gpu(fn):
        return fn

log = logging.getLogger("coolsd.app")

MAX_SEED = 2**31 - 1
MAX_LANE_HANDLES = 5  # model handles per lane: up to four racers + vanilla AR


def serving_threads() -> None:
    """Small models on a CPU decode single-threaded (cores left to the server and the other lanes)."""
    if not torch.cuda.is_available():
        torch.set_num_threads(1)


class _AppModel:
    def __repr__(self) -> str:
        return "APP_MODEL"


# a handler's `model` when Python code leaves it out: the app's model (never an API value: null or "" is refused)
APP_MODEL = _AppModel()


class Catalogue:
    """The picker's models (registry keys) and their Contexts (one per resolution), loaded once, on first use."""

    def __init__(self, keys, workers: int = 1, loader=registry.load) -> None:
        self.keys = list(dict.fromkeys(keys))
        self.workers, self.loader = workers, loader
        self.families: dict[str, dict[str, Context]] = {}  # key -> variant key -> Context
        self._lock = threading.Lock()

    def choices(self) -> list[tuple[str, str]]:
        """(label, key) of every model on offer, for the picker."""
        return [(registry.MODELS[key].label if key in registry.MODELS else key, key) for key in self.keys]

    def is_text(self, key: str) -> bool:
        """Whether model `key` takes a prompt (known without loading it)."""
        return key in registry.MODELS and registry.MODELS[key].conditioning == "text"

    def check(self, key) -> str:
        """The key `key` names (older names accepted), or a ValueError listing the models on offer."""
        key = registry.ALIASES.get(key, key) if isinstance(key, str) else key
        return check_choice("model", key, self.keys)

    def add(self, key: str, bundles: list[ModelBundle]) -> Context:
        self.families[key] = {ctx.variant_key: ctx for ctx in (Context.make(b, key, self) for b in bundles)}
        return next(iter(self.families[key].values()))

    def get(self, key) -> Context:
        """The Context of model `key` (its first resolution), loaded now when it is the first use."""
        key = self.check(key)
        if key not in self.families:
            with self._lock:
                if key not in self.families:
                    log.info("loading the %s model (first use)", key)
                    try:
                        bundles = self.loader(key)
                    except BundleError as err:
                        raise bad(f"the {key} model could not be loaded: {plain(err)[:200]}") from None
                    self.add(key, bundles)
        return next(iter(self.families[key].values()))


@dataclass(frozen=True)
class Context:
    """One model at one resolution and what the panels share; made by `Context.make`, never changed."""

    model: ModelBundle
    key: str
    catalogue: Catalogue = field(repr=False, compare=False)
    workers: int
    device: torch.device
    pixels_hw: tuple[int, int]  # (H, W) of a decoded image
    display_hw: tuple[int, int]  # (H, W) on the page
    image_format: str
    k_max: int  # LANTERN++'s largest k
    lanes: queue.Queue = field(repr=False, compare=False)  # `workers` lists of (target, drafter), own KV caches
    judge: Judge = field(repr=False, compare=False)

    @classmethod
    def make(cls, model: ModelBundle, key: str, catalogue: Catalogue) -> Context:
        device = torch.device(getattr(model.target, "device", "cpu"))
        pixels_hw = tuple(model.tokenizer.decode(torch.zeros(model.num_tokens, dtype=torch.long)).shape[-2:])
        lanes = queue.Queue()
        for _ in range(catalogue.workers):
            lanes.put([fork_models(model.target, model.drafter) for _ in range(MAX_LANE_HANDLES)])
        return cls(model, key, catalogue, catalogue.workers, device, pixels_hw, display_size(model.grid, pixels_hw),
                   "webp" if model.conditioning == "text" else "png",  # flat small grids: png is exact and small
                   int(model.neighbours.shape[-1]) - 1, lanes, Judge(model))

    @property
    def race_threads(self) -> int:
        """Racers run at once: one per usable core on a CPU ($COOLSD_RACE_THREADS overrides), 1 on an accelerator."""
        if self.device.type != "cpu":
            return 1
        return max(1, int(os.environ.get("COOLSD_RACE_THREADS") or len(os.sched_getaffinity(0))))

    @property
    def model_key(self) -> str:  # the picker's key (= `key`)
        return self.key

    @property
    def variants(self) -> dict[str, Context]:
        return self.catalogue.families[self.key]

    def for_model(self, key=None) -> Context:
        """The context of picker model `key` (None or "": this one), loaded on first use; unknown: a clear error."""
        if key is None or key == "" or key == self.key:
            return self
        with user_errors():
            return self.catalogue.get(key)

    def picked(self, model) -> Context:
        """The context of a visitor's `model` argument (APP_MODEL: this one); "" or null is a one-line error."""
        if model is APP_MODEL:
            return self
        with user_errors():
            return self.for_model(self.catalogue.check(model))

    def for_trace(self, settings: TraceSettings) -> Context:
        return self.for_model(settings.model).variant(settings.resolution)

    @property
    def variant_key(self) -> str:
        """"256" / "512" for a model offered at several resolutions, else the model kind."""
        return str(self.model.resolution) if self.model.resolution else self.model.kind

    def variant(self, key=None) -> Context:
        """The context of variant `key` (None: this one); an unknown key is a clear error."""
        if key is None or str(key) == self.variant_key:
            return self
        if str(key) not in self.variants:
            raise bad(f"unknown resolution {show(key)}; choose one of {', '.join(self.variants) or self.variant_key}")
        return self.variants[str(key)]

    @contextlib.contextmanager
    def lane(self, timeout: float = 60.0):
        """Borrow one lane (a list of (target, drafter) handles) for a whole decode."""
        try:
            handles = self.lanes.get(timeout=timeout)
        except queue.Empty:
            raise bad("the server is busy; try again in a minute") from None
        try:
            yield handles
        finally:
            self.lanes.put(handles)

    def decode_pixels(self, tokens: torch.Tensor) -> torch.Tensor:
        """(T,) ids, -1 where not generated -> (C, h, w) pixels (missing tokens filled in, painted over later)."""
        return self.model.tokenizer.decode(fill_ids(tokens).to(self.device))

    def decode_many(self, grids: list[torch.Tensor]) -> list[torch.Tensor]:
        """`decode_pixels` of several (T,) grids, in one call where the tokenizer is `batched`; a list of (C, h, w)."""
        if len(grids) < 2 or not getattr(self.model.tokenizer, "batched", False):
            return [self.decode_pixels(t) for t in grids]
        return list(self.model.tokenizer.decode(torch.stack([fill_ids(t) for t in grids]).to(self.device)))

    def render(self, pixels: torch.Tensor, filled: torch.Tensor, kinds: torch.Tensor, overlay: bool):
        """PIL image of `display_hw`: committed tokens shown, the rest a checkerboard; optional outcome tint."""
        return token_image(pixels, filled, self.model.grid, kinds, overlay)

    def blank_image(self):
        return placeholder(self.model.grid, self.display_hw)

    def check_condition(self, condition, style=None):
        """The engine condition of a class / emoji name (with `style`), id or prompt; else a one-line gr.Error."""
        with user_errors():
            return self.model.condition(condition, style)


def bad(message: str) -> gr.Error:
    """A one-line error for the page and the API (`coolsd.util.checks.one_line`), logged without a trace."""
    return gr.Error(one_line(message), print_exception=False)


@contextlib.contextmanager
def user_errors():
    """Inside: a ValueError (a check or a library dataclass refusing a value) becomes `bad(its message)`."""
    try:
        yield
    except gr.Error:  # already one line for the page (gr.Error is a ValueError too)
        raise
    except ValueError as err:
        raise bad(str(err)) from None


@contextlib.contextmanager
def unexpected_errors(logged: str, shown: str):
    """Inside: an exception other than gr.Error is logged with its trace and becomes `bad("<shown> failed: ...")`."""
    try:
        yield
    except gr.Error:
        raise
    except Exception as err:
        log.exception("%s failed", logged)
        raise bad(f"{shown} failed: {type(err).__name__}: {plain(err)[:200]}") from None


def named(handler, names, defaults: dict | None = None):
    """`handler(**values)` taking one parameter per name (default `defaults[name]`), so the API shows the names."""
    p = inspect.Parameter
    signature = inspect.Signature([p(n, p.POSITIONAL_OR_KEYWORD, **({"default": defaults[n]} if defaults else {}))
                                   for n in names])

    def call(*args, **kwargs):
        return handler(**signature.bind(*args, **kwargs).arguments)

    call.__signature__, call.__doc__ = signature, handler.__doc__
    return call


def open_context(choice: str | None = None, workers: int = 1, others: list[str] | None = None) -> Context:
    """The Context of model `choice` in a Catalogue offering it, then `others` (default: those with weights here)."""
    bundles, _ = registry.load_or_fallback(choice or registry.default_key())
    key = registry.key_of(bundles[0])
    catalogue = Catalogue([key, *(registry.available() if others is None else others)], workers)
    return catalogue.add(key, bundles)
