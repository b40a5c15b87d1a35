"""The Race tab's line on when relaxation pays: numbers read from benchmark results, none invented."""

from __future__ import annotations

import json

from coolsd.app.lesson import LEAD, lesson_markdown, model_clause, read_rows


def rows(top1=0.61, eagle=2.2, cool=3.1):
    return [{"setting": "vanilla", "rule_config": None, "tree": None, "tau": 1.0, "top1": top1},
            {"setting": "eagle-1 L=2", "rule_config": {"rule": "eagle-1"}, "tree": None, "tau": eagle},
            {"setting": "cool-sd", "rule_config": {"rule": "cool-sd", "delta": 2.0, "nu": 0.7, "floor_at_one": True},
             "tree": None, "tau": cool},
            {"setting": "cool-sd d8", "rule_config": {"rule": "cool-sd", "delta": 8.0, "nu": 0.7, "floor_at_one": True},
             "tree": None, "tau": 9.9}]


def test_a_clause_names_the_measured_top1_and_both_taus():
    text = model_clause("emoji", rows(), 2.0)
    assert text == ("on emoji (target top-1 probability 0.61 on its own samples) COOL-SD δ = 2 accepts τ 3.10 "
                    "vs Eagle-1's 2.20")
    assert "9.90" in model_clause("emoji", rows(), 8.0)


def test_older_benchmarks_without_top1_and_missing_rows():
    old = [r | {"top1": None} if r["setting"] == "vanilla" else r for r in rows()]
    assert model_clause("MNIST", old, 2.0) == "on MNIST COOL-SD δ = 2 accepts τ 3.10 vs Eagle-1's 2.20"
    assert model_clause("MNIST", rows()[:2], 2.0) is None  # no COOL-SD row: nothing said
    assert model_clause("MNIST", rows(), 4.0) is None


def test_the_line_reads_each_folder_and_skips_missing_ones(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "results.jsonl").write_text("\n".join(json.dumps(r) for r in rows(0.5, 2.0, 3.0)) + "\n")
    assert len(read_rows(tmp_path / "a")) == 4 and read_rows(tmp_path / "missing") == []
    line = lesson_markdown((("emoji", tmp_path / "a", 2.0), ("MNIST", tmp_path / "missing", 2.0)))
    assert line.startswith(LEAD) and "0.50" in line and "τ 3.00 vs Eagle-1's 2.00" in line and "MNIST" not in line
    assert lesson_markdown((("MNIST", tmp_path / "missing", 2.0),)) == LEAD + "."


def test_the_top1_may_come_from_a_later_run_beside_the_benchmark(tmp_path):
    """The main benchmark ran before the top-1 was recorded; a later run in its sjd/ subfolder recorded it: the line
    quotes that run's vanilla top-1 and still the main run's taus."""
    old = [r | {"top1": None} for r in rows()]
    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in old))
    (tmp_path / "sjd").mkdir()
    (tmp_path / "sjd" / "config.json").write_text("{}")
    later = [{"setting": "vanilla", "rule_config": None, "tree": None, "tau": 1.0, "top1": 0.95},
             {"setting": "eagle-1", "rule_config": {"rule": "eagle-1"}, "tree": None, "tau": 9.0}]
    (tmp_path / "sjd" / "results.jsonl").write_text("\n".join(json.dumps(r) for r in later))
    clause = model_clause("emoji", read_rows(tmp_path), 2.0)
    assert "top-1 probability 0.95" in clause and "Eagle-1's 2.20" in clause, clause
