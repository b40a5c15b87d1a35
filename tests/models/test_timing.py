"""The timing of a call (`coolsd.models.timing`), exactly, on a fake clock and a fake device queue (issue 27).

Pinned: the documented defaults (7 timed calls after 2 untimed ones; 9 token counts after 64 cached tokens),
the bounds of every count (both sides), that a call is timed up to the end of its device work (synchronised
after the call, and before it so earlier queued work is not charged), the positions each timed call is
fed and the cache length it is cropped back to, and `verify_steps`' range.
"""

from __future__ import annotations

import pytest
import torch

from coolsd.models import timing
from coolsd.models.protocol import ModelStep
from coolsd.models.timing import ForwardTimes, forward_times, interleaved_medians, median_seconds


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def counted(clock: Clock, costs):
    """fn() advancing the clock by the next cost; fn.calls counts the calls."""
    costs = iter(costs)

    def fn():
        fn.calls += 1
        clock.now += next(costs)

    fn.calls = 0
    return fn


# ---------------------------------------------------------------- medians
def test_median_seconds_defaults_to_two_untimed_and_seven_timed_calls():
    clock = Clock()
    # 2 untimed (huge), then 7 timed: sorted 1..7, median 4; a median of 5 or 9 calls would differ
    fn = counted(clock, [1000.0, 1000.0, 7.0, 1.0, 6.0, 2.0, 5.0, 3.0, 4.0, 1000.0, 1000.0])
    assert median_seconds(fn, clock=clock) == 4.0 and fn.calls == 9
    clock2 = Clock()
    fn2 = counted(clock2, [1000.0, 1000.0, 7.0, 1.0, 6.0, 2.0, 5.0, 3.0, 4.0])
    assert interleaved_medians({"a": fn2}, clock=clock2) == {"a": 4.0} and fn2.calls == 9


@pytest.mark.parametrize("repeats, warmup, expected_calls", [(1, 0, 1), (1, 3, 4), (3, 0, 3)])
def test_the_smallest_counts_are_allowed(repeats, warmup, expected_calls):
    clock = Clock()
    fn = counted(clock, [2.0] * 10)
    assert median_seconds(fn, repeats=repeats, warmup=warmup, clock=clock) == 2.0 and fn.calls == expected_calls


@pytest.mark.parametrize("repeats, warmup, name", [(0, 2, "repeats"), (-1, 2, "repeats"), (3, -1, "warmup")])
def test_counts_below_the_bounds_are_refused(repeats, warmup, name):
    with pytest.raises(ValueError, match=f"{name} must be >= {1 if name == 'repeats' else 0}"):
        median_seconds(lambda: None, repeats=repeats, warmup=warmup)
    with pytest.raises(ValueError, match=name):
        interleaved_medians({"a": lambda: None}, repeats=repeats, warmup=warmup)


def test_a_call_is_timed_to_the_end_of_its_device_work_and_no_earlier_work():
    """A device that queues work: fn() queues `cost` seconds, sync() waits for the queue. Each timed call must
    see exactly its own cost: synchronised after it (else 0) and before it (else the warm-up's or the previous
    call's queued work would be charged to it)."""
    clock, queued = Clock(), [0.0]

    def sync():
        clock.now += queued[0]
        queued[0] = 0.0

    def queues(costs):
        costs = iter(costs)

        def fn():
            queued[0] += next(costs)
        return fn

    # a slow warm-up call left queued, then the timed call(s) of 3 s each
    assert median_seconds(queues([50.0, 3.0]), repeats=1, warmup=1, sync=sync, clock=clock) == 3.0
    assert median_seconds(queues([50.0, 3.0, 3.0, 3.0]), repeats=3, warmup=1, sync=sync, clock=clock) == 3.0
    assert interleaved_medians({"a": queues([50.0, 3.0]), "b": queues([40.0, 2.0])}, repeats=1, warmup=1, sync=sync,
                               clock=clock) == {"a": 3.0, "b": 2.0}
    assert queued[0] == 0.0


def test_device_sync_waits_for_cuda_and_nothing_else(monkeypatch):
    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(device))
    assert timing.device_sync("cpu")() is None and waited == []
    timing.device_sync("cuda:1")()
    assert waited == [torch.device("cuda:1")]


# ---------------------------------------------------------------- forward_times
class FakeModel:
    """A cache of `slots` tokens; every forward takes `base + per_token * n` fake seconds and is logged with
    its ids, hidden features and positions."""

    def __init__(self, clock: Clock, base: float, per_token: float, features: bool = True) -> None:
        self.clock, self.base, self.per_token, self.features = clock, base, per_token, features
        self.device, self.slots, self.calls, self.rows, self.started = torch.device("cpu"), 0, [], 1, []

    @property
    def length(self) -> int:
        return self.slots

    def start(self, cond, guidance):
        self.slots, self.rows = 0, 2 if guidance else 1
        self.started.append((cond, guidance))
        return ModelStep(torch.zeros(self.rows, 1, 4), torch.full((self.rows, 1, 3), -1.0) if self.features else None)

    def forward(self, ids, hidden=None, positions=None):
        if positions is None:  # a target: forward(ids, positions)
            hidden, positions = None, hidden
        self.clock.now += self.base + self.per_token * len(ids)
        self.calls.append({"slots": self.slots, "n": len(ids), "positions": positions.tolist(), "hidden": hidden})
        self.slots += len(ids)
        feats = torch.arange(self.slots - len(ids), self.slots, dtype=torch.float32).view(1, -1, 1)
        return ModelStep(torch.zeros(self.rows, len(ids), 4),
                         feats.expand(self.rows, -1, 3).clone() if self.features else None)

    def crop(self, length, keep=None):
        self.slots = length


