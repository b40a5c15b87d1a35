"""Jacobi drafting (spec section 4b): SJD and "SJD + reuse" keep the target's distribution exactly; relaxed rules
on Jacobi drafts (COOL-SD, LANTERN++ without a drafter) give exactly the Jacobi oracle's distribution.

The engine's own output distribution is enumerated (`tests/exact_engine.py`: every random draw it makes, no
sampling noise) and compared with P over whole sequences, which fixes P's conditional at every position, interior
ones included, at the default and at non-default sampling (CFG, temperature, top-k, top-p, all, greedy; the
processed tables of `test_sampling_exact`, computed there in numpy from spec section 1). A relaxed rule is compared
with `coolsd.theory.jacobi_oracle` (written from the spec: the chain rule's maths at each window position given its
q); since its output depends on q, the check has the power SJD's lacks: a q from the wrong iteration fails it. Then
the drafting against a two-iteration example worked by hand, and the events a Jacobi iteration reports.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import torch
from exact_engine import engine_distribution
from test_sampling_exact import SAMPLINGS, GuidedTarget, guided_models, processed_tables

from coolsd import DecodeConfig, SamplingConfig, run, sequence_probs
from coolsd.decoding import jacobi
from coolsd.decoding.drafting import Jacobi, chain_or_tree
from coolsd.decoding.neighbours import neighbour_table
from coolsd.decoding.rules import CoolSDRule, EagleRule, LanternPPRule
from coolsd.theory.jacobi_oracle import exact_jacobi
from coolsd.theory.tabular import TabularLM, random_tables

SJD = EagleRule()  # SJD: Eagle-1's test on Jacobi drafts
SJD_CASES = {  # (rule, drafting) pairs
    "sjd": (SJD, Jacobi(window=2)),
    "sjd-reuse": (SJD, Jacobi(window=2, reuse=True)),
    "sjd-uniform-init": (SJD, Jacobi(window=2, init="uniform")),
}
ALL_SAMPLINGS = {"default": SamplingConfig(), **SAMPLINGS}


def guided_target(vocab_size: int, num_tokens: int, seed: int) -> GuidedTarget:
    """Random raw (conditional, unconditional) logits per prefix, as `test_sampling_exact.guided_models`."""
    gen = torch.Generator().manual_seed(seed)
    cond, uncond = {}, {}
    for length in range(num_tokens):
        for prefix in itertools.product(range(vocab_size), repeat=length):
            cond[prefix] = 1.5 * torch.randn(vocab_size, generator=gen, dtype=torch.float64)
            uncond[prefix] = 1.5 * torch.randn(vocab_size, generator=gen, dtype=torch.float64)
    return GuidedTarget(cond, uncond, vocab_size, num_tokens)


def p_of(target: GuidedTarget, sampling: SamplingConfig) -> torch.Tensor:
    """(V**T,) whole-sequence probabilities of the processed target."""
    return sequence_probs(TabularLM(processed_tables(target, sampling), target.vocab_size, target.num_tokens))


# ---------------------------------------------------------------- exact: the output is P
@pytest.mark.parametrize("sampling_name", list(ALL_SAMPLINGS))
@pytest.mark.parametrize("case", list(SJD_CASES))
def test_sjd_output_is_the_target_distribution(monkeypatch, case, sampling_name):
    """V = 3, T = 4, W = 2: round 1 drafts two positions from round 0's p (init), round 2 one from round 1's rows."""
    target, _ = guided_models(seed=3)
    sampling = ALL_SAMPLINGS[sampling_name]
    rule, drafting = SJD_CASES[case]
    dist, forwards = engine_distribution(target, None, rule, 4, DecodeConfig(drafting), monkeypatch, sampling=sampling)
    assert math.isclose(float(dist.sum()), 1.0, abs_tol=1e-12)
    assert float((dist - p_of(target, sampling)).abs().max()) <= 1e-12, (case, sampling_name)
    assert forwards < 4 or sampling_name == "greedy"  # fewer target forwards than vanilla AR (4)


@pytest.mark.parametrize("sampling_name", ["default", "all"])
@pytest.mark.parametrize("reuse", [False, True], ids=["sjd", "sjd-reuse"])
def test_sjd_with_drafts_carried_over_is_exact(monkeypatch, reuse, sampling_name):
    """V = 2, T = 6, W = 3: windows that keep drafts of an earlier iteration (where reuse couples them)."""
    target = guided_target(2, 6, seed=1)
    sampling = ALL_SAMPLINGS[sampling_name]
    dist, _ = engine_distribution(target, None, SJD, 6, DecodeConfig(Jacobi(window=3, reuse=reuse)), monkeypatch,
                                  sampling=sampling, max_paths=100_000)
    assert float((dist - p_of(target, sampling)).abs().max()) <= 1e-12


def test_keeping_drafts_without_the_coupling_is_biased(monkeypatch):
    """The check has power: keep every earlier draft (tested against q as if drawn from it) and P is lost."""
    target = guided_target(2, 6, seed=1)

    def always_keep(self, t, q, dice):
        j = t - self.base
        kept = self.drafts[j : j + len(q)]
        return torch.cat([kept, dice.drafts(q)[len(kept) :]])

    monkeypatch.setattr(jacobi.JacobiDrafts, "draws", always_keep)
    dist, _ = engine_distribution(target, None, SJD, 6, DecodeConfig(Jacobi(window=3)), monkeypatch,
                                  max_paths=100_000)
    assert 0.5 * float((dist - p_of(target, SamplingConfig())).abs().sum()) > 1e-2


# ---------------------------------------------------------------- relaxed rules on Jacobi drafts: the Jacobi oracle
def relaxed_rule(case: str, codebook: torch.Tensor, window: int) -> tuple:
    """A relaxed rule offered on Jacobi drafts, at settings where it relaxes at every window depth; LANTERN++
    pools over the neighbours of `codebook` (V, C)."""
    if case == "lantern++-jacobi":
        return LanternPPRule(k=1, lam=3.0).with_neighbours(neighbour_table(codebook)), Jacobi(window)
    return {"cool-sd-jacobi": (CoolSDRule(delta=2.0), Jacobi(window)),
            "cool-sd-jacobi-unclipped": (CoolSDRule(delta=1.5, nu=1.0, floor_at_one=False), Jacobi(window)),
            "cool-sd-jacobi-uniform-init": (CoolSDRule(delta=2.0), Jacobi(window, init="uniform"))}[case]


def oracle_of(target: GuidedTarget, sampling: SamplingConfig, rule, drafting: Jacobi):
    """`exact_jacobi` on the processed target (numpy tables of spec section 1)."""
    tables = TabularLM(processed_tables(target, sampling), target.vocab_size, target.num_tokens)
    return exact_jacobi(tables, rule, drafting, p_of(target, sampling))


@pytest.mark.parametrize("sampling_name", ["default", "all"])
@pytest.mark.parametrize("case", ["cool-sd-jacobi", "cool-sd-jacobi-unclipped", "cool-sd-jacobi-uniform-init",
                                  "lantern++-jacobi"])
def test_relaxed_jacobi_is_the_oracle(monkeypatch, case, sampling_name):
    """V = 3, T = 4, W = 2: the engine's exact output is the oracle's, which is not P (the rule relaxes)."""
    target, _ = guided_models(seed=3)
    sampling = ALL_SAMPLINGS[sampling_name]
    rule, drafting = relaxed_rule(case, target.codebook, 2)
    dist, forwards = engine_distribution(target, None, rule, 4, DecodeConfig(drafting), monkeypatch, sampling=sampling)
    oracle = oracle_of(target, sampling, rule, drafting)
    assert float((dist - oracle.dist).abs().max()) <= 1e-12, (case, sampling_name)
    assert math.isclose(forwards, oracle.expected_rounds, rel_tol=1e-12)
    assert oracle.tv > 1e-3 and oracle.tv <= oracle.bound + 1e-12


@pytest.mark.parametrize("reuse", [False, True], ids=["fresh", "reuse"])
@pytest.mark.parametrize("case", ["cool-sd-jacobi", "lantern++-jacobi"])
def test_relaxed_jacobi_with_drafts_carried_over_is_the_oracle(monkeypatch, case, reuse):
    """Interior windows whose q and (reuse) drafts come from earlier iterations: V = 2, T = 6, W = 3 (COOL-SD);
    V = 3, T = 5, W = 2 (LANTERN++: a neighbour to pool needs V >= 3)."""
    v, t, w = (2, 6, 3) if case == "cool-sd-jacobi" else (3, 5, 2)
    target = guided_target(v, t, seed=1)
    rule, drafting = relaxed_rule(case, torch.tensor([[0.0], [1.0], [2.5]])[:v], w)
    drafting = dataclasses.replace(drafting, reuse=reuse)
    dist, _ = engine_distribution(target, None, rule, t, DecodeConfig(drafting), monkeypatch, max_paths=100_000)
    oracle = oracle_of(target, SamplingConfig(), rule, drafting)
    assert float((dist - oracle.dist).abs().max()) <= 1e-12
    assert oracle.tv > 1e-3 and oracle.tv <= oracle.bound + 1e-12


def stale_rows(monkeypatch) -> None:
    """A deliberately wrong Jacobi update: the proposals come from the iteration before the last."""
    one_iteration = jacobi.JacobiDrafts.round

    def round_with_stale_rows(self, index):
        older = getattr(self, "older", (self.base, self.rows))
        event = one_iteration(self, index)
        self.older, (self.base, self.rows) = (self.base, self.rows), older
        return event

    monkeypatch.setattr(jacobi.JacobiDrafts, "round", round_with_stale_rows)


@pytest.mark.parametrize("reuse", [False, True], ids=["fresh", "reuse"])
def test_q_from_the_wrong_iteration_fails_the_relaxed_check(monkeypatch, reuse):
    """The check has power: with q from the iteration before the last the relaxed output leaves the oracle, while
    SJD's stays P (Eagle-1 is exact for any q fixed before the draw, so only a relaxed rule can see this)."""
    target = guided_target(2, 6, seed=1)
    cool, config = CoolSDRule(delta=2.0), DecodeConfig(Jacobi(window=3, reuse=reuse))
    with monkeypatch.context() as wrong:
        stale_rows(wrong)
        dist, _ = engine_distribution(target, None, cool, 6, config, monkeypatch, max_paths=100_000)
        lossless, _ = engine_distribution(target, None, SJD, 6, config, monkeypatch, max_paths=100_000)
    assert 0.5 * float((dist - oracle_of(target, SamplingConfig(), cool, config.drafting).dist).abs().sum()) > 1e-2
    assert float((lossless - p_of(target, SamplingConfig())).abs().max()) <= 1e-12


