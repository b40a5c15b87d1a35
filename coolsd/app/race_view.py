"""What the Race tab shows of a race: its outputs (`RaceOutputs`) and frames of them (`RaceFrame`), drawn from a
`RaceTrace`; `RaceOutputs.values(frame)` lays a frame out in wiring and API order ("race_outputs" names them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import gradio as gr
import torch
from torch import Tensor

from coolsd.app.context import Context
from coolsd.app.judge import caption
from coolsd.app.plots import (
    DIFFERS,
    acceptance_figure,
    length_figure,
    length_histogram,
    overlay_legend_html,
    stats_markdown,
)
from coolsd.app.racers import RACERS, SLOTS, VANILLA, VANILLA_SLOT, slot_keys
from coolsd.compare.race import Racer
from coolsd.compare.trace import RaceTrace, TraceSettings
from coolsd.util.jsonsafe import json_safe
from coolsd.util.sheet import quantise

SKIP = gr.skip()


@dataclass(frozen=True)
class RaceFrame:
    """One update of the race area (gr.skip() where unchanged); slot fields hold SLOTS values, vanilla AR last."""

    images: tuple = (SKIP,) * SLOTS
    stats_md: object = field(default_factory=gr.skip)
    plot_acc: object = field(default_factory=gr.skip)
    plot_len: object = field(default_factory=gr.skip)
    plot_hist: object = field(default_factory=gr.skip)
    stats: object = field(default_factory=gr.skip)
    replay: object = field(default_factory=gr.skip)
    captions: tuple = (SKIP,) * SLOTS
    snapshot: object = field(default_factory=gr.skip)
    trace: object = field(default_factory=gr.skip)

    def replace(self, **changes) -> RaceFrame:
        return dataclasses.replace(self, **changes)


# what the API returns, in order (not the states)
API_NAMES = [*(f"image_{i + 1}" for i in range(SLOTS)), "stats_md", "plot_acc", "plot_len", "plot_hist", "stats",
             "replay", *(f"seen_{i + 1}" for i in range(SLOTS))]
SLOT_FIELDS = ("images", "captions")  # fields holding one value per slot


@dataclass(frozen=True)
class RaceOutputs:
    """The race area's components, named as `RaceFrame`'s fields."""

    images: tuple
    stats_md: gr.Markdown
    plot_acc: gr.Plot
    plot_len: gr.Plot
    plot_hist: gr.Plot
    stats: gr.JSON
    replay: gr.Slider
    captions: tuple
    snapshot: gr.State
    trace: gr.State

    def components(self, *names: str) -> list:
        """The components in wiring order (all, or the named fields in that order)."""
        return list(_flat(self, names))

    @staticmethod
    def values(frame: RaceFrame, *names: str) -> tuple:
            return tuple(_flat(frame, names))


def _flat(fields_of, names: tuple[str, ...]):
    """The named fields' values (default: all), a slot field's one per slot."""
    for name in names or tuple(f.name for f in dataclasses.fields(fields_of)):
        value = getattr(fields_of, name)
        yield from value if name in SLOT_FIELDS else (value,)


@dataclass(frozen=True)
class DecoderNumbers:
    """One decoder's stats JSON entry: `Racer.stats`, the classifier's reading, same noise's agreement."""

    decoder: str = ""  # its label
    tokens: int = 0
    num_tokens: int = 0
    target_forwards: int = 0
    draft_forwards: int = 0
    rounds: int = 0
    mean_accepted_length: float | None = None  # tau, tokens per target forward
    compute_seconds: float = 0.0
    finished: bool = False
    speedup: float | None = None  # over vanilla AR's tokens per compute second
    recognised: dict | None = None
    same_as_vanilla: dict | None = None


