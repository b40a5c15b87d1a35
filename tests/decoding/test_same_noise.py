"""Same noise (`coolsd.decoding.noise`): dice keyed by (seed, position), the exponential race, the coupled test.

What must hold: the race draws its row's distribution; a position's noise is a function of (seed, position) alone;
vanilla AR and every relaxed rule keep their exact distributions (enumerated, and by chi-square over seeds, which
also catches noise reused where it must not be); a lossless racer's tokens equal vanilla AR's under the same seed,
token for token (100 seeds); and the coupled test accepts exactly `race_agreement`, less than the standard test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from exact_engine import engine_distribution
from test_jacobi import oracle_of, relaxed_rule
from test_sampling_exact import SAMPLINGS, guided_models

from coolsd.decoding.drafting import Chain, Jacobi, Tree
from coolsd.decoding.engine import DecodeConfig, run
from coolsd.decoding.noise import SameDice, position_noise, race
from coolsd.decoding.rules import EagleRule, make_rule
from coolsd.decoding.sampling import SamplingConfig
from coolsd.theory.coupling import race_agreement, standard_agreement
from coolsd.theory.oracle import exact, sequence_probs
from coolsd.theory.tabular import random_tables

SAME = DecodeConfig(Chain(2), noise="same")


def chi_square_ok(counts: np.ndarray, probs: np.ndarray) -> bool:
    """Pearson's chi-square of counts against probs below its 0.999 quantile (Wilson-Hilferty), zero-mass ids
    never drawn."""
    n = counts.sum()
    keep = probs > 0
    assert counts[~keep].sum() == 0, "a zero-probability id was drawn"
    expected = n * probs[keep]
    stat = float(((counts[keep] - expected) ** 2 / expected).sum())
    df = int(keep.sum()) - 1
    critical = df * (1 - 2 / (9 * df) + 3.09 * math.sqrt(2 / (9 * df))) ** 3
    return stat < critical


# ---------------------------------------------------------------- the race and the keyed noise
def test_the_race_draws_each_rows_distribution():
    probs = torch.tensor([[0.1, 0.0, 0.3, 0.6, 0.0], [0.0, 0.5, 0.25, 0.0, 0.25]], dtype=torch.float64)
    gen = torch.Generator().manual_seed(1)
    n = 100_000
    e = torch.empty(n, 2, 5, dtype=torch.float64).exponential_(generator=gen)
    ids = race(probs.expand(n, -1, -1), e)[..., 0]  # (n, 2)
    for row in range(2):
        counts = np.bincount(ids[:, row].numpy(), minlength=5)
        assert chi_square_ok(counts, probs[row].numpy()), counts


def test_position_noise_is_exponential_then_two_uniforms():
    """Races on the noise of 20,000 positions draw p (a uniform used as E would not); the tail is uniform."""
    p = np.array([0.05, 0.15, 0.3, 0.5])
    rows = np.stack([position_noise(7, j, 4) for j in range(20_000)])
    picks = race(torch.from_numpy(p).expand(len(rows), -1), torch.from_numpy(rows[:, :4]))[:, 0].numpy()
    assert chi_square_ok(np.bincount(picks, minlength=4), p)
    for u in (rows[:, 4], rows[:, 5]):
        assert ((0 <= u) & (u < 1)).all()
        deciles = np.bincount(np.minimum((u * 10).astype(int), 9), minlength=10)
        assert chi_square_ok(deciles, np.full(10, 0.1))


def test_position_noise_is_a_function_of_seed_and_position_alone():
    a = position_noise(3, 11, 9)
    assert np.array_equal(a, position_noise(3, 11, 9))
    for other in (position_noise(3, 12, 9), position_noise(4, 11, 9), position_noise(11, 3, 9)):
        assert not np.allclose(a, other)


# ---------------------------------------------------------------- exact distributions
@pytest.mark.parametrize("name,kwargs", [
    (None, {}),
    ("cool-sd", {"delta": 2.0, "nu": 1.5, "floor_at_one": False}),  # omega 3.27, 0.73: relaxed, then strict
    ("cool-sd", {"delta": 2.0, "nu": 1.5, "floor_at_one": True}),
    ("uniform-rsd", {"delta": 1.7}),
    ("lantern++", {"k": 1, "lam": 3.0}),
    ("lantern++", {"k": 1, "lam": 3.0, "residual_kind": "optimal"}),
    ("lantern", {"k": 1, "delta": 0.3}),
    ("linear-decay", {"delta": 1.5, "slope": 0.8}),
    ("custom", {"omegas": (0.8, 2.5)}),
], ids=["vanilla", "cool-sd-unclipped", "cool-sd", "uniform-rsd", "lantern++", "lantern++-g*", "lantern",
        "linear-decay", "custom"])
def test_vanilla_and_relaxed_rules_keep_their_exact_distribution(build_rule, monkeypatch, name, kwargs):
    """V = 3, T = 4, L = 2: every race enumerated as a draw from its row, so a race or a residual read from the
    wrong row (p for q, the bonus for the residual, another depth's) changes the distribution."""
    target, drafter = random_tables(3, 4, seed=6)
    rule = None if name is None else build_rule(name, codebook=target.codebook, **kwargs)
    dist, forwards = engine_distribution(target, drafter, rule, 4, SAME, monkeypatch)
    want = sequence_probs(target) if rule is None else exact(target, drafter, rule, 2).dist
    assert float((dist - want).abs().max()) <= 1e-12
    if rule is not None:
        assert math.isclose(forwards, exact(target, drafter, rule, 2).expected_rounds, rel_tol=1e-12)


@pytest.mark.parametrize("sampling_name", ["cfg", "all"])
@pytest.mark.parametrize("case", ["cool-sd-jacobi", "lantern++-jacobi"])
def test_relaxed_jacobi_rules_keep_their_exact_distribution(monkeypatch, case, sampling_name):
    """Relaxed rules on Jacobi drafts under same noise, with guidance and truncation: the Jacobi oracle's law."""
    target, _ = guided_models(seed=3)
    sampling = SAMPLINGS[sampling_name]
    rule, drafting = relaxed_rule(case, target.codebook, 2)
    dist, forwards = engine_distribution(target, None, rule, 4, DecodeConfig(drafting, noise="same"), monkeypatch,
                                         sampling=sampling)
    oracle = oracle_of(target, sampling, rule, drafting)
    assert float((dist - oracle.dist).abs().max()) <= 1e-12
    assert math.isclose(forwards, oracle.expected_rounds, rel_tol=1e-12)
    assert oracle.tv > 1e-3  # relaxed: not P itself


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["vanilla", "eagle-1", "cool-sd"])
def test_sampled_sequences_follow_the_law_over_seeds(build_rule, distribution_test, name):
    """Real noise, 3,000 seeds, V = 3, T = 5, L = 3: a position's noise read twice where it must be read once (the
    residual raced on the draft's E, say) would bias these counts; the enumeration above cannot see that."""
    target, drafter = random_tables(3, 5, seed=4)
    rule = None if name == "vanilla" else build_rule(name, codebook=target.codebook)
    probs = sequence_probs(target) if rule is None else exact(target, drafter, rule, 3).dist
    config = DecodeConfig(Chain(3), noise="same")
    samples = [run(target, drafter, rule, num_tokens=5, config=config, seed=s).tokens for s in range(3000)]
    stat, critical, df = distribution_test(samples, probs, 3)
    assert stat < critical, f"{name}: chi2 {stat:.1f} > {critical:.1f} (df {df})"


