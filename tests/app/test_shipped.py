"""The recorded default race (issue 17 part 5): recorded by the Race tab's own handler, shown at page open only while
it matches the loaded model and defaults, replayed exactly at every step, current for the embedded model, and one
current recording per shipped model with no stale one left beside it."""

from __future__ import annotations

import dataclasses
import gzip
import json

import pytest

from coolsd.app import recorded as shipped
from coolsd.app.after_race import AfterRace
from coolsd.app.context import open_context
from coolsd.app.race import LiveRaces
from coolsd.app.recorded import Recordings, Stamp, record
from coolsd.app.settings import RaceSettings
from coolsd.compare import trace as trace_files
from coolsd.compare.trace import RaceTrace, recording_path
from coolsd.decoding.variants import VANILLA
from coolsd.models import registry
from coolsd.util import machine
from coolsd.util.paths import EMBEDDED_DIR, TRACES_DIR

OTHER_MACHINE_ROUNDS = 3  # a speculative racer's rounds a recording must match on another machine
pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")


def as_read_back(trace: RaceTrace) -> dict:
    """The trace's JSON after a save and load (float fields go through float32 there)."""
    return RaceTrace.from_json(json.loads(json.dumps(trace.to_json()))).to_json()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """(a fresh tiny context, its default race recorded into a temporary traces folder, that folder)."""
    ctx = open_context("tiny", others=[])
    folder = tmp_path_factory.mktemp("traces")
    trace, _ = record(ctx)
    shipped.save(ctx, trace, recording_path(ctx.model.name, folder))
    return ctx, trace, folder


def test_saved_file_holds_the_trace_and_where_it_ran(recorded):
    ctx, trace, folder = recorded
    with gzip.open(recording_path(ctx.model.name, folder), "rt") as f:
        data = json.load(f)
    assert {k: v for k, v in data.items() if k != "recorded"} == json.loads(json.dumps(trace.to_json()))
    rec = data["recorded"]
    assert rec["defaults"] == shipped.defaults_json(ctx) and rec["defaults"]["rules"] == json.loads(json.dumps(
        trace.settings.rules))
    assert rec["machine"] == shipped.machine() and "cores" in rec["machine"] and rec["date"].endswith("UTC")
    text = Stamp.from_json(rec).label()
    assert rec["machine"] in text and rec["date"] in text and "Generate" in text


def test_loaded_only_for_the_same_model_and_defaults(recorded, monkeypatch):
    ctx, trace, folder = recorded
    loaded, _ = shipped.load(ctx, folder)
    assert loaded.to_json() == as_read_back(trace)
    original = shipped.defaults_json
    monkeypatch.setattr(shipped, "defaults_json", lambda c: original(c) | {"seed": 1})
    assert shipped.load(ctx, folder) is None  # other defaults: a stale recording is not shown
    monkeypatch.undo()
    other = folder / "other"
    other.mkdir()
    data = trace.to_json() | {"model": "another model", "recorded": {"defaults": shipped.defaults_json(ctx)}}
    with gzip.open(recording_path(ctx.model.name, other), "wt") as f:
        json.dump(data, f)
    assert shipped.load(ctx, other) is None
    assert shipped.load(ctx, folder / "missing") is None


def test_the_race_tab_opens_on_it_and_replays_it_exactly(recorded, monkeypatch):
    ctx, trace, folder = recorded
    recordings = Recordings(ctx, folder)
    panel = AfterRace(ctx, LiveRaces(), recordings)
    shown_trace, _, first = recordings.of(ctx)
    assert shown_trace.to_json() == as_read_back(trace)
    final = first.stats["decoders"]
    assert final == panel.replay(len(trace), False, shown_trace).stats["decoders"]
    assert all(d["finished"] for d in final.values())
    for step in range(len(trace) + 1):  # every interior step of the shipped race, with no race in this session
        shown = panel.replay(step, False, None).stats
        racers = trace.replay(step)
        want = {r.key: r.stats(racers[-1]) for r in racers}
        assert {k: (d["tokens"], d["target_forwards"], d["rounds"]) for k, d in shown["decoders"].items()} == \
               {k: (s["tokens"], s["target_forwards"], s["rounds"]) for k, s in want.items()}
        assert shown["replay_step"] == step
    assert "Recorded race" in panel.replay(3, False, None).stats_md


