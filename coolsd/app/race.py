"""The Race tab: up to four chosen decoders and vanilla AR on one model, condition and seed, streamed round by round.

A fair race (spec section 5): each step advances the decoder that has used the least compute time so
far (`coolsd.compare.race`), so every streamed frame shows what each reached with the same compute budget.
Every step is recorded in a `coolsd.compare.trace.RaceTrace`: after a race (or a stop) the replay slider
redraws any step from it (no decoding), and the trace can be downloaded or fetched by the API.
API: race (streams), overlay, replay, trace.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time

import gradio as gr
from PIL import Image

from coolsd.app import racers as choice
from coolsd.app import share, shipped
from coolsd.app.context import Context, bad, gpu, log, unexpected_errors, user_errors
from coolsd.app.plots import (
    acceptance_figure,
    length_figure,
    length_histogram,
    overlay_legend_html,
    quantise,
    stats_markdown,
)
from coolsd.app.racers import SLOTS, slot_keys
from coolsd.app.serving import STATE_TTL_S
from coolsd.app.settings import RacePlan, RaceSettings, specs
from coolsd.compare.race import Race, Racer
from coolsd.compare.trace import RaceTrace
from coolsd.decoding.engine import DecodeConfig, generate
from coolsd.util.checks import check_int
from coolsd.util.jsonsafe import json_safe

ID, TITLE = "race", "Race"
# Streaming throttle: the browser, not the server, is the bottleneck (a frame costs it ~0.1-0.25 s).
IMAGE_EVERY_S = 0.2  # at most one frame per this many seconds (the first and the last always go out)
FRAME_SHARE = 0.25  # ... and fewer when slower: drawing + sending frames takes at most this share of the wall time
PLOT_EVERY_S = 0.8  # plots are costlier to draw: refresh them less often
STOP_WAIT_S = 10.0  # Stop waits at most this long for the cancelled race to close before it draws the final state
# Output positions of a race frame (the API returns them in this order; the two states are not returned).
IMAGES, STATS_MD, PLOT_ACC, PLOT_LEN, PLOT_HIST, STATS_JSON, REPLAY = range(0, SLOTS), 5, 6, 7, 8, 9, 10
DECODERS = {**{k: choice.RACERS[k] for k in choice.DEFAULT_RACERS}, choice.VANILLA[0]: choice.VANILLA[1]}


class RacePanel:
    """The race handlers, bound to one Context (the Gradio events call these methods)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.race = self._race_handler()  # race(condition, seed, ...): the /race endpoint (see _race_handler)
        self.overlay_spec = specs(ctx)["overlay"]
        # session -> overlay flag of a race in progress: the overlay checkbox changes it while the race streams
        self.live_overlay: dict[str, bool] = {}
        # session -> (set once the race has closed, its trace) of a race in progress, for Stop
        self.active: dict[str, tuple[threading.Event, RaceTrace]] = {}
        # the recorded default race shown at page open (`coolsd.app.shipped`), its label and images; None if absent
        self.shipped: RaceTrace | None = None
        self.shipped_label = ""
        self.shipped_snapshot: dict = {}
        # model key -> (trace, label, final frame) of its recorded default race, or None; drawn once per model
        self.recordings: dict[str, tuple[RaceTrace, str, tuple] | None] = {}
        self._recording_lock = threading.Lock()

    # ---------------------------------------------------------------- drawing (live frames and replays)
    def _images(self, ctx: Context, trace: RaceTrace, racers: list[Racer], overlay: bool, snapshot: dict,
                redraw) -> list:
        """One entry per slot: a new image where `redraw(key)` says so (snapshot updated), else gr.skip().

        snapshot: {"model": the picker key, "variant": the model variant's key, "images": slot -> (pixels, filled,
        kinds)}.
        """
        by_key = {r.key: r for r in racers}
        snapshot["model"], snapshot["variant"] = ctx.model_key, ctx.variant_key
        shown = snapshot.setdefault("images", {})
        images = []
        for slot, key in enumerate(slot_keys([k for k, _ in trace.racers[:-1]])):
            if key is None:
                images.append(gr.skip())
                continue
            r, how = by_key[key], redraw(key)
            if how == "decode":
                pixels = ctx.decode_pixels(r.tokens)
                shown[slot] = (quantise(pixels), r.filled.clone(), r.kinds.clone())  # compact: a session keeps it
                images.append(ctx.render(pixels, r.filled, r.kinds, overlay))
            elif how == "tint" and slot in shown:
                images.append(ctx.render(*shown[slot], overlay))
            else:
                images.append(gr.skip())
        return images

    @staticmethod
    def _plots(trace: RaceTrace, racers: list[Racer], step: int | None = None) -> list:
        spec = [r for r in racers if r.key != choice.VANILLA[0]]
        settings = trace.settings
        chain_depth = settings.get("draft_len", 1) if settings.get("drafting") == "chain" else 1
        depth = max([chain_depth, *(len(r.depth_sum) for r in spec)])
        return [acceptance_figure(spec, depth, trace.omegas(step)), length_figure(spec), length_histogram(spec)]

    @staticmethod
    def _numbers(trace: RaceTrace, racers: list[Racer], status: str, **extra) -> tuple[str, dict]:
        """(stats table in markdown under `status`, JSON payload: model, settings, `extra`, per-decoder stats)."""
        stats = [r.stats(racers[-1]) for r in racers]
        payload = json_safe({"model": trace.model, "settings": trace.settings, **extra,
                             "decoders": {r.key: s for r, s in zip(racers, stats)}})
        return stats_markdown(stats, status), payload

    # ---------------------------------------------------------------- the race
    @gpu
    def _run(self, plan: RacePlan, seed: int, overlay: bool, trace: RaceTrace, session: str | None = None):
        """Generator of output frames; holds one lane of model handles (of the plan's model) for the whole race."""
        ctx = plan.ctx
        num_tokens = ctx.model.num_tokens
        closed = threading.Event()
        with ctx.lane() as lane:
            race = None
            if session is not None:
                self.live_overlay[session] = overlay
                self.active[session] = (closed, trace)
            try:
                with unexpected_errors("race", "decoding"):
                    racers = []
                    for (key, label), (target, drafter) in zip(trace.racers, lane):
                        rule = plan.rules.get(key)
                        events = generate(target, drafter, rule, cond=plan.cond, num_tokens=num_tokens,
                                          sampling=plan.sampling, config=plan.config, seed=seed)
                        racers.append(Racer(key, label, events, num_tokens))
                    race = Race(racers)
                    yield from self._frames(ctx, race, trace, overlay, session)
            finally:
                if race is not None:
                    race.close()
                if trace.status == "running":
                    trace.status = "stopped"
                self.live_overlay.pop(session, None)
                if session is not None and self.active.get(session, (None,))[0] is closed:
                    del self.active[session]
                closed.set()

    def _frames(self, ctx: Context, race: Race, trace: RaceTrace, overlay: bool, session: str | None):
        racers = race.racers
        index = {r.key: i for i, r in enumerate(racers)}
        snapshot: dict = {}  # the images on show, for the overlay toggle and the PNG strip
        dirty: set[str] = set()
        t0 = time.perf_counter()
        last_frame = last_plot = -math.inf
        frame_cost = 0.0  # seconds the last frame took: drawing it, and Gradio sending it while we are suspended
        first_frame_s = None

        def frame(final: bool):
            nonlocal last_plot, first_frame_s, overlay
            now = time.perf_counter()
            live = self.live_overlay.get(session, overlay)
            toggled, overlay = live != overlay, live
            images = self._images(ctx, trace, racers, overlay, snapshot,
                                  lambda key: "decode" if key in dirty else "tint" if toggled else "skip")
            dirty.clear()
            wall = now - t0
            if first_frame_s is None:
                first_frame_s = wall
            if final:
                trace.status = "finished"
            status = (f"**Finished** in {wall:.2f} s wall clock." if final else
                      f"Racing… {race.steps} rounds so far, {wall:.1f} s.")
            table, payload = self._numbers(trace, racers, status, finished=final, wall_seconds=wall,
                                           first_frame_seconds=first_frame_s, steps=race.steps)
            if final or now - last_plot >= PLOT_EVERY_S:
                plots = self._plots(trace, racers)
                last_plot = now
            else:
                plots = [gr.skip()] * 3
            replay = gr.Slider(maximum=max(len(trace), 1), value=len(trace), interactive=True) if final else gr.skip()
            return (*images, table, *plots, payload, replay, {**snapshot, "images": dict(snapshot["images"])}, trace)

        for racer, event in race:
            trace.record(index[racer.key], event)
            dirty.add(racer.key)
            start = time.perf_counter()
            if start - last_frame >= max(IMAGE_EVERY_S, frame_cost * (1 - FRAME_SHARE) / FRAME_SHARE):
                yield frame(final=False)
                last_frame = time.perf_counter()
                frame_cost = last_frame - start
        dirty.update(r.key for r in racers)
        yield frame(final=True)

    def run_settings(self, settings: RaceSettings, request: gr.Request = None):
        """Race checked `settings`: the chosen decoders (default Eagle-1, LANTERN++, COOL-SD) and vanilla AR.

        Yields a frame per update: (5 images: the racers in order, unused slots skipped, vanilla AR last;
        stats table (markdown); acceptance, accepted-length and histogram plots; stats (JSON); replay slider;
        snapshot and trace states). Unchanged outputs are skipped.
        """
        plan = settings.plan(self.ctx)  # the model variant, condition, configs and rules, or one clear error
        if plan.sampling.greedy:
            gr.Warning("temperature 0 is greedy decoding: every rule commits the target's argmax, so the relaxed "
                       "rules can change the speed but not the image.")
        if plan.config.tree is not None and settings.draft_len != DecodeConfig().draft_len:
            gr.Info(f"static tree '{plan.config.tree}': the tree's depth sets the draft length; the L slider is not "
                    "used.")
        ctx = plan.ctx
        recorded = {"condition": ctx.model.condition_name(settings.condition, settings.style), "seed": settings.seed,
                    "sampling": dataclasses.asdict(plan.sampling), "draft_len": settings.draft_len,
                    "drafting": settings.drafting, "racers": plan.keys, "resolution": ctx.variant_key,
                    "model": ctx.model_key, "style": settings.style,
                    "rules": {k: r.config() for k, r in plan.rules.items()}}
        trace = RaceTrace(ctx.model.name, recorded, [(k, choice.RACERS[k]) for k in plan.keys] + [choice.VANILLA],
                          ctx.model.num_tokens, ctx.model.grid)
        session = getattr(request, "session_hash", None)
        yield from self._run(plan, settings.seed, settings.overlay, trace, session)

    def _race_handler(self):
        """The /race handler: one parameter per RaceSettings field, in order (generated), then the request.
        Every value is checked here (the event is wired with preprocess=False)."""
        ctx, signature = self.ctx, RaceSettings.signature(self.ctx)

        def race(*args, **kwargs):
            values = signature.bind(*args, **kwargs).arguments
            request = values.pop("request", None)
            yield from self.run_settings(RaceSettings.check(ctx, values), request)

        race.__signature__, race.__annotations__ = signature, {"request": gr.Request}
        race.__doc__ = self.run_settings.__doc__
        return race

    # ---------------------------------------------------------------- after (or during) a race
    def stopped(self, stats, overlay=False, request: gr.Request = None):
        """Stop: the race itself is cancelled (cancels=). This waits for it to close, then shows the state it
        reached (every recorded step, so no late frame overrides it) marked *Stopped*, and opens the replay.

        Returns (5 images, stats table, 3 plots, stats (JSON), snapshot state, replay slider). Without a race
        of this session in progress: the last numbers shown (`stats`), marked stopped, and nothing else.
        """
        session = getattr(request, "session_hash", None)
        closed, trace = self.active.get(session, (None, None))
        if closed is None or not closed.wait(STOP_WAIT_S) or not len(trace):
            decoders = (stats or {}).get("decoders") or {}
            table = stats_markdown(list(decoders.values()), "**Stopped.**")
            return (*[gr.skip()] * SLOTS, table, *[gr.skip()] * 5, gr.skip())
        view = self._view(trace, len(trace), bool(overlay), f"**Stopped** after {len(trace)} race steps.")
        return (*view, gr.Slider(maximum=len(trace), value=len(trace), interactive=True))

    def show_overlay(self, overlay, snapshot, model=None, request: gr.Request = None):
        """Redraw the images on show (the last race's, or a replayed step's) with or without the overlay.

        During a race the new setting also applies to the frames still to come. Before any race of this
        session the recorded race of `model` (default: the app's) is on show.
        """
        with user_errors():
            overlay = self.overlay_spec.check(overlay)
        session = getattr(request, "session_hash", None)
        if session in self.live_overlay:
            self.live_overlay[session] = overlay
        if not (snapshot or {}).get("images"):
            found = self.recording(self.ctx.for_model(model))  # nothing raced in this session yet: the recorded race
            snapshot = found[2][-1] if found else {}
        ctx = self.view_context(snapshot)
        shown = (snapshot or {}).get("images", {})
        return tuple(ctx.render(*shown[slot], overlay) if slot in shown else ctx.blank_image() for slot in range(SLOTS))

    def view_context(self, snapshot) -> Context:
        """The context of the model variant whose images `snapshot` holds (the default one when empty)."""
        snapshot = snapshot or {}
        return self.ctx.for_model(snapshot.get("model")).variant(snapshot.get("variant"))

    def replay(self, step, overlay, trace, model=None):
        """The race as it was after `step` race steps, from its recorded events (no decoding).

        Returns (5 images, stats table, the three plots, stats (JSON), snapshot state) like a race frame.
        Before any race of this session: the recorded race of `model` (default: the app's).
        """
        trace = self.trace_or_shipped(trace, model)
        if trace is None:
            raise bad("nothing to replay yet: run a race first")
        with user_errors():
            step = check_int("replay step", step, 0, len(trace))
            overlay = self.overlay_spec.check(overlay)
        found = self.recording(self.ctx.for_trace(trace.settings))
        label = f" {found[1]}" if found and trace is found[0] else ""
        return self._view(trace, step, overlay, f"**Replay**: step {step} of {len(trace)}.{label}")

    def trace_or_shipped(self, trace, model=None) -> RaceTrace | None:
        """This session's race when it has one, else the recorded default race of `model` (default: the app's;
        None when it has none)."""
        if isinstance(trace, RaceTrace) and len(trace):
            return trace
        found = self.recording(self.ctx.for_model(model))
        return found[0] if found else None

    def recording(self, ctx: Context) -> tuple[RaceTrace, str, tuple] | None:
        """(trace, status line, final frame) of the recorded default race of `ctx`'s model (`coolsd.app.shipped`),
        read and drawn once per model and process; None when there is no current recording."""
        key = ctx.model_key
        if key not in self.recordings:
            with self._recording_lock:
                if key not in self.recordings:
                    found = shipped.load(ctx.for_model())
                    if found is not None:
                        trace, label = found[0], shipped.label(found[1])
                        found = (trace, label, self._view(trace, len(trace), False, label))
                    self.recordings[key] = found
        return self.recordings[key]

    def load_shipped(self) -> tuple | None:
        """Load the recorded default race of the app's model (`coolsd.app.shipped`); its final frame, or None."""
        found = self.recording(self.ctx)
        if found is None:
            return None
        self.shipped, self.shipped_label, frame = found
        self.shipped_snapshot = frame[-1]
        return frame

    def model_view(self, model, racers=None) -> tuple:
        """The race area for a newly picked `model`: its recorded default race when the racers are the default
        ones, else blank; the session's trace cleared. Returns the race's outputs (`outputs`), in order."""
        ctx = self.ctx.for_model(model)
        found = self.recording(ctx)
        if found is not None and list(racers or choice.DEFAULT_RACERS) == list(choice.DEFAULT_RACERS):
            trace, _, frame = found
            slider = gr.Slider(maximum=max(len(trace), 1), value=len(trace), interactive=True)
            return (*frame[:-1], slider, frame[-1], None)
        return (*[ctx.blank_image()] * SLOTS, stats_markdown([]), None, None, None, None,
                gr.Slider(maximum=1, value=0, interactive=False), {}, None)

    def _view(self, trace: RaceTrace, step: int, overlay: bool, status: str) -> tuple:
        racers = trace.replay(step)
        snapshot: dict = {}
        ctx = self.ctx.for_trace(trace.settings)
        images = self._images(ctx, trace, racers, overlay, snapshot, lambda key: "decode")
        table, payload = self._numbers(trace, racers, status, replay_step=step, steps=len(trace),
                                       race_status=trace.status)
        return (*images, table, *self._plots(trace, racers, step), payload, snapshot)

    @staticmethod
    def trace_json(trace) -> dict:
        """The last race's trace: settings, model, every event in race order (`coolsd.compare.trace` format)."""
        if not isinstance(trace, RaceTrace):  # (the shipped recording is a file in assets/traces/)
            raise bad("no race yet: run a race first")
        return trace.to_json()

    @staticmethod
    def slot_layout(keys):
        """Titles and visibility of the image slots for a racer choice (UI only; bad choices keep the layout)."""
        try:
            keys = choice.check_racers(keys)
        except gr.Error:
            return tuple(gr.skip() for _ in range(2 * SLOTS))
        titles, columns = [], []
        for key in slot_keys(keys):
            label = choice.RACERS.get(key) or (choice.VANILLA[1] if key == choice.VANILLA[0] else "")
            titles.append(f"**{label}**")
            columns.append(gr.Column(visible=key is not None))
        return (*titles, *columns)


