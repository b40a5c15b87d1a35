"""LlamaGen VQ-16 decoder as an `ImageTokenizer`: token grid -> RGB image (research/lantern.md §3).

Only the decoding half is built (codebook lookup, post-quant conv, conv decoder); the encoder is not
needed to turn tokens into pixels. Downsampling factor f = 2 ** (len(ch_mult) - 1) = 16.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class VQ16Config:
    """Decoder widths; defaults are the published VQ_16 (16384 x 8 codebook, 256 px from 16 x 16 tokens)."""

    codebook_size: int = 16384  # V
    codebook_dim: int = 8
    z_channels: int = 256
    base_channels: int = 128
    ch_mult: tuple[int, ...] = (1, 1, 2, 2, 4)
    num_res_blocks: int = 2  # per level in the encoder; the decoder has one more
    norm_groups: int = 32
    l2_codes: bool = True  # codes are L2-normalised at use time


def _norm(channels: int, config: VQ16Config) -> nn.GroupNorm:
    return nn.GroupNorm(config.norm_groups, channels, eps=1e-6)


class ResBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, config: VQ16Config):
        super().__init__()
        self.norm1, self.conv1 = _norm(c_in, config), nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm2, self.conv2 = _norm(c_out, config), nn.Conv2d(c_out, c_out, 3, padding=1)
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class AttnBlock(nn.Module):
    """Single-head self-attention over the H x W positions, 1x1 conv projections."""

    def __init__(self, channels: int, config: VQ16Config):
        super().__init__()
        self.norm = _norm(channels, config)
        self.q, self.k, self.v = (nn.Conv2d(channels, channels, 1) for _ in range(3))
        self.proj = nn.Conv2d(channels, channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        B, C, H, W = x.shape
        h = self.norm(x)
        q, k, v = (conv(h).flatten(2).transpose(1, 2) for conv in (self.q, self.k, self.v))  # (B, HW, C)
        out = F.scaled_dot_product_attention(q, k, v)  # scale C ** -0.5
        return x + self.proj(out.transpose(1, 2).reshape(B, C, H, W))


class Level(nn.Module):
    """num_res_blocks + 1 ResBlocks (each followed by attention on the lowest level), then an optional x2 upsample."""

    def __init__(self, c_in: int, c_out: int, attention: bool, upsample: bool, config: VQ16Config):
        super().__init__()
        n = config.num_res_blocks + 1
        self.res = nn.ModuleList(ResBlock(c_in if i == 0 else c_out, c_out, config) for i in range(n))
        self.attn = nn.ModuleList(AttnBlock(c_out, config) for _ in range(n if attention else 0))
        self.up = nn.Conv2d(c_out, c_out, 3, padding=1) if upsample else None

    def forward(self, x: Tensor) -> Tensor:
        for i, block in enumerate(self.res):
            x = block(x)
            if len(self.attn):
                x = self.attn[i](x)
        if self.up is not None:
            x = self.up(F.interpolate(x, scale_factor=2.0, mode="nearest"))
        return x


class Decoder(nn.Module):
    """(B, z_channels, H, W) -> (B, 3, f*H, f*W), values about [-1, 1]."""

    def __init__(self, config: VQ16Config):
        super().__init__()
        widths = [config.base_channels * m for m in reversed(config.ch_mult)]  # lowest resolution first
        self.conv_in = nn.Conv2d(config.z_channels, widths[0], 3, padding=1)
        self.mid_res1 = ResBlock(widths[0], widths[0], config)
        self.mid_attn = AttnBlock(widths[0], config)
        self.mid_res2 = ResBlock(widths[0], widths[0], config)
        c_in, levels = widths[0], []
        for i, width in enumerate(widths):
            levels.append(Level(c_in, width, attention=i == 0, upsample=i < len(widths) - 1, config=config))
            c_in = width
        self.levels = nn.ModuleList(levels)
        self.norm_out = _norm(widths[-1], config)
        self.conv_out = nn.Conv2d(widths[-1], 3, 3, padding=1)

    def forward(self, z: Tensor) -> Tensor:
        x = self.mid_res2(self.mid_attn(self.mid_res1(self.conv_in(z))))
        for level in self.levels:
            x = level(x)
        return self.conv_out(F.silu(self.norm_out(x)))


class VQ16Tokenizer(nn.Module):
    """Token grid -> image. `grid` (H, W) tokens; `decode(ids)` returns (3, f*H, f*W) float in [0, 1]."""

    def __init__(self, config: VQ16Config = VQ16Config(), grid: tuple[int, int] = (16, 16)):
        super().__init__()
        self.config = config
        self.grid = tuple(grid)
        self.codebook = nn.Embedding(config.codebook_size, config.codebook_dim)
        self.post_quant_conv = nn.Conv2d(config.codebook_dim, config.z_channels, 1)
        self.decoder = Decoder(config)

    @property
    def factor(self) -> int:
        return 2 ** (len(self.config.ch_mult) - 1)

    def codes(self) -> Tensor:
        """(V, codebook_dim) code vectors as decoding uses them."""
        weight = self.codebook.weight
        return F.normalize(weight, dim=-1) if self.config.l2_codes else weight

    @torch.no_grad()
    def decode(self, ids: Tensor) -> Tensor:
        """ids (T,) or (H, W) int64 -> image (3, f*H, f*W) float32 in [0, 1]."""
        H, W = self.grid
        if ids.numel() != H * W:
            raise ValueError(f"expected {H * W} tokens for a {H}x{W} grid, got {ids.numel()}")
        ids = ids.to(self.codebook.weight.device).reshape(H, W)
        z = self.codes()[ids].permute(2, 0, 1).unsqueeze(0)  # (1, codebook_dim, H, W)
        x = self.decoder(self.post_quant_conv(z))  # (1, 3, f*H, f*W) in about [-1, 1]
        return ((x[0].float() + 1) / 2).clamp(0, 1)
