"""The look-alike channel: a target that hesitates between codes that look alike, by construction.

A VQ image model's target spreads its mass over look-alike codes because an image has many almost identical
token grids. The emoji target memorised one grid per picture, so it is certain. The channel restores the
hesitation after its LM head: the transformer predicts a code c, and the image takes c or one of its k nearest
codebook entries x, with probability proportional to exp(-|e_x - e_c|^2 / (2 sigma2)) (e the codebook vectors:
a patch's pixels in [-1, 1] for `PatchVQModel`). So the target's distribution over the next token is

    p(x | prefix) = sum_c p_model(c | prefix) K[c, x]

the same law as a model trained to the floor on pictures quantised stochastically (`coolsd.train.emoji
.soft_candidates`), which a CPU could not train (assets/emoji/README.md). A plain white patch (every value above
`PLAIN`) keeps its code: background stays certain. An optional temperature T divides the transformer's logits
before the channel (p_model = softmax(z / T)): the shipped emoji model uses T = 0.6, which keeps its pictures
recognisable while the channel keeps its hesitation. The Eagle-1 head drafts through the target's LM head, before
the channel (it reads the transformer's features, as Eagle does), at the same T (`EagleDrafter.temperature`, set
by the loader); the rules see the channel's p.

Stored with a model as `lookalike_channel: {"sigma2": ..., "k": ..., "temperature": ...}` in its target
config.json (`channel_config`; `python -m coolsd.train target --channel-sigma2 S --channel-temperature T`);
`ChannelTarget` wraps any `TokenModel`.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor

from coolsd.decoding.protocol import ModelStep
from coolsd.models import rowkernel
from coolsd.util.checks import check_int, check_number

PLAIN = 250 / 127.5 - 1  # a patch whose every value is above this (pixels >= 250 of 255) is plain white background
CONFIG_KEY = "lookalike_channel"  # target config.json entry: {"sigma2": float, "k": int, "temperature": float}
CHANNEL_K = 8  # look-alikes a code may become (itself included): the size of `soft_candidates`' sets


def lookalike_kernel(codebook: Tensor, sigma2: float, k: int = CHANNEL_K) -> Tensor:
    """K (V, V) float32, rows summing to 1: K[c, x] the probability that predicted code c is emitted as code x.

    codebook (V, C) in the patch space; x ranges over c's k nearest codes (c itself included, at distance 0),
    weighted exp(-d^2 / (2 sigma2)); a plain white code (every value above PLAIN) emits itself only."""
    sigma2 = check_number("sigma2", sigma2, 0.0, low_open=True)
    book = codebook.detach().float().cpu()
    k = check_int("k", k, 1, book.shape[0])
    d = torch.cdist(book, book) ** 2  # (V, V)
    dk, ik = d.topk(k, dim=-1, largest=False)  # nearest first: ik[:, 0] is c itself
    w = torch.softmax(-(dk - dk[:, :1]) / (2 * sigma2), dim=-1)
    plain = (book > PLAIN).all(-1)
    w[plain] = torch.nn.functional.one_hot(torch.zeros(int(plain.sum()), dtype=torch.long), k).float()
    kernel = torch.zeros_like(d)
    kernel.scatter_(1, ik, w)
    return kernel


def channel_config(config: Any) -> dict | None:
    """The channel a target config stores ({"sigma2", "k"[, "temperature"]}), or None (no channel)."""
    stored = getattr(config, CONFIG_KEY, None)
    return dict(stored) if isinstance(stored, dict) and stored else None


def stored_channel(config: Any, codebook: Tensor) -> tuple[Tensor, float] | None:
    """(kernel (V, V) from `lookalike_kernel`, temperature) of the channel a target config stores (k and
    temperature default to CHANNEL_K and 1), or None (no channel): what the loader and the drafter's self-samples
    both read."""
    channel = channel_config(config)
    if channel is None:
        return None
    return lookalike_kernel(codebook, channel["sigma2"], channel.get("k", CHANNEL_K)), channel.get("temperature", 1.0)


class ChannelTarget:
    """TokenModel: `target`'s logits passed through the look-alike channel (module doc); cache, features and
    execution path are the wrapped target's. kernel (V, V) from `lookalike_kernel`; temperature: the transformer's
    logits are divided by it before the channel (1: as trained)."""

    def __init__(self, target, kernel: Tensor, temperature: float = 1.0) -> None:
        self.inner = target
        self.kernel = kernel.to(target.device)
        self.temperature = check_number("temperature", temperature, 0.0, low_open=True)
        self.weights, self.ids = kernel_rows(self.kernel)  # a step reads these, not (V, V)
        self.mix = rowkernel.ChannelMix.for_rows(self.weights, self.ids)  # None: torch's scatter_add_ below
        self.vocab_size = target.vocab_size
        self.device = target.device

    def __getattr__(self, name: str):  # model, prefix_len, use_path, class_ids...: the wrapped target's
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def length(self) -> int:
        return self.inner.length

    def emit(self, step: ModelStep) -> ModelStep:
        """logits (G, n, V) -> log(softmax(logits) @ K) (G, n, V) float32; features unchanged."""
        probs = torch.softmax(step.logits.float() / self.temperature, dim=-1)  # (G, n, V) over the predicted code
        if self.mix is not None:  # the same sums in C (their order and roundings), a fifth of the time
            out = self.mix(probs)
        else:
            shares = (probs[..., None] * self.weights).flatten(-2)  # (G, n, V k): p(c) K[c, x] for each non-zero
            out = torch.zeros_like(probs).scatter_add_(-1, self.ids.flatten().expand_as(shares), shares)
        return ModelStep(logits=out.clamp_min_(1e-30).log_(), hidden=step.hidden)

    def fork(self) -> ChannelTarget:
        new = copy.copy(self)
        new.inner = self.inner.fork()
        return new

    def start(self, cond: Any, guidance: bool) -> ModelStep:
        return self.emit(self.inner.start(cond, guidance))

    def forward(self, ids: Tensor, positions: Tensor, mask: Tensor | None = None) -> ModelStep:
        return self.emit(self.inner.forward(ids, positions, mask))

    def crop(self, length: int, keep: Tensor | None = None) -> None:
        self.inner.crop(length, keep)


def kernel_rows(kernel: Tensor) -> tuple[Tensor, Tensor]:
    """The kernel's non-zeros row by row: weights (V, k) and the codes they go to, ids (V, k) int64, k the most
    look-alikes any code has (a row with fewer is padded with zero weights)."""
    k = int((kernel > 0).sum(1).max())
    return kernel.topk(k, dim=1)


def emit(codes: Tensor, kernel: Tensor | tuple[Tensor, Tensor], gen: torch.Generator) -> Tensor:
    """Pass codes (any shape, int64) through the channel once: each code c becomes x ~ K[c] (same shape).

    `kernel`: K (V, V), or its `kernel_rows` (computed once by a caller that emits often); a draw reads the
    code's k non-zeros only."""
    weights, ids = kernel_rows(kernel) if isinstance(kernel, Tensor) else kernel
    flat = codes.reshape(-1)
    pick = torch.multinomial(weights[flat], 1, generator=gen)[:, 0]
    return ids[flat, pick].view(codes.shape)
