"""The guided tour: each step (`STEPS`) sets the controls, asks for a guess and, on Run, shows beside it the value
the race (or lab) it runs measured: the texts name no number. `build` lays it out, `wire` connects it to the panels."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter

import gradio as gr

from coolsd.app import sweep_view
from coolsd.app.context import Context, user_errors
from coolsd.app.race_view import DecoderNumbers, RaceNumbers
from coolsd.app.settings import DELTA_TOP, RaceSettings
from coolsd.decoding.drafting import Chain
from coolsd.util.checks import check_number

ID = "tour"
LATEX = [{"left": "$", "right": "$", "display": False}]


@dataclass(frozen=True)
class Step:
    """One stop. answer: (stats JSON) -> [(label, value)]; race / lab: control changes (lab None: a race step; other
    race controls reset); unit "%": x100; lab_for / note: (picked Context) -> its lab changes / a markdown line."""

    title: str
    text: str
    question: str
    answer: Callable[[dict], list[tuple[str, float | None]]]
    race: dict | None = field(default_factory=dict)
    lab: dict | None = None
    unit: str = ""
    lab_for: Callable[[Context], dict] | None = None
    note: Callable[[Context], str] | None = None

    def lab_values(self, ctx: Context) -> dict | None:
        return self.lab_for(ctx) if self.lab_for is not None else self.lab


tau, speedup = attrgetter("mean_accepted_length"), attrgetter("speedup")  # of a racer's DecoderNumbers


def _race(stat: Callable[[DecoderNumbers], float | None], *keys: str) -> Callable[[dict], list]:
    """The answer of a race step: (label, stat) of racers `keys` from the race's stats JSON ((key, None) if absent)."""
    def answer(payload: dict):
        decoders = RaceNumbers.from_json(payload).decoders
        return [(decoders[key].decoder, stat(decoders[key])) if key in decoders else (key, None) for key in keys]
    return answer


def _lab(stat: str, keys: tuple[str, ...] = ("chosen", "twin")) -> Callable[[dict], list[tuple[str, float | None]]]:
    def answer(payload: dict):
        rows = (payload or {}).get("decoders") or []
        return [(r["label"], r.get(stat)) for r in rows if r.get("decoder") in keys]
    return answer


