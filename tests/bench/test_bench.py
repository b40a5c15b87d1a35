"""coolsd.bench: settings, work split, frontier and claims on known rows, the command end to end on the
tiny model, and the two-process torchrun split against one process (same merged numbers)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from coolsd.bench import main
from coolsd.bench.cli import select
from coolsd.bench.report import (
    SPEEDUP_NAME,
    claims,
    frontier_fid,
    pareto,
    summarise,
    targets,
    time_split,
    time_split_markdown,
)
from coolsd.bench.runner import rank_slice, work_items
from coolsd.bench.settings import parse_spec, sweep
from coolsd.decoding.drafting import Chain

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- settings and work items
def test_sweep_covers_every_family_with_unique_labels():
    settings = sweep(Chain.draft_len, [5, 10], [2, 5, 10, 20], True, [1.1, 2], [1.1, 2, 8], 0.7, [2],
                     ["eagle-1@tree:shape=eagle-25", "lantern++:k=10,lam=5@tree:shape=eagle-25"])
    labels = [s.label for s in settings]
    assert labels[:2] == ["vanilla", "eagle-1"]
    assert "lantern++ k=5 lam=2" in labels and "lantern++ k=10 G* lam=20" in labels
    assert "cool-sd delta=2" in labels and "cool-sd unclipped delta=2" in labels and "uniform-rsd delta=1.1" in labels
    assert "lantern++ k=10 lam=5 tree eagle-25" in labels
    assert len(settings) == 2 + 16 + 2 + 3 + 1 + 2
    assert {s.family for s in settings} >= {"vanilla", "lantern++ k=5", "lantern++ k=5 G*", "cool-sd",
                                            "eagle-1 tree eagle-25"}
    # the engine's default L goes unnamed, any other L is in the label
    other = Chain.draft_len + 2
    assert [s.label for s in sweep(other, cool_delta=[2])] == ["vanilla", f"eagle-1 L={other}",
                                                              f"cool-sd delta=2 L={other}"]


def test_sweep_puts_the_relaxed_no_drafter_rows_beside_sjd():
    """At each Jacobi window W: SJD, SJD + reuse, then each --no-drafter rule on Jacobi drafts (a (Jacobi, rule)
    pair, no class per pair); W is their draft length, named once as window=W; `--only jacobi` keeps them (and
    vanilla)."""
    settings = sweep(3, [5], [], False, [], [], 0.7, [], [], [4, 8], True,
                     ["cool-sd:delta=2", "cool-sd:delta=8", "lantern++:k=5,lam=5"])
    labels = [s.label for s in settings]
    assert labels[2:] == ["sjd window=4", "sjd window=8", "sjd reuse window=4", "sjd reuse window=8",
                          "cool-sd-jacobi delta=2 window=4", "cool-sd-jacobi delta=8 window=4",
                          "lantern++-jacobi k=5 lam=5 window=4", "cool-sd-jacobi delta=2 window=8",
                          "cool-sd-jacobi delta=8 window=8", "lantern++-jacobi k=5 lam=5 window=8"]
    cool = next(s for s in settings if s.label == "cool-sd-jacobi delta=2 window=8")
    assert cool.draft_len == 8 and cool.variant == "cool-sd-jacobi" and cool.family == "cool-sd-jacobi"
    assert cool.build_rule(None).config() == {"rule": "cool-sd", "delta": 2.0, "nu": 0.7, "mu": None,
                                              "floor_at_one": True, "residual_kind": "optimal"}
    assert cool.describe(None)["drafting"] == {"drafting": "jacobi", "window": 8, "reuse": False, "init": "last"}
    assert [s.label for s in select(settings, "jacobi")] == ["vanilla", *[x for x in labels if "jacobi" in x]]
    assert parse_spec("cool-sd:delta=4@jacobi:window=6").label == "cool-sd-jacobi delta=4 window=6"
    assert parse_spec("eagle-1@jacobi:window=6,reuse=true").label == "sjd reuse window=6"
    assert parse_spec("eagle-1@jacobi:init=uniform").label == "sjd window=4 init=uniform"
    with pytest.raises(ValueError, match="takes rules only"):
        sweep(3, jacobi_window=[4], no_drafter=["cool-sd@jacobi"])


def test_parse_spec():
    s = parse_spec("cool-sd:delta=2,nu=0.5@tree:shape=chain-5")
    assert (s.rule, s.kwargs, s.draft_len, s.tree) == ("cool-sd", {"delta": 2, "nu": 0.5}, 5, "chain-5")
    s = parse_spec("cool-sd:delta=2@chain:draft_len=3")
    assert (s.draft_len, s.tree, s.label) == (3, None, "cool-sd delta=2 L=3")
    assert parse_spec("eagle-1", 4).draft_len == 4
    assert parse_spec("vanilla").rule is None
    assert parse_spec("cool-sd:floor_at_one=true").kwargs == {"floor_at_one": True}
    with pytest.raises(ValueError, match="unknown rule"):
        parse_spec("medusa")
    with pytest.raises(ValueError, match="delta must be"):
        parse_spec("cool-sd:delta=-1")
    with pytest.raises(ValueError, match="unknown tree"):
        parse_spec("eagle-1@tree:shape=oak")
    with pytest.raises(ValueError, match="unknown drafting 'oak'; choose one of chain, tree, jacobi"):
        parse_spec("eagle-1@oak")
    with pytest.raises(ValueError, match="expected name=value"):
        parse_spec("cool-sd:delta")


def test_work_items_interleave_and_split():
    items = work_items(4, [0, 1, 2], [0, 1])
    assert len(items) == 24 and len(set(items)) == 24
    assert [i.setting for i in items[:8]] == [0, 1, 2, 3, 1, 2, 3, 0]  # rotated per (class, seed) group
    assert all(len({(i.cls, i.seed) for i in items[g * 4 : g * 4 + 4]}) == 1 for g in range(6))
    parts = [rank_slice(items, r, 3) for r in range(3)]
    assert sum(parts, []) == items and {len(p) for p in parts} == {8}
    assert sum((rank_slice(items, r, 5) for r in range(5)), []) == items


# ---------------------------------------------------------------- frontier and claims on known rows
def _row(label, rule, fid, speedup, tau=None, **cfg):
    return {"setting": label, "family": rule, "rule_config": {"rule": rule} | cfg, "tree": None, "draft_len": 5,
            "n_images": 10, "fid": fid, "fid_std": 0.1, "speedup": speedup, "tau": tau or speedup, "nll": fid / 10,
            "nll_se": 0.001,
            "outside_share": 0.05}


def test_pareto_and_frontier_fid():
    front = pareto([(1.0, 5.0), (2.0, 6.0), (1.5, 7.0), (3.0, 9.0), (0.5, 8.0)])
    assert front == [(1.0, 5.0), (2.0, 6.0), (3.0, 9.0)]
    assert frontier_fid(front, 0.2) == 5.0 and frontier_fid(front, 2.5) == pytest.approx(7.5)
    assert math.isnan(frontier_fid(front, 3.5))


def test_claims_hold_and_fail():
    cool = [_row(f"cool-sd delta={d}", "cool-sd", f, s, residual_kind="optimal", floor_at_one=True)
            for d, f, s in ((1.1, 5.0, 2.0), (2, 5.5, 2.5), (4, 6.0, 3.0))]
    # COOL-SD unclipped is another variant: its (unbeatable) point must not join COOL-SD's frontier
    cool.append(_row("cool-sd unclipped delta=8", "cool-sd", 1.0, 9.0, residual_kind="optimal", floor_at_one=False))
    uniform = [_row("uniform-rsd delta=2", "uniform-rsd", 6.0, 2.4),
               _row("uniform-rsd delta=4", "uniform-rsd", 7.0, 2.9)]
    lantern = [_row("lantern++ k=5 lam=5", "lantern++", 5.2, 2.1, k=5, lam=5.0, residual_kind="published"),
               _row("lantern++ k=5 G* lam=5", "lantern++", 5.6, 2.1, k=5, lam=5.0, residual_kind="optimal"),
               _row("lantern++ k=5 lam=20", "lantern++", 9.0, 3.5, k=5, lam=20.0, residual_kind="published")]
    found = {c["claim"]: c for c in claims(cool + uniform + lantern)}
    assert found["cool_dominates_uniform"]["verdict"] == "holds"
    assert found["cool_beats_lantern"]["verdict"] == "mixed (1 of 2)"  # lam=20 is faster than any COOL-SD point
    assert found["gstar_improves_lantern"]["verdict"] == "does not hold"
    assert found["cool_dominates_uniform"]["detail"]["fid vs speedup"]["clear"] == 2
    assert found["cool_dominates_uniform"]["verdicts"]["nll vs tau"] == "holds"
    assert found["gstar_improves_lantern"]["verdicts"]["nll"] == "does not hold"


def test_targets_report_values():
    rows = [_row("vanilla", "vanilla", 10.0, 1.0) | {"cpu_seconds": 0.9}, _row("eagle-1", "eagle-1", 10.0, 1.5),
            _row("cool-sd delta=2", "cool-sd", 10.5, 2.2)]
    found = {(t["setting"], t["target"]): t for t in targets(rows)}
    assert found[("cool-sd delta=2", "speed-up vs vanilla AR")]["met"] is True
    vs_eagle = found[("cool-sd delta=2", "speed-up vs Eagle-1")]
    assert vs_eagle["value"] == pytest.approx(2.2 / 1.5) and vs_eagle["met"] and vs_eagle["goal"] == ">= 1.3"
    assert found[("eagle-1", "speed-up vs vanilla AR")]["met"] is False  # 1.5 < 1.6
    assert found[("vanilla", "CPU s / image")]["met"] is True
    assert found[("cool-sd delta=2", "FID / vanilla FID")]["met"] is True
    assert found[("cool-sd delta=2", "time outside model forwards")]["met"] is True


def test_time_split_puts_a_round_in_vanilla_steps_beside_the_tools_ceiling():
    """Hand count (an image of 128 tokens): vanilla 0.4 s over 128 steps, 25 % outside forwards; Eagle-1 (L = 2)
    0.6 s over 64 rounds, 40 % outside: a round = (0.6 / 64) / (0.4 / 128) = 3 steps, 1.8 of forwards and 1.2 of
    host work; the tool's round of 1.5 steps caps tau 2 at 1.33x. Other draft lengths, trees and SJD are left out
    (not the tool's round)."""
    vanilla = _row("vanilla", "vanilla", 1.0, 1.0) | {"seconds": 0.4, "target_forwards": 128.0, "outside_share": 0.25}
    eagle = _row("eagle-1 L=2", "eagle-1", 1.0, 0.7, tau=2.0) | {"seconds": 0.6, "target_forwards": 64.0,
                                                                  "outside_share": 0.4, "draft_len": 2}
    others = [eagle | {"setting": "eagle-1 L=3", "draft_len": 3}, eagle | {"setting": "tree", "tree": "binary-2"},
              eagle | {"setting": "sjd", "family": "sjd", "rule_config": {"rule": "eagle-1"},
                       "drafting": {"drafting": "jacobi", "window": 8}},
              eagle | {"setting": "cool-sd-jacobi", "family": "cool-sd-jacobi",
                       "rule_config": {"rule": "cool-sd-jacobi"}}]  # (a row written before drafting was apart)
    limit = {"draft_len": 2, "execution_path": "fused", "ratios": {"eager": {"round_per_step": 3.0},
                                                         "fused": {"round_per_step": 1.5}}}
    split = time_split([vanilla, eagle, *others], limit)
    assert [r["setting"] for r in split] == ["vanilla", "eagle-1 L=2"]
    assert split[0] == pytest.approx({"setting": "vanilla", "tau": 1.0, "tool_round": 1.0, "ceiling": 1.0,
                                           "speedup": 1.0, "forwards": 0.75, "host": 0.25, "round": 1.0})
    e = split[1]
    assert (e["round"], e["forwards"], e["host"]) == pytest.approx((3.0, 1.8, 1.2))
    assert (e["tool_round"], e["ceiling"], e["speedup"]) == pytest.approx((1.5, 2.0 / 1.5, 0.7))
    text = time_split_markdown(split, "fused")
    assert "path fused" in text and "| eagle-1 L=2 | 2.00 | 1.50 | 1.33x | 1.80 | 1.20 | 3.00 | 0.70x |" in text
    assert time_split([vanilla, eagle], None) == [] and time_split([eagle], limit) == []
    assert time_split([vanilla, eagle], {"draft_len": 2, "execution_path": "fused"}) == []  # no ratios recorded
    assert time_split_markdown([], "fused") == ""


def test_speedup_is_the_named_cpu_time_ratio_without_warm_up():
    """speed-up = sum of vanilla CPU s / sum of the setting's CPU s over the same images, warm-up left out;
    wall time, the per-image median and warm-up images must not move it."""
    settings = sweep(uniform_delta=[], cool_delta=[2.0], cool_unclipped_delta=[])
    assert [s.label for s in settings] == ["vanilla", "eagle-1", "cool-sd delta=2"]
    rng = torch.Generator().manual_seed(0)
    records = []
    cpu = {0: [9.0, 2.0, 2.0, 4.0], 1: [9.0, 1.0, 1.0, 1.0], 2: [9.0, 1.0, 0.5, 2.0]}  # image 0: warm-up
    for i in range(3):
        for img in range(4):
            records.append({"setting_index": i, "cls": img % 2, "seed": img // 2, "warm_up": img == 0,
                            "num_tokens": 16, "target_forwards": 16 // (i + 1), "draft_forwards": 0,
                            "wall_s": 5 * cpu[i][img], "cpu_s": cpu[i][img], "draft_s": 0.0,
                            "verify_s": cpu[i][img], "pred": 0, "nll": 1.0,
                            "features": torch.randn(3, generator=rng).tolist(), "tokens_sha": "x"})
    real = (torch.zeros(3).numpy(), torch.eye(3).numpy(), 10)
    rows = {r["setting"]: r for r in summarise(records, settings, None, real, fid_bootstrap=0)}
    assert rows["eagle-1"]["speedup"] == pytest.approx(8.0 / 3.0)  # not the median ratio (2.0), not with warm-up
    assert rows["cool-sd delta=2"]["speedup"] == pytest.approx(8.0 / 3.5)
    assert rows["vanilla"]["speedup"] == 1.0 and rows["vanilla"]["cpu_seconds"] == pytest.approx(8.0 / 3)
    assert rows["vanilla"]["seconds"] == pytest.approx(40.0 / 3) and rows["eagle-1"]["n_timed"] == 3
    assert rows["eagle-1"]["n_images"] == 4 and rows["eagle-1"]["speedup_stat"] == SPEEDUP_NAME
    assert "CPU time" in SPEEDUP_NAME and "warm-up excluded" in SPEEDUP_NAME


# ---------------------------------------------------------------- the command on the tiny model
SHIPPED_CLASSIFIER = ROOT / "assets" / "embedded" / "classifier"


@pytest.fixture(scope="module")
def scorer(tmp_path_factory):
    """The shipped digit classifier and its real-digit statistics; where they are missing (not exported), a
    random ResNet of the same config and statistics of random images."""
    if (SHIPPED_CLASSIFIER / "real_stats.safetensors").is_file():
        return ["--model", "tiny", "--classifier", str(SHIPPED_CLASSIFIER), "--real-stats",
                str(SHIPPED_CLASSIFIER / "real_stats.safetensors")]
    from transformers import ResNetForImageClassification

    from coolsd.compare.metrics import classifier_features, feature_stats, save_real_stats
    from coolsd.train.classifier import classifier_config

    root = tmp_path_factory.mktemp("scorer")
    torch.manual_seed(0)
    classifier = ResNetForImageClassification(classifier_config()).eval()
    classifier.save_pretrained(root / "classifier")
    images = torch.rand(64, 1, 32, 32, generator=torch.Generator().manual_seed(0))
    save_real_stats(root / "real_stats.safetensors", *feature_stats(classifier_features(classifier, images)), 64)
    return ["--model", "tiny", "--classifier", str(root / "classifier"), "--real-stats",
            str(root / "real_stats.safetensors")]


def _fid_by_eigvals(features, mu_real, sigma_real) -> float:
    """Textbook FID by another route than coolsd.compare.metrics: unbiased covariance written out, and
    tr (S1 S2)^1/2 as the sum of square roots of the eigenvalues of S1 S2."""
    f = np.asarray(features, dtype=np.float64)
    mu = f.mean(0)
    sigma = (f - mu).T @ (f - mu) / (len(f) - 1)
    eig = np.linalg.eigvals(sigma @ sigma_real).real.clip(min=0)
    return float(((mu - mu_real) ** 2).sum() + np.trace(sigma) + np.trace(sigma_real) - 2 * np.sqrt(eig).sum())


def test_summarise_scores_like_the_textbook():
    """FID, accuracy, tau and NLL of a setting from hand-made image records: FID by another route
    (`_fid_by_eigvals`) against the shipped real-digit statistics where they exist."""
    from coolsd.bench.report import summarise
    from coolsd.compare.metrics import load_real_stats

    stats_file = SHIPPED_CLASSIFIER / "real_stats.safetensors"
    if stats_file.is_file():
        mu_real, sigma_real, n_real = load_real_stats(stats_file)
    else:
        mu_real, sigma_real, n_real = np.zeros(128), np.eye(128), 1
    rng = np.random.default_rng(0)
    settings = [parse_spec("vanilla"), parse_spec("eagle-1")]
    records = []
    for index, setting in enumerate(settings):
        for seed in range(5):
            forwards = 16 if setting.rule is None else 4 + seed
            records.append({"setting_index": index, "cls": seed % 2, "seed": seed, "num_tokens": 16,
                            "target_forwards": forwards, "draft_forwards": 0 if setting.rule is None else forwards,
                            "wall_s": 3.0, "cpu_s": 1.0 + index, "draft_s": 0.1, "verify_s": 0.5, "other_s": 0.1,
                            "nll": 3.0 + seed / 10, "pred": [0, 1, 0, 0, 0][seed],
                            "features": (mu_real + rng.normal(size=128) * (1 + index)).tolist(),
                            "tokens_sha": f"{index}{seed}"})
    rows = summarise(records, settings, None, (mu_real, sigma_real, n_real), fid_bootstrap=3)
    for index, row in enumerate(rows):
        mine = records[5 * index : 5 * index + 5]
        assert row["n_images"] == 5 and row["n_real"] == n_real
        assert row["fid"] == pytest.approx(_fid_by_eigvals([r["features"] for r in mine], mu_real, sigma_real),
                                           rel=1e-6)  # N < D: rank-deficient, both routes round
        assert row["accuracy"] == 0.8  # seeds 0, 1, 2, 4 predicted right (classes 0, 1, 0, 0); seed 3 (class 1) not
        assert row["tau"] == pytest.approx(80 / sum(r["target_forwards"] for r in mine), rel=1e-12)
        assert row["nll"] == pytest.approx(3.2, rel=1e-12)
    assert rows[0]["tau"] == 1.0 and rows[1]["tau"] == pytest.approx(80 / 30)
    assert rows[1]["speedup"] == pytest.approx(0.5)  # 1 CPU s of vanilla per image against 2 (wall time equal)
    assert rows[1]["fid"] > rows[0]["fid"]  # features twice as spread out


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_command_end_to_end(scorer, tmp_path):
    """The default sweep (38 settings) on the tiny model writes every output and the README section.

    About 10 s on an idle 2-core CPU (no timed assert: the machine is shared)."""
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- bench:start -->\nold\n<!-- bench:end -->\n\nafter\n")
    assert main(scorer + ["--classes", "0,1", "--seeds", "2", "--out", str(tmp_path / "out"), "--readme",
                          str(readme), "--quiet", "--fid-bootstrap", "5"]) == 0
    out = tmp_path / "out"
    for name in ("results.jsonl", "items.jsonl", "results.md", "claims.json", "config.json", "pareto.html",
                 "pareto.png"):
        assert (out / name).stat().st_size > 0, name
    rows = _read_jsonl(out / "results.jsonl")
    by = {r["setting"]: r for r in rows}
    assert len(rows) == 38 and all(r["n_images"] == 4 for r in rows)  # (with the 6 no-drafter rows at W = 4)
    no_drafter = {"sjd window=4", "sjd reuse window=4", "cool-sd-jacobi delta=2 window=4",
                  "cool-sd-jacobi delta=4 window=4", "cool-sd-jacobi delta=8 window=4",
                  "lantern++-jacobi k=5 lam=5 window=4"}
    assert no_drafter <= set(by) and all(by[name]["draft_forwards"] == 0 for name in no_drafter)
    assert by["vanilla"]["tau"] == 1.0 and by["vanilla"]["speedup"] == 1.0 and by["vanilla"]["draft_forwards"] == 0
    # the per-setting numbers recomputed from the per-image records (items.jsonl, rounded to 6 digits)
    items = _read_jsonl(out / "items.jsonl")
    for r in rows:
        mine = [i for i in items if i["setting"] == r["setting"]]
        assert len(mine) == r["n_images"] == 4
        assert r["tau"] == pytest.approx(16 * 4 / sum(i["target_forwards"] for i in mine), rel=1e-12)
        assert r["accuracy"] == sum(i["pred"] == i["cls"] for i in mine) / 4
        assert r["nll"] == pytest.approx(np.mean([i["nll"] for i in mine]), rel=1e-5)
        assert 0 <= r["outside_share"] < 1 and r["speedup"] > 0 and r["seconds"] > 0 and np.isfinite(r["fid"])
        assert r["cpu_seconds"] > 0 and r["n_timed"] == 3
        assert r["speedup_stat"] == SPEEDUP_NAME and "speedup_median" not in r and "speedup_cpu" not in r
    warm = [r for r in items if r["warm_up"]]
    assert len(warm) == 38 and {(r["cls"], r["seed"]) for r in warm} == {(0, 0)}
    # the tiny drafter helps: every speculative setting needs fewer target forwards than tokens
    assert all(r["tau"] > 1 for r in rows if r["setting"] != "vanilla")
    assert by["cool-sd delta=2"]["rule_config"] == {"rule": "cool-sd", "delta": 2.0, "nu": 0.7, "mu": None,
                                                   "floor_at_one": True, "residual_kind": "optimal"}
    assert len(_read_jsonl(out / "items.jsonl")) == 38 * 4
    found = json.loads((out / "claims.json").read_text())
    assert {c["claim"] for c in found["claims"]} == {"cool_dominates_uniform", "cool_beats_lantern",
                                                   "gstar_improves_lantern"}
    assert all(c["verdict"] for c in found["claims"]) and len(found["targets"]) == 6
    config = json.loads((out / "config.json").read_text())
    limit = config["limit"]  # the limit table, with every run, and the path and precision that ran
    assert set(limit["paths"]) == {"eager", "fused"} and "| fused |" in (out / "results.md").read_text()
    assert config["execution_path"] == limit["execution_path"]
    assert f"path {config['execution_path']}" in (out / "results.md").read_text()
    assert "Where a round's time goes" in (out / "results.md").read_text()  # the loop's round beside the tool's
    text = readme.read_text()
    assert text.startswith("# x\n") and text.endswith("after\n") and "\nold\n" not in text
    assert "| cool-sd delta=2 |" in text and "pareto.png" in text and "python -m coolsd.bench --model tiny" in text
    assert SPEEDUP_NAME in text and "speed-up CPU time" not in text
    # --report-only remakes the report from results.jsonl alone (no decoding) and adds the notes
    before = (out / "results.md").read_text()
    (tmp_path / "notes.md").write_text("Hand-written notes.\n")
    assert main(["--report-only", "--out", str(out), "--readme", str(readme), "--notes", str(tmp_path / "notes.md"),
                 "--no-png"]) == 0
    assert (out / "results.md").read_text() == before
    assert "Hand-written notes." in readme.read_text() and readme.read_text().count("<!-- bench:start -->") == 1


def test_missing_stats_fail_clearly(scorer, tmp_path):
    args = scorer[:-1] + [str(tmp_path / "missing.safetensors"), "--only", "eagle", "--out", str(tmp_path)]
    with pytest.raises(SystemExit, match="real-image feature statistics not found"):
        main(args)
    with pytest.raises(SystemExit, match="no classifier"):
        main(["--model", "tiny", "--out", str(tmp_path)])


SPLIT_ARGS = ["--classes", "0,1,2", "--seeds", "2", "--lantern-k", "5", "--lantern-lam", "5", "--uniform-delta", "2",
              "--cool-delta", "1.1,4", "--cool-unclipped-delta", "", "--extra", "eagle-1@tree:shape=binary-2",
              "--no-png", "--quiet", "--fid-bootstrap", "5"]
EXACT = ("n_images", "tau", "target_forwards", "draft_forwards", "fid", "fid_std", "accuracy", "nll", "tokens_sha")


def test_two_process_split_matches_one_process(scorer, tmp_path):
    """torchrun --nproc_per_node 2 (gloo): each rank decodes half of the items; the merge equals one process."""
    assert main(scorer + SPLIT_ARGS + ["--out", str(tmp_path / "one")]) == 0
    env = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
           "coolsd.bench"] + scorer + SPLIT_ARGS + ["--out", str(tmp_path / "two")]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    one, two = _read_jsonl(tmp_path / "one" / "results.jsonl"), _read_jsonl(tmp_path / "two" / "results.jsonl")
    assert [r["setting"] for r in one] == [r["setting"] for r in two]
    for a, b in zip(one, two):
        assert {k: a[k] for k in EXACT} == {k: b[k] for k in EXACT}, a["setting"]
    items = _read_jsonl(tmp_path / "two" / "items.jsonl")
    assert {r["rank"] for r in items} == {0, 1}
    config = json.loads((tmp_path / "two" / "config.json").read_text())
    assert config["world"] == 2 and config["command"].startswith("torchrun --standalone --nproc_per_node 2 -m coolsd")


