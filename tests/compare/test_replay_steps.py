"""Replay between the ends (issue 20, gap 3): at EVERY step k of a recorded race, `RaceTrace.replay(k)` holds
exactly the first k recorded steps (tokens, outcomes, counts, numbers) and equals the race stopped after k.

The race runs real engine rounds (chain, tree and vanilla lanes on tabular models) under a deterministic
phase clock, so a second race with the same seeds reports the same seconds and the same order, and
"the race stopped after k steps" is a fresh race advanced k steps.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from coolsd import CoolSDRule, DecodeConfig, EagleRule, LinearDecayRule, generate, random_tables
from coolsd.compare.race import Race, Racer
from coolsd.compare.trace import RaceTrace, TraceSettings
from coolsd.decoding.drafting import chain_or_tree
from coolsd.decoding.events import TokenOutcome

V, T = 3, 8
LANES = [("eagle-1", EagleRule(), None), ("cool-sd", CoolSDRule(delta=2.0), None),
         ("linear-tree", LinearDecayRule(delta=1.5, slope=0.8), "binary-2"), ("vanilla", None, None)]
ACCEPTED, RESAMPLED, BONUS = (TokenOutcome(k).code for k in ("accepted", "resampled", "bonus"))  # Racer.kinds


@pytest.fixture(scope="module")
def tables():
    return random_tables(V, T, seed=3, draft_noise=2.0)  # far drafts: rejections in the first rounds


def new_race(tables, seed: int = 4) -> Race:
    target, drafter = tables
    return Race([Racer(key, key, generate(target.fork(), drafter.fork(), rule, cond=None,
                                          num_tokens=T, config=DecodeConfig(chain_or_tree(3, tree)), seed=seed), T)
                 for key, rule, tree in LANES])


def _plain(v):
    """Comparable plain values: tensors -> lists, nan -> the string "nan" (nan != nan), dicts and lists deep."""
    if isinstance(v, torch.Tensor):
        return _plain(v.tolist())
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return "nan" if isinstance(v, float) and math.isnan(v) else v


def state(racers: list[Racer]) -> list[dict]:
    """Everything a frame shows of each racer (grid, outcomes, counts, running numbers, stats vs vanilla)."""
    return [_plain({"key": r.key, "tokens": r.tokens, "kinds": r.kinds, "done": r.done, "seconds": r.seconds,
                    "target_forwards": r.target_forwards, "draft_forwards": r.draft_forwards, "rounds": r.rounds,
                    "finished": r.finished, "depth_sum": r.depth_sum, "depth_count": r.depth_count,
                    "omega": r.omega, "round_tokens": r.round_tokens, "tau": r.tau, "accept_rate": r.accept_rate,
                    "stats": r.stats(racers[-1])}) for r in racers]


@pytest.fixture
def recorded(tables, fake_clock):
    """(trace, frames): a race recorded step by step, and the live state of its racers after each step
    (frames[k] = after k steps; frames[0] before any)."""
    fake_clock()
    race = new_race(tables)
    trace = RaceTrace("tabular", TraceSettings(seed=4), [(r.key, r.label) for r in race.racers], T, (2, 4))
    frames = [state(race.racers)]
    index = {r.key: i for i, r in enumerate(race.racers)}
    for racer, event in race:
        trace.record(index[racer.key], event)
        frames.append(state(race.racers))
    return trace, frames


def longest_relaxed(omegas: list[list[float]]) -> list[float]:
    """The first of the longest schedules that are not all ones, or [] (what `Racer.omega` keeps)."""
    out: list[float] = []
    for w in omegas:
        if len(w) > len(out) and w != [1.0] * len(w):
            out = w
    return out


def expected(trace: RaceTrace, k: int) -> list[dict]:
    """Each racer's numbers derived from the first k recorded steps alone."""
    out = []
    for i in range(len(trace.racers)):
        events = [e for j, e in trace.steps[:k] if j == i]
        tokens = [int(x) for e in events for x in e.tokens]
        depths = [int(d) for e in events for d in e.tested_depths]
        probs = [float(a) for e in events for a in e.tested_probs]
        n = max(depths, default=0)
        out.append({
            "tokens": tokens + [-1] * (T - len(tokens)),
            "kinds": [TokenOutcome(c).code for e in events for c in e.kinds] + [0] * (T - len(tokens)),
            "done": len(tokens), "rounds": len(events), "finished": len(tokens) == T,
            "seconds": sum(sum(e.seconds.values()) for e in events),
            "target_forwards": sum(e.target_forwards for e in events),
            "draft_forwards": sum(e.draft_forwards for e in events),
            "depth_count": [float(depths.count(d)) for d in range(1, n + 1)],
            "depth_sum": [sum(a for a, d0 in zip(probs, depths) if d0 == d) for d in range(1, n + 1)],
            "omega": longest_relaxed([e.omega.tolist() for e in events]),
            "round_tokens": [len(e.tokens) for e in events if e.index > 0],
        })
    return out


