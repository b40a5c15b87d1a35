"""LlamaGen T2I target as a `TokenModel`: caption prefix + image tokens, 2D RoPE, static KV cache.

Architecture from research/lantern.md §2 (GPT-XL T2I stage I). Layout of the cache: caption slots
[0, C) then image slot s at C + s. CFG is a batch of G = 2 rows (cond, uncond); G = 1 without it.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn

from coolsd.decoding.protocol import ModelStep
from coolsd.models.llamagen.caption import CaptionEmbedding, CaptionMLP
from coolsd.models.llamagen.config import LlamaGenConfig
from coolsd.models.llamagen.layers import CachedPath, DecoderLayer, KVCache, RMSNorm, build_mask, check_crop, rope_2d
from coolsd.models.static import pad_block, pick_block

CACHE_MARGIN = 128  # image slots allocated past the grid, for drafts verified at the end of an image


def caption_mask(valid: Tensor) -> Tensor:
    """(C, C) bool attention among caption slots, True = may attend, from `valid` (C,) bool.

    A valid slot sees the valid slots at or before it. A slot that sees no valid slot (a left-padded
    one) sees every slot at or before it, as LANTERN's additive float mask gives (causal + padding,
    both at the dtype minimum): in the cond row those slots hold zero inputs, so their features stay
    exactly zero through every layer, which is what the Eagle drafter was trained to read
    (research/llamagen-fidelity.md, difference 1). The image tokens never see padded slots.
    """
    causal = torch.ones(valid.numel(), valid.numel(), dtype=torch.bool, device=valid.device).tril()
    mask = causal & valid[None, :]
    return mask | (causal & ~mask.any(dim=1, keepdim=True))


class LlamaGenT2I(CachedPath, nn.Module):
    """LlamaGen text-to-image transformer.

    Args:
        config: widths and grid (`LlamaGenConfig`).
        caption_encoder: callable prompt str -> `CaptionEmbedding` (a `T5CaptionEncoder`), needed only
            for string conditions; tensors and `CaptionEmbedding`s work without it.

    `start(cond, guidance)` runs the C caption slots; `prefix_hidden` (G, C, D) then holds their
    final-normed features (the drafter's prefix, lantern.md §4.2). Logits are float32.
    """

    def __init__(self, config: LlamaGenConfig, caption_encoder=None):
        super().__init__()
        self.config = config
        self.vocab_size = config.vocab_size
        self.caption_encoder = caption_encoder
        self.caption = CaptionMLP(config)
        self.tok_emb = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.prefix_hidden: Tensor | None = None
        self._cache: KVCache | None = None
        self._prefix_mask: Tensor | None = None  # (C,) bool, visible caption slots
        self._length = 0
        self._kept: dict[int, KVCache] = {}  # cache per guidance-row count (CUDA graphs stay valid)
        self._blocks: tuple[int, ...] = ()  # static-path block sizes; () = eager (coolsd.models.graphs)
        self._runner = None  # CUDA graphs of `_run` on the static path

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    def fork(self) -> LlamaGenT2I:
        """An independent handle: the same modules and weights (a shallow copy), its own empty cache."""
        new = copy.copy(self)
        new.__dict__.update(_cache=None, _prefix_mask=None, _length=0, prefix_hidden=None, _runner=None, _kept={})
        return self._same_path(new)

    def use_path(self, path: str, rows=(2,)) -> None:
        """Execution path: "eager", "static" or "cuda-graphs" (see `coolsd.models.graphs`)."""
        self._set_path(path, self._run, rows, self._allocate)

    def _allocate(self, n_rows: int) -> None:
        """Make the KV cache for n_rows guidance rows unless it exists (kept across images)."""
        C, dtype = self.config.cls_token_num, self.head.weight.dtype
        slots = C + self.config.block_size + CACHE_MARGIN
        cache = self._kept.get(n_rows)
        if cache is None or cache.k.device != self.device or cache.k.dtype != dtype:
            heads, head_dim = self.config.num_attention_heads, self.config.head_dim
            cache = self._kept[n_rows] = KVCache(len(self.layers), n_rows, heads, slots, head_dim, self.device, dtype)
        self._cache = cache

    def _run(self, x: Tensor, positions: Tensor, start: int, mask: Tensor) -> Tensor:
        """x (G, n, D) at cache slots [start, start + n) -> final-normed features (G, n, D)."""
        cos, sin = rope_2d(positions, self.config.grid, self.config.head_dim, self.config.rope_base)
        for index, layer in enumerate(self.layers):
            x = layer(x, cos, sin, self._cache, index, start, mask)
        return self.norm(x)

    def _caption_of(self, cond: Any) -> CaptionEmbedding:
        if isinstance(cond, str):
            if self.caption_encoder is None:
                raise ValueError("this LlamaGen target has no T5 encoder: pass a (C, caption_dim) tensor instead")
            cond = self.caption_encoder(cond)
        elif isinstance(cond, Tensor):
            cond = CaptionEmbedding.from_tensor(cond)
        if not isinstance(cond, CaptionEmbedding):
            raise TypeError(f"cond must be a prompt, a tensor or a CaptionEmbedding, got {type(cond).__name__}")
        expected = (self.config.cls_token_num, self.config.caption_dim)
        if tuple(cond.emb.shape) != expected:
            raise ValueError(f"caption embedding must be {expected}, got {tuple(cond.emb.shape)}")
        return cond

    @torch.no_grad()
    def start(self, cond: Any, guidance: bool) -> ModelStep:
        """Clear the cache, run the caption prefix; logits (G, 1, V) for image token 0, hidden (G, 1, D)."""
        caption = self._caption_of(cond)
        n_rows, C = (2 if guidance else 1), self.config.cls_token_num
        dtype = self.head.weight.dtype
        self._allocate(n_rows)
        self._length = 0
        valid = caption.mask.to(self.device)
        emb = (caption.emb.to(self.device, dtype) * valid[:, None]).unsqueeze(0)  # (1, C, E)
        if guidance:  # row 1: the learned unconditional caption, not masked (lantern.md §2.2 step 4)
            emb = torch.cat([emb, self.caption.uncond.to(dtype).unsqueeze(0)])
        x = self.caption(emb)  # (G, C, D)
        mask = caption_mask(valid)  # (C, C); both rows use the prompt's padding mask (§2.2 step 6)
        self._prefix_mask = valid
        no_rotation = torch.full((C,), -1, dtype=torch.long, device=self.device)
        h = self._run(x, no_rotation, 0, mask)  # (G, C, D)
        self.prefix_hidden = h
        return ModelStep(self.head(h[:, -1:]).float(), h[:, -1:])

    @torch.no_grad()
    def forward(self, ids: Tensor, positions: Tensor, mask: Tensor | None = None) -> ModelStep:
        """Append n image tokens. ids, positions (n,) int64; mask (n, length + n) bool or None (causal).

        Returns logits (G, n, V) float32 for the token after each id, hidden (G, n, D).
        """
        if self._cache is None:
            raise RuntimeError("call start(cond, guidance) before forward")
        ids, positions = ids.to(self.device).reshape(-1), positions.to(self.device).reshape(-1)
        n, C = ids.numel(), self.config.cls_token_num
        if C + self._length + n > self._cache.slots:
            raise ValueError(f"KV cache full: {self._length} + {n} image slots > {self._cache.slots - C}")
        full_mask = build_mask(self._prefix_mask, self._length, n, mask)  # (n, C + length + n)
        x = self.tok_emb(ids).unsqueeze(0).expand(self._cache.k.shape[1], n, -1)  # (G, n, D)
        start = C + self._length
        block = pick_block(self._blocks, n, start, self._cache.slots)
        if block is None:
            h = self._run(x, positions, start, full_mask)
        else:  # static path: a padded block, no rotation on padded rows
            padded = pad_block(x, positions, full_mask, start, block, self._cache.slots, pad_position=-1)
            h = (self._runner or self._run)(*padded)[:, :n]
        self._length += n
        return ModelStep(self.head(h).float(), h)

    def crop(self, length: int, keep: Tensor | None = None) -> None:
        """Keep image slots [0, length), then move slots `keep` (absolute, ascending) right after them."""
        keep = check_crop(length, keep, self._length)
        if keep is not None:
            C = self.config.cls_token_num
            self._cache.move(C + length, C + keep.to(self.device))
        self._length = length + (0 if keep is None else keep.numel())
