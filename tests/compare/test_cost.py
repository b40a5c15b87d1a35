"""The cost model (coolsd.compare.cost) against hand numbers and a race's own events; the timing on a fake clock."""

from __future__ import annotations

import math
import threading
import time

import pytest
import torch

from coolsd.compare import cost
from coolsd.compare.race import Race, Racer
from coolsd.decoding.drafting import Chain, Jacobi
from coolsd.decoding.engine import DecodeConfig, generate
from coolsd.decoding.rules import CoolSDRule, EagleRule
from coolsd.models.protocol import ModelStep
from coolsd.models.timing import ForwardTimes, forward_times, interleaved_medians, median_seconds
from coolsd.theory.tabular import random_tables


# ---------------------------------------------------------------- the formula, by hand
def test_expected_tokens_and_speedup_by_hand():
    # E = 1 + 0.8 + 0.8*0.5 + 0.8*0.5*0.25 = 2.3; a round costs 3 * 0.1 + 1.2 = 1.5 target steps
    assert cost.expected_tokens([0.8, 0.5, 0.25]) == pytest.approx(2.3, abs=1e-12)
    assert cost.predicted_speedup([0.8, 0.5, 0.25], 0.1, 1.2) == pytest.approx(2.3 / 1.5, abs=1e-12)
    assert cost.expected_tokens([]) == 1.0  # vanilla AR: one token per step
    assert cost.expected_tokens([1.0] * 4) == 5.0  # every draft kept: L + 1
    assert cost.predicted_speedup([1.0] * 4, 0.0, 1.0) == 5.0  # free drafts, free verify: the ideal L + 1


def test_costs_in_target_steps_and_memory_bound():
    times = ForwardTimes(target_s=(0.002, 0.0024, 0.0026, 0.003, 0.004), drafter_s=0.0005, rows=2, context=8,
                         repeats=3)
    costs = cost.Costs(times)
    assert costs.step_ms == pytest.approx(2.0) and costs.draft_cost == pytest.approx(0.25)
    assert costs.verify_cost(4) == pytest.approx(1.5) and costs.verify_cost(1) == 1.0
    # L = 3: E = 1 + 0.9 + 0.72 + 0.576 = 3.196; cost = 3 * 0.25 + 1.5 = 2.25
    assert costs.speedup([0.9, 0.8, 0.8]) == pytest.approx(3.196 / 2.25, abs=1e-12)
    free = cost.Costs(times, memory_bound=True)
    assert free.verify_cost(4) == 1.0 and free.speedup([0.9, 0.8, 0.8]) == pytest.approx(3.196 / 1.75, abs=1e-12)
    assert [p["steps"] for p in costs.curve()] == pytest.approx([1.0, 1.2, 1.3, 1.5, 2.0])


def test_the_curve_is_each_token_count_with_its_milliseconds_and_steps():
    """The cost tab's curve (JSON): per n = 1..n_max the measured milliseconds and V(n); the measured V(n)
    also when the prediction is memory-bound (V = 1)."""
    times = ForwardTimes(target_s=(0.004, 0.005, 0.008), drafter_s=None, rows=1, context=8, repeats=3)
    approx = pytest.approx
    expected = [{"tokens": 1, "ms": approx(4.0), "steps": 1.0}, {"tokens": 2, "ms": approx(5.0), "steps": 1.25},
                {"tokens": 3, "ms": approx(8.0), "steps": 2.0}]
    assert cost.Costs(times).curve() == expected
    assert cost.Costs(times, memory_bound=True).curve() == expected


