"""The Microscope tab: what it shows is the library's view of the round (`coolsd.compare.microscope`), at interior
rounds of a race just run; its image, patches and bars are drawn from those numbers; bad input is one line."""

from __future__ import annotations

import math

import gradio as gr
import pytest
import torch
from demo_app import RaceAPI, tiny_demo

from coolsd.app.microscope import MicroscopePanel
from coolsd.app.settings import RaceSettings
from coolsd.compare.microscope import recorded, rerun, residual_label, round_view, rule_of
from coolsd.compare.race import fork_models
from coolsd.compare.trace import RaceTrace
from coolsd.decoding.rules import CoolSDRule
from coolsd.util.jsonsafe import json_safe

pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")
APP = tiny_demo()
PANEL = MicroscopePanel(APP.ctx, RaceAPI(APP).recordings)


@pytest.fixture(scope="module")
def trace():
    frames = list(RaceAPI(APP).race(**RaceSettings.defaults(APP.ctx).as_dict() | {"seed": 4, "delta": 3.0}))
    return frames[-1].trace


@pytest.mark.parametrize("key", ["eagle-1", "lantern++", "cool-sd", "vanilla"])
def test_the_view_is_the_librarys_at_interior_rounds(trace, key):
    ctx, m = APP.ctx, APP.ctx.model
    events = rerun(trace, key, *fork_models(m.target, m.drafter), ctx.check_condition(trace.settings.condition),
                   m.neighbours)
    label = residual_label(rule_of(trace, key, m.neighbours))
    cache = {}
    for j in range(1, len(events) - 1):  # every interior round
        image, strip, bars, table, header, payload, cache = PANEL.view(key, j, trace, cache)
        want = round_view(events[j], trace.grid, label)
        assert {k: payload[k] for k in want} == json_safe(want) and payload["matches_race"] is True
        assert image.size == (ctx.display_hw[1], ctx.display_hw[0]) and strip.width > 0
        for row in want["depths"]:  # the table prints every depth's numbers
            assert f"| {row['depth']} | {tuple(row['position'])} | {row['token']} |" in table
        assert f"round {j} (rounds 0 to {len(events) - 1})" in header
        drawn = {t.name: list(t.y) for t in bars.data}
        assert len(drawn) == len(want["top"])
    assert cache["events"][-1].tokens.tolist() == events[-1].tokens.tolist()


