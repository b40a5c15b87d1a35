"""Every figure the page's sentences quote is read from the data beside them, on every shipped model: the Race
tab's lesson line (the race on show, and its model's benchmark only at the race's own settings), the Cost tab
(the recorded race on show until the session races), the Quality lab (which decoders were faster, and at which
settings the benchmark ran), the Microscope on the recorded race (its own rounds, no warning) and, in a same-noise
race, the line under each picture (how many of its tokens are vanilla AR's). The models are
loaded as `app.py` loads them; names and numbers are read from them and their shipped files, never typed here."""

from __future__ import annotations

import dataclasses
import re

import pytest

from coolsd.app import lab as lab_ui
from coolsd.app.context import open_context
from coolsd.app.cost import CostPanel
from coolsd.app.lesson import SHIPPED_BENCHES, bench_runs, lesson_markdown, matching_rows
from coolsd.app.microscope import MicroscopePanel
from coolsd.app.recorded import Recordings
from coolsd.bench import shipped
from coolsd.compare import cost
from coolsd.compare.microscope import recorded
from coolsd.decoding.drafting import Chain
from coolsd.models import registry
from coolsd.util.format import number

SHIPPED = [key for key in ("emoji", "mnist") if registry.MODELS[key].present()]
pytestmark = [pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*"),
              pytest.mark.skipif(not SHIPPED, reason="no shipped model here")]


@pytest.fixture(scope="module", params=SHIPPED)
def shown(request):
    """(Context, Recordings, (trace, status line, final frame) of its recorded race) of one shipped model."""
    ctx = open_context(request.param, others=[])
    recordings = Recordings(ctx)
    found = recordings.of(ctx)
    if found is None:
        pytest.skip(f"no recorded race of {request.param} at the current defaults")
    return ctx, recordings, found


def figures(text: str) -> list[str]:
    """The decimal figures a text quotes ("3.10", "0.61"), in order."""
    return re.findall(r"\d+\.\d+", text)


def test_the_lesson_quotes_the_race_on_show_and_the_benchmark_only_at_its_settings(shown):
    ctx, _, (trace, _, frame) = shown
    stats = frame.stats
    line = lesson_markdown(stats)
    decoders, settings = stats["decoders"], stats["settings"]
    race = {number(d[k]) for d in decoders.values() for k in ("mean_accepted_length", "speedup")}
    rows = matching_rows(bench_runs(SHIPPED_BENCHES[ctx.model_key][1]), trace.settings)
    same = [r for r in rows if r.rule_config in [None, *settings["rules"].values()]]
    bench = {number(r.tau) for r in same} | {number(r.top1) for r in same} | {number(r.speedup) for r in same}
    assert f"in the race on show (L = {settings['draft_len']})" in line, line
    assert figures(line) and set(figures(line)) <= race | bench, (line, race, bench)
    assert ("benchmark at these settings" in line) == any(r.rule_config for r in same), line
    assert f"L = {settings['draft_len']}" in line and not re.search(rf"L = (?!{settings['draft_len']}\b)\d", line)


def test_the_cost_tab_uses_the_recorded_race_on_show(shown):
    ctx, recordings, (trace, _, _) = shown
    panel = CostPanel(ctx, recordings)
    _, table, payload = panel.compare(None, model=ctx.model_key)
    assert payload["race"] == "recorded" and "No race yet" not in table and "recorded one" in table, table
    racers = trace.replay(len(trace))
    want = cost.compare_racers(racers, panel.costs(ctx), trace.settings.draft_len, racers[-1])
    assert [r["key"] for r in payload["racers"]] == [k for k, _ in trace.racers]
    for got, expected in zip(payload["racers"], want):
        assert got["measured_speedup"] == pytest.approx(expected["measured_speedup"], rel=1e-12)
        row = next(line for line in table.splitlines() if line.startswith(f"| {got['decoder']} |"))
        assert row.endswith(f"| {number(expected['measured_speedup'], '.2f', '×')} |"), row
    gap = next(line for line in table.splitlines() if line.startswith("Measured ÷ predicted: "))
    quoted = gap.removeprefix("Measured ÷ predicted: ").split(". The prediction")[0].split("; ")
    assert [(part.rsplit(" ", 1)[0], float(part.rsplit(" ", 1)[1])) for part in quoted] == [
        (r["decoder"].split(" (")[0], round(r["measured_speedup"] / r["predicted_speedup"], 2)) for r in want[:-1]], gap
    assert CostPanel(ctx).compare(None, model=ctx.model_key)[2]["race"] is None  # (no recorded race handed in)


def test_the_lab_says_which_decoders_were_faster_and_at_which_settings_the_benchmark_ran(shown):
    ctx = shown[0]
    panel = lab_ui.LabPanel(ctx)
    assert "exact and faster" not in lab_ui.INTRO
    *_, text, _, payload = list(panel.grid("cool-sd", 2.0, 1, 0, model=ctx.model_key))[-1]
    line = next(line for line in text.splitlines() if line.startswith("In this run "))
    for d in payload["decoders"]:
        if d["decoder"] == "vanilla":
            continue
        shown_speed = round(d["speedup"], 2)
        word = "faster than" if shown_speed > 1 else "slower than" if shown_speed < 1 else "as fast as"
        assert f"{d['label']} was {word} vanilla AR ({shown_speed:.2f}×)" in line, (line, d)
    rows = shipped.bench_rows(lab_ui.BENCHES[ctx.model.kind])
    lengths = {r["draft_len"] for r in rows if shipped.drafts_by_chain(r)}  # (a Jacobi window is no draft length)
    same = lengths == {Chain.draft_len} and \
        shipped.bench_sampling(lab_ui.BENCHES[ctx.model.kind]) == dataclasses.asdict(ctx.model.default_sampling)
    said = next(line for line in text.splitlines() if line.startswith("The benchmark's points were measured at"))
    assert ("this run's draft length" in said) == same, said
    assert all(f"L = {n}" in said for n in lengths), said


