"""Shared test fixtures: seeded generators, random distributions, tiny tabular models, one rule of each kind."""

from __future__ import annotations

import math
import os
import time

# No network in tests (the app sets the same before gradio / huggingface_hub are imported).
for _key, _value in {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
                     "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"}.items():
    os.environ.setdefault(_key, _value)

import pytest  # noqa: E402
import torch  # noqa: E402

from coolsd.decoding.neighbours import neighbour_table  # noqa: E402
from coolsd.decoding.rules import Rule, make_rule  # noqa: E402
from coolsd.theory.tabular import random_tables  # noqa: E402

# Tests use tiny tensors on a small shared CPU: intra-op threads only add contention (about 10x slower).
torch.set_num_threads(1)

# One non-trivial configuration per registered rule (a new rule adds its line here).
RULE_KWARGS: dict[str, dict] = {
    "eagle-1": {},
    "uniform-rsd": {"delta": 1.7},
    "cool-sd": {"delta": 2.0, "nu": 0.7, "floor_at_one": False},  # unclipped: omega < 1 at depth 3 of L = 3
    "lantern++": {"k": 2, "lam": 3.0},
    "lantern": {"k": 2, "delta": 0.2},
    "linear-decay": {"delta": 1.5, "slope": 0.8},  # omega 2.7, 1.5, 0.3 at L = 3
    "custom": {"omegas": (2.5, 1.0, 0.4)},
}


def random_probs(*shape: int, generator: torch.Generator, zeros: float = 0.0, sharpness: float = 1.5) -> torch.Tensor:
    """(..., V) float64 rows on the simplex; a fraction `zeros` of entries set to 0 (the row argmax is kept)."""
    z = sharpness * torch.randn(*shape, generator=generator, dtype=torch.float64)
    if zeros > 0:
        drop = torch.rand(*shape, generator=generator, dtype=torch.float64) < zeros
        drop &= z < z.max(-1, keepdim=True).values
        z = z.masked_fill(drop, -torch.inf)
    return z.softmax(-1)


def chi_square(counts: torch.Tensor, expected_probs: torch.Tensor, z: float = 3.09) -> tuple[float, float, int]:
    """Pearson chi-square of observed `counts` against `expected_probs` (same shape, any number of cells).

    Cells expected below 5 draws are pooled (and the pool folded into the smallest other cell if it is
    still below 5). Returns (statistic, critical value, degrees of freedom); the critical value is the
    Wilson-Hilferty approximation of the upper quantile at normal z (3.09: alpha = 1e-3), so no scipy.
    An outcome with probability 0 that was drawn gives an infinite statistic.
    """
    counts, expected_probs = counts.double().flatten(), expected_probs.double().flatten()
    n = counts.sum()
    if (counts[expected_probs <= 0] > 0).any():
        return math.inf, 0.0, 0
    expected = n * expected_probs
    big = expected >= 5
    obs, exp = list(counts[big]), list(expected[big])
    pool_obs, pool_exp = counts[~big].sum(), expected[~big].sum()
    if pool_exp >= 5:
        obs.append(pool_obs), exp.append(pool_exp)
    elif pool_exp > 0:
        j = min(range(len(exp)), key=lambda i: exp[i])
        obs[j], exp[j] = obs[j] + pool_obs, exp[j] + pool_exp
    obs, exp = torch.stack(obs), torch.stack(exp)
    stat = float(((obs - exp) ** 2 / exp).sum())
    df = len(exp) - 1
    critical = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    return stat, critical, df


def sequence_index(tokens: torch.Tensor, vocab_size: int) -> int:
    """Row-major index of a whole sequence, as in `coolsd.theory.oracle.sequence_probs`."""
    return sum(int(x) * vocab_size ** (len(tokens) - 1 - i) for i, x in enumerate(tokens))


@pytest.fixture
def chi_square_of():
    """`chi_square` as a fixture: a test module cannot import this conftest by name (tests/app has its own)."""
    return chi_square


@pytest.fixture
def distribution_test():
    """distribution_test(sequences, probs, vocab_size) -> (stat, critical, df): chi-square of sampled
    whole sequences (list of (T,) ids) against exact sequence probabilities (V**T,)."""

    def run(sequences, probs: torch.Tensor, vocab_size: int) -> tuple[float, float, int]:
        counts = torch.zeros_like(probs)
        for seq in sequences:
            counts[sequence_index(seq, vocab_size)] += 1
        return chi_square(counts, probs)

    return run


@pytest.fixture
def gen() -> torch.Generator:
    """A seeded CPU generator (seed 0); tests that need several streams reseed it."""
    return torch.Generator().manual_seed(0)


@pytest.fixture
def probs():
    """random_probs(*shape, generator=..., zeros=..., sharpness=...) as a fixture."""
    return random_probs


@pytest.fixture
def tabular():
    """tabular(vocab_size, num_tokens, seed, **kw) -> (TabularLM P, TabularDrafter Q), see coolsd.theory.tabular."""
    return random_tables


@pytest.fixture
def tiny_models():
    """V = 4, T = 3 tabular target and drafter (64 sequences), seed 0."""
    return random_tables(4, 3, seed=0)


@pytest.fixture
def build_rule():
    """build_rule(name, codebook=None, **overrides) -> Rule: RULE_KWARGS[name] with overrides.

    LANTERN rules get a neighbour table from `codebook` (V, C); without one a random 2-D codebook of
    8 codes is used, so the rule works for V = 8.
    """

    def build(name: str, codebook: torch.Tensor | None = None, **overrides) -> Rule:
        if name not in RULE_KWARGS:
            raise KeyError(f"rule {name!r} is registered but tests/conftest.py: RULE_KWARGS has no entry for it")
        rule = make_rule(name, **(RULE_KWARGS[name] | overrides))
        if rule.reads_neighbours:
            if codebook is None:
                codebook = torch.randn(8, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
            rule = rule.with_neighbours(neighbour_table(codebook))
        return rule

    return build


@pytest.fixture(scope="module")
def tiny():
    """The tiny random-weight bundle of the embedded architecture (`coolsd.models.tiny`), fresh per module."""
    from coolsd.models.tiny import tiny_bundle

    return tiny_bundle()


@pytest.fixture
def fake_clock(monkeypatch):
    """The engine's phase clocks (`time.perf_counter`, `time.thread_time`, read by coolsd's round Clock) made
    deterministic.

    Every read advances it by k * 2**-10 s, k = 1..7 from a seeded stream: phases get unequal spans that
    add up exactly in float64, and two runs making the same reads report the same seconds. Returns
    `restart()`, which rewinds the clock and its stream (call it before each run to be compared).
    """
    state = {}

    def restart() -> None:
        state["now"], state["steps"] = 1000.0, iter(torch.randint(1, 8, (1 << 16,),
                                                                    generator=torch.Generator().manual_seed(7)).tolist())

    def perf_counter() -> float:
        state["now"] += next(state["steps"]) / 1024
        return state["now"]

    restart()
    monkeypatch.setattr(time, "perf_counter", perf_counter)
    monkeypatch.setattr(time, "thread_time", perf_counter)  # the engine's clock on a CPU (`round.clock_source`)
    return restart
