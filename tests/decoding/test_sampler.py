"""The one sampler every decoder draws with (issue 53): `inverse_cdf` draws exactly its row's distribution.

Exactly, first: uniforms on a dyadic grid (k / M) over rows whose masses are multiples of 1/16 land on each id
exactly M * p(id) times, since every sum and product involved is exact in float64; so an off-by-one (the id before
or after the crossing, a closed instead of a half-open interval, a zero-mass id picked at a boundary) changes a
count. Then the edges (u = 0, the largest u below 1, trailing zeros), and chi-square checks of real draws: of the
sampler on random rows, and of whole sequences of the engine (vanilla AR, Eagle-1, COOL-SD) at non-default
sampling (CFG, temperature, top-k, top-p) against the processed tables computed in numpy from the spec.
"""

from __future__ import annotations

import pytest
import torch
from test_sampling_exact import SAMPLINGS, T, V, guided_models, processed_tables

from coolsd import DecodeConfig, run, sequence_probs
from coolsd.decoding.drafting import Chain
from coolsd.decoding.sampling import inverse_cdf
from coolsd.theory.oracle import exact
from coolsd.theory.tabular import TabularDrafter, TabularLM

F = torch.float64
LARGEST_U = 1.0 - 2.0**-53  # the largest float64 uniform torch.rand makes
SIXTEENTHS = {  # rows in sixteenths: zeros first, inside, last; one-hot; and a row that does not sum to 1
    "dense": [1, 2, 3, 4, 6],
    "zeros first": [0, 0, 5, 3, 8],
    "zeros inside": [4, 0, 0, 4, 8],
    "zeros last": [7, 9, 0, 0, 0],
    "one-hot": [0, 0, 16, 0, 0],
    "total 3": [3, 9, 0, 12, 24],  # sums to 48 / 16 = 3: the sampler divides by the row's total itself
}


def grid_counts(row: torch.Tensor, m: int) -> torch.Tensor:
    """How often each id is drawn by the m uniforms k / m, k = 0..m-1: one batched call, one uniform per row."""
    u = (torch.arange(m, dtype=F) / m)[:, None]  # (m, 1)
    ids = inverse_cdf(row.expand(m, -1), u)  # (m, 1)
    return torch.bincount(ids[:, 0], minlength=len(row))


@pytest.mark.parametrize("name", list(SIXTEENTHS))
def test_a_dyadic_grid_of_uniforms_lands_exactly_on_the_probabilities(name):
    sixteenths = torch.tensor(SIXTEENTHS[name], dtype=F)
    row, m = sixteenths / 16, 4096
    expected = (sixteenths / sixteenths.sum() * m).long()  # exact: m is a multiple of every denominator here
    assert grid_counts(row, m).tolist() == expected.tolist()


def test_one_float_uniform_draws_like_a_tensor_of_them():
    """A host float (a chain round's draw) and a (.., 1) tensor (a Jacobi window's) are the same sampler."""
    row = torch.tensor(SIXTEENTHS["zeros inside"], dtype=F) / 16
    for k in range(64):
        u = k / 64
        assert inverse_cdf(row, u).tolist() == inverse_cdf(row, torch.tensor([u], dtype=F)).tolist()
        assert inverse_cdf(row, u).shape == (1,) and inverse_cdf(row, u).dtype == torch.long