@pytest.mark.parametrize("args, message", [
    (([1.2], 0.1, 1.0), "acceptance at depth 1 must be in [0, 1]"),
    (([0.5, -0.1], 0.1, 1.0), "acceptance at depth 2 must be in [0, 1]"),
    (([0.5], -1.0, 1.0), "draft cost c must be >= 0"),
    (([0.5], 0.1, 0.0), "verify cost V must be > 0"),
    (([math.nan], 0.1, 1.0), "must be a finite number"),
])
def test_bad_inputs_name_the_input(args, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        cost.predicted_speedup(*args)


# ---------------------------------------------------------------- E from a race, recomputed from its events
def _race(rules: dict, draft_len: int, num_tokens: int = 5, draftings: dict | None = None):
    """Race `rules` (key -> rule) on a chain of `draft_len`, or on `draftings[key]` where given."""
    target, drafter = random_tables(4, num_tokens, seed=3)
    racers = []
    for key, rule in rules.items():
        t, d = target.fork(), drafter.fork()
        config = DecodeConfig((draftings or {}).get(key, Chain(draft_len)))
        events = generate(t, d, rule, cond=None, num_tokens=num_tokens, config=config, seed=11)
        racers.append(Racer(key, key, events, num_tokens))
    log = {r.key: [] for r in racers}
    for racer, event in Race(racers):
        log[racer.key].append(event)
    return racers, log


def test_prediction_uses_the_race_acceptance_recomputed_from_events():
    L = 3
    racers, log = _race({"eagle-1": EagleRule(), "cool-sd": CoolSDRule(delta=2.0), "vanilla": None}, L)
    times = ForwardTimes(target_s=(0.01, 0.011, 0.012, 0.013), drafter_s=0.002, rows=1, context=2, repeats=1)
    rows = {row["key"]: row for row in cost.compare_racers(racers, cost.Costs(times), L, reference=racers[-1])}
    for key in ("eagle-1", "cool-sd"):
        sums, counts = [0.0] * L, [0] * L
        for e in log[key]:
            for depth, a in zip(e.tested_depths.tolist(), e.tested_probs.tolist()):
                sums[depth - 1] += a
                counts[depth - 1] += 1
        accept = [s / c if c else 0.0 for s, c in zip(sums, counts)]
        e_hand = 1 + accept[0] + accept[0] * accept[1] + accept[0] * accept[1] * accept[2]
        assert rows[key]["acceptance"] == pytest.approx(accept, abs=1e-12)
        assert rows[key]["expected_tokens"] == pytest.approx(e_hand, abs=1e-12)
        assert rows[key]["predicted_speedup"] == pytest.approx(e_hand / (L * 0.2 + 1.3), abs=1e-12)
        per_round = [len(e.tokens) for e in log[key] if e.index > 0]
        assert rows[key]["measured_tokens_per_round"] == pytest.approx(sum(per_round) / len(per_round))
        racer = next(r for r in racers if r.key == key)
        assert rows[key]["measured_speedup"] == pytest.approx(racer.speedup(racers[-1]))
    assert rows["vanilla"]["predicted_speedup"] == 1.0 and rows["vanilla"]["measured_speedup"] == pytest.approx(1.0)


def test_sjd_is_predicted_with_its_window_and_no_drafter():
    """SJD (issue 36): an iteration is one target forward of W + 1 tokens: L = W, c = 0, whatever the race's L."""
    L, W = 2, 3
    racers, log = _race({"eagle-1": EagleRule(), "sjd": EagleRule(), "vanilla": None}, L, draftings={"sjd": Jacobi(W)})
    times = ForwardTimes(target_s=(0.01, 0.011, 0.012, 0.013), drafter_s=0.002, rows=1, context=2, repeats=1)
    costs = cost.Costs(times)
    rows = {row["key"]: row for row in cost.compare_racers(racers, costs, L, racers[-1], chain=False,
                                                           windows={"sjd": W})}
    sjd = rows["sjd"]
    assert len(sjd["acceptance"]) == W and sjd["predicted_speedup"] == pytest.approx(sjd["expected_tokens"] / 1.3)
    assert math.isnan(rows["eagle-1"]["predicted_speedup"])  # (chain=False: a tree race; SJD is still modelled)
    assert all(e.draft_forwards == 0 for e in log["sjd"])
    assert costs.jacobi_speedup([0.5] * W) == pytest.approx(cost.expected_tokens([0.5] * W) / 1.3)
    assert math.isnan(costs.jacobi_speedup([0.5] * 4))  # W + 1 = 5 tokens: beyond the measured curve


# ---------------------------------------------------------------- the measurement, on a fake clock and model
class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeModel:
    """A model whose calls take `base + per_token * n` fake seconds (n new tokens) and record its cache length."""

    vocab_size = 4

    def __init__(self, clock: FakeClock, base: float, per_token: float, rows: int = 2):
        self.clock, self.base, self.per_token, self.rows = clock, base, per_token, rows
        self.device, self.slots, self.calls = torch.device("cpu"), 0, []

    @property
    def length(self) -> int:
        return self.slots

    def start(self, cond, guidance):
        self.slots = 0
        self.rows = 2 if guidance else 1
        return ModelStep(torch.zeros(self.rows, 1, 4), torch.zeros(self.rows, 1, 3))

    def forward(self, ids, *args, **kwargs):
        self.clock.now += self.base + self.per_token * len(ids)
        self.calls.append((self.slots, len(ids)))
        self.slots += len(ids)
        return ModelStep(torch.zeros(self.rows, len(ids), 4), torch.zeros(self.rows, len(ids), 3))

    def crop(self, length, keep=None):
        self.slots = length


def test_forward_times_on_a_fake_clock():
    clock = FakeClock()
    target, drafter = FakeModel(clock, 0.004, 0.001), FakeModel(clock, 0.0007, 0.0)
    times = forward_times(target, drafter, cond=0, guidance=True, max_tokens=5, context=6, repeats=3, clock=clock)
    assert times.target_s == pytest.approx([0.004 + 0.001 * n for n in range(1, 6)], abs=1e-12)
    assert times.drafter_s == pytest.approx(0.0007, abs=1e-12)
    assert (times.rows, times.context, times.repeats) == (2, 6, 3)
    # every timed call starts after the context (the cache is cropped back each time)
    assert all(slots == 6 for slots, n in target.calls[1:]) and target.length == 6 and drafter.length == 6
    assert times.verify_steps(4) == pytest.approx(0.008 / 0.005)


def test_median_seconds_takes_the_median_after_warmup():
    clock = FakeClock()
    costs = iter([100.0, 100.0, 3.0, 1.0, 2.0, 50.0, 4.0])  # two warm-up calls, then five timed

    def call():
        clock.now += next(costs)

    assert median_seconds(call, repeats=5, warmup=2, clock=clock) == 3.0


def test_interleaved_medians_time_in_turns_so_a_load_change_hits_every_candidate():
    clock = FakeClock()
    order = []

    def call(name, cost):
        def fn():
            order.append(name)
            clock.now += cost * (3.0 if len(order) > 8 else 1.0)  # the machine gets 3x slower midway
        return fn

    medians = interleaved_medians({"a": call("a", 2.0), "b": call("b", 1.0)}, repeats=7, warmup=1, clock=clock)
    assert order == ["a", "b"] * 8  # one untimed turn, then seven timed turns
    # a's timed calls are 2, 2, 2, 6, 6, 6, 6 and b's 1, 1, 1, 3, 3, 3, 3: timed one after the other,
    # a would have had the fast machine and b the slow one (2 vs 3)
    assert medians == {"a": 6.0, "b": 3.0}  # both medians see the same slow-down, so b still wins
    assert median_seconds(call("c", 1.0), repeats=3, warmup=0, clock=clock) == 3.0
    with pytest.raises(ValueError, match="repeats"):
        interleaved_medians({"a": call("a", 1.0)}, repeats=0)


# ---------------------------------------------------------------- measured once, in the background
def test_curve_cache_measures_once_and_reports_failures():
    calls = []
    times = ForwardTimes((0.01,), None, 1, 1, 1)

    def measure():
        calls.append(1)
        return times

    cache = cost.CurveCache()
    cache.start("m", measure)
    cache.start("m", measure)
    assert cache.get("m", timeout=10) is times and calls == [1]

    def broken():
        raise RuntimeError("no device")

    cache.start("bad", broken)
    with pytest.raises(RuntimeError, match=r"^measuring the call times failed: RuntimeError: no device$"):
        cache.get("bad", timeout=10)
    with pytest.raises(KeyError, match="no measurement started for 'never'"):
        cache.get("never", timeout=0)


def test_curve_cache_answers_none_while_measuring_on_a_daemon_thread():
    """get(key, timeout) waits at most `timeout` seconds, then answers None while the measurement runs; it runs
    on a daemon thread named after its key (the app can exit mid-measurement; a thread dump says what runs)."""
    times = ForwardTimes((0.01,), None, 1, 1, 1)
    release, seen = threading.Event(), {}

    def slow():
        thread = threading.current_thread()
        seen.update(name=thread.name, daemon=thread.daemon)
        assert release.wait(5)  # (a get that waited for this would fail here, 5 s on)
        return times

    cache = cost.CurveCache()
    cache.start("tiny/cpu", slow)
    t0 = time.monotonic()
    assert cache.get("tiny/cpu", timeout=0.05) is None and time.monotonic() - t0 < 10
    release.set()
    assert cache.get("tiny/cpu", timeout=30) is times
    assert seen == {"name": "coolsd-cost-tiny/cpu", "daemon": True}


def test_forward_times_through_the_real_protocol_leave_models_usable(tiny):
    """On the tiny Llama + Eagle head: one time per token count, both CFG rows, and the handles decode afterwards."""
    from coolsd.compare.race import fork_models
    from coolsd.decoding.engine import run

    target, drafter = fork_models(tiny.target, tiny.drafter)
    times = forward_times(target, drafter, cond=1, guidance=True, max_tokens=3, context=4, repeats=1, warmup=0)
    assert len(times.target_s) == 3 and all(t > 0 for t in times.target_s) and times.drafter_s > 0
    assert times.rows == 2 and target.length == 4
    again = run(target, drafter, EagleRule(), cond=1, num_tokens=tiny.num_tokens, sampling=tiny.default_sampling,
                seed=5)
    fresh = run(*fork_models(tiny.target, tiny.drafter), EagleRule(), cond=1, num_tokens=tiny.num_tokens,
                sampling=tiny.default_sampling, seed=5)
    assert torch.equal(again.tokens, fresh.tokens)
