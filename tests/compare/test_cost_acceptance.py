"""The cost model's per-depth acceptance a_1..a_L, exactly (issue 27): from hand-made round events through
`Racer.record` / `Racer.accept_rate` to `cost.racer_acceptance` and `cost.compare_racers`, and what a chain
round reports as tested (depths 1..min(n + 1, L), their a_i) against its own RoundDetail.

`test_cost.py` recomputes the acceptance from a race's events with the same reading the code uses; here every
expected number is written out, including depths never reached (0), depths skipped (nan -> 0) and L shorter
or longer than what the race drafted.
"""

from __future__ import annotations

import math

import pytest
import torch

from coolsd.compare import cost
from coolsd.compare.race import Racer
from coolsd.decoding.drafting import Chain
from coolsd.decoding.engine import DecodeConfig, generate
from coolsd.decoding.round import make_event
from coolsd.decoding.rules import CoolSDRule, EagleRule
from coolsd.models.timing import ForwardTimes
from coolsd.theory.tabular import random_tables

# (start, tokens, tested depths, tested a_i) per round; round 0 tests nothing
ROUNDS = [(0, 1, [], []), (1, 2, [1, 2], [0.875, 0.25]), (3, 1, [1], [0.5]), (4, 4, [1, 2, 3], [1.0, 0.75, 0.375])]


def racer(rounds=ROUNDS, key="cool-sd", seconds=1.0) -> Racer:
    events = [make_event(index=i, start=s, tokens=[0] * n, n_accepted=n - 1, seconds={"verify": seconds},
                         tested_depths=d, tested_probs=a, omega=[1.0] * len(d), accept_probs=a)
              for i, (s, n, d, a) in enumerate(rounds)]
    r = Racer(key, key, iter(events), num_tokens=sum(n for _, n, _, _ in rounds))
    while r.advance() is not None:
        pass
    return r


A1, A2, A3 = (0.875 + 0.5 + 1.0) / 3, (0.25 + 0.75) / 2, 0.375  # means over the rounds that tested each depth


def test_accept_rate_is_the_mean_per_depth_over_the_rounds_that_tested_it():
    r = racer()
    assert r.accept_rate.tolist() == pytest.approx([A1, A2, A3], abs=1e-15)
    assert r.depth_count.tolist() == [3.0, 2.0, 1.0] and r.round_tokens == [2, 1, 4]


@pytest.mark.parametrize("draft_len, expected", [
    (1, [A1]), (2, [A1, A2]), (3, [A1, A2, A3]), (5, [A1, A2, A3, 0.0, 0.0]),  # never reached: 0
])
def test_racer_acceptance_cuts_or_pads_to_L(draft_len, expected):
    assert cost.racer_acceptance(racer(), draft_len) == pytest.approx(expected, abs=1e-15)


def test_a_depth_never_tested_counts_as_zero_not_nan():
    r = racer([(0, 1, [], []), (1, 2, [1, 3], [0.5, 0.25])])  # depth 2 skipped (a tree's levels may)
    assert math.isnan(float(r.accept_rate[1]))
    assert cost.racer_acceptance(r, 3) == [0.5, 0.0, 0.25]
    assert cost.racer_acceptance(racer([(0, 1, [], [])]), 2) == [0.0, 0.0]  # nothing tested yet


def test_compare_racers_uses_that_acceptance():
    times = ForwardTimes(target_s=(0.01, 0.012, 0.013, 0.016, 0.02), drafter_s=0.002, rows=1, context=2, repeats=1)
    costs = cost.Costs(times)
    fast, ref = racer(), racer([(0, 1, [], []), *[(i, 1, [], []) for i in range(1, 8)]], key="vanilla", seconds=2.0)
    rows = {row["key"]: row for row in cost.compare_racers([fast, ref], costs, 4, reference=ref)}
    accept = [A1, A2, A3, 0.0]
    e = 1 + A1 + A1 * A2 + A1 * A2 * A3  # the 4th depth adds 0
    assert rows["cool-sd"]["acceptance"] == pytest.approx(accept, abs=1e-15)
    assert rows["cool-sd"]["expected_tokens"] == pytest.approx(e, abs=1e-12)
    assert rows["cool-sd"]["predicted_speedup"] == pytest.approx(e / (4 * 0.2 + 2.0), abs=1e-12)  # L c + V(5)
    assert rows["cool-sd"]["measured_tokens_per_round"] == pytest.approx(7 / 3)
    assert rows["cool-sd"]["measured_speedup"] == pytest.approx((8 / 4.0) / (8 / 16.0))
    assert rows["cool-sd"]["measured_over_predicted"] == pytest.approx(4.0 / (e / (4 * 0.2 + 2.0)))
    assert rows["vanilla"] == {"key": "vanilla", "decoder": "vanilla", "acceptance": [], "expected_tokens": 1.0,
                               "measured_tokens_per_round": 1.0, "predicted_speedup": 1.0, "measured_speedup": 1.0,
                               "measured_over_predicted": 1.0, "finished": True}
    tree = {row["key"]: row for row in cost.compare_racers([fast, ref], costs, 4, reference=ref, chain=False)}
    assert tree["cool-sd"]["acceptance"] == pytest.approx(accept, abs=1e-15)  # measured, shown
    assert math.isnan(tree["cool-sd"]["expected_tokens"]) and math.isnan(tree["cool-sd"]["predicted_speedup"])


