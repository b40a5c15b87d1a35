"""The Race tab: the decoders on one model, condition and seed, streamed round by round (spec section 5).

A fair race: each step advances the decoder that has used the least compute time so far
(`coolsd.race`), so every streamed frame shows what each reached with the same compute budget.
API: race (streams), overlay.
"""

from __future__ import annotations

import dataclasses
import math
import time

import gradio as gr
import torch

from coolsd.engine import DecodeConfig, generate
from coolsd.plots import acceptance_figure, length_figure, overlay_legend_html, stats_markdown
from coolsd.race import Race, Racer
from coolsd.rules import make_rule
from coolsd.sampling import SamplingConfig
from coolsd.ui.context import Context, bad, gpu, json_safe, log, plain

ID, TITLE = "race", "Race"
# Streaming throttle: the browser, not the server, is the bottleneck (a frame costs it ~0.1-0.25 s).
IMAGE_EVERY_S = 0.2  # at most one frame per this many seconds (the first and the last always go out)
FRAME_SHARE = 0.25  # ... and fewer when slower: drawing + sending frames takes at most this share of the wall time
PLOT_EVERY_S = 0.8  # plots are costlier to draw: refresh them less often
DECODERS = {  # key -> panel title; the order of the panels
    "eagle-1": "Eagle-1 (lossless)",
    "lantern++": "LANTERN++",
    "cool-sd": "COOL-SD",
    "vanilla": "Vanilla AR (reference)",
}


def build_rules(ctx: Context, delta, nu, mu, mean_omega, lantern_k, lantern_lambda) -> dict:
    """The three rules from the UI values; a config ValueError becomes a one-line error."""
    try:
        return {
            "eagle-1": make_rule("eagle-1"),
            "lantern++": make_rule("lantern++", k=lantern_k, lam=lantern_lambda).with_neighbours(ctx.model.neighbours),
            "cool-sd": make_rule("cool-sd", delta=delta, nu=nu, mu=None if mean_omega else mu),
        }
    except ValueError as err:
        raise bad(str(err)) from None


