"""coolsd/bench/gpu.py runs end to end on tiny random models on CPU and writes its JSON and Markdown."""

from __future__ import annotations

import json
import os

from coolsd.bench import gpu


def test_gpu_check_tiny_writes_every_part(tmp_path):
    module = gpu
    before = os.environ.get("COOLSD_EXECUTION")
    assert module.main(["--tiny", "--repeats", "2", "--out", str(tmp_path)]) == 0
    assert os.environ.get("COOLSD_EXECUTION") == before  # the script restores what it set
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    parts = {(p["model"], p["path"]): p for p in report["parts"]}
    assert set(parts) == {(m, p) for m in ("embedded", "llamagen-tiny") for p in ("static", "eager")}
    for (model, _), part in parts.items():
        assert set(part["call_ms"]) == {"target_step", "verify_6", "verify_tree_26", "drafter_step"}
        assert all(v > 0 for v in part["call_ms"].values())
        assert [r["decoder"] for r in part["decoders"]][0] == "vanilla AR" and len(part["decoders"]) == 5
        assert all(r["tokens_per_s"] > 0 and 0 <= r["outside_model_share"] <= 1 for r in part["decoders"])
        assert ("first_race_s" in part) == (model == "embedded")
    # both paths decode the same tokens for a seed, so tau matches decoder by decoder
    for model in ("embedded", "llamagen-tiny"):
        taus = [[r["tau"] for r in parts[(model, p)]["decoders"]] for p in ("static", "eager")]
        assert taus[0] == taus[1]
    assert "| target_step |" in (tmp_path / "gpu_check.md").read_text()
