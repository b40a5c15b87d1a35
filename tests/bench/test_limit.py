"""The limit table (`coolsd.bench.limit_table`) and `python -m coolsd.bench.limit` on the tiny model: what it
counts, what it writes.

No timed assert: the numbers are whatever this machine gives; only their presence and consistency are checked.
"""

from __future__ import annotations

import json

import pytest

from coolsd.bench import limit, limit_table
from coolsd.models import rowkernel
from coolsd.models.graphs import FUSED


@pytest.fixture(scope="module")
def tiny():
    from coolsd.models.tiny import tiny_bundle

    return tiny_bundle()


def test_step_bytes_count_every_matrix_once(tiny):
    cfg = tiny.target.model.config
    d, i, v, layers = cfg.hidden_size, cfg.intermediate_size, tiny.target.vocab_size, cfg.num_hidden_layers
    per_layer = d * 3 * d + d * d + d * 2 * i + i * d  # qkv, o, gate+up, down (as many heads as kv heads)
    sizes = limit_table.step_bytes(tiny.target, tiny.drafter)
    assert sizes["target"] == 4 * (layers * per_layer + d * v)  # fp32
    assert sizes["drafter"] == 4 * (per_layer + 2 * d * d + d * v)  # one layer, fc (2D -> D), head


def test_measure_reports_both_paths_and_leaves_the_bundle_alone(tiny):
    result = limit_table.measure(tiny, draft_len=2, repeats=1, warmup=0, context=4, buffer_bytes=2**20)
    both = ["eager", FUSED] if rowkernel.available() else ["eager"]
    assert list(result["paths"]) == both and result["rows"] == 2 and result["draft_len"] == 2
    assert result["execution_path"] == tiny.path and set(result["products_ms"]) == {"target", "drafter"}
    assert all(0 < ms < result["paths"]["eager"]["round"] for ms in result["products_ms"].values())
    for path, times in result["paths"].items():
        assert all(times[k] > 0 for k in ("step", "verify", "head", "round")) and times["ready_s"] >= 0
        r = result["ratios"][path]
        assert r["head_per_step"] == round(times["head"] / times["step"], 3)
    assert result["ratios"]["eager"]["step_vs_eager"] == 1.0
    assert result["bandwidth_gbs"]["memory"] > 0 and result["implied_ms"]["target_memory"] > 0
    assert tiny.target.stack.fused is None and tiny.drafter.fused is None  # forks were measured, not the bundle
    table = limit_table.markdown(result)
    assert "| eager |" in table and "GB/s" in table and "The matrix products alone (2 row(s) each" in table
    assert (f"| {FUSED} |" in table) == rowkernel.available()


def test_main_writes_json_and_table(tiny, tmp_path, monkeypatch):
    monkeypatch.setitem(limit.MODELS, "emoji", (lambda root, device: tiny, tmp_path, tmp_path / "out"))
    assert limit.main(["--model", "emoji", "--repeats", "1", "--buffer-mb", "1"]) == 0
    result = json.loads((tmp_path / "out" / "limit.json").read_text())
    assert (tmp_path / "out" / "limit.md").read_text() == limit_table.markdown(result)


def test_measure_times_only_the_paths_asked_for_beside_eager(tiny):
    result = limit_table.measure(tiny, draft_len=1, repeats=1, warmup=0, context=4, buffer_bytes=2**20,
                                 paths=("no-such-path",))
    assert list(result["paths"]) == list(result["ratios"]) == ["eager"]  # eager: the ratios' baseline
    assert "of the eager step" in limit_table.markdown(result)
