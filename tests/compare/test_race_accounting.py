"""The race's compute accounting (issue 20, gap 2): every phase of every round is charged to its decoder.

The least-compute race advances the unfinished decoder that has spent the least compute so far, where
compute is ALL of a round's wall time: draft + verify + other. Here the rounds spend time in every
phase, in different proportions per decoder, so charging only some phases changes the totals and the
order of the lanes; `schedule` below is the order the rule gives, computed from the events alone.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from coolsd import CoolSDRule, DecodeConfig, EagleRule, RoundEvent, UniformRSDRule, generate, random_tables
from coolsd.compare.race import Race, Racer
from coolsd.decoding.drafting import chain_or_tree
from coolsd.decoding.events import TokenOutcome

PHASES = ("draft", "verify", "other")


def fake_lane(seconds: dict[str, float], rounds: int, tokens_per_round: int) -> list[RoundEvent]:
    """Events of a decoder that commits `tokens_per_round` tokens per round and spends `seconds` (phase -> s)
    in each round."""
    f = torch.float64
    return [RoundEvent(index=i, start=i * tokens_per_round, tokens=torch.arange(tokens_per_round),
                       n_accepted=tokens_per_round - 1, n_drafted=0, accept_probs=torch.zeros(0, dtype=f),
                       omega=torch.zeros(0, dtype=f), tested_depths=torch.zeros(0, dtype=torch.long),
                       tested_probs=torch.zeros(0, dtype=f), last=TokenOutcome.BONUS, target_forwards=1,
                       draft_forwards=1, seconds=dict(seconds)) for i in range(rounds)]


def schedule(lanes: dict[str, list[RoundEvent]], phases=PHASES) -> list[str]:
    """The least-compute order of a race of these lanes (each finishes with its last event): repeatedly the
    unfinished lane with the least seconds charged so far (ties: the earlier lane), charged the seconds of
    `phases` of its next round."""
    spent, left = dict.fromkeys(lanes, 0.0), {key: list(events) for key, events in lanes.items()}
    order = []
    while any(left.values()):
        key = min((k for k in lanes if left[k]), key=lambda k: spent[k])
        event = left[key].pop(0)
        spent[key] += sum(event.seconds[p] for p in phases)
        order.append(key)
    return order


def proper_subsets(phases=PHASES):
    return [s for n in range(1, len(phases)) for s in itertools.combinations(phases, n)]


def test_every_phase_is_charged_and_sets_the_order():
    """Three decoders whose rounds cost 1.0, 0.75 and 1.0 s, split differently over the phases."""
    lanes = {"drafty": fake_lane({"draft": 0.5, "verify": 0.25, "other": 0.25}, 3, 2),
             "light": fake_lane({"draft": 0.0, "verify": 0.5, "other": 0.25}, 3, 2),
             "busy": fake_lane({"draft": 0.25, "verify": 0.25, "other": 0.5}, 3, 2)}
    racers = [Racer(key, key, iter(events), 6) for key, events in lanes.items()]
    order = [racer.key for racer, _ in Race(racers)]
    # by hand: totals 0/0/0 -> drafty 1; light 0.75; busy 1; light 1.5; drafty 2 (tie, first); busy 2; ...
    assert order == ["drafty", "light", "busy", "light", "drafty", "busy", "light", "drafty", "busy"]
    assert order == schedule(lanes)
    for subset in proper_subsets():  # the test has power: charging only some phases gives another order
        assert schedule(lanes, subset) != order, subset
    drafty, light, busy = racers
    assert (drafty.seconds, light.seconds, busy.seconds) == (3.0, 2.25, 3.0)  # dyadic: exact sums
    assert light.stats(drafty)["compute_seconds"] == 2.25
    assert light.tokens_per_second == 6 / 2.25 and drafty.speedup(light) == pytest.approx(0.75)


def test_seconds_after_every_step_are_the_sum_of_every_phase():
    """Step by step, each racer's compute is the sum over its rounds so far of draft + verify + other."""
    lanes = {"a": fake_lane({"draft": 0.125, "verify": 0.5, "other": 0.375}, 4, 1),
             "b": fake_lane({"draft": 0.625, "verify": 0.125, "other": 0.0625}, 4, 1)}
    racers = [Racer(key, key, iter(events), 4) for key, events in lanes.items()]
    race, seen = Race(racers), {"a": 0, "b": 0}
    while (out := race.step()) is not None:
        racer, _ = out
        seen[racer.key] += 1
        for r in racers:
            assert r.seconds == sum(sum(e.seconds.values()) for e in lanes[r.key][: seen[r.key]])
    assert racers[0].seconds == 4.0 and racers[1].seconds == 3.25