def release_trace(trace) -> None:
    """Gradio deletes a session's trace state: drop its recorded steps too."""
    if isinstance(trace, RaceTrace):
        trace.release()


def image_row(ctx: Context, first: tuple | None) -> tuple[list, list, list]:
    """The racers' image slots in one row -> (titles, columns, images); `first`: the recorded race's frame or None."""
    default = slot_keys(choice.DEFAULT_RACERS)
    titles, columns, images = [], [], []
    # text models (LlamaGen): each image at its full resolution, wrapping onto more rows; digits: side by side
    widest = max(v.display_hw[1] for v in ctx.variants.values()) if ctx.variants else ctx.display_hw[1]
    min_width = widest if ctx.model.conditioning == "text" else 150
    with gr.Row():
        for slot, key in enumerate(default):
            label = choice.RACERS.get(key) or (choice.VANILLA[1] if key else "")
            with gr.Column(min_width=min_width, visible=key is not None) as column:
                titles.append(gr.Markdown(f"**{label}**", elem_classes="panel-title", elem_id=f"title-{slot}"))
                shown = first[slot] if first and isinstance(first[slot], Image.Image) else ctx.blank_image()
                images.append(gr.Image(value=shown,
                                       type="pil", format=ctx.image_format,
                                       show_label=False, interactive=False, buttons=["download"],
                                       elem_id=f"img-{slot}", label=f"slot {slot}"))
            columns.append(column)
    return titles, columns, images


