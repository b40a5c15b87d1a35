"""app.py and coolsd.app: the race handler, the HTTP API through gradio_client (in-process server), and input checks.

Runs on the tiny random-weight model (`tests/demo_app.py`, built with no environment variable) so it takes
seconds; one test decodes with the shipped embedded model when assets/embedded exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from demo_app import RaceAPI, api_frame, served, tiny_demo
from PIL import Image

from coolsd.app import context, controls, racers
from coolsd.app import race as race_ui
from coolsd.app import settings as settings_ui
from coolsd.app.demo import Demo, build_demo
from coolsd.app.settings import RaceSettings, make_racer_rule
from coolsd.decoding.drafting import Chain, Jacobi

APP = tiny_demo()
RACE = RaceAPI(APP)
USED = [0, 1, 2, racers.VANILLA_SLOT]  # image slots of the default racers (Eagle-1, LANTERN++, COOL-SD) + vanilla

# gradio's queue uses pandas options that pandas 3 deprecates: harmless, and not ours
pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")
EMBEDDED = Path(__file__).resolve().parents[2] / "assets" / "embedded"


DEADLINE_S = 120.0  # the longest any wait below may take before the test fails (a generous deadline, not a timing)


def kwargs(**changes) -> dict:
    return RaceSettings.defaults(APP.ctx).as_dict() | changes


def wait_until(condition, what: str, deadline_s: float = DEADLINE_S, poll_s: float = 0.01) -> None:
    """Poll `condition()` until it holds; fail with `what` once `deadline_s` seconds have passed."""
    import time

    end = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < end, f"timed out after {deadline_s:.0f} s waiting for {what}"
        time.sleep(poll_s)


@pytest.fixture(scope="module")
def server():
    """The app's own Blocks, launched in-process on a free port; every round streamed (no throttle)."""
    with served(APP.blocks, {"IMAGE_EVERY_S": 0.0, "FRAME_SHARE": 1.0, "PLOT_EVERY_S": 0.0}) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    from gradio_client import Client

    return Client(server, verbose=False, download_files=False, analytics_enabled=False)


def _image_size(value) -> tuple[int, int]:
    path = value["path"] if isinstance(value, dict) else value
    with Image.open(path) as img:
        return img.size


# ---------------------------------------------------------------- the handler, without a server
def test_handler_streams_and_ends_complete(monkeypatch):
    monkeypatch.setattr(race_ui, "IMAGE_EVERY_S", 0.0)
    monkeypatch.setattr(race_ui, "FRAME_SHARE", 1.0)
    frames = list(RACE.race(**kwargs(overlay=True)))
    assert len(frames) > 5
    last = frames[-1]
    stats = last.stats
    assert stats["finished"] and set(stats["decoders"]) == set(race_ui.DECODERS)
    for key, s in stats["decoders"].items():
        assert s["tokens"] == APP.ctx.model.num_tokens, key
    assert stats["decoders"]["vanilla"]["target_forwards"] == APP.ctx.model.num_tokens
    assert stats["decoders"]["vanilla"]["mean_accepted_length"] == 1
    # the tiny model's drafter is known to help (tau 3.2-4 on 16 tokens): every speculative decoder
    # needs fewer target forwards than tokens, so a tau stuck at 1 (or a miscount) fails here
    for key in set(race_ui.DECODERS) - {"vanilla"}:
        assert stats["decoders"][key]["target_forwards"] < APP.ctx.model.num_tokens, key
    assert all(last.images[i].size == APP.ctx.display_hw[::-1] for i in USED)
    # a frame only re-draws the decoder that moved: the others are skipped
    import gradio as gr

    assert any(sum(not isinstance(v, type(gr.skip())) for v in f.images) == 1 for f in frames[1:-1])


def test_the_replay_slider_follows_the_live_race(monkeypatch):
    """While a race streams, every frame moves the replay slider's end to the steps recorded so far (not the
    recorded race's length shown before), locked until the race ends; the last frame opens it at the end."""
    monkeypatch.setattr(race_ui, "IMAGE_EVERY_S", 0.0)
    monkeypatch.setattr(race_ui, "FRAME_SHARE", 1.0)
    seen = []
    for frame in RACE.race(**kwargs(seed=4)):
        steps = len(frame.trace)  # (read now: the trace grows after the frame is yielded)
        seen.append((frame.replay.maximum, frame.replay.value, frame.replay.interactive, steps))
    assert len(seen) > 5
    *live, final = seen
    assert all(top == value == steps and interactive is False for top, value, interactive, steps in live), live
    assert [top for top, *_ in live] == sorted(top for top, *_ in live) and live[0][0] < final[0]
    assert final[:3] == (final[3], final[3], True) and final[3] == sum(
        RACE.replay(final[3], False, frame.trace).stats["decoders"][k]["rounds"] for k in race_ui.DECODERS)


def test_the_lesson_line_follows_the_stats_on_show():
    """The Race tab's lesson line is redrawn from the stats JSON whenever it changes (race frames, replay, Stop, a
    model pick), so its numbers are the table's beside it."""
    from coolsd.app.lesson import lesson_markdown

    fns = [f for f in APP.blocks.fns.values() if f.fn is lesson_markdown]
    assert len(fns) == 1, fns
    stats = next(b for b in APP.blocks.blocks.values() if getattr(b, "elem_id", None) == "stats-json")
    lesson = next(b for b in APP.blocks.blocks.values() if getattr(b, "elem_id", None) == "lesson")
    assert fns[0].targets == [(stats._id, "change")]
    assert [b._id for b in fns[0].inputs] == [stats._id] and [b._id for b in fns[0].outputs] == [lesson._id]


