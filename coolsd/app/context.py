"""The app's shared state: the model loaded once, model handles for concurrent decodes, input checks.

One `Context` is made by `app.py` and passed to every panel's `build(ctx)` (see `coolsd.app`).
The HTTP API bypasses the page's sliders, so every handler checks what it is given (with
`coolsd.util.checks`, through `coolsd.app.settings`) and answers a bad value with one plain-text
line (`bad(...)`, `user_errors()`), never a trace.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import gradio as gr
import torch

from coolsd.app.plots import display_size, fill_ids, placeholder, token_image
from coolsd.compare.race import fork_models
from coolsd.decoding.sampling import SamplingConfig
from coolsd.models import llamagen, tiny
from coolsd.models.bundle import STYLE_SEP, BundleError, load_embedded
from coolsd.models.emoji import load_emoji
from coolsd.util.checks import check_choice, plain, show
from coolsd.util.paths import EMBEDDED_DIR, EMOJI_DIR

try:  # ZeroGPU: holds a GPU for the whole call; a no-op elsewhere (and absent locally)
    import spaces

    gpu = spaces.GPU(duration=120)
except ImportError:
    def gpu(fn):
        return fn

log = logging.getLogger("coolsd.app")

MAX_PROMPT_CHARS = 300
MAX_SEED = 2**31 - 1
MAX_LANE_HANDLES = 5  # model handles per lane: up to four racers + vanilla AR


# ---------------------------------------------------------------- the model, loaded once
@dataclass
class AppModel:
    """What the app needs from a model family (an embedded/tiny ModelBundle or LlamaGen)."""

    kind: str  # "embedded" | "tiny" | "llamagen"
    name: str
    target: object
    drafter: object
    tokenizer: object
    neighbours: torch.Tensor
    grid: tuple[int, int]
    conditioning: str  # "class" | "text"
    class_names: list[str]
    sampling: SamplingConfig
    note: str = ""  # shown under the title (e.g. a fallback)
    resolution: int | None = None  # pixels per side, for models offered at several resolutions (LlamaGen)
    example_prompts: tuple[str, ...] = ()  # text models: a handful of prompts to start from
    check_prompt: Callable[[str], str] | None = None  # text models: the family's own prompt check (ValueError)
    max_prompt_chars: int = MAX_PROMPT_CHARS
    execution: str = ""  # how target and drafter run (emoji: the dtype chosen at load by timing)
    style_names: list[str] = field(default_factory=list)  # emoji: class_names are "<class> · <style>", S per class

    @property
    def num_tokens(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def base_class_names(self) -> list[str]:
        """The class picker's names: class_names without their style (class_names itself without styles)."""
        if not self.style_names:
            return list(self.class_names)
        return [name.rsplit(STYLE_SEP, 1)[0] for name in self.class_names[:: len(self.style_names)]]

    def condition_name(self, condition: str, style: str = "") -> str:
        """The class_names entry of (class, style) for a styled model; else `condition` itself."""
        return f"{condition}{STYLE_SEP}{style}" if self.style_names else condition

    def split_condition(self, label) -> tuple[str, str] | None:
        """(class, style) of a "<class> · <style>" class_names entry of a styled model; else None."""
        if not self.style_names or not isinstance(label, str) or label not in self.class_names:
            return None
        base, style = label.rsplit(STYLE_SEP, 1)
        return base, style


def _from_bundle(bundle, kind: str, note: str = "") -> AppModel:
    return AppModel(kind, bundle.name, bundle.target, bundle.drafter, bundle.tokenizer, bundle.neighbours,
                    tuple(bundle.grid), bundle.conditioning, list(bundle.class_names), bundle.default_sampling, note,
                    execution=getattr(bundle, "execution", ""), style_names=list(getattr(bundle, "style_names", [])))


def load_llamagen_models(path) -> list[AppModel]:
    """One AppModel per LlamaGen resolution present under `path` (lowest first), sharing one T5 encoder."""
    models, encoder = [], None
    for resolution in llamagen.available_resolutions(path):
        lg = llamagen.load_llamagen(path, resolution=resolution, caption_encoder=encoder)  # (pixels per side)
        encoder = lg.target.caption_encoder
        models.append(AppModel("llamagen", lg.name, lg.target, lg.drafter, lg.tokenizer, lg.neighbours,
                               tuple(lg.grid), "text", [], lg.default_sampling, resolution=resolution,
                               example_prompts=tuple(llamagen.EXAMPLE_PROMPTS), check_prompt=llamagen.check_prompt,
                               max_prompt_chars=llamagen.prompts.MAX_PROMPT_CHARS))
    return models


