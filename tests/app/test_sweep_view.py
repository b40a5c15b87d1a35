"""The Lab's precomputed delta sweep (coolsd.app.sweep_view) drawn from a small hand-made sweep file on the tiny
model: the figure (COOL-SD per measure, vanilla's band, the race's delta marked), the words (every number read
from the file), the picture sheet, the checks of the API's arguments, the tour's Quality step reading the breaking
delta from the file, and the delta slider's reach over every shipped sweep."""

from __future__ import annotations

import json
import re

import gradio as gr
import pytest
from demo_app import tiny_demo

from coolsd.app import sweep_view, tour
from coolsd.app.settings import DELTA_TOP, specs
from coolsd.bench import delta_sweep as ds
from coolsd.util.format import number

pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")
APP = tiny_demo()
CTX = APP.ctx


def _row(setting, rule, delta, tau, speedup, fid, rec, nll, broken=0.125):
    low, high = ds.wilson(round(rec * 8), 8)
    broken_low, broken_high = ds.wilson(round(broken * 8), 8)
    return {"setting": setting, "rule": rule, "delta": delta, "n_images": 8, "tau": tau, "speedup": speedup,
            "seconds": 0.1, "fid": fid, "fid_std": 3.0, "recognition": rec, "recognition_low": low,
            "recognition_high": high, "style_recognition": None, "likeness": 0.8, "broken": broken,
            "broken_low": broken_low, "broken_high": broken_high, "nll": nll, "nll_se": 0.02}


def small_sweep(grid_tokens: int = 16) -> dict:
    """A sweep as `python -m coolsd.bench.delta_sweep` writes it: 8 samples, deltas 1, 4, 16, 64; pictures break
    from 16 on (FID above the band), the broken share and the NLL from 64 on."""
    rows = [_row("vanilla", None, None, 1.0, 1.0, 40.0, 0.875, 1.0), _row("eagle-1", "eagle-1", None, 2.1, 1.1,
                                                                            41.0, 0.875, 1.01)]
    rows += [_row(f"cool-sd delta={d:g}", "cool-sd", d, 2.0 + j / 4, 1.2 + j / 10, fid, rec, nll, broken)
             for j, (d, fid, rec, nll, broken) in enumerate((
                 (1.0, 40.5, 0.875, 1.0, 0.125), (4.0, 45.0, 0.75, 1.03, 0.25), (16.0, 47.5, 0.625, 1.02, 0.375),
                 (64.0, 60.25, 0.625, 1.2, 0.625)))]
    band = ds.vanilla_band(rows[0])
    kept = {r["setting"]: [" ".join(str((i * 7 + j) % 32) for i in range(grid_tokens)) for j in range(3)]
            for r in rows}
    return {"version": ds.SWEEP_VERSION, "command": "python -m coolsd.bench.delta_sweep --model tiny --samples 8",
            "machine": "a test machine", "date": "2026-12-06", "wall_minutes": 0.5, "model": "tiny random",
            "kind": "tiny", "samples": 8, "draft_len": 3, "nu": 0.7, "band_width": ds.BAND_WIDTH, "rows": rows,
            "band": band, "breaks": ds.breaks(rows, band), "kept": kept, "conditions": [], "seeds": []}


@pytest.fixture
def with_sweep(tmp_path, monkeypatch):
    """The tiny model with the small sweep file in place."""
    sweep = small_sweep(CTX.model.num_tokens)
    path = tmp_path / "delta_sweep.json"
    path.write_text(json.dumps(sweep))
    monkeypatch.setitem(ds.SWEEPS, "tiny", path)
    return sweep


def test_the_small_sweep_breaks_where_it_was_made_to():
    assert small_sweep()["breaks"] == {"fid": 16.0, "recognition": None, "broken": 64.0, "nll": 64.0, "picture": 16.0}


def test_without_a_sweep_the_lab_says_how_to_make_one():
    fig, text, sheet = sweep_view.SweepPanel(CTX).view()
    assert fig is None and sheet is None
    assert "No precomputed δ sweep" in text and "python -m coolsd.bench.delta_sweep --model tiny --out FILE" in text
    assert sweep_view.SweepPanel(CTX).numbers() is None