def test_same_seed_same_images_and_cool_sd_at_omega_one_is_eagle(monkeypatch):
    monkeypatch.setattr(race_ui, "IMAGE_EVERY_S", 10.0)  # first and last frame only
    a = list(RACE.race(**kwargs(seed=5, delta=1.0, nu=0.0)))[-1]
    b = list(RACE.race(**kwargs(seed=5, delta=1.0, nu=0.0)))[-1]
    assert sorted(a.snapshot["images"]) == USED
    same = [torch.equal(a.snapshot["images"][k][0], b.snapshot["images"][k][0]) for k in USED]
    assert all(same)  # same seed, same pixels
    # delta = 1, nu = 0 makes omega = 1: COOL-SD (slot 2) is Eagle-1 (slot 0) draw for draw
    assert torch.equal(a.snapshot["images"][2][0], a.snapshot["images"][0][0])


def test_import_writes_no_files_next_to_the_app():
    """Subclassing a Gradio component would make Gradio write a .pyi beside it at import (fails on a read-only
    Space): none next to app.py nor anywhere in the package, after the demo was built."""
    root = Path(__file__).resolve().parents[2]
    assert not (root / "app.pyi").exists() and not list((root / "coolsd").rglob("*.pyi"))


def test_closing_a_race_returns_its_model_lane():
    gen = RACE.race(**kwargs())
    next(gen)
    assert APP.ctx.lanes.qsize() == APP.workers - 1
    gen.close()  # what Gradio does on Stop
    assert APP.ctx.lanes.qsize() == APP.workers


def test_a_failure_inside_a_race_is_one_line_and_returns_the_lane(monkeypatch, caplog):
    """A bug or device error while decoding: logged with its trace, shown as one line, the lane given back."""
    import gradio as gr

    def broken(*args, **kw):
        raise RuntimeError("device <lost>")

    monkeypatch.setattr(settings_ui, "generate", broken)
    with pytest.raises(gr.Error) as err, caplog.at_level("ERROR", logger="coolsd.app"):
        list(RACE.race(**kwargs()))
    assert str(err.value.message) == "decoding failed: RuntimeError: device ‹lost›"
    assert any(r.getMessage() == "race failed" and r.exc_info for r in caplog.records)
    assert APP.ctx.lanes.qsize() == APP.workers


def test_overlay_toggled_mid_race_applies_to_the_coming_frames(monkeypatch):
    import numpy as np

    monkeypatch.setattr(race_ui, "IMAGE_EVERY_S", 0.0)
    monkeypatch.setattr(race_ui, "FRAME_SHARE", 1.0)
    request = type("FakeRequest", (), {"session_hash": "session-1"})()
    gen = RACE.race(**kwargs(overlay=False), request=request)
    next(gen)
    assert RACE.live_overlay["session-1"] is False
    RACE.show_overlay(True, {}, request=request)  # the checkbox, clicked while the race streams
    frames = list(gen)
    final = frames[-1]
    for i in USED:
        expected = APP.ctx.render(*final.snapshot["images"][i], True)
        assert np.array_equal(np.asarray(final.images[i]), np.asarray(expected)), i
    assert "session-1" not in RACE.live_overlay  # no state left behind


def test_model_choice_falls_back_and_says_so(monkeypatch):
    import types

    from coolsd.models import registry
    from coolsd.models.bundle import BundleError

    def stub(kind):
        return types.SimpleNamespace(name="stub", kind=kind, note="")

    def missing(what):
        def load():
            raise BundleError(f"{what} model folder not found")
        return load

    specs = dict(registry.MODELS)
    for key in ("emoji", "mnist"):
        monkeypatch.setitem(registry.MODELS, key, registry.ModelSpec(key, key, missing(key), lambda: False,
                                                                      specs[key].fallback))
    monkeypatch.setitem(registry.MODELS, "tiny", registry.ModelSpec("tiny", "tiny", lambda: [stub("tiny")],
                                                                     lambda: True))
    monkeypatch.delenv("COOLSD_LLAMAGEN_DIR", raising=False)
    (model,), note = registry.load_or_fallback("embedded")
    assert model.kind == "tiny" and "mnist model is missing" in note and note == model.note
    (model,), note = registry.load_or_fallback("emoji")
    assert model.kind == "tiny" and "emoji model is missing" in note and "mnist model is missing" in note
    (model,), note = registry.load_or_fallback("llamagen")
    assert model.kind == "tiny" and "LlamaGen weights not found" in note
    assert registry.load_or_fallback("tiny")[1] == ""  # asked for: no warning


def test_stop_keeps_the_last_numbers_marked_stopped():
    stats = {"decoders": {"eagle-1": {"decoder": "Eagle-1", "tokens": 5, "num_tokens": 16, "target_forwards": 2,
                                      "mean_accepted_length": 2.5, "compute_seconds": 0.1, "speedup": None,
                                      "finished": False}}}
    text = RACE.stopped(stats).stats_md  # no race of this session in progress: the numbers shown
    assert text.startswith("**Stopped.**") and "5 / 16" in text and "–" in text
    assert RACE.stopped(None).stats_md.startswith("**Stopped.**")


