"""The limit table (`coolsd.bench.limit_table`) and `python -m coolsd.bench.limit` on the tiny model: what it
counts, what it writes, what --store stores.

No timed assert: the numbers are whatever this machine gives; only their presence and consistency are checked.
"""

from __future__ import annotations

import json

import pytest

from coolsd.bench import limit, limit_table
from coolsd.models.graphs import EXECUTION_FILE, stored_path
from coolsd.models.lean import LEAN_PATHS


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
    assert set(result["paths"]) == {"eager", *LEAN_PATHS} and result["rows"] == 2 and result["draft_len"] == 2
    assert set(result["products_ms"]) == {"target", "drafter", "drafter_int8"}
    assert all(0 < ms < result["paths"]["eager"]["round"] for ms in result["products_ms"].values())
    for path, times in result["paths"].items():
        assert all(times[k] > 0 for k in ("step", "verify", "head", "round")) and times["ready_s"] >= 0
        r = result["ratios"][path]
        assert r["head_per_step"] == round(times["head"] / times["step"], 3)
    assert result["ratios"]["eager"]["step_vs_eager"] == 1.0
    assert result["bandwidth_gbs"]["memory"] > 0 and result["implied_ms"]["target_memory"] > 0
    assert tiny.target.stack.lean is None and tiny.drafter.lean is None  # forks were measured, not the bundle
    table = limit_table.markdown(result)
    assert "| eager |" in table and "| lean |" in table and "| lean-packed |" in table and "GB/s" in table
    assert "| lean-q8 |" in table and "The matrix products alone (2 row(s) each" in table
    older = {k: v for k, v in result.items() if k != "products_ms"}  # a table written before products were timed
    assert "products alone" not in limit_table.markdown(older) and "| lean-q8 |" in limit_table.markdown(older)


def test_main_writes_json_and_table_and_stores_the_faster_path(tiny, tmp_path, monkeypatch):
    monkeypatch.setitem(limit.MODELS, "emoji", (lambda root, device: tiny, tmp_path, tmp_path / "out"))
    assert limit.main(["--model", "emoji", "--repeats", "1", "--store", "--buffer-mb", "1"]) == 0
    result = json.loads((tmp_path / "out" / "limit.json").read_text())
    assert (tmp_path / "out" / "limit.md").read_text() == limit_table.markdown(result)
    stored = json.loads((tmp_path / EXECUTION_FILE).read_text())
    assert stored["cpu"] == limit_table.fastest_path(result) == stored_path(tmp_path, "cpu")


def test_measure_times_only_the_paths_asked_for_beside_eager(tiny):
    result = limit_table.measure(tiny, draft_len=1, repeats=1, warmup=0, context=4, buffer_bytes=2**20,
                                 paths=("lean-rows", "no-such-path"))
    assert list(result["paths"]) == list(result["ratios"]) == ["eager", "lean-rows"]  # eager: the ratios' baseline
    assert result["ratios"]["lean-rows"]["step_vs_eager"] == round(
        result["paths"]["lean-rows"]["step"] / result["paths"]["eager"]["step"], 3)
    table = limit_table.markdown(result)
    assert "| lean-rows |" in table and "| lean |" not in table and "of the lean-rows step" in table


def _size_sweep():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tools" / "target_size_sweep.py"
    spec = importlib.util.spec_from_file_location("target_size_sweep", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_size_sweep_folders_load_strictly_at_the_new_shape_and_keep_the_shipped_settings(tmp_path):
    from coolsd.models.emoji import EMOJI_DIR, load_emoji

    sweep = _size_sweep()
    assert sweep.parse_size("128x2x192") == (128, 2, 192)
    for bad in ("100x2x192", "128x0x192", "128x2"):
        with pytest.raises(ValueError):
            sweep.parse_size(bad)
    millions = sweep.random_folder(tmp_path / "m", 128, 2, 192)
    bundle = load_emoji(tmp_path / "m", device="cpu")  # strict: every weight of the new shape present
    cfg = bundle.target.model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size, cfg.num_attention_heads) == (128, 2, 192, 2)
    assert sum(p.numel() for p in bundle.target.model.parameters()) / 1e6 == pytest.approx(millions)
    assert bundle.drafter.head.config.hidden_size == 128 and bundle.drafter.head.config.num_hidden_layers == 1
    shipped = json.loads((EMOJI_DIR / "target" / "config.json").read_text(encoding="utf-8"))
    saved = json.loads((tmp_path / "m" / "target" / "config.json").read_text(encoding="utf-8"))
    for key in ("lookalike_channel", "class_chars", "default_class", "codebook_size"):
        assert saved[key] == shipped[key]
    assert not (tmp_path / "m" / "bench").exists() and (tmp_path / "m" / "vq").is_dir()