def test_the_sampled_check_has_power_against_a_residual_on_the_tests_uniform(build_rule, distribution_test,
                                                                            monkeypatch):
    """The mutant: a rejection draws the residual at the test's own uniform (above a_i, given the rejection)."""
    target, drafter = random_tables(3, 5, seed=4)
    rule = build_rule("cool-sd", codebook=target.codebook)

    def correlated(self, rule, p, q, x, n, draft_len):
        row = p[n] if n == len(x) else rule.residual(p[n], q[n], x[n], self.s.depths[n], draft_len)
        return row, (race(row, self.e[n]) if n == len(x) else self.s.draw(row, self.host[n][0]))

    monkeypatch.setattr(SameDice, "last", correlated)
    config = DecodeConfig(Chain(3), noise="same")
    samples = [run(target, drafter, rule, num_tokens=5, config=config, seed=s).tokens for s in range(3000)]
    stat, critical, _ = distribution_test(samples, exact(target, drafter, rule, 3).dist, 3)
    assert stat > critical


# ---------------------------------------------------------------- the lossless racer draws vanilla's picture
SETTINGS = {"default": SamplingConfig(), "t0.7 top-k 3": SamplingConfig(temperature=0.7, top_k=3),
            "top-p 0.8": SamplingConfig(top_p=0.8), "greedy": SamplingConfig(temperature=0)}


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_a_lossless_racer_commits_vanilla_ars_tokens_on_100_seeds(setting):
    """V = 4, T = 7: Eagle-1 (L = 3) and SJD (W = 4, and with reuse) under same noise equal vanilla AR's tokens
    seed by seed; on the stream they do not (the test's power)."""
    target, drafter = random_tables(4, 7, seed=2)
    sampling = SETTINGS[setting]
    chain = DecodeConfig(Chain(3), noise="same")
    lossless = [chain, DecodeConfig(Jacobi(4), noise="same"), DecodeConfig(Jacobi(4, reuse=True), noise="same")]
    differs = 0
    for seed in range(100):
        vanilla = run(target, drafter, None, num_tokens=7, sampling=sampling, config=chain, seed=seed).tokens
        for config in lossless:  # Eagle-1's test on a drafter's chain and on Jacobi drafts (SJD, + reuse)
            got = run(target, drafter, EagleRule(), num_tokens=7, sampling=sampling, config=config, seed=seed).tokens
            assert got.tolist() == vanilla.tolist(), (setting, seed, config.drafting)
        stream = run(target, drafter, EagleRule(), num_tokens=7, sampling=sampling, config=DecodeConfig(Chain(3)),
                     seed=seed).tokens
        differs += stream.tolist() != vanilla.tolist()
    assert differs > 0 or setting == "greedy"


