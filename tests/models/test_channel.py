"""The look-alike channel (issue 34): its kernel against a hand computation, the wrapped target's distribution
against the mixture sum_c p(c) K[c, x], the draws against the kernel (a model folder that stores one:
tests/models/test_emoji.py)."""

from __future__ import annotations

import math

import pytest
import torch

from coolsd.decoding.protocol import ModelStep
from coolsd.models import rowkernel
from coolsd.models.channel import PLAIN, ChannelTarget, emit, kernel_rows, lookalike_kernel


def test_the_kernel_weighs_the_k_nearest_codes_by_their_squared_distance():
    book = torch.tensor([[0.0, 0.0], [0.1, 0.0], [0.0, 0.3], [-0.9, -0.9], [1.0, 1.0]])  # code 4: plain white
    kernel = lookalike_kernel(book, sigma2=0.02, k=3)
    # code 0: nearest itself (d2 0), code 1 (d2 0.01), code 2 (d2 0.09); weights exp(-d2 / 0.04)
    w = torch.tensor([1.0, math.exp(-0.01 / 0.04), math.exp(-0.09 / 0.04)])
    assert torch.allclose(kernel[0, :3], w / w.sum(), atol=1e-6) and kernel[0, 3:].abs().sum() == 0
    # code 3's three nearest are 3 (0), 0 (1.62), 1 (1.81): far, so nearly all mass stays on itself
    assert kernel[3, 3] > 0.999 and kernel[3, 2] == 0 and kernel[3, 4] == 0
    assert (book[4] > PLAIN).all() and kernel[4].tolist() == [0, 0, 0, 0, 1]  # background stays certain
    assert torch.allclose(kernel.sum(1), torch.ones(5))
    with pytest.raises(ValueError, match="sigma2"):
        lookalike_kernel(book, sigma2=0.0)


class _Fixed:
    """A TokenModel stand-in whose every step returns the same logits (G, n, V) over V = 3."""

    vocab_size, device, length = 3, torch.device("cpu"), 0

    def __init__(self, logits):
        self.logits = logits

    def start(self, cond, guidance):
        return ModelStep(logits=self.logits[None, None], hidden=torch.zeros(1, 1, 2))

    forward = lambda self, ids, positions, mask=None: self.start(None, False)  # noqa: E731

    def fork(self):
        return _Fixed(self.logits)


def test_the_wrapped_target_returns_the_mixture_of_the_kernel_rows():
    kernel = torch.tensor([[0.7, 0.3, 0.0], [0.2, 0.8, 0.0], [0.0, 0.0, 1.0]])
    inner = _Fixed(torch.tensor([2.0, 0.0, -1.0]))
    target = ChannelTarget(inner, kernel)
    p = torch.softmax(torch.tensor([2.0, 0.0, -1.0]), -1)
    want = [p[0] * 0.7 + p[1] * 0.2, p[0] * 0.3 + p[1] * 0.8, p[2]]
    step = target.start(0, False)
    assert torch.allclose(step.logits.exp()[0, 0], torch.stack(want), atol=1e-6)
    assert step.hidden.shape == (1, 1, 2)  # features pass through: the drafter reads the transformer's
    assert isinstance(target.fork(), ChannelTarget) and target.fork().inner is not inner


def test_emit_draws_each_code_from_its_kernel_row():
    kernel = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.1, 0.9], [0.0, 0.0, 1.0]])
    codes = torch.tensor([0, 1, 2]).repeat(20000)
    out = emit(codes, kernel, torch.Generator().manual_seed(0)).view(-1, 3)
    freq = torch.stack([torch.bincount(out[:, c], minlength=3) for c in range(3)]).float() / len(out)
    assert (freq - kernel).abs().max() < 0.015  # 20,000 draws a row: 3 sigma of p = 0.5 is 0.011


def test_a_step_of_the_channel_equals_the_dense_mixture_at_any_temperature():
    """The wrapper reads only the kernel's non-zeros; its result is softmax(logits / T) @ K on (G, n, V) logits."""
    gen = torch.Generator().manual_seed(3)
    book = torch.rand(40, 4, generator=gen) * 2 - 1
    book[0] = 1.0  # a plain white code
    kernel = lookalike_kernel(book, sigma2=0.05, k=5)
    logits = torch.randn(2, 3, 40, generator=gen) * 3
    for temperature in (1.0, 0.4):
        target = ChannelTarget(_Fixed(logits[0, 0]), kernel, temperature)
        got = target.emit(ModelStep(logits=logits)).logits.exp()
        torch.testing.assert_close(got, torch.softmax(logits / temperature, -1) @ kernel, atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="temperature"):
        ChannelTarget(_Fixed(logits[0, 0]), kernel, 0.0)


