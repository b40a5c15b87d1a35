"""The guided tour (issue 17 part 4) through the handlers it wires, on the tiny model (no browser needed).

A step's Run is a chain of events (set the controls, run the race or the lab, reveal); the tests walk that chain
in the built Blocks, in order, feeding each event the values the previous one produced, as the page does. They check
that every step sets what its text claims (read back from the settings the run itself reports), that the reveal puts
the run's measured value (recomputed from the run's counts) beside the guess, and that the step texts name no number
beyond the settings they set.
"""

from __future__ import annotations

import re

import gradio as gr
import pytest
from demo_app import tiny_demo

from coolsd.app import lab as lab_ui
from coolsd.app import tour
from coolsd.app.settings import RaceSettings

pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")
APP = tiny_demo()
RACE_STEPS = [j for j, s in enumerate(tour.STEPS) if s.lab is None]
LAB_STEPS = [j for j, s in enumerate(tour.STEPS) if s.lab is not None]
# a symbol the texts use -> the race control / the lab control it names
RACE_SYMBOLS = {"δ": "delta", "ν": "nu", "λ": "lantern_lambda", "L": "draft_len"}
LAB_SYMBOLS = {"δ": "relaxation", "λ": "relaxation"}
# decoder names a question may use (a longer name first: "COOL-SD, no drafter" is not COOL-SD)
DECODERS = {"COOL-SD, no drafter": "cool-sd-jacobi", "Eagle-1": "eagle-1", "LANTERN++": "lantern++",
            "COOL-SD": "cool-sd", "SJD": "sjd"}
CLAIM = re.compile(r"(δ|ν|λ|L) = (\d+(?:\.\d+)?)")


def _chain(button) -> list:
    """The BlockFunctions a click on `button` runs: the click's, then each `.then` after it, in order."""
    fns = list(APP.blocks.fns.values())
    chain = [next(f for f in fns if (button._id, "click") in f.targets)]
    while (after := [f for f in fns if f.trigger_after == chain[-1]._id]):
        (nxt,) = after
        chain.append(nxt)
    return chain


def _call(fn, values: dict) -> dict:
    """Run one BlockFunction on the current component values (by block id); its outputs (the last yield)."""
    result = fn.fn(*(values[c._id] for c in fn.inputs))
    if hasattr(result, "__next__"):  # a streaming handler: what the page shows at the end
        result = list(result)[-1]
    result = result if isinstance(result, tuple | list) and len(fn.outputs) > 1 else (result,)
    assert len(result) == len(fn.outputs)
    return {c._id: v for c, v in zip(fn.outputs, result) if v != gr.skip()}


def _run_step(j: int, guess, lab_samples: int = 1) -> tuple[dict, str, dict]:
    """Press step j's Run: (the values the controls were set to (name -> value, "tab": the tab opened), the
    reveal, the run's stats JSON)."""
    names = {c._id: n for n, c in APP.page.controls.settings.items()}
    lab = APP.page.lab
    names |= {c._id: f"lab.{n}" for n, c in lab.controls.items()}
    values = {c._id: c.value for c in (*APP.page.controls.inputs, *lab.controls.values())}
    values[lab.controls["samples"]._id] = lab_samples  # the visitor's lab size (the tour does not set it)
    values[_by_id(f"tour-guess-{j}")._id] = guess
    setup, runner, reveal = _chain(_by_id(f"tour-run-{j}"))
    changed = _call(setup, values)
    (tabs,) = [v for v in changed.values() if isinstance(v, gr.Tabs)]
    values |= changed
    values |= _call(runner, values)
    shown = _call(reveal, values)[_by_id(f"tour-result-{j}")._id]
    stats = values[reveal.inputs[1]._id]
    set_to = {names[i]: v for i, v in changed.items() if i in names} | {"tab": tabs.selected}
    return set_to, shown, stats


def _by_id(elem_id: str):
    """The built component with this elem_id."""
    (c,) = [c for c in APP.blocks.blocks.values() if getattr(c, "elem_id", None) == elem_id]
    return c


def claims(step: tour.Step) -> dict[str, float]:
    """The settings a step's text and question state ("δ = 3" -> {"δ": 3.0}), plus the default draft length."""
    said = step.text + " " + step.question
    found = {symbol: float(value) for symbol, value in CLAIM.findall(said)}
    if (default := re.search(r"draft length, (\d+) by default", said)):
        found["L"] = float(default.group(1))
    return found


@pytest.mark.parametrize("j", range(len(tour.STEPS)))
def test_every_step_sets_the_controls_its_text_claims_and_the_run_uses_them(j):
    step = tour.STEPS[j]
    set_to, shown, stats = _run_step(j, 1.5)
    defaults = RaceSettings.defaults(APP.ctx).as_dict()
    assert set_to.pop("tab") == ("race" if step.lab is None else "lab")  # the tab to watch is opened
    race_values = {n: v for n, v in set_to.items() if not n.startswith("lab.")}
    assert race_values == defaults | (step.race or {})  # every other race control back to its default
    named = mentions(step.question)
    assert named, step.question  # every challenge names the decoder it asks about
    if step.lab is None:
        for symbol, value in claims(step).items():
            assert race_values[RACE_SYMBOLS[symbol]] == value, (step.title, symbol)
        assert set(named) <= set(race_values["racers"])
        run = stats["settings"]  # what the race itself ran with
        assert run["draft_len"] == race_values["draft_len"] and set(named) <= set(run["racers"])
        if "cool-sd" in run["racers"]:
            cool = run["rules"]["cool-sd"]
            assert (cool["delta"], cool["nu"]) == (race_values["delta"], race_values["nu"])
    else:
        lab = {n.removeprefix("lab."): v for n, v in set_to.items() if n.startswith("lab.")}
        assert lab == step.lab and named == [lab["rule"]]
        for symbol, value in claims(step).items():
            assert lab[LAB_SYMBOLS[symbol]] == value, (step.title, symbol)
        assert stats["finished"] and {r["decoder"] for r in stats["decoders"]} >= {"chosen", "twin"}
        assert shown.startswith("Your guess: **1.5%**")