def test_the_oracle_keeps_p_for_sjd():
    """The oracle itself: Eagle-1's test on Jacobi drafts is P (with or without reuse, either init); a relaxed rule
    leaves P within its bound and commits more per forward; every iteration commits its accepted drafts + 1 token,
    so the accepted drafts add up to T - E[forwards]."""
    target = TabularLM(random_tables(3, 5, seed=7)[0].table, 3, 5)
    p = sequence_probs(target)
    for drafting in (Jacobi(window=2), Jacobi(window=3, reuse=True), Jacobi(window=3, init="uniform")):
        result = exact_jacobi(target, SJD, drafting, p)
        assert float((result.dist - p).abs().max()) <= 1e-12 and result.bound <= 1e-12
    sjd, cool = exact_jacobi(target, SJD, Jacobi(3), p), exact_jacobi(target, CoolSDRule(), Jacobi(3), p)
    assert cool.tau > sjd.tau > 1 and 0 < cool.tv <= cool.bound
    for result in (sjd, cool):
        assert math.isclose(sum(result.depth_accepts), 5 - result.expected_rounds, abs_tol=1e-12)
        assert list(result.depth_tests) == sorted(result.depth_tests, reverse=True)  # deeper: reached less often


def test_coupled_draw_is_q_on_average_and_keeps_what_q_allows():
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        q = torch.rand(5, generator=gen, dtype=torch.float64).pow(3)
        q_prev = torch.rand(5, generator=gen, dtype=torch.float64).pow(3)
        q, q_prev = q / q.sum(), q_prev / q_prev.sum()
        rows = torch.stack([jacobi.coupled_draw(q, q_prev, torch.tensor(d)) for d in range(5)])  # (V, V)
        torch.testing.assert_close(rows.sum(-1), torch.ones(5, dtype=torch.float64), rtol=0, atol=1e-12)
        torch.testing.assert_close(q_prev @ rows, q, rtol=0, atol=1e-12)  # the marginal is q
        keep = rows.diagonal()
        assert (keep >= (q / q_prev).clamp(max=1) - 1e-12).all()  # maximal: d kept w.p. min(1, q(d) / q_prev(d))
    # worked: q = (0.3, 0.7), q_prev = (0.6, 0.4): d = 0 kept half the time, else moved to 1; d = 1 always kept
    q, q_prev = torch.tensor([0.3, 0.7], dtype=torch.float64), torch.tensor([0.6, 0.4], dtype=torch.float64)
    torch.testing.assert_close(jacobi.coupled_draw(q, q_prev, torch.tensor(0)), torch.tensor([0.5, 0.5]).double())
    torch.testing.assert_close(jacobi.coupled_draw(q, q_prev, torch.tensor(1)), torch.tensor([0.0, 1.0]).double())