STEPS = [
    Step("A round",
         f"The drafter proposes L tokens (the draft length, {Chain.draft_len} by default), the target checks "
         "all of them in **one** forward; the round keeps the drafts up to the first rejection and adds one token of "
         "the target's own. Watch the **Race** tab's images fill in, then open the **Microscope** tab: it shows one "
         "round, each draft's $a_i$ and the $u_i$ drawn.",
         "Eagle-1's mean accepted length τ (tokens per target forward) on this image?",
         _race(tau, "eagle-1"), race={"racers": ["eagle-1"]}),
    Step("Lossless",
         "Eagle-1 keeps a draft with probability $\\min(1, p/q)$ and resamples from $[p-q]_+$: its image follows the "
         "target's distribution exactly. Watch the **speed-up vs AR** column of the Race tab's table: it divides "
         "tokens per compute second by vanilla AR's in the same race.",
         "Eagle-1's speed-up over vanilla AR on this machine?",
         _race(speedup, "eagle-1"), race={"racers": ["eagle-1"]}),
    Step("No drafter",
         "Speculative Jacobi Decoding (SJD) is a racer that needs no training: there is no drafter, the target "
         "drafts for itself. Each iteration guesses a window of W tokens (the **SJD window** setting), each drawn from "
         "the target's own distribution for that position as the previous iteration computed it, checks them all in "
         "**one** forward with Eagle-1's lossless test, and keeps the rows it just computed as the next guesses. "
         "Watch the SJD panel beside Eagle-1's: the same exact test, drafts that cost nothing.",
         "SJD's mean accepted length τ (tokens per target forward) on this image?",
         _race(tau, "sjd"), race={"racers": ["eagle-1", "sjd"]}),
    Step("Relax δ",
         "COOL-SD multiplies the ratio by $\\omega_i$: $a_i = \\min(1, \\omega_i p/q)$. With ν = 0 every depth gets "
         "$\\omega_i = δ$ (uniform relaxation). Watch the **acceptance per draft position** plot: COOL-SD's line "
         "against Eagle-1's.",
         "COOL-SD's τ at δ = 3, ν = 0?",
         _race(tau, "cool-sd"), race={"racers": ["eagle-1", "cool-sd"], "delta": 3.0, "nu": 0.0}),
    Step("Anneal ν",
         "Now $\\omega_i = δ e^{-ν i - μ}$ falls along the round (floored at 1): generous for the first drafts, strict "
         "for the late ones. Watch the dashed ω line on the acceptance plot and the **Accepted length per round** "
         "plot.",
         "COOL-SD's τ at δ = 3, ν = 0.7 (compare with your answer to the previous step)?",
         _race(tau, "cool-sd"), race={"racers": ["eagle-1", "cool-sd"], "delta": 3.0, "nu": 0.7}),
    Step("Look-alikes",
         "Relaxation pays only where the target hesitates. An image model spreads its probability over look-alike "
         "codes (many almost identical ways to draw an edge); a draft that picks a look-alike of the target's "
         "favourite fails Eagle-1's test and passes a relaxed one. The emoji target here passes each code it means "
         "through a channel to its look-alikes, as such a model hesitates; a target sure of one code at every "
         "position (the first emoji target, which memorised its pictures) leaves nothing to relax. The line under "
         "the images gives the shipped models' benchmark; watch the **τ** column here.",
         "COOL-SD's τ at δ = 2 (Eagle-1's is shown beside it)?",
         _race(tau, "cool-sd", "eagle-1"),
         race={"racers": ["eagle-1", "cool-sd"], "delta": 2.0, "nu": 0.7}),
    Step("Longer drafts",
         "Relaxation's lead grows with the draft length. Where Eagle-1's test rejects a look-alike the round ends; "
         "a relaxed test passes it, so the next draft gets tested at all: the gains multiply along the chain. This "
         f"step races with L = 4 (the default draft length is {Chain.draft_len}): compare both τ with the "
         "previous step's. Watch the **speed-up vs AR** column too: each extra draft costs a drafter step, so on a "
         "CPU a longer round is not always a faster one.",
         "COOL-SD's τ at δ = 2 and L = 4 (Eagle-1's is shown beside it)?",
         _race(tau, "cool-sd", "eagle-1"),
         race={"racers": ["eagle-1", "cool-sd"], "delta": 2.0, "nu": 0.7, "draft_len": 4}),
    Step("Relax without a drafter",
         "Relaxation does not need a trained drafter. **COOL-SD, no drafter** puts COOL-SD's relaxed test on SJD's "
         "drafts: the target drafts a window for itself as in SJD, and each position j of the window gets "
         "$a_j = \\min(1, \\omega_j p/q)$ with $\\omega_j$ over the window's depths (floored at 1) and the optimal "
         "residual, the very maths of a chain round at depth j. Watch the **τ** and **speed-up vs AR** columns: "
         "SJD's panel and this one draft the same way, only the test differs.",
         "COOL-SD, no drafter: its τ at δ = 2 (SJD's is shown beside it)?",
         _race(tau, "cool-sd-jacobi", "sjd"),
         race={"racers": ["sjd", "cool-sd-jacobi"], "delta": 2.0, "nu": 0.7}),
    Step("Quality",
         "Relaxation buys speed with fidelity. The **Quality lab** tab opens on a precomputed sweep of COOL-SD's δ on "
         "this model: τ, speed-up, FID, how often the model's own classifier recognises the class asked for, on "
         "emoji how often a picture is unlike its real one (called broken), and the target's NLL, against δ, with "
         "vanilla AR's spread as a grey band. The line below says from which δ "
         "pictures break here; this step runs the lab there: the same samples, each of another class, with vanilla "
         "AR, Eagle-1 and COOL-SD, the classifier judging each (the digit, or the emoji). Watch the lab's grid and "
         "its accuracy column: few samples, so compare the columns rather than trust one number.",
         "COOL-SD's class accuracy at that δ, in %?",
         _lab("accuracy"), race=None, lab={"rule": "cool-sd", "relaxation": DELTA_TOP}, unit="%",
         lab_for=lambda ctx: {"rule": "cool-sd", "relaxation": quality_delta(ctx)}, note=lambda ctx: sweep_note(ctx)),
    Step("Why G*",
         "After a rejection a relaxed rule must not resample from $[p-q]_+$: $G^* = \\mathrm{Norm}([p - q\\,a]_+)$ is "
         "the residual that makes each step's output closest to $p$. LANTERN++ as published uses "
         "$[p - q']_+$; the lab runs it beside the same acceptance with $G^*$. Watch the lab's two LANTERN++ columns.",
         "Class accuracy of LANTERN++ with the G* residual at λ = 20, in %?",
         _lab("accuracy"), race=None, lab={"rule": "lantern++", "relaxation": 20.0}, unit="%"),
    Step("Cost",
         "A round costs L drafter steps and one target forward on L + 1 tokens; it commits τ tokens on average. "
         "On a CPU the target's forward grows with its tokens, so a long accepted run pays less than it would on a "
         "memory-bound GPU. Watch the table's **compute s** column: COOL-SD at δ = 2 against Eagle-1 and vanilla AR.",
         "COOL-SD's speed-up over vanilla AR at δ = 2?",
         _race(speedup, "cool-sd"), race={"racers": ["eagle-1", "cool-sd"], "delta": 2.0}),
]