def test_the_microscope_shows_the_recorded_race_without_a_warning(shown):
    """Whatever machine recorded it, every racer's rounds in the Microscope are the recorded race's own."""
    ctx, recordings, (trace, _, _) = shown
    panel = MicroscopePanel(ctx, recordings)
    for key, _ in trace.racers:
        out = panel.opened(key, 0, None, {}, model=ctx.model_key)
        header, payload = out[6], out[7]
        stored = recorded(trace, key)
        assert "⚠" not in header and "did not commit" not in header, header
        assert payload["rounds"] == len(stored) and payload["token"] == stored[payload["round"]].tokens[-1].item()


def test_the_line_under_each_recorded_picture_is_what_the_classifier_reads_in_it(shown):
    """The recorded race's captions: the model's own classifier run again on each racer's final tokens (decoded
    alone here, in one batch by the page: probabilities to 1e-4, shown as whole percents)."""
    from coolsd.app.judge import caption
    from coolsd.app.racers import slot_keys
    from coolsd.compare.recognise import recognise

    ctx, _, (trace, _, frame) = shown
    asked = ctx.judge.asked(trace.settings.condition)
    assert asked is not None
    for slot, key in enumerate(slot_keys([k for k, _ in trace.racers[:-1]])):
        if key is None:
            assert frame.captions[slot] == ""
            continue
        racer = next(r for r in trace.replay(len(trace)) if r.key == key)
        (reading,) = recognise(ctx.judge.classifier, ctx.model.tokenizer.decode(racer.tokens)[None])
        seen = frame.stats["decoders"][key]["recognised"]
        assert seen["class"] == ctx.model.conditions.classes[reading.cls] and seen["class_ok"] == (
            reading.condition(len(ctx.model.style_names)) // max(len(ctx.model.style_names), 1)
            == asked // max(len(ctx.model.style_names), 1))
        assert seen["class_p"] == pytest.approx(reading.cls_p, rel=1e-4)
        assert frame.captions[slot] == caption(ctx.judge, seen) and f"{seen['class_p']:.0%}" in frame.captions[slot]


def test_the_sweep_words_quote_the_sweep_file(shown):
    """The Lab's sweep text and the tour's Quality line: each number read from the model's sweep file."""
    from coolsd.app import sweep_view, tour

    ctx = shown[0]
    sweep = sweep_view.load(ctx.model.kind)
    if sweep is None:
        pytest.skip(f"no delta sweep of {ctx.model_key} yet (python -m coolsd.bench.delta_sweep)")
    _, text, _ = sweep_view.SweepPanel(ctx).view(ctx.model_key, 2.0)
    near = sweep_view.nearest(sweep, 2.0)
    assert sweep_view.range_sentence(sweep) in text and f"{sweep['samples']} samples a point" in text
    assert f"τ {number(near['tau'], '.2f')}, speed-up {number(near['speedup'], '.2f')}×" in text
    assert f"FID {number(near['fid'], '.1f')} ± {number(near['fid_std'], '.1f')}" in text
    cut = sweep["breaks"]["picture"]
    if cut is not None:
        assert f"From δ = {cut:g} on" in text
    assert tour.sweep_note(ctx).endswith(f"δ = {tour.quality_delta(ctx):g}.")
    assert tour.quality_delta(ctx) == (cut or sweep_view.reach(sweep))


def test_under_same_noise_the_line_under_each_picture_counts_the_tokens_that_are_vanilla_ars(shown):
    """A same-noise race of the model (Eagle-1, COOL-SD, SJD): the "same as vanilla AR at k / T tokens" under each
    racer's picture, k counted here from the trace's own events; Eagle-1 and SJD read T / T."""
    from coolsd.app.race import LiveRaces, RaceStream
    from coolsd.app.racers import slot_keys
    from coolsd.app.settings import RaceSettings

    ctx, n = shown[0], shown[0].model.num_tokens
    racers = ["eagle-1", "cool-sd", "sjd"]
    row = RaceSettings.defaults(ctx).as_dict() | {"noise": "same", "racers": racers}
    last = list(RaceStream(ctx, LiveRaces()).race(**row))[-1]
    tokens = {r.key: r.tokens for r in last.trace.replay(len(last.trace))}
    for slot, key in enumerate(slot_keys(racers)):
        if key is None:
            continue
        said = re.findall(r"same as vanilla AR at (\d+) / (\d+) tokens", last.captions[slot])
        if key == "vanilla":
            assert not said
            continue
        same = int((tokens[key] == tokens["vanilla"]).sum())
        assert said == [(str(same), str(n))], (key, last.captions[slot])
        assert key == "cool-sd" or same == n
    line = lesson_markdown(last.stats)  # the benchmark ran one stream: not these settings
    assert f"in the race on show (L = {row['draft_len']}, same noise)" in line and "benchmark" not in line, line
    assert not matching_rows(bench_runs(SHIPPED_BENCHES[ctx.model_key][1]), last.trace.settings)