def test_emit_of_a_lookalike_kernel_stays_on_each_codes_lookalikes():
    """On a real kernel (`lookalike_kernel`, k nearest), every emitted code is one of the row's non-zeros, and each
    row's frequencies match it."""
    gen = torch.Generator().manual_seed(5)
    book = torch.rand(30, 4, generator=gen) * 2 - 1
    kernel = lookalike_kernel(book, 0.05, 4)
    codes = torch.arange(30).repeat(4000)
    out = emit(codes, kernel, torch.Generator().manual_seed(6)).view(-1, 30)
    assert (kernel[torch.arange(30).expand_as(out), out] > 0).all()
    freq = torch.stack([torch.bincount(out[:, c], minlength=30) for c in range(30)]).float() / len(out)
    assert (freq - kernel).abs().max() < 0.03  # 4,000 draws a row: 3 sigma of p = 0.5 is 0.024


needs_kernel = pytest.mark.skipif(not rowkernel.available(), reason="no AVX2 / FMA CPU or no C compiler here")


@needs_kernel
@pytest.mark.parametrize("rows", [1, 2, 3, 7, 9])  # passes of four, two and one rows
def test_the_c_mixture_gives_the_bits_of_torchs_scatter(rows):
    """`rowkernel.ChannelMix` sums each code's shares in the order and roundings of `scatter_add_` over the
    flattened shares (ascending source code), so the channel's p is the same bit for bit with or without it."""
    gen = torch.Generator().manual_seed(rows)
    book = torch.rand(96, 4, generator=gen) * 2 - 1
    book[:5] = 1.0  # plain white codes: one non-zero weight, seven zeros the kernel drops
    weights, ids = kernel_rows(lookalike_kernel(book, sigma2=0.3, k=8))
    mix = rowkernel.ChannelMix(weights, ids)
    logits = torch.randn(rows, 96, generator=gen) * 4
    probs = torch.softmax(logits / 0.6, -1)
    shares = (probs[..., None] * weights).flatten(-2)
    want = torch.zeros_like(probs).scatter_add_(-1, ids.flatten().expand_as(shares), shares)
    assert torch.equal(mix(probs), want)
    assert torch.equal(mix(probs.view(1, rows, 96)), want.view(1, rows, 96))  # any leading shape
    target = ChannelTarget(_Fixed(logits[0]), lookalike_kernel(book, sigma2=0.3, k=8), temperature=0.6)
    assert target.mix is not None
    step = target.emit(ModelStep(logits=logits.view(1, rows, 96)))
    assert torch.equal(step.logits, want.clamp_min(1e-30).log().view(1, rows, 96))


@needs_kernel
def test_the_c_mixture_adds_a_repeated_code_in_scatters_order():
    """A row that names one code twice (not from `kernel_rows`, but taken): its shares still add in the flattened
    order, as `scatter_add_` adds them."""
    gen = torch.Generator().manual_seed(1)
    weights = torch.rand(24, 4, generator=gen)
    ids = torch.randint(0, 24, (24, 4), generator=gen)
    ids[:, 1] = ids[:, 0]  # every row repeats a code
    probs = torch.softmax(torch.randn(3, 24, generator=gen) * 3, -1)
    shares = (probs[..., None] * weights).flatten(-2)
    want = torch.zeros_like(probs).scatter_add_(-1, ids.flatten().expand_as(shares), shares)
    assert torch.equal(rowkernel.ChannelMix(weights, ids)(probs), want)


@needs_kernel
def test_the_c_mixture_refuses_codes_outside_the_codebook_and_other_vocabularies():
    weights = torch.full((4, 2), 0.5)
    with pytest.raises(ValueError, match="codes in"):
        rowkernel.ChannelMix(weights, torch.tensor([[0, 1], [1, 2], [2, 3], [3, 4]]))
    mix = rowkernel.ChannelMix(weights, torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0]]))
    with pytest.raises(ValueError, match="5 codes"):
        mix(torch.rand(2, 5))
    with pytest.raises(ValueError, match="CPU memory"):  # an accelerator's pointer never reaches the C loop
        mix(torch.rand(2, 4, device="meta"))
