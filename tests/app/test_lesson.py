"""The Race tab's line on when relaxation pays: every number it names is the race on show's, or its model's shipped
benchmark's at the very settings the race ran (named); none from other settings."""

from __future__ import annotations

import json

from coolsd.app import lesson
from coolsd.app.lesson import LEAD, BenchRun, bench_runs, lesson_markdown
from coolsd.app.race_view import RaceNumbers

SAMPLING = {"cfg_scale": 1.0, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
COOL = {"rule": "cool-sd", "delta": 2.0, "nu": 0.7, "mu": None, "floor_at_one": True, "residual_kind": "optimal"}
LANTERN = {"rule": "lantern++", "k": 10, "lam": 5.0, "residual_kind": "published"}


def race_stats(draft_len=3, finished=True, racers=("eagle-1", "lantern++", "cool-sd"), sampling=SAMPLING):
    """A race's stats JSON as the race streams it (settings, per-decoder numbers)."""
    numbers = {"eagle-1": ("Eagle-1 (lossless)", 2.2, 1.1), "lantern++": ("LANTERN++", 2.9, 1.3),
               "cool-sd": ("COOL-SD", 3.1, 1.41), "vanilla": ("vanilla AR", 1.0, 1.0)}
    keys = [*racers, "vanilla"]
    rules = {"eagle-1": {"rule": "eagle-1"}, "lantern++": LANTERN, "cool-sd": COOL}
    return {"model": "emoji (test)", "finished": finished,
            "settings": {"model": "emoji", "draft_len": draft_len, "drafting": "chain", "sampling": sampling,
                         "rules": {k: rules[k] for k in racers}},
            "decoders": {k: {"decoder": numbers[k][0], "mean_accepted_length": numbers[k][1],
                             "speedup": numbers[k][2], "finished": finished} for k in keys}}


def race_clause(stats: dict):
    """The race clause of a race's stats JSON, read back as the line reads it."""
    return lesson.race_clause(RaceNumbers.from_json(stats))


def bench_clause(name: str, runs: list[tuple[dict, list[dict]]], stats: dict):
    """The benchmark clause of benchmark runs ((config, rows) as the files hold them) and a race's stats JSON."""
    return lesson.bench_clause(name, [BenchRun.from_json(*run) for run in runs], RaceNumbers.from_json(stats))


def bench(draft_len=2, sampling=SAMPLING, top1=0.61):
    config = {"sampling": sampling}
    rows = [{"setting": "vanilla", "rule_config": None, "draft_len": 0, "tree": None, "tau": 1.0, "top1": top1},
            {"setting": "eagle-1", "rule_config": {"rule": "eagle-1"}, "draft_len": draft_len, "tree": None,
             "tau": 1.88, "n_images": 200},
            {"setting": "cool-sd d2", "rule_config": COOL, "draft_len": draft_len, "tree": None, "tau": 2.22,
             "n_images": 200},
            {"setting": "cool-sd d8", "rule_config": COOL | {"delta": 8.0}, "draft_len": draft_len, "tree": None,
             "tau": 9.9, "n_images": 200}]
    return config, rows


def test_the_race_clause_quotes_the_race_on_show():
    text = race_clause(race_stats())
    assert text == ("in the race on show (L = 3) COOL-SD (δ = 2) accepted τ 3.10 vs Eagle-1's 2.20 and ran at "
                    "1.41× vs 1.10× vanilla AR's speed")
    assert "(L = 3, so far)" in race_clause(race_stats(finished=False))
    assert race_clause(race_stats(racers=("eagle-1", "lantern++"))).startswith(
        "in the race on show (L = 3) LANTERN++ (k = 10, λ = 5) accepted τ 2.90 vs Eagle-1's 2.20")
    assert race_clause(race_stats(racers=("cool-sd",))) is None and race_clause({}) is None
    assert race_clause(race_stats(racers=("eagle-1",))) is None


def test_the_benchmark_is_quoted_only_at_the_races_own_settings():
    """The issue's case: a race at L = 3 under a benchmark run at L = 2 quotes no benchmark number."""
    assert bench_clause("emoji", [bench(draft_len=2)], race_stats(draft_len=3)) is None
    assert bench_clause("emoji", [bench(draft_len=3, sampling=SAMPLING | {"top_k": 5})], race_stats()) is None
    stats = race_stats()
    stats["settings"]["rules"]["cool-sd"] = COOL | {"nu": 0.5}
    assert bench_clause("emoji", [bench(draft_len=3)], stats) is None
    assert bench_clause("emoji", [bench(draft_len=3)], race_stats(racers=("eagle-1", "lantern++"))) is None
    assert bench_clause("emoji", [bench(draft_len=3)], race_stats()) == (
        "the shipped emoji benchmark at these settings (L = 3, 200 images a setting): τ 2.22 vs Eagle-1's 1.88, "
        "the target's top-1 probability 0.61 on its own samples")
    assert "top-1" not in bench_clause("emoji", [bench(draft_len=3, top1=None)], race_stats())


def write(folder, config, rows):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "results.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_the_line_reads_the_race_and_its_models_benchmark_folder(tmp_path):
    write(tmp_path / "a", *bench(draft_len=3))
    benches = {"emoji": ("emoji", tmp_path / "a"), "mnist": ("MNIST", tmp_path / "missing")}
    line = lesson_markdown(race_stats(), benches)
    assert line.startswith(LEAD + ": in the race on show (L = 3)") and "τ 2.22 vs Eagle-1's 1.88" in line
    assert "MNIST" not in line and line.endswith("How it works has the tables).")
    at_two = lesson_markdown(race_stats(draft_len=2), {"emoji": ("emoji", tmp_path / "a")})
    assert "benchmark" not in at_two and "1.88" not in at_two and at_two.endswith("vanilla AR's speed.")
    assert lesson_markdown(None, benches) == lesson_markdown({}, benches) == LEAD + "."
    assert bench_runs(tmp_path / "missing") == []


def sweep_file(breaks=64.0, broken=(None, None, None, None, None)):
    """A delta sweep as `coolsd.bench.delta_sweep.load` reads it (the rows and keys the clause reads); `broken`: the
    share called broken of vanilla AR, Eagle-1 and the three deltas (None: a model without real pictures)."""
    rows = [{"setting": "vanilla", "rule": None, "delta": None, "recognition": 0.885},
            {"setting": "eagle-1", "rule": "eagle-1", "delta": None, "recognition": 0.87},
            *({"setting": f"cool-sd delta={d:g}", "rule": "cool-sd", "delta": d, "recognition": r}
              for d, r in ((2.0, 0.88), (64.0, 0.70), (1024.0, 0.5625)))]
    return {"rows": [r | {"broken": b} for r, b in zip(rows, broken)], "breaks": {"picture": breaks}, "samples": 64}


def test_past_the_sweeps_break_the_line_names_what_pictures_cost():
    """COOL-SD at delta 1024 (the issue's faceless cat): the line adds the sweep's recognition there against vanilla
    AR's; below the break, with another relaxed racer or with no break, it adds nothing."""
    def cost_clause(stats, sweep):
        return lesson.cost_clause(RaceNumbers.from_json(stats), sweep)

    far = race_stats()
    far["settings"]["rules"]["cool-sd"] = COOL | {"delta": 1024.0}
    assert cost_clause(far, sweep_file()) == (
        "but δ = 1024 is past where the δ sweep says pictures break (δ ≥ 64): there COOL-SD's pictures were "
        "recognised 56 % of the time against vanilla AR's 89 % (64 samples a point; the Quality lab draws it)")
    between = race_stats()
    between["settings"]["rules"]["cool-sd"] = COOL | {"delta": 100.0}
    assert "(the swept δ nearest, 64) COOL-SD's pictures were recognised 70 %" in cost_clause(between, sweep_file())
    assert cost_clause(race_stats(), sweep_file()) is None  # delta 2
    assert cost_clause(far, sweep_file(breaks=None)) is None and cost_clause(far, None) is None
    assert cost_clause(race_stats(racers=("eagle-1", "lantern++")), sweep_file()) is None
    broken = sweep_file(broken=(0.14, 0.12, 0.15, 0.3, 0.39))  # a model with real pictures: the share called broken
    assert cost_clause(far, broken) == (
        "but δ = 1024 is past where the δ sweep says pictures break (δ ≥ 64): there COOL-SD's pictures were called "
        "broken 39 % of the time against vanilla AR's 14 %, and recognised 56 % against 89 % (64 samples a point; "
        "the Quality lab draws it)")


def test_the_line_reads_the_shipped_sweep_for_a_race_past_its_break():
    from coolsd.app import sweep_view

    sweep = sweep_view.load("emoji")
    if sweep is None or sweep_view.breaking_delta(sweep) is None:
        import pytest

        pytest.skip("no shipped emoji sweep with a breaking delta")
    far = race_stats()
    far["settings"]["rules"]["cool-sd"] = COOL | {"delta": sweep_view.reach(sweep)}
    line = lesson_markdown(far, {})
    vanilla = sweep_view.reference(sweep, None)["recognition"]
    assert f"past where the δ sweep says pictures break (δ ≥ {sweep_view.breaking_delta(sweep):g})" in line
    assert f"against vanilla AR's {round(100 * vanilla)} %" in line or f"{100 * vanilla:.0f} %" in line
    assert "pictures break" not in lesson_markdown(race_stats(), {})


def test_the_benchmark_clause_names_its_speed_ups_and_what_they_count():
    """The page and the docs state the same speed-ups for the same settings: the line quotes the benchmark's beside
    the race's, and says that the two clocks differ."""
    config, rows = bench(draft_len=3)
    rows[1]["speedup"], rows[2]["speedup"] = 0.87, 0.94
    text = bench_clause("emoji", [(config, rows)], race_stats())
    assert ("τ 2.22 vs Eagle-1's 1.88, speed-up 0.94× vs 0.87× (whole pictures' CPU time; the race counts each "
            "racer's rounds' compute time)") in text