# ---------------------------------------------------------------- a two-iteration example, worked by hand
class Markov(TabularLM):
    """V = 2, T = 5: p(token 0) = (0.6, 0.4); after a 0: (0.8, 0.2); after a 1: (0.3, 0.7). Records its calls."""

    def __init__(self) -> None:
        rows = {(): [0.6, 0.4], 0: [0.8, 0.2], 1: [0.3, 0.7]}
        table = {prefix: torch.tensor(rows[prefix[-1] if prefix else ()], dtype=torch.float64)
                 for n in range(5) for prefix in itertools.product(range(2), repeat=n)}
        super().__init__(table, 2, 5)
        self.calls: list[tuple[list[int], list[int]]] = []

    def forward(self, ids, positions, mask=None, rows=1):
        self.calls.append((ids.tolist(), positions.tolist()))
        return super().forward(ids, positions, mask, rows)


class Recording:
    """Delegates to a rule; records the (p, q) rows of every acceptance test."""

    def __init__(self, rule) -> None:
        self.rule, self.tests = rule, []

    def chain_accept(self, p, q, x, draft_len):  # a chain round's test at every depth
        self.tests.append((p.clone(), q.clone(), x.tolist()))
        return self.rule.chain_accept(p, q, x, draft_len)

    def __getattr__(self, name):
        return getattr(self.rule, name)


