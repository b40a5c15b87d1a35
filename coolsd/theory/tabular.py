"""Tabular models for exact tests (spec section 6): P(x_t | x_<t) and Q(x_t | x_<t) as explicit tables.

Every prefix of length < T has its own conditional, so the models are truly prefix-dependent.
They implement the engine's TokenModel / Drafter protocols, so the real engine samples from them.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import torch
from torch import Tensor

from coolsd.decoding.protocol import ModelStep


@dataclass
class TabularLM:
    """Conditionals as a dict prefix tuple -> (V,) float64 probabilities; prefixes of length 0..T-1."""

    table: dict[tuple[int, ...], Tensor]
    vocab_size: int
    num_tokens: int
    codebook: Tensor | None = None  # (V, C) code vectors, so LANTERN++ has neighbours

    def __post_init__(self) -> None:
        self.device = torch.device("cpu")
        self._ids: list[int] = []

    def fork(self, target: TabularLM | None = None) -> TabularLM:
        """Same tables, own (empty) state (`target` is unused: a tabular drafter reads no target state)."""
        return dataclasses.replace(self)

    def probs(self, prefix: tuple[int, ...]) -> Tensor:
        return self.table[tuple(prefix)]

    # -- protocol --------------------------------------------------------------------------
    @property
    def length(self) -> int:
        return len(self._ids)

    def start(self, cond, guidance: bool) -> ModelStep:
        self._ids = []
        rows = 2 if guidance else 1
        return ModelStep(self.probs(()).log().expand(rows, 1, -1))

    def forward(self, ids: Tensor, positions: Tensor, mask: Tensor | None = None, rows: int = 1) -> ModelStep:
        old = len(self._ids)
        self._ids += [int(i) for i in ids]
        if mask is None:
            mask = torch.ones(len(ids), old + len(ids), dtype=torch.bool).tril(old)
        logits = []
        for i in range(len(ids)):
            prefix = tuple(self._ids[s] for s in range(old + len(ids)) if mask[i, s])
            logits.append(self.probs(prefix).log() if len(prefix) < self.num_tokens else torch.zeros(self.vocab_size))
        return ModelStep(torch.stack(logits)[None])

    def crop(self, length: int, keep: Tensor | None = None) -> None:
        kept = [self._ids[int(k)] for k in keep] if keep is not None else []
        self._ids = self._ids[:length] + kept


class TabularDrafter(TabularLM):
    """The same table as a Drafter (ignores `hidden`)."""

    def start(self, cond, guidance: bool) -> None:
        self._ids = []

    def forward(self, ids, hidden, positions, mask=None) -> ModelStep:  # noqa: D102
        return super().forward(ids, positions, mask)


def random_tables(vocab_size: int, num_tokens: int, seed: int, sharpness: float = 1.5,
                  draft_noise: float = 1.0, codebook_dim: int = 2) -> tuple[TabularLM, TabularDrafter]:
    """A random target P and a draft Q = softmax(logits_P + draft_noise * noise) on every prefix.

    Codebook vectors are random points in `codebook_dim` dimensions (neighbours for LANTERN++).
    """
    gen = torch.Generator().manual_seed(seed)
    p_table, q_table = {}, {}
    for length in range(num_tokens):
        for prefix in itertools.product(range(vocab_size), repeat=length):
            z = sharpness * torch.randn(vocab_size, generator=gen, dtype=torch.float64)
            p_table[prefix] = z.softmax(-1)
            noise = torch.randn(vocab_size, generator=gen, dtype=torch.float64)
            q_table[prefix] = (z + draft_noise * noise).softmax(-1)
    codebook = torch.randn(vocab_size, codebook_dim, generator=gen, dtype=torch.float64)
    return (TabularLM(p_table, vocab_size, num_tokens, codebook),
            TabularDrafter(q_table, vocab_size, num_tokens, codebook))
