"""coolsd.compare.race: least-compute scheduling, per-decoder bookkeeping, independent model handles (fork_models)."""

from __future__ import annotations

import math

import pytest
import torch
from llamagen_weights import random_models  # tests/ helper

from coolsd.compare.race import Race, Racer, fork_models
from coolsd.decoding.drafting import Chain
from coolsd.decoding.engine import DecodeConfig, generate, run
from coolsd.decoding.events import RoundEvent, TokenOutcome
from coolsd.decoding.rules import make_rule
from coolsd.decoding.sampling import SamplingConfig

RESAMPLED, BONUS = TokenOutcome.RESAMPLED, TokenOutcome.BONUS
ACCEPTED, RESAMPLED_CODE, BONUS_CODE = (k.code for k in TokenOutcome)  # Racer.kinds codes



def _event(index, start, tokens, n_accepted, last, seconds, depths=(), probs=(), omega=()):
    f = torch.float64
    return RoundEvent(index=index, start=start, tokens=torch.tensor(tokens), n_accepted=n_accepted,
                      n_drafted=len(omega), accept_probs=torch.tensor(probs, dtype=f),
                      omega=torch.tensor(omega, dtype=f),
                      tested_depths=torch.tensor(depths, dtype=torch.long), tested_probs=torch.tensor(probs, dtype=f),
                      last=last, target_forwards=1, draft_forwards=len(omega),
                      seconds={"draft": 0.0, "verify": seconds, "other": 0.0})


def _fake(seconds_per_round: float, tokens_per_round: int, num_tokens: int):
    """Events of a decoder that commits `tokens_per_round` tokens per round at a fixed cost."""
    start, index = 0, 0
    while start < num_tokens:
        n = min(tokens_per_round, num_tokens - start)
        yield _event(index, start, list(range(start, start + n)), n - 1, BONUS, seconds_per_round)
        start, index = start + n, index + 1


def test_race_advances_the_decoder_with_the_least_compute():
    fast = Racer("fast", "fast", _fake(1.0, 4, 8), 8)  # 2 rounds of 1 s
    slow = Racer("slow", "slow", _fake(0.5, 1, 8), 8)  # 8 rounds of 0.5 s
    order = [racer.key for racer, _ in Race([fast, slow])]
    # the choice is made before the round, on the compute spent so far; ties go to the first racer
    assert order == ["fast", "slow", "slow", "fast", "slow", "slow", "slow", "slow", "slow", "slow"]
    assert fast.finished and slow.finished
    assert fast.seconds == 2.0 and slow.seconds == 4.0
    assert fast.speedup(slow) == pytest.approx(2.0)  # 8 tokens in 2 s vs in 4 s


def test_racer_records_tokens_outcomes_and_acceptance_per_depth():
    events = iter([
        _event(0, 0, [7], 0, BONUS, 0.1),
        _event(1, 1, [1, 2, 3], 2, RESAMPLED, 0.1, depths=(1, 2, 3), probs=(1.0, 0.8, 0.2), omega=(2.0, 1.0, 0.5)),
        _event(2, 4, [4, 5], 1, RESAMPLED, 0.1, depths=(1, 2), probs=(0.6, 0.4), omega=(2.0, 1.0, 0.5)),
    ])
    r = Racer("cool-sd", "COOL-SD", events, 6)
    while r.advance() is not None:
        pass
    assert r.finished and r.done == 6 and r.rounds == 3 and r.target_forwards == 3
    assert r.tokens.tolist() == [7, 1, 2, 3, 4, 5] and r.filled.all()
    assert r.kinds.tolist() == [BONUS_CODE, ACCEPTED, ACCEPTED, RESAMPLED_CODE, ACCEPTED, RESAMPLED_CODE]
    assert r.tau == 2.0 and r.round_tokens == [3, 2]
    assert r.accept_rate.tolist() == pytest.approx([0.8, 0.6, 0.2])
    assert r.depth_count.tolist() == [2, 2, 1] and r.omega.tolist() == [2.0, 1.0, 0.5]
    stats = r.stats(r)
    assert stats["tokens"] == 6 and stats["mean_accepted_length"] == 2.0 and stats["speedup"] == pytest.approx(1.0)