@pytest.mark.parametrize("key", ["eagle-1", "cool-sd", "vanilla"])
def test_a_race_this_server_does_not_decode_again_is_shown_as_its_trace_stores_it(trace, key):
    """A trace whose rounds a re-run here does not reproduce (another machine's: here, its seed changed so the
    re-run draws other tokens) shows the race's own rounds: its tokens, verdicts, a_i and omega_i, with no
    warning, and the numbers it does not store (q, p, u) left out."""
    data = trace.to_json()
    other = RaceTrace.from_json(data | {"settings": data["settings"] | {"seed": data["settings"]["seed"] + 1}})
    stored = recorded(other, key)
    cache = {}
    for j in range(1, len(stored) - 1):
        image, strip, bars, table, header, payload, cache = PANEL.view(key, j, other, cache)
        e = stored[j]
        assert payload["matches_race"] is False and payload["source"] == "trace" and payload["rounds"] == len(stored)
        assert "⚠" not in header and "did not commit" not in header and "as its trace stores them" in header
        assert payload["token"] == e.tokens[-1].item() and payload["n_accepted"] == e.n_accepted
        assert payload["committed"] == [[(e.start + i) // other.grid[1], (e.start + i) % other.grid[1]]
                                        for i in range(len(e.tokens))]
        for i, row in enumerate(payload["depths"]):
            a = e.accept_probs[i].item()
            assert row["accept"] == (None if math.isnan(a) else pytest.approx(a))  # (untested: nan, JSON null)
            assert row["omega"] == pytest.approx(e.omega[i].item()) and row["q"] is row["p"] is row["u"] is None
            assert row["token"] == (e.tokens[i].item() if i < e.n_accepted else None)
            assert f"| {row['depth']} | {tuple(row['position'])} | {'–' if row['token'] is None else row['token']} |" \
                in table
        assert payload["last"] == str(e.last) and image.size == (APP.ctx.display_hw[1], APP.ctx.display_hw[0])
    assert PANEL.view(key, 1, trace, {})[5]["source"] == "re-run"  # the race as run here: the full detail


@pytest.mark.parametrize("drafting", ["chain", "eagle-25"])
def test_an_sjd_round_is_one_jacobi_iteration(drafting):
    """Issue 36: the window, q from the last iteration (the target's own row), p now, the verdicts; shown whatever
    the drafting setting (SJD iterates its window: a static tree does not apply to it)."""
    m = APP.ctx.model
    settings = RaceSettings.defaults(APP.ctx).as_dict() | {"racers": ["eagle-1", "sjd", "sjd-reuse"], "seed": 2,
                                                          "sjd_window": 5, "drafting": drafting}
    trace = list(RaceAPI(APP).race(**settings))[-1].trace
    assert trace.settings.rules["sjd"] == {"rule": "eagle-1"}  # (Jacobi drafting + Eagle-1's test)
    assert trace.settings.draftings["sjd"] == {"drafting": "jacobi", "window": 5, "reuse": False, "init": "last"}
    for key in ("sjd", "sjd-reuse"):
        events = rerun(trace, key, *fork_models(m.target, m.drafter),
                       APP.ctx.check_condition(trace.settings.condition), m.neighbours)
        assert all(e.draft_forwards == 0 and e.n_drafted <= 5 for e in events)
        image, strip, bars, table, header, payload, _ = PANEL.view(key, 1, trace, {})
        assert payload["rule"]["rule"] == "eagle-1" and payload["drafting"]["drafting"] == "jacobi"
        assert payload["matches_race"] is True
        assert payload["n_drafted"] == 5 and "last iteration" in payload["q_from"] and "last iteration" in header
        assert {k: payload[k] for k in ("depths", "n_accepted", "token")} == json_safe(
            {k: v for k, v in round_view(events[1], trace.grid, "").items() if k in ("depths", "n_accepted", "token")})
        assert any("last iteration" in t.name for t in bars.data) or payload["last"] == "bonus"


def test_a_relaxed_round_without_a_drafter_is_one_jacobi_iteration():
    """COOL-SD and LANTERN++ on Jacobi drafts: the microscope shows the window with q from the last iteration, and
    COOL-SD's omega over the window's depths (W = 5) with the G* residual."""
    settings = RaceSettings.defaults(APP.ctx).as_dict() | {"racers": ["cool-sd-jacobi", "lantern++-jacobi"],
                                                          "seed": 2, "sjd_window": 5, "delta": 4.0}
    trace = list(RaceAPI(APP).race(**settings))[-1].trace
    rule, drafting = trace.settings.rules["cool-sd-jacobi"], trace.settings.draftings["cool-sd-jacobi"]
    assert (rule["rule"], drafting["window"], rule["delta"]) == ("cool-sd", 5, 4.0)
    for key in ("cool-sd-jacobi", "lantern++-jacobi"):
        *_, header, payload, _ = PANEL.view(key, 1, trace, {})
        assert payload["matches_race"] is True and "last iteration" in payload["q_from"] and "last iteration" in header
    payload = PANEL.view("cool-sd-jacobi", 1, trace, {})[5]
    omega = CoolSDRule(delta=4.0).omega(torch.arange(1, 6), 5).tolist()  # (over the window's depths, W = 5)
    assert [d["omega"] for d in payload["depths"]] == pytest.approx(omega[: payload["n_drafted"]])
    assert "G*" in payload["residual"]


def test_opening_picks_a_decoder_and_a_click_finds_its_round(trace):
    key, rounds, *_, cache = PANEL.opened(None, 2, trace, {})  # a race not looked at yet: its middle round
    assert key.value == "eagle-1" and rounds.value == len(cache["events"]) // 2
    assert PANEL.opened("eagle-1", 2, trace, cache)[1].value == 2  # back on the tab: the round the visitor chose
    _, _, _, _, _, payload, cache = PANEL.view("eagle-1", 2, trace, {})
    r, c = payload["committed"][-1]
    h, w = APP.ctx.display_hw
    grid_h, grid_w = trace.grid
    evt = gr.SelectData(None, {"index": [int((c + 0.5) * w / grid_w), int((r + 0.5) * h / grid_h)], "value": None})
    assert PANEL.clicked("eagle-1", trace, cache, evt) == 2


@pytest.mark.parametrize("key, round_no, message", [("nope", 1, "unknown decoder"), ("eagle-1", -1, "round"),
                                                    ("eagle-1", 10_000, "round"), ("eagle-1", 1.5, "round")])
def test_bad_input_is_one_line(trace, key, round_no, message):
    with pytest.raises(gr.Error, match=message) as err:
        PANEL.view(key, round_no, trace, {})
    assert "\n" not in str(err.value)


def test_the_api_endpoint_is_named():
    assert "microscope" in {fn.api_name for fn in APP.blocks.fns.values()}
