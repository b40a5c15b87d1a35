"""Llama blocks shared by the LlamaGen target and its drafter: 2D RoPE, attention over a static KV cache.

References: research/lantern.md §2.3 (2D RoPE, interleaved pairs, zero rotation on caption slots),
§2.5 (pre-allocated KV cache). Shapes: G guidance rows, n new tokens, S cache slots, D hidden,
h heads, hd head dim.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coolsd.models.graphs import make_runner
from coolsd.models.llamagen.config import LlamaGenConfig


def rope_2d(positions: Tensor, grid: tuple[int, int], head_dim: int, base: float) -> tuple[Tensor, Tensor]:
    """cos, sin (n, hd/2) float32 for image-token indices `positions` (n,) int64, row-major on `grid`.

    Pair i < hd/4 turns by row * base^(-i / (hd/4)), pair hd/4 + i by column * the same frequency.
    Positions outside [0, H*W) (caption slots are passed as -1, drafts past the grid) get
    cos = sin = 0: q and k are zeroed there, as in the published model.
    """
    height, width = grid
    quarter = head_dim // 4
    freqs = base ** (-torch.arange(quarter, dtype=torch.float32, device=positions.device) / quarter)  # (hd/4,)
    valid = (positions >= 0) & (positions < height * width)
    pos = positions.clamp(min=0)
    rows, cols = (pos // width).float(), (pos % width).float()
    angles = torch.cat([rows[:, None] * freqs, cols[:, None] * freqs], dim=1)  # (n, hd/2)
    keep = valid[:, None].float()
    return angles.cos() * keep, angles.sin() * keep


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate consecutive pairs (x[2j], x[2j+1]) of x (G, h, n, hd) by the angles behind cos, sin (n, hd/2)."""
    pairs = x.float().unflatten(-1, (-1, 2))  # (G, h, n, hd/2, 2)
    even, odd = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return rotated.flatten(-2).to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


class KVCache:
    """Pre-allocated keys and values, (layers, G, h, S, hd) each; slots are written in place."""

    def __init__(self, n_layers: int, rows: int, heads: int, slots: int, head_dim: int, device, dtype):
        shape = (n_layers, rows, heads, slots, head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)

    @property
    def slots(self) -> int:
        return self.k.shape[3]

    def move(self, dst: int, src: Tensor) -> None:
        """Copy slots `src` (m,) to [dst, dst + m); the gather copies first, so overlaps are safe."""
        m = src.numel()
        self.k[:, :, :, dst : dst + m] = self.k.index_select(3, src)
        self.v[:, :, :, dst : dst + m] = self.v.index_select(3, src)


class CachedPath:
    """What the LlamaGen target and drafter share: a `KVCache` in `_cache`, the tokens it holds
    (`_length`), and the execution path of their one static-shape call (`coolsd.models.graphs`):
    `_blocks` (static block sizes, () = eager) and `_runner` (CUDA graphs, or None)."""

    _cache: KVCache | None
    _length: int
    _blocks: tuple[int, ...]
    _runner: object | None

    @property
    def length(self) -> int:
        return self._length

    def _cache_tensors(self) -> tuple[Tensor, Tensor]:
        return self._cache.k, self._cache.v

    def _set_path(self, path: str, fn, rows, allocate) -> None:
        """Run `fn(x, positions, slots, mask)` on `path`; `allocate(rows)` makes the cache for a row count."""
        self._blocks, self._runner = make_runner(path, fn, self._cache_tensors, self.config.hidden_size, rows,
                                                 allocate)

    def _same_path(self, new):
        """`new` (a fork of this model, with an empty cache) on this model's path: a model on CUDA graphs
        gets its own graphs, captured on its own cache. Returns `new`."""
        if self._runner is not None:
            new.use_path("cuda-graphs", self._runner.rows)
        return new


