"""The Race tab: up to four chosen decoders and vanilla AR, streamed round by round as a fair race (spec section 5,
`coolsd.compare.race`), recorded in a `RaceTrace` for replay. API: race (streams), overlay, replay, trace."""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from dataclasses import dataclass, field

import gradio as gr
from PIL import Image

from coolsd.app import racers as choice
from coolsd.app import share
from coolsd.app.after_race import AfterRace
from coolsd.app.context import Context, gpu, log, unexpected_errors
from coolsd.app.controls import Controls
from coolsd.app.lesson import lesson_markdown
from coolsd.app.plots import stats_markdown
from coolsd.app.race_view import (
    RaceFrame,
    RaceOutputs,
    captions,
    images,
    label_of,
    legend,
    numbers,
    plots,
    recognised,
    release_trace,
    replay_slider,
)
from coolsd.app.racers import slot_keys
from coolsd.app.recorded import Recordings
from coolsd.app.serving import STATE_TTL_S
from coolsd.app.settings import RacePlan, RaceSettings
from coolsd.compare.race import Race
from coolsd.compare.trace import RaceTrace
from coolsd.decoding.drafting import Chain
from coolsd.models.conditions import name_notice

ID, TITLE = "race", "Race"
# Streaming throttle: the browser is the bottleneck (drawing a frame is its dearest work)
IMAGE_EVERY_S = 0.2  # at most one frame per this many seconds (the first and the last always go out)
FRAME_SHARE = 0.25  # ... and fewer when slower: drawing + sending frames takes at most this share of the wall time
PLOT_EVERY_S = 0.8  # plots are costlier to draw: refresh them less often
DECODERS = {**{k: choice.RACERS[k] for k in choice.DEFAULT_RACERS}, choice.VANILLA[0]: choice.VANILLA[1]}


@dataclass(eq=False)
class LiveRaces:
    """Races in progress by session: the overlay flag (changeable mid-race) and, for Stop, (closed event, trace)."""

    overlay: dict[str, bool] = field(default_factory=dict)
    active: dict[str, tuple[threading.Event, RaceTrace]] = field(default_factory=dict)


