"""The engine (spec sections 2 and 5): sampled sequences follow the oracle; events keep their invariants."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from exact_engine import engine_distribution

from coolsd.decoding.drafting import Chain, Jacobi, Tree, chain_or_tree
from coolsd.decoding.engine import DecodeConfig, decode, generate, make_generator, run
from coolsd.decoding.events import DecodeResult, TokenOutcome
from coolsd.decoding.rules import RULES, CoolSDRule, EagleRule, UniformRSDRule
from coolsd.decoding.sampling import SamplingConfig
from coolsd.decoding.tree import TREES
from coolsd.theory.oracle import exact, sequence_probs

RESAMPLED, BONUS = TokenOutcome.RESAMPLED, TokenOutcome.BONUS


# Whole-sequence checks: V = 3, T = 5 (243 sequences), L = 3, so the first round drafts all three
# depths (COOL-SD's omega_3 < 1 at delta = 2). About 1 ms per sequence.
V, T, L = 3, 5, 3
N_SAMPLES = 4000


def greedy_sequence(target) -> list[int]:
    seq: list[int] = []
    for _ in range(target.num_tokens):
        seq.append(int(target.probs(tuple(seq)).argmax()))
    return seq


@pytest.fixture(scope="module")
def models():
    from coolsd.theory.tabular import random_tables

    return random_tables(V, T, seed=4)


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["vanilla", "eagle-1", "lantern++", "cool-sd"])
def test_empirical_distribution_matches_oracle(models, build_rule, distribution_test, name):
    target, drafter = models
    if name == "vanilla":
        rule, probs = None, sequence_probs(target)
    else:
        rule = build_rule(name, codebook=target.codebook, **({"k": 1} if name == "lantern++" else {}))
        probs = exact(target, drafter, rule, L).dist
    config = DecodeConfig(Chain(L))
    results = [run(target, drafter, rule, cond=None, num_tokens=T, config=config, seed=s) for s in range(N_SAMPLES)]
    samples = [r.tokens for r in results]
    # the mean number of rounds (target forwards) against the oracle's expectation, within 4 standard errors
    rounds = torch.tensor([float(r.rounds) for r in results], dtype=torch.float64)
    expected_rounds = float(T) if rule is None else exact(target, drafter, rule, L).expected_rounds
    se = float(rounds.std()) / math.sqrt(N_SAMPLES)
    print(f"{name}: rounds {float(rounds.mean()):.4f} +- {se:.4f}, oracle {expected_rounds:.4f}")
    assert abs(float(rounds.mean()) - expected_rounds) <= 4 * se + 1e-12
    stat, critical, df = distribution_test(samples, probs, V)
    print(f"{name}: chi2 {stat:.1f} critical {critical:.1f} df {df}")
    assert stat < critical, f"{name}: chi2 = {stat:.1f} > {critical:.1f} (df {df}) against the oracle"
    if name == "cool-sd":  # the test has power: the same draws are far from P itself
        stat_p, critical_p, _ = distribution_test(samples, sequence_probs(target), V)
        print(f"{name} against P itself: chi2 {stat_p:.1f} critical {critical_p:.1f}")
        assert stat_p > critical_p


# ---------------------------------------------------------------- exact: the engine's own distribution, enumerated
# tests/exact_engine.py runs the real engine once per path of random outcomes (no sampling noise), so the
# engine is compared with the oracle and with P to float rounding. V = 3, T = 4, L = 2: round 1 drafts both depths.
EV, ET, EL = 3, 4, 2
EXACT_RULES = {
    "eagle-1": ("eagle-1", {}),
    "uniform-rsd": ("uniform-rsd", {"delta": 1.7}),
    "cool-sd": ("cool-sd", {"delta": 2.0, "nu": 1.5}),  # omega = 3.27, 0.73: relaxed, then stricter than lossless
    "cool-sd-floor": ("cool-sd", {"delta": 2.0, "nu": 1.5, "floor_at_one": True}),
    "cool-sd-lossless-residual": ("cool-sd", {"delta": 2.0, "nu": 1.5, "residual_kind": "lossless"}),
    "lantern++": ("lantern++", {"k": 1, "lam": 3.0}),
    "lantern++-g*": ("lantern++", {"k": 1, "lam": 3.0, "residual_kind": "optimal"}),
    "lantern": ("lantern", {"k": 1, "delta": 0.3}),
    "linear-decay": ("linear-decay", {"delta": 1.5, "slope": 0.8}),  # omega 2.7, 0.3
    "custom": ("custom", {"omegas": (0.8, 2.5)}),
}


@pytest.fixture(scope="module")
def small_models():
    from coolsd.theory.tabular import random_tables

    return random_tables(EV, ET, seed=6)


def test_exact_rules_cover_the_registry():
    """Every rule (each also on every drafting: RuleContract, tests/decoding/test_rules.py)."""
    assert {name for name, _ in EXACT_RULES.values()} == set(RULES)


@pytest.mark.parametrize("case", list(EXACT_RULES))
def test_engine_distribution_equals_the_oracle_exactly(small_models, build_rule, monkeypatch, case):
    """Whole sequences and expected target forwards of the chain engine == the oracle, to rounding."""
    target, drafter = small_models
    name, kwargs = EXACT_RULES[case]
    rule = build_rule(name, codebook=target.codebook, **kwargs)
    dist, forwards = engine_distribution(target, drafter, rule, ET, DecodeConfig(Chain(EL)), monkeypatch)
    oracle = exact(target, drafter, rule, EL)
    assert math.isclose(float(dist.sum()), 1.0, abs_tol=1e-12)
    assert float((dist - oracle.dist).abs().max()) <= 1e-12, case
    assert math.isclose(forwards, oracle.expected_rounds, rel_tol=1e-12), case
    if not type(rule).lossless:
        assert oracle.tv > 1e-3  # a relaxed rule: the comparison above is not P == P


@pytest.mark.parametrize("rule", [
    CoolSDRule(delta=0.5, nu=0.7, floor_at_one=False),  # omega = 0.67, 0.33 at L = 2
    UniformRSDRule(delta=0.6),
], ids=["cool-sd-0.5", "uniform-0.6"])
def test_engine_with_omega_at_most_one_and_g_star_outputs_p_exactly(small_models, monkeypatch, rule):
    """Spec section 3: every depth with omega_i <= 1 is lossless with G*. The engine's resampling path
    (not only the rule) must use G* there: with Norm([p - q]_+) the output moves away from P."""
    target, drafter = small_models
    assert (rule.omega(torch.arange(1, EL + 1), EL) <= 1).all()
    config = DecodeConfig(Chain(EL))
    dist, forwards = engine_distribution(target, drafter, rule, ET, config, monkeypatch)
    assert float((dist - sequence_probs(target)).abs().max()) <= 1e-12
    assert math.isclose(forwards, exact(target, drafter, rule, EL).expected_rounds, rel_tol=1e-12)
    assert forwards > exact(target, drafter, EagleRule(), EL).expected_rounds  # stricter: more target forwards
    if isinstance(rule, CoolSDRule):  # the power of the check: the lossless residual is visibly biased here
        biased = dataclasses.replace(rule, residual_kind="lossless")
        dist, _ = engine_distribution(target, drafter, biased, ET, config, monkeypatch)
        assert 0.5 * float((dist - sequence_probs(target)).abs().sum()) > 1e-3


def test_vanilla_distribution_is_p_exactly(small_models, monkeypatch):
    target, _ = small_models
    dist, forwards = engine_distribution(target, None, None, ET, DecodeConfig(), monkeypatch)
    assert float((dist - sequence_probs(target)).abs().max()) <= 1e-15 and forwards == ET


# ---------------------------------------------------------------- events
RULE_NAMES = sorted(RULES)


@pytest.mark.parametrize("tree", [None, "binary-2", "jacobi"])
@pytest.mark.parametrize("name", RULE_NAMES + ["vanilla"])
def test_event_invariants(models, build_rule, name, tree):
    target, drafter = models
    if name == "vanilla":
        rule = None
    elif name.startswith("lantern"):
        rule = build_rule(name, codebook=target.codebook, k=1)  # V = 3: two other codes
    else:
        rule = build_rule(name)
    jacobi = tree == "jacobi" and rule is not None  # (vanilla AR ignores the drafting)
    config = DecodeConfig(Jacobi(3) if tree == "jacobi" else chain_or_tree(L, tree))
    tree = None if tree == "jacobi" else tree
    taus = []
    for seed in range(5):
        events = list(generate(target, drafter, rule, cond=None, num_tokens=T, config=config, seed=seed))
        result = DecodeResult.from_events(events)
        start = 0
        for e in events:
            assert e.start == start and len(e.tokens) == e.n_accepted + 1
            assert e.tokens.dtype == torch.long and e.target_forwards == 1
            assert len(e.accept_probs) == len(e.omega) == e.n_drafted
            assert 0 <= e.n_accepted <= e.n_drafted
            reached = min(e.n_accepted + 1, e.n_drafted)
            assert torch.isfinite(e.accept_probs[:reached]).all() and torch.isnan(e.accept_probs[reached:]).all()
            assert ((e.accept_probs[:reached] >= 0) & (e.accept_probs[:reached] <= 1)).all()
            assert len(e.tested_depths) == len(e.tested_probs) >= reached
            assert e.last in (RESAMPLED, BONUS)
            if tree is None or jacobi:
                assert e.n_drafted <= (config.drafting.draft_len if jacobi else L)
            # binary-2: every node above the deepest level has children, so a round ends on a bonus token
            # exactly when it accepted a draft at every depth it drafted
            assert (e.last == BONUS) == (e.n_accepted == e.n_drafted)
            if e.n_drafted and rule is not None:
                # the schedule's L: the configured draft length, or the tree's full depth (also where fewer
                # levels were left to draft at the image's end)
                schedule_len = max(map(len, TREES[tree])) if tree else config.drafting.draft_len
                torch.testing.assert_close(e.omega, rule.omega(torch.arange(1, e.n_drafted + 1), schedule_len))
            # every round has a timed target forward; draft time only where a drafter ran (SJD: drew its window)
            assert set(e.seconds) == {"draft", "verify", "other"} and e.seconds["verify"] > 0
            drafted = e.n_drafted > 0 if jacobi else rule is not None and (e.draft_forwards > 0 or e.index == 0)
            assert (e.seconds["draft"] > 0) == drafted
            start += len(e.tokens)
        assert events[0].index == 0 and events[0].n_drafted == 0 and len(events[0].tokens) == 1
        assert [e.index for e in events] == list(range(len(events)))
        assert len(result.tokens) == T and start == T
        assert result.target_forwards == result.rounds == len(events)
        assert math.isclose(result.tau, T / len(events))
        taus.append(result.tau)
        assert result.kinds.count("accepted") == sum(e.n_accepted for e in events)
        assert len(result.kinds) == T
        if rule is None:
            assert result.rounds == T and result.tau == 1 and result.draft_forwards == 0
    if rule is not None:
        assert max(taus) > 1  # some seed accepted a draft


def test_vanilla_when_drafter_or_rule_missing(models):
    target, drafter = models
    result = run(target, None, None, cond=None, num_tokens=T, seed=0)
    assert result.rounds == T and result.draft_forwards == 0


@pytest.mark.parametrize("tree", [None, "binary-2"])
def test_same_seed_same_tokens(models, build_rule, tree):
    target, drafter = models
    rule = build_rule("cool-sd")
    config = DecodeConfig(chain_or_tree(L, tree))
    first = run(target, drafter, rule, cond=None, num_tokens=T, config=config, seed=7)
    again = run(target, drafter, rule, cond=None, num_tokens=T, config=config, seed=7)
    assert torch.equal(first.tokens, again.tokens) and first.kinds == again.kinds
    for a, b in zip(first.events, again.events):
        assert torch.equal(a.accept_probs.nan_to_num(-1), b.accept_probs.nan_to_num(-1))
    others = {tuple(run(target, drafter, rule, cond=None, num_tokens=T, config=config,
                        seed=s).tokens.tolist()) for s in range(8, 20)}
    assert len(others) > 1  # the seed matters


def test_explicit_generator_equals_seed(models):
    target, drafter = models
    rule = CoolSDRule()
    events = decode(target, drafter, rule, cond=None, num_tokens=T, config=DecodeConfig(Chain(L)),
                    generator=make_generator(3))
    assert torch.equal(DecodeResult.from_events(events).tokens,
                       run(target, drafter, rule, cond=None, num_tokens=T, config=DecodeConfig(Chain(L)),
                           seed=3).tokens)


@pytest.mark.parametrize("tree", [None, "binary-2"])
@pytest.mark.parametrize("name", RULE_NAMES + ["vanilla"])
def test_greedy_is_the_targets_greedy_sequence(tabular, build_rule, name, tree):
    """Temperature 0: every rule (COOL-SD with omega < 1 included) commits the target's argmax chain."""
    for seed in range(3):
        target, drafter = tabular(4, 5, seed=seed)
        rule = None if name == "vanilla" else build_rule(name, codebook=target.codebook)
        result = run(target, drafter, rule, cond=None, num_tokens=5, sampling=SamplingConfig(temperature=0.0),
                     config=DecodeConfig(chain_or_tree(3, tree)), seed=seed)
        assert result.tokens.tolist() == greedy_sequence(target)