def test_stop_waits_for_the_race_to_close_and_shows_what_it_reached(monkeypatch):
    """Stop during a race: once the race has closed, the page gets the state of every recorded step (so no frame
    still in flight can override it), marked stopped, and the replay opens there."""
    import threading

    monkeypatch.setattr(race_ui, "IMAGE_EVERY_S", 0.0)
    monkeypatch.setattr(race_ui, "FRAME_SHARE", 1.0)
    request = type("FakeRequest", (), {"session_hash": "session-stop"})()
    gen = RACE.race(**kwargs(seed=3), request=request)
    frames = [next(gen) for _ in range(6)]
    trace = frames[-1].trace
    box = {}
    stopper = threading.Thread(target=lambda: box.setdefault("out", RACE.stopped(frames[-1].stats, True, request)))
    stopper.start()  # Stop's handler waits for the race to close ...
    gen.close()  # ... which Gradio's cancel does
    stopper.join(DEADLINE_S)
    assert not stopper.is_alive() and "session-stop" not in RACE.active
    out = box["out"]
    assert out.stats_md.startswith(f"**Stopped** after {len(trace)} race steps.")
    assert out.stats["decoders"] == RACE.replay(len(trace), True, trace).stats["decoders"]
    assert out.replay.maximum == len(trace) == 6 and trace.status == "stopped"


def test_text_conditioning_rejects_an_oversized_or_empty_prompt(monkeypatch):
    import gradio as gr

    monkeypatch.setattr(APP.ctx.model, "conditioning", "text")
    assert APP.ctx.check_condition("  a cat  ") == "a cat"
    with pytest.raises(gr.Error, match="too long"):
        APP.ctx.check_condition("x" * (APP.ctx.model.max_prompt_chars + 1))
    with pytest.raises(gr.Error, match="non-empty"):
        APP.ctx.check_condition("   ")


# ---------------------------------------------------------------- through the HTTP API
def test_api_race_streams_several_updates_and_consistent_final_stats(client):
    values = kwargs(seed=3)
    job = client.submit(**values, api_name="/race")
    job.result(timeout=DEADLINE_S)  # waits for the last streamed update, with a deadline
    updates = [api_frame(u) for u in job.outputs()]
    assert len(updates) >= 5
    final = updates[-1]
    stats = final.stats
    assert all(_image_size(final.images[i]) == APP.ctx.display_hw[::-1] for i in USED)  # three decoders + vanilla
    assert stats["finished"]
    for key, s in stats["decoders"].items():
        assert s["tokens"] == APP.ctx.model.num_tokens, key
    # the numbers the API reports are the library's: Eagle-1 decoded directly with the same settings
    from coolsd.decoding.engine import DecodeConfig, run
    from coolsd.decoding.rules import make_rule
    from coolsd.decoding.sampling import SamplingConfig

    sampling = SamplingConfig(cfg_scale=values["cfg_scale"], temperature=values["temperature"], top_k=values["top_k"])
    m = APP.ctx.model
    ref = run(m.target, m.drafter, make_rule("eagle-1"), cond=APP.ctx.check_condition(values["condition"]),
              num_tokens=m.num_tokens,
              sampling=sampling, config=DecodeConfig(Chain(values["draft_len"])), seed=values["seed"])
    eagle = stats["decoders"]["eagle-1"]
    assert (eagle["target_forwards"], eagle["mean_accepted_length"]) == (ref.target_forwards, pytest.approx(ref.tau))
    assert ref.tau > 1  # the tiny drafter helps, so the comparison is not 1 == 1
    assert all(p["type"] == "plotly" for p in (final.plot_acc, final.plot_len, final.plot_hist))
    # the images really changed along the stream
    seen = {i: {u.images[i]["path"] for u in updates if isinstance(u.images[i], dict) and "path" in u.images[i]}
            for i in range(3)}
    assert all(len(paths) >= 2 for paths in seen.values()), seen


def test_api_race_with_sjd_racers_is_the_librarys_sjd(client):
    """Issue 36: SJD and SJD + reuse race like any racer (no drafter: no draft forwards); their window W is the
    sjd_window argument; the numbers are the library's SJD decoded directly."""
    from coolsd.decoding.engine import DecodeConfig, run
    from coolsd.decoding.rules import EagleRule
    from coolsd.decoding.sampling import SamplingConfig

    values = kwargs(seed=2, racers=["eagle-1", "sjd", "sjd-reuse"], sjd_window=6)
    job = client.submit(**values, api_name="/race")
    job.result(timeout=DEADLINE_S)
    stats = api_frame(job.outputs()[-1]).stats
    assert stats["finished"] and set(stats["decoders"]) == {"eagle-1", "sjd", "sjd-reuse", "vanilla"}
    assert stats["settings"]["rules"]["sjd-reuse"] == {"rule": "eagle-1"}
    assert stats["settings"]["draftings"]["sjd-reuse"] == {"drafting": "jacobi", "window": 6, "reuse": True,
                                                           "init": "last"}
    m = APP.ctx.model
    sampling = SamplingConfig(cfg_scale=values["cfg_scale"], temperature=values["temperature"], top_k=values["top_k"])
    for key, reuse in (("sjd", False), ("sjd-reuse", True)):
        ref = run(m.target, None, EagleRule(), cond=APP.ctx.check_condition(values["condition"]),
                  num_tokens=m.num_tokens, sampling=sampling, seed=values["seed"],
                  config=DecodeConfig(Jacobi(window=6, reuse=reuse)))
        got = stats["decoders"][key]
        assert (got["target_forwards"], got["draft_forwards"], got["tokens"]) == (ref.target_forwards, 0,
                                                                                  m.num_tokens)


