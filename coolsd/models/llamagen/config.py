"""LlamaGen T2I configuration, read from the published HF `config.json` (research/lantern.md §2.1, §4.1)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from pathlib import Path


@dataclass(frozen=True)
class LlamaGenConfig:
    """Widths of a LlamaGen target or of its Eagle-1 drafter (same fields; the drafter has 1 layer).

    Defaults are LlamaGen GPT-XL T2I stage I (256 px, 16 x 16 tokens). `from_dict` reads the
    published `config.json` keys; fields it does not know (dropouts, architectures...) are ignored.
    """

    vocab_size: int = 16384  # V, VQ codebook size; no special tokens
    hidden_size: int = 1280  # D
    num_hidden_layers: int = 36
    num_attention_heads: int = 20  # MHA, head dim = D / heads = 64
    intermediate_size: int = 3584  # SwiGLU width
    rms_norm_eps: float = 1e-6
    attention_bias: bool = False  # q/k/v/o projections carry a bias
    caption_dim: int = 2048  # FLAN-T5-XL encoder width
    cls_token_num: int = 120  # caption slots C (T5 length)
    block_size: int = 256  # image tokens T = H * W (256 -> 16 x 16, 1024 -> 32 x 32)
    rope_base: float = 10000.0
    bias: bool = True  # drafter only: the fc layer has a bias unless config says "bias": false

    def __post_init__(self):
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of heads {self.num_attention_heads}")
        if self.head_dim % 4:
            raise ValueError(f"head dim must be a multiple of 4 for 2D RoPE, got {self.head_dim}")
        side = math.isqrt(self.block_size)
        if side * side != self.block_size:
            raise ValueError(f"block_size must be a square grid, got {self.block_size}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def grid(self) -> tuple[int, int]:
        """(H, W) token grid."""
        side = math.isqrt(self.block_size)
        return side, side

    @classmethod
    def from_dict(cls, raw: dict) -> LlamaGenConfig:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        if "rope_base" not in raw and "rope_theta" in raw:  # either name may carry the base
            values["rope_base"] = raw["rope_theta"]
        return cls(**values)

    @classmethod
    def from_json(cls, path: str | Path) -> LlamaGenConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}
