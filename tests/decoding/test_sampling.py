"""Logits processing (spec section 1): CFG mix -> temperature -> top-k -> top-p -> softmax, on known inputs."""

from __future__ import annotations

import math

import pytest
import torch

from coolsd.decoding.sampling import SamplingConfig

PROBS = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
LOGITS = PROBS.log()[None]  # (G = 1, V = 4)


def renorm(v: list[float]) -> torch.Tensor:
    t = torch.tensor(v, dtype=torch.float64)
    return t / t.sum()


def test_defaults_are_plain_softmax(gen):
    logits = torch.randn(1, 3, 7, generator=gen, dtype=torch.float64)
    out = SamplingConfig().probs(logits)
    assert out.shape == (3, 7)
    torch.testing.assert_close(out, logits[0].softmax(-1))
    assert not SamplingConfig().guidance and not SamplingConfig().greedy


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_temperature(temperature):
    expected = PROBS ** (1 / temperature)
    torch.testing.assert_close(SamplingConfig(temperature=temperature).probs(LOGITS), expected / expected.sum())


def test_temperature_zero_is_greedy():
    config = SamplingConfig(temperature=0.0)
    assert config.greedy
    torch.testing.assert_close(config.probs(LOGITS), torch.tensor([1.0, 0, 0, 0], dtype=torch.float64))
    rows = torch.tensor([[[0.1, 2.0, -1.0], [3.0, 0.0, 0.5]]])
    assert config.probs(rows).argmax(-1).tolist() == [1, 0]
    assert config.probs(rows).sum(-1).tolist() == [1.0, 1.0]


@pytest.mark.parametrize(("k", "expected"), [(1, [1, 0, 0, 0]), (2, [0.5, 0.3, 0, 0]), (3, [0.5, 0.3, 0.15, 0]),
                                             (4, [0.5, 0.3, 0.15, 0.05]), (0, [0.5, 0.3, 0.15, 0.05]),
                                             (10, [0.5, 0.3, 0.15, 0.05])])
def test_top_k(k, expected):
    torch.testing.assert_close(SamplingConfig(top_k=k).probs(LOGITS), renorm(expected))


@pytest.mark.parametrize(("top_p", "expected"), [(1e-9, [1, 0, 0, 0]), (0.45, [1, 0, 0, 0]), (0.55, [0.5, 0.3, 0, 0]),
                                                 (0.75, [0.5, 0.3, 0, 0]), (0.85, [0.5, 0.3, 0.15, 0]),
                                                 (0.97, [0.5, 0.3, 0.15, 0.05]), (1.0, [0.5, 0.3, 0.15, 0.05])])
def test_top_p(top_p, expected):
    """Keep the smallest prefix (by probability) whose mass reaches top_p; the top token is always kept."""
    torch.testing.assert_close(SamplingConfig(top_p=top_p).probs(LOGITS), renorm(expected))


def test_top_p_is_order_free():
    """Same result whatever the order of the vocabulary."""
    perm = torch.tensor([2, 0, 3, 1])
    out = SamplingConfig(top_p=0.75).probs(LOGITS[:, perm])
    torch.testing.assert_close(out, renorm([0.5, 0.3, 0, 0])[perm])


def test_top_k_then_top_p():
    """top-p is measured on the top-k distribution: with k = 3 the masses are 0.526, 0.316, 0.158."""
    out = SamplingConfig(top_k=3, top_p=0.8).probs(LOGITS)
    torch.testing.assert_close(out, renorm([0.5, 0.3, 0, 0]))  # 0.526 + 0.316 = 0.842 reaches 0.8
    out = SamplingConfig(top_k=3, top_p=0.85).probs(LOGITS)
    torch.testing.assert_close(out, renorm([0.5, 0.3, 0.15, 0]))


def test_temperature_before_top_p():
    """Temperature 0.5 squares the probabilities (0.25, 0.09, ...)/0.3650: the top token alone holds 0.685."""
    out = SamplingConfig(temperature=0.5, top_p=0.6).probs(LOGITS)
    torch.testing.assert_close(out, renorm([1, 0, 0, 0]))


def test_cfg_mix():
    """uncond + s * (cond - uncond) on the raw logits, before every other step."""
    cond = torch.tensor([[2.0, 1.0, 0.0]], dtype=torch.float64)
    uncond = torch.tensor([[1.0, 1.0, 1.0]], dtype=torch.float64)
    logits = torch.stack([cond, uncond])  # (G = 2, n = 1, V = 3)
    config = SamplingConfig(cfg_scale=3.0)
    assert config.guidance
    torch.testing.assert_close(config.mix(logits), torch.tensor([[4.0, 1.0, -2.0]], dtype=torch.float64))
    torch.testing.assert_close(config.probs(logits), torch.tensor([[4.0, 1.0, -2.0]], dtype=torch.float64).softmax(-1))
    torch.testing.assert_close(SamplingConfig(cfg_scale=1.0).mix(logits), cond)  # s = 1: the conditional row
    torch.testing.assert_close(SamplingConfig(cfg_scale=0.0).mix(logits), uncond)
    # guidance comes before greedy: the mixed argmax (token 0), not the conditional one (token 1)
    logits = torch.tensor([[[1.0, 1.2, 0.0]], [[0.0, 1.2, 0.0]]], dtype=torch.float64)
    greedy = SamplingConfig(cfg_scale=3.0, temperature=0.0).probs(logits)
    torch.testing.assert_close(greedy, torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64))


def test_one_row_passes_through_mix():
    logits = torch.randn(1, 2, 5, dtype=torch.float64)
    assert torch.equal(SamplingConfig(cfg_scale=4.0).mix(logits), logits[0])


def test_rows_sum_to_one(gen):
    config = SamplingConfig(cfg_scale=2.0, temperature=0.7, top_k=5, top_p=0.9)
    out = config.probs(torch.randn(2, 6, 16, generator=gen, dtype=torch.float64))
    assert out.shape == (6, 16)
    torch.testing.assert_close(out.sum(-1), torch.ones(6, dtype=torch.float64))
    assert ((out > 0).sum(-1) <= 5).all()


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"temperature": -0.1}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": -0.5}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_k": -1}, "top_k"),
    ({"top_k": 2.5}, "top_k"),
    ({"top_k": True}, "top_k"),
    ({"top_k": math.nan}, "top_k"),
])
def test_bad_parameters(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SamplingConfig(**kwargs)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "1", None])
@pytest.mark.parametrize("field", ["cfg_scale", "temperature", "top_p"])
def test_non_finite_or_non_numbers(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingConfig(**{field: value})
