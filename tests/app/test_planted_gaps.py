"""The app's serving pieces that planted bugs slipped past (issue 27), tested through their public entry points:
the session cap the app launches with ($COOLSD_SESSION_CAPACITY, `app.py`'s launch), share-link booleans
(`share.parse_query` / `share.share_query`), and the model picker's first load when several sessions pick the
same model at once (`Catalogue.get`: one load, one Context for all); and `coolsd.app.serving`'s checks called in
this process (the 404 middleware as an ASGI app, the served Blocks' input checks on a small page), which the
launched-app tests reach only over HTTP, out of the mutation run's sight.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest
from demo_app import tiny_demo

from coolsd.app import serving, share
from coolsd.app.context import Catalogue
from coolsd.app.serving import ServedBlocks, UnknownEndpoint, holds_file, parameter_names, session_capacity_from_env

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTED_CAPACITY = 1000  # docs/app-and-api.md: state_session_capacity = 1000 unless $COOLSD_SESSION_CAPACITY
DEADLINE_S = 120.0


# ---------------------------------------------------------------- the session cap at launch
@pytest.mark.parametrize("text, capacity", [(None, DOCUMENTED_CAPACITY), ("", DOCUMENTED_CAPACITY), ("1", 1),
                                            ("250", 250)])
def test_session_capacity_from_the_environment(monkeypatch, text, capacity):
    if text is None:
        monkeypatch.delenv("COOLSD_SESSION_CAPACITY", raising=False)
    else:
        monkeypatch.setenv("COOLSD_SESSION_CAPACITY", text)
    assert session_capacity_from_env() == capacity


@pytest.mark.parametrize("text", ["0", "-3", "abc", "2.5", "1e3", "²", "١٢", " 5"])
def test_a_bad_session_capacity_stops_the_app_with_one_line(monkeypatch, text):
    monkeypatch.setenv("COOLSD_SESSION_CAPACITY", text)
    with pytest.raises(SystemExit, match=f"COOLSD_SESSION_CAPACITY must be an integer >= 1, got '{text}'"):
        session_capacity_from_env()


LAUNCH_PROBE = """
import runpy, gradio as gr
def launch(self, **kw):
    print("CAPACITY", kw["state_session_capacity"], flush=True)
