"""coolsd.bench.delta_sweep: the samples it decodes, the spreads, vanilla's band and where each measure leaves it
(on hand-made rows), and the command end to end on the tiny model (judged by the digit classifier)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from coolsd.bench import delta_sweep as ds
from coolsd.bench.runner import work_items
from coolsd.compare.metrics import classifier_outputs, predicted
from coolsd.models.tiny import tiny_bundle
from coolsd.util.paths import EMBEDDED_CLASSIFIER

HAS_SCORER = (EMBEDDED_CLASSIFIER / "real_stats.safetensors").is_file()


def test_conditions_spread_over_the_classes_with_the_styles_in_turn():
    assert ds.spread_conditions(10, 0, 4) == [0, 2, 5, 7]
    assert ds.spread_conditions(10, 0, 12) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]  # more samples than classes
    conds = ds.spread_conditions(187, 4, 8)
    assert [c % 4 for c in conds] == [0, 1, 2, 3, 0, 1, 2, 3] and [c // 4 for c in conds] == [j * 187 // 8
                                                                                              for j in range(8)]


def test_sample_items_rotate_the_settings_as_the_benchmark_does():
    groups = [(3, 0), (5, 1), (7, 2)]
    items = ds.sample_items(4, groups)
    grid = work_items(4, [3], [0, 1, 2])  # the benchmark's order over (class, seed) groups
    assert [i.setting for i in items] == [i.setting for i in grid]
    assert [(i.cls, i.seed) for i in items[4:8]] == [(5, 1)] * 4 and len(set(items)) == 12


def test_wilson_interval_matches_the_formula_and_keeps_a_width_at_the_ends():
    low, high = ds.wilson(64, 64)
    z = ds.WILSON_Z
    assert high == 1.0 and low == pytest.approx(64 / (64 + z * z), rel=1e-12)  # n / (n + z^2) at p = 1
    low, high = ds.wilson(30, 60)
    half = z * math.sqrt(0.25 / 60 + z * z / (4 * 3600)) / (1 + z * z / 60)
    assert (low, high) == pytest.approx((0.5 - half, 0.5 + half), rel=1e-12)
    assert ds.wilson(0, 10)[0] == 0.0 and ds.wilson(0, 10)[1] > 0
    assert all(math.isnan(v) for v in ds.wilson(0, 0))


def _row(delta, fid, rec, nll, rule="cool-sd"):
    return {"setting": f"d{delta}", "rule": rule, "delta": delta, "fid": fid, "fid_std": 2.0, "recognition": rec,
            "recognition_low": rec - 0.1, "recognition_high": min(1.0, rec + 0.1), "nll": nll, "nll_se": 0.01}


def test_band_and_breaks_read_the_worse_side_from_the_last_unbroken_delta():
    vanilla = _row(None, 50.0, 0.9, 1.0, rule=None)
    band = ds.vanilla_band(vanilla)
    assert band == {"fid": [46.0, 54.0], "recognition": [0.8, 1.0], "broken": [math.nan, math.nan],
                    "nll": [0.98, 1.02]}  # (no likeness: a model without real pictures)
    assert ds.vanilla_band(vanilla | {"fid_std": 40.0})["fid"] == [0.0, 130.0]  # (no FID below 0)
    rows = [vanilla, _row(1, 55.0, 0.9, 0.9), _row(2, 50.0, 0.7, 0.95), _row(4, 55.0, 0.85, 1.05),
            _row(8, 56.0, 0.6, 1.10)]
    # FID: above from delta 4 on (delta 1 is above too, but 2 is not); recognition: below only at 8 (2 is a blip);
    # NLL: below the band is not worse (deltas 1, 2), above from 4 on
    assert ds.breaks(rows, band) == {"fid": 4, "recognition": 8, "broken": None, "nll": 4, "picture": 4}
    assert ds.breaks(rows[:3], band) == {"fid": None, "recognition": 2, "broken": None, "nll": None, "picture": 2}
    assert ds.breaks([vanilla], band)["picture"] is None


def test_the_broken_share_has_its_wilson_band_and_can_set_where_pictures_break():
    def with_broken(row, share):
        low, high = ds.wilson(round(share * 64), 64)
        return row | {"n_images": 64, "broken": share, "broken_low": low, "broken_high": high}

    vanilla = with_broken(_row(None, 50.0, 0.9, 1.0, rule=None), 0.125)
    band = ds.vanilla_band(vanilla)
    assert band["broken"] == list(ds.wilson(8, 64)) and band["broken"][0] < 0.125 < band["broken"][1]
    rows = [vanilla, with_broken(_row(1, 50.0, 0.9, 1.0), 0.14), with_broken(_row(2, 50.0, 0.9, 1.0), 0.40),
            with_broken(_row(4, 50.0, 0.9, 1.0), 0.45)]  # FID, recognition and NLL stay in the band
    assert ds.breaks(rows, band) == {"fid": None, "recognition": None, "broken": 2, "nll": None, "picture": 2}
    assert not ds.beyond(None, band["broken"], 1) and not ds.beyond(0.9, [None, None], 1)  # (a JSON's NaN)


def test_bad_arguments_are_one_line():
    with pytest.raises(SystemExit):  # argparse: not a number
        ds.main(["--model", "tiny", "--deltas", "two"])
    with pytest.raises(SystemExit, match="--samples must be at least 2"):
        ds.main(["--model", "tiny", "--samples", "1", "--out", "x.json"])
    with pytest.raises(SystemExit, match="--out is needed"):
        ds.main(["--model", "tiny"])
    with pytest.raises(SystemExit, match="no classifier"):
        ds.main(["--model", "tiny", "--samples", "2", "--out", "x.json"])


@pytest.mark.skipif(not HAS_SCORER, reason="assets/embedded classifier not exported")
def test_command_end_to_end_on_the_tiny_model(tmp_path):
    """Two samples, two deltas: every setting scored, the band and breaks recomputed from the rows, the kept
    tokens the tiny model's own, each sample's classifier reading as the file counts it. About 15 s."""
    out = tmp_path / "sweep.json"
    assert ds.main(["--model", "tiny", "--classifier", str(EMBEDDED_CLASSIFIER), "--samples", "2", "--deltas",
                    "4,1", "--keep", "2", "--fid-bootstrap", "3", "--out", str(out), "--quiet"]) == 0
    sweep = json.loads(out.read_text())
    assert sweep["version"] == ds.SWEEP_VERSION and sweep["samples"] == 2 and sweep["kind"] == "tiny"
    assert [r["setting"] for r in sweep["rows"]] == ["vanilla", "eagle-1", "cool-sd delta=1", "cool-sd delta=4"]
    assert [r["delta"] for r in sweep["rows"]] == [None, None, 1.0, 4.0]
    assert all(r["n_images"] == 2 and r["tau"] >= 1 for r in sweep["rows"]) and sweep["rows"][0]["speedup"] == 1.0
    assert sweep["band"] == ds.vanilla_band(sweep["rows"][0]) and sweep["breaks"] == ds.breaks(sweep["rows"],
                                                                                             sweep["band"])
    assert sweep["command"].startswith("python -m coolsd.bench.delta_sweep --model tiny")
    assert sweep["conditions"] == ["0", "5"] and sweep["seeds"] == [0, 1]
    bundle = tiny_bundle()
    from coolsd.compare.lab import load_classifier

    classifier = load_classifier(EMBEDDED_CLASSIFIER)
    for row in sweep["rows"]:
        lines = sweep["kept"][row["setting"]]
        tokens = [ds.read_tokens(line) for line in lines]
        assert len(tokens) == 2 and all(len(t) == bundle.num_tokens for t in tokens)
        images = torch.stack([bundle.tokenizer.decode(t) for t in tokens])
        logits = classifier_outputs(classifier, images)[1]
        hits = sum(predicted(classifier, logits[j], cond)["pred"] == cond for j, cond in enumerate((0, 5)))
        assert row["recognition"] == hits / 2  # (both samples are kept: the file's share is theirs)
        assert (row["recognition_low"], row["recognition_high"]) == pytest.approx(ds.wilson(hits, 2))
    assert math.isfinite(sweep["rows"][0]["fid"]) and sweep["wall_minutes"] > 0
