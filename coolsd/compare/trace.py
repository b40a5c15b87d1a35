"""A race's trace (spec section 5): settings, model and every engine event in race order, to replay or save.

UI-independent. `RaceTrace.record` keeps each race step as (racer index, RoundEvent);
`RaceTrace.replay(step)` rebuilds every `coolsd.compare.race.Racer` as it was after that many steps (no
decoding: the events are recorded again), so a replay frame equals the frame of a race stopped there.
`to_json` / `from_json` give the downloadable trace (tensors as lists, nan as None); `TraceSettings` is what the
race ran with, typed, each default declared once. A model's recorded default race is one such trace, gzipped, under
assets/traces/ (`recording_path`), with a "recorded" block naming its seed (`recorded_seed`).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import itertools
import json
import math
import re
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch

from coolsd.compare.race import Racer
from coolsd.decoding.drafting import Chain, Drafting, chain_or_tree, drafting_of
from coolsd.decoding.engine import DecodeConfig
from coolsd.decoding.events import RoundEvent, TokenOutcome
from coolsd.decoding.sampling import SamplingConfig
from coolsd.decoding.variants import split_config
from coolsd.util.jsonsafe import json_safe
from coolsd.util.paths import TRACES_DIR

TRACE_VERSION = 1
_FLOAT_FIELDS = ("accept_probs", "omega", "tested_probs")  # float tensors of a RoundEvent; the rest are int64


def event_to_json(e: RoundEvent) -> dict:
    """One RoundEvent as plain JSON (tensors -> lists, nan -> None)."""
    out = {}
    for f in fields(RoundEvent):
        if f.name == "detail":  # the microscope's re-run data never goes into a trace
            continue
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


_INT_FIELDS = ("index", "start", "n_accepted", "n_drafted", "target_forwards", "draft_forwards")
_CODES = {outcome.code: outcome for outcome in TokenOutcome}


class EventStore:
    """RoundEvents kept compactly: every number in flat arrays, one row of counts per event.

    A RoundEvent holds five small tensors and a dict (about 3 KB of Python objects for a few dozen
    numbers); here an event costs its floats (8 bytes each: float64, as the engine makes them), its tokens
    and tested depths (4 bytes each) and one row of 11 ints (4 bytes each). The ints are int32: token ids,
    counts and positions of one image stay far below 2**31 (a larger one raises OverflowError). Events come
    back as equal RoundEvents (int64 / float64 tensors, as the engine makes them). A race of the emoji model
    with Eagle-1 and vanilla AR keeps about 37 KB here (58 KB with int64 arrays).
    """

    def __init__(self) -> None:
        self.rows = array("i")  # per event: racer, the _INT_FIELDS, last code, seconds keys, #tokens, #tested
        self.ints = array("i")  # tokens, tested_depths of every event, in order
        self.floats = array("d")  # accept_probs, omega, tested_probs, seconds values of every event, in order
        self.second_keys: list[tuple[str, ...]] = []  # the distinct key tuples of the seconds dicts
        self.row_len = len(_INT_FIELDS) + 5

    def __len__(self) -> int:
        return len(self.rows) // self.row_len

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (what the store costs beyond a few fixed objects)."""
        return sum(a.itemsize * len(a) for a in (self.rows, self.ints, self.floats))

    def append(self, racer: int, e: RoundEvent) -> None:
        keys = tuple(e.seconds)
        if keys not in self.second_keys:
            self.second_keys.append(keys)
        self.rows.extend([racer, *(getattr(e, name) for name in _INT_FIELDS), e.last.code, self.second_keys.index(keys),
                          len(e.tokens), len(e.tested_depths)])
        self.ints.extend(e.tokens.tolist() + e.tested_depths.tolist())
        self.floats.extend(e.accept_probs.tolist() + e.omega.tolist() + e.tested_probs.tolist()
                           + [float(v) for v in e.seconds.values()])

    def __iter__(self) -> Iterator[tuple[int, RoundEvent]]:
        """(racer index, RoundEvent) of every event, in order."""
        at_int = at_float = 0
        n_int = len(_INT_FIELDS)
        for row in range(len(self)):
            r = self.rows[row * self.row_len:(row + 1) * self.row_len]
            racer, values, (code, keys_id, n_tokens, n_tested) = r[0], r[1:1 + n_int], r[1 + n_int:]
            kw = dict(zip(_INT_FIELDS, values))
            n_drafted, keys = kw["n_drafted"], self.second_keys[keys_id]
            ints = self.ints[at_int:at_int + n_tokens + n_tested]
            floats = self.floats[at_float:at_float + 2 * n_drafted + n_tested + len(keys)]
            at_int, at_float = at_int + len(ints), at_float + len(floats)
            f64 = torch.float64
            yield racer, RoundEvent(
                **kw, tokens=torch.tensor(ints[:n_tokens], dtype=torch.long),
                tested_depths=torch.tensor(ints[n_tokens:], dtype=torch.long),
                accept_probs=torch.tensor(floats[:n_drafted], dtype=f64),
                omega=torch.tensor(floats[n_drafted:2 * n_drafted], dtype=f64),
                tested_probs=torch.tensor(floats[2 * n_drafted:2 * n_drafted + n_tested], dtype=f64),
                last=_CODES[code], seconds=dict(zip(keys, floats[len(floats) - len(keys):])))


