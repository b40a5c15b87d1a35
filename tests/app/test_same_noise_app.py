"""The same-noise race on the page (`noise` = "same", `coolsd.decoding.noise`), on the tiny random model: Eagle-1 and
SJD commit vanilla AR's tokens; the overlay marks exactly the tokens where a racer is not vanilla AR's, the legend
says so, the line under each picture counts them; the setting travels to the trace, the microscope's re-run, the
share link and the presets; an old trace without it reads as one stream."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from demo_app import RaceAPI, tiny_demo

from coolsd.app import controls, race_view, share
from coolsd.app.microscope import MicroscopePanel
from coolsd.app.plots import DIFFERS, KIND_NAMES, NO_REFERENCE
from coolsd.app.racers import slot_keys
from coolsd.app.recorded import Recordings
from coolsd.app.settings import RaceSettings
from coolsd.compare import microscope as scope
from coolsd.compare.trace import RaceTrace

pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")
APP = tiny_demo()
RACERS = ["eagle-1", "cool-sd", "sjd"]  # (the panels' order)


def settings(**changes) -> dict:
    return RaceSettings.defaults(APP.ctx).as_dict() | {"racers": RACERS, "delta": 8.0, "draft_len": 3,
                                                       "overlay": True} | changes


def tokens(trace: RaceTrace) -> dict[str, torch.Tensor]:
    """racer key -> its (T,) committed tokens, rebuilt from the trace's events (not from what the page drew)."""
    return {r.key: r.tokens for r in trace.replay(len(trace))}


@pytest.fixture(scope="module")
def raced():
    """seed -> the final frame of a same-noise race (streamed frame by frame), for a few seeds."""
    from coolsd.app import race as race_ui

    mp = pytest.MonkeyPatch()
    mp.setattr(race_ui, "IMAGE_EVERY_S", 0.0)
    mp.setattr(race_ui, "FRAME_SHARE", 1.0)
    try:
        return {seed: list(RaceAPI(APP).race(**settings(noise="same", seed=seed))) for seed in range(4)}
    finally:
        mp.undo()


def test_lossless_racers_commit_vanilla_ars_tokens_and_the_line_under_them_says_so(raced):
    n = APP.ctx.model.num_tokens
    relaxed_left = False
    for frames in raced.values():
        last = frames[-1]
        got = tokens(last.trace)
        assert torch.equal(got["eagle-1"], got["vanilla"]) and torch.equal(got["sjd"], got["vanilla"])
        same = {k: int((got[k] == got["vanilla"]).sum()) for k in RACERS}
        relaxed_left |= same["cool-sd"] < n
        for slot, key in enumerate(slot_keys(RACERS)):
            if key in RACERS:
                assert last.captions[slot].endswith(f"same as vanilla AR at {same[key]} / {n} tokens"), key
                assert last.stats["decoders"][key]["same_as_vanilla"] == {"same": same[key], "compared": n}
            else:
                assert "same as vanilla AR" not in last.captions[slot]
        assert "same_as_vanilla" not in last.stats["decoders"]["vanilla"]
        assert last.stats["settings"]["noise"] == "same"
    assert relaxed_left, "COOL-SD at delta 8 never left vanilla AR's picture on these seeds"
    lines = [c for frames in raced.values() for f in frames[:-1] for c in f.captions if isinstance(c, str)]
    assert any(c.endswith("tokens so far") for c in lines)  # while racing: the positions both have committed