def test_api_cancel_stops_the_race(client, server, monkeypatch):
    """job.cancel() ends the client's job at once. Gradio stops pulling frames but closes the handler only when
    its queue runs the next event, so the contract is: the workers decode at most `Race.AHEAD` rounds past the
    cancel, and the next race (another client's) finds the lane back and the cancelled race's decoders closed
    before they finished (a race holding the only lane could not let it start).

    Every wait is on an event or a condition, with a deadline; no wall-time assertion (the machine is shared).
    """
    import threading
    import time

    from gradio_client import Client

    from coolsd.compare.race import Race

    real_generate = settings_ui.generate
    started, closed = threading.Event(), threading.Event()
    drawn, begun, exhausted = [], [], []  # rounds drawn; decoders begun; decoders that ran to their end

    def slow_generate(*args, **kw):
        begun.append(True)
        try:
            for event in real_generate(*args, **kw):
                drawn.append(event)
                if len(drawn) >= 8:  # from here a slow model: a full race would take about half a minute
                    started.set()
                    time.sleep(1.0)
                yield event
        except GeneratorExit:  # closed by the handler before the decoder's end
            closed.set()
            raise
        exhausted.append(True)

    monkeypatch.setattr(settings_ui, "generate", slow_generate)
    job = client.submit(**kwargs(seed=9), api_name="/race")
    assert started.wait(DEADLINE_S), "the race never started"
    job.cancel()
    wait_until(lambda: job.status().code.name in ("CANCELLED", "FINISHED"), "the job to end")
    n = len(drawn)
    outputs = job.outputs()
    assert not outputs or not api_frame(outputs[-1]).stats["finished"]
    monkeypatch.setattr(settings_ui, "generate", real_generate)
    other = Client(server, verbose=False, download_files=False, analytics_enabled=False)
    frame = api_frame(other.predict(**kwargs(seed=3), api_name="/race"))
    assert frame.stats["finished"] and APP.workers == 1  # (one lane: the cancelled race gave it back)
    assert closed.is_set() and len(exhausted) < len(begun) == len(race_ui.DECODERS)  # closed mid-race
    assert len(drawn) - n <= Race.AHEAD + APP.ctx.race_threads  # decoding stopped after the rounds in flight
    wait_until(lambda: APP.ctx.lanes.qsize() == APP.workers, "the model lane to come back")


def test_api_overlay_redraws_the_last_race(client):
    client.predict(**kwargs(seed=4), api_name="/race")
    plain = client.predict(overlay=False, api_name="/overlay")
    tinted = client.predict(overlay=True, api_name="/overlay")
    assert len(plain) == racers.SLOTS and all(_image_size(tinted[i]) == APP.ctx.display_hw[::-1] for i in USED)
    assert plain[0]["path"] != tinted[0]["path"]


def test_api_model_info_and_theory(client):
    info = client.predict(api_name="/model_info")
    assert info["grid"] == list(APP.ctx.model.grid) and info["defaults"]["nu"] == 0.7
    plot = client.predict(delta=2.0, nu=0.7, mu=0.0, mean_omega=True, lantern_k=2, lantern_lambda=5.0,
                          api_name="/theory")
    assert plot["type"] == "plotly" and "current" in plot["plot"]


@pytest.mark.parametrize("changes, message", [
    ({"draft_len": 0}, "draft length L must be in"),
    ({"draft_len": 2.5}, "draft length L must be a whole number"),
    ({"top_k": "ten"}, "top-k (0 = off) must be a number"),
    ({"seed": -1}, "seed must be in"),
    ({"seed": 1.5}, "seed must be a whole number"),
    ({"condition": "11"}, "unknown digit"),
    ({"condition": "<b>" * 5000}, "unknown digit"),
    ({"drafting": "spiral"}, "unknown drafting"),
    ({"mean_omega": "yes"}, "must be true or false"),
    ({"lantern_lambda": 0.5}, "lambda (budget) must be in"),
])
def test_api_rejects_bad_input_with_a_clear_error(client, changes, message):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as err:
        client.predict(**kwargs(**changes), api_name="/race")
    text = str(err.value)
    assert message in text
    assert "Traceback" not in text and len(text) < 400
    assert "<b>" not in text  # user input is escaped


@pytest.mark.parametrize("name, literal", [("temperature", "NaN"), ("delta", "Infinity")])
def test_raw_http_non_finite_values_are_rejected(server, name, literal):
    """JSON clients cannot send nan/inf, but a raw request can (Python's json accepts NaN): it gets a clear error."""
    import json

    import httpx

    values = kwargs()
    values[name] = "__X__"
    body = json.dumps({"data": [values[k] for k in RaceSettings.names()]}).replace('"__X__"', literal)
    base = server.rstrip("/") + "/gradio_api/call/race"
    event_id = httpx.post(base, content=body, headers={"Content-Type": "application/json"}).json()["event_id"]
    stream = httpx.get(f"{base}/{event_id}", timeout=30).text
    assert "event: error" in stream
    assert "must be a finite number" in stream and "Traceback" not in stream