@dataclass(frozen=True)
class TraceSettings:
    """What a race ran with (its trace's "settings"): the default of each field is the library's, read by every
    reader (a trace from before a setting existed ran at that default: no "noise" = one stream).

    condition: the class label ("cat face · Twemoji") or prompt raced; seed; sampling; draft_len (L of the shared
    chain); drafting: "chain" or a static tree's name; noise: "stream" | "same" (`coolsd.decoding.noise`);
    racers: the racer keys, panel order (vanilla AR not among them); resolution: the model variant's key; model: the
    picker's key (None: the app's); style: the emoji style ("" = none); execution: the model's precision;
    rules / draftings: racer key -> its rule's / drafting's config (`Rule.config()`, `Drafting.config()`).
    """

    condition: str = ""
    seed: int = 0
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    draft_len: int = Chain.draft_len
    drafting: str = Chain.name
    noise: str = DecodeConfig.noise
    racers: tuple[str, ...] = ()
    resolution: str | None = None
    model: str | None = None
    style: str = ""
    execution: str = ""
    rules: Mapping[str, dict] = field(default_factory=dict)
    draftings: Mapping[str, dict] = field(default_factory=dict)

    @property
    def chain(self) -> bool:
        return self.drafting == Chain.name

    @property
    def same_noise(self) -> bool:
        return self.noise == "same"

    def shared_drafting(self) -> Drafting:
        """The drafting of the racers with a drafter: a chain of `draft_len`, or the static tree named."""
        return chain_or_tree(self.draft_len, None if self.chain else self.drafting)

    def drafting_of(self, key: str | None) -> Drafting:
        """The drafting racer `key` ran (its "draftings" entry), else the race's shared chain or tree."""
        config = self.draftings.get(key)
        return drafting_of(config) if config else self.shared_drafting()

    def to_json(self) -> dict:
        """The JSON form (the stats' and the trace file's "settings"), fields in order."""
        return json_safe({f.name: getattr(self, f.name) for f in fields(self)} | {
            "sampling": dataclasses.asdict(self.sampling), "racers": list(self.racers)})

    @classmethod
    def from_json(cls, data: Mapping) -> TraceSettings:
        """The typed settings of a trace's JSON; keys it lacks take their defaults, keys this version does not know
        are left out; a trace with Jacobi drafting folded into its rules is split first (`racer_pairs`)."""
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in racer_pairs(data).items() if k in known}
        if "sampling" in kw:
            kw["sampling"] = SamplingConfig(**kw["sampling"])
        if "racers" in kw:
            kw["racers"] = tuple(kw["racers"])
        return cls(**kw)


