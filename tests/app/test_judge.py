"""What the model's own classifier sees under each finished picture of a race (coolsd.compare.recognise,
coolsd.app.judge): the readings' maths on known logits, the caption's words, and on the tiny model (judged by the
digit classifier where it is shipped) the race's lines and stats JSON against the classifier run by hand on each
racer's final tokens, live, replayed and at a mid-race step."""

from __future__ import annotations

import math

import pytest
import torch
from demo_app import RaceAPI, tiny_demo

from coolsd.app import race as race_ui
from coolsd.app.judge import Judge, caption
from coolsd.app.racers import SLOTS, slot_keys
from coolsd.app.settings import RaceSettings
from coolsd.compare.lab import load_classifier
from coolsd.compare.likeness import BROKEN_BELOW
from coolsd.compare.recognise import Reading, read_logits, recognise
from coolsd.models import registry
from coolsd.models.conditions import Conditions
from coolsd.util.paths import EMBEDDED_CLASSIFIER

pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")
APP = tiny_demo()
RACE = RaceAPI(APP)
DIGITS = Conditions(tuple(str(d) for d in range(10)))
EMOJI = Conditions(("cat face", "red apple", "rocket"), ("Twemoji", "Noto"))


def test_readings_are_each_heads_softmax_argmax():
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 0.0]])
    a, b = read_logits(logits)
    assert (a.cls, b.cls) == (1, 0) and a.style is None
    assert a.cls_p == pytest.approx(math.exp(2) / (1 + math.exp(2) + math.exp(1)), rel=1e-12)
    styled = read_logits(torch.tensor([[0.0, 1.0, 0.0, 5.0, 5.0 + math.log(3)]]), num_styles=2)[0]
    assert (styled.cls, styled.style) == (1, 1)  # class logits first, then the style logits, each its own softmax
    assert styled.cls_p == pytest.approx(math.e / (2 + math.e), rel=1e-12) and styled.style_p == pytest.approx(0.75)
    with pytest.raises(ValueError, match="logits must be"):
        read_logits(torch.zeros(3))


def test_a_reading_names_what_it_sees_and_whether_it_was_asked():
    r = Reading(cls=2, cls_p=0.5, style=1, style_p=0.9)
    assert r.condition(2) == 5
    said = r.describe(EMOJI, asked=5)
    assert said == {"class": "rocket", "class_p": 0.5, "style": "Noto", "style_p": 0.9, "asked": "rocket · Noto",
                    "class_ok": True, "style_ok": True}
    assert r.describe(EMOJI, asked=0) | {"asked": "cat face · Twemoji"} == said | {
        "asked": "cat face · Twemoji", "class_ok": False, "style_ok": False}
    assert Reading(7, 0.98).describe(DIGITS, asked=7)["style_ok"] is None
    assert "asked" not in Reading(7, 0.98).describe(DIGITS)


class _Model:
    """The parts of a ModelBundle a Judge reads."""

    def __init__(self, names: Conditions, chars=()) -> None:
        self.conditions, self.class_chars, self.kind, self.classifier = names, list(chars), "test", None
        self.conditioning = "class"


def test_the_caption_says_what_is_seen_and_marks_a_miss():
    judge = Judge(_Model(EMOJI, ["🐱", "🍎", "🚀"]), load=lambda kind: None)
    hit = Reading(0, 0.934, 1, 0.71).describe(EMOJI, asked=1)
    assert caption(judge, hit) == "✓ classifier sees 🐱 **cat face** 93% · Noto 71%"
    miss = Reading(2, 0.41, 0, 0.5).describe(EMOJI, asked=1)
    assert caption(judge, miss) == "✗ classifier sees 🚀 **rocket** 41% · Twemoji 50%, not cat face"
    assert caption(judge, None) == "" and judge.read([torch.zeros(3, 4, 4)], 0) == [None]
    digits = Judge(_Model(DIGITS), load=lambda kind: None)
    assert caption(digits, Reading(3, 0.5).describe(DIGITS, asked=8)) == "✗ classifier sees **3** 50%, not 8"
    assert digits.asked("8") == 8 and digits.asked("no such digit") is None