def quality_delta(ctx: Context) -> float:
    """The Quality step's δ on `ctx`'s model: where its sweep says pictures break, else its largest, else DELTA_TOP."""
    sweep = sweep_view.load(ctx.model.kind)
    return sweep_view.breaking_delta(sweep) or sweep_view.reach(sweep) or DELTA_TOP


def sweep_note(ctx: Context) -> str:
    """Where pictures break on `ctx`'s model (`sweep_view.range_sentence`) and the δ the Quality step runs at."""
    return (f"*{sweep_view.range_sentence(sweep_view.load(ctx.model.kind))}* This step runs COOL-SD at "
            f"δ = {quality_delta(ctx):g}.")


def reveal_markdown(step: Step, guess, payload: dict) -> str:
    """"your guess ... measured ..." (markdown); the guess is checked, the values come from the run."""
    scale = 100.0 if step.unit == "%" else 1.0
    values = step.answer(payload or {})
    if guess is None or (isinstance(guess, str) and not guess.strip()):
        head = "No guess given."
    else:
        with user_errors():
            head = f"Your guess: **{check_number('your guess', as_number(guess)):g}{step.unit}**."
    shown = [f"{label}: **{v * scale:.2f}{step.unit}**" for label, v in values
             if isinstance(v, (int, float)) and math.isfinite(v)]
    if not shown and (payload or {}).get("finished"):
        return head + " This model does not measure it (the lab's accuracy needs a shipped classifier: MNIST or emoji)."
    if not shown:
        return head + " Nothing measured yet: press Run and wait for it to finish."
    return head + " Measured just now: " + "; ".join(shown) + "."


def as_number(text):
    """A typed guess as a number where it reads as one ("2.5", "40 %"); else unchanged (the check names it)."""
    try:
        return float(text.strip().rstrip("%×x").strip()) if isinstance(text, str) else text
    except ValueError:
        return text