@dataclass
class RaceTrace:
    """Everything one race reported, in race order.

    model: model name; settings: what the race ran with; racers: (key, label) per racer, in
    the race's order (vanilla AR last); num_tokens: T of one image; grid: (H, W).
    status: "running" | "finished" | "stopped". The race steps (racer index, RoundEvent) are kept in an
    EventStore (compact: a session keeps its last trace); `steps` lists them.
    """

    model: str
    settings: TraceSettings
    racers: list[tuple[str, str]]
    num_tokens: int
    grid: tuple[int, int]
    status: str = "running"
    store: EventStore = field(default_factory=EventStore, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.store)

    @property
    def steps(self) -> list[tuple[int, RoundEvent]]:
        """(racer index, RoundEvent) per race step, in race order (rebuilt from the store)."""
        return list(self.store)

    def events(self, stop: int | None = None) -> Iterator[tuple[int, RoundEvent]]:
        """The first `stop` race steps (all when None) as (racer index, RoundEvent)."""
        return itertools.islice(self.store, None if stop is None else max(0, int(stop)))

    def record(self, racer_index: int, event: RoundEvent) -> None:
        self.store.append(racer_index, event)

    def follow(self, race: Iterable[tuple[Racer, RoundEvent]]) -> Iterator[tuple[Racer, RoundEvent]]:
        """Each (racer, event) of `race` (a `coolsd.compare.race.Race` of this trace's racers), recorded as it
        passes."""
        index = {key: i for i, (key, _) in enumerate(self.racers)}
        for racer, event in race:
            self.record(index[racer.key], event)
            yield racer, event

    def release(self) -> None:
        """Drop the recorded steps (Gradio calls this when a session's trace state is deleted)."""
        self.store = EventStore()

    def replay(self, step: int) -> list[Racer]:
        """Every racer as it was after the first `step` race steps (clamped to [0, len(self)])."""
        racers = [Racer(key, label, iter(()), self.num_tokens) for key, label in self.racers]
        for i, event in self.events(step):
            r = racers[i]
            r.record(event)
            r.finished = r.done >= r.num_tokens
        return racers

    def to_json(self) -> dict:
        return {"version": TRACE_VERSION, "model": self.model, "settings": self.settings.to_json(),
                "racers": [{"key": k, "label": label} for k, label in self.racers],
                "num_tokens": self.num_tokens, "grid": list(self.grid), "status": self.status,
                "steps": [{"racer": self.racers[i][0], "event": event_to_json(e)} for i, e in self.store]}

    @classmethod
    def from_json(cls, data: dict) -> RaceTrace:
        if data.get("version") != TRACE_VERSION:
            raise ValueError(f"unknown trace version {data.get('version')!r} (this code reads {TRACE_VERSION})")
        racers = [(r["key"], r["label"]) for r in data["racers"]]
        index = {k: i for i, (k, _) in enumerate(racers)}
        trace = cls(data["model"], TraceSettings.from_json(data["settings"]), racers, int(data["num_tokens"]),
                    tuple(data["grid"]), status=data["status"])
        for s in data["steps"]:
            trace.record(index[s["racer"]], event_from_json(s["event"]))
        return trace


def racer_pairs(settings: Mapping) -> Mapping:
    """`settings` with each racer's (rule, drafting) pair as "rules" and "draftings" (key -> config). A trace
    recorded when Jacobi drafting was folded into the rule ({"rule": "sjd", "window": 8, ...}) has its configs
    split (`coolsd.decoding.variants.split_config`), and its drafter racers get the race's chain or tree."""
    if "draftings" in settings or "rules" not in settings:
        return settings
    shared = TraceSettings.from_json({k: v for k, v in settings.items() if k != "rules"}).shared_drafting()
    rules, draftings = {}, {}
    for key, config in settings["rules"].items():
        rules[key], drafting = split_config(config)
        draftings[key] = drafting or shared.config()
    return settings | {"rules": rules, "draftings": draftings}


def recording_path(model_name: str, folder: Path | None = None) -> Path:
    """The recorded default race of model `model_name` in `folder` (default assets/traces/): its name made a slug,
    "coolsd embedded (digits)" -> "coolsd-embedded-digits.json.gz"."""
    slug = re.sub(r"[^a-z0-9]+", "-", model_name.lower()).strip("-") or "model"
    return Path(folder or TRACES_DIR) / f"{slug}.json.gz"


def read_recording(path: Path) -> dict:
    """A recording's gzipped JSON (a trace's plus its "recorded" block); OSError / ValueError if unreadable."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def recorded_seed(model_name: str) -> int:
    """The seed the model's shipped recording chose (its "recorded" block's; 0 without a recording naming one)."""
    path = recording_path(model_name)
    try:
        return _seed_in(str(path), path.stat().st_mtime_ns)
    except OSError:
        return 0


@functools.lru_cache(maxsize=16)
def _seed_in(path: str, stamp: int) -> int:
    """The "recorded" seed of the file at `path` (read once per version of the file, `stamp`)."""
    try:
        recorded = read_recording(Path(path)).get("recorded")
    except (OSError, ValueError):
        return 0
    seed = recorded.get("seed") if isinstance(recorded, dict) else None
    return seed if isinstance(seed, int) and seed >= 0 else 0
