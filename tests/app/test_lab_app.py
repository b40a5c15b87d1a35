"""The Quality lab and Schedule explorer tabs through the HTTP API (gradio_client, in-process server, tiny model)."""

from __future__ import annotations

import math

import pytest
import torch
from demo_app import served, tiny_demo
from PIL import Image

from coolsd.compare.race import fork_models
from coolsd.decoding.engine import DecodeConfig, run
from coolsd.decoding.rules import CoolSDRule, UniformRSDRule

pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")
DEADLINE_S = 120.0  # the longest a call below may take before the test fails (a deadline, not a timing)
LAB = {"rule": "cool-sd", "relaxation": 2.0, "samples": 3, "seed": 0, "condition": "3"}
SCHEDULE = {"kind": "exponential", "delta": 1.5, "nu": 0.7, "slope": 0.5, "omegas": "2, 1, 0.5", "floor": False,
            "drafts": "toy"}
APP = tiny_demo()
REFERENCE = fork_models(APP.ctx.model.target, APP.ctx.model.drafter)  # before anything decodes


@pytest.fixture(scope="module")
def client():
    from gradio_client import Client

    with served(APP.blocks) as url:
        yield Client(url, verbose=False, download_files=False, analytics_enabled=False)


def test_panels_are_mounted():
    tabs = {getattr(b, "id", None) for b in APP.blocks.blocks.values() if type(b).__name__ == "Tab"}
    assert {"lab", "schedule"} <= tabs


def test_api_lab_grid_streams_and_its_numbers_are_the_library_s(client):
    job = client.submit(**LAB, api_name="/lab_grid")
    job.result(timeout=DEADLINE_S)
    updates = job.outputs()
    n = LAB["samples"] * 4
    assert len(updates) == n  # one update per finished sample
    final = updates[-1]
    stats = final[3]
    assert stats["finished"] and [d["n"] for d in stats["decoders"]] == [3, 3, 3, 3]
    assert [d["decoder"] for d in stats["decoders"]] == ["vanilla", "eagle-1", "chosen", "twin"]
    assert stats["decoders"][2]["rule"] == CoolSDRule(delta=2.0).config() | {"rule": "cool-sd"}
    assert stats["decoders"][3]["rule"]["rule"] == UniformRSDRule.name
    assert not updates[0][3]["finished"] and len(updates[0][3]["samples"]) == 1
    with Image.open(final[0]["path"]) as img:
        assert img.width > img.height > 0
    assert (final[2] is None) if APP.ctx.model.kind != "embedded" else final[2]["type"] == "plotly"
    # the COOL-SD samples are what run() gives on the same class and seed
    m = APP.ctx.model
    target, drafter = REFERENCE
    taus = []
    classes = len(m.conditions.classes)  # the samples' classes spread over the model's: 0, C/3, 2C/3
    for row in range(3):
        cond = row * classes // 3
        ref = run(target, drafter, CoolSDRule(delta=2.0), cond=cond, num_tokens=m.num_tokens,
                  sampling=m.default_sampling, config=DecodeConfig(), seed=0)
        sample = next(s for s in stats["samples"] if s["row"] == row and s["decoder"] == "chosen")
        assert sample["tau"] == pytest.approx(ref.tau) and sample["condition"] == cond
        taus.append(ref.tau)
    assert stats["decoders"][2]["tau"] == pytest.approx(3 * m.num_tokens / sum(m.num_tokens / t for t in taus))


def test_api_schedule(client):
    bars, why, text, result = client.predict(**SCHEDULE, api_name="/schedule")
    assert bars["type"] == "plotly" and why["type"] == "plotly"
    assert result["below_one"] == [3] and "stricter than Eagle-1" in text and "G* keeps that step" in text
    assert abs(result["twin"]["tau"] - result["schedule"]["tau"]) < 1e-6
    floored = client.predict(**(SCHEDULE | {"floor": True}), api_name="/schedule")[3]
    assert floored["below_one"] == [] and math.isclose(floored["schedule"]["tv"], result["schedule"]["tv"],
                                                       rel_tol=1e-9)
    custom = client.predict(**(SCHEDULE | {"kind": "custom", "omegas": "1, 1, 1"}), api_name="/schedule")[3]
    assert custom["schedule"]["tv"] < 1e-9 and custom["schedule"]["omega"] == [1.0, 1.0, 1.0]
    linear = client.predict(**(SCHEDULE | {"kind": "linear", "slope": 1.0, "delta": 2.0}), api_name="/schedule")[3]
    assert linear["schedule"]["omega"] == pytest.approx([4.0, 2.0, 0.0])