class Attention(nn.Module):
    """Multi-head self-attention; new keys/values go to cache slots [start, start + n)."""

    def __init__(self, config: LlamaGenConfig):
        super().__init__()
        dim, bias = config.hidden_size, config.attention_bias
        self.heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.q = nn.Linear(dim, dim, bias=bias)
        self.k = nn.Linear(dim, dim, bias=bias)
        self.v = nn.Linear(dim, dim, bias=bias)
        self.o = nn.Linear(dim, dim, bias=bias)

    def forward(self, x, cos, sin, cache: KVCache, layer: int, start: int | Tensor, mask: Tensor) -> Tensor:
        """x (G, n, D); mask (n, start + n) bool, True = may attend. Returns (G, n, D).

        Static path (`coolsd.models.graphs`): `start` is a tensor of the n slots to write and `mask`
        is (n, S) over the whole cache, so shapes do not depend on the cache length.
        """
        G, n, D = x.shape
        q = self.q(x).view(G, n, self.heads, self.head_dim).transpose(1, 2)  # (G, h, n, hd)
        k = self.k(x).view(G, n, self.heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(G, n, self.heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if isinstance(start, Tensor):
            cache.k[layer].index_copy_(2, start, k)
            cache.v[layer].index_copy_(2, start, v)
            out = F.scaled_dot_product_attention(q, cache.k[layer], cache.v[layer], attn_mask=mask)
            return self.o(out.transpose(1, 2).reshape(G, n, D))
        cache.k[layer, :, :, start : start + n] = k
        cache.v[layer, :, :, start : start + n] = v
        keys = cache.k[layer, :, :, : start + n]  # (G, h, start + n, hd)
        values = cache.v[layer, :, :, : start + n]
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)  # (G, h, n, hd)
        return self.o(out.transpose(1, 2).reshape(G, n, D))


class SwiGLU(nn.Module):
    def __init__(self, config: LlamaGenConfig):
        super().__init__()
        dim, width = config.hidden_size, config.intermediate_size
        self.gate = nn.Linear(dim, width, bias=False)
        self.up = nn.Linear(dim, width, bias=False)
        self.down = nn.Linear(width, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class DecoderLayer(nn.Module):
    """Pre-norm Llama block. The drafter's only layer has no input norm (`input_norm=False`, lantern.md §4.1)."""

    def __init__(self, config: LlamaGenConfig, input_norm: bool = True):
        super().__init__()
        self.norm_attn = RMSNorm(config.hidden_size, config.rms_norm_eps) if input_norm else nn.Identity()
        self.attn = Attention(config)
        self.norm_mlp = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = SwiGLU(config)

    def forward(self, x, cos, sin, cache: KVCache, layer: int, start: int | Tensor, mask: Tensor) -> Tensor:
        x = x + self.attn(self.norm_attn(x), cos, sin, cache, layer, start, mask)
        return x + self.mlp(self.norm_mlp(x))


def check_crop(length: int, keep: Tensor | None, current: int) -> Tensor | None:
    """Validate `crop(length, keep)` arguments against `current` slots; returns keep as int64 or None."""
    if not 0 <= length <= current:
        raise ValueError(f"crop length must be in [0, {current}], got {length}")
    if keep is None or keep.numel() == 0:
        return None
    keep = keep.reshape(-1).long()
    if bool((keep < length).any() or (keep >= current).any()):
        raise ValueError(f"keep slots must lie in [{length}, {current}), got {keep.tolist()}")
    if keep.numel() > 1 and bool((keep[1:] <= keep[:-1]).any()):
        raise ValueError(f"keep slots must be strictly ascending, got {keep.tolist()}")
    return keep


def build_mask(prefix: Tensor, length: int, n: int, mask: Tensor | None) -> Tensor:
    """(n, P + length + n) bool: `prefix` (P,) visible caption slots, then image slots (`mask` or causal)."""
    device = prefix.device
    if mask is None:
        image = torch.ones(n, length + n, dtype=torch.bool, device=device)
        image[:, length:] = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    else:
        if tuple(mask.shape) != (n, length + n):
            raise ValueError(f"mask must be (n, length + n) = ({n}, {length + n}), got {tuple(mask.shape)}")
        image = mask.to(device=device, dtype=torch.bool)
    return torch.cat([prefix[None, :].expand(n, -1), image], dim=1)