def test_the_figure_draws_each_measure_the_band_and_the_races_delta(with_sweep):
    fig, text, sheet = sweep_view.SweepPanel(CTX).view(delta=3.0)
    lines = [t for t in fig.data if t.name == "COOL-SD"]
    assert len(lines) == len(sweep_view.PANELS)
    for trace, (key, _) in zip(lines, sweep_view.PANELS):
        assert list(trace.x) == [1.0, 4.0, 16.0, 64.0]
        assert list(trace.y) == [r[key] for r in with_sweep["rows"][2:]]
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    assert sorted((s.y0, s.y1) for s in rects) == sorted(tuple(with_sweep["band"][k]) for k in ("fid", "recognition",
                                                                                             "broken", "nll"))
    verticals = [s for s in fig.layout.shapes if s.type == "line" and s.x0 == s.x1]
    assert sum(s.x0 == 3.0 for s in verticals) == len(sweep_view.PANELS)  # the race's delta, on every panel
    assert sum(s.x0 == 16.0 for s in verticals) == len(sweep_view.PANELS)  # where pictures break
    assert fig.layout.xaxis.type == "log"
    assert sheet.size[1] == 4 * (sweep_view.CELL + 4) + 4  # vanilla, Eagle-1, COOL-SD at 4 (nearest 3) and at 16


def _file_numbers(sweep: dict, delta: float) -> set[str]:
    """Every number the words may quote, formatted as they print them, read from the file (and the race's delta)."""
    out = {f"{delta:g}", str(sweep["samples"]), str(sweep["draft_len"]), f"{sweep['nu']:g}",
           f"{sweep['band_width']:g}", "95"}
    for r in sweep["rows"]:
        out |= {f"{r['delta']:g}" if r["delta"] else "", number(r["tau"], ".2f"), number(r["speedup"], ".2f"),
                number(r["fid"], ".1f"), number(r["fid_std"], ".1f"), f"{100 * r['recognition']:.0f}",
                f"{100 * r['broken']:.0f}", number(r["nll"], ".3f")}
    band = sweep["band"]
    out |= {number(v, ".1f") for v in band["fid"]} | {f"{100 * v:.0f}" for v in band["recognition"] + band["broken"]}
    return out | {n for text in (sweep["command"], sweep["date"]) for n in re.findall(r"\d+(?:\.\d+)?", text)}


def test_every_number_in_the_words_is_read_from_the_file(with_sweep):
    _, text, _ = sweep_view.SweepPanel(CTX).view(delta=3.0)
    assert "From δ = 16 on, every swept δ (up to 64) has FID above vanilla AR's band (8 samples a point)." in text
    assert ("nearest swept point, δ = 4: τ 2.25, speed-up 1.30×, FID 45.0 ± 3.0, recognised 75%, called broken 25%, "
            "NLL 1.030") in text
    quoted = set(re.findall(r"\d+(?:\.\d+)?", text))
    assert quoted <= _file_numbers(with_sweep, 3.0), quoted - _file_numbers(with_sweep, 3.0)
    far = sweep_view.SweepPanel(CTX).view(delta=500.0)[1]
    assert "outside the swept range, 1 to 64" in far and "δ = 64:" in far


def test_the_range_sentence_says_when_nothing_breaks():
    sweep = small_sweep()
    sweep["breaks"] = {"fid": None, "recognition": None, "broken": None, "nll": 64.0, "picture": None}
    said = sweep_view.range_sentence(sweep)
    assert said.startswith("No swept δ up to 64 moved FID or recognition beyond vanilla AR's band (8 samples")
    assert "NLL of the pictures rises beyond it from δ = 64." in said
    assert sweep_view.range_sentence(None) == "This model has no precomputed δ sweep."


def test_a_sweep_without_likeness_draws_no_broken_panel_and_says_no_share(tmp_path, monkeypatch):
    sweep = small_sweep(CTX.model.num_tokens)
    for row in sweep["rows"]:
        for key in ds.OPTIONAL_ROW_KEYS:
            del row[key]
    del sweep["band"]["broken"], sweep["breaks"]["broken"]
    path = tmp_path / "delta_sweep.json"
    path.write_text(json.dumps(sweep))
    monkeypatch.setitem(ds.SWEEPS, "tiny", path)
    fig, text, _ = sweep_view.SweepPanel(CTX).view(delta=3.0)
    titles = [a.text for a in fig.layout.annotations]
    assert len([t for t in fig.data if t.name == "COOL-SD"]) == len(sweep_view.PANELS) - 1
    assert not any("broken" in t for t in titles) and "called broken" not in text
    assert ds.load("tiny")["breaks"]["broken"] is None