# ---------------------------------------------------------------- a real race (tabular models, fake clock)
V, T = 3, 8
LANES = [("eagle-1", EagleRule(), None), ("cool-sd", CoolSDRule(delta=2.0), None),
         ("uniform-rsd-tree", UniformRSDRule(delta=1.7), "binary-2"), ("vanilla", None, None)]


@pytest.fixture(scope="module")
def tables():
    return random_tables(V, T, seed=2)


def real_race(tables, seed: int = 5) -> Race:
    """One racer per LANES entry, each on its own handles of the tabular models (L = 3 for chains)."""
    target, drafter = tables
    racers = []
    for key, rule, tree in LANES:
        events = generate(target.fork(), drafter.fork(), rule, cond=None, num_tokens=T,
                          config=DecodeConfig(chain_or_tree(3, tree)), seed=seed)
        racers.append(Racer(key, key, events, T))
    return Race(racers)


def test_a_real_race_charges_every_phase_and_schedules_on_the_sum(tables, fake_clock):
    """Engine rounds (chain, tree, vanilla) spend time in every phase; each racer is charged all of it, and
    the race's order is the least-compute order of the events' total seconds, not of any part of them."""
    race = real_race(tables)
    steps = [(racer.key, event) for racer, event in race]
    lanes = {key: [e for k, e in steps if k == key] for key, _, _ in LANES}
    for racer in race.racers:
        events = lanes[racer.key]
        totals = {p: sum(e.seconds[p] for e in events) for p in PHASES}
        assert all(totals[p] > 0 for p in PHASES if racer.key != "vanilla" or p != "draft"), (racer.key, totals)
        assert racer.seconds == sum(sum(e.seconds.values()) for e in events)  # dyadic seconds: exact
        assert racer.finished and racer.done == T
    order = [key for key, _ in steps]
    assert len(set(order[:6])) > 2  # interleaved
    assert order == schedule(lanes)
    for subset in proper_subsets():
        assert schedule(lanes, subset) != order, subset


def test_work_on_other_threads_is_never_charged_to_a_racer(tables):
    """A page that draws its frames on another thread (here: a thread burning CPU for the whole race, holding the
    interpreter between its own ticks) lands in no racer's compute: on a CPU each round is timed on its own
    thread's CPU clock (`coolsd.decoding.round.clock_source`), so the racers together are charged no more than the
    racing thread's own CPU time (on the wall clock they would be charged the painter's turns too), and each racer
    only its own rounds."""
    import threading
    import time

    from coolsd.decoding.round import clock_source

    assert clock_source(torch.device("cpu")) is time.thread_time
    stop, burned = threading.Event(), []

    def draw_frames() -> None:
        t0 = time.thread_time()
        while not stop.is_set():
            sum(i * i for i in range(2000))  # a slow frame, in Python: it holds the interpreter
        burned.append(time.thread_time() - t0)

    painter = threading.Thread(target=draw_frames)
    painter.start()
    try:
        race = real_race(tables)
        t0 = time.thread_time()
        steps = [(racer.key, event) for racer, event in race]
        racing = time.thread_time() - t0  # this thread's CPU for the whole race, bookkeeping included
        time.sleep(0.05)
    finally:
        stop.set()
        painter.join()
    charged = sum(r.seconds for r in race.racers)
    assert charged <= racing and burned[0] > 0.2 * racing, (charged, racing, burned)  # wall time: charged > racing
    for racer in race.racers:
        assert racer.seconds == pytest.approx(sum(sum(e.seconds.values()) for k, e in steps if k == racer.key))