@pytest.mark.parametrize("kind", ["exponential", "linear", "uniform"])
@pytest.mark.parametrize("junk", ["2, x", "", "1, 1, 1, 1", "<b>", 7, None])
def test_schedule_reads_the_custom_list_only_for_a_custom_schedule(client, kind, junk):
    """Issue 36 (a hostile-request run): a visitor who typed in the custom field, then chose another kind, got an
    error about a field that kind does not use. Another kind ignores it (UI and API: the one handler)."""
    clean = client.predict(**(SCHEDULE | {"kind": kind}), api_name="/schedule")[3]
    assert client.predict(**(SCHEDULE | {"kind": kind, "omegas": junk}), api_name="/schedule")[3] == clean


@pytest.mark.parametrize("api, changes, message", [
    ("/lab_grid", {"rule": "eagle"}, "unknown rule 'eagle'"),
    ("/lab_grid", {"relaxation": 4096.0}, "relaxation: delta (lambda for LANTERN++) must be in"),
    ("/lab_grid", {"relaxation": "two"}, "must be a number"),
    ("/lab_grid", {"rule": "lantern++", "relaxation": 0.5}, "lam must be ≥ 1"),
    ("/lab_grid", {"samples": 0}, "samples must be in [1, 10]"),
    ("/lab_grid", {"samples": 2.5}, "samples must be a whole number"),
    ("/lab_grid", {"seed": -1}, "lab seed must be in"),
    ("/schedule", {"kind": "<b>spiral</b>"}, "unknown schedule"),
    ("/schedule", {"delta": 0.0}, "delta (mean omega) must be in"),
    ("/schedule", {"nu": -1.0}, "nu (exponential decay rate) must be in"),
    ("/schedule", {"slope": 1.5}, "slope s (linear decay) must be in"),
    ("/schedule", {"kind": "custom", "omegas": "2, x"}, "'x' is not a number"),
    ("/schedule", {"kind": "custom", "omegas": "2, 0"}, "omega_2 must be above 0"),
    ("/schedule", {"kind": "custom", "omegas": "1, 1, 1, 1"}, "give at most 3 numbers"),
    ("/schedule", {"kind": "custom", "omegas": ""}, "give at least one number"),
    ("/schedule", {"kind": "custom", "omegas": "inf"}, "must be finite numbers"),
    ("/schedule", {"floor": "yes"}, "must be true or false"),
    ("/schedule", {"drafts": "near"}, "unknown drafts"),
])
def test_api_bad_values_get_one_clear_error(client, api, changes, message):
    from gradio_client.exceptions import AppError

    values = (LAB if api == "/lab_grid" else SCHEDULE) | changes
    with pytest.raises(AppError) as err:
        client.predict(**values, api_name=api)
    text = str(err.value)
    assert message in text, text
    assert "Traceback" not in text and len(text) < 400 and "<b>" not in text and "&#x27;" not in text


def test_lab_stop_returns_the_lane():
    """Closing the lab's stream mid-grid (what a Stop does) gives the model lane back."""
    panel = APP.page.lab.panel
    stream = panel.grid("uniform-rsd", 3.0, 3, 1, "3")
    next(stream)
    stream.close()
    assert APP.ctx.lanes.qsize() == APP.ctx.workers
    assert torch.is_tensor(APP.ctx.model.neighbours)


