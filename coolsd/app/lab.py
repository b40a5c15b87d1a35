"""The Quality lab tab: samples per decoder for one rule and relaxation, decoded and judged as they stream
(`coolsd.compare.lab`), drawn as a grid and marked on the shipped benchmark's Pareto figure. API: lab_grid."""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
from PIL import Image, ImageDraw

from coolsd.app import sweep_view
from coolsd.app.context import APP_MODEL, MAX_SEED, Context, bad, gpu, unexpected_errors
from coolsd.app.settings import DELTA_TOP, Spec, check_values, rule_spec
from coolsd.bench.delta_sweep import spread_conditions
from coolsd.bench.shipped import FOLDERS, RESULTS, bench_rows, bench_sampling, chain_lengths, same_setting
from coolsd.compare.lab import LAB_RULES, Lab, LabDecoder, LabSample, lab_decoders, summarise
from coolsd.decoding import variants
from coolsd.decoding.drafting import Chain
from coolsd.decoding.engine import DecodeConfig
from coolsd.decoding.rules import CoolSDRule
from coolsd.models.conditions import STYLE_SEP
from coolsd.util.checks import plain
from coolsd.util.figures import mark_run
from coolsd.util.figures import pareto_figure as bench_figure
from coolsd.util.format import number
from coolsd.util.jsonsafe import json_safe
from coolsd.util.paths import EMOJI_DIR
from coolsd.util.sheet import Sheet, fit, font

ID, TITLE = "lab", "Quality lab"
MAX_SAMPLES = 10
LAB_WORKERS = 2  # decoding threads per lab run (a 2-core machine); they use handles of one app lane
BENCHES = {kind: folder / RESULTS for kind, folder in FOLDERS.items()}  # ModelBundle.kind -> its benchmark
HELD_OUT = {"emoji": EMOJI_DIR / "metrics.json"}  # the training run's held-out accuracy of a weak classifier
CELL = 64  # pixels per sample in the grid image
LABEL_W, HEAD_H, GAP = 150, 34, 6  # grid image: decoder label column, sample header row, gap between cells
COLOURS = {"right": (0, 170, 90), "wrong": (220, 40, 40), "pending": (200, 200, 200)}
MARKS = {"eagle-1": ("#444444", "star"), "chosen": ("#d62728", "x"), "twin": ("#1f77b4", "cross")}
INTRO = f"""
Pick a rule and how much to relax it, then **Run**: every decoder draws the same samples (each of another class,
spread over the model's classes; same seed), streamed as they finish. Vanilla AR is the reference: exact, one token
per target forward. Eagle-1 is exact too and commits several tokens per target forward, which is faster only where
that saves more than its drafting costs (the line under the table says which decoders were faster in your run); the
relaxed rule and its twin loosen the test to accept more drafts, at the price of exactness. A frame around a sample
is **green** when the model's small classifier reads the intended class (the digit; an emoji's class, its style
aside), **red** (with what it read) when it does not. The emoji classifier is weak (its held-out accuracy is under
the table), so compare the decoders with each other, not with 100 %. Raise the relaxation until the red frames and
the NLL climb: that is where images start to break. The run uses the model's default sampling and the draft length
L = {Chain.draft_len}; on a model with a shipped benchmark (MNIST, emoji) it is marked on the benchmark's
Pareto figure below, and the line under the table says whether the benchmark ran at the same settings.
"""


def page_text(label: str) -> str:
    """"nu 0.7, mean omega = delta" -> "ν 0.7, mean ω = δ" (it fits a phone)."""
    return label.replace("mean omega = delta", "mean ω = δ").replace("nu ", "ν ")