# ---------------------------------------------------------------- the shipped model (one small check)
@pytest.mark.slow
@pytest.mark.skipif(not (EMBEDDED / "target").is_dir(), reason="assets/embedded/ is not there yet (model not exported)")
def test_embedded_model_race_views():
    """The real 16x16-token model: a short race on forked handles gives full grids and 256 px images."""
    from coolsd.app.plots import fill_ids, token_image
    from coolsd.compare.race import Race, Racer, fork_models
    from coolsd.decoding.engine import DecodeConfig, generate
    from coolsd.decoding.rules import make_rule
    from coolsd.models.bundle import load_embedded

    b = load_embedded(device="cpu")
    rules = {"eagle-1": make_rule("eagle-1"), "cool-sd": make_rule("cool-sd", delta=2.0)}
    racers = []
    for key, rule in rules.items():
        target, drafter = fork_models(b.target, b.drafter)
        racers.append(Racer(key, key, generate(target, drafter, rule, cond=3, num_tokens=b.num_tokens,
                                               sampling=b.default_sampling,
                                               config=DecodeConfig(Chain(5)), seed=0), b.num_tokens))
    for _ in Race(racers):
        pass
    for r in racers:
        assert r.done == b.num_tokens == 256 and r.tau > 1
        img = token_image(b.tokenizer.decode(fill_ids(r.tokens)), r.filled, b.grid, r.kinds, overlay=True)
        assert img.size == (256, 256)


# ---------------------------------------------------------------- racer choice, replay, trace, share links
def _race(**changes):
    """Every frame of a race on the handler, one frame per race step (no throttle)."""
    mp = pytest.MonkeyPatch()
    mp.setattr(race_ui, "IMAGE_EVERY_S", 0.0)
    mp.setattr(race_ui, "FRAME_SHARE", 1.0)
    try:
        return list(RACE.race(**kwargs(**changes)))
    finally:
        mp.undo()


def test_old_racer_key_is_the_floored_cool_sd():
    """'cool-sd-floor' (share links and API calls made before COOL-SD's default was floored) still names it."""
    import gradio as gr

    from coolsd.app import share

    assert racers.check_racers(["cool-sd-floor", "eagle-1"]) == ["eagle-1", "cool-sd"]
    values, errors = share.parse_query(APP.ctx, {"racers": "eagle-1,cool-sd-floor"})
    assert errors == [] and values["racers"] == ["eagle-1", "cool-sd"]
    rule = make_racer_rule(APP.ctx, "cool-sd", {"delta": 1.1})
    assert rule.floor_at_one and rule.delta == 1.1
    with pytest.raises(gr.Error, match="each racer may race once"):
        racers.check_racers(["cool-sd", "cool-sd-floor"])


def test_racer_choice_races_exactly_the_chosen_rules():
    """Four non-default racers: each decodes what the library decodes alone with that rule, vanilla AR races too."""
    from coolsd.decoding.engine import DecodeConfig, run
    from coolsd.decoding.sampling import SamplingConfig

    chosen = ["uniform-rsd", "linear-decay", "cool-sd-unclipped", "custom"]
    values = kwargs(racers=list(reversed(chosen)), uniform_delta=3.0, linear_delta=1.5, linear_slope=0.8,
                    custom_omegas="3, 0.5", seed=2)
    last = _race(**{k: v for k, v in values.items()})[-1]
    stats, trace = last.stats, last.trace
    assert list(stats["decoders"]) == [*chosen, "vanilla"]  # the panels' order, whatever order was given
    rules = stats["settings"]["rules"]
    assert rules["uniform-rsd"]["delta"] == 3.0 and rules["linear-decay"]["slope"] == 0.8
    assert rules["cool-sd-unclipped"]["floor_at_one"] is False and list(rules["custom"]["omegas"]) == [3.0, 0.5]
    assert all(isinstance(last.images[i], type(last.images[0])) for i in range(racers.SLOTS))  # 4 racers + vanilla
    m = APP.ctx.model
    sampling = SamplingConfig(cfg_scale=values["cfg_scale"], temperature=values["temperature"], top_k=values["top_k"])
    final = {r.key: r for r in trace.replay(len(trace))}
    for key in chosen:
        rule = make_racer_rule(APP.ctx, key, values)
        ref = run(m.target, m.drafter, rule, cond=APP.ctx.check_condition(values["condition"]),
                  num_tokens=m.num_tokens, sampling=sampling,
                  config=DecodeConfig(Chain(values["draft_len"])), seed=values["seed"])
        assert torch.equal(final[key].tokens, ref.tokens), key
        assert stats["decoders"][key]["target_forwards"] == ref.target_forwards, key
    # the G* variant of LANTERN++ runs another residual than the published one
    lantern = _race(racers=["lantern++", "lantern++-gstar"])[-1].stats["settings"]["rules"]
    assert (lantern["lantern++"]["residual_kind"], lantern["lantern++-gstar"]["residual_kind"]) == ("published",
                                                                                                   "optimal")


def test_replay_frame_equals_the_race_stopped_at_that_step():
    import numpy as np

    stop_at = 9
    gen = RACE.race(**kwargs(seed=6, overlay=True))
    mp = pytest.MonkeyPatch()
    mp.setattr(race_ui, "IMAGE_EVERY_S", 0.0)
    mp.setattr(race_ui, "FRAME_SHARE", 1.0)
    try:
        frames = [next(gen) for _ in range(stop_at)]  # one frame per race step
    finally:
        gen.close()  # Stop
        mp.undo()
    stopped, trace = frames[-1], frames[-1].trace
    assert len(trace) == stop_at and trace.status == "stopped"
    replayed = RACE.replay(stop_at, True, trace)
    shown = stopped.snapshot["images"]
    assert sorted(shown) == sorted(replayed.snapshot["images"]) and len(shown) >= 3
    for slot, item in stopped.snapshot["images"].items():  # every image on show then, pixel for pixel
        assert np.array_equal(np.asarray(APP.ctx.render(*item, True)), np.asarray(replayed.images[slot])), slot
    live, again = stopped.stats["decoders"], replayed.stats["decoders"]
    assert live == again  # tokens, forwards, tau, compute seconds, speed-up: the same numbers
    # an earlier step shows less, and the whole race replays to its final frame
    early = RACE.replay(3, False, trace).stats["decoders"]
    assert sum(s["tokens"] for s in early.values()) < sum(s["tokens"] for s in live.values())
    last = _race(seed=6)[-1]
    full = RACE.replay(len(last.trace), False, last.trace)
    assert full.stats["decoders"] == last.stats["decoders"]
    for slot in USED:
        assert np.array_equal(np.asarray(last.images[slot]), np.asarray(full.images[slot])), slot