gr.Blocks.launch = launch
runpy.run_path("app.py", run_name="__main__")
"""


def test_app_py_launches_with_the_capacity_from_the_environment():
    """`python app.py` (tiny model) with $COOLSD_SESSION_CAPACITY=7: the launch gets state_session_capacity=7."""
    env = os.environ | {"COOLSD_MODEL": "tiny", "COOLSD_SESSION_CAPACITY": "7", "OMP_NUM_THREADS": "1",
                        "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    done = subprocess.run([sys.executable, "-c", LAUNCH_PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "CAPACITY 7" in done.stdout.splitlines(), done.stdout[-2000:]


def test_the_launch_settings_carry_the_default_capacity():
    from coolsd.app.demo import LAUNCH_KWARGS

    expected = DOCUMENTED_CAPACITY if not os.environ.get("COOLSD_SESSION_CAPACITY") else session_capacity_from_env()
    assert LAUNCH_KWARGS["state_session_capacity"] == expected


# ---------------------------------------------------------------- share-link booleans
BOOLS = ("mean_omega", "overlay")


@pytest.mark.parametrize("name", BOOLS)
@pytest.mark.parametrize("text, value", [("true", True), ("false", False), ("1", True), ("0", False),
                                         ("True", True), ("FALSE", False), (" true ", True)])
def test_a_share_link_reads_booleans(name, text, value):
    values, errors = share.parse_query(tiny_demo().ctx, {name: text})
    assert errors == [] and values == {name: value} and type(values[name]) is bool


@pytest.mark.parametrize("name", BOOLS)
@pytest.mark.parametrize("text", ["yes", "no", "2", "-1", "", "truee", "1.0", "on"])
def test_a_share_link_refuses_other_boolean_text(name, text):
    values, errors = share.parse_query(tiny_demo().ctx, {name: text})
    assert name not in values and len(errors) == 1 and "must be true or false" in errors[0]


@pytest.mark.parametrize("value", [True, False])
def test_a_share_link_writes_booleans_as_words_and_reads_them_back(value):
    ctx = tiny_demo().ctx
    query = share.share_query(ctx, {"mean_omega": value, "overlay": not value})
    assert query == f"?mean_omega={str(value).lower()}&overlay={str(not value).lower()}"
    values, errors = share.parse_query(ctx, dict(p.split("=") for p in query[1:].split("&")))
    assert errors == [] and values == {"mean_omega": value, "overlay": not value}


def test_a_number_is_not_a_boolean_in_a_share_link():
    with pytest.raises(ValueError, match="must be true or false"):
        share.share_query(tiny_demo().ctx, {"mean_omega": 1})


# ---------------------------------------------------------------- the picker's first load under concurrent picks
def tiny_bundles(key):
    from coolsd.models import registry

    return registry.load("tiny")


def test_concurrent_first_picks_load_the_model_once():
    """Four sessions pick a model nobody has loaded yet, all at once: one load, and every session gets the same
    Context. The load waits (with a deadline) until every session has named its model (`Catalogue.check`, the
    first thing a pick does) and a moment more, so the others look for the model while it is loading."""
    sessions = 4
    calls, results, errors = [], [None] * sessions, []
    checked: set[int] = set()

    def loader(key):
        calls.append(key)
        deadline = time.monotonic() + 10.0
        while len(checked) < sessions and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.2)  # the others are past their own lookup now, waiting for this load
        return tiny_bundles(key)

    catalogue = Catalogue(["app", "picked"], workers=1, loader=loader)
    check = catalogue.check

    def counted_check(key):
        out = check(key)
        checked.add(threading.get_ident())
        return out

    catalogue.check = counted_check
    barrier = threading.Barrier(sessions)

    def pick(i):
        try:
            barrier.wait(DEADLINE_S)
            results[i] = catalogue.get("picked")
        except Exception as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=pick, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert not errors and all(not t.is_alive() for t in threads)
    assert len(checked) == sessions and calls == ["picked"]  # loaded once
    assert all(r is results[0] for r in results) and results[0] is catalogue.get("picked")
    assert results[0].catalogue is catalogue and results[0].model.kind == "tiny"
    assert calls == ["picked"]  # a later pick loads nothing


def test_a_pick_that_fails_to_load_is_one_line_and_loads_again_next_time():
    from coolsd.models.bundle import BundleError

    attempts = []

    def loader(key):
        attempts.append(key)
        if len(attempts) == 1:
            raise BundleError("weights missing <here>")
        return tiny_bundles(key)

    catalogue = Catalogue(["app", "picked"], loader=loader)
    with pytest.raises(ValueError, match="the picked model could not be loaded: weights missing ‹here›"):
        catalogue.get("picked")
    assert catalogue.get("picked").model.kind == "tiny" and attempts == ["picked", "picked"]
    with pytest.raises(ValueError, match="unknown model 'other'"):
        catalogue.get("other")


# ---------------------------------------------------------------- serving.py in process (issue 27: mutation run)
# The served app's checks are tested end to end over HTTP (test_bad_input.py, test_reliability.py), but mutmut only
# maps tests that call a function in its own process; these call the same pieces directly, on a small page.
def quiet_refusal(payload):
    """A component's own check that refuses quietly (a gr.Error without a trace), as the app's panels do."""
    raise gr.Error("quiet refusal", print_exception=False)


def broken(payload):
    """A component's processing failing with a plain exception (as Gradio's data models or cache may)."""
    raise ValueError("no <such> value")


def checked_by(fn, label: str) -> gr.Textbox:
    """A text box whose preprocessing is `fn` (set on the instance: a Component subclass defined in a test file
    would make Gradio write a .pyi stub next to it)."""
    box = gr.Textbox(label=label)
    box.preprocess = fn
    return box


def served_page():
    """A ServedBlocks page: /greet (3 values for the API and a state), a private /hidden, /quiet, /broken, /upload."""
    with ServedBlocks() as page:
        name, count = gr.Textbox(label="Name"), gr.Number(label="Count")
        pick, memory, out = gr.Dropdown(["a", "b"], value="a", label="Pick"), gr.State(), gr.Textbox()

        def greet(name, count, pick, memory, request: gr.Request):
            return name

        gr.Button().click(greet, [name, count, pick, memory], out, api_name="greet")
        gr.Button().click(lambda x: x, [name], out, api_name="hidden", api_visibility="private")
        gr.Button().click(lambda x: x, [checked_by(quiet_refusal, "Q")], out, api_name="quiet")
        gr.Button().click(lambda x: x, [checked_by(broken, "B")], out, api_name="broken")
        gr.Button().click(lambda x: x, [gr.File(label="Upload")], out, api_name="upload")
    return page, {fn.api_name: fn for fn in page.fns.values()}


def preprocess(page, fn, data):
    return asyncio_run(page.preprocess_data(fn, data, None))


def refusal(page, fn, data) -> gr.Error:
    with pytest.raises(gr.Error) as err:
        preprocess(page, fn, data)
    assert err.value.print_exception is False  # one line, no trace in the server log
    return err.value


FILE_VALUE = {"path": "/etc/passwd", "meta": {"_type": "gradio.FileData"}}


def test_served_blocks_pass_good_values_and_refuse_too_few_in_one_line():
    page, fns = served_page()
    assert preprocess(page, fns["greet"], ["x", 2, "b", None]) == ["x", 2, "b", None]
    assert refusal(page, fns["greet"], ["x"]).message == (
        "/greet takes 3 values (name, count, pick), got 1: the first one missing is count")
    assert refusal(page, fns["greet"], []).message == (
        "/greet takes 3 values (name, count, pick), got 0: the first one missing is name")
    # the state is not counted (an API call leaves it out; Gradio adds it when every API value is there); the API's
    # values all there but the state missing (a page event without it): still one line, with nothing named missing
    assert refusal(page, fns["greet"], ["x", 2, "a"]).message == "/greet takes 3 values (name, count, pick), got 3"


def test_served_blocks_refuse_file_values_and_failed_preprocessing_in_one_line(caplog):
    page, fns = served_page()
    assert refusal(page, fns["greet"], ["x", {"nested": [FILE_VALUE]}, "a", None]).message == (
        "/greet: count takes no file, got a file value")
    assert refusal(page, fns["greet"], ["x", 2, "zzz", None]).message == (
        "/greet: bad input: Value: zzz is not in the list of choices: ['a', 'b']")
    assert refusal(page, fns["quiet"], ["x"]).message == "quiet refusal"  # a quiet refusal is passed on as it is
    with caplog.at_level("INFO", logger="coolsd.app"):
        message = refusal(page, fns["broken"], ["x"]).message  # Gradio wraps the component's error in its own
    assert message.startswith("/broken: bad input: ComponentProcessingError: Could not preprocess input component")
    assert message.endswith("Original error: ValueError: no ‹such› value") and len(message) <= 300
    assert [m.replace("input refused: ", "bad input: ") for m in caplog.messages] == [message]  # logged, one line
    assert preprocess(page, fns["upload"], [None]) == [None]  # a file input is not refused for taking files


def test_served_blocks_hand_gradio_the_session_state_and_the_kind_of_call(tmp_path):
    """The session's state reaches the handler's state input; a file value of a file input is judged by Gradio
    as the call's kind says once the app has launched: a page or API call may only name an uploaded file, a
    call of the Blocks as a function (explicit_call) also one under the working or temporary directory."""
    from gradio.context import LocalContext
    from gradio.state_holder import SessionState

    page, fns = served_page()
    state = SessionState(page)
    state[fns["greet"].inputs[3]._id] = "remembered"
    assert preprocess(page, fns["greet"], ["x", 2, "a", None]) == ["x", 2, "a", None]
    assert asyncio_run(page.preprocess_data(fns["greet"], ["x", 2, "a", None], state)) == ["x", 2, "a", "remembered"]
    note = tmp_path / "note.txt"
    note.write_text("hi")
    value = {"path": str(note), "meta": {"_type": "gradio.FileData"}}
    page.has_launched = True
    token = LocalContext.blocks.set(page)
    try:
        assert "it was not uploaded by a user" in refusal(page, fns["upload"], [value]).message
        with pytest.raises(gr.Error, match="not uploaded by a user"):
            asyncio_run(page.preprocess_data(fns["upload"], [value], None, False))
        [cached] = asyncio_run(page.preprocess_data(fns["upload"], [value], None, True))
        assert Path(cached).name == "note.txt" and Path(cached).read_text() == "hi"
    finally:
        LocalContext.blocks.reset(token)


def asyncio_run(coroutine):
    import asyncio

    return asyncio.run(coroutine)


def test_parameter_names_are_the_handlers_else_the_labels():
    page, fns = served_page()
    assert parameter_names(fns["greet"]) == ["name", "count", "pick", "memory"]  # the request left out
    assert parameter_names(fns["quiet"]) == ["x"]

    def handler(value, request, select, data):
        return value

    labelled = [gr.Textbox(label="Value", render=False), gr.Number(render=False)]
    # the request and event data left out, whether annotated with the classes or (as under `from __future__ import
    # annotations`, the app's modules) with their names
    for request, select, data in ((gr.Request, gr.SelectData, gr.EventData),
                                  ("gr.Request", "gr.SelectData", "gr.EventData")):
        handler.__annotations__ = {"request": request, "select": select, "data": data}
        assert parameter_names(SimpleNamespace(fn=handler, inputs=labelled[:1])) == ["value"]
    for handler in (lambda *values: values, None, max, lambda a, *, c=2: a):  # too few names, or no signature
        assert parameter_names(SimpleNamespace(fn=handler, inputs=labelled)) == ["Value", "input 1"]


def test_listed_names_are_cut_in_the_middle_past_six():
    assert serving._listed(["a", "b", "c", "d", "e", "f"]) == "a, b, c, d, e, f"
    assert serving._listed(["a", "b", "c", "d", "e", "f", "g"]) == "a, b, c, ..., f, g"
    assert serving._listed([]) == ""


def test_holds_file_finds_a_file_value_at_any_depth_without_recursion():
    assert holds_file(FILE_VALUE) and holds_file([1, ("x", {"a": {"b": [FILE_VALUE]}})])
    assert not holds_file({"path": "x"}) and not holds_file({"meta": {}}) and not holds_file("path meta")
    assert not holds_file([{"path": 1}, {"meta": 2}]) and not holds_file(None) and not holds_file({})
    deep = FILE_VALUE
    for _ in range(5000):  # deeper than Python's recursion limit
        deep = [deep]
    assert holds_file(deep)
    # at most `limit` items looked at (the value itself counts): the file value is the 12th item here
    assert holds_file([FILE_VALUE] + [0] * 10, limit=12) and not holds_file([FILE_VALUE] + [0] * 10, limit=11)
    assert holds_file([FILE_VALUE] + [0] * 99_998) and not holds_file([FILE_VALUE] + [0] * 99_999)  # 100,000 items


class Recorder:
    """An inner ASGI app that records the requests it got, and that it got the caller's receive and send."""

    def __init__(self) -> None:
        self.paths, self.channels = [], []

    async def __call__(self, scope, receive, send):
        self.paths.append(scope.get("path"))
        self.channels.append((receive, send))