def lab_specs() -> dict[str, Spec]:
    rules = tuple((page_text(label), key) for key, label in LAB_RULES.items())
    return {"rule": Spec("Rule", "choice", "cool-sd", choices=rules, widget="dropdown", elem_id="lab-rule"),
            "relaxation": rule_spec(CoolSDRule, "delta", "relaxation: delta (lambda for LANTERN++)", "lab-relaxation",
                                    reach=DELTA_TOP),  # COOL-SD's δ knob, as far as the race's δ reaches
            "samples": Spec("samples", "int", MAX_SAMPLES, 1, MAX_SAMPLES, 1, elem_id="lab-samples"),
            "seed": Spec("lab seed", "int", 0, 0, MAX_SEED, elem_id="lab-seed")}


# ---------------------------------------------------------------- drawing (no maths)
def lab_sheet(decoders: int, samples: int) -> Sheet:
    return Sheet.grid(decoders, samples, CELL, label_w=LABEL_W, head_h=HEAD_H, gap=GAP, margin=GAP, head_size=13,
                      label_size=11)


def grid_image(samples: list[LabSample], decoders: list[LabDecoder], headers: list[str],
               class_names: list[str]) -> Image.Image:
    """RGB grid, a row per decoder, a column per sample; cells framed grey, then green or red (with what was read)."""
    sheet = lab_sheet(len(decoders), len(headers))
    cells = [[None] * len(headers) for _ in decoders]
    for s in samples:
        cells[s.column][s.row] = s.image
    canvas = sheet.draw(cells, [d.label for d in decoders], [h.replace(STYLE_SEP, "\n") for h in headers])
    draw, small = ImageDraw.Draw(canvas), font(11)
    for i, j in itertools.product(range(len(decoders)), range(len(headers))):
        x, y = sheet.at(i, j)
        draw.rectangle((x - 3, y - 3, x + CELL + 2, y + CELL + 2), outline=COLOURS["pending"], width=1)
    for s in (s for s in samples if s.correct is not None):
        x, y = sheet.at(s.column, s.row)
        colour = COLOURS["right" if s.correct else "wrong"]
        draw.rectangle((x - 3, y - 3, x + CELL + 2, y + CELL + 2), outline=colour, width=3)
        if not s.correct:
            read = class_names[s.predicted] if s.predicted < len(class_names) else str(s.predicted)
            read = fit(draw, read.rsplit(STYLE_SEP, 1)[0], small, CELL - 4)  # an emoji is judged on its class
            w = max(16, int(draw.textlength(read, font=small)) + 4)
            draw.rectangle((x + CELL - w, y, x + CELL, y + 16), fill=colour)
            draw.text((x + CELL - w / 2, y + 8), read, fill="white", font=small, anchor="mm")
    return canvas


def speed_line(rows: list[dict]) -> str:
    """"In this run Eagle-1 (lossless) was slower than vanilla AR (0.70×); ..." (speed-ups as shown) or ""."""
    said = []
    for r in rows:
        if r["decoder"] == "vanilla" or r["speedup"] is None:
            continue
        shown = round(r["speedup"], 2)
        word = "faster than" if shown > 1 else "slower than" if shown < 1 else "as fast as"
        said.append(f"{plain(r['label'])} was {word} vanilla AR ({shown:.2f}×)")
    return f"In this run {'; '.join(said)}." if said else ""


def bench_settings_line(rows: list[dict], sampling: dict | None, lab_sampling: dict, draft_len: int) -> str:
    """Whether the benchmark's chain rows were measured at this run's draft length and sampling; "" without them."""
    lengths = chain_lengths(rows)
    if not lengths:
        return ""
    shown = " / ".join(str(n) for n in lengths)
    if lengths == [draft_len] and sampling == lab_sampling:
        return f"The benchmark's points were measured at this run's draft length (L = {shown}) and sampling."
    other = [f"L = {shown}" if lengths != [draft_len] else "", "other sampling" if sampling != lab_sampling else ""]
    return (f"The benchmark's points were measured at {' and '.join(w for w in other if w)} (this run: "
            f"L = {draft_len}): compare positions with care.")