def test_trace_json_round_trip_replays_the_same_race():
    import json

    from coolsd.compare.trace import RaceTrace

    last = _race(seed=8, racers=["eagle-1", "custom"])[-1]
    trace = last.trace
    data = json.loads(json.dumps(RACE.trace_json(trace)))  # what a download or the API gives
    assert data["model"] == APP.ctx.model.name and data["settings"]["seed"] == 8 and data["status"] == "finished"
    assert [r["key"] for r in data["racers"]] == ["eagle-1", "custom", "vanilla"]
    assert len(data["steps"]) == sum(s["rounds"] for s in last.stats["decoders"].values())
    back = RaceTrace.from_json(data)
    for a, b in zip(trace.replay(len(trace)), back.replay(len(back))):
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.kinds, b.kinds) and a.seconds == b.seconds
        assert torch.allclose(a.accept_rate, b.accept_rate, equal_nan=True)
    with pytest.raises(ValueError, match="unknown trace version"):
        RaceTrace.from_json(data | {"version": 99})


def test_share_link_round_trip_restores_every_setting():
    from coolsd.app import share

    values = kwargs(condition="7", seed=12345, temperature=0.85, top_k=7, cfg_scale=2.5, draft_len=3,
                    drafting="eagle-25", delta=1.1, nu=0.35, mu=-0.5, mean_omega=False, lantern_k=2,
                    lantern_lambda=20.0, overlay=True, racers=["lantern++-gstar", "linear-decay", "custom"],
                    uniform_delta=4.0, linear_delta=0.75, linear_slope=1.0, custom_omegas="4, 2, 1, 0.5",
                    sjd_window=5)
    query = share.share_query(APP.ctx, values)
    # read as the page reads a link (blank values kept: a model without styles carries style="")
    params = dict(__import__("urllib.parse").parse.parse_qsl(query[1:], keep_blank_values=True))
    restored, errors = share.parse_query(APP.ctx, params,
                                         ["race", "theory"])
    assert not errors and restored == values
    assert set(restored) == set(RaceSettings.names())  # every control travels


def test_share_link_carries_the_no_drafter_racers():
    """The no-drafter group (SJD and the relaxed rules on Jacobi drafts) travels in a link; COOL-SD without a drafter
    races at COOL-SD's delta and nu and the no-drafter window."""
    from coolsd.app import share
    from coolsd.decoding.rules import CoolSDRule

    values = kwargs(racers=["cool-sd", "sjd", "cool-sd-jacobi", "lantern++-jacobi"], delta=4.0, nu=0.5, sjd_window=6)
    params = dict(__import__("urllib.parse").parse.parse_qsl(share.share_query(APP.ctx, values)[1:],
                                                             keep_blank_values=True))
    restored, errors = share.parse_query(APP.ctx, params, ["race", "theory"])
    assert not errors and restored == values
    plan = RaceSettings.check(APP.ctx, restored).plan(APP.ctx)
    assert plan.rules["cool-sd-jacobi"] == CoolSDRule(delta=4.0, nu=0.5)
    assert plan.configs["cool-sd-jacobi"].drafting == plan.configs["lantern++-jacobi"].drafting == Jacobi(window=6)
    assert plan.rules["lantern++-jacobi"].neighbours is not None


def test_api_replay_trace_strip_and_share_link(client):
    import json

    values = kwargs(seed=4, racers=["eagle-1", "uniform-rsd"])
    final = api_frame(client.predict(**values, api_name="/race"))
    stats = final.stats
    steps = final.replay["maximum"]
    assert steps == sum(s["rounds"] for s in stats["decoders"].values())
    frame = api_frame(client.predict(step=4, overlay=False, api_name="/replay"))
    assert frame.stats["replay_step"] == 4 and "Replay" in frame.stats_md
    assert sum(s["tokens"] for s in frame.stats["decoders"].values()) < 2 * APP.ctx.model.num_tokens
    trace = client.predict(api_name="/trace")
    assert len(trace["steps"]) == steps and trace["settings"]["racers"] == ["eagle-1", "uniform-rsd"]
    with open(client.predict(api_name="/trace_file")["path"]) as f:
        assert json.load(f) == trace
    strip = client.predict(overlay=True, api_name="/strip_file")
    with Image.open(strip["path"]) as img:  # the three images on show (the last replayed step), side by side
        assert img.size == (3 * APP.ctx.display_hw[1] + 2 * 8, APP.ctx.display_hw[0] + 22)
    query = client.predict(**values, api_name="/share_link")
    assert query.startswith("?") and "racers=eagle-1%2Cuniform-rsd" in query
    assert client.predict(query=query, api_name="/share_restore") == values