def serving_threads() -> None:
    """Small models on a CPU decode single-threaded (a core is left to the server and the other lanes).
    Call it before loading a model: the emoji model times its fp32 and bf16 paths at load
    (`coolsd.models.emoji.choose_dtype`), and the faster path at 2 threads is not the faster at 1."""
    if not torch.cuda.is_available():
        torch.set_num_threads(1)


def load_models(choice: str) -> list[AppModel]:
    """Like `load_model`, with every resolution of a model offered at several (LlamaGen: 256 and 512 px)."""
    if (choice or "").strip().lower() == "llamagen":
        path = llamagen.find_llamagen()
        if path is not None:
            return load_llamagen_models(path)
    return [load_model(choice)]


def load_model(choice: str) -> AppModel:
    """"emoji", "embedded" (MNIST; also "mnist"), "tiny" or "llamagen"; falls back (with a warning, also
    on the page) to what is there."""
    choice = (choice or "embedded").strip().lower()
    choice = "embedded" if choice == "mnist" else choice
    note = ""
    if choice not in ("emoji", "embedded", "tiny", "llamagen"):
        log.warning("unknown COOLSD_MODEL=%r (use emoji, embedded, tiny or llamagen); using embedded", choice)
        choice = "embedded"
    if choice == "emoji":
        try:
            return _from_bundle(load_emoji(), "emoji")
        except BundleError as err:
            log.warning("%s; falling back to the embedded MNIST model", err)
            note, choice = "the emoji model is missing (assets/emoji/); ", "embedded"
    if choice == "llamagen":
        path = llamagen.find_llamagen()
        if path is not None:
            return load_llamagen_models(path)[0]
        note = "LlamaGen weights not found (set COOLSD_LLAMAGEN_DIR); "
        log.warning("COOLSD_MODEL=llamagen but no LlamaGen folder was found; falling back to the embedded model")
        choice = "embedded"
    if choice == "embedded":
        try:
            return _from_bundle(load_embedded(), "embedded", note.rstrip("; "))
        except BundleError as err:
            log.warning("%s; falling back to the tiny random-weight model", err)
            note += "the embedded model is missing (assets/embedded/); "
    if note:
        note += "running the tiny random-weight model: its images are noise, the decoding is real"
    return _from_bundle(tiny.tiny_bundle(), "tiny", note)


def default_model_choice() -> str:
    """COOLSD_MODEL when set; else LlamaGen when its weights are found (COOLSD_LLAMAGEN_DIR); else the
    emoji model when shipped (assets/emoji/), else embedded (MNIST)."""
    if os.environ.get("COOLSD_MODEL"):
        return os.environ["COOLSD_MODEL"]
    if llamagen.find_llamagen() is not None:
        return "llamagen"
    return "emoji" if (EMOJI_DIR / "target" / "config.json").is_file() else "embedded"


# ---------------------------------------------------------------- the model picker: each model loaded once, on 1st use
MODELS = {"emoji": "Emoji (15 classes, Twemoji / Noto)", "mnist": "MNIST digits",  # picker key -> its label
          "llamagen": "LlamaGen (text to image)", "tiny": "tiny (random weights: noise images, real decoding)"}
MODEL_ALIASES = {"embedded": "mnist"}  # older names ($COOLSD_MODEL) -> picker key
TEXT_MODELS = ("llamagen",)  # picker keys of text-conditional models (the rest take a class)
KIND_KEYS = {"emoji": "emoji", "embedded": "mnist", "llamagen": "llamagen", "tiny": "tiny"}  # AppModel.kind -> key


def available_models() -> list[str]:
    """Picker keys of the shipped models whose weights are here (emoji, mnist: assets/; llamagen: its folder)."""
    keys = [key for key, folder in (("emoji", EMOJI_DIR), ("mnist", EMBEDDED_DIR))
            if (folder / "target" / "config.json").is_file()]
    return keys + (["llamagen"] if llamagen.find_llamagen() is not None else [])