def test_draft_len_longer_than_the_image(models):
    target, drafter = models
    result = run(target, drafter, CoolSDRule(), cond=None, num_tokens=T, config=DecodeConfig(Chain(50)), seed=0)
    assert len(result.tokens) == T and all(e.n_drafted <= T - 2 for e in result.events)


def test_num_tokens_one(models):
    target, drafter = models
    result = run(target, drafter, CoolSDRule(), cond=None, num_tokens=1, seed=0)
    assert len(result.tokens) == 1 and result.rounds == 1


# ---------------------------------------------------------------- bad parameters fail early
@pytest.mark.parametrize(("make", "field"), [
    (lambda: Chain(0), "draft_len"), (lambda: Chain(-2), "draft_len"), (lambda: Chain(1.5), "draft_len"),
    (lambda: Chain(math.nan), "draft_len"), (lambda: Chain(math.inf), "draft_len"), (lambda: Chain(True), "draft_len"),
    (lambda: Tree("nope"), "tree"), (lambda: Jacobi(0), "window"), (lambda: DecodeConfig(detail="yes"), "detail"),
    (lambda: DecodeConfig(detail=1), "detail"), (lambda: DecodeConfig("chain"), "drafting"),
])
def test_bad_decode_config(make, field):
    with pytest.raises(ValueError, match=field):
        make()