def test_forward_times_defaults_and_what_each_timed_call_is_fed():
    clock = Clock()
    target, drafter = FakeModel(clock, 0.004, 0.001), FakeModel(clock, 0.0007, 0.0)
    times = forward_times(target, drafter, cond=0, clock=clock)
    assert (times.rows, times.context, times.repeats) == (2, 64, 7)  # guidance on by default: both rows
    assert times.target_s == pytest.approx([0.004 + 0.001 * n for n in range(1, 10)], abs=1e-12)  # n = 1..9
    assert times.drafter_s == pytest.approx(0.0007, abs=1e-12)
    context_call, *timed = target.calls
    assert context_call["positions"] == list(range(64)) and context_call["slots"] == 0
    assert len(timed) == 9 * (2 + 7)  # per token count: 2 untimed + 7 timed calls
    for call in timed:
        n = call["n"]
        assert call["slots"] == 64 and call["positions"] == list(range(64, 64 + n))
    draft_context, *steps = drafter.calls
    assert draft_context["positions"] == list(range(64))
    # the drafter reads the feature before each token: the prefix step's, then the context's first 63
    hidden = draft_context["hidden"]
    assert hidden.shape == (2, 64, 3) and hidden[0, 0, 0] == -1.0 and hidden[0, 1:, 0].tolist() == list(range(63))
    assert len(steps) == 2 + 7
    for call in steps:  # one token after the context, its own last feature (as in a chain round's later steps)
        assert call["slots"] == 64 and call["n"] == 1 and call["positions"] == [64]
        assert call["hidden"].shape == (2, 1, 3) and float(call["hidden"][0, 0, 0]) == 63.0
    assert target.length == 64 and drafter.length == 64


def test_both_models_start_on_the_condition_and_guidance_given():
    clock = Clock()
    target, drafter = FakeModel(clock, 0.004, 0.001), FakeModel(clock, 0.0007, 0.0)
    forward_times(target, drafter, cond=5, guidance=False, max_tokens=2, context=3, repeats=1, warmup=0, clock=clock)
    assert target.started == [(5, False)] and drafter.started == [(5, False)]


def test_models_without_features_are_timed_with_none_for_features():
    """A target that returns no hidden features (ModelStep.hidden None, allowed by the protocol): the drafter is
    fed None for the context and for each timed step, and the times are measured as with features."""
    clock = Clock()
    target, drafter = FakeModel(clock, 0.004, 0.001, features=False), FakeModel(clock, 0.0007, 0.0, features=False)
    times = forward_times(target, drafter, cond=0, max_tokens=2, context=3, repeats=1, warmup=0, clock=clock)
    assert times.target_s == pytest.approx((0.005, 0.006), abs=1e-12)
    assert times.drafter_s == pytest.approx(0.0007, abs=1e-12)
    assert [call["hidden"] for call in drafter.calls] == [None, None]  # the context, then the one timed step
    assert [call["positions"] for call in drafter.calls] == [[0, 1, 2], [3]]


def test_forward_times_without_guidance_or_drafter_and_its_bounds():
    clock = Clock()
    target = FakeModel(clock, 0.002, 0.0005)
    times = forward_times(target, None, cond=0, guidance=False, max_tokens=1, context=1, repeats=1, warmup=0,
                          clock=clock)
    assert times.rows == 1 and times.drafter_s is None and times.target_s == pytest.approx((0.0025,), abs=1e-12)
    assert target.calls[1]["positions"] == [1] and target.length == 1
    for kw, name in (({"max_tokens": 0}, "max_tokens"), ({"context": 0}, "context")):
        with pytest.raises(ValueError, match=f"{name} must be >= 1"):
            forward_times(FakeModel(clock, 0.001, 0.0), None, cond=0, clock=clock, **kw)


def test_verify_steps_is_t_n_over_t_1_for_every_measured_n_and_no_other():
    times = ForwardTimes(target_s=(0.002, 0.003, 0.005), drafter_s=None, rows=1, context=4, repeats=1)
    assert [times.verify_steps(n) for n in (1, 2, 3)] == pytest.approx([1.0, 1.5, 2.5], abs=1e-12)
    for n in (0, 4):
        with pytest.raises(ValueError, match=r"n must be in \[1, 3\]"):
            times.verify_steps(n)
    assert times.to_json() == {"target_s": [0.002, 0.003, 0.005], "drafter_s": None, "rows": 1, "context": 4,
                               "repeats": 1}