@pytest.fixture
def judged(monkeypatch):
    """The tiny demo's races judged by the shipped digit classifier (restored afterwards)."""
    classifier = load_classifier(EMBEDDED_CLASSIFIER)
    if classifier is None:
        pytest.skip("assets/embedded classifier not exported")
    monkeypatch.setattr(APP.ctx.judge, "_classifier", classifier)
    monkeypatch.setattr(race_ui, "IMAGE_EVERY_S", 0.0)  # every round streams: racers finish in different frames
    monkeypatch.setattr(race_ui, "FRAME_SHARE", 1.0)
    return classifier


def _by_hand(classifier, tokens: torch.Tensor, asked: int) -> dict:
    """The reading of one picture, decoded and classified alone (as the race judges each)."""
    image = APP.ctx.model.tokenizer.decode(tokens)
    (reading,) = recognise(classifier, image[None])
    return reading.describe(APP.ctx.model.conditions, asked)


def test_each_finished_picture_is_judged_once_live_and_in_replay(judged):
    values = RaceSettings.defaults(APP.ctx).as_dict() | {"condition": "5", "seed": 3}
    frames = list(RACE.race(**values))
    final = frames[-1]
    trace = final.trace
    keys = slot_keys([k for k, _ in trace.racers[:-1]])
    racers = trace.replay(len(trace))
    for r in racers:  # the stats JSON: the classifier run by hand on each racer's final tokens
        assert final.stats["decoders"][r.key]["recognised"] == _by_hand(judged, r.tokens, 5), r.key
    for slot, key in enumerate(keys):  # the line under each picture says the same
        seen = final.stats["decoders"][key]["recognised"] if key else None
        assert final.captions[slot] == caption(APP.ctx.judge, seen)
        assert (final.captions[slot] != "") == (key is not None)
    # live: a line is sent in the frame its racer finishes (and all again in the last), else skipped
    first_done = {}
    for n, frame in enumerate(frames[:-1]):
        for slot, line in enumerate(frame.captions):
            if isinstance(line, str) and line:
                first_done.setdefault(slot, n)
    assert first_done and len(set(first_done.values())) > 1  # racers finished in different frames
    assert frames[0].captions == ("",) * SLOTS or all(isinstance(c, str) for c in frames[0].captions)
    replayed = RACE.replay(len(trace), False, trace)
    assert replayed.captions == final.captions and replayed.stats["decoders"] == final.stats["decoders"]
    APP.ctx.judge.use(judged)  # (its readings forgotten: judged again, the same)
    assert RACE.replay(len(trace), False, trace).stats["decoders"] == final.stats["decoders"]
    # mid-race: the racers not finished there are not judged (their missing tokens would be filled in)
    step = min(first_done.values()) + 1
    mid = RACE.replay(step, False, trace)
    done = {r.key for r in trace.replay(step) if r.done >= r.num_tokens}
    assert done and done != {r.key for r in racers}
    for r in racers:
        assert (mid.stats["decoders"][r.key]["recognised"] is not None) == (r.key in done), r.key


def test_without_a_classifier_nothing_is_said(monkeypatch):
    monkeypatch.setattr(APP.ctx.judge, "_classifier", None)
    final = list(RACE.race(**RaceSettings.defaults(APP.ctx).as_dict()))[-1]
    assert final.captions == ("",) * SLOTS
    assert all(d["recognised"] is None for d in final.stats["decoders"].values())


@pytest.mark.skipif(not registry.MODELS["emoji"].present(), reason="the emoji model is not shipped here")
def test_the_emoji_classifier_reads_class_and_style():
    from coolsd.app.context import open_context

    ctx = open_context("emoji", others=[])
    m = ctx.model
    cond = m.condition("cat face", m.style_names[1])
    from coolsd.decoding.engine import run

    tokens = run(m.target, None, None, cond=cond, num_tokens=m.num_tokens, sampling=m.default_sampling, seed=0).tokens
    (seen,) = ctx.judge.read([m.tokenizer.decode(tokens)], cond)
    assert set(seen) == {"class", "class_p", "style", "style_p", "asked", "class_ok", "style_ok", "likeness", "broken"}
    assert -1 <= seen["likeness"] <= 1 and seen["broken"] == (seen["likeness"] < BROKEN_BELOW)
    assert seen["class"] in m.conditions.classes and seen["style"] in m.style_names
    assert 0 < seen["class_p"] <= 1 and 0 < seen["style_p"] <= 1 and seen["asked"] == m.conditions.label(cond)
