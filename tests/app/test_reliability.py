"""The launched app under a stress tester's inputs (issue 19): checks that hold in every session, one clear line
for every bad value, share links exactly as strict as the race, a 404 for an unknown endpoint, memory bounded
per session. Everything goes through the HTTP API (gradio_client or raw HTTP) of the in-process server.
"""

from __future__ import annotations

import json
import math

import httpx
import pytest
import torch
from demo_app import served, tiny_demo

from coolsd.app.serving import STATE_TTL_S
from coolsd.app.settings import RaceSettings
from coolsd.compare.trace import EventStore, RaceTrace

APP = tiny_demo()
CAPACITY = 6  # sessions the test server keeps (the app's default is far larger)
pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")


@pytest.fixture(scope="module")
def server():
    """The app's own Blocks with its launch settings, but a small session capacity, on a free port."""
    with served(APP.blocks, {"IMAGE_EVERY_S": 0.0}, state_session_capacity=CAPACITY) as url:
        yield url.rstrip("/")


def new_client(server):
    from gradio_client import Client

    return Client(server, verbose=False, download_files=False, analytics_enabled=False)


def values(**changes) -> dict:
    return RaceSettings.defaults(APP.ctx).as_dict() | changes


def refusal(client, api_name: str, **kwargs) -> str:
    """The one-line message `api_name` answers these arguments with (the test fails if it answers anything else)."""
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as err:
        client.predict(**kwargs, api_name=api_name)
    text = str(err.value)
    assert "Traceback" not in text and "\n" not in text.strip() and len(text) < 400, text
    assert "Could not preprocess" not in text and "TypeError" not in text, text
    return text


def ui_event(server, session: str, fn_name: str, outputs: list, data: list) -> None:
    """Trigger a page-only event (no API name) of this session, as the browser does (POST /run/predict)."""
    fns = [fn for fn in APP.blocks.fns.values() if fn.name == fn_name and fn.outputs == outputs]
    assert len(fns) == 1, f"one {fn_name} event expected, found {len(fns)}"
    fn = fns[0]
    body = {"data": data, "fn_index": fn._id, "session_hash": session, "trigger_id": fn.inputs[0]._id,
            "event_data": None}
    reply = httpx.post(f"{server}/gradio_api/run/predict", json=body, timeout=60)
    assert reply.status_code == 200, reply.text


# ---------------------------------------------------------------- 2. checks that no component update removes
def test_checks_hold_after_a_preset_click_and_the_mean_omega_box(server):
    """A preset click returns an update for every race control, the mean-omega box one for mu: Gradio then keeps a
    fresh copy of those components in the session. Every check must still answer, in one line naming the setting."""
    client = new_client(server)
    controls = list(APP.page.controls.settings.values())
    ui_event(server, client.session_hash, "load_example", controls, [0])  # the first preset
    ui_event(server, client.session_hash, "<lambda>", [APP.page.controls["mu"]], [False])  # mean omega off
    session = APP.blocks.state_holder[client.session_hash]
    for name in ("delta", "mu", "seed", "mean_omega"):  # the scenario: the session has its own copies now
        assert session.blocks_config.blocks[APP.page.controls[name]._id] is not APP.page.controls[name], name
    theory = {"delta": 2.0, "nu": 0.7, "mu": 0.0, "mean_omega": True, "lantern_k": 2, "lantern_lambda": 5.0}
    assert "delta (overall relaxation) must be a number, got 'abc'" in refusal(
        client, "/theory", **(theory | {"delta": "abc"}))
    assert "mu (schedule shift) must be a number, got 'x'" in refusal(client, "/theory", **(theory | {"mu": "x"}))
    assert "mean omega = delta (sets mu) must be true or false, got 'yes'" in refusal(
        client, "/theory", **(theory | {"mean_omega": "yes"}))
    assert "overlay: colour tokens by outcome must be true or false, got 'yes'" in refusal(
        client, "/overlay", overlay="yes")
    assert "seed must be a whole number, got 2.5" in refusal(client, "/share_link", **values(seed=2.5))
    assert "draft length L must be in [1, 8], got 0" in refusal(client, "/race", **values(draft_len=0))
    assert "lab seed must be a whole number" in refusal(client, "/lab_grid", rule="cool-sd", relaxation=2.0,
                                                       samples=1, seed=0.5, condition="3")


# ---------------------------------------------------------------- 3. the replay step
@pytest.mark.parametrize("step, message", [
    ("abc", "replay step must be a number, got 'abc'"), ("", "replay step must be a number, got ''"),
    (None, "replay step must be a number, got None"), ([1], "replay step must be a number, got [1]"),
    (2.5, "replay step must be a whole number, got 2.5"), (-1, "replay step must be in [0, "),
])
def test_replay_step_is_checked_by_the_app(server, step, message):
    client = new_client(server)
    client.predict(**values(seed=2), api_name="/race")
    assert message in refusal(client, "/replay", step=step, overlay=False)


# ---------------------------------------------------------------- 4. share links exactly as strict as the race
@pytest.mark.parametrize("omegas", ["nan", "-1, -2", "0, 0", ", ".join(["1"] * 65), ", ".join(["2"] * 1000), "1e999",
                                    ""])
def test_a_share_link_is_refused_exactly_when_the_race_refuses(server, omegas):
    client = new_client(server)
    settings = values(racers=["custom"], custom_omegas=omegas)
    race = refusal(client, "/race", **settings)
    assert refusal(client, "/share_link", **settings) == race
    query = "?racers=custom&custom_omegas=" + omegas.replace(" ", "+").replace(",", "%2C")
    if len(query) <= 4000:
        assert refusal(client, "/share_restore", query=query) == "share link: " + race