async def receive():
    return {"type": "http.request", "body": b""}


class Sent(list):
    """An ASGI send channel: the messages sent to it, in order."""

    async def __call__(self, message):
        self.append(message)


def asgi(middleware, scope) -> Sent:
    sent = Sent()
    asyncio_run(middleware(scope, receive, sent))
    return sent


def test_unknown_endpoint_answers_404_naming_the_public_endpoints():
    page, _ = served_page()
    inner = Recorder()
    middleware = UnknownEndpoint(inner)
    for path in ("/gradio_api/call/nope", "/gradio_api/call/v2/nope", "/gradio_api/call/nope/",
                 "/root/gradio_api/call/nope"):
        start, body = asgi(middleware, {"type": "http", "method": "POST", "path": path, "app": SimpleNamespace(
            blocks=page)})
        assert start["type"] == "http.response.start" and start["status"] == 404
        text = body["body"]
        assert dict(start["headers"]) == {b"content-type": b"application/json",
                                          b"content-length": str(len(text)).encode()}
        assert body["type"] == "http.response.body" and json.loads(text) == {
            "error": "unknown api_name 'nope'; this app serves: broken, greet, quiet, upload"}
    long = "n" * 41
    _, body = asgi(middleware, {"type": "http", "method": "POST", "path": f"/gradio_api/call/{long}",
                                "app": SimpleNamespace(blocks=page)})
    assert json.loads(body["body"])["error"].startswith(f"unknown api_name '{'n' * 37}...'; this app serves: ")
    _, body = asgi(middleware, {"type": "http", "method": "POST", "path": f"/gradio_api/call/{long[:40]}",
                                "app": SimpleNamespace(blocks=page)})
    assert json.loads(body["body"])["error"].startswith(f"unknown api_name '{'n' * 40}'; ")
    assert inner.paths == []