@dataclass(frozen=True)
class RaceNumbers:
    """The stats JSON of a race on show, typed for the panels that read it back."""

    settings: TraceSettings = field(default_factory=TraceSettings)
    decoders: dict[str, DecoderNumbers] = field(default_factory=dict)
    finished: bool = False

    @classmethod
    def from_json(cls, stats) -> RaceNumbers:
        """`numbers`' payload read back; anything else (None before a race) is no race."""
        if not isinstance(stats, dict):
            return cls()
        known = {f.name for f in dataclasses.fields(DecoderNumbers)}
        decoders = {key: DecoderNumbers(**{k: v for k, v in d.items() if k in known})
                    for key, d in (stats.get("decoders") or {}).items()}
        return cls(TraceSettings.from_json(stats.get("settings") or {}), decoders, bool(stats.get("finished")))


VIEW = ("images", "stats_md", "plot_acc", "plot_len", "plot_hist", "stats", "captions", "snapshot")  # a replay's


def label_of(key: str | None) -> str:
    """A slot's title: the racer's label ("" for an unused slot)."""
    return RACERS.get(key) or (VANILLA[1] if key == VANILLA[0] else "")


def _vanilla(racers: list[Racer]) -> Racer | None:
    return next((r for r in racers if r.key == VANILLA[0]), None)


def tints(trace: RaceTrace, racers: list[Racer]) -> dict[str, Tensor]:
    """racer key -> (T,) int8 overlay codes: token outcomes; under same noise DIFFERS where not vanilla AR's, else 0."""
    if not trace.settings.same_noise:
        return {r.key: r.kinds for r in racers}
    reference, out = _vanilla(racers), {}
    for r in racers:
        out[r.key] = torch.zeros_like(r.kinds)
        if reference is not None and r is not reference:
            out[r.key][r.versus(reference)[0]] = DIFFERS
    return out


def agreement(trace: RaceTrace, racers: list[Racer]) -> dict[str, tuple[int, int]]:
    """racer key -> (same, compared) positions against vanilla AR; {} unless same noise with vanilla AR racing."""
    reference = _vanilla(racers)
    if not trace.settings.same_noise or reference is None:
        return {}
    return {r.key: r.versus(reference)[1:] for r in racers if r is not reference}


def images(ctx: Context, trace: RaceTrace, racers: list[Racer], overlay: bool, snapshot: dict,
           redraw: Callable[[str], str]) -> tuple:
    """Per slot: a new image where `redraw(key)` says "decode" (or "tint"), else gr.skip(); fills `snapshot`."""
    by_key = {r.key: r for r in racers}
    snapshot["model"], snapshot["variant"] = ctx.model_key, ctx.variant_key
    shown, seen = snapshot.setdefault("images", {}), snapshot.setdefault("seen", {})
    keys = slot_keys([k for k, _ in trace.racers[:-1]])
    hows = [redraw(key) if key is not None else "skip" for key in keys]
    if trace.settings.same_noise and overlay and hows[VANILLA_SLOT] == "decode":
        hows = ["tint" if how == "skip" and key in by_key else how for key, how in zip(keys, hows)]
    codes, same = tints(trace, racers), agreement(trace, racers)
    snapshot["same"] = {slot: list(same[key]) for slot, key in enumerate(keys) if key in same}
    decoded = iter(ctx.decode_many([by_key[key].tokens for key, how in zip(keys, hows) if how == "decode"]))
    out, finished = [], {}
    for slot, (key, how) in enumerate(zip(keys, hows)):
        if how == "decode":
            r, pixels = by_key[key], next(decoded)
            shown[slot] = (quantise(pixels), r.filled.clone(), codes[key].clone())  # compact: a session keeps it
            out.append(ctx.render(pixels, r.filled, codes[key], overlay))
            if r.done >= r.num_tokens and slot not in seen:
                finished[slot] = r.tokens.clone()
        elif how == "tint" and slot in shown:
            if key in codes:  # (the racer has not moved since its pixels: only the comparison may have)
                shown[slot] = (*shown[slot][:2], codes[key].clone())
            out.append(ctx.render(*shown[slot], overlay))
        else:
            out.append(SKIP)
    if finished:  # seen[slot]: the classifier's reading (None without one) against the condition asked for
        asked = ctx.judge.asked(trace.settings.condition)
        seen.update(zip(finished, ctx.judge.judge(list(finished.values()), asked, ctx.decode_pixels)))
    return tuple(out)


