"""coolsd demo: Eagle-1, LANTERN++ and COOL-SD (plus vanilla AR) racing side by side, streamed round by round.

    python app.py                      # http://127.0.0.1:7860 (a Space runs the same file)
    COOLSD_MODEL=tiny python app.py    # embedded | tiny (random weights, fast) | llamagen (GPU)

One Generate click runs the four decoders on the same model, condition and seed. A fair race:
each step advances the decoder that has used the least compute time so far (`coolsd.race`), so
every streamed frame shows what each reached with the same compute budget. All maths lives in
`coolsd`; this file is UI only. API: see the README section "The app" (race, overlay, theory,
model_info).
"""

from __future__ import annotations

import os

# No network at run time: set before gradio / huggingface_hub are imported.
for _key, _value in {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
                     "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1"}.items():
    os.environ.setdefault(_key, _value)

import dataclasses  # noqa: E402
import functools  # noqa: E402
import html  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import queue  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import gradio as gr  # noqa: E402
import torch  # noqa: E402

from coolsd import theory  # noqa: E402
from coolsd.engine import DecodeConfig, generate  # noqa: E402
from coolsd.models.bundle import BundleError, load_embedded  # noqa: E402
from coolsd.plots import (  # noqa: E402
    acceptance_figure,
    display_size,
    fill_ids,
    length_figure,
    overlay_legend_html,
    placeholder,
    stats_markdown,
    token_image,
)
from coolsd.race import Race, Racer, fork_models  # noqa: E402
from coolsd.rules import CoolSDRule, LanternPPRule, make_rule  # noqa: E402
from coolsd.sampling import SamplingConfig  # noqa: E402
from coolsd.tree import TREES  # noqa: E402

try:  # ZeroGPU: holds a GPU for the whole race; a no-op elsewhere (and absent locally)
    import spaces

    gpu = spaces.GPU(duration=120)
except ImportError:
    def gpu(fn):
        return fn

log = logging.getLogger("coolsd.app")

# Streaming throttle: the browser, not the server, is the bottleneck (a frame costs it ~0.1-0.25 s).
IMAGE_EVERY_S = 0.2  # at most one frame per this many seconds (the first and the last always go out)
FRAME_SHARE = 0.25  # ... and fewer when slower: drawing + sending frames takes at most this share of the wall time
PLOT_EVERY_S = 0.8  # plots are costlier to draw: refresh them less often
MAX_PROMPT_CHARS = 300
MAX_SEED = 2**31 - 1
MAX_DRAFT_LEN = 8
WORKERS = int(os.environ.get("COOLSD_WORKERS", "1") or 1)  # races run at once (each has its own KV caches)
if WORKERS < 1:
    raise SystemExit(f"COOLSD_WORKERS must be an integer >= 1, got {WORKERS}")
DECODERS = {  # key -> panel title; the order of the panels
    "eagle-1": "Eagle-1 (lossless)",
    "lantern++": "LANTERN++",
    "cool-sd": "COOL-SD",
    "vanilla": "Vanilla AR (reference)",
}
DRAFTING = {"chain": "chain (L drafts per round)", "eagle-25": "static tree (Eagle-1's 25 nodes)"}
assert set(DRAFTING) - {"chain"} <= set(TREES), "every static tree offered must exist in coolsd.tree.TREES"


# ---------------------------------------------------------------- 2. the model, loaded once
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

    @property
    def num_tokens(self) -> int:
        return self.grid[0] * self.grid[1]


def _from_bundle(bundle, kind: str, note: str = "") -> AppModel:
    return AppModel(kind, bundle.name, bundle.target, bundle.drafter, bundle.tokenizer, bundle.neighbours,
                    tuple(bundle.grid), bundle.conditioning, list(bundle.class_names), bundle.default_sampling, note)


