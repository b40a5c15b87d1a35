"""The How it works tab: one round of speculative decoding, each rule's formulas (rendered LaTeX), the sliders."""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr

from coolsd.app.context import Context
from coolsd.bench.shipped import (
    EMOJI_OURS,
    FOLDERS,
    OURS,
    PAPER,
    PAPER_HARDWARE,
    find_row,
    paper_tau,
    read_bench,
    short_command,
)
from coolsd.util.format import number, percent
from coolsd.util.paths import ROOT

# per model kind: (its benchmark folder, the rows beside the paper's, the accuracy column's name and key)
BENCHES = {"embedded": (FOLDERS["embedded"], OURS, "digit accuracy", "accuracy"),
           "emoji": (FOLDERS["emoji"], EMOJI_OURS, "emoji class accuracy", "class_accuracy")}
# shown (and named so) where the shipped benchmark, run before the floor was the default, has no floored row
OLDER = {"cool-sd": ("cool-sd-unclipped", "COOL-SD unclipped δ = {delta:g} †")}
OLDER_NOTE = "† COOL-SD unclipped: the shipped benchmark ran before the floored schedule became COOL-SD's default."

ID, TITLE = "how", "How it works"
LATEX = [{"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}]

TEXT = r"""
### One round of speculative decoding
A small **drafter** $q$ proposes $L$ image tokens $\tilde x_1..\tilde x_L$; the big **target** $p$ scores all of
them in **one** forward pass. Left to right, draft $\tilde x_i$ is kept with probability $a_i$; at the first
rejection a replacement is drawn from a **residual** distribution and the round ends; if all $L$ pass, a bonus
token comes from $p_{L+1}$. Each round commits $n+1$ tokens for one target forward, so the
**mean accepted length** is $\tau = \text{tokens} / \text{target forwards}$ and vanilla AR has $\tau = 1$.

**Eagle-1** (lossless): exactly the target's distribution.
$$a_i = \min\Big(1, \frac{p(\tilde x_i)}{q(\tilde x_i)}\Big), \qquad r = \mathrm{Norm}\big([p - q]_+\big)$$

**LANTERN++** ($k$, $\lambda$): a draft also gets the target mass of its nearest codes in the VQ codebook
(latent neighbours $c_1, c_2, \dots$), up to $m \le k$ of them while that mass stays within $(\lambda-1)\,p(x)$:
$$\tilde p(x) = p(x) + \sum_{j \le m} p(c_j) \le \lambda\, p(x)$$
$$a_i = \min\Big(1, \frac{\tilde p(\tilde x_i)}{q(\tilde x_i)}\Big), \qquad r = \mathrm{Norm}\big([p - q']_+\big)$$
where $q'$ is $q$ set to zero on the $k+1$ nearest codes of $\tilde x_i$ whenever some neighbour mass was
pooled ($m \ge 1$), as in the published code. $\lambda = 1$ is Eagle-1.

**COOL-SD** ($\delta$, $\nu$, $\mu$): an annealed relaxation, generous early in the round and strict late
(but never stricter than Eagle-1: floored at 1), with the optimal residual $G^*$ (the one that minimises the total
variation of each step):
$$\omega_i = \max\big(1,\ \delta\, e^{-\nu i - \mu}\big), \qquad
a_i = \min\Big(1, \omega_i \frac{p(\tilde x_i)}{q(\tilde x_i)}\Big)$$
$$G^*_i = \mathrm{Norm}\big([\,p - \min(q, \omega_i p)\,]_+\big)$$
"mean ω = δ" sets $\mu = \log \frac{1}{L}\sum_{i=1}^{L} e^{-\nu i}$ so that the unclipped $\omega_i$ average $\delta$.
$\omega_i = 1$ for all $i$ ($\delta = 1, \nu = 0$) is exactly Eagle-1; $\nu = 0$ is uniform relaxation.

{why_floored}

### What the sliders change
| slider | effect |
|---|---|
| temperature, top-k, CFG scale | how logits become $p$ and $q$ (same processing for both) |
| draft length $L$ | drafts per round: more speed if they are accepted, wasted drafter work if not |
| drafting | a chain of $L$ drafts, or a static tree verified in one forward (Eagle-1's 25 nodes) |
| noise | one stream, or **same noise**: token $j$'s dice keyed by (seed, $j$): racers differ by rules, not dice |
| $\delta$ | overall relaxation: larger = longer accepted runs, further from the target's distribution |
| $\nu$ | annealing: how fast $\omega_i$ falls along the round ($\nu = 0.7$ in the paper) |
| $\mu$ | shift of the schedule (only when "mean ω = δ" is off) |
| LANTERN++ $k$, $\lambda$ | neighbourhood size and budget of the latent relaxation |

### Reading the race
The four decoders take turns: the one that has used the **least compute time** runs next round, so every
frame compares them at the same compute budget; the speed-up is each decoder's tokens per compute second over
vanilla AR's in the same race. The overlay colours each token: **green** accepted draft,
**orange** resampled after a rejection, **blue** bonus / target sample. Relaxed rules trade exactness for
speed: compare the images and the Theory tab's exact error. Under **same noise** a lossless racer (Eagle-1, SJD)
commits exactly vanilla AR's tokens, and the overlay marks in **magenta** each token where a racer left vanilla AR's
picture.

### Papers
[COOL-SD (arXiv 2601.09212)](https://arxiv.org/abs/2601.09212) ·
[LANTERN (arXiv 2410.03355)](https://arxiv.org/abs/2410.03355) ·
[LANTERN++ (arXiv 2502.06352)](https://arxiv.org/abs/2502.06352) ·
[EAGLE (arXiv 2401.15077)](https://arxiv.org/abs/2401.15077)
"""


FLOOR_FILE = ROOT / "assets" / "floor_vs_eagle.json"  # `python -m coolsd.theory --floor-out` (the exact oracle)


def why_floored(path: Path = FLOOR_FILE) -> str:
    """The "Why floored at 1" paragraph, with the exact comparison read from `path` (its delta 1.1 row)."""
    cool, eagle = "COOL-SD δ = 1.1", "Eagle-1"
    paper = (f"LlamaGen-XL {paper_tau('LlamaGen-XL 775M', cool):.2f} vs {paper_tau('LlamaGen-XL 775M', eagle):.2f}, "
             f"Lumina-mGPT {paper_tau('Lumina-mGPT 7B', cool):.2f} vs {paper_tau('Lumina-mGPT 7B', eagle):.2f}")
    head = (r"**Why floored at 1.** The paper reports COOL-SD at $\delta = 1.1$ with a *longer* accepted length than "
            f"Eagle-1 (its table: {paper}), which the unclipped schedule cannot promise: its late $\\omega_i$ fall "
            "below 1, stricter than Eagle-1 there. With $G^*$ a depth with $\\omega_i \\le 1$ already has zero step "
            "error, so pushing $\\omega_i$ below 1 buys no accuracy and only loses drafts")
    tail = (" The shipped benchmarks run at $L = 1$, where the one $\\omega_1 = \\delta$ is the same floored or not. "
            "So COOL-SD here is floored, and the unclipped schedule races as \"COOL-SD unclipped\".")
    try:
        report = json.loads(path.read_text())
        setup, d = report["setup"], next(r for r in report["by_delta"] if r["delta"] == 1.1)
    except (OSError, ValueError, KeyError, StopIteration):
        return head + " (the exact comparison is not here: `python -m coolsd.theory --floor-out " \
            f"{path.name}`)." + tail
    n = d["models"]
    return (head + f": on {n} random tabular models (`python -m coolsd.theory --floor-out`, `assets/{path.name}`; "
            f"V {setup['vocab_size']}, T {setup['num_tokens']}, L {setup['draft_len']}, $\\delta$ 1.1) the floored "
            f"schedule's mean exact TV was {d['mean_floored_tv']:.4f} against {d['mean_unclipped_tv']:.4f} unclipped "
            f"while its τ was {d['mean_floored_tau']:.2f} against {d['mean_unclipped_tau']:.2f} (Eagle-1 "
            f"{d['mean_eagle_tau']:.2f}; at least Eagle-1's τ on {d['floored_at_least_eagle']} of {n} models, the "
            f"unclipped one on {d['unclipped_at_least_eagle']})." + tail)


def _group(title: str, quality: str) -> list[str]:
    return ["", f"**{title}**", "", f"| method | accept len τ | speed-up | FID | {quality} |",
            "|---|---:|---:|---:|---:|"]


def paper_beside_us(kind: str = "embedded", bench_dir: Path | None = None) -> str:
    """The paper's numbers, then ours for `kind` (else MNIST): a table per source, model and hardware (phone-wide)."""
    folder, ours, quality, accuracy = BENCHES.get(kind, BENCHES["embedded"])
    folder = bench_dir or folder
    shown = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
    lines = ["### The paper beside us",
             "Reported in the COOL-SD paper (its main table) and measured by this project's benchmark "
             f"(`python -m coolsd.bench`, files in `{shown}/`). Every table names its model and hardware. The two "
             "FIDs are different measures: the paper's is on MS-COCO images (Inception features), ours is in the "
             "shipped classifier's feature space against held-out real images, so compare the trends, not the values."]
    for model in dict.fromkeys(m for m, *_ in PAPER):
        lines += _group(f"Paper: {model}, {PAPER_HARDWARE}", "CLIP")
        lines += [f"| {method} | {tau:.2f} | {speedup:.2f}× | {fid:.2f} | {clip:.4f} |"
                  for m, method, tau, speedup, fid, clip in PAPER if m == model]
    try:
        config, rows = read_bench(folder)
    except (OSError, ValueError, KeyError):
        lines += _group(f"Ours: not measured (`{folder.name}/` is missing)", quality)
        return "\n".join(lines)
    model, machine = config.get("model", "embedded model"), config.get("machine", "not recorded")
    machine = machine.split(";")[0] + (", CPU only" if "+cpu" in machine else "")  # "AMD EPYC, 2 cores, CPU only"
    lines += _group(f"Ours: {model}, {machine}", quality)
    for method, key, options in ours:
        r = find_row(rows, key, options)
        if r is None and key in OLDER:
            key, label = OLDER[key]
            r, method = find_row(rows, key, options), label.format(**options)
        if r is None:
            lines.append(f"| {method} | not measured | | | |")
            continue
        lines.append(f"| {method} | {number(r.get('tau'))} | {number(r.get('speedup'), '.2f', '×')} | "
                     f"{number(r.get('fid'))} | {percent(r.get(accuracy))} |")
    if any("†" in line for line in lines):
        lines += ["", OLDER_NOTE]
    speedup = next((r["speedup_stat"] for r in rows if r.get("speedup_stat")), "speed-up over vanilla AR")
    lines += ["", f"Ours: `{short_command(config.get('command', 'python -m coolsd.bench'))}`, "
              f"{rows[0].get('n_images', '?')} images per setting, {speedup}. The paper's LANTERN++ k and λ are not "
              "stated; ours are the benchmark's. A run of the LlamaGen-XL architecture on one H200 with random weights "
              "(`tools/gpu_llamagen_bench.py`) gave τ ≈ 1.1 for every rule: random weights say nothing about "
              "acceptance, so there is no LlamaGen row of ours until the real weights are fetched."]
    return "\n".join(lines)


def build(ctx: Context, tab: gr.Tab) -> None:
    gr.Markdown(TEXT.replace("{why_floored}", why_floored()), latex_delimiters=LATEX, elem_id="how")
    gr.Markdown(paper_beside_us(ctx.model.kind), elem_id="paper-beside-us")