@pytest.mark.parametrize("endpoint, changes, message", [
    ("/race", {"racers": ["warp-drive"]}, "unknown racer 'warp-drive'"),
    ("/race", {"racers": []}, "choose 1 to 4 racers"),
    ("/race", {"racers": ["eagle-1", "lantern++", "uniform-rsd", "cool-sd", "custom"]}, "choose 1 to 4 racers"),
    ("/race", {"racers": ["custom"], "custom_omegas": "2, x"}, "numbers separated by commas"),
    ("/race", {"racers": ["custom"], "custom_omegas": "2, -1"}, "Custom schedule: omega_2 must be"),
    ("/race", {"linear_slope": 1.5}, "linear decay slope (0 = uniform, 1 = falls to 0) must be in [0, 1]"),
    ("/race", {"uniform_delta": 0}, "UniformRSD delta must be in"),
    ("/race", {"condition": "<b>'eleven'&"}, "unknown digit \"‹b›'eleven'＆\""),
    ("/replay", {"step": 10_000, "overlay": False}, "replay step must be in [0, "),
    ("/replay", {"step": 2.5, "overlay": False}, "replay step must be a whole number"),
    ("/replay", {"step": 1, "overlay": "yes"}, "overlay: colour tokens by outcome must be true or false"),
    ("/share_restore", {"query": "?seed=-1"}, "share link: seed must be in [0, 2147483647], got -1"),
    ("/share_restore", {"query": "?racers=eagle-1,warp"}, "share link: unknown racer 'warp'"),
    ("/share_restore", {"query": "?speed=11"}, "share link: unknown setting 'speed'"),
    ("/share_restore", {"query": "?tab=nowhere"}, "share link: unknown tab 'nowhere'"),
    ("/share_link", {"delta": 2048}, "delta (overall relaxation) must be in"),
    ("/race", {"racers": ["sjd"], "sjd_window": 0}, "SJD window W (drafts per iteration) must be in [1, 16], got 0"),
    ("/race", {"racers": ["sjd"], "sjd_window": 17}, "SJD window W (drafts per iteration) must be in [1, 16], got 17"),
    ("/race", {"racers": ["sjd"], "sjd_window": 2.5}, "SJD window W (drafts per iteration) must be a whole number"),
    ("/race", {"racers": ["sjd"], "sjd_window": "eight"}, "SJD window W (drafts per iteration) must be a number"),
    ("/race", {"sjd_window": -3}, "SJD window W (drafts per iteration) must be in [1, 16], got -3"),
    ("/share_restore", {"query": "?sjd_window=99"}, "share link: SJD window W (drafts per iteration) must be in"),
])
def test_api_new_controls_reject_bad_values_with_one_clean_line(client, endpoint, changes, message):
    """One plain line per bad value: no trace, and no HTML entities (user text is shown without markup)."""
    from gradio_client.exceptions import AppError

    if endpoint == "/replay":
        client.predict(**kwargs(seed=1), api_name="/race")
    args = kwargs(**changes) if endpoint in ("/race", "/share_link") else changes
    with pytest.raises(AppError) as err:
        client.predict(**args, api_name=endpoint)
    text = str(err.value)
    assert message in text, text
    assert "Traceback" not in text and "\n" not in text.strip() and len(text) < 400
    assert not any(entity in text for entity in ("&#", "&lt;", "&gt;", "&amp;", "&quot;", "<b>"))


def test_api_trace_and_replay_before_any_race_say_so(server):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    fresh = Client(server, verbose=False, download_files=False, analytics_enabled=False)  # a new session
    with pytest.raises(AppError, match="no race yet"):
        fresh.predict(api_name="/trace")
    with pytest.raises(AppError, match="nothing to replay yet"):
        fresh.predict(step=0, overlay=False, api_name="/replay")


def _groups(text: str) -> dict[str, list[str]]:
    """The paper-beside-us markdown as {group heading: its table's data rows}."""
    groups, heading = {}, None
    for line in text.splitlines():
        if line.startswith("**") and line.endswith("**"):
            heading = line.strip("*")
            groups[heading] = []
        elif heading and line.startswith("| ") and not line.startswith("| method"):
            groups[heading].append(line)
    return groups


def test_how_it_works_puts_the_papers_numbers_beside_ours_with_model_and_hardware(tmp_path):
    from coolsd.app import how

    text = how.paper_beside_us()
    groups = _groups(text)
    paper = {h: rows for h, rows in groups.items() if h.startswith("Paper:")}
    assert sorted(paper) == [f"Paper: {m}, {how.PAPER_HARDWARE}" for m in ("LlamaGen-XL 775M", "Lumina-mGPT 7B")]
    assert sum(map(len, paper.values())) == len(how.PAPER)
    llamagen = paper[f"Paper: LlamaGen-XL 775M, {how.PAPER_HARDWARE}"]
    assert "| COOL-SD δ = 2 | 3.34 | 2.72× | 21.20 | 0.3154 |" in llamagen  # as reported
    (heading, ours), = ((h, rows) for h, rows in groups.items() if h.startswith("Ours:"))
    assert "CPU" in heading and "embedded" in heading and len(ours) == len(how.OURS)
    assert not any("not measured" in r for r in ours)  # the shipped benchmark has every setting
    assert all(r.count("|") == 6 for r in ours + sum(paper.values(), []))  # five columns everywhere
    if any("†" in r for r in ours):  # a stand-in row is named and explained
        assert how.OLDER_NOTE in text
    missing = _groups(how.paper_beside_us(bench_dir=tmp_path))  # no benchmark files: said, not invented
    assert any("not measured" in h for h in missing) and sum(map(len, missing.values())) == len(how.PAPER)