def build(ctx: Context, tab: gr.Tab) -> RacePanel:
    """The Race tab's outputs, wired to ctx.controls and ctx.buttons (call inside `gr.Tab(TITLE, id=ID)`)."""
    panel = RacePanel(ctx)
    first = panel.load_shipped()  # the recorded default race, drawn once here: every visitor sees it at once
    if first is not None:
        log.info("race tab opens on the recorded default race (%d steps)", len(panel.shipped))
    titles, columns, images = image_row(ctx, first)
    # phones show this tab above the settings column: a Generate right under the images (hidden on wide screens)
    phone_generate = gr.Button("Generate", variant="primary", elem_id="gen-btn-phone", elem_classes="phone-only")
    gr.HTML(overlay_legend_html(), elem_id="legend")
    stats_md = gr.Markdown(first[STATS_MD] if first else stats_markdown([]), elem_id="stats")
    steps = len(panel.shipped) if first else 0
    replay = gr.Slider(0, max(steps, 1), value=steps, step=1, label="Replay: race step (after a race or a stop)",
                       interactive=first is not None, elem_id="replay")
    plot_acc = gr.Plot(first[PLOT_ACC] if first else None, label="acceptance per draft position", show_label=False,
                       elem_id="plot-acc")
    with gr.Row():
        plot_len = gr.Plot(first[PLOT_LEN] if first else None, label="accepted length per round", show_label=False,
                           elem_id="plot-len")
        plot_hist = gr.Plot(first[PLOT_HIST] if first else None, label="accepted length histogram",
                            show_label=False, elem_id="plot-hist")
    # a session's race state lives STATE_TTL_S after its last update (and at most SESSION_CAPACITY sessions)
    snapshot = gr.State({}, time_to_live=STATE_TTL_S)
    trace = gr.State(None, time_to_live=STATE_TTL_S, delete_callback=release_trace)
    take = share.TakeAway(ctx, panel, snapshot, trace)
    with gr.Accordion("Raw numbers (what the API returns)", open=False):
        stats_json = gr.JSON(first[STATS_JSON] if first else None, elem_id="stats-json", label="stats")
    panel.trace_state, panel.stats_json = trace, stats_json  # the microscope and the tour read them

    c = ctx.controls
    outputs = [*images, stats_md, plot_acc, plot_len, plot_hist, stats_json, replay, snapshot, trace]
    run_event = ctx.buttons["generate"].click(panel.race, list(c.values()), outputs, api_name="race", preprocess=False,
                                              concurrency_limit=ctx.workers, concurrency_id="race",
                                              show_progress="minimal")
    phone_event = phone_generate.click(panel.race, list(c.values()), outputs, api_visibility="private",
                                       preprocess=False, concurrency_limit=ctx.workers, concurrency_id="race",
                                       show_progress="minimal")
    panel.outputs, panel.run_events = outputs, [run_event, phone_event]  # (a model switch cancels a race)
    view = [*images, stats_md, plot_acc, plot_len, plot_hist, stats_json, snapshot]
    ctx.buttons["stop"].click(panel.stopped, [stats_json, c["overlay"]], [*view, replay],
                              cancels=[run_event, phone_event], queue=False, api_visibility="private")
    c["overlay"].change(panel.show_overlay, [c["overlay"], snapshot, c["model"]], images, api_name="overlay",
                        preprocess=False, concurrency_limit=4, concurrency_id="overlay", show_progress="hidden")
    c["racers"].change(panel.slot_layout, c["racers"], [*titles, *columns], queue=False, api_visibility="private",
                       show_progress="hidden")
    replay.input(panel.replay, [replay, c["overlay"], trace, c["model"]], view, api_name="replay", preprocess=False,
                  concurrency_limit=4, concurrency_id="replay", trigger_mode="always_last", show_progress="hidden")
    take.wire()
    return panel
