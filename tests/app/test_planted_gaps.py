"""The app's serving pieces that planted bugs slipped past (issue 27), tested through their public entry points:
the session cap the app launches with ($COOLSD_SESSION_CAPACITY, `app.py`'s launch), share-link booleans
(`share.parse_query` / `share.share_query`), and the model picker's first load when several sessions pick the
same model at once (`Catalogue.get`: one load, one Context for all).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from demo_app import tiny_demo

from coolsd.app import share
from coolsd.app.context import Catalogue
from coolsd.app.serving import session_capacity_from_env

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