def test_racer_keeps_the_longest_relaxed_schedule_its_rounds_reported():
    """`Racer.omega` (the acceptance plot's dashed schedule): a shorter round near the image's end or an all-ones
    round does not replace a longer relaxed one; a lossless racer has none."""
    events = iter([
        _event(0, 0, [7], 0, BONUS, 0.1),
        _event(1, 1, [1], 0, RESAMPLED, 0.1, depths=(1,), probs=(0.5,), omega=(1.0, 1.0)),
        _event(2, 2, [1, 2], 1, RESAMPLED, 0.1, depths=(1, 2), probs=(1.0, 0.2), omega=(2.0, 1.0, 0.5)),
        _event(3, 4, [4, 5], 1, BONUS, 0.1, depths=(1,), probs=(1.0,), omega=(2.5,)),
        _event(4, 6, [6], 0, RESAMPLED, 0.1, depths=(1, 2), probs=(0.1, 0.1), omega=(1.0, 1.0, 1.0, 1.0)),
    ])
    r = Racer("cool-sd", "COOL-SD", events, 7)
    while r.advance() is not None:
        pass
    assert r.omega.tolist() == [2.0, 1.0, 0.5]
    assert Racer("eagle-1", "Eagle-1", iter(()), 7).omega.numel() == 0


def test_fresh_racer_reports_nan_not_errors():
    r = Racer("x", "x", iter(()), 4)
    assert math.isnan(r.tau) and len(r.accept_rate) == 0 and math.isnan(r.speedup(r))
    assert r.advance() is None and r.finished


@pytest.mark.parametrize("workers", [1, 2])
def test_race_of_forked_models_equals_separate_runs(tiny, workers):
    """Interleaving decoders on forked handles, one at a time or two on worker threads, gives exactly the tokens of
    decoding each alone (same seed)."""
    b = tiny
    sampling, config = SamplingConfig(cfg_scale=2.0), DecodeConfig(Chain(3))
    rules = {"eagle-1": make_rule("eagle-1"), "cool-sd": make_rule("cool-sd", delta=2.0),
             "lantern++": make_rule("lantern++", k=3, lam=5.0).with_neighbours(b.neighbours), "vanilla": None}
    lanes = {key: fork_models(b.target, b.drafter) for key in rules}
    solo = {key: fork_models(b.target, b.drafter) for key in rules}  # fork before anything decodes
    racers = [Racer(key, key, generate(lanes[key][0], lanes[key][1], rule, cond=4, num_tokens=b.num_tokens,
                                       sampling=sampling,
                                       config=config, seed=11), b.num_tokens) for key, rule in rules.items()]
    race = Race(racers, workers=workers)
    keys = [racer.key for racer, _ in race]
    assert len(set(keys[:8])) > 1  # really interleaved
    assert race.steps == len(keys) == sum(r.rounds for r in racers)
    for racer, (key, rule) in zip(racers, rules.items()):
        target, drafter = solo[key]
        alone = run(target, drafter, rule, cond=4, num_tokens=b.num_tokens, sampling=sampling, config=config, seed=11)
        assert racer.tokens.tolist() == alone.tokens.tolist(), key
        assert racer.target_forwards == alone.target_forwards


def test_fork_shares_weights_and_has_its_own_cache(tiny):
    b = tiny
    target, drafter = fork_models(b.target, b.drafter)
    assert target is not b.target and target.stack is not b.target.stack
    assert target.stack.blocks[0][0] is b.target.stack.blocks[0][0]  # same fused tensor, not a copy
    assert drafter.lm_head is b.drafter.lm_head
    config = DecodeConfig(Chain(2))
    first = run(target, drafter, make_rule("eagle-1"), cond=1, num_tokens=b.num_tokens, config=config, seed=0)
    again_t, again_d = fork_models(target, drafter)  # forking a used handle gives a fresh cache
    assert again_t.stack.k is None and target.stack.k is not None
    interleaved = generate(again_t, again_d, make_rule("eagle-1"), cond=1, num_tokens=b.num_tokens, config=config,
                           seed=0)
    next(interleaved)
    run(target, drafter, make_rule("eagle-1"), cond=2, num_tokens=b.num_tokens, config=config,
        seed=5)  # the parent decodes meanwhile
    rest = list(interleaved)
    assert sum(len(e.tokens) for e in rest) == b.num_tokens - 1
    assert torch.cat([first.tokens[:1]] + [e.tokens for e in rest]).tolist() == first.tokens.tolist()


def test_race_needs_a_racer():
    with pytest.raises(ValueError):
        Race([])
    with pytest.raises(ValueError, match="worker"):
        Race([Racer("x", "x", iter(()), 4)], workers=0)


def test_parallel_race_runs_each_racer_on_one_thread_at_a_time_and_reports_every_round():
    """Two workers, three racers: every round is reported once, in each racer's own order, no racer runs two rounds
    at once, and the compute each is charged is its own rounds' (the schedule changes no number)."""
    import threading

    inside: dict[str, int] = {}
    lock = threading.Lock()

    def guarded(key, events):
        for event in events:
            with lock:
                inside[key] = inside.get(key, 0) + 1
                assert inside[key] == 1, f"{key} ran two rounds at once"
            yield event
            with lock:
                inside[key] -= 1

    racers = [Racer(k, k, guarded(k, _fake(s, n, 8)), 8) for k, s, n in (("a", 1.0, 4), ("b", 0.5, 1), ("c", 0.25, 2))]
    seen = {r.key: [] for r in racers}
    for racer, event in Race(racers, workers=2):
        seen[racer.key].append(event.start)
    assert seen == {"a": [0, 4], "b": list(range(8)), "c": [0, 2, 4, 6]}
    assert [r.seconds for r in racers] == [2.0, 4.0, 1.0] and all(r.finished for r in racers)