def test_edges_never_pick_an_id_without_mass():
    """u = 0 takes the first id with mass; a u on a cumulative boundary the id after it (intervals are
    [cdf(i - 1), cdf(i))); the largest u the last id with mass, never one past the end."""
    first = torch.tensor([0.0, 0.0, 0.25, 0.25, 0.5, 0.0, 0.0], dtype=F)
    assert int(inverse_cdf(first, 0.0)) == 2
    assert int(inverse_cdf(first, 0.25)) == 3 and int(inverse_cdf(first, 0.5)) == 4
    assert int(inverse_cdf(first, 0.25 - 2**-53)) == 2
    assert int(inverse_cdf(first, LARGEST_U)) == 4
    assert int(inverse_cdf(3 * first, LARGEST_U)) == 4  # also where u * total rounds (total 3)
    for total in (0.1, 0.7, 1.0 - 2**-50, 1.0, 1.0 + 2**-50, 3.0, 1e5):  # rows that do not sum to 1 exactly
        row = torch.tensor([0.5, 0.5, 0.0], dtype=F) * total
        assert int(inverse_cdf(row, LARGEST_U)) == 1 and int(inverse_cdf(row, 0.0)) == 0


@pytest.mark.statistical
@pytest.mark.parametrize("zeros", [0.0, 0.4], ids=["dense", "sparse"])
def test_real_uniforms_follow_random_rows(probs, gen, zeros, chi_square_of):
    """torch.rand's uniforms through the sampler: chi-square at alpha 1e-3, and total variation below 0.01."""
    chi_square = chi_square_of
    n = 200_000
    for _ in range(3):
        row = probs(6, generator=gen, zeros=zeros)
        u = torch.rand(n, 1, generator=gen, dtype=F)
        counts = torch.bincount(inverse_cdf(row.expand(n, -1), u)[:, 0], minlength=6).double()
        stat, critical, df = chi_square(counts, row)
        assert stat < critical, f"chi2 {stat:.1f} > {critical:.1f} (df {df})"
        assert 0.5 * float((counts / n - row).abs().sum()) < 0.01


# ---------------------------------------------------------------- the engine's own draws, at non-default sampling
N_SEQUENCES = 3000


@pytest.fixture(scope="module")
def guided():
    return guided_models(seed=3)


def sequences(target, drafter, rule, sampling) -> list[torch.Tensor]:
    config = DecodeConfig(Chain(2))
    return [run(target, drafter, rule, num_tokens=T, sampling=sampling, config=config, seed=s).tokens
            for s in range(N_SEQUENCES)]


@pytest.mark.statistical
@pytest.mark.parametrize("sampling_name", ["cfg", "temperature", "top-k", "top-p", "all"])
def test_vanilla_ar_samples_p_at_every_setting(guided, distribution_test, sampling_name):
    """Raw (cond, uncond) logits through SamplingConfig and the sampler: whole sequences follow the processed
    target of the spec (numpy), at every setting alone and all together."""
    target, drafter = guided
    sampling = SAMPLINGS[sampling_name]
    p = TabularLM(processed_tables(target, sampling), V, T)
    stat, critical, df = distribution_test(sequences(target, drafter, None, sampling), sequence_probs(p), V)
    assert stat < critical, f"{sampling_name}: chi2 {stat:.1f} > {critical:.1f} (df {df})"


@pytest.mark.statistical
@pytest.mark.parametrize("case", ["eagle-1", "cool-sd"])
def test_speculative_rounds_sample_the_oracle_at_all_settings(guided, build_rule, distribution_test, case):
    """Drafts, tests and last tokens all drawn from one round's uniforms: Eagle-1 gives P, COOL-SD (an omega below
    1 at depth 2) its exact oracle distribution, at CFG + temperature + top-k + top-p."""
    target, drafter = guided
    sampling = SAMPLINGS["all"]
    p = TabularLM(processed_tables(target, sampling), V, T)
    q = TabularDrafter(processed_tables(drafter, sampling), V, T)
    rule = build_rule(case, **({"delta": 2.0, "nu": 1.5, "floor_at_one": False} if case == "cool-sd" else {}))
    expected = sequence_probs(p) if case == "eagle-1" else exact(p, q, rule, 2).dist
    stat, critical, df = distribution_test(sequences(target, drafter, rule, sampling), expected, V)
    assert stat < critical, f"{case}: chi2 {stat:.1f} > {critical:.1f} (df {df})"