class RaceStream:
    """`race`, the /race handler: one parameter per RaceSettings field, then the request; it checks every value."""

    def __init__(self, ctx: Context, live: LiveRaces) -> None:
        self.ctx, self.live = ctx, live
        signature = RaceSettings.signature(ctx)

        def race(*args, **kwargs):
            values = signature.bind(*args, **kwargs).arguments
            request = values.pop("request", None)
            settings = RaceSettings.check(ctx, values)
            names = ctx.for_model(settings.model).model.conditions
            notice = name_notice(names, values.get("condition"), settings.condition)
            yield from self.run_settings(settings, request, notice)

        race.__signature__, race.__annotations__ = signature, {"request": gr.Request}
        race.__doc__ = self.run_settings.__doc__
        self.race = race

    @gpu
    def _run(self, plan: RacePlan, overlay: bool, trace: RaceTrace, session: str | None = None, notice: str = ""):
        """RaceFrames, holding one lane for the whole race; `notice`: a line for every frame ("" for none)."""
        ctx = plan.ctx
        closed = threading.Event()
        with ctx.lane() as lane:
            race = None
            if session is not None:
                self.live.overlay[session] = overlay
                self.live.active[session] = (closed, trace)
            try:
                with unexpected_errors("race", "decoding"):
                    race = plan.race(trace, lane)
                    yield from self._frames(ctx, race, trace, overlay, session, notice)
            finally:
                if race is not None:
                    race.close()
                if trace.status == "running":
                    trace.status = "stopped"
                self.live.overlay.pop(session, None)
                if session is not None and self.live.active.get(session, (None,))[0] is closed:
                    del self.live.active[session]
                closed.set()

    def _frames(self, ctx: Context, race: Race, trace: RaceTrace, overlay: bool, session: str | None, notice: str):
        racers = race.racers
        snapshot: dict = {}  # the images on show, for the overlay toggle and the PNG strip
        dirty: set[str] = set()
        t0 = time.perf_counter()
        last_frame = last_plot = -math.inf
        frame_cost = 0.0  # seconds the last frame took: drawing it, and Gradio sending it while we are suspended
        first_frame_s = None

        def frame(final: bool) -> RaceFrame:
            nonlocal last_plot, first_frame_s, overlay
            now = time.perf_counter()
            live = self.live.overlay.get(session, overlay)
            toggled, overlay = live != overlay, live
            judged, first = set(snapshot.get("seen", {})), first_frame_s is None
            shown = images(ctx, trace, racers, overlay, snapshot,
                           lambda key: "decode" if key in dirty else "tint" if toggled else "skip")
            dirty.clear()
            changed = None if first or final or trace.settings.same_noise else set(snapshot["seen"]) - judged
            lines = captions(ctx, snapshot, changed)  # (same noise: every line counts vanilla AR's tokens)
            wall = now - t0
            first_frame_s = wall if first_frame_s is None else first_frame_s
            if final:
                trace.status = "finished"
            status = (f"**Finished** in {wall:.2f} s wall clock." if final else
                      f"Racing… {race.steps} rounds so far, {wall:.1f} s.") + (f" *{notice}.*" if notice else "")
            drawn = {}
            if final or now - last_plot >= PLOT_EVERY_S:
                drawn, last_plot = plots(trace, racers), now
            return RaceFrame(images=shown, **drawn, trace=trace, captions=lines,
                             **numbers(trace, racers, status, recognised(trace, snapshot), finished=final,
                                       wall_seconds=wall, first_frame_seconds=first_frame_s, steps=race.steps,
                                       notice=notice),
                             replay=replay_slider(len(trace), interactive=final),
                             snapshot={**snapshot, "images": dict(snapshot["images"]), "seen": dict(snapshot["seen"])})

        for racer, _ in trace.follow(race):
            dirty.add(racer.key)
            start = time.perf_counter()
            if start - last_frame >= max(IMAGE_EVERY_S, frame_cost * (1 - FRAME_SHARE) / FRAME_SHARE):
                yield frame(final=False)
                last_frame = time.perf_counter()
                frame_cost = last_frame - start
        dirty.update(r.key for r in racers)
        yield frame(final=True)

    def run_settings(self, settings: RaceSettings, request: gr.Request = None, notice: str = ""):
        """Race checked `settings`: the chosen decoders (default Eagle-1, LANTERN++, COOL-SD) and vanilla AR.

        Yields a frame per update (`coolsd.app.race_view.RaceFrame`; over the API, the outputs named by
        /model_info's "race_outputs": 5 images, stats table, 3 plots, stats JSON, replay slider). Unchanged
        outputs are skipped; the replay slider follows the race (its end: the steps so far; usable once it ends).
        A typed name read as another class is said in a toast, in the status line and in the stats JSON's
        "notice" ("rockit: showing rocket"; "" when the name was the class's own).
        """
        plan = settings.plan(self.ctx)  # the model variant, condition, configs and rules, or one clear error
        if notice:
            gr.Info(notice)
        if plan.sampling.greedy:
            gr.Warning("temperature 0 is greedy decoding: every rule commits the target's argmax, so the relaxed "
                       "rules can change the speed but not the image.")
        if settings.drafting != "chain" and settings.draft_len != Chain.draft_len:
            gr.Info(f"static tree '{settings.drafting}': the tree's depth sets the draft length; the L slider is not "
                    "used.")
        session = getattr(request, "session_hash", None)
        yield from self._run(plan, settings.overlay, plan.trace(), session, notice)


@dataclass(frozen=True)
class RaceHandle:
    """What panels read of the Race tab (`outputs.trace`: the session's race); a model switch cancels `run_events`."""

    outputs: RaceOutputs
    stream: RaceStream
    after: AfterRace
    run_events: tuple
    titles: tuple
    columns: tuple

    def gradio_race(self):
        """The /race handler as Gradio calls it: a generator of output tuples (`outputs.components()` order)."""
        race = self.stream.race

        def run(*args, **kwargs):
            for frame in race(*args, **kwargs):
                yield RaceOutputs.values(frame)

        return _like(race, run)

    def page_race(self):
        """/race for the Generate buttons: refused settings are a toast and a status line, not errors over the race."""
        race = self.gradio_race()

        def run(*args, **kwargs):
            frames = race(*args, **kwargs)
            try:
                first = next(frames)
            except StopIteration:
                return
            except gr.Error as err:
                gr.Warning(err.message)
                note = stats_markdown([], f"**Not raced:** {err.message.rstrip('.')}. The pictures below are the "
                                          "last race's.")
                yield RaceOutputs.values(RaceFrame(stats_md=note))
                return
            yield first
            yield from frames

        return _like(race, run)


def _like(handler, run):
    """`run` with `handler`'s signature, annotations and docstring (what Gradio's API shows)."""
    run.__signature__, run.__doc__, run.__annotations__ = handler.__signature__, handler.__doc__, \
        handler.__annotations__
    return run