def test_parallel_race_raises_a_racer_error_in_the_caller():
    def broken():
        yield _event(0, 0, [0], 0, BONUS, 0.1)
        raise RuntimeError("a bug in a rule")

    racers = [Racer("ok", "ok", _fake(0.1, 1, 4), 4), Racer("bad", "bad", broken(), 4)]
    with pytest.raises(RuntimeError, match="a bug in a rule"):
        list(Race(racers, workers=2))


def test_fork_llamagen_target_and_drafter_race_equals_separate_runs():
    """LlamaGen's drafter reads its target: forked together, each copy reads its own copy (tiny random weights)."""
    target, drafter, caption = random_models(norm_one=True)
    sampling, config = SamplingConfig(cfg_scale=3.0, top_k=20), DecodeConfig(Chain(3))
    rules = {"eagle-1": make_rule("eagle-1"), "cool-sd": make_rule("cool-sd", delta=2.0), "vanilla": None}
    lanes = {key: fork_models(target, drafter) for key in rules}
    solo = {key: fork_models(target, drafter) for key in rules}
    assert lanes["eagle-1"][1].target is lanes["eagle-1"][0] and lanes["eagle-1"][0] is not target
    racers = [Racer(key, key, generate(lanes[key][0], lanes[key][1], rule, cond=caption, num_tokens=16,
                                       sampling=sampling, config=config, seed=3), 16) for key, rule in rules.items()]
    for _ in Race(racers):
        pass
    for racer, (key, rule) in zip(racers, rules.items()):
        t, d = solo[key]
        alone = run(t, d, rule, cond=caption, num_tokens=16, sampling=sampling, config=config, seed=3)
        assert racer.tokens.tolist() == alone.tokens.tolist(), key


def test_device_failure_ends_the_race_with_one_message_and_the_next_race_runs(tiny):
    """An injected out-of-memory error in round 3 of one racer: the race stops cleanly, the next one is fine."""
    from coolsd.compare.race import DeviceFailure, inject_fault, is_device_failure

    b = tiny
    target, drafter = fork_models(b.target, b.drafter)
    other, _ = fork_models(b.target)

    def racers():
        return [Racer("eagle-1", "Eagle-1", generate(target, drafter, make_rule("eagle-1"), cond=1,
                                                     num_tokens=b.num_tokens, seed=0), b.num_tokens),
                Racer("vanilla", "Vanilla AR", generate(other, None, None, cond=1, num_tokens=b.num_tokens, seed=0),
                      b.num_tokens)]

    rounds = {"n": 0}

    def oom_at_round_3(racer):
        rounds["n"] += 1
        if rounds["n"] == 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    race = Race(racers())
    with inject_fault(oom_at_round_3), pytest.raises(DeviceFailure, match="ran out of device memory") as info:
        list(race)
    assert "Eagle-1" in str(info.value) or "Vanilla AR" in str(info.value)
    assert isinstance(info.value.__cause__, torch.OutOfMemoryError)
    assert all(r.events.gi_frame is None for r in race.racers)  # every engine iterator closed
    # a bug is not a device failure: it propagates unchanged
    with inject_fault(lambda racer: 1 / 0), pytest.raises(ZeroDivisionError):
        list(Race(racers()))
    assert is_device_failure(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not is_device_failure(ValueError("class must be an integer"))
    # the same handles serve the next race, to the end
    done = list(Race(racers()))
    assert sum(len(e.tokens) for r, e in done if r.key == "vanilla") == b.num_tokens


def test_a_parallel_race_closed_midway_stops_its_workers_after_their_rounds():
    """A caller that stops reading (a visitor's Stop) ends the workers: the generator's close waits for the rounds in
    flight, no worker thread is left, and no racer ran past what it reported plus one round each."""
    import threading

    racers = [Racer(k, k, _fake(0.1, 1, 64), 64) for k in ("a", "b", "c")]
    race = Race(racers, workers=2)
    stream = iter(race)
    seen = [next(stream) for _ in range(5)]
    stream.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("racer-")]
    assert race.steps == 5 and len(seen) == 5
    assert sum(r.rounds for r in racers) <= 5 + Race.AHEAD + 2 * 2  # reported, queued, in flight or waiting to queue
    race.close()