@pytest.mark.skipif(not (EMBEDDED_DIR / "target").is_dir(), reason="the embedded model is not shipped here")
def test_the_shipped_embedded_recording_is_what_generate_gives_now():
    """Fails when the defaults or the model changed without re-recording (`python -m coolsd.app.recorded`).
    Bit for bit on the machine (CPU kind and execution) it was recorded on. Elsewhere vanilla AR bit for bit and each
    racer's first rounds: other vector units round the head's products differently, and once one acceptance falls
    the other way a racer's later rounds differ (an AVX2-only AMD EPYC against the Xeon's recording: LANTERN++ and
    COOL-SD from their 5th round, Eagle-1 from its 14th; vanilla AR's 256 tokens the same)."""
    ctx = open_context("mnist", others=[])
    found = shipped.load(ctx)
    assert found is not None, f"no current recording for {ctx.model.name}: run `{shipped.COMMAND}`"
    old, recorded = found
    new, _ = record(ctx)
    assert new.settings == old.settings and new.racers == old.racers
    same = shipped.same_machine(ctx, recorded)
    for i, (key, _) in enumerate(new.racers):
        upto = None if same or key == VANILLA else OTHER_MACHINE_ROUNDS
        a = [e.tokens.tolist() for j, e in new.steps if j == i][:upto]
        b = [e.tokens.tolist() for j, e in old.steps if j == i][:upto]
        assert len(b) >= (upto or 1) and a == b, f"{key} decodes differently now: run `{shipped.COMMAND}`"


def test_a_recording_is_bit_for_bit_only_on_its_own_machine(recorded, monkeypatch):
    ctx, _, folder = recorded
    _, rec = shipped.load(ctx, folder)
    assert rec.cpu == machine.cpu_key() and rec.execution == shipped.execution(ctx)
    assert shipped.same_machine(ctx, rec)
    assert not shipped.same_machine(ctx, dataclasses.replace(rec, execution="bfloat16 on eager"))
    monkeypatch.setattr(shipped, "cpu_key", lambda: "another CPU [no bf16 units]")
    assert not shipped.same_machine(ctx, rec)


@pytest.mark.parametrize("key", [key for key in ("emoji", "mnist") if registry.MODELS[key].present()])
def test_each_shipped_model_has_one_current_recording_and_no_stale_one(key):
    """A retrained model (issue 25's emoji model) gets its recording made again and the old model's file removed:
    the page opens on the race of the model as shipped, and no recording of a model no longer shipped stays."""
    ctx = open_context(key, others=[])
    found = shipped.load(ctx)
    assert found is not None, f"no current recording for {ctx.model.name}: run `{shipped.COMMAND} --model {key}`"
    mine = []
    for path in sorted(TRACES_DIR.glob("*.json.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            if json.load(f).get("settings", {}).get("model") == key:
                mine.append(path.name)
    assert mine == [recording_path(ctx.model.name).name], f"recordings of {key}: {mine}; remove the stale ones"


def test_the_seed_is_chosen_where_the_lossless_pictures_are_recognised(recorded, monkeypatch, tmp_path):
    """`choose` keeps the first seed whose vanilla AR and Eagle-1 pictures the classifier recognises; the file
    names it, its defaults race at it, the page says it was chosen, and it is the seed the settings default to."""
    ctx, trace, _ = recorded
    seen = {0: {"vanilla": {"class_ok": True}, "eagle-1": {"class_ok": False}},
            1: {"vanilla": {"class_ok": False}, "eagle-1": {"class_ok": True}},
            2: {"vanilla": {"class_ok": True}, "eagle-1": {"class_ok": True}, "cool-sd": {"class_ok": False}}}
    monkeypatch.setattr(shipped, "record", lambda c, seed: (trace, seen[seed]))
    got, chosen = shipped.choose(ctx, [0, 1, 2])
    assert got is trace and chosen["seed"] == 2 and [t["seed"] for t in chosen["tried"]] == [0, 1, 2]
    assert "first of seeds 0-2" in chosen["why"]
    path = shipped.save(ctx, trace, tmp_path / "x.json.gz", chosen)
    with gzip.open(path, "rt") as f:
        rec = json.load(f)["recorded"]
    assert rec["seed"] == rec["defaults"]["seed"] == 2 and trace_files._seed_in(str(path), 0) == 2
    assert "Seed 2: chosen as the first" in Stamp.from_json(rec).label()
    none = {0: {"vanilla": {"class_ok": False}, "eagle-1": {"class_ok": True}}}
    monkeypatch.setattr(shipped, "record", lambda c, seed: (trace, none[seed]))
    assert shipped.choose(ctx, [0])[1]["why"].startswith("no seed of 0-0")
    monkeypatch.setattr(trace_files, "recording_path", lambda name, folder=None: path)
    assert trace_files.recorded_seed(ctx.model.name) == 2
    assert RaceSettings.defaults(ctx).seed == 2  # the app races at the recording's seed