def test_token_scores_take_the_nll_untruncated_and_the_ambiguity_under_the_processed_p(tiny):
    """With top-k, a token outside the k most likely (a boundary a second numeric path may cross) still has a
    finite NLL: the NLL is under the untruncated p (same temperature), the top-1/entropy under the top-k p."""
    import dataclasses

    from coolsd.bench.runner import token_scores
    from coolsd.compare.metrics import ambiguity, token_nll, token_probs

    bundle = tiny
    base = dataclasses.replace(bundle.default_sampling, temperature=1.3, top_k=0, top_p=1.0)
    topk = dataclasses.replace(base, top_k=2)
    full = token_probs(bundle.target, base, 1, torch.zeros(bundle.num_tokens, dtype=torch.long))
    tokens = full.argmin(-1)  # the least likely code at each position: outside every top-2
    image = bundle.tokenizer.decode(tokens)
    scores = token_scores(bundle, topk, 1, tokens, image)
    assert math.isinf(token_nll(bundle.target, topk, 1, tokens))
    assert scores["nll"] == pytest.approx(token_nll(bundle.target, base, 1, tokens), rel=1e-9)
    assert scores["top1"] == pytest.approx(ambiguity(token_probs(bundle.target, topk, 1, tokens))["top1"], rel=1e-9)
    assert scores["top1"] > ambiguity(token_probs(bundle.target, base, 1, tokens))["top1"]