@pytest.mark.parametrize(("num_tokens", "seed", "match"), [
    (0, 0, "num_tokens"), (-1, 0, "num_tokens"), (2.5, 0, "num_tokens must be a whole number"),
    (math.nan, 0, "num_tokens"), ("2", 0, "num_tokens must be a number"), (True, 0, "num_tokens must be a number"),
    (3, -1, "seed"), (3, 1.5, "seed"), (3, math.inf, "seed"),
])
def test_bad_run_arguments(models, num_tokens, seed, match):
    target, drafter = models
    with pytest.raises(ValueError, match=match):
        run(target, drafter, CoolSDRule(), cond=None, num_tokens=num_tokens, seed=seed)


def test_whole_floats_are_integers(models):
    """One check dialect (issue 26): 2.0 (what a JSON client sends) is the integer 2, as in the app."""
    target, drafter = models
    as_ints = run(target, drafter, CoolSDRule(), cond=None, num_tokens=2, seed=1)
    as_floats = run(target, drafter, CoolSDRule(), cond=None, num_tokens=2.0, seed=1.0,
                    config=DecodeConfig(Chain(3.0)))
    assert as_floats.tokens.tolist() == as_ints.tokens.tolist() and Chain(3.0).draft_len == 3
    assert type(Chain(3.0).draft_len) is int