def test_how_it_works_shows_a_long_benchmark_command_cut_so_a_phone_need_not_scroll():
    """The emoji benchmark names 300 conditions; the page shows the first few and the count (a phone page once
    held an 8,000-pixel-wide code line); short lists and the rest of the command stay as they were."""
    from coolsd.app import how

    ids = ",".join(str(i) for i in range(300))
    cmd = f"torchrun -m coolsd.bench --model emoji --classes {ids} --cool-delta 2,8 --lantern-k 10"
    assert how.short_command(cmd) == ("torchrun -m coolsd.bench --model emoji --classes 0,1,2,3,… (300 in all) "
                                      "--cool-delta 2,8 --lantern-k 10")
    assert how.short_command("a 1,2,3,4 b") == "a 1,2,3,4 b"
    text = how.paper_beside_us("emoji")  # the shipped emoji benchmark
    assert max(map(len, text.splitlines())) < 1000


# ---------------------------------------------------------------- the prompt UI on a tiny random LlamaGen (issue 9)
@pytest.fixture(scope="module")
def llamagen_app(tmp_path_factory):
    return tiny_llamagen_app(tmp_path_factory)


def tiny_llamagen_app(tmp_path_factory, picker=()):
    """A LlamaGen folder with both resolutions (tiny random weights, as tests/llamagen_weights.py builds them), the
    app's context for it, and the app's Blocks built on that context (the browser test uses it too). `picker`:
    more models (picker keys) its model picker offers."""
    import json

    import llamagen_weights as lg
    from safetensors.torch import save_file

    import coolsd.models.llamagen as llamagen

    flat = tmp_path_factory.mktemp("llamagen-flat")
    for part, config in (("target", lg.PUBLISHED_CONFIG), ("drafter", {**lg.PUBLISHED_CONFIG, "num_hidden_layers": 1})):
        (flat / part).mkdir()
        (flat / part / "config.json").write_text(json.dumps(config))
    save_file(lg.published_target(), flat / "target" / "model.safetensors")
    torch.save(lg.published_drafter(), flat / "drafter" / "pytorch_model.bin")
    torch.save({"model": lg.published_vq(), "steps": 1}, flat / "vq_ds16_t2i.pt")
    lg.write_t5(flat / "t5")
    root = lg.nested_layout(tmp_path_factory.mktemp("llamagen") / "lg", flat)
    mp = pytest.MonkeyPatch()
    real = llamagen.load_llamagen
    mp.setattr(llamagen, "load_llamagen", lambda *a, **kw: real(*a, **kw, device="cpu", k_max=4, vq_config=lg.TINY_VQ))
    mp.setenv("COOLSD_LLAMAGEN_DIR", str(root))
    try:
        ctx = context.open_context("llamagen", others=list(picker))
        page = build_demo(ctx)
    finally:
        mp.undo()
    return Demo(ctx, page, 1)


def test_llamagen_prompt_ui_offers_both_resolutions_and_races_a_prompt(llamagen_app):
    from coolsd.models.llamagen import EXAMPLE_PROMPTS

    ctx, page = llamagen_app.ctx, llamagen_app.page
    assert list(ctx.variants) == ["256", "512"] and ctx.model.conditioning == "text"
    assert ctx.variants["512"].model.target is not ctx.model.target  # one model per resolution ...
    assert ctx.variants["512"].model.target.caption_encoder is ctx.model.target.caption_encoder  # ... one T5
    resolution = page.controls["resolution"]
    assert resolution.visible and [v for _, v in resolution.choices] == ["256", "512"]
    assert isinstance(page.controls["condition"], __import__("gradio").Textbox)
    rows, _ = controls.presets(ctx)
    assert {row[0] for row in rows} <= set(EXAMPLE_PROMPTS)  # the presets start from the example prompts
    panel = RaceAPI(llamagen_app)
    values = RaceSettings.defaults(ctx).as_dict() | {"condition": EXAMPLE_PROMPTS[1], "resolution": "512", "seed": 3}
    assert values["condition"] != RaceSettings.defaults(ctx).as_dict()["condition"]
    last = list(panel.race(**values))[-1]
    stats, snapshot = last.stats, last.snapshot
    assert stats["finished"] and stats["settings"]["resolution"] == "512" and snapshot["variant"] == "512"
    for key, s in stats["decoders"].items():
        assert s["tokens"] == ctx.variants["512"].model.num_tokens, key
    assert all(last.images[i].size == ctx.variants["512"].display_hw[::-1] for i in USED)
    replayed = panel.replay(len(last.trace), False, last.trace)  # replays on the 512 model's decoder
    assert replayed.stats["decoders"] == stats["decoders"]


@pytest.mark.parametrize("changes, message", [
    ({"condition": "http://example.com @someone"}, "nothing is left of this prompt"),
    ({"condition": "   "}, "the prompt must be a non-empty text"),
    ({"condition": "a cat " * 100}, "the prompt is too long"),
    ({"resolution": "1024"}, "unknown resolution '1024'; choose one of 256, 512"),
])
def test_llamagen_prompt_ui_rejects_bad_prompts_and_resolutions(llamagen_app, changes, message):
    import gradio as gr

    ctx = llamagen_app.ctx
    with pytest.raises(gr.Error, match=re.escape(message)):
        next(RaceAPI(llamagen_app).race(**(RaceSettings.defaults(ctx).as_dict() | changes)))
