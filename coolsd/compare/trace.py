"""A race's trace (spec section 5): settings, model and every engine event in race order, to replay or save.

UI-independent. `RaceTrace.record` keeps each race step as (racer index, RoundEvent);
`RaceTrace.replay(step)` rebuilds every `coolsd.compare.race.Racer` as it was after that many steps (no
decoding: the events are recorded again), so a replay frame equals the frame of a race stopped there.
`to_json` / `from_json` give the downloadable trace (tensors as lists, nan as None).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import torch

from coolsd.compare.race import Racer
from coolsd.decoding.events import RoundEvent, TokenOutcome
from coolsd.util.jsonsafe import json_safe

TRACE_VERSION = 1
_FLOAT_FIELDS = ("accept_probs", "omega", "tested_probs")  # float tensors of a RoundEvent; the rest are int64


def event_to_json(e: RoundEvent) -> dict:
    """One RoundEvent as plain JSON (tensors -> lists, nan -> None)."""
    out = {}
    for f in fields(RoundEvent):
        v = getattr(e, f.name)
        if isinstance(v, torch.Tensor):
            v = json_safe(v.tolist())
        out[f.name] = v
    return out


def event_from_json(d: dict) -> RoundEvent:
    """Inverse of `event_to_json` (None -> nan in the float tensors)."""
    kw = dict(d)
    for name in ("tokens", "tested_depths"):
        kw[name] = torch.tensor(d[name], dtype=torch.long)
    for name in _FLOAT_FIELDS:
        kw[name] = torch.tensor([math.nan if x is None else x for x in d[name]], dtype=torch.float32)
    kw["last"] = TokenOutcome(d["last"])
    kw["seconds"] = {k: float(v) for k, v in d["seconds"].items()}
    return RoundEvent(**kw)


@dataclass
class RaceTrace:
    """Everything one race reported, in race order.

    model: model name; settings: the race's arguments (JSON-ready); racers: (key, label) per racer, in
    the race's order (vanilla AR last); num_tokens: T of one image; grid: (H, W).
    steps: (racer index, RoundEvent) per race step; status: "running" | "finished" | "stopped".
    """

    model: str
    settings: dict
    racers: list[tuple[str, str]]
    num_tokens: int
    grid: tuple[int, int]
    steps: list[tuple[int, RoundEvent]] = field(default_factory=list, repr=False)
    status: str = "running"

    def __len__(self) -> int:
        return len(self.steps)

    def record(self, racer_index: int, event: RoundEvent) -> None:
        self.steps.append((racer_index, event))

    def replay(self, step: int) -> list[Racer]:
        """Every racer as it was after the first `step` race steps (clamped to [0, len(self)])."""
        racers = [Racer(key, label, iter(()), self.num_tokens) for key, label in self.racers]
        for i, event in self.steps[: max(0, min(int(step), len(self.steps)))]:
            r = racers[i]
            r.record(event)
            r.finished = r.done >= r.num_tokens
        return racers

    def omegas(self, step: int | None = None) -> dict[str, torch.Tensor]:
        """key -> the longest omega_1..omega_n a racer's rounds reported up to `step`, for racers whose
        omega is not all ones (relaxed schedules); lossless rules and vanilla AR are left out."""
        out: dict[str, torch.Tensor] = {}
        for i, event in self.steps[: len(self.steps) if step is None else max(0, int(step))]:
            key = self.racers[i][0]
            if len(event.omega) > len(out.get(key, ())) and not bool(torch.all(event.omega == 1)):
                out[key] = event.omega.to(torch.float64)
        return out

    def to_json(self) -> dict:
        return {"version": TRACE_VERSION, "model": self.model, "settings": self.settings,
                "racers": [{"key": k, "label": label} for k, label in self.racers],
                "num_tokens": self.num_tokens, "grid": list(self.grid), "status": self.status,
                "steps": [{"racer": self.racers[i][0], "event": event_to_json(e)} for i, e in self.steps]}

    @classmethod
    def from_json(cls, data: dict) -> RaceTrace:
        if data.get("version") != TRACE_VERSION:
            raise ValueError(f"unknown trace version {data.get('version')!r} (this code reads {TRACE_VERSION})")
        racers = [(r["key"], r["label"]) for r in data["racers"]]
        index = {k: i for i, (k, _) in enumerate(racers)}
        trace = cls(data["model"], data["settings"], racers, int(data["num_tokens"]), tuple(data["grid"]),
                    status=data["status"])
        for s in data["steps"]:
            trace.record(index[s["racer"]], event_from_json(s["event"]))
        return trace