@pytest.mark.parametrize("bench", ["assets/bench", "assets/emoji/bench"])
def test_report_without_a_browser_skips_the_png_in_one_line(bench, tmp_path, monkeypatch, caplog):
    """On a machine set up by the README's command 1 alone kaleido finds no Chrome: the report still writes
    results.md, claims.json and pareto.html, and says in one line that pareto.png was skipped and why."""
    import plotly.graph_objects as go

    from coolsd.bench.cli import read_measurements, write_report

    def no_chrome(self, *args, **kwargs):
        raise RuntimeError("\n\nKaleido requires Google Chrome to be installed.\n\nEither download ...")

    monkeypatch.setattr(go.Figure, "write_image", no_chrome)
    rows, config = read_measurements(ROOT / bench)
    with caplog.at_level("WARNING", logger="coolsd.bench"):
        parts = write_report(tmp_path, rows, config, png=True)
    for name in ("results.md", "claims.json", "pareto.html"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert not (tmp_path / "pareto.png").exists() and parts["table"] in (tmp_path / "results.md").read_text()
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert lines[0].startswith("pareto.png skipped: Kaleido requires Google Chrome") and "--no-png" in lines[0]
    real = "emoji pictures" if "emoji" in bench else "digits"  # the figure's title names the model's real images
    assert f"real {real})" in (tmp_path / "pareto.html").read_text()
