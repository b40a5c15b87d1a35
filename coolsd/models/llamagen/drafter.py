"""Eagle-1 drafter for LlamaGen as a `Drafter`: fc over [token embedding; feature], one Llama layer.

Architecture from research/lantern.md §4: fc (2D -> D, bias unless config says "bias": false) on
[emb(token); target feature], one decoder layer without its input norm, no final norm; token logits
come from the target's `lm_head` (shared, not copied). The embedding table is the drafter's own
(loaded from its checkpoint, §4.1).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn

from coolsd.decoding.protocol import ModelStep
from coolsd.models.llamagen.config import LlamaGenConfig
from coolsd.models.llamagen.layers import CachedPath, DecoderLayer, KVCache, build_mask, check_crop, rope_2d
from coolsd.models.llamagen.target import CACHE_MARGIN, LlamaGenT2I
from coolsd.models.static import pad_block, pick_block


class LlamaGenDrafter(CachedPath, nn.Module):
    """Eagle-1 head reading the target's final-normed features.

    Slots: a prefix of C - 1 placeholder slots (token id 0 with the target's caption features
    h_0..h_{C-2}, no rotation, lantern.md §4.2), then image slot j = (feature before token j, token j)
    with RoPE grid index j, exactly like the target.

    Contract of `forward(ids, hidden, positions, mask)`:
    - `hidden` (G, n, D) given: the feature preceding each id (the target's, or this drafter's own
      returned `hidden` rows when drafting a tree: the caller picks each node's parent row).
    - `hidden` None: only n = 1 is allowed; the preceding feature is this drafter's own output at
      the last slot in its cache (chain drafting). Crops keep these own outputs in step with the slots.
    The prefix is built lazily at the first `forward` after `start`, from the target's
    `prefix_hidden`, so the target must have been started (same guidance) before that call.
    """

    def __init__(self, config: LlamaGenConfig, target: LlamaGenT2I):
        super().__init__()
        if config.hidden_size != target.config.hidden_size or config.vocab_size != target.vocab_size:
            raise ValueError("drafter and target must share hidden_size and vocab_size")
        self.config = config
        self.vocab_size = config.vocab_size
        self.__dict__["target"] = target  # shared, not owned: keeps the target out of our parameters
        self.tok_emb = nn.Embedding(config.vocab_size, config.hidden_size)
        self.fc = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=config.bias)
        self.layer = DecoderLayer(config, input_norm=False)
        self._n_prefix = target.config.cls_token_num - 1
        self._cache: KVCache | None = None
        self._own: Tensor | None = None  # (G, S, D) this drafter's output at every image slot
        self._rows = 1
        self._needs_prefix = False
        self._length = 0
        self._kept: dict[int, tuple[KVCache, Tensor]] = {}  # (cache, own features) per guidance-row count
        self._blocks: tuple[int, ...] = ()  # static-path block sizes; () = eager (coolsd.models.graphs)
        self._runner = None  # CUDA graphs of `_layer` on the static path

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    def fork(self, target: LlamaGenT2I) -> LlamaGenDrafter:
        """An independent handle reading `target` (a fork of this drafter's target): same weights, own cache."""
        new = copy.copy(self)
        new.__dict__.update(target=target, _cache=None, _own=None, _length=0, _needs_prefix=False, _runner=None,
                            _kept={})
        return self._same_path(new)

    def use_path(self, path: str, rows=(2,)) -> None:
        """Execution path: "eager", "static" or "cuda-graphs" (see `coolsd.models.graphs`)."""

        def allocate(n_rows: int) -> None:
            self._rows = n_rows
            self._allocate()

        self._set_path(path, self._layer, rows, allocate)

    def _allocate(self) -> None:
        """Make the KV cache and own-feature buffer for `_rows` guidance rows unless they exist."""
        dtype, D = self.fc.weight.dtype, self.config.hidden_size
        slots = self._n_prefix + self.target.config.block_size + CACHE_MARGIN
        kept = self._kept.get(self._rows)
        if kept is None or kept[0].k.device != self.device or kept[0].k.dtype != dtype:
            heads, head_dim = self.config.num_attention_heads, self.config.head_dim
            kept = self._kept[self._rows] = (KVCache(1, self._rows, heads, slots, head_dim, self.device, dtype),
                                             torch.zeros(self._rows, slots - self._n_prefix, D, device=self.device,
                                                         dtype=dtype))
        self._cache, self._own = kept

    def start(self, cond: Any, guidance: bool) -> None:
        """Clear the cache. `cond` is unused: the caption reaches the drafter through the target's features."""
        self._rows = 2 if guidance else 1
        self._needs_prefix = True
        self._length = 0

    def _fill_prefix(self) -> None:
        features = self.target.prefix_hidden
        if features is None or features.shape[0] != self._rows:
            raise RuntimeError("start the target (with the same guidance) before the drafter's first forward")
        self._allocate()
        P = self._n_prefix
        if P:
            placeholder = torch.zeros(P, dtype=torch.long, device=self.device)
            mask = torch.ones(P, P, dtype=torch.bool, device=self.device).tril()
            self._run(placeholder, features[:, :P], torch.full_like(placeholder, -1), 0, mask)
        self._needs_prefix = False

    def _run(self, ids: Tensor, hidden: Tensor, positions: Tensor, start: int, mask: Tensor) -> Tensor:
        """ids (n,), hidden (G, n, D) at cache slots [start, start + n) -> predicted features (G, n, D)."""
        emb = self.tok_emb(ids).unsqueeze(0).expand(hidden.shape[0], -1, -1)
        x = self.fc(torch.cat([emb, hidden.to(emb.dtype)], dim=-1))  # embedding first (§4.1)
        n = x.shape[1]
        block = None if isinstance(start, Tensor) else pick_block(self._blocks, n, start, self._cache.slots)
        if block is None:
            return self._layer(x, positions, start, mask)
        # static path: a padded block, no rotation on padded rows
        padded = pad_block(x, positions, mask, start, block, self._cache.slots, pad_position=-1)
        return (self._runner or self._layer)(*padded)[:, :n]

    def _layer(self, x: Tensor, positions: Tensor, start: int | Tensor, mask: Tensor) -> Tensor:
        """The decoder layer on x (G, n, D) at cache slots [start, start + n) (or the slots tensor `start`)."""
        cos, sin = rope_2d(positions, self.target.config.grid, self.config.head_dim, self.config.rope_base)
        return self.layer(x, cos, sin, self._cache, 0, start, mask)

    @torch.no_grad()
    def forward(self, ids: Tensor, hidden: Tensor | None, positions: Tensor, mask: Tensor | None = None) -> ModelStep:
        """Append n tokens. ids, positions (n,) int64; hidden (G, n, D) or None (n = 1, see class doc);
        mask (n, length + n) bool or None (causal). Returns logits (G, n, V) float32, hidden (G, n, D).
        """
        if self._needs_prefix:
            self._fill_prefix()
        ids, positions = ids.to(self.device).reshape(-1), positions.to(self.device).reshape(-1)
        n, L, P = ids.numel(), self._length, self._n_prefix
        if hidden is None:
            if n != 1 or L == 0:
                raise ValueError("hidden=None needs n == 1 and a previous slot; pass the preceding features instead")
            hidden = self._own[:, L - 1 : L]
        if tuple(hidden.shape) != (self._rows, n, self.config.hidden_size):
            raise ValueError(f"hidden must be (G, n, D) = {(self._rows, n, self.config.hidden_size)}")
        if P + L + n > self._cache.slots:
            raise ValueError(f"drafter KV cache full: {L} + {n} image slots > {self._cache.slots - P}")
        prefix = torch.ones(P, dtype=torch.bool, device=self.device)
        full_mask = build_mask(prefix, L, n, mask)  # (n, P + L + n)
        out = self._run(ids, hidden.to(self.device), positions, P + L, full_mask)  # (G, n, D)
        self._own[:, L : L + n] = out
        self._length += n
        return ModelStep(self.target.head(out.to(self.target.head.weight.dtype)).float(), out)

    def crop(self, length: int, keep: Tensor | None = None) -> None:
        """Keep image slots [0, length), then move slots `keep` (absolute, ascending) right after them."""
        keep = check_crop(length, keep, self._length)
        if keep is not None:
            keep = keep.to(self.device)
            self._cache.move(self._n_prefix + length, self._n_prefix + keep)
            self._own[:, length : length + keep.numel()] = self._own.index_select(1, keep)
        self._length = length + (0 if keep is None else keep.numel())
