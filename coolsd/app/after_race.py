"""After (or during) a race: Stop, the overlay, replay, the trace, a picked model's race area, all redrawn from a
`RaceTrace` (before a session races: its model's recorded one), never decoded. API: overlay, replay, trace."""

from __future__ import annotations

import dataclasses

import gradio as gr

from coolsd.app import racers as choice
from coolsd.app.context import APP_MODEL, Context, bad, user_errors
from coolsd.app.plots import stats_markdown
from coolsd.app.race_view import VIEW, RaceFrame, RaceNumbers, RaceOutputs, draw, label_of, replay_slider
from coolsd.app.racers import SLOTS, slot_keys
from coolsd.app.recorded import Recordings
from coolsd.app.settings import specs
from coolsd.compare.trace import RaceTrace
from coolsd.util.checks import check_int

STOP_WAIT_S = 10.0  # Stop waits at most this long for the cancelled race to close before it draws the final state


class AfterRace:
    """The after-race handlers; `live`: the races in progress, shared with the streaming handler."""

    def __init__(self, ctx: Context, live, recordings: Recordings) -> None:
        self.ctx, self.live, self.recordings = ctx, live, recordings
        self.overlay_spec = specs(ctx)["overlay"]

    def stopped(self, stats, overlay=False, request: gr.Request = None) -> RaceFrame:
        """Stop (cancels= ends the race): once it closes, its final state marked *Stopped*, else the last `stats`."""
        session = getattr(request, "session_hash", None)
        closed, trace = self.live.active.get(session, (None, None))
        if closed is None or not closed.wait(STOP_WAIT_S) or not len(trace):
            decoders = RaceNumbers.from_json(stats).decoders.values()
            return RaceFrame(stats_md=stats_markdown([dataclasses.asdict(d) for d in decoders], "**Stopped.**"))
        frame = draw(self.ctx.for_trace(trace.settings), trace, len(trace), bool(overlay),
                     f"**Stopped** after {len(trace)} race steps.")
        return frame.replace(replay=replay_slider(len(trace)))

    def show_overlay(self, overlay, snapshot, model=APP_MODEL, request: gr.Request = None) -> tuple:
        """Redraw the images on show (the last race's, or a replayed step's) with or without the overlay.

        During a race the new setting also applies to the frames still to come. Before any race of this
        session the recorded race of `model` (default: the app's) is on show. Returns the SLOTS images.
        """
        with user_errors():
            overlay = self.overlay_spec.check(overlay)
        model = self.ctx.picked(model).model_key
        session = getattr(request, "session_hash", None)
        if session in self.live.overlay:
            self.live.overlay[session] = overlay
        if not (snapshot or {}).get("images"):
            found = self.recordings.of_model(model)  # nothing raced in this session yet: the recorded race
            snapshot = found.frame.snapshot if found else {}
        ctx = self.view_context(snapshot)
        shown = (snapshot or {}).get("images", {})
        return tuple(ctx.render(*shown[slot], overlay) if slot in shown else ctx.blank_image() for slot in range(SLOTS))

    def view_context(self, snapshot) -> Context:
        """The context of the model variant whose images `snapshot` holds (the default one when empty)."""
        snapshot = snapshot or {}
        return self.ctx.for_model(snapshot.get("model")).variant(snapshot.get("variant"))

    def replay(self, step, overlay, trace, model=APP_MODEL) -> RaceFrame:
        """The race as it was after `step` race steps (no race yet: `model`'s recorded one)."""
        trace = self.recordings.on_show(trace, model, "nothing to replay yet: run a race first")
        with user_errors():
            step = check_int("replay step", step, 0, len(trace))
            overlay = self.overlay_spec.check(overlay)
        ctx = self.ctx.for_trace(trace.settings)
        found = self.recordings.of(ctx)
        label = f" {found.label}" if found and trace is found.trace else ""
        return draw(ctx, trace, step, overlay, f"**Replay**: step {step} of {len(trace)}.{label}")

    @staticmethod
    def trace_json(trace) -> dict:
        """The last race's trace: settings, model, every event in race order (`coolsd.compare.trace` format)."""
        if not isinstance(trace, RaceTrace):  # (the shipped recording is a file in assets/traces/)
            raise bad("no race yet: run a race first")
        return trace.to_json()

    @staticmethod
    def slot_layout(keys) -> tuple:
        """The image slots' titles and visibility for a racer choice (a bad one keeps them)."""
        try:
            keys = choice.check_racers(keys)
        except gr.Error:
            return tuple(gr.skip() for _ in range(2 * SLOTS))
        slots = slot_keys(keys)
        return (*(f"**{label_of(key)}**" for key in slots), *(gr.Column(visible=key is not None) for key in slots))

    def model_view(self, model, racers=None) -> tuple[RaceFrame, tuple]:
        """(frame, slot layout) for a newly picked `model`: its recorded race for the default racers, else blank."""
        ctx = self.ctx.for_model(model)
        found = self.recordings.of(ctx)
        if found is not None and list(racers or choice.DEFAULT_RACERS) == list(choice.DEFAULT_RACERS):
            return found.frame.replace(replay=replay_slider(len(found.trace)), trace=None), \
                self.slot_layout([k for k, _ in found.trace.racers[:-1]])
        blank = RaceFrame(images=(ctx.blank_image(),) * SLOTS, stats_md=stats_markdown([]), plot_acc=None,
                          plot_len=None, plot_hist=None, stats=None, replay=replay_slider(0), captions=("",) * SLOTS,
                          snapshot={}, trace=None)
        return blank, tuple(gr.skip() for _ in range(2 * SLOTS))

    def wire(self, controls, outputs: RaceOutputs, run_events) -> None:
        """Stop, the overlay checkbox and the replay slider (call once the race's events exist)."""
        view = outputs.components(*VIEW)

        def stop(stats, overlay, request: gr.Request):
            return RaceOutputs.values(self.stopped(stats, overlay, request), *VIEW, "replay")

        def replay(step, overlay, trace, model=APP_MODEL):
            """The race as it was after `step` race steps (outputs: 5 images, stats table, 3 plots, stats JSON, and
            the 5 lines under the images: what the model's classifier sees in each finished picture)."""
            return RaceOutputs.values(self.replay(step, overlay, trace, model), *VIEW)

        controls.stop.click(stop, [outputs.stats, controls["overlay"]], [*view, outputs.replay],
                            cancels=list(run_events), queue=False, api_visibility="private")
        controls["overlay"].change(self.show_overlay, [controls["overlay"], outputs.snapshot, controls["model"]],
                                   list(outputs.images), api_name="overlay", preprocess=False, concurrency_limit=4,
                                   concurrency_id="overlay", show_progress="hidden")
        outputs.replay.input(replay, [outputs.replay, controls["overlay"], outputs.trace, controls["model"]], view,
                             api_name="replay", preprocess=False, concurrency_limit=4, concurrency_id="replay",
                             trigger_mode="always_last", show_progress="hidden")
