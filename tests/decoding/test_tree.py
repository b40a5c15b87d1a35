"""Static-tree drafting (spec section 4): tree shapes, drafting without replacement, lossless verification."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from exact_engine import checked_models, engine_distribution

from coolsd.decoding.drafting import Tree, chain_or_tree
from coolsd.decoding.engine import DecodeConfig, run
from coolsd.decoding.noise import without_replacement
from coolsd.decoding.rules import CoolSDRule, EagleRule, UniformRSDRule
from coolsd.decoding.tree import EAGLE_25, TREES, binary_tree, chain_tree, validate
from coolsd.theory.oracle import exact, sequence_probs

V, T = 3, 4  # 81 sequences; the first speculative round verifies both depths of binary-2
N_SAMPLES = 3000


def test_shapes():
    for paths in TREES.values():
        validate(paths)
    assert binary_tree(2) == [(0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)]
    assert chain_tree(3) == [(0,), (0, 0), (0, 0, 0)]
    assert len(EAGLE_25) == 25
    assert [sum(len(p) == d for p in EAGLE_25) for d in range(1, 6)] == [4, 8, 8, 3, 2]


@pytest.mark.parametrize(("paths", "match"), [([(0, 1)], "no parent"), ([(0,), (0, 1)], "elder sibling"),
                                              ([(1,)], "elder sibling")])
def test_validate_rejects_broken_trees(paths, match):
    with pytest.raises(ValueError, match=match):
        validate(paths)


def testwithout_replacement(probs, gen, distribution_test):
    """Distinct ids, never a q == 0 token, and ordered pairs drawn with P(x1, x2) = q(x1) q(x2) / (1 - q(x1))."""
    q = torch.tensor([0.4, 0.3, 0.0, 0.2, 0.1], dtype=torch.float64)
    assert sorted(without_replacement(q, 10, gen)) == [0, 1, 3, 4]
    pairs = [without_replacement(q, 2, gen) for _ in range(4000)]
    assert all(len(set(p)) == 2 and 2 not in p for p in pairs)
    exact = torch.zeros(5, 5, dtype=torch.float64)
    for x1, x2 in itertools.permutations(range(5), 2):
        exact[x1, x2] = q[x1] * q[x2] / (1 - q[x1])
    stat, critical, df = distribution_test([torch.tensor(p) for p in pairs], exact.flatten(), 5)
    assert stat < critical, f"chi2 {stat:.1f} > {critical:.1f} (df {df})"


@pytest.mark.statistical
@pytest.mark.parametrize("rule", [EagleRule(), CoolSDRule(delta=0.5, nu=0.7, floor_at_one=False)],
                         ids=["eagle-1", "cool-sd-omega<1"])
def test_tree_verification_is_lossless(tabular, distribution_test, rule):
    """Eagle-1 on a static tree, siblings tried without replacement, reproduces P; so does any rule whose
    omega <= 1 at every depth, because its residual is G* (each sibling test is then exact)."""
    target, drafter = tabular(V, T, seed=5)
    assert (rule.omega(torch.arange(1, 3), 2) <= 1).all()
    config = DecodeConfig(Tree("binary-2"))
    results = [run(target, drafter, rule, cond=None, num_tokens=T, config=config, seed=s) for s in range(N_SAMPLES)]
    stat, critical, df = distribution_test([r.tokens for r in results], sequence_probs(target), V)
    print(f"{rule.name} tree: chi2 {stat:.1f} critical {critical:.1f} df {df}")
    assert stat < critical
    # the tree was really used: second siblings were tested, and rounds accepted two drafts
    tested = [e for r in results for e in r.events if e.index > 0]
    assert any(len(e.tested_depths) > e.n_accepted + 1 for e in tested)
    assert any(e.n_accepted == 2 for e in tested)


# ---------------------------------------------------------------- exact, by enumerating the engine's draws
@pytest.mark.parametrize("rule", [EagleRule(), CoolSDRule(delta=0.5, nu=0.7, floor_at_one=False),
                                  UniformRSDRule(delta=0.6)], ids=["eagle-1", "cool-sd-omega<1", "uniform-omega<1"])
def test_tree_verification_is_exactly_lossless(tabular, monkeypatch, rule):
    """binary-2 on V = 2, T = 4 (both depths verified in round 1): Eagle-1 and any rule with omega <= 1 and G*
    output P exactly, siblings tried without replacement (tests/exact_engine.py enumerates every draw)."""
    target, drafter = tabular(2, 4, seed=5)
    dist, forwards = engine_distribution(target, drafter, rule, 4, DecodeConfig(Tree("binary-2")), monkeypatch)
    assert float((dist - sequence_probs(target)).abs().max()) <= 1e-12
    if isinstance(rule, EagleRule):  # V = 2: the two siblings cover q's support, and after the first is rejected
        # the residual is all on the second, which is then accepted: round 1 always commits the whole tree + 1
        assert math.isclose(forwards, 2.0, rel_tol=1e-12)
    else:  # omega < 1: the second sibling can be rejected too, so some images need more rounds
        assert 2 + 1e-6 < forwards < 4


@pytest.mark.parametrize(("name", "kwargs"), [
    ("eagle-1", {}), ("uniform-rsd", {"delta": 1.7}),
    ("cool-sd", {"delta": 1.7, "nu": 0.0}), ("lantern++", {"k": 1, "lam": 3.0}),
    ("lantern++", {"k": 1, "lam": 3.0, "residual_kind": "optimal"}), ("lantern", {"k": 1, "delta": 0.3}),
    ("linear-decay", {"delta": 1.7, "slope": 0.0}), ("custom", {"omegas": (1.7,)}),
    # omega depends on depth but not on the draft length: explicit mu, a custom list
    ("cool-sd", {"delta": 2.0, "nu": 0.7, "mu": 0.0}), ("custom", {"omegas": (2.5, 0.6)}),
    # omega depends on the draft length too (mean-normalised mu, linear decay): the tree's L is its full depth,
    # also in the image's last rounds, as the chain's L is the configured one
    ("cool-sd", {"delta": 2.0, "nu": 0.7}), ("linear-decay", {"delta": 2.0, "slope": 0.3}),
], ids=lambda v: v if isinstance(v, str) else ",".join(f"{k}={x}" for k, x in v.items()))
def test_rules_on_the_chain_tree_match_the_chain_oracle(tabular, build_rule, monkeypatch, name, kwargs):
    """Every rule verifies the chain-shaped tree `chain-5` exactly as chain drafting with L = 5: the tree
    engine's distribution == the chain oracle's, also for rules whose omega depends on L (both use L = 5 in
    the image's last rounds, where fewer than 5 tokens are left to draft)."""
    target, drafter = tabular(3, 4, seed=7)
    rule = build_rule(name, codebook=target.codebook, **kwargs)
    dist, forwards = engine_distribution(target, drafter, rule, 4, DecodeConfig(Tree("chain-5")), monkeypatch)
    oracle = exact(target, drafter, rule, 5)
    assert float((dist - oracle.dist).abs().max()) <= 1e-12
    assert math.isclose(forwards, oracle.expected_rounds, rel_tol=1e-12)


def test_tree_round_events(tabular):
    target, drafter = tabular(4, 5, seed=0)
    for seed in range(10):
        result = run(target, drafter, UniformRSDRule(delta=2.0), cond=None, num_tokens=5,
                     config=DecodeConfig(Tree("binary-2")), seed=seed)
        for e in result.events[1:]:
            depths = e.tested_depths.tolist()
            assert depths == sorted(depths) and all(depths.count(d) <= 2 for d in set(depths))
            assert e.n_drafted <= 2 and e.draft_forwards == e.n_drafted  # one drafter call per expanded level
            assert len(e.tokens) == e.n_accepted + 1


def test_eagle_25_runs(tabular):
    """The published 25-node tree on a model deep enough for it (depth 5 needs T >= 7)."""
    target, drafter = tabular(4, 7, seed=0)
    for seed in range(3):
        result = run(target, drafter, EagleRule(), cond=None, num_tokens=7, config=DecodeConfig(Tree("eagle-25")),
                     seed=seed)
        assert len(result.tokens) == 7 and result.rounds < 7  # the tree saved target forwards
        first = result.events[1]  # t = 1 leaves 5 tokens to draft: the whole tree is drafted
        assert first.n_drafted == 5 and first.draft_forwards == 5  # pending tokens, then levels 1-4 with children
        assert first.tested_depths.max() <= first.n_accepted + 1


# ---------------------------------------------------------------- each node sees its own path (mutation testing)
class _Spy:
    """A rule that records what every sibling test was given: (p, q, x)."""

    def __init__(self, rule) -> None:
        self.rule, self.calls = rule, []

    def accept_prob(self, p, q, x, depth, draft_len):
        self.calls.append((p.clone(), q.clone(), int(x)))
        return self.rule.accept_prob(p, q, x, depth, draft_len)

    def __getattr__(self, name):
        return getattr(self.rule, name)


@pytest.mark.parametrize("tree", ["binary-2", "eagle-25"])
def test_every_node_is_verified_with_its_own_paths_p_and_q(tabular, tree):
    """The first sibling test at a node gets the target's and the drafter's conditionals of the node's path
    (committed tokens + drafts accepted so far); later siblings get q with the earlier siblings removed and
    renormalised. So the drafter's tree mask, slots and the target's tree mask pick the right contexts."""
    num_tokens = 7
    target, drafter = tabular(4, num_tokens, seed=8)
    for seed in range(6):
        spy = _Spy(UniformRSDRule(delta=1.5))
        result = run(target, drafter, spy, cond=None, num_tokens=num_tokens,
                     config=DecodeConfig(chain_or_tree(tree=tree)), seed=seed)
        calls = iter(spy.calls)
        prefix: list[int] = result.events[0].tokens.tolist()
        for e in result.events[1:]:
            accepted, depth_before, removed = e.tokens[: e.n_accepted].tolist(), 0, []
            for d in e.tested_depths.tolist():
                p, q, x = next(calls)
                path = tuple(prefix + accepted[: d - 1])
                if d != depth_before:  # the first sibling tested at this node
                    torch.testing.assert_close(p, target.probs(path), rtol=0, atol=1e-12)
                    removed = []
                expected = drafter.probs(path).clone()
                expected[removed] = 0.0
                torch.testing.assert_close(q, expected / expected.sum(), rtol=0, atol=1e-12)
                assert expected[x] > 0
                removed.append(x)
                depth_before = d
            prefix += e.tokens.tolist()
        assert next(calls, None) is None  # every recorded test was accounted for


def test_validate_checks_the_direct_parent_and_says_which():
    with pytest.raises(ValueError) as err:
        validate([(0,), (0, 0, 0)])
    assert str(err.value) == "tree path (0, 0, 0) has no parent (0, 0)"
    with pytest.raises(ValueError) as err:
        validate([(0,), (0, 1)])
    assert str(err.value) == "tree path (0, 1) has no elder sibling"


def test_tree_round_refuses_the_last_token(tabular):
    """The engine runs the image's last token as a plain step; a tree round asked for it says so."""
    from coolsd.decoding.engine import make_generator
    from coolsd.decoding.round import Session
    from coolsd.decoding.sampling import SamplingConfig
    from coolsd.decoding.tree import tree_round

    target, drafter = tabular(3, 2, seed=0)
    s = Session(target, drafter, EagleRule(), SamplingConfig(), make_generator(0), 2, None)
    s.first()
    with pytest.raises(ValueError) as err:
        tree_round(s, 1, TREES["binary-2"])
    assert str(err.value) == "a tree round needs at least one draftable token; the last token is a plain step"


@pytest.mark.parametrize("tree", ["binary-2", "eagle-25", "chain-5"])
def test_tree_feeds_features_and_positions_like_eagle(tabular, tree):
    """Models that check their inputs (tests/exact_engine.py: CheckedTarget, CheckedDrafter): every drafter
    input comes with the feature of the context before it (the target's for committed tokens, the drafter's
    own for drafted ones) at its own position, and the target sees tree positions t - 1 + depth."""
    target, drafter = checked_models(*tabular(3, 7, seed=9))
    for seed in range(4):
        calls = drafter.calls
        result = run(target, drafter, UniformRSDRule(delta=1.5), cond=None, num_tokens=7,
                     config=DecodeConfig(chain_or_tree(tree=tree)), seed=seed)
        assert len(result.tokens) == 7
        assert sum(e.draft_forwards for e in result.events) == drafter.calls - calls  # counted, not assumed


@pytest.mark.parametrize("tree", ["binary-2", "eagle-25"])
def test_tree_draws_only_from_the_seeded_generator(tabular, tree):
    """Same seed, same round by round outcome, whatever torch's global random state (so no draw uses it)."""
    target, drafter = tabular(3, 7, seed=9)
    for seed in range(6):
        outcomes = []
        for global_seed in (1, 2):
            torch.manual_seed(global_seed)
            result = run(target, drafter, UniformRSDRule(delta=1.5), cond=None, num_tokens=7,
                         config=DecodeConfig(chain_or_tree(tree=tree)), seed=seed)
            outcomes.append([(e.tokens.tolist(), e.tested_depths.tolist(), e.tested_probs.tolist())
                             for e in result.events])
        assert outcomes[0] == outcomes[1]