def scripted(monkeypatch, tokens: list[int], uniforms: list[list[float]]) -> list[torch.Tensor]:
    """Every row drawn from gives the next of `tokens` (the rows are recorded); a round's tests read the next of
    `uniforms` (a round's uniforms: W drafts', W tests', the last token's)."""
    from coolsd.decoding.round import Session

    drawn_from = []

    def draw(self, probs, u):
        rows = probs.reshape(-1, probs.shape[-1])
        drawn_from.extend(row.clone() for row in rows)
        return torch.tensor(tokens[len(drawn_from) - len(rows) : len(drawn_from)]).reshape(*probs.shape[:-1], 1)

    def round_uniforms(self, n):
        tests = uniforms.pop(0) if n > 1 else []
        return torch.tensor([0.0] * (n // 2) + tests + [0.0], dtype=torch.float64)

    monkeypatch.setattr(Session, "draw", draw)
    monkeypatch.setattr(Session, "uniforms", round_uniforms)
    return drawn_from


@pytest.mark.parametrize("init", ["last", "uniform"])
def test_two_iterations_worked_by_hand(monkeypatch, init):
    """W = 2 on `Markov`. Round 0 draws token 0 = 0 from (0.6, 0.4).
    Iteration 1 (t = 1): no forward has seen positions 1, 2: q_1 = q_2 = the init, (0.6, 0.4) ("last": round 0's
    p) or (0.5, 0.5); drafts 0, 1. One forward on [0, 0, 1] at positions 0..2 gives p_1 = p(.|0) = (0.8, 0.2),
    p_2 = p(.|0, 0) = (0.8, 0.2), p_3 = p(.|0, 0, 1) = (0.3, 0.7). a_1 = min(1, 0.8 / q_1(0)) = 1: kept;
    a_2 = min(1, 0.2 / q_2(1)) = 0.5 (0.4 uniform), u = 0.9: rejected; the residual Norm([p_2 - q_2]_+) = (1, 0)
    gives 0. Committed 0, 0, 0.
    Iteration 2 (t = 3): one draft left before the last token. q_3 = iteration 1's row for position 3, p(.|0, 0, 1)
    = (0.3, 0.7), computed after the draft 1 that was rejected; draft 1. The forward on [0, 1] at positions 2, 3
    gives p_3 = p(.|0, 0, 0) = (0.8, 0.2): a = min(1, 0.2 / 0.7) = 2/7, u = 0.5: rejected; the residual
    Norm([(0.8, 0.2) - (0.3, 0.7)]_+) = (1, 0) gives 0.
    Iteration 3 (t = 4): the last token, a plain target step on [0] at position 3: p(.|0, 0, 0, 0) = (0.8, 0.2)."""
    target, rule = Markov(), Recording(SJD)
    drawn_from = scripted(monkeypatch, [0, 0, 1, 0, 1, 0, 1], [[0.1, 0.9], [0.5]])
    events = list(jacobi_decode(target, rule, Jacobi(window=2, init=init)))
    start = (0.6, 0.4) if init == "last" else (0.5, 0.5)
    expect_rows = [(0.6, 0.4), start, start, (1.0, 0.0), (0.3, 0.7), (1.0, 0.0), (0.8, 0.2)]
    assert [tuple(round(float(v), 12) for v in r) for r in drawn_from] == expect_rows
    assert target.calls == [([0, 0, 1], [0, 1, 2]), ([0, 1], [2, 3]), ([0], [3])]
    (p1, q1, x1), (p2, q2, x2) = rule.tests
    torch.testing.assert_close(q1, torch.tensor([start, start]).double())
    torch.testing.assert_close(p1, torch.tensor([[0.8, 0.2], [0.8, 0.2]]).double())
    torch.testing.assert_close(q2, torch.tensor([[0.3, 0.7]]).double())
    torch.testing.assert_close(p2, torch.tensor([[0.8, 0.2]]).double())
    assert (x1, x2) == ([0, 1], [1])
    assert [e.tokens.tolist() for e in events] == [[0], [0, 0], [0], [1]]
    assert [e.n_accepted for e in events] == [0, 1, 0, 0] and [e.n_drafted for e in events] == [0, 2, 1, 0]
    a = [e.accept_probs.tolist() for e in events[1:3]]
    assert a[0] == pytest.approx([1.0, 0.2 / start[1]]) and a[1] == pytest.approx([2 / 7])
    assert [(e.target_forwards, e.draft_forwards) for e in events] == [(1, 0)] * 4


def jacobi_decode(target, rule, drafting: Jacobi, **kw):
    from coolsd.decoding.engine import decode

    return decode(target, None, rule, num_tokens=target.num_tokens, config=DecodeConfig(drafting), **kw)


# ---------------------------------------------------------------- events and the engine's contract
@pytest.mark.parametrize("rule", [SJD, CoolSDRule(delta=4.0)], ids=["sjd", "cool"])
def test_jacobi_needs_no_drafter_and_ignores_one_given(rule):
    target, drafter = random_tables(4, 6, seed=2)
    config = DecodeConfig(Jacobi(window=3))
    alone = run(target, None, rule, num_tokens=6, seed=5, config=config)
    given = run(target, drafter, rule, num_tokens=6, seed=5, config=config)
    assert alone.tokens.tolist() == given.tokens.tolist() and drafter.length == 0  # (its window, not L or a tree)
    with pytest.raises(ValueError, match="tree drafting without a drafter"):
        run(target, None, rule, num_tokens=6, seed=5, config=DecodeConfig(chain_or_tree(1, "binary-2")))
    events = list(jacobi_decode(target, rule, Jacobi(window=3)))
    assert all(e.draft_forwards == 0 and e.target_forwards == 1 and e.n_drafted <= 3 for e in events)
    assert sum(len(e.tokens) for e in events) == 6
    full = [e.omega.tolist() for e in events if e.n_drafted == 3]  # omega over the window's depths, L = W
    assert full and all(w == rule.omega(torch.arange(1, 4), 3).tolist() for w in full)


def test_a_window_longer_than_the_image_drafts_what_is_left():
    target, _ = random_tables(3, 4, seed=0)
    events = list(jacobi_decode(target, SJD, Jacobi(window=16)))
    assert events[1].n_drafted == 2 and events[1].omega.tolist() == [1.0, 1.0]


def test_greedy_jacobi_is_vanilla_greedy():
    """Temperature 0: p and q one-hot, so SJD, and COOL-SD (floored) and LANTERN++ on Jacobi drafts, commit the
    target's argmax everywhere (Jacobi decoding)."""
    target, _ = random_tables(3, 7, seed=4)
    greedy = SamplingConfig(temperature=0.0)
    vanilla = run(target, None, None, num_tokens=7, sampling=greedy).tokens.tolist()
    lantern = LanternPPRule(k=1, lam=5.0).with_neighbours(neighbour_table(target.codebook))
    for rule, drafting in ((SJD, Jacobi(3)), (SJD, Jacobi(4, reuse=True)), (CoolSDRule(delta=8.0), Jacobi(3)),
                           (lantern, Jacobi(3))):
        config = DecodeConfig(drafting)
        assert run(target, None, rule, num_tokens=7, sampling=greedy, seed=3, config=config).tokens.tolist() == vanilla


def test_bad_windows_get_one_clear_line():
    for bad in (0, -1, 2.5, "8", None, True, 65):
        with pytest.raises(ValueError) as err:
            Jacobi(window=bad)
        assert str(err.value).startswith("Jacobi window W must be") and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="init must be one of last, uniform"):
        Jacobi(init="random")
    assert Jacobi(window=8.0).window == 8 and Jacobi().draft_len == Jacobi.window == 4 and not Jacobi.needs_drafter