def stats_markdown(rows: list[dict], status: str) -> str:
    """Per-decoder table: samples, classifier accuracy, mean NLL, tau, speed-up; then which were faster."""
    lines = [status, "", "| decoder | samples | classifier accuracy | target NLL (nats/token) | tau | speed-up |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        acc = "–" if r["accuracy"] is None else f"{r['accuracy']:.0%}"
        cached = f" ({r['cached']} reused)" if r["cached"] else ""
        lines.append(f"| {plain(r['label'])} | {r['n']}{cached} | {acc} | {number(r['nll'], '.3f')} | "
                     f"{number(r['tau'], '.2f')} | {number(r['speedup'], '.2f')}{'×' if r['speedup'] else ''} |")
    if speed_line(rows):
        lines.append("\n" + speed_line(rows))
    lines.append("\nNLL: the target's mean negative log-likelihood of the samples' tokens under its own sampling "
                 "distribution (lower = more typical of the target). Speed-up: vanilla AR's decode time over the "
                 "decoder's, summed over the samples both have finished, on this server as loaded now "
                 "(reused samples keep their first time); tau = tokens per target forward, load-free.")
    return "\n".join(lines)


def pareto_figure(rows: list[dict], summary: list[dict]):
    """The benchmark's 2x2 Pareto figure with this run's decoders marked (`coolsd.util.figures.mark_run`)."""
    images = max((r.get("n_images", 0) for r in rows), default=0)
    fig = bench_figure(rows, f"The shipped benchmark ({images} images per setting) with this lab run marked")
    marks = [{"name": f"lab: {r['label']}", "group": f"lab-{r['decoder']}", "colour": MARKS[r["decoder"]][0],
              "symbol": MARKS[r["decoder"]][1], "speedup": r["speedup"], "tau": r["tau"], "nll": r["nll"],
              "hover": f"lab run: {plain(r['label'])} ({r['n']} samples)"}
             for r in summary if r["decoder"] in MARKS and r["nll"] is not None]
    mark_run(fig, marks)
    fig.update_layout(width=None, height=820, autosize=True, title={"font": {"size": 14}})
    return fig


def bench_note(rows: list[dict], decoders: list[LabDecoder], summary: list[dict]) -> str:
    """One line per relaxed decoder whose exact setting the benchmark ran: its numbers there and here."""
    out = []
    for d, s in zip(decoders, summary):
        if d.rule is None or s["nll"] is None:
            continue
        config = {k: v for k, v in d.rule.config().items() if k not in ("neighbours",)}
        for r in same_setting(rows, config, Chain.draft_len):
            out.append(f"- **{plain(d.label)}**: here NLL {s['nll']:.3f}, tau {s['tau']:.2f}; the benchmark's "
                       f"`{r['setting']}` ({r['n_images']} images): NLL {r['nll']:.3f}, tau {r['tau']:.2f}, "
                       f"accuracy {r['accuracy']:.0%}, speed-up {r['speedup']:.2f}× (its machine)")
    return "\n".join(out)


def held_out_note(path: Path) -> str:
    """" The classifier reads 58 % of 240 held-out ..." from a training run's metrics.json, or ""."""
    try:
        m = json.loads(path.read_text())
        acc, n = float(m["val_class_acc"]), int(m["n_heldout"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    return (f" The classifier reads {100 * acc:.0f} % of {n} held-out real images' classes right: compare columns, "
            "not levels.")


# ---------------------------------------------------------------- the handler
class LabPanel:
    """The lab handler; one `Lab` per model (its classifier and sample cache), made on its first run (`lab_of`)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx, self.specs = ctx, lab_specs()
        self.labs: dict[str, tuple[Lab, list]] = {}  # model key -> (its Lab, its benchmark rows)
        self._lock = threading.Lock()
        self.lab, self.bench = self.lab_of(ctx)  # the app's model

    def lab_of(self, ctx: Context) -> tuple[Lab, list]:
        with self._lock:
            if ctx.model_key not in self.labs:
                m = ctx.model
                lab = Lab(m.target, m.drafter, m.tokenizer, m.num_tokens, classifier=None, workers=LAB_WORKERS)
                self.labs[ctx.model_key] = lab, bench_rows(BENCHES[m.kind]) if m.kind in BENCHES else []
            return self.labs[ctx.model_key]

    def check(self, rule, relaxation, samples, seed) -> tuple[str, float, int, int]:
        """The lab's values checked by their Specs (the event has preprocess=False)."""
        rule = variants.ALIASES.get(rule, rule) if isinstance(rule, str) else rule  # old keys ("cool-sd-floor")
        v = check_values(self.specs, {"rule": rule, "relaxation": relaxation, "samples": samples, "seed": seed})
        return v["rule"], v["relaxation"], v["samples"], v["seed"]

    def plan(self, rule: str, relaxation, samples, seed, condition, ctx: Context
             ) -> tuple[list[LabDecoder], list, list, list[str]]:
        """Decoders, conditions, seeds and column headers of one run of checked values on `ctx`'s model."""
        m = ctx.model
        try:
            decoders = lab_decoders(rule, relaxation, m.neighbours)
        except ValueError as err:
            raise bad(str(err)) from None
        if m.conditioning == "class":
            if condition is not None:  # (unused here, yet checked: a class of this model; None = not given)
                ctx.check_condition(condition)
            names = m.conditions  # classes spread evenly over the model's; a styled model: the styles in turn
            conditions = spread_conditions(len(names.classes), len(names.styles), min(samples, len(names.classes)))
            seeds = [seed] * len(conditions)
            headers = [names.label(c) for c in conditions]
        else:
            cond = ctx.check_condition(condition)
            conditions, seeds = [cond] * samples, [seed + j for j in range(samples)]
            headers = [f"seed {s}" for s in seeds]
        return decoders, conditions, seeds, headers

    @gpu
    def grid(self, rule: str, relaxation, samples, seed, condition=None, model=APP_MODEL):
        """Run the lab on `model` (default: the app's): yields (grid image, stats markdown, Pareto figure or skip,
        stats JSON) per finished sample. Class models sample their first classes, text models `condition`."""
        ctx = self.ctx.picked(model)
        m = ctx.model
        rule, relaxation, samples, seed = self.check(rule, relaxation, samples, seed)
        decoders, conditions, seeds, headers = self.plan(rule, relaxation, samples, seed, condition, ctx)
        lab, bench = self.lab_of(ctx)
        with self._lock:  # the model's own classifier (`Context.judge`, shared with the races), or None
            if lab.classifier is None:
                lab.classifier = ctx.judge.classifier
        classifier = lab.classifier
        settings = {"rule": rule, "relaxation": relaxation, "samples": len(conditions), "seed": seed,
                    "conditions": headers if m.conditioning == "class" else conditions, "seeds": seeds,
                    "draft_len": Chain.draft_len, "sampling": dataclasses.asdict(m.default_sampling),
                    "decoders": [{"key": d.key, "label": d.label,
                                  "rule": None if d.rule is None else d.rule.config()} for d in decoders]}
        done: list[LabSample] = []
        t0, first_row = time.perf_counter(), None
        with ctx.lane() as lane:
            stream = lab.run(decoders, conditions, seeds, m.default_sampling, DecodeConfig(), handles=lane)
            try:
                with unexpected_errors("lab", "the lab"):
                    for sample in stream:
                        done.append(sample)
                        if first_row is None and sum(s.row == 0 for s in done) == len(decoders):
                            first_row = time.perf_counter() - t0
                        final = len(done) == len(decoders) * len(conditions)
                        yield self._frame(ctx, bench, done, decoders, headers, settings, t0, first_row, final,
                                          classifier)
            finally:
                stream.close()

    def _frame(self, ctx, bench, done, decoders, headers, settings, t0, first_row, final, classifier):
        wall = time.perf_counter() - t0
        summary = summarise(done, decoders)
        status = (f"**Finished** {len(done)} samples in {wall:.1f} s (first sample of every decoder after "
                  f"{number(first_row, '.1f')} s)." if final else f"Decoding… {len(done)} of "
                  f"{len(decoders) * len(headers)} samples, {wall:.1f} s.")
        if classifier is None:
            status += " No classifier for this model: accuracy is not measured."
        elif ctx.model.kind in HELD_OUT:
            status += held_out_note(HELD_OUT[ctx.model.kind])
        text = stats_markdown(summary, status)
        figure = gr.skip()
        if final:
            note = bench_note(bench, decoders, summary)
            text += ("\n\nSame setting in the benchmark:\n" + note) if note else ""
            if bench and ctx.model.kind in BENCHES:
                text += "\n\n" + bench_settings_line(bench, bench_sampling(BENCHES[ctx.model.kind]),
                                                       dataclasses.asdict(ctx.model.default_sampling),
                                                       Chain.draft_len)
            figure = pareto_figure(bench, summary) if bench else None
        payload = {"model": ctx.model.name, "settings": settings, "finished": final, "wall_seconds": wall,
                   "first_row_seconds": first_row, "decoders": summary,
                   "samples": [{"decoder": s.decoder, "row": s.row, "condition": s.condition, "seed": s.seed,
                                "tau": s.tau, "nll": s.nll, "predicted": s.predicted, "seconds": s.seconds,
                                "cached": s.cached} for s in sorted(done, key=lambda s: (s.row, s.column))]}
        image = grid_image(done, decoders, headers, ctx.model.class_names)
        return image, text, figure, json_safe(payload)


@dataclass(frozen=True)
class LabHandle:
    """What the tour reads of the lab; `outputs[-1]` is the run's stats JSON."""

    panel: LabPanel
    controls: dict
    inputs: list
    outputs: list


def build(ctx: Context, condition: gr.components.Component, model: gr.Dropdown, tab: gr.Tab,
          delta: gr.Slider | None = None) -> LabHandle:
    """The tab (call inside `gr.Tab(TITLE, id=ID)`): the δ sweep with the race's `delta` marked, then the live lab."""
    if delta is not None:
        sweep_view.build(ctx, model, delta)
    panel = LabPanel(ctx)
    gr.Markdown("### Run it yourself\n" + INTRO)
    table = lab_specs()
    rule = table["rule"].component()  # (a row of its own: its longest choice needs the width)
    with gr.Row():
        relaxation, samples, seed = (table[n].component(min_width=160) for n in ("relaxation", "samples", "seed"))
    with gr.Row():
        run_btn = gr.Button("Run the lab", variant="primary", elem_id="lab-run")
        stop_btn = gr.Button("Stop", variant="stop", elem_id="lab-stop")
    grid = gr.Image(value=lab_sheet(4, MAX_SAMPLES).blank(), type="pil", format="png", show_label=False,
                    interactive=False, buttons=["download"], elem_id="lab-grid", label="samples")
    stats = gr.Markdown(stats_markdown([], "Press **Run the lab**."), elem_id="lab-stats")
    plot = gr.Plot(label="benchmark Pareto figure, this run marked", show_label=False, elem_id="lab-pareto")
    with gr.Accordion("Raw numbers (what the API returns)", open=False):
        raw = gr.JSON(elem_id="lab-json", label="lab")

    inputs, outputs = [rule, relaxation, samples, seed, condition, model], [grid, stats, plot, raw]
    event = run_btn.click(panel.grid, inputs, outputs, api_name="lab_grid", preprocess=False, concurrency_limit=1,
                          concurrency_id="lab", show_progress="minimal")
    stop_btn.click(None, cancels=[event], queue=False, api_visibility="private")
    return LabHandle(panel, {"rule": rule, "relaxation": relaxation, "samples": samples, "seed": seed}, inputs, outputs)