def test_the_coupled_test_accepts_the_race_agreement_less_than_the_standard_test():
    """T = 3, L = 1: round 1 tests one draft after token 0; over 4,000 seeds its acceptance rate is
    sum_x0 p(x0) race_agreement(p(. | x0), q(. | x0)) within 4 standard errors, and below the standard test's."""
    target, drafter = random_tables(4, 3, seed=5)
    p0 = target.probs(())
    agree = sum(float(p0[x]) * float(race_agreement(target.probs((x,)), drafter.probs((x,)))) for x in range(4))
    standard = sum(float(p0[x]) * float(standard_agreement(target.probs((x,)), drafter.probs((x,)))) for x in range(4))
    config = DecodeConfig(Chain(1), noise="same")
    n = 4000
    accepted = [run(target, drafter, EagleRule(), num_tokens=3, config=config, seed=s).events[1].n_accepted
                for s in range(n)]
    rate = sum(accepted) / n
    assert abs(rate - agree) <= 4 * math.sqrt(agree * (1 - agree) / n), (rate, agree)
    assert agree < standard


def test_race_agreement_is_exact_and_at_most_the_standard_rate():
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64)
    q = torch.tensor([0.2, 0.3, 0.1, 0.4], dtype=torch.float64)
    n = 200_000
    e = torch.empty(n, 4, dtype=torch.float64).exponential_(generator=gen)
    rate = float((race(p.expand(n, -1), e) == race(q.expand(n, -1), e)).double().mean())
    agree = float(race_agreement(p, q))
    assert abs(rate - agree) <= 4 * math.sqrt(agree * (1 - agree) / n)
    rows = torch.rand(50, 2, 6, generator=gen, dtype=torch.float64) ** 3
    rows = rows / rows.sum(-1, keepdim=True)
    assert (race_agreement(rows[:, 0], rows[:, 1]) <= standard_agreement(rows[:, 0], rows[:, 1]) + 1e-12).all()
    assert math.isclose(float(race_agreement(p, p)), 1.0, rel_tol=1e-12)


# ---------------------------------------------------------------- settings
def test_same_noise_refuses_a_tree_and_names_its_choices():
    with pytest.raises(ValueError, match="same noise does not apply to tree drafting.*choose chain or Jacobi"):
        DecodeConfig(Tree("eagle-25"), noise="same")
    with pytest.raises(ValueError, match="unknown noise 'dice'; choose one of stream, same"):
        DecodeConfig(noise="dice")


def test_stream_noise_is_unchanged_by_default():
    """The default stream's tokens under a seed do not depend on the noise module's presence: vanilla AR's first
    token is the inverse CDF of p at the stream's first uniform."""
    target, drafter = random_tables(5, 3, seed=1)
    got = run(target, drafter, make_rule("cool-sd"), num_tokens=3, seed=9).tokens
    u = float(torch.rand(1, generator=torch.Generator().manual_seed(9), dtype=torch.float64))
    assert int(got[0]) == int((target.probs(()).cumsum(-1) <= u).sum())