def load_model(choice: str) -> AppModel:
    """"embedded", "tiny" or "llamagen"; falls back (with a warning, also on the page) to what is there."""
    choice = (choice or "embedded").strip().lower()
    note = ""
    if choice not in ("embedded", "tiny", "llamagen"):
        log.warning("unknown COOLSD_MODEL=%r (use embedded, tiny or llamagen); using embedded", choice)
        choice = "embedded"
    if choice == "llamagen":
        from coolsd.models.llamagen import find_llamagen, load_llamagen

        path = find_llamagen()
        if path is not None:
            lg = load_llamagen(path)
            # LlamaGen's published sampling: CFG 7.5, top-k 1000, temperature 1
            return AppModel("llamagen", lg.name, lg.target, lg.drafter, lg.tokenizer, lg.neighbours, tuple(lg.grid),
                            "text", [], SamplingConfig(cfg_scale=7.5, temperature=1.0, top_k=1000))
        note = "LlamaGen weights not found (set COOLSD_LLAMAGEN_DIR); "
        log.warning("COOLSD_MODEL=llamagen but no LlamaGen folder was found; falling back to the embedded model")
        choice = "embedded"
    if choice == "embedded":
        try:
            return _from_bundle(load_embedded(), "embedded", note.rstrip("; "))
        except BundleError as err:
            log.warning("%s; falling back to the tiny random-weight model", err)
            note += "the embedded model is missing (assets/embedded/); "
    from coolsd.models.tiny import tiny_bundle

    if note:
        note += "running the tiny random-weight model: its images are noise, the decoding is real"
    return _from_bundle(tiny_bundle(), "tiny", note)


def default_model_choice() -> str:
    """COOLSD_MODEL when set; else LlamaGen when its weights are found (COOLSD_LLAMAGEN_DIR), else embedded."""
    if os.environ.get("COOLSD_MODEL"):
        return os.environ["COOLSD_MODEL"]
    from coolsd.models.llamagen import find_llamagen

    return "llamagen" if find_llamagen() is not None else "embedded"


MODEL = load_model(default_model_choice())
DEVICE = torch.device(getattr(MODEL.target, "device", "cpu"))
if DEVICE.type == "cpu":
    torch.set_num_threads(1)  # small models decode faster single-threaded (and leave a core to the server)
_PIXELS_HW = tuple(MODEL.tokenizer.decode(torch.zeros(MODEL.num_tokens, dtype=torch.long)).shape[-2:])
DISPLAY_HW = display_size(MODEL.grid, _PIXELS_HW)
IMAGE_FORMAT = "webp" if MODEL.kind == "llamagen" else "png"  # flat digit grids: png is smaller and exact
K_MAX = int(MODEL.neighbours.shape[-1]) - 1  # LANTERN++ k the neighbour table supports

# Each race needs its own KV caches: one "lane" = independent handles for the four decoders.
LANES: queue.Queue = queue.Queue()
for _ in range(WORKERS):
    LANES.put({key: fork_models(MODEL.target, MODEL.drafter) for key in DECODERS})