def captions(ctx: Context, snapshot: dict, slots=None) -> tuple:
    """Each slot's line: the classifier's reading and `same_line`; slots not in `slots` (default: all) gr.skip()."""
    seen, same = snapshot.get("seen", {}), snapshot.get("same", {})
    return tuple("\n\n".join(filter(None, (caption(ctx.judge, seen.get(slot)), same_line(ctx, same.get(slot)))))
                 if slots is None or slot in slots else SKIP for slot in range(SLOTS))


def same_line(ctx: Context, counts) -> str:
    """"same as vanilla AR at k / n tokens" ("so far" while n < T) for counts (k, n); "" for None."""
    if counts is None:
        return ""
    k, n = counts
    return f"same as vanilla AR at {k} / {n} tokens" + (" so far" if n < ctx.model.num_tokens else "")


def legend(stats) -> str:
    """The overlay legend of the race on show, from its stats JSON (None before any race: the outcome legend)."""
    shown = RaceNumbers.from_json(stats)
    return overlay_legend_html(shown.settings.noise, VANILLA[0] in shown.decoders)


def recognised(trace: RaceTrace, snapshot: dict) -> dict:
    """racer key -> the classifier's reading of its finished picture (else None)."""
    seen = snapshot.get("seen", {})
    keys = slot_keys([k for k, _ in trace.racers[:-1]])
    return {key: seen.get(slot) for slot, key in enumerate(keys) if key is not None}


def plots(trace: RaceTrace, racers: list[Racer]) -> dict:
    """plot_acc, plot_len, plot_hist of the speculative racers (vanilla AR has no drafts)."""
    spec = [r for r in racers if r.key != VANILLA[0]]
    chain_depth = trace.settings.draft_len if trace.settings.chain else 1
    depth = max([chain_depth, *(len(r.depth_sum) for r in spec)])
    omegas = {r.key: r.omega for r in spec}  # each racer's longest relaxed schedule so far (`Racer.omega`)
    return {"plot_acc": acceptance_figure(spec, depth, omegas), "plot_len": length_figure(spec),
            "plot_hist": length_histogram(spec)}


def numbers(trace: RaceTrace, racers: list[Racer], status: str, seen: dict | None = None, **extra) -> dict:
    """stats_md (table under `status`) and stats (JSON: model, settings, `extra`, per-decoder `DecoderNumbers`)."""
    stats = [r.stats(racers[-1]) for r in racers]
    seen, same = seen or {}, agreement(trace, racers)
    more = {key: {"same_as_vanilla": {"same": k, "compared": n}} for key, (k, n) in same.items()}
    payload = json_safe({"model": trace.model, "settings": trace.settings.to_json(), **extra,
                         "decoders": {r.key: s | {"recognised": seen.get(r.key)} | more.get(r.key, {})
                                      for r, s in zip(racers, stats)}})
    return {"stats_md": stats_markdown(stats, status), "stats": payload}


def draw(ctx: Context, trace: RaceTrace, step: int, overlay: bool, status: str) -> RaceFrame:
    """The race after `step` steps, from its recorded events, on `ctx` (the model it ran on)."""
    racers = trace.replay(step)
    snapshot: dict = {}
    shown = images(ctx, trace, racers, overlay, snapshot, lambda key: "decode")
    return RaceFrame(images=shown, snapshot=snapshot, captions=captions(ctx, snapshot), **plots(trace, racers),
                     **numbers(trace, racers, status, recognised(trace, snapshot), replay_step=step, steps=len(trace),
                               race_status=trace.status))


def replay_slider(steps: int, interactive: bool = True) -> gr.Slider:
    """The replay slider at a race's end (disabled without steps or while streaming)."""
    return gr.Slider(maximum=max(steps, 1), value=steps, interactive=interactive and steps > 0)


def release_trace(trace) -> None:
    """Gradio deletes a session's trace state: drop its recorded steps too."""
    if isinstance(trace, RaceTrace):
        trace.release()