def test_the_overlay_marks_exactly_the_tokens_that_are_not_vanilla_ars(raced):
    last = raced[0][-1]
    got = tokens(last.trace)
    shown = last.snapshot["images"]
    for slot, key in enumerate(slot_keys(RACERS)):
        if key is None:
            continue
        codes = shown[slot][2]
        differs = got[key] != got["vanilla"]
        assert torch.equal(codes == DIFFERS, differs) and not codes[~differs].any()
        plain, tinted = (np.asarray(APP.ctx.render(*shown[slot], on)) for on in (False, True))
        assert np.array_equal(plain, tinted) == (not bool(differs.any())), key  # lossless: no tint at all
    assert race_view.legend(last.stats) == race_view.overlay_legend_html("same")
    assert KIND_NAMES[DIFFERS] in race_view.legend(last.stats) and "accepted draft" not in race_view.legend(last.stats)
    stream = list(RaceAPI(APP).race(**settings(seed=0)))[-1]
    assert "accepted draft" in race_view.legend(stream.stats) and "same_as_vanilla" not in str(stream.stats)
    assert not any("same as vanilla AR" in c for c in stream.captions)


def test_without_vanilla_ar_nothing_is_tinted_and_the_legend_says_so(raced):
    trace = raced[0][-1].trace
    racers = [r for r in trace.replay(len(trace)) if r.key != "vanilla"]
    assert all(not codes.any() for codes in race_view.tints(trace, racers).values())
    assert race_view.agreement(trace, racers) == {}
    assert NO_REFERENCE in race_view.legend({"settings": {"noise": "same"}, "decoders": {"eagle-1": {}}})


def test_the_microscope_reruns_the_race_with_its_noise_and_an_old_trace_reads_as_one_stream(raced):
    trace = raced[1][-1].trace
    panel = MicroscopePanel(APP.ctx, Recordings(APP.ctx))
    for key in RACERS:
        *_, header, payload, _ = panel.opened(key, 1, trace, {})
        assert payload["matches_race"], key  # (with one stream's dice the re-run would draw other tokens)
        assert ("Same noise: this lossless rule's test is coupled" in header) == (key != "cool-sd"), header
    assert scope.setup_of(trace)[1].noise == "same"
    old = trace.to_json()
    del old["settings"]["noise"]
    old = RaceTrace.from_json(old)
    assert scope.setup_of(old)[1].noise == "stream" and not old.settings.same_noise
    frame = race_view.draw(APP.ctx, old, len(old), True, "old")
    assert "accepted draft" in race_view.legend(frame.stats) and "same_as_vanilla" not in str(frame.stats)


def test_the_setting_travels_in_a_share_link_and_a_preset():
    values = settings(noise="same")
    query = share.share_query(APP.ctx, values)
    assert "noise=same" in query
    params = dict(__import__("urllib.parse").parse.parse_qsl(query[1:], keep_blank_values=True))
    restored, errors = share.parse_query(APP.ctx, params, ["race"])
    assert not errors and restored == values
    rows, labels = controls.presets(APP.ctx)
    same = [dict(zip(RaceSettings.names(), row)) for row in rows if row[RaceSettings.names().index("noise")] == "same"]
    assert len(same) == 1 and same[0]["overlay"] and "eagle-1" in same[0]["racers"]
    assert RaceSettings.check(APP.ctx, same[0]).plan(APP.ctx).config.noise == "same"


@pytest.mark.parametrize("changes, message", [
    ({"noise": "dice"}, "unknown noise 'dice'; choose one of stream, same"),
    ({"noise": 3}, "unknown noise 3; choose one of stream, same"),
    ({"noise": None}, "unknown noise None; choose one of stream, same"),
    ({"noise": True}, "unknown noise True; choose one of stream, same"),
    ({"noise": "same", "drafting": "eagle-25"}, "same noise does not apply to tree drafting"),
])
def test_a_bad_noise_is_one_line_in_the_race_and_the_share_link(changes, message):
    import gradio as gr

    with pytest.raises(gr.Error) as race:
        next(RaceAPI(APP).race(**settings(**changes)))
    with pytest.raises(gr.Error) as link:
        share.share_query(APP.ctx, settings(**changes))
    assert message in race.value.message and race.value.message == link.value.message
    assert "\n" not in race.value.message and len(race.value.message) < 300