def load_family(key: str) -> list[AppModel]:
    """Model `key` (a picker key) strictly, no fallback: one AppModel per resolution; BundleError when missing."""
    if key == "llamagen":
        path = llamagen.find_llamagen()
        if path is None:
            raise BundleError("LlamaGen weights not found (set COOLSD_LLAMAGEN_DIR)")
        return load_llamagen_models(path)
    if key == "tiny":
        return [_from_bundle(tiny.tiny_bundle(), "tiny")]
    if key == "emoji":
        return [_from_bundle(load_emoji(), "emoji")]
    return [_from_bundle(load_embedded(), "embedded")]


class Catalogue:
    """The models the picker offers (keys, in order) and their Contexts, shared by every session.

    A model is loaded on its first use (`get`), once per process, under a lock: one visitor's pick loads it
    for everybody and changes nobody else's choice (each handler reads the model from its own inputs).
    """

    def __init__(self, keys, workers: int = 1, loader: Callable[[str], list[AppModel]] = load_family) -> None:
        self.keys = list(dict.fromkeys(keys))
        self.workers, self.loader = workers, loader
        self.contexts: dict[str, Context] = {}
        self._lock = threading.Lock()

    def choices(self) -> list[tuple[str, str]]:
        """(label, key) of every model on offer, for the picker."""
        return [(MODELS.get(key, key), key) for key in self.keys]

    def check(self, key) -> str:
        """The picker key `key` names (older names accepted), or a ValueError listing the models on offer."""
        key = MODEL_ALIASES.get(key, key) if isinstance(key, str) else key
        return check_choice("model", key, self.keys)

    def get(self, key) -> Context:
        """The Context of model `key` (its first resolution), loaded now when it is the first use."""
        key = self.check(key)
        if key not in self.contexts:
            with self._lock:
                if key not in self.contexts:
                    log.info("loading the %s model (first use)", key)
                    try:
                        models = self.loader(key)
                    except BundleError as err:
                        raise bad(f"the {key} model could not be loaded: {plain(err)[:200]}") from None
                    self.contexts[key] = Context.for_models(models, self.workers, catalogue=self)
        return self.contexts[key]