def test_every_link_the_app_makes_restores(server):
    """The longest links the tiny model allows (64 long omegas, every knob set) are made and restored as given;
    the same omegas without the custom racer are not checked by the race, so a link keeps them too."""
    client = new_client(server)
    omegas = ", ".join(["1.00000001"] * 32)  # 382 characters: within the custom list's limit (400)
    for racers in (["eagle-1", "lantern++-gstar", "cool-sd", "custom"], ["eagle-1"]):
        settings = values(racers=racers, custom_omegas=omegas, seed=2**31 - 1, temperature=1.95, mu=-4.95)
        query = client.predict(**settings, api_name="/share_link")
        assert query.startswith("?") and len(query) <= 4000
        assert client.predict(query=query, api_name="/share_restore") == settings
    assert "custom omega list is too long" in refusal(client, "/share_link", **values(custom_omegas="1, " * 200))
    assert "custom omega list is too long" in refusal(client, "/race", **values(custom_omegas="1, " * 200))


def test_same_noise_travels_in_a_link_and_is_refused_with_a_static_tree_exactly_as_the_race(server):
    """`noise` = "same" restores from the link the app makes; with the static tree the race, the link and its restore
    refuse it in the same one line, and an unknown noise in a link names both choices."""
    client = new_client(server)
    settings = values(noise="same", racers=["eagle-1", "sjd"], overlay=True)
    query = client.predict(**settings, api_name="/share_link")
    assert "noise=same" in query and client.predict(query=query, api_name="/share_restore") == settings
    bad = values(noise="same", drafting="eagle-25")
    race = refusal(client, "/race", **bad)
    assert race.startswith("same noise does not apply to tree drafting")
    assert refusal(client, "/share_link", **bad) == race
    assert refusal(client, "/share_restore", query="?noise=same&drafting=eagle-25") == "share link: " + race
    assert refusal(client, "/share_restore", query="?noise=dice") == \
        "share link: unknown noise 'dice'; choose one of stream, same"


# ---------------------------------------------------------------- 5. a nested racer list
def test_a_nested_racer_list_gets_one_clear_line(server):
    client = new_client(server)
    for api_name in ("/race", "/share_link"):
        text = refusal(client, api_name, **values(racers=[["eagle-1"]]))
        assert "racers must be a flat list of racer names" in text and "unhashable" not in text


# ---------------------------------------------------------------- 6. an unknown endpoint over raw HTTP
@pytest.mark.parametrize("path", ["/gradio_api/call/no_such_thing", "/gradio_api/call/v2/no_such_thing"])
def test_an_unknown_api_name_gets_a_404_naming_the_endpoints(server, path):
    reply = httpx.post(server + path, json={"data": []}, timeout=30)
    assert reply.status_code == 404
    error = reply.json()["error"]
    assert "unknown api_name 'no_such_thing'" in error and "race" in error and "model_info" in error
    known = httpx.post(server + "/gradio_api/call/model_info", json={"data": []}, timeout=30)
    assert known.status_code == 200 and "event_id" in known.json()


# ---------------------------------------------------------------- 1. memory bounded by design
def test_the_server_keeps_at_most_its_session_capacity(server):
    """Sessions beyond the capacity push the oldest out (their state with them): 3 x CAPACITY visitors, each a new
    session (two of three racing), leave at most CAPACITY sessions and their traces."""
    holder = APP.blocks.state_holder
    for i in range(3 * CAPACITY):
        client = new_client(server)
        if i % 3:
            client.predict(**values(seed=i, racers=["eagle-1"]), api_name="/race")
        else:
            client.predict(api_name="/model_info")
        assert len(holder.session_data) <= CAPACITY
    traces = [v for s in holder.session_data.values() for v in s.state_data.values() if isinstance(v, RaceTrace)]
    assert 1 <= len(traces) <= CAPACITY


def test_race_state_expires_and_the_trace_is_released(server):
    client = new_client(server)
    client.predict(**values(seed=5), api_name="/race")
    session = APP.blocks.state_holder[client.session_hash]
    states = {type(v).__name__: (c, v) for c, v, _ in session.state_components}
    (trace_state, trace), (snap_state, _) = states["RaceTrace"], states["dict"]
    assert trace_state.time_to_live == snap_state.time_to_live == STATE_TTL_S
    assert len(trace) > 0
    trace_state.delete_callback(trace)  # what Gradio calls once the state has expired
    assert len(trace) == 0


def test_a_trace_keeps_its_events_compactly_and_gives_them_back_equal():
    """The EventStore holds a race's events in a few flat arrays, and returns RoundEvents equal to those recorded."""
    frames = list(APP.page.race.stream.race(**values(seed=7, racers=["eagle-1", "cool-sd", "custom"])))
    trace = frames[-1].trace
    store = EventStore()
    events = []
    for i, e in trace.events():
        store.append(i, e)
        events.append((i, e))
    assert len(store) == len(events) > 20
    for (i, a), (j, b) in zip(events, store):
        assert i == j
        for name in ("index", "start", "n_accepted", "n_drafted", "last", "target_forwards", "draft_forwards",
                     "seconds"):
            assert getattr(a, name) == getattr(b, name), name
        for name in ("tokens", "tested_depths", "accept_probs", "omega", "tested_probs"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and torch.equal(x.nan_to_num(-7.0), y.nan_to_num(-7.0)), name
    ints = sum(len(e.tokens) + len(e.tested_depths) for _, e in events)
    floats = sum(2 * e.n_drafted + len(e.tested_probs) + len(e.seconds) for _, e in events)
    # float64 numbers, int32 tokens / depths and one int32 row per event
    assert store.nbytes == 8 * floats + 4 * (ints + len(events) * store.row_len)
    assert json.dumps(trace.to_json(), allow_nan=False) and math.isfinite(store.nbytes)