# ---------------------------------------------------------------- layout and wiring
class Tour:
    """The tour's components (laid out by `build`), wired by `wire` once the panels exist."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.guesses: list[gr.Textbox] = []
        self.runs: list[gr.Button] = []
        self.results: list[gr.Markdown] = []
        self.notes: dict[int, gr.Markdown] = {}  # step -> its line about the picked model (`Step.note`)

    def settings(self, step: Step, model=None, lab_controls=()) -> tuple:
        """The race controls' new values (`model`'s defaults changed by the step), then a lab step's `lab_controls`."""
        picked = self.ctx.for_model(model)
        values = RaceSettings.defaults(picked).as_dict() | (step.race or {})
        race = tuple(values[name] for name in RaceSettings.names())
        if step.lab is None:
            return race
        lab = step.lab_values(picked)
        return (*race, *(lab.get(name, gr.skip()) for name in lab_controls))


def build(ctx: Context) -> Tour:
    """The tour in a closed accordion (call above the tabs); each step but the last ends with a button to the next."""
    tour = Tour(ctx)
    with gr.Accordion(f"Guided tour: {len(STEPS)} steps, each with a challenge", open=False, elem_id="tour"):
        with gr.Walkthrough(selected=0, elem_id="tour-steps") as walkthrough:
            for j, step in enumerate(STEPS):
                with gr.Step(step.title, id=j, elem_id=f"tour-step-{j}"):
                    gr.Markdown(step.text, latex_delimiters=LATEX)
                    if step.note is not None:
                        tour.notes[j] = gr.Markdown(step.note(ctx), elem_id=f"tour-note-{j}")
                    gr.Markdown(f"**Challenge:** {step.question} Type your guess, then press Run: it sets the "
                                "controls, runs, and shows the measured value beside your guess.")
                    with gr.Row():
                        tour.guesses.append(gr.Textbox(label="your guess" + (" (%)" if step.unit else ""),
                                                       placeholder="a number", elem_id=f"tour-guess-{j}",
                                                       min_width=120, max_lines=1))
                        tour.runs.append(gr.Button("Run", variant="primary", elem_id=f"tour-run-{j}",
                                                   min_width=80))
                    tour.results.append(gr.Markdown(elem_id=f"tour-result-{j}"))
                    if j + 1 < len(STEPS):  # a later step opens from here; a visited one from its number too
                        forward = gr.Button(f"Next: {STEPS[j + 1].title} →", size="sm", elem_id=f"tour-next-{j}")
                        forward.click(lambda k=j + 1: gr.Walkthrough(selected=k), None, walkthrough,
                                      api_visibility="private", queue=False)
    return tour


def wire(tour: Tour, tabs: gr.Tabs, controls, race, lab) -> None:
    """Each step's Run: set the controls, open the tab to watch, run the race (or the lab), reveal."""
    ctx = tour.ctx
    race_inputs = controls.inputs
    race_outputs = race.outputs.components()
    for j, step in enumerate(STEPS):
        outputs = race_inputs + (list(lab.controls.values()) if step.lab is not None else [])

        def setup(model, step=step):
            return (*tour.settings(step, model, list(lab.controls)), gr.Tabs(selected="race" if step.lab is None
                                                                             else "lab"))

        def reveal(guess, payload, step=step):
            return reveal_markdown(step, guess, payload)

        event = tour.runs[j].click(setup, controls["model"], [*outputs, tabs], api_visibility="private", queue=False)
        if step.lab is None:
            event = event.then(race.gradio_race(), race_inputs, race_outputs, api_visibility="private",
                               preprocess=False, concurrency_limit=ctx.workers, concurrency_id="race",
                               show_progress="minimal")
            answer_from = race.outputs.stats
        else:
            event = event.then(lab.panel.grid, lab.inputs, lab.outputs, api_visibility="private", preprocess=False,
                               concurrency_limit=1, concurrency_id="lab", show_progress="minimal")
            answer_from = lab.outputs[-1]
        event.then(reveal, [tour.guesses[j], answer_from], tour.results[j], api_visibility="private")
    for j, note in tour.notes.items():  # a step's line about the model follows the picker
        controls["model"].change(lambda model, j=j: STEPS[j].note(ctx.for_model(model)), controls["model"], note,
                                 api_visibility="private", queue=False, show_progress="hidden")