class RacePanel:
    """The race handlers, bound to one Context (the Gradio events call these methods)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        # session -> overlay flag of a race in progress: the overlay checkbox changes it while the race streams
        self.live_overlay: dict[str, bool] = {}

    @gpu
    def _run(self, cond, sampling: SamplingConfig, config: DecodeConfig, rules: dict, seed: int, overlay: bool,
             settings: dict, session: str | None = None):
        """Generator of output frames; holds one lane of model handles for the whole race."""
        ctx = self.ctx
        num_tokens = ctx.model.num_tokens
        with ctx.lane() as lane:
            race = None
            if session is not None:
                self.live_overlay[session] = overlay
            try:
                racers = []
                for (key, label), (target, drafter) in zip(DECODERS.items(), lane):
                    rule = rules.get(key)
                    events = generate(target, drafter if rule else None, rule, cond, num_tokens, sampling, config,
                                      seed=seed)
                    racers.append(Racer(key, label, events, num_tokens))
                race = Race(racers)
                yield from self._frames(race, rules, config, overlay, settings, session)
            except gr.Error:
                raise
            except Exception as err:  # a bug or a device error: log it here, show one line there
                log.exception("race failed")
                raise bad(f"decoding failed: {type(err).__name__}: {plain(err)[:200]}") from None
            finally:
                if race is not None:
                    race.close()
                self.live_overlay.pop(session, None)

    def _frames(self, race: Race, rules: dict, config: DecodeConfig, overlay: bool, settings: dict,
                session: str | None):
        ctx = self.ctx
        racers = race.racers
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
            live = self.live_overlay.get(session, overlay)
            toggled, overlay = live != overlay, live
            images = []
            for r in racers:
                if r.key in dirty:
                    pixels = ctx.decode_pixels(r.tokens)
                    snapshot[r.key] = (pixels, r.filled.clone(), r.kinds.clone())
                    images.append(ctx.render(pixels, r.filled, r.kinds, overlay))
                elif toggled and snapshot[r.key] is not None:
                    images.append(ctx.render(*snapshot[r.key], overlay))
                else:
                    images.append(gr.skip())
            dirty.clear()
            stats = [r.stats(vanilla) for r in racers]
            wall = now - t0
            if first_frame_s is None:
                first_frame_s = wall
            status = (f"**Finished** in {wall:.2f} s wall clock." if final else
                      f"Racing… {race.steps} rounds so far, {wall:.1f} s.")
            payload = {"model": ctx.model.name, "settings": settings, "finished": final, "wall_seconds": wall,
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
            return (*images, stats_markdown(stats, status), *plots, json_safe(payload), dict(snapshot))

        for racer, _ in race:
            dirty.add(racer.key)
            start = time.perf_counter()
            if start - last_frame >= max(IMAGE_EVERY_S, frame_cost * (1 - FRAME_SHARE) / FRAME_SHARE):
                yield frame(final=False)
                last_frame = time.perf_counter()
                frame_cost = last_frame - start
        dirty.update(r.key for r in racers)
        yield frame(final=True)

    def race(self, condition, seed, temperature, top_k, cfg_scale, draft_len, drafting, delta, nu, mu, mean_omega,
             lantern_k, lantern_lambda, overlay, request: gr.Request = None):
        """Race Eagle-1, LANTERN++, COOL-SD and vanilla AR on one condition and seed; streams a frame per update.

        Yields (Eagle-1 image, LANTERN++ image, COOL-SD image, vanilla image, stats table (markdown),
        acceptance plot, accepted-length plot, stats (JSON), snapshot state). Unchanged outputs are skipped.
        """
        cond = self.ctx.check_condition(condition)
        try:
            sampling = SamplingConfig(cfg_scale=cfg_scale, temperature=temperature, top_k=top_k)
            config = DecodeConfig(draft_len=draft_len, tree=None if drafting == "chain" else drafting)
        except ValueError as err:
            raise bad(str(err)) from None
        rules = build_rules(self.ctx, delta, nu, mu, mean_omega, lantern_k, lantern_lambda)
        if sampling.greedy:
            gr.Warning("temperature 0 is greedy decoding: every rule commits the target's argmax, so the relaxed "
                       "rules can change the speed but not the image.")
        if config.tree is not None and draft_len != DecodeConfig().draft_len:
            gr.Info(f"static tree '{config.tree}': the tree's depth sets the draft length; the L slider is not used.")
        settings = {"condition": condition, "seed": seed, "sampling": dataclasses.asdict(sampling),
                    "draft_len": draft_len, "drafting": drafting,
                    "rules": {k: r.config() for k, r in rules.items()}}
        session = getattr(request, "session_hash", None)
        yield from self._run(cond, sampling, config, rules, seed, overlay, settings, session)

    @staticmethod
    def stopped(stats):
        """Stop: the race itself is cancelled (cancels=); this keeps its last numbers, marked as stopped."""
        decoders = (stats or {}).get("decoders") or {}
        return stats_markdown(list(decoders.values()), "**Stopped.**")

    def show_overlay(self, overlay, snapshot, request: gr.Request = None):
        """Redraw the four images of the last race with or without the outcome overlay (no decoding).

        During a race the new setting also applies to the frames still to come.
        """
        session = getattr(request, "session_hash", None)
        if session in self.live_overlay:
            self.live_overlay[session] = overlay
        snapshot = snapshot or {}
        images = []
        for key in DECODERS:
            item = snapshot.get(key)
            images.append(self.ctx.blank_image() if item is None else self.ctx.render(*item, overlay))
        return tuple(images)


def build(ctx: Context, tab: gr.Tab) -> RacePanel:
    """The Race tab's outputs, wired to ctx.controls and ctx.buttons (call inside `gr.Tab(TITLE, id=ID)`)."""
    panel = RacePanel(ctx)
    with gr.Row():
        images = []
        for i, label in enumerate(DECODERS.values()):
            with gr.Column(min_width=160):
                gr.Markdown(f"**{label}**", elem_classes="panel-title")
                images.append(gr.Image(value=ctx.blank_image(), type="pil", format=ctx.image_format,
                                       show_label=False, interactive=False, buttons=["download"],
                                       elem_id=f"img-{i}", label=label))
    gr.HTML(overlay_legend_html(), elem_id="legend")
    stats_md = gr.Markdown(stats_markdown([]), elem_id="stats")
    with gr.Row():
        plot_acc = gr.Plot(label="acceptance per draft position", show_label=False, elem_id="plot-acc")
        plot_len = gr.Plot(label="accepted length per round", show_label=False, elem_id="plot-len")
    with gr.Accordion("Raw numbers (what the API returns)", open=False):
        stats_json = gr.JSON(elem_id="stats-json", label="stats")
    snapshot = gr.State({})

    outputs = [*images, stats_md, plot_acc, plot_len, stats_json, snapshot]
    run_event = ctx.buttons["generate"].click(panel.race, list(ctx.controls.values()), outputs, api_name="race",
                                              concurrency_limit=ctx.workers, concurrency_id="race",
                                              show_progress="minimal")
    ctx.buttons["stop"].click(panel.stopped, stats_json, stats_md, cancels=[run_event], queue=False,
                              api_visibility="private")
    ctx.controls["overlay"].change(panel.show_overlay, [ctx.controls["overlay"], snapshot], images, api_name="overlay",
                                   concurrency_limit=4, concurrency_id="overlay", show_progress="hidden")
    return panel