def test_the_recorded_race_has_interior_steps_worth_checking(recorded):
    trace, frames = recorded
    assert len(trace) == len(frames) - 1 >= 15
    assert len({i for i, _ in trace.steps[:6]}) > 2  # interleaved lanes
    kinds = {c for f in frames[-1] for c in f["kinds"]}
    assert {ACCEPTED, RESAMPLED, BONUS} <= kinds


def test_replay_at_every_step_holds_exactly_the_first_k_steps(recorded):
    trace, frames = recorded
    for k in range(len(trace) + 1):
        replayed = state(trace.replay(k))
        for got, want in zip(replayed, expected(trace, k)):
            assert {name: got[name] for name in want} == _plain(want), (k, got["key"])


def test_replay_at_every_step_equals_the_live_race_at_that_step(recorded):
    trace, frames = recorded
    for k, frame in enumerate(frames):
        assert state(trace.replay(k)) == frame, k
    assert state(trace.replay(len(trace) + 5)) == frames[-1] and state(trace.replay(-1)) == frames[0]


def test_replay_at_every_step_equals_a_race_stopped_after_k_steps(tables, fake_clock, recorded):
    """A fresh race with the same seeds, advanced k steps and left there, is what replay(k) shows."""
    trace, _ = recorded
    for k in range(len(trace) + 1):
        fake_clock()
        race = new_race(tables)
        for _ in range(k):
            assert race.step() is not None
        assert state(trace.replay(k)) == state(race.racers), k
        race.close()


def test_the_plotted_schedules_at_every_step_come_from_the_first_k_steps(recorded):
    """The acceptance plot's dashed omegas (each replayed racer's `omega`) after k steps: the longest relaxed
    schedule in that racer's first k steps; relaxed racers only."""
    trace, _ = recorded
    for k in range(len(trace) + 1):
        want = {key: longest_relaxed([e.omega.tolist() for j, e in trace.steps[:k] if j == i])
                for i, (key, _) in enumerate(trace.racers)}
        assert {r.key: r.omega.tolist() for r in trace.replay(k)} == want, k
    assert {r.key for r in trace.replay(len(trace)) if len(r.omega)} == {"cool-sd", "linear-tree"}


def test_a_saved_trace_replays_the_same_at_every_step(recorded):
    """Through JSON (a download, the API): tokens, outcomes, counts and seconds exact at every step; the
    acceptance numbers and omega to float32 precision (a loaded trace holds its float fields as float32)."""
    trace, frames = recorded
    back = RaceTrace.from_json(json.loads(json.dumps(trace.to_json())))
    exact_fields = ("key", "tokens", "kinds", "done", "seconds", "target_forwards", "draft_forwards", "rounds",
                    "finished", "depth_count", "round_tokens", "tau")
    for k, frame in enumerate(frames):
        for got, live in zip(state(back.replay(k)), frame):
            assert {n: got[n] for n in exact_fields} == {n: live[n] for n in exact_fields}, k
            for name in ("depth_sum", "omega"):
                assert len(got[name]) == len(live[name]), (k, name)
                assert all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(got[name], live[name])), (k, name)