@dataclass
class Context:
    """The loaded model and what every panel shares.

    model: the AppModel; device: where it runs; pixels_hw / display_hw: (H, W) pixels of a decoded
    image and of its on-page (integer-upscaled) view; image_format: "png" | "webp" for streamed images;
    k_max: the largest LANTERN++ k the neighbour table supports; workers: decodes that may run at once.
    lanes: a queue of `workers` lanes; a lane is a list of MAX_LANE_HANDLES (target, drafter) handles on
        the shared weights, each with its own KV caches (borrow one with `lane()`).
    controls: name -> component of the race settings, in the race's argument order (filled by
        `coolsd.app.controls.build`), so a panel may take the current settings as inputs;
    buttons: "generate" / "stop" -> the race's buttons; panels: panel id -> what its `build` returned.
    share_controls: name -> component of a panel's own controls that share links carry too (names
        unique across panels, e.g. "lab_delta"; the race settings are carried already); share_specs: name ->
        its `coolsd.app.settings.Spec` (how a link's value is checked), one per share control.
    """

    model: AppModel
    workers: int = 1
    device: torch.device = field(init=False)
    pixels_hw: tuple[int, int] = field(init=False)
    display_hw: tuple[int, int] = field(init=False)
    image_format: str = field(init=False)
    k_max: int = field(init=False)
    lanes: queue.Queue = field(init=False, repr=False)
    controls: dict = field(default_factory=dict, repr=False)
    buttons: dict = field(default_factory=dict, repr=False)
    share_controls: dict = field(default_factory=dict, repr=False)
    share_specs: dict = field(default_factory=dict, repr=False)
    panels: dict = field(default_factory=dict, repr=False)
    variants: dict = field(default_factory=dict, repr=False)
    catalogue: Catalogue | None = field(default=None, repr=False)

    @classmethod
    def for_models(cls, models: list[AppModel], workers: int = 1, catalogue: Catalogue | None = None) -> Context:
        """The context of models[0]; every model is a variant (`variant(key)`), each with its own lanes.
        `catalogue`: the models the picker offers (default: this one alone); this one joins it."""
        contexts = [cls(m, workers) for m in models]
        variants = {c.variant_key: c for c in contexts}
        catalogue = catalogue or Catalogue([contexts[0].model_key], workers)
        for c in contexts:
            c.variants, c.catalogue = variants, catalogue
        catalogue.contexts.setdefault(contexts[0].model_key, contexts[0])
        return contexts[0]

    @property
    def model_key(self) -> str:
        """The picker's key of this model ("emoji", "mnist", "llamagen", "tiny")."""
        return KIND_KEYS.get(self.model.kind, self.model.kind)

    def for_model(self, key=None) -> Context:
        """The context of picker model `key` (None or "": this one), loaded on first use; unknown: a clear error."""
        if key is None or key == "" or key == self.model_key:
            return self
        with user_errors():
            return self.catalogue.get(key)

    def for_trace(self, settings: dict) -> Context:
        """The context (model, then resolution) a recorded race's `settings` ran on (no "model": this model)."""
        return self.for_model(settings.get("model")).variant(settings.get("resolution"))

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

    def __post_init__(self) -> None:
        m = self.model
        self.device = torch.device(getattr(m.target, "device", "cpu"))
        self.pixels_hw = tuple(m.tokenizer.decode(torch.zeros(m.num_tokens, dtype=torch.long)).shape[-2:])
        self.display_hw = display_size(m.grid, self.pixels_hw)
        self.image_format = "webp" if m.kind == "llamagen" else "png"  # flat digit grids: png is exact and small
        self.k_max = int(m.neighbours.shape[-1]) - 1
        self.lanes = queue.Queue()
        for _ in range(self.workers):
            self.lanes.put([fork_models(m.target, m.drafter) for _ in range(MAX_LANE_HANDLES)])

    @contextlib.contextmanager
    def lane(self, timeout: float = 60.0):
        """Borrow one lane (a list of (target, drafter) handles) for a whole decode; returned on exit."""
        try:
            handles = self.lanes.get(timeout=timeout)
        except queue.Empty:
            raise bad("the server is busy; try again in a minute") from None
        try:
            yield handles
        finally:
            self.lanes.put(handles)

    # ---- views (drawing lives in coolsd.app.plots)
    def decode_pixels(self, tokens: torch.Tensor) -> torch.Tensor:
        """(T,) ids, -1 where not generated -> (C, h, w) pixels (missing tokens filled in; painted over later)."""
        return self.model.tokenizer.decode(fill_ids(tokens).to(self.device))

    def render(self, pixels: torch.Tensor, filled: torch.Tensor, kinds: torch.Tensor, overlay: bool):
        """PIL image of `display_hw`: committed tokens shown, the rest a checkerboard; optional outcome tint."""
        return token_image(pixels, filled, self.model.grid, kinds, overlay)

    def blank_image(self):
        return placeholder(self.model.grid, self.display_hw)

    # ---- the condition
    def check_condition(self, condition):
        """Class id (class models) or stripped prompt (text models) for the engine; else a clear error."""
        if self.model.conditioning == "text":
            if not isinstance(condition, str) or not condition.strip():
                raise bad("the prompt must be a non-empty text")
            limit = self.model.max_prompt_chars
            if len(condition) > limit:
                raise bad(f"the prompt is too long: {len(condition)} characters (at most {limit})")
            if self.model.check_prompt is not None:
                try:
                    return self.model.check_prompt(condition)
                except ValueError as err:
                    raise bad(str(err)) from None
            return condition.strip()
        if str(condition) not in self.model.class_names:
            raise bad(f"unknown class {show(condition)}; choose one of {', '.join(self.model.class_names)}")
        return self.model.class_names.index(str(condition))


# ---------------------------------------------------------------- errors (the checks themselves: coolsd.util.checks)
def bad(message: str) -> gr.Error:
    """A one-line error for the page and the API (plain text: Gradio shows it as text, never as markup)."""
    return gr.Error(message, print_exception=False)


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
    """Inside: any other exception (a bug or a device error) is logged with its trace as "<logged> failed"
    and becomes one line for the page, `bad("<shown> failed: <type>: <message>")`; a gr.Error passes as it is."""
    try:
        yield
    except gr.Error:
        raise
    except Exception as err:
        log.exception("%s failed", logged)
        raise bad(f"{shown} failed: {type(err).__name__}: {plain(err)[:200]}") from None