def layout(ctx: Context, first: RaceFrame | None, steps: int
           ) -> tuple[RaceOutputs, list, list, gr.Button, gr.Markdown, gr.HTML]:
    """-> (outputs, slot titles, slot columns, the phone's Generate button, the lesson line, the overlay legend);
    `first`: the recorded race's frame or None."""
    titles, columns, shown, seen = [], [], [], []  # (text models: each image at full size, wrapping onto more rows)
    widest = max(v.display_hw[1] for v in ctx.variants.values())
    min_width = widest if ctx.model.conditioning == "text" else 150
    with gr.Row():
        for slot, key in enumerate(slot_keys(choice.DEFAULT_RACERS)):
            with gr.Column(min_width=min_width, visible=key is not None) as column:
                titles.append(gr.Markdown(f"**{label_of(key)}**", elem_classes="panel-title", elem_id=f"title-{slot}"))
                image = first.images[slot] if first and isinstance(first.images[slot], Image.Image) else \
                    ctx.blank_image()
                shown.append(gr.Image(value=image, type="pil", format=ctx.image_format, show_label=False,
                                      interactive=False, buttons=["download"], elem_id=f"img-{slot}",
                                      label=f"slot {slot}"))
                seen.append(gr.Markdown(first.captions[slot] if first and isinstance(first.captions[slot], str)
                                        else "", elem_classes="panel-seen", elem_id=f"seen-{slot}"))
            columns.append(column)
    # phones show this tab above the settings column: a Generate right under the images (hidden on wide screens)
    phone_generate = gr.Button("Generate", variant="primary", elem_id="gen-btn-phone", elem_classes="phone-only")
    legend_box = gr.HTML(legend(first.stats if first else None), elem_id="legend")  # (follows the race on show)
    lesson = gr.Markdown(lesson_markdown(first.stats if first else None), elem_id="lesson")  # the race on show's
    stats_md = gr.Markdown(first.stats_md if first else stats_markdown([]), elem_id="stats")
    replay = gr.Slider(0, max(steps, 1), value=steps, step=1, label="Replay: race step (after a race or a stop)",
                       interactive=first is not None, elem_id="replay")
    plot_acc = gr.Plot(first.plot_acc if first else None, label="acceptance per draft position", show_label=False,
                       elem_id="plot-acc")
    with gr.Row():
        plot_len = gr.Plot(first.plot_len if first else None, label="accepted length along the race",
                           show_label=False, elem_id="plot-len", min_width=300)
        plot_hist = gr.Plot(first.plot_hist if first else None, label="accepted length histogram",
                            show_label=False, elem_id="plot-hist", min_width=300)
    snapshot = gr.State({}, time_to_live=STATE_TTL_S)
    trace = gr.State(None, time_to_live=STATE_TTL_S, delete_callback=release_trace)
    outputs = RaceOutputs(tuple(shown), stats_md, plot_acc, plot_len, plot_hist, None, replay, tuple(seen), snapshot,
                          trace)
    return outputs, titles, columns, phone_generate, lesson, legend_box


def build(ctx: Context, controls: Controls, recordings: Recordings, tab: gr.Tab) -> RaceHandle:
    """The Race tab (call inside `gr.Tab(TITLE, id=ID)`), wired to the settings `controls`."""
    live = LiveRaces()
    stream, after = RaceStream(ctx, live), AfterRace(ctx, live, recordings)
    found = recordings.of(ctx)  # the recorded default race, drawn once: every visitor sees it at once
    if found is not None:
        log.info("race tab opens on the recorded default race (%d steps)", len(found.trace))
    first = found.frame if found else None
    outputs, titles, columns, phone_generate, lesson, legend_box = layout(ctx, first, len(found.trace) if found else 0)
    take = share.TakeAway(ctx, controls, after, outputs.snapshot, outputs.trace)
    with gr.Accordion("Raw numbers (what the API returns)", open=False):
        stats = gr.JSON(first.stats if first else None, elem_id="stats-json", label="stats")
    outputs = dataclasses.replace(outputs, stats=stats)
    stats.change(lesson_markdown, stats, lesson, queue=False, api_visibility="private", show_progress="hidden")
    stats.change(legend, stats, legend_box, queue=False, api_visibility="private", show_progress="hidden")
    handle = RaceHandle(outputs, stream, after, (), tuple(titles), tuple(columns))
    everything = outputs.components()
    api_race = gr.Button(visible=False)  # /race for API clients: refused settings raise there (one line)
    racing = {"preprocess": False, "concurrency_limit": ctx.workers, "concurrency_id": "race",
              "show_progress": "minimal"}
    api_event = api_race.click(handle.gradio_race(), controls.inputs, everything, api_name="race", **racing)
    run_event, phone_event = (button.click(handle.page_race(), controls.inputs, everything, api_visibility="private",
                                           **racing) for button in (controls.generate, phone_generate))
    for button in (controls.generate, phone_generate):  # the slots take the racers' names when a race starts
        button.click(after.slot_layout, controls["racers"], [*titles, *columns], queue=False,
                     api_visibility="private", show_progress="hidden")
    handle = dataclasses.replace(handle, run_events=(api_event, run_event, phone_event))
    after.wire(controls, handle.outputs, handle.run_events)
    take.wire()
    return handle
