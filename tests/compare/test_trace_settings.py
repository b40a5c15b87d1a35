"""A trace's settings, typed (`TraceSettings`): the JSON form is unchanged through to_json / from_json, a trace
from before a setting existed reads that setting at its one declared default, and an old trace with Jacobi drafting
folded into its rules is split into (rule, drafting) pairs."""

from __future__ import annotations

import dataclasses
import json

import pytest

from coolsd.compare.trace import RaceTrace, TraceSettings
from coolsd.decoding.drafting import Chain, Jacobi, Tree
from coolsd.decoding.engine import DecodeConfig
from coolsd.decoding.sampling import SamplingConfig

RECORDED = {  # a trace's settings as the race records them (keys in this order)
    "condition": "cat face · Twemoji", "seed": 7,
    "sampling": {"cfg_scale": 2.0, "temperature": 0.9, "top_k": 5, "top_p": 1.0}, "draft_len": 3,
    "drafting": "chain", "noise": "same", "racers": ["eagle-1", "sjd"], "resolution": "emoji", "model": "emoji",
    "style": "Twemoji", "execution": "float32",
    "rules": {"eagle-1": {"rule": "eagle-1"}, "sjd": {"rule": "eagle-1"}},
    "draftings": {"eagle-1": {"drafting": "chain", "draft_len": 3},
                  "sjd": {"drafting": "jacobi", "window": 5, "reuse": False, "init": "last"}}}


def test_the_typed_settings_keep_the_json_form():
    settings = TraceSettings.from_json(RECORDED)
    assert settings.to_json() == RECORDED and list(settings.to_json()) == list(RECORDED)
    assert settings.sampling == SamplingConfig(cfg_scale=2.0, temperature=0.9, top_k=5)
    assert settings.racers == ("eagle-1", "sjd") and settings.same_noise and settings.chain
    assert settings.drafting_of("sjd") == Jacobi(5) and settings.drafting_of("vanilla") == Chain(3)
    trace = RaceTrace("m", settings, [("eagle-1", "E"), ("sjd", "S"), ("vanilla", "V")], 4, (2, 2))
    again = RaceTrace.from_json(json.loads(json.dumps(trace.to_json())))
    assert again.settings == settings and again.to_json()["settings"] == RECORDED
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.noise = "stream"  # type: ignore[misc]


def test_an_old_trace_reads_each_missing_setting_at_its_declared_default():
    old = {k: v for k, v in RECORDED.items() if k not in ("noise", "draft_len", "drafting", "style", "draftings")}
    settings = TraceSettings.from_json(old)
    assert settings.noise == DecodeConfig().noise == "stream" and not settings.same_noise
    assert settings.draft_len == Chain().draft_len and settings.drafting == "chain"
    assert settings.to_json()["noise"] == "stream"  # written out: the file now names what the race ran
    assert TraceSettings.from_json({"seed": 3, "a key of a later version": 1}) == TraceSettings(seed=3)


def test_an_old_trace_with_jacobi_folded_into_its_rules_is_split():
    old = {"drafting": "eagle-25", "rules": {"sjd": {"rule": "sjd", "window": 8}, "eagle-1": {"rule": "eagle-1"}}}
    settings = TraceSettings.from_json(old)
    assert settings.rules["sjd"] == {"rule": "eagle-1"} and settings.drafting_of("sjd") == Jacobi(8)
    assert settings.drafting_of("eagle-1") == Tree("eagle-25")  # the race's shared tree
