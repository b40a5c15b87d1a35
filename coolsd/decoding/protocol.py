"""What the engine needs from a model: typing Protocols, no base classes.

Conventions (used by every model the engine drives: tabular test models, the embedded Llama,
LlamaGen):
- One image per call sequence. G guidance rows: G = 1 without CFG, G = 2 with CFG
  (row 0 conditional, row 1 unconditional). Models never see the guidance scale; CFG mixing is
  processing (`coolsd.decoding.sampling`).
- A *slot* is one image token held in the model's KV cache. `length` counts slots; the
  conditioning prefix (class token, caption) is not counted.
- `positions` are 0-based image-token indices (row-major on the token grid), so a model can
  place its own positional encoding (1-D offset or 2-D grid RoPE).
- `mask` (n, S) bool, S = `length` after the call: True where new token i may attend to slot s.
  None means plain causal attention. Tree verification passes a tree mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor


@dataclass(frozen=True)
class ModelStep:
    """Output of one model call on n new tokens.

    logits: (G, n, V) raw scores over the V codebook tokens for the token that FOLLOWS each input.
    hidden: (G, n, D) last-layer features at each new position (what an Eagle drafter reads), or None.
    """

    logits: Tensor
    hidden: Tensor | None = None


@runtime_checkable
class TokenModel(Protocol):
    """A causal model over image tokens with its own KV cache (the target, or a self-contained draft)."""

    vocab_size: int  # V, codebook size
    device: torch.device  # where its weights, caches and returned tensors live

    @property
    def length(self) -> int:
        """Number of image-token slots in the cache."""

    def fork(self) -> TokenModel:
        """An independent handle on the same weights: its own (empty) cache, nothing copied but state."""

    def start(self, cond: Any, guidance: bool) -> ModelStep:
        """Clear the cache and consume the conditioning prefix (class id, caption...).

        Returns the step at the last prefix position: logits (G, 1, V) for image token 0.
        """

    def forward(self, ids: Tensor, positions: Tensor, mask: Tensor | None = None) -> ModelStep:
        """Append n tokens. ids, positions: (n,) int64; mask: (n, length + n) bool or None."""

    def crop(self, length: int, keep: Tensor | None = None) -> None:
        """Keep slots [0, length), then move the slots listed in `keep` (absolute, ascending) after them."""


@runtime_checkable
class Drafter(Protocol):
    """A draft model. Eagle-style drafters read the target's features; others ignore `hidden`.

    Slot j of a drafter holds the pair (feature before token j, token j), so `forward` takes
    `hidden` (G, n, D): the target feature of the position preceding each id, or None for
    positions the drafter drafts itself (it then uses its own predicted feature, Eagle-1).
    """

    vocab_size: int
    device: torch.device

    @property
    def length(self) -> int: ...

    def fork(self, target: TokenModel) -> Drafter:
        """An independent handle on the same weights that reads `target` (a fork of its target) where it
        needs the target's state; its own (empty) cache."""

    def start(self, cond: Any, guidance: bool) -> None:
        """Clear the cache; remember the condition."""

    def forward(self, ids: Tensor, hidden: Tensor | None, positions: Tensor, mask: Tensor | None = None) -> ModelStep:
        """Append n tokens; logits (G, n, V) for the token after each, hidden = own predicted features."""

    def crop(self, length: int, keep: Tensor | None = None) -> None: ...


@runtime_checkable
class ImageTokenizer(Protocol):
    """Turns a token grid into pixels."""

    grid: tuple[int, int]  # (H, W) tokens

    def decode(self, ids: Tensor) -> Tensor:
        """ids (T,) or (H, W) int64 -> image (C, H*f, W*f) float in [0, 1]."""


def causal_mask(length_before: int, n: int, device=None) -> Tensor:
    """(n, length_before + n) bool mask: every old slot, plus new tokens up to and including self."""
    new = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    old = torch.ones(n, length_before, dtype=torch.bool, device=device)
    return torch.cat([old, new], dim=1)
