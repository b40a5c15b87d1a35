"""The Schedule explorer tab: an omega schedule judged exactly against its uniform twin (`coolsd.theory.annealing`),
with the shipped report below. API: schedule."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import gradio as gr

from coolsd.app.context import Context, bad, unexpected_errors
from coolsd.app.settings import Spec, check_values, rule_spec
from coolsd.decoding.omega_text import format_omegas
from coolsd.decoding.omega_text import parse_omegas as parse_omega_list
from coolsd.decoding.rules import CoolSDRule, CustomScheduleRule, LinearDecayRule, Rule
from coolsd.theory import annealing, sweeps
from coolsd.util.checks import plain, show
from coolsd.util.format import subscript
from coolsd.util.paths import THEORY_REPORT

ID, TITLE = "schedule", "Schedule explorer"
DRAFT_LEN = sweeps.DRAFT_LEN  # the toy model's L (V = 4, T = 5: the first round drafts all L depths)
DRAFT_LABELS = {"toy": "toy (the Theory tab's)", "close": "close (ε = 0.2)", "far": "far (ε = 0.7)"}
KIND_LABELS = {"exponential": "exponential (COOL-SD)", "linear": "linear decay", "uniform": "uniform (UniformRSD)",
               "custom": "custom list"}
INTRO = f"""
COOL-SD relaxes each draft depth i of a round by its own weight ωᵢ: a draft is kept with probability
min(1, ωᵢ p/q) and a rejection resamples from G*ᵢ. Shape the schedule, then compare it with its **uniform twin**:
the UniformRSD whose single δ gives the **same** mean accepted length τ, so the only difference is where along the
round the relaxation is spent. Exact numbers (no sampling) on the toy tabular model (V = {sweeps.VOCAB_SIZE},
T = {sweeps.NUM_TOKENS}, L = {DRAFT_LEN}); drafts are the Theory tab's or a mix Q = (1 − ε) P + ε R.
The family: exponential ωᵢ = δ e^(−ν i − μ) with μ making the mean δ (the paper's, with ν = {CoolSDRule.nu:g});
linear decay ωᵢ = δ (1 + s (L + 1 − 2i) / (L − 1)), also of mean δ; uniform ωᵢ = δ; or your own list ω₁ … ω<sub>L</sub>.
"Floor at 1" (on by default, as COOL-SD runs everywhere in this app) clips every ωᵢ below at 1.
"""
WHY = """
**Why the floor matters.** With G*, a depth whose ωᵢ ≤ 1 has step error exactly 0, so pushing ωᵢ below 1 buys no
accuracy: it only rejects more. For ωᵢ ≥ 1 a step's error is exactly the acceptance it gains over Eagle-1
(Σₓ [min(q, ωᵢ p) − p]_+). Relaxing early pays more: a draft accepted at depth 1 also opens depths 2..L, so each
unit of error spent early buys more tokens than the same unit spent late. Hence the floored annealed schedule tends
to beat its twin in the bound (the sum of the "error spent" bars), while the unclipped one throws acceptance
away at the late depths and must relax the early ones harder to reach the same τ.
"""


# ---------------------------------------------------------------- input -> rule
def schedule_specs() -> dict[str, Spec]:
    return {"kind": Spec("Schedule", "choice", "exponential", choices=tuple((v, k) for k, v in KIND_LABELS.items()),
                         widget="radio", elem_id="sched-kind"),
            "delta": rule_spec(CoolSDRule, "delta", "delta (mean omega)", "sched-delta"),
            "nu": rule_spec(CoolSDRule, "nu", "nu (exponential decay rate)", "sched-nu"),
            "slope": rule_spec(LinearDecayRule, "slope", "slope s (linear decay)", "sched-slope"),
            "floor": Spec("floor at 1 (ωᵢ = max(ωᵢ, 1))", "bool", CoolSDRule.floor_at_one,
                          elem_id="sched-floor"),
            "drafts": Spec("Drafts", "choice", "toy", choices=tuple((v, k) for k, v in DRAFT_LABELS.items()),
                           widget="radio", elem_id="sched-drafts")}


def parse_omegas(text) -> tuple[float, ...]:
    """The custom list (`rules.parse_omegas`: "2, 1, 0.5" or "2 1 0.5"); a one-line error, at most L numbers."""
    try:
        values = parse_omega_list(text)
    except ValueError as err:
        raise bad(f"custom omegas: {err}") from None
    if len(values) > DRAFT_LEN:
        raise bad(f"custom omegas: the toy model drafts L = {DRAFT_LEN} tokens per round, so give at most "
                  f"{DRAFT_LEN} numbers (got {len(values)})")
    return values


def make_schedule(kind, delta, nu, slope, omegas, floor) -> Rule:
    """The explorer's rule; the rule's own ValueError text becomes the one-line error."""
    if kind not in annealing.SCHEDULES:
        raise bad(f"unknown schedule {show(kind)}; choose one of {', '.join(annealing.SCHEDULES)}")
    values = parse_omegas(omegas) if kind == "custom" else ()  # (another kind neither reads nor checks the list)
    try:
        return annealing.schedule_rule(kind, delta=delta, nu=nu, slope=slope, omegas=values, floor_at_one=floor)
    except ValueError as err:
        raise bad(str(err)) from None


@functools.lru_cache(maxsize=64)
def explore(rule: Rule, drafts: str) -> dict:
    return annealing.explore(rule, drafts=drafts, draft_len=DRAFT_LEN)


# ---------------------------------------------------------------- text (drawing only)
def numbers_markdown(result: dict) -> str:
    """The exact numbers and what omega_i < 1 means where it happens."""
    s, t, e = result["schedule"], result["twin"], result["eagle"]
    lines = ["| | τ | exact TV | bound |", "|---|---|---|---|",
             f"| this schedule | {s['tau']:.4f} | {s['tv']:.4f} | {s['bound']:.4f} |"]
    if t is not None:
        lines.append(f"| uniform twin, δ = {t['delta']:.4f} | {t['tau']:.4f} | {t['tv']:.4f} | {t['bound']:.4f} |")
    lines.append(f"| Eagle-1 (lossless) | {e['tau']:.4f} | {e['tv']:.1e} | {e['bound']:.1e} |")
    lines.append("\nτ: tokens per target forward; exact TV: total variation between the output and P over whole "
                 "sequences; bound: the paper's bound, the sum of the per-depth errors drawn above.")
    if t is None:
        lines.append(f"\n{plain(result['twin_note'])}.")
    else:
        better = [name for name, key in (("exact TV", "tv"), ("bound", "bound")) if s[key] < t[key]]
        verdict = (f"At the same τ this schedule beats its uniform twin in {' and '.join(better)}." if better else
                   "At the same τ the uniform twin is at least as accurate in exact TV and in the bound.")
        lines.append(f"\n**{verdict}**")
    if s["tau"] < e["tau"]:
        lines.append(f"\nThis schedule is *slower* than Eagle-1 (τ {s['tau']:.3f} < {e['tau']:.3f}) and not exact.")
    if result["below_one"]:
        depths = ", ".join(str(i) for i in result["below_one"])
        lines.append(f"\n**ωᵢ < 1 at depth {depths}**: there the rule is *stricter than Eagle-1* (it keeps a draft "
                     "with probability min(1, ωᵢ p/q) ≤ min(1, p/q)), and G* keeps that step *exact*: its step "
                     "error is 0, as at ωᵢ = 1. Such a depth costs acceptance and buys no accuracy; "
                     "**floor at 1** removes exactly that loss.")
    return "\n".join(lines)


def report_markdown(path: Path = THEORY_REPORT) -> str:
    """The shipped floored/unclipped x close/far table (or how to make it)."""
    if not path.is_file():
        return "The report is not shipped here: `python -m coolsd.theory --report --report-out ...`."
    return ("**Over many random models** (`python -m coolsd.theory --report`; every comparison at matched τ):\n\n"
            + annealing.format_schedules(json.loads(path.read_text())))


# ---------------------------------------------------------------- the handler and the tab
class SchedulePanel:
    """The explorer's handler (API: schedule)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx, self.specs = ctx, schedule_specs()

    def compute(self, kind, delta, nu, slope, omegas, floor, drafts):
        """-> (omega bars figure, per-depth figure, numbers markdown, JSON); every value checked here."""
        v = check_values(self.specs, {"kind": kind, "delta": delta, "nu": nu, "slope": slope, "floor": floor,
                                      "drafts": drafts})
        rule = make_schedule(v["kind"], v["delta"], v["nu"], v["slope"], omegas, v["floor"])
        with unexpected_errors("schedule explorer", "the exact oracle"):
            result = explore(rule, v["drafts"])
        return annealing.omega_figure(result), annealing.why_figure(result), numbers_markdown(result), result


def build(ctx: Context, tab: gr.Tab) -> SchedulePanel:
    """The tab (call inside `gr.Tab(TITLE, id=ID)`)."""
    panel = SchedulePanel(ctx)
    gr.Markdown(INTRO)
    with gr.Row():
        with gr.Column(scale=1, min_width=240):
            kind, delta, nu, slope = (panel.specs[n].component() for n in ("kind", "delta", "nu", "slope"))
            omegas = gr.Textbox(value=format_omegas(CustomScheduleRule.omegas),
                                label="custom " + ", ".join(f"ω{subscript(i)}" for i in range(1, DRAFT_LEN + 1)),
                                elem_id="sched-omegas", max_length=200)
            floor, drafts = panel.specs["floor"].component(), panel.specs["drafts"].component()
            button = gr.Button("Compute", variant="primary", elem_id="sched-btn")
        with gr.Column(scale=3):
            bars = gr.Plot(show_label=False, elem_id="sched-bars")
            depth_plot = gr.Plot(show_label=False, elem_id="sched-why")
    numbers = gr.Markdown(elem_id="sched-numbers")
    gr.Markdown(WHY)
    gr.Markdown(report_markdown(), elem_id="sched-report")
    with gr.Accordion("Raw numbers (what the API returns)", open=False):
        raw = gr.JSON(label="schedule", elem_id="sched-json")

    inputs = [kind, delta, nu, slope, omegas, floor, drafts]
    gr.on([button.click, tab.select, kind.input, delta.release, nu.release, slope.release, omegas.submit, floor.input,
           drafts.input], panel.compute, inputs, [bars, depth_plot, numbers, raw], api_name="schedule",
          preprocess=False, concurrency_limit=1, concurrency_id="schedule", trigger_mode="always_last",
          show_progress="minimal")
    return panel