def test_unknown_endpoint_passes_every_other_request_through():
    page, _ = served_page()
    inner = Recorder()
    middleware = UnknownEndpoint(inner)
    app = SimpleNamespace(blocks=page)
    passed = [{"type": "http", "method": "POST", "path": "/gradio_api/call/greet", "app": app},  # known
              {"type": "http", "method": "POST", "path": "/gradio_api/call/v2/hidden", "app": app},  # known, private
              {"type": "http", "method": "GET", "path": "/gradio_api/call/nope", "app": app},  # not a call
              {"type": "http", "method": "POST", "path": "/gradio_api/call/nope/123", "app": app},  # not a call
              {"type": "http", "method": "POST", "path": "/gradio_api/upload", "app": app},
              {"type": "http", "method": "POST", "path": "/gradio_api/call/nope", "app": SimpleNamespace()},  # none
              {"type": "http", "method": "POST", "path": "/gradio_api/call/nope"},
              {"type": "websocket", "path": "/gradio_api/call/nope", "app": app},
              {"type": "lifespan"}]
    for scope in passed:
        sent = asgi(middleware, scope)
        assert sent == [] and inner.channels[-1][0] is receive and inner.channels[-1][1] is sent  # the caller's own
    assert inner.paths == [scope.get("path") for scope in passed]


def test_api_names_skip_events_without_one():
    fns = {1: SimpleNamespace(api_name="a", api_visibility="public"), 2: SimpleNamespace(api_name=None),
           3: SimpleNamespace(api_name="b", api_visibility="undocumented"), 4: SimpleNamespace(api_name="c")}
    assert serving._api_names(SimpleNamespace(blocks=SimpleNamespace(fns=fns))) == {"a": True, "b": False, "c": True}
    assert serving._api_names(SimpleNamespace(blocks=None)) is None and serving._api_names(None) is None
