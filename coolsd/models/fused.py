"""The fused CPU path: each layer-stack call of a few rows in one C call, on the stored weights, in fp32 maths.

What it changes against the eager path (`coolsd.models.llama.LayerStack._layers`, the reference):
- a call of up to `rowkernel.MAX_ROWS` rows (G guidance rows x n tokens: a step, a verify, a tree block, a head
  step) runs the whole stack (RMSNorm, products, RoPE, cache writes, attention, SiLU, residual adds) in one call of
  `rowkernel.StackKernel`, so the Python interpreter and torch's dispatch sit between no two of its small ops;
- the weights are read as stored: bf16 weights are widened exactly to fp32 in registers (half the bytes of an fp32
  copy, the products of the fp32 maths on those values); activations, the KV cache and every sum are fp32;
- calls of more rows (a long prefix, a large tree) run the reference maths on fp32 copies of the same weights, so
  every call is the fp32 maths of the stored weight values, whatever the CPU's own bf16 units;
- the final norm and the codebook head (`FusedHead`) and an Eagle head's fc and LM head (`RowsLinear`) run the row
  kernel's product.

Shapes: G guidance rows, n new tokens, M = G n rows a call, D hidden size, S cache slots, hd head size.
In fp32 the fused and eager paths give the same logits up to float rounding (`tests/models/test_fused.py`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from coolsd.models import rowkernel


class RowsLinear:
    """y = x @ w (+ bias): calls of `rowkernel.min_rows`..MAX_ROWS rows on the row kernel (the stored weights), the
    others by fp32 BLAS on an fp32 copy made once. w_t (K, N); bias (N,) or None; x (M, K) -> (M, N) fp32."""

    def __init__(self, w_t: Tensor, bias: Tensor | None = None) -> None:
        self.w = w_t.detach().float()  # (K, N) (the same tensor for fp32 weights)
        self.bias = None if bias is None else bias.detach().float()
        self.packed = rowkernel.pack(w_t)  # the kernel's layout in w_t's dtype, or None where it cannot take w_t

    def __call__(self, x: Tensor) -> Tensor:
        if self.packed is not None and rowkernel.takes(self.packed, x.shape[0]):
            y = rowkernel.rows_mm(x, self.packed)
            return y if self.bias is None else y.add_(self.bias)
        x = x.float()
        return x @ self.w if self.bias is None else torch.addmm(self.bias, x, self.w)


def rope_tables(positions: int, n_heads: int, n_kv: int, head_dim: int, theta: float) -> tuple[Tensor, Tensor]:
    """cos, sin (P, hq + hk, hd) fp32 for the C stack: rotate-half as a roll by hd / 2 times a signed sin, the
    attention scale 1 / sqrt(hd) folded into the query heads' rows."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.arange(positions, dtype=torch.float64)[:, None] * inv  # (P, hd / 2)
    angles = torch.cat([angles, angles], dim=-1)
    half = head_dim // 2
    sin = torch.cat([-angles[:, :half].sin(), angles[:, half:].sin()], dim=-1)
    scale = torch.ones(n_heads + n_kv, 1, dtype=torch.float64)
    scale[:n_heads] = 1.0 / math.sqrt(head_dim)
    return (angles.cos()[:, None] * scale).float(), (sin[:, None] * scale).float()


def stack_kernel(blocks, n_heads: int, n_kv: int, head_dim: int, theta: float, eps: float,
                 positions: int) -> rowkernel.StackKernel | None:
    """The C stack over `LayerStack.blocks` (per layer qkv, o, gate_up, down as (K, N)) with RoPE tables of
    `positions` rows, or None where the kernel cannot take them (no kernel here, a width not a multiple of 16,
    heads it does not index)."""
    if not rowkernel.available():
        return None
    packed = [rowkernel.pack(w) for b in blocks for w in b]
    cos, sin = rope_tables(positions, n_heads, n_kv, head_dim, theta)
    return rowkernel.StackKernel.for_stack(packed, n_heads, n_kv, head_dim, eps, cos, sin)


class FusedHead:
    """The final RMSNorm (with its weight) and the codebook head of a target on the fused path.
    norm_w (D,), head_t (D, V) as the eager target holds them; eps: RMSNorm epsilon."""

    def __init__(self, norm_w: Tensor, head_t: Tensor, eps: float) -> None:
        norm_w = norm_w.detach().float()
        self.norm_w = torch.cat([norm_w, torch.zeros_like(norm_w)])  # (2 D,): LayerNorm's weight over [h, -h]
        self.head = RowsLinear(head_t)
        self.eps = eps

    def __call__(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """h (G, n, D) last layer output -> (logits (G, n, V) fp32, features (G, n, D) fp32). RMSNorm as one
        LayerNorm over [h, -h], whose mean is 0 and variance mean(h^2)."""
        g, n, d = h.shape
        h = h.float()
        feat = F.layer_norm(torch.cat([h, -h], dim=-1), (2 * d,), self.norm_w, None, self.eps)[..., :d]
        return self.head(feat.reshape(g * n, d)).view(g, n, -1), feat