def test_the_broken_share_is_drawn_and_said_with_its_band(with_sweep):
    fig, text, _ = sweep_view.SweepPanel(CTX).view(delta=64.0)
    assert any(a.text.startswith("called broken (likeness below") for a in fig.layout.annotations)
    assert "called broken 62%" in text
    low, high = ds.wilson(1, 8)
    assert f"called broken {low:.0%} to {high:.0%}" in text


def test_bad_arguments_are_one_line(with_sweep):
    panel = sweep_view.SweepPanel(CTX)
    with pytest.raises(gr.Error, match=r"delta \(overall relaxation\) must be in"):
        panel.view(delta=DELTA_TOP * 2)
    with pytest.raises(gr.Error, match="must be a number"):
        panel.numbers(delta="lots")
    with pytest.raises(gr.Error, match="unknown model"):
        panel.numbers(model="nope")
    with pytest.raises(gr.Error, match="must be a number"):  # (over the API, null is no default)
        panel.numbers(delta=None)
    numbers = panel.numbers(delta=10.0)
    assert numbers["nearest"] == 16.0 and numbers["delta"] == 10.0 and "kept" not in numbers
    assert numbers["breaks"] == with_sweep["breaks"]


def test_a_file_of_another_version_is_not_shown(tmp_path, monkeypatch):
    path = tmp_path / "old.json"
    path.write_text(json.dumps(small_sweep() | {"version": 0}))
    monkeypatch.setitem(ds.SWEEPS, "tiny", path)
    assert sweep_view.load("tiny") is None
    path.write_text("{not json")
    assert sweep_view.load("tiny") is None


def test_pictures_of_another_model_are_not_drawn(tmp_path, monkeypatch):
    path = tmp_path / "other.json"
    path.write_text(json.dumps(small_sweep(CTX.model.num_tokens + 1)))  # another grid
    monkeypatch.setitem(ds.SWEEPS, "tiny", path)
    fig, _, sheet = sweep_view.SweepPanel(CTX).view()
    assert fig is not None and sheet is None


def test_the_lab_follows_the_races_delta_slider():
    delta = APP.page.controls["delta"]
    plot = next(c for c in APP.blocks.blocks.values() if getattr(c, "elem_id", None) == "sweep-plot")
    fns = [f for f in APP.blocks.fns.values() if (delta._id, "change") in f.targets]
    assert any(plot._id in [o._id for o in f.outputs] for f in fns)


def test_the_quality_step_runs_the_lab_where_the_sweep_says_pictures_break(with_sweep):
    step = next(s for s in tour.STEPS if s.title == "Quality")
    assert tour.quality_delta(CTX) == 16.0 and step.lab_values(CTX)["relaxation"] == 16.0
    assert tour.sweep_note(CTX) == f"*{sweep_view.range_sentence(with_sweep)}* This step runs COOL-SD at δ = 16."
    values = tour.Tour(CTX).settings(step, None, ["rule", "relaxation"])
    assert values[-2:] == ("cool-sd", 16.0)


def test_the_quality_step_without_a_sweep_runs_at_the_sliders_end():
    step = next(s for s in tour.STEPS if s.title == "Quality")
    assert tour.quality_delta(CTX) == DELTA_TOP == step.lab_values(CTX)["relaxation"] == step.lab["relaxation"]


def test_the_delta_slider_reaches_every_shipped_sweep():
    assert specs(CTX)["delta"].maximum == DELTA_TOP
    found = [kind for kind, path in ds.SWEEPS.items() if path.is_file()]
    for kind in found:
        sweep = sweep_view.load(kind)
        assert sweep is not None, kind
        assert sweep_view.reach(sweep) <= DELTA_TOP and (sweep_view.breaking_delta(sweep) or 0) <= DELTA_TOP
