"""`python -m coolsd.bench.precision` times its rounds on the execution path stored with the model (issue 35)."""

from __future__ import annotations

import json

from coolsd.bench import precision
from coolsd.models.graphs import EXECUTION_FILE


def test_precision_is_measured_on_the_stored_path(tmp_path):
    from coolsd.models.tiny import tiny_bundle

    b = tiny_bundle()
    b.target.model.save_pretrained(tmp_path / "target")
    b.drafter.head.save_pretrained(tmp_path / "drafter")
    first = precision.measure(tmp_path, draft_len=2, repeats=1, warmup=0)
    assert first["path"] == "eager" and first["cpu"] in ("fp32", "bf16")
    (tmp_path / EXECUTION_FILE).write_text(json.dumps({"cpu": "lean"}))
    stored = precision.measure(tmp_path, draft_len=2, repeats=1, warmup=0)
    assert stored["path"] == "lean" and set(stored["measured_ms_per_round"]) == {"fp32", "bf16"}


def test_precision_times_the_guidance_rows_the_model_is_shown_with(tmp_path, monkeypatch):
    from coolsd.models.tiny import tiny_bundle

    b = tiny_bundle()
    b.target.model.save_pretrained(tmp_path / "target")
    b.drafter.head.save_pretrained(tmp_path / "drafter")
    seen = []
    real = precision.round_call
    monkeypatch.setattr(precision, "round_call", lambda *a, **kw: seen.append(kw["guidance"]) or real(*a, **kw))
    assert precision.measure(tmp_path, draft_len=1, repeats=1, warmup=0)["guidance"] is True  # CFG 3 by default
    config = json.loads((tmp_path / "target" / "config.json").read_text())
    config["default_sampling"] = {"cfg_scale": 1.0}  # as the emoji model stores it: one row
    (tmp_path / "target" / "config.json").write_text(json.dumps(config))
    assert precision.measure(tmp_path, draft_len=1, repeats=1, warmup=0)["guidance"] is False
    assert seen == [True, True, False, False]