def test_chain_feeds_features_and_positions_like_eagle(tabular):
    """Models that check their inputs (tests/exact_engine.py): pending tokens reach the drafter with the
    target's feature of the position before each, drafts with the drafter's own, all at their positions."""
    from exact_engine import checked_models

    target, drafter = checked_models(*tabular(3, 7, seed=9))
    for draft_len in (1, 3):
        for seed in range(4):
            calls = drafter.calls
            result = run(target, drafter, CoolSDRule(), cond=None, num_tokens=7,
                         config=DecodeConfig(Chain(draft_len)), seed=seed)
            assert len(result.tokens) == 7
            assert sum(e.draft_forwards for e in result.events) == drafter.calls - calls  # no wasted drafter call


def test_error_messages_in_full(models):
    """The app and the CLI show these texts as they are: whole messages, not fragments."""
    from coolsd.decoding.tree import TREES

    target, drafter = models
    cases = [
        (lambda: DecodeConfig(Chain(0)), "draft_len must be >= 1, got 0"),
        (lambda: DecodeConfig(Tree("oak")),
         f"unknown tree 'oak'; choose one of {', '.join(sorted(TREES))}"),
        (lambda: make_generator(2**63), "seed must be in [0, 2**63), got 9223372036854775808"),
        (lambda: run(target, None, CoolSDRule(), cond=None, num_tokens=T),
         "chain drafting without a drafter: pass one, draft by Jacobi iteration (coolsd.decoding.drafting.Jacobi), "
         "or rule=None for vanilla AR"),
        (lambda: generate(target, None, CoolSDRule(), cond=None, num_tokens=T),  # at the call, not on first next()
         "chain drafting without a drafter: pass one, draft by Jacobi iteration (coolsd.decoding.drafting.Jacobi), "
         "or rule=None for vanilla AR"),
        (lambda: run(target, None, None, cond=None, num_tokens=0), "num_tokens must be >= 1, got 0"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError) as err:
            call()
        assert str(err.value) == message
    make_generator(2**63 - 1)  # the largest seed is fine
    make_generator(0)


def test_rule_none_is_vanilla_whatever_the_drafter(tabular):
    """rule=None decodes vanilla AR: a drafter given is never called and the tokens are vanilla's for the seed
    (callers pass their drafter whatever the rule; the engine decides, in one place)."""
    from exact_engine import checked_models

    target, drafter = checked_models(*tabular(3, 7, seed=9))
    for seed in range(3):
        calls = drafter.calls
        with_drafter = run(target, drafter, None, num_tokens=7, seed=seed)
        assert drafter.calls == calls and with_drafter.draft_forwards == 0 and with_drafter.target_forwards == 7
        alone = run(target, None, None, num_tokens=7, seed=seed)
        assert torch.equal(with_drafter.tokens, alone.tokens) and with_drafter.kinds == alone.kinds


def test_chain_draws_only_from_the_seeded_generator(models, build_rule):
    """Same seed, same events, whatever torch's global random state (so no draw uses it)."""
    target, drafter = models
    for seed in range(6):
        outcomes = []
        for global_seed in (1, 2):
            torch.manual_seed(global_seed)
            result = run(target, drafter, build_rule("cool-sd"), cond=None, num_tokens=T,
                         config=DecodeConfig(Chain(L)), seed=seed)
            outcomes.append([(e.tokens.tolist(), e.tested_probs.tolist()) for e in result.events])
        assert outcomes[0] == outcomes[1]


def test_every_chain_depth_is_verified_with_its_own_paths_p_and_q(tabular):
    """Depth i of a round is tested with the target's and the drafter's conditionals of committed tokens +
    drafts 1..i-1 (so the first draft of a round reads the drafter's LAST row after several pending tokens); the
    residual is asked for once, after a rejection only, with the rejected depth's p, q, draft and depth."""

    class Spy:
        def __init__(self, rule):
            self.rule, self.tests, self.residuals = rule, [], []

        def chain_accept(self, p, q, x, draft_len):  # a chain round's test at every depth
            self.tests.append((p.clone(), q.clone(), x.tolist()))
            return self.rule.chain_accept(p, q, x, draft_len)

        def residual(self, p, q, x, depth, draft_len):  # at the depth that failed
            self.residuals.append((p.clone(), q.clone(), int(x), int(depth)))
            return self.rule.residual(p, q, x, depth, draft_len)

        def __getattr__(self, name):
            return getattr(self.rule, name)

    target, drafter = tabular(3, 7, seed=10)
    rejections = 0
    for seed in range(6):
        spy = Spy(CoolSDRule())
        result = run(target, drafter, spy, cond=None, num_tokens=7, config=DecodeConfig(Chain(3)), seed=seed)
        tests, residuals = iter(spy.tests), iter(spy.residuals)
        prefix = result.events[0].tokens.tolist()
        for e in result.events[1:]:
            if e.n_drafted:
                p, q, x = next(tests)
                assert x[: e.n_accepted] == e.tokens[: e.n_accepted].tolist() and len(x) == e.n_drafted
                for i in range(e.n_drafted):
                    path = tuple(prefix + x[:i])
                    torch.testing.assert_close(p[i], target.probs(path), rtol=0, atol=1e-12)
                    torch.testing.assert_close(q[i], drafter.probs(path), rtol=0, atol=1e-12)
            if e.last == "resampled":
                n = e.n_accepted
                p_n, q_n, x_n, depth = next(residuals)
                assert (x_n, depth) == (x[n], n + 1)
                torch.testing.assert_close(p_n, p[n], rtol=0, atol=0)
                torch.testing.assert_close(q_n, q[n], rtol=0, atol=0)
            prefix += e.tokens.tolist()
        assert next(tests, None) is None and next(residuals, None) is None
        assert any(e.n_accepted >= 1 for e in result.events[1:-1])
        rejections += len(spy.residuals)
    assert rejections > 0


def test_condition_and_default_seed_reach_the_models(tabular):
    """The condition goes to both models' start; no generator means seed 0, in decode, generate and run."""
    from exact_engine import checked_models

    target, drafter = checked_models(*tabular(3, 5, seed=11))
    rule, config = CoolSDRule(), DecodeConfig(Chain(2))
    reference = run(target, drafter, rule, cond=7, num_tokens=5, config=config, seed=0)
    assert target.cond == drafter.cond == 7
    by_decode = DecodeResult.from_events(decode(target, drafter, rule, cond=8, num_tokens=5, config=config))
    assert target.cond == drafter.cond == 8
    by_generate = DecodeResult.from_events(generate(target, drafter, rule, cond=7, num_tokens=5, config=config))
    by_run = run(target, drafter, rule, cond=7, num_tokens=5, config=config)
    for result in (by_decode, by_generate, by_run):
        assert [e.tokens.tolist() for e in result.events] == [e.tokens.tolist() for e in reference.events]
    assert any(run(target, drafter, rule, cond=7, num_tokens=5, config=config,
                   seed=s).tokens.tolist() != reference.tokens.tolist()
               for s in range(1, 6))  # so the equality above is about the seed


def test_make_event_dtypes_even_when_empty():
    """Token ids and depths are int64, probabilities float64, also for the empty lists of round 0."""
    from coolsd.decoding.round import make_event
    for kw in ({}, dict(accept_probs=[0.5], omega=[1.0], tested_depths=[1], tested_probs=[0.25])):
        ev = make_event(index=0, start=0, tokens=[] if not kw else [3], n_accepted=0, seconds={}, **kw)
        assert ev.tokens.dtype == ev.tested_depths.dtype == torch.long
        assert ev.accept_probs.dtype == ev.omega.dtype == ev.tested_probs.dtype == torch.float64


def test_clock_accumulates_each_phase(monkeypatch):
    """A fake perf_counter: the clock starts at zero in every phase and charges each span to its phase."""
    import coolsd.decoding.round as round_mod
    ticks = iter([100.0, 101.0, 103.0, 106.0, 110.0, 115.0])
    monkeypatch.setattr(round_mod.time, "perf_counter", lambda: next(ticks))
    clock = round_mod.Clock()  # t = 100
    assert clock.seconds == {"draft": 0.0, "verify": 0.0, "other": 0.0}
    clock.switch("draft")  # 101: other += 1
    clock.switch("verify")  # 103: draft += 2
    clock.switch("draft")  # 106: verify += 3
    assert dict(clock.read()) == {"draft": 6.0, "verify": 3.0, "other": 1.0}  # 110: draft += 4
    assert clock.read() == {"draft": 6.0, "verify": 3.0, "other": 6.0}  # 115: other += 5


def test_first_round_passes_guidance_and_the_last_feature(tabular):
    """Round 0 hands the guidance flag to both models and keeps only the last position's feature."""
    from coolsd.decoding.round import Session
    from coolsd.models.protocol import ModelStep
    from coolsd.theory.tabular import TabularDrafter, TabularLM

    seen = []
    p, q = tabular(4, 3, 0)

    class Target(TabularLM):
        def start(self, cond, guidance):
            seen.append(("target", guidance))
            logits = self.probs(()).log().expand(2 if guidance else 1, 3, -1)
            hidden = torch.arange(2 * 3 * 2, dtype=torch.float64).reshape(2, 3, 2)[: logits.shape[0]]
            return ModelStep(logits, hidden)

    class Drafter(TabularDrafter):
        def start(self, cond, guidance):
            seen.append(("drafter", guidance))

    target = Target(p.table, 4, 3)
    s = Session(target, Drafter(q.table, 4, 3), EagleRule(), SamplingConfig(cfg_scale=2.0),
                make_generator(0, target.device), 3, None)
    ev = s.first()
    assert seen == [("target", True), ("drafter", True)]
    assert s.pending_hidden[0].shape == (2, 1, 2)
    assert torch.equal(s.pending_hidden[0][:, 0], torch.tensor([[4.0, 5.0], [10.0, 11.0]], dtype=torch.float64))
    assert ev.tokens.tolist() == s.committed == [int(s.last_id)]