def test_pareto_figure_marks_the_run_on_the_shipped_benchmark():
    from coolsd.app import lab as lab_ui
    from coolsd.compare.lab import lab_decoders

    rows = lab_ui.bench_rows()
    if not rows:
        pytest.skip("assets/bench/results.jsonl is not shipped here")
    decoders = lab_decoders("cool-sd", 2.0)  # the shipped benchmark has the floored COOL-SD (and the unclipped one)
    summary = [{"decoder": d.key, "label": d.label, "n": 10, "nll": 0.9, "tau": 3.0, "speedup": 1.5}
               for d in decoders]
    fig = lab_ui.pareto_figure(rows, summary)
    marked = [t for t in fig.data if (t.name or "").startswith("lab: ")]
    assert len(marked) == 6  # Eagle-1, the rule and its twin, on the NLL-vs-speed-up and NLL-vs-tau panels
    assert {t.x[0] for t in marked} == {1.5, 3.0} and {t.y[0] for t in marked} == {0.9}
    lab_len = lab_ui.Chain.draft_len
    configs = [{k: v for k, v in d.rule.config().items() if k != "neighbours"} for d in decoders if d.rule]
    here = [c for c in configs if any(r.get("rule_config") == c and r.get("draft_len") == lab_len
                                      and not r.get("tree") for r in rows)]
    note = lab_ui.bench_note(rows, decoders, summary)  # only the settings the benchmark ran at the lab's L
    assert len([line for line in note.splitlines() if line.startswith("- ")]) == len(here)
    at_lab_len = [r | {"draft_len": lab_len} for r in rows if not r.get("tree")]  # the same rows, at the lab's L
    note = lab_ui.bench_note(at_lab_len, decoders, summary)
    assert "`eagle-1 L=1`" in note and "`cool-sd delta=2 L=1`" in note and "uniform-rsd" not in note  # (not run)


def test_the_relaxation_control_reads_the_rules_knobs():
    """The lab's relaxation is COOL-SD delta's knob (default, bottom, step) up to the race's reach; LANTERN++'s
    lambda, which it also sets, lies within it."""
    from dataclasses import fields

    from coolsd.app import lab as lab_ui
    from coolsd.app.settings import DELTA_TOP
    from coolsd.decoding.rules import CoolSDRule, LanternPPRule

    spec = lab_ui.lab_specs()["relaxation"]
    low, _, step = {f.name: f for f in fields(CoolSDRule)}["delta"].metadata["ui"]
    assert (spec.default, spec.minimum, spec.maximum, spec.step) == (CoolSDRule.delta, low, DELTA_TOP, step)
    lam_low, lam_high, _ = {f.name: f for f in fields(LanternPPRule)}["lam"].metadata["ui"]
    assert spec.minimum <= lam_low and lam_high <= spec.maximum


def test_grid_image_layout():
    from coolsd.app import lab as lab_ui
    from coolsd.compare.lab import LabSample, lab_decoders

    decoders = lab_decoders("cool-sd", 2.0)
    sample = LabSample(1, 2, "chosen", 1, 0, torch.zeros(4, dtype=torch.long), torch.ones(1, 32, 32), 2.0, 2, 0.1,
                       1.0, predicted=7)
    img = lab_ui.grid_image([sample], decoders, ["0", "1", "2"], [str(i) for i in range(10)])
    assert img.size == (lab_ui.LABEL_W + 3 * (lab_ui.CELL + lab_ui.GAP) + lab_ui.GAP,
                        lab_ui.HEAD_H + 4 * (lab_ui.CELL + lab_ui.GAP) + lab_ui.GAP)
    x, y = lab_ui.LABEL_W + lab_ui.GAP + (lab_ui.CELL + lab_ui.GAP), lab_ui.HEAD_H + lab_ui.GAP + 2 * (
        lab_ui.CELL + lab_ui.GAP)
    assert img.getpixel((x + 5, y + lab_ui.CELL - 5)) == (255, 255, 255)  # the (white) sample is pasted
    assert img.getpixel((x - 2, y + 20)) == lab_ui.COLOURS["wrong"]  # misread (7 for 1): red frame


def test_held_out_note_reads_the_training_metrics(tmp_path):
    from coolsd.app.lab import HELD_OUT, held_out_note

    good = tmp_path / "metrics.json"
    good.write_text('{"val_class_acc": 0.583, "n_heldout": 240}')
    assert "58 % of 240 held-out" in held_out_note(good)
    (tmp_path / "bad.json").write_text('{"val_class_acc": "x"}')
    assert held_out_note(tmp_path / "bad.json") == "" and held_out_note(tmp_path / "none.json") == ""
    assert all(held_out_note(p) for p in HELD_OUT.values() if p.is_file())  # the shipped files hold the numbers
