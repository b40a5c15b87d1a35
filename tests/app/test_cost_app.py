"""The Cost model tab (coolsd.app.cost): its numbers are the library's on the race's trace; bad input is one line."""

from __future__ import annotations

import math

import gradio as gr
import pytest
from demo_app import RaceAPI, tiny_demo

from coolsd.app.cost import CostPanel, named_what_if
from coolsd.app.settings import MAX_DRAFT_LEN, RaceSettings
from coolsd.compare import cost
from coolsd.compare.trace import RaceTrace

APP = tiny_demo()
PANEL = CostPanel(APP.ctx)
WHAT_IF = named_what_if(PANEL)  # what /cost_whatif calls: L, a_1..a_8, c, V, memory_bound
pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")


@pytest.fixture(scope="module")
def trace() -> RaceTrace:
    frames = list(RaceAPI(APP).race(**RaceSettings.defaults(APP.ctx).as_dict()))
    return frames[-1].trace


def test_compare_is_the_library_on_the_race_trace(trace):
    _, table, payload = PANEL.compare(trace)
    racers = trace.replay(len(trace))
    costs = PANEL.costs(APP.ctx)
    expected = cost.compare_racers(racers, costs, trace.settings.draft_len, racers[-1])
    assert [r["key"] for r in payload["racers"]] == [k for k, _ in trace.racers]
    for got, want in zip(payload["racers"], expected):
        assert got["predicted_speedup"] == pytest.approx(want["predicted_speedup"], rel=1e-12)
        assert got["measured_speedup"] == pytest.approx(want["measured_speedup"], rel=1e-12)
        assert got["decoder"] in table
    assert payload["racers"][-1]["predicted_speedup"] == 1.0 and payload["rows"] == 2  # the tiny model uses CFG
    assert [p["tokens"] for p in payload["curve"]] == list(range(1, MAX_DRAFT_LEN + 2))
    # memory-bound: V(L + 1) = 1, so a speculative racer is predicted faster exactly when the measured verify
    # costs more than one step (speed-up = E / (L c + V)); on the tiny model timing noise can give V < 1
    _, _, free = PANEL.compare(trace, True)
    slower_verify = costs.verify_cost(trace.settings.draft_len + 1) >= 1
    for a, b in zip(free["racers"][:-1], payload["racers"][:-1]):
        assert math.isfinite(a["predicted_speedup"])
        assert (a["predicted_speedup"] >= b["predicted_speedup"]) == slower_verify or \
            a["predicted_speedup"] == pytest.approx(b["predicted_speedup"], rel=1e-9)


def test_an_sjd_racer_is_predicted_with_its_window_and_no_drafter():
    """Issue 36: the cost model's SJD row: an iteration is one target forward of W + 1 tokens (L = W, c = 0)."""
    settings = RaceSettings.defaults(APP.ctx).as_dict() | {"racers": ["eagle-1", "sjd"], "sjd_window": 4}
    sjd_trace = list(RaceAPI(APP).race(**settings))[-1].trace
    _, table, payload = PANEL.compare(sjd_trace)
    row = next(r for r in payload["racers"] if r["key"] == "sjd")
    assert payload["sjd_windows"] == {"sjd": 4} and len(row["acceptance"]) == 4
    costs = PANEL.costs(APP.ctx)
    assert row["predicted_speedup"] == pytest.approx(row["expected_tokens"] / costs.verify_cost(5))
    assert "SJD has no drafter" in table and "L = W" in table


def test_compare_without_a_race_shows_the_curve_only():
    fig, table, payload = PANEL.compare(None)
    assert payload["racers"] == [] and "No race yet" in table and payload["step_ms"] > 0


def test_the_drafter_step_is_a_legend_entry_not_a_label_over_the_bars():
    fig, _, payload = PANEL.compare(None)
    line = [t for t in fig.data if t.type == "scatter"]
    assert not fig.layout.annotations and len(line) == 1  # (a label drew over the first bar)
    assert line[0].name == f"drafter step: c = {payload['draft_cost']:.3f}" and line[0].showlegend is not False
    assert set(line[0].y) == {payload["draft_cost"] * payload["step_ms"]}
    assert fig.layout.legend.y < 0  # under the plot: clear of the bars and of the title


def test_what_if_is_the_formula():
    accept = [0.9, 0.5, 0.25, 1.0, 1.0, 1.0, 1.0, 1.0]
    text, out = WHAT_IF(3, *accept, 0.1, 1.3, False)
    assert out["expected_tokens"] == pytest.approx(1 + 0.9 + 0.45 + 0.1125)
    assert out["predicted_speedup"] == pytest.approx((1 + 0.9 + 0.45 + 0.1125) / (3 * 0.1 + 1.3))
    _, free = WHAT_IF(3, *accept, 0.1, 1.3, True)
    assert free["verify_cost"] == 1.0 and free["predicted_speedup"] > out["predicted_speedup"]
    assert f"{out['predicted_speedup']:.2f}×" in text and "2.72×" in text


@pytest.mark.parametrize("args, message", [
    ((0, *[0.5] * 8, 0.1, 1.2, False), "what-if L must be in"),
    ((3, 1.5, *[0.5] * 7, 0.1, 1.2, False), "a_1 must be in"),
    ((3, *[0.5] * 8, -1, 1.2, False), r"draft cost c \(target steps\) must be in"),
    ((3, *[0.5] * 8, 0.1, "x", False), "verify cost V"),
    ((3, *[0.5] * 8, 0.1, 1.2, "yes"), r"memory-bound \(V = 1.*must be true or false"),
])
def test_what_if_bad_input_is_one_line(args, message):
    with pytest.raises(gr.Error, match=message):
        WHAT_IF(*args)


def test_what_if_refuses_an_unknown_input_and_takes_names():
    with pytest.raises(gr.Error, match="unknown what-if input 'b_1'"):
        PANEL.what_if(L=3, b_1=0.5)
    assert WHAT_IF(L=2, a_1=0.5, a_2=0.5)[1]["expected_tokens"] == pytest.approx(1.75)


def test_api(trace):
    from gradio_client import Client

    from coolsd.app.demo import LAUNCH_KWARGS

    _, url, _ = APP.blocks.launch(prevent_thread_lock=True, quiet=True, **LAUNCH_KWARGS)
    try:
        client = Client(url, verbose=False, download_files=False, analytics_enabled=False)
        client.predict(**RaceSettings.defaults(APP.ctx).as_dict(), api_name="/race")
        _, table, payload = client.predict(memory_bound=False, api_name="/cost")
        assert [r["key"] for r in payload["racers"]] == ["eagle-1", "lantern++", "cool-sd", "vanilla"]
        assert "| COOL-SD |" in table
        text, out = client.predict(3, *[0.8] * 8, 0.2, 1.2, False, api_name="/cost_whatif")
        assert out["predicted_speedup"] == pytest.approx(cost.predicted_speedup([0.8] * 3, 0.2, 1.2))
        with pytest.raises(Exception, match=r"a_2 must be in \[0, 1\]"):
            client.predict(3, 0.8, 2.0, *[0.8] * 6, 0.2, 1.2, False, api_name="/cost_whatif")
    finally:
        APP.blocks.close()