def test_compare_racers_rows_every_racer_wherever_the_reference_stands():
    """The reference first (or in the middle) of the racers: every racer after it still gets its row, in order."""
    times = ForwardTimes(target_s=(0.01, 0.012, 0.013, 0.016, 0.02), drafter_s=0.002, rows=1, context=2, repeats=1)
    ref = racer([(0, 1, [], []), *[(i, 1, [], []) for i in range(1, 8)]], key="vanilla", seconds=2.0)
    fast, other = racer(), racer(key="eagle-1")
    for order in ([ref, fast, other], [fast, ref, other]):
        rows = cost.compare_racers(order, cost.Costs(times), 4, reference=ref)
        assert [row["key"] for row in rows] == [r.key for r in order]
        assert all(row["acceptance"] == pytest.approx([A1, A2, A3, 0.0], abs=1e-15)
                   for row in rows if row["key"] != "vanilla")


def test_a_racer_with_no_speculative_round_yet_has_no_measured_tokens_per_round():
    """Only the prefix step so far (the race just started): tokens per round is nan, not a division by zero."""
    times = ForwardTimes(target_s=(0.01, 0.012), drafter_s=0.002, rows=1, context=2, repeats=1)
    ref = racer([(0, 1, [], []), (1, 1, [], [])], key="vanilla")
    young = racer([(0, 1, [], [])])
    row = cost.compare_racers([young, ref], cost.Costs(times), 1, reference=ref)[0]
    assert young.round_tokens == [] and math.isnan(row["measured_tokens_per_round"])
    assert row["acceptance"] == [0.0] and row["expected_tokens"] == 1.0


@pytest.mark.parametrize("accept, expected", [([0.0, 1.0, 1.0], 1.0), ([1.0, 0.0], 2.0), ([0.5], 1.5),
                                              ([0.5, 0.5, 0.5], 1.875)])
def test_expected_tokens_multiplies_along_the_depths(accept, expected):
    assert cost.expected_tokens(accept) == expected


def test_acceptance_bounds_are_inclusive():
    assert cost.expected_tokens([0.0]) == 1.0 and cost.expected_tokens([1.0]) == 2.0
    for bad in (1.0000001, -1e-9):
        with pytest.raises(ValueError, match="acceptance at depth 1"):
            cost.expected_tokens([bad])
    assert cost.round_cost(0, 0.0, 1.0) == 1.0  # no drafts: one verify
    assert cost.round_cost(3, 0.25, 1.5) == 2.25
    with pytest.raises(ValueError, match=r"^draft length L must be >= 0, got -1$"):
        cost.round_cost(-1, 0.1, 1.0)


# ---------------------------------------------------------------- what a chain round reports as tested
@pytest.mark.parametrize("rule", [EagleRule(), CoolSDRule(delta=2.0)], ids=["eagle-1", "cool-sd"])
def test_a_chain_round_reports_the_depths_it_tested_and_their_a(rule):
    L, T = 3, 6
    target, drafter = random_tables(4, T, seed=5)
    kinds = set()
    for seed in range(24):  # COOL-SD delta 2 rejects in few rounds here (seed 17)
        for e in generate(target.fork(), drafter.fork(), rule, cond=None, num_tokens=T,
                          config=DecodeConfig(Chain(L), detail=True), seed=seed):
            d, n = e.detail, e.n_accepted
            reached = min(n + 1, e.n_drafted)  # the first rejection is tested; beyond it nothing
            assert e.tested_depths.tolist() == list(range(1, reached + 1))
            assert e.tested_probs.tolist() == d.accept[:reached].tolist()
            assert e.accept_probs[:reached].tolist() == d.accept[:reached].tolist()
            assert torch.isnan(e.accept_probs[reached:]).all()
            kinds.add((n < e.n_drafted, e.n_drafted))
    assert (True, L) in kinds and (False, L) in kinds  # rejections and full acceptances both seen