# ---------------------------------------------------------------- input checks (the HTTP API bypasses the sliders)
def _json_safe(value):
    """nan/inf -> None, recursively (JSON has no nan)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _bad(message: str) -> gr.Error:
    return gr.Error(message, print_exception=False)


def _show(value) -> str:
    """A short, HTML-escaped repr of user input for error messages."""
    text = repr(value)
    return html.escape(text if len(text) <= 40 else text[:37] + "...")


def check_number(label: str, value, minimum: float | None, maximum: float | None, integer: bool = False):
    """A finite number (int when `integer`) within [minimum, maximum], else a gr.Error naming `label`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(f"{label} must be a number, got {_show(value)}")
    if not math.isfinite(value):
        raise _bad(f"{label} must be a finite number, got {_show(value)}")
    if integer and value != int(value):
        raise _bad(f"{label} must be a whole number, got {_show(value)}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise _bad(f"{label} must be in [{minimum:g}, {maximum:g}], got {_show(value)}")
    return int(value) if integer else float(value)


def checked(component, check=None):
    """The component, with a server-side check in front of its own preprocess (the HTTP API skips the UI).

    Numeric components get `check_number` with their label and bounds, choice components a short
    "unknown ..." error, checkboxes a bool check. (An instance attribute, not a subclass: subclassing a
    Gradio component makes Gradio write a .pyi file next to this module at import.)
    """
    original = component.preprocess
    if check is None:
        if isinstance(component, gr.Checkbox):
            def check(payload):
                if not isinstance(payload, bool):
                    raise _bad(f"{component.label} must be true or false, got {_show(payload)}")
                return payload
        elif isinstance(component, (gr.Dropdown, gr.Radio)):
            def check(payload):
                values = [value for _, value in component.choices]
                if isinstance(payload, int) and not isinstance(payload, bool) and str(payload) in values:
                    payload = str(payload)  # digit 3 and "3" mean the same class
                if payload not in values:
                    shown = ", ".join(map(str, values[:12])) + (" ..." if len(values) > 12 else "")
                    raise _bad(f"unknown {component.label.lower()} {_show(payload)}; choose one of {shown}")
                return payload
        else:  # gr.Slider, gr.Number
            def check(payload):
                integer = (getattr(component, "precision", None) == 0 or
                           (isinstance(component, gr.Slider) and float(component.step).is_integer()
                            and float(component.minimum).is_integer()))
                return check_number(component.label, payload, component.minimum, component.maximum, integer)
    component.preprocess = lambda payload: original(check(payload))
    return component


def check_condition(condition):
    """Class id (class models) or prompt (text models) for the engine."""
    if MODEL.conditioning == "text":
        if not isinstance(condition, str) or not condition.strip():
            raise _bad("the prompt must be a non-empty text")
        if len(condition) > MAX_PROMPT_CHARS:
            raise _bad(f"the prompt is too long: {len(condition)} characters (at most {MAX_PROMPT_CHARS})")
        return condition.strip()
    if str(condition) not in MODEL.class_names:
        raise _bad(f"unknown class {_show(condition)}; choose one of {', '.join(MODEL.class_names)}")
    return MODEL.class_names.index(str(condition))


def build_rules(delta, nu, mu, mean_omega, lantern_k, lantern_lambda) -> dict:
    """The three rules from the UI values; a config ValueError becomes a gr.Error."""
    try:
        return {
            "eagle-1": make_rule("eagle-1"),
            "lantern++": make_rule("lantern++", k=lantern_k, lam=lantern_lambda).with_neighbours(MODEL.neighbours),
            "cool-sd": make_rule("cool-sd", delta=delta, nu=nu, mu=None if mean_omega else mu),
        }
    except ValueError as err:
        raise _bad(str(err)) from None


# ---------------------------------------------------------------- 3. view helpers (drawing lives in coolsd.plots)
def render(pixels: torch.Tensor, filled: torch.Tensor, kinds: torch.Tensor, overlay: bool):
    return token_image(pixels, filled, MODEL.grid, kinds, overlay)


def decode_pixels(racer: Racer) -> torch.Tensor:
    """(C, h, w) pixels of the racer's grid so far (missing tokens filled in; they are painted over)."""
    return MODEL.tokenizer.decode(fill_ids(racer.tokens).to(DEVICE))


def blank_image():
    return placeholder(MODEL.grid, DISPLAY_HW)


# ---------------------------------------------------------------- 4. the race handler
# session -> overlay flag of a race in progress: the overlay checkbox changes it while the race streams
LIVE_OVERLAY: dict[str, bool] = {}


@gpu
def _run_race(cond, sampling: SamplingConfig, config: DecodeConfig, rules: dict, seed: int, overlay: bool,
              settings: dict, session: str | None = None):
    """Generator of output frames; holds one lane of model handles for the whole race."""
    try:
        lane = LANES.get(timeout=60)
    except queue.Empty:
        raise _bad("the server is busy; try again in a minute") from None
    race = None
    if session is not None:
        LIVE_OVERLAY[session] = overlay
    try:
        racers = []
        for key, label in DECODERS.items():
            target, drafter = lane[key]
            rule = rules.get(key)
            events = generate(target, drafter if rule else None, rule, cond, MODEL.num_tokens, sampling, config,
                              seed=seed)
            racers.append(Racer(key, label, events, MODEL.num_tokens))
        race = Race(racers)
        vanilla = racers[-1]
        spec = [r for r in racers if r.key != "vanilla"]
        by_key = {r.key: r for r in racers}
        snapshot = {r.key: None for r in racers}  # key -> (pixels, filled, kinds), for the overlay toggle
        dirty: set[str] = set()
        t0 = time.perf_counter()
        last_frame = last_plot = -math.inf
        frame_cost = 0.0  # seconds the last frame took: drawing it, and Gradio sending it while we are suspended
        first_frame_s = None

        def frame(final: bool):
            nonlocal last_plot, first_frame_s, overlay
            now = time.perf_counter()
            toggled = LIVE_OVERLAY.get(session, overlay) != overlay
            overlay = LIVE_OVERLAY.get(session, overlay)
            images = []
            for r in racers:
                if r.key in dirty:
                    pixels = decode_pixels(r)
                    snapshot[r.key] = (pixels, r.filled.clone(), r.kinds.clone())
                    images.append(render(pixels, r.filled, r.kinds, overlay))
                elif toggled and snapshot[r.key] is not None:
                    images.append(render(*snapshot[r.key], overlay))
                else:
                    images.append(gr.skip())
            dirty.clear()
            stats = [r.stats(vanilla) for r in racers]
            wall = now - t0
            if first_frame_s is None:
                first_frame_s = wall
            status = (f"**Finished** in {wall:.2f} s wall clock." if final else
                      f"Racing… {race.steps} rounds so far, {wall:.1f} s.")
            payload = {"model": MODEL.name, "settings": settings, "finished": final, "wall_seconds": wall,
                       "first_frame_seconds": first_frame_s, "steps": race.steps,
                       "decoders": {r.key: s for r, s in zip(racers, stats)}}
            if final or now - last_plot >= PLOT_EVERY_S:
                omega = rules["cool-sd"].omega(torch.arange(1, config.draft_len + 1), config.draft_len) \
                    if config.tree is None else by_key["cool-sd"].omega
                depth = config.draft_len if config.tree is None else max(len(r.depth_sum) for r in spec)
                plots = [acceptance_figure(spec, depth, omega), length_figure(spec)]
                last_plot = now
            else:
                plots = [gr.skip(), gr.skip()]
            return (*images, stats_markdown(stats, status), *plots, _json_safe(payload), dict(snapshot))

        for racer, _ in race:
            dirty.add(racer.key)
            start = time.perf_counter()
            if start - last_frame >= max(IMAGE_EVERY_S, frame_cost * (1 - FRAME_SHARE) / FRAME_SHARE):
                yield frame(final=False)
                last_frame = time.perf_counter()
                frame_cost = last_frame - start
        dirty.update(r.key for r in racers)
        yield frame(final=True)
    except gr.Error:
        raise
    except Exception as err:  # a bug or a device error: log it here, show one line there
        log.exception("race failed")
        raise _bad(f"decoding failed: {type(err).__name__}: {html.escape(str(err))[:200]}") from None
    finally:
        if race is not None:
            race.close()
        LANES.put(lane)
        LIVE_OVERLAY.pop(session, None)


def race(condition, seed, temperature, top_k, cfg_scale, draft_len, drafting, delta, nu, mu, mean_omega,
         lantern_k, lantern_lambda, overlay, request: gr.Request = None):
    """Race Eagle-1, LANTERN++, COOL-SD and vanilla AR on one condition and seed; streams a frame per update.

    Yields (Eagle-1 image, LANTERN++ image, COOL-SD image, vanilla image, stats table (markdown),
    acceptance plot, accepted-length plot, stats (JSON), snapshot state). Unchanged outputs are skipped.
    """
    cond = check_condition(condition)
    try:
        sampling = SamplingConfig(cfg_scale=cfg_scale, temperature=temperature, top_k=top_k)
        config = DecodeConfig(draft_len=draft_len, tree=None if drafting == "chain" else drafting)
    except ValueError as err:
        raise _bad(str(err)) from None
    rules = build_rules(delta, nu, mu, mean_omega, lantern_k, lantern_lambda)
    if sampling.greedy:
        gr.Warning("temperature 0 is greedy decoding: every rule commits the target's argmax, so the relaxed "
                   "rules can change the speed but not the image.")
    if config.tree is not None and draft_len != DecodeConfig().draft_len:
        gr.Info(f"static tree '{config.tree}': the tree's depth sets the draft length; the L slider is not used.")
    settings = {"condition": condition, "seed": seed, "sampling": dataclasses.asdict(sampling),
                "draft_len": draft_len, "drafting": drafting,
                "rules": {k: r.config() for k, r in rules.items()}}
    session = getattr(request, "session_hash", None)
    yield from _run_race(cond, sampling, config, rules, seed, overlay, settings, session)


def stopped(stats):
    """Stop: the race itself is cancelled (cancels=); this keeps its last numbers, marked as stopped."""
    decoders = (stats or {}).get("decoders") or {}
    return stats_markdown(list(decoders.values()), "**Stopped.**")


def show_overlay(overlay, snapshot, request: gr.Request = None):
    """Redraw the four images of the last race with or without the outcome overlay (no decoding).

    During a race the new setting also applies to the frames still to come.
    """
    session = getattr(request, "session_hash", None)
    if session in LIVE_OVERLAY:
        LIVE_OVERLAY[session] = overlay
    snapshot = snapshot or {}
    images = []
    for key in DECODERS:
        item = snapshot.get(key)
        images.append(blank_image() if item is None else render(*item, overlay))
    return tuple(images)


# ---------------------------------------------------------------- theory tab
@functools.lru_cache(maxsize=32)
def _curves(nu: float, k: int) -> dict:
    return theory.tradeoff_curves(nu=nu, k=k)


def theory_plot(delta, nu, mu, mean_omega, lantern_k, lantern_lambda):
    """Exact TV vs expected accepted length on the toy tabular model, with the current COOL-SD and LANTERN++ marked."""
    import plotly.graph_objects as go

    rules = build_rules(delta, nu, mu, mean_omega, lantern_k, lantern_lambda)
    try:
        curves = _curves(round(float(nu), 3), min(int(lantern_k), theory.K))
        fig = theory.tradeoff_figure(curves, mark=rules["cool-sd"])
        lantern = theory.mark_point(curves, rules["lantern++"])
    except Exception as err:  # log it here, one line there
        log.exception("theory plot failed")
        raise _bad(f"the exact oracle failed: {type(err).__name__}: {html.escape(str(err))[:200]}") from None
    fig.add_trace(go.Scatter(x=[lantern["tau"]], y=[lantern["tv"]], mode="markers", name=lantern["label"],
                             marker={"color": "#2ca02c", "size": 14, "symbol": "x-thin",
                                     "line": {"width": 3, "color": "#2ca02c"}},
                             hovertemplate="tau = %{x:.3f}<br>TV = %{y:.4f}<extra>current LANTERN++</extra>"))
    fig.update_layout(width=None, height=520, autosize=True, title={"font": {"size": 14}},
                      legend={"x": 1.02, "y": 1, "xanchor": "left", "bgcolor": "rgba(255,255,255,0.6)"},
                      margin={"r": 10})
    return fig


def model_info() -> dict:
    """The loaded model and the valid range of every race argument."""
    defaults = default_values()
    return {"model": MODEL.name, "kind": MODEL.kind, "conditioning": MODEL.conditioning, "grid": list(MODEL.grid),
            "classes": MODEL.class_names, "image_size": list(DISPLAY_HW), "device": str(DEVICE),
            "drafting": list(DRAFTING), "lantern_k_max": K_MAX, "max_draft_len": MAX_DRAFT_LEN,
            "max_prompt_chars": MAX_PROMPT_CHARS, "defaults": defaults}


def default_values() -> dict:
    """Defaults of every race argument, read from the library's dataclasses (never retyped)."""
    s, cool, lantern = MODEL.sampling, CoolSDRule(), LanternPPRule()
    return {"condition": MODEL.class_names[3 % len(MODEL.class_names)] if MODEL.class_names else
            "a red fox sitting in the snow, photo", "seed": 0, "temperature": s.temperature, "top_k": s.top_k,
            "cfg_scale": s.cfg_scale, "draft_len": DecodeConfig().draft_len, "drafting": "chain",
            "delta": cool.delta, "nu": cool.nu, "mu": 0.0, "mean_omega": cool.mu is None,
            "lantern_k": min(lantern.k, K_MAX), "lantern_lambda": lantern.lam, "overlay": False}


# ---------------------------------------------------------------- how it works (rendered LaTeX)
HOW_IT_WORKS = r"""
### One round of speculative decoding
A small **drafter** $q$ proposes $L$ image tokens $\tilde x_1..\tilde x_L$; the big **target** $p$ scores all of
them in **one** forward pass. Left to right, draft $\tilde x_i$ is kept with probability $a_i$; at the first
rejection a replacement is drawn from a **residual** distribution and the round ends; if all $L$ pass, a bonus
token comes from $p_{L+1}$. Each round commits $n+1$ tokens for one target forward, so the
**mean accepted length** is $\tau = \text{tokens} / \text{target forwards}$ and vanilla AR has $\tau = 1$.

**Eagle-1** (lossless): exactly the target's distribution.
$$a_i = \min\Big(1, \frac{p(\tilde x_i)}{q(\tilde x_i)}\Big), \qquad r = \mathrm{Norm}\big([p - q]_+\big)$$

**LANTERN++** ($k$, $\lambda$): a draft also gets the target mass of its nearest codes in the VQ codebook
(latent neighbours $c_1, c_2, \dots$), up to $m \le k$ of them while that mass stays within $(\lambda-1)\,p(x)$:
$$\tilde p(x) = p(x) + \sum_{j \le m} p(c_j) \le \lambda\, p(x)$$
$$a_i = \min\Big(1, \frac{\tilde p(\tilde x_i)}{q(\tilde x_i)}\Big), \qquad r = \mathrm{Norm}\big([p - q']_+\big)$$
where $q'$ is $q$ set to zero on the $k+1$ nearest codes of $\tilde x_i$ whenever some neighbour mass was
pooled ($m \ge 1$), as in the published code. $\lambda = 1$ is Eagle-1.

**COOL-SD** ($\delta$, $\nu$, $\mu$): an annealed relaxation, generous early in the round and strict late,
with the optimal residual $G^*$ (the one that minimises the total variation of each step):
$$\omega_i = \delta\, e^{-\nu i - \mu}, \qquad a_i = \min\Big(1, \omega_i \frac{p(\tilde x_i)}{q(\tilde x_i)}\Big)$$
$$G^*_i = \mathrm{Norm}\big([\,p - \min(q, \omega_i p)\,]_+\big)$$
"mean ω = δ" sets $\mu = \log \frac{1}{L}\sum_{i=1}^{L} e^{-\nu i}$ so that the $\omega_i$ average $\delta$.
$\omega_i = 1$ for all $i$ ($\delta = 1, \nu = 0$) is exactly Eagle-1; $\nu = 0$ is uniform relaxation.

### What the sliders change
| slider | effect |
|---|---|
| temperature, top-k, CFG scale | how logits become $p$ and $q$ (same processing for both) |
| draft length $L$ | drafts per round: more speed if they are accepted, wasted drafter work if not |
| drafting | a chain of $L$ drafts, or a static tree verified in one forward (Eagle-1's 25 nodes) |
| $\delta$ | overall relaxation: larger = longer accepted runs, further from the target's distribution |
| $\nu$ | annealing: how fast $\omega_i$ falls along the round ($\nu = 0.7$ in the paper) |
| $\mu$ | shift of the schedule (only when "mean ω = δ" is off) |
| LANTERN++ $k$, $\lambda$ | neighbourhood size and budget of the latent relaxation |

### Reading the race
The four decoders take turns: the one that has used the **least compute time** runs next round, so every
frame compares them at the same compute budget; the speed-up is each decoder's tokens per compute second over
vanilla AR's in the same race. The overlay colours each token: **green** accepted draft,
**orange** resampled after a rejection, **blue** bonus / target sample. Relaxed rules trade exactness for
speed: compare the images and the Theory tab's exact error.

### Papers
[COOL-SD (arXiv 2601.09212)](https://arxiv.org/abs/2601.09212) ·
[LANTERN (arXiv 2410.03355)](https://arxiv.org/abs/2410.03355) ·
[LANTERN++ (arXiv 2502.06352)](https://arxiv.org/abs/2502.06352) ·
[EAGLE (arXiv 2401.15077)](https://arxiv.org/abs/2401.15077)
"""

THEORY_INTRO = f"""
Exact numbers, no sampling: a toy tabular target and drafter (V = {theory.VOCAB_SIZE} codes, T = {theory.NUM_TOKENS}
tokens, L = {theory.DRAFT_LEN}) small enough to enumerate every output sequence (`coolsd.theory`). Each curve sweeps one
knob: UniformRSD's and COOL-SD's δ (ν from the slider), LANTERN++'s λ (k ≤ {theory.K} on the toy codebook). The ✕ marks
are the current sliders. Lower-right is better: longer accepted runs at a smaller total-variation error. It updates
when you release a COOL-SD or LANTERN++ slider (a new ν takes a few seconds).
"""

LATEX = [{"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}]


def presets() -> tuple[list[list], list[str]]:
    """Example rows (every race input, in order) and their labels; nothing is computed at start-up."""
    d = default_values()
    names = MODEL.class_names

    def row(**changes):
        v = d | changes
        return [v[k] for k in ("condition", "seed", "temperature", "top_k", "cfg_scale", "draft_len", "drafting",
                               "delta", "nu", "mu", "mean_omega", "lantern_k", "lantern_lambda", "overlay")]

    pick = (lambda i: names[i % len(names)]) if names else (lambda i: ["a red fox sitting in the snow, photo",
                                                                         "a lighthouse on a cliff at sunset",
                                                                         "a bowl of ramen, studio lighting"][i % 3])
    rows = [
        ("Paper setting: COOL-SD δ = 1.1, ν = 0.7", row(condition=pick(3), delta=1.1)),
        ("Aggressive: COOL-SD δ = 4", row(condition=pick(8), seed=1, delta=4.0, overlay=True)),
        ("Uniform relaxation (ν = 0)", row(condition=pick(5), seed=2, nu=0.0)),
        ("Sanity: δ = 1, ν = 0 gives Eagle-1's image", row(condition=pick(2), delta=1.0, nu=0.0)),
        ("LANTERN++ k = 5, λ = 20", row(condition=pick(7), lantern_k=min(5, K_MAX), lantern_lambda=20.0)),
        ("Static tree (Eagle-1's 25 nodes)", row(condition=pick(0), drafting="eagle-25")),
        ("Long drafts: L = 8", row(condition=pick(6), draft_len=8, overlay=True)),
    ]
    return [r for _, r in rows], [label for label, _ in rows]


# ---------------------------------------------------------------- 5. layout, then wiring
CSS = """
.panel-title {text-align: center}
#header {margin-bottom: 0}
"""


def build_demo() -> gr.Blocks:
    d = default_values()
    top_k_max = int(MODEL.target.vocab_size) if hasattr(MODEL.target, "vocab_size") else 256
    with gr.Blocks(title="COOL-SD · speculative decoding race", delete_cache=(3600, 7200)) as demo:
        note = f"\n\n⚠️ {MODEL.note}" if MODEL.note else ""
        gr.Markdown(f"## Speculative decoding race: Eagle-1 vs LANTERN++ vs COOL-SD\n"
                    f"Model: **{MODEL.name}** on {DEVICE.type.upper()}, {MODEL.grid[0]}×{MODEL.grid[1]} tokens. "
                    f"One click decodes the same image four ways; the decoder that has used the least compute "
                    f"runs next, so each frame compares equal compute.{note}", elem_id="header")
        with gr.Row(equal_height=False):
            # ---- controls
            with gr.Column(scale=1, min_width=320):
                if MODEL.conditioning == "text":
                    condition = gr.Textbox(value=d["condition"], label="Prompt", max_length=MAX_PROMPT_CHARS,
                                           elem_id="condition")
                else:
                    condition = gr.Dropdown(choices=MODEL.class_names, value=d["condition"], label="Digit",
                                                elem_id="condition")
                with gr.Row():
                    run_btn = gr.Button("Generate", variant="primary", elem_id="gen-btn")
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="stop-btn")
                overlay = gr.Checkbox(value=d["overlay"], label="overlay: colour tokens by outcome",
                                          elem_id="overlay")
                with gr.Accordion("Sampling", open=True):
                    seed = gr.Number(value=d["seed"], label="seed", precision=0, minimum=0, maximum=MAX_SEED,
                                         elem_id="seed")
                    temperature = gr.Slider(0.0, 2.0, value=d["temperature"], step=0.05,
                                                label="temperature (0 = greedy)", elem_id="temperature")
                    top_k = gr.Slider(0, top_k_max, value=d["top_k"], step=1, label="top-k (0 = off)",
                                          elem_id="top-k")
                    cfg_scale = gr.Slider(1.0, 10.0, value=d["cfg_scale"], step=0.1,
                                              label="CFG scale (1 = off)", elem_id="cfg")
                with gr.Accordion("Drafting", open=True):
                    draft_len = gr.Slider(1, MAX_DRAFT_LEN, value=d["draft_len"], step=1,
                                              label="draft length L", elem_id="draft-len")
                    drafting = gr.Radio(choices=[(v, k) for k, v in DRAFTING.items()], value=d["drafting"],
                                            label="Drafting", elem_id="drafting")
                with gr.Accordion("COOL-SD", open=True):
                    delta = gr.Slider(0.1, 8.0, value=d["delta"], step=0.05, label="delta (overall relaxation)",
                                          elem_id="delta")
                    nu = gr.Slider(0.0, 3.0, value=d["nu"], step=0.05, label="nu (annealing rate)",
                                       elem_id="nu")
                    mean_omega = gr.Checkbox(value=d["mean_omega"], label="mean omega = delta (sets mu)",
                                                 elem_id="mean-omega")
                    mu = gr.Slider(-5.0, 5.0, value=d["mu"], step=0.05, label="mu (schedule shift)",
                                       interactive=not d["mean_omega"], elem_id="mu")
                with gr.Accordion("LANTERN++", open=True):
                    lantern_k = gr.Slider(1, K_MAX, value=d["lantern_k"], step=1, label="k (neighbours)",
                                              elem_id="lantern-k")
                    lantern_lambda = gr.Slider(1.0, 50.0, value=d["lantern_lambda"], step=0.5,
                                                   label="lambda (budget)", elem_id="lantern-lambda")
                inputs = [condition, seed, temperature, top_k, cfg_scale, draft_len, drafting, delta, nu, mu,
                          mean_omega, lantern_k, lantern_lambda, overlay]
                for component in inputs:
                    if not isinstance(component, gr.Textbox):  # the prompt is checked by check_condition
                        checked(component)
                rows, labels = presets()
                gr.Examples(rows, inputs, label="Presets (click one, then Generate)", example_labels=labels,
                            cache_examples=False, examples_per_page=10)
            # ---- outputs
            with gr.Column(scale=3):
                with gr.Tabs():
                    with gr.Tab("Race", id="race"):
                        with gr.Row():
                            images = []
                            for i, label in enumerate(DECODERS.values()):
                                with gr.Column(min_width=160):
                                    gr.Markdown(f"**{label}**", elem_classes="panel-title")
                                    images.append(gr.Image(value=blank_image(), type="pil", format=IMAGE_FORMAT,
                                                           show_label=False, interactive=False, buttons=["download"],
                                                           elem_id=f"img-{i}", label=label))
                        gr.HTML(overlay_legend_html(), elem_id="legend")
                        stats_md = gr.Markdown(stats_markdown([]), elem_id="stats")
                        with gr.Row():
                            plot_acc = gr.Plot(label="acceptance per draft position", show_label=False,
                                               elem_id="plot-acc")
                            plot_len = gr.Plot(label="accepted length per round", show_label=False,
                                               elem_id="plot-len")
                        with gr.Accordion("Raw numbers (what the API returns)", open=False):
                            stats_json = gr.JSON(elem_id="stats-json", label="stats")
                    with gr.Tab("Theory", id="theory") as theory_tab:
                        gr.Markdown(THEORY_INTRO)
                        theory_btn = gr.Button("Update the theory plot", elem_id="theory-btn")
                        plot_theory = gr.Plot(label="exact TV vs accepted length", show_label=False,
                                              elem_id="plot-theory")
                    with gr.Tab("How it works", id="how"):
                        gr.Markdown(HOW_IT_WORKS, latex_delimiters=LATEX, elem_id="how")
        snapshot = gr.State({})

        # ---- wiring
        outputs = [*images, stats_md, plot_acc, plot_len, stats_json, snapshot]
        run_event = run_btn.click(race, inputs, outputs, api_name="race", concurrency_limit=WORKERS,
                                  concurrency_id="race", show_progress="minimal")
        stop_btn.click(stopped, stats_json, stats_md, cancels=[run_event], queue=False, api_visibility="private")
        overlay.change(show_overlay, [overlay, snapshot], images, api_name="overlay", concurrency_limit=4,
                       concurrency_id="overlay", show_progress="hidden")
        mean_omega.change(lambda m: gr.Slider(interactive=not m), mean_omega, mu, queue=False,
                          api_visibility="private", show_progress="hidden")
        theory_inputs = [delta, nu, mu, mean_omega, lantern_k, lantern_lambda]
        gr.on([theory_btn.click, theory_tab.select, delta.release, nu.release, mu.release, mean_omega.input,
               lantern_k.release, lantern_lambda.release], theory_plot, theory_inputs, plot_theory,
              api_name="theory", concurrency_limit=1, concurrency_id="theory", trigger_mode="always_last",
              show_progress="minimal")
        gr.api(model_info, api_name="model_info")
    demo.queue(max_size=64, default_concurrency_limit=1)
    return demo


demo = build_demo()
LAUNCH_KWARGS = {"theme": gr.themes.Soft(), "css": CSS, "show_error": True, "footer_links": ["api", "gradio"]}

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # no server_name/port here: a Space sets GRADIO_SERVER_NAME / GRADIO_SERVER_PORT, locally 127.0.0.1:7860
    demo.launch(**LAUNCH_KWARGS)