@pytest.mark.parametrize("j", RACE_STEPS)
def test_the_reveal_puts_the_runs_measured_value_beside_the_guess(j):
    step = tour.STEPS[j]
    _, shown, stats = _run_step(j, 2.25)
    key = key_first(step)
    # a question may name a second decoder "shown beside it" (the Look-alikes step): its value follows
    beside = [key for name, key in DECODERS.items() if f"{name}'s" in step.question and key != key_first(step)]
    vanilla = stats["decoders"]["vanilla"]
    parts = []
    for k in (key, *beside):
        d = stats["decoders"][k]
        if "τ" in step.question:  # recomputed from the run's counts
            value = d["tokens"] / d["target_forwards"]
        else:
            assert "speed-up" in step.question
            value = (d["tokens"] / d["compute_seconds"]) / (vanilla["tokens"] / vanilla["compute_seconds"])
        parts.append(f"{d['decoder']}: **{value:.2f}**")
    assert shown == f"Your guess: **2.25**. Measured just now: {'; '.join(parts)}."


def key_first(step) -> str:
    """The decoder a question starts with (the one the guess is about)."""
    return next(key for name, key in DECODERS.items() if step.question.startswith(name))


def mentions(text: str) -> list[str]:
    """The decoders a text names, a longer name hiding a shorter one inside it."""
    found = []
    for name, key in DECODERS.items():
        if name in text:
            found.append(key)
            text = text.replace(name, "")
    return found


def test_the_reveal_reads_the_payload_and_says_when_nothing_is_measured():
    step = tour.STEPS[RACE_STEPS[0]]
    payload = {"finished": True, "decoders": {"eagle-1": {"decoder": "E", "mean_accepted_length": 12.345}}}
    assert tour.reveal_markdown(step, 3, payload) == "Your guess: **3**. Measured just now: E: **12.35**."
    assert "Nothing measured yet" in tour.reveal_markdown(step, None, {})
    assert tour.reveal_markdown(step, "", {}).startswith("No guess given.")
    with pytest.raises(gr.Error, match="your guess"):
        tour.reveal_markdown(step, "many", payload)
    lab_step = tour.STEPS[LAB_STEPS[0]]  # the tiny model has no digit classifier: said so, no number invented
    _, shown, stats = _run_step(LAB_STEPS[0], 50)
    assert all(r.get("accuracy") is None for r in stats["decoders"])
    assert shown == "Your guess: **50%**. " + tour.reveal_markdown(lab_step, None, stats).split(". ", 1)[1]
    assert "does not measure it" in shown and not re.search(r"\d", shown.removeprefix("Your guess: **50%**."))


def _allowed(step: tour.Step) -> set[float]:
    """The numbers a step may name: the settings it sets, the race defaults it names, and 1 (the lossless ω_i = 1,
    min(1, ·), the L + 1 tokens a round verifies): nothing a run measures."""
    values = [*(step.race or {}).values(), *(step.lab or {}).values(), RaceSettings.defaults(APP.ctx).draft_len, 1]
    return {float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)}


def _step_texts(block) -> list[str]:
    """Every Markdown text and label inside a built layout block (the page's words for that step)."""
    texts = [t for t in (getattr(block, "value", None), getattr(block, "label", None)) if isinstance(t, str)]
    for child in getattr(block, "children", []):
        texts += _step_texts(child)
    return texts


def test_the_step_texts_name_no_number_the_app_does_not_set():
    for j, step in enumerate(tour.STEPS):
        built = _by_id(f"tour-step-{j}")
        words = [built.label, *_step_texts(built)]
        assert any(step.question in w for w in words) and any(step.text in w for w in words)
        numbers = [float(n) for n in re.findall(r"\d+(?:\.\d+)?", " ".join(words))]
        assert set(numbers) <= _allowed(step), (j, step.title, sorted(set(numbers) - _allowed(step)))
    planted = tour.Step("x", "Eagle-1 is 2.4× faster here.", "Eagle-1's τ?", tour.STEPS[0].answer)
    assert {2.4} - _allowed(planted)  # the scan would catch a quoted measurement


def test_each_step_but_the_last_leads_to_the_next():
    walkthrough = _by_id("tour-steps")
    for j in range(len(tour.STEPS) - 1):
        (go,) = _chain(_by_id(f"tour-next-{j}"))
        assert [c._id for c in go.outputs] == [walkthrough._id] and go.fn().selected == j + 1
        assert tour.STEPS[j + 1].title in _by_id(f"tour-next-{j}").value
    assert not [c for c in APP.blocks.blocks.values() if getattr(c, "elem_id", None) == f"tour-next-{j + 1}"]


def test_lab_steps_leave_the_visitors_lab_size_alone():
    for j in LAB_STEPS:
        assert "samples" not in tour.STEPS[j].lab and "seed" not in tour.STEPS[j].lab
        assert set(tour.STEPS[j].lab) <= set(lab_ui.lab_specs())
