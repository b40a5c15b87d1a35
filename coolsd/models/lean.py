"""The lean CPU path (issue 35): the eager layer stack's maths with fewer, cheaper calls per decode step.

What it changes against the eager path (`coolsd.models.llama.LayerStack._layers`), each chosen by
measurement on the emoji model (1 thread, AMD EPYC with avx512_bf16, `python -m coolsd.bench.limit`):
- products: bf16 weights are packed once for oneDNN (`torch.ops.mkldnn._reorder_linear_weight`), so a
  1-row product reads its weights at about the memory's speed (a plain bf16 `x @ w` of one row runs 2-3x
  slower); SiLU, the gate-times-up product and the residual add ride on the products as oneDNN post-ops.
  fp32 weights keep plain `x @ w` (oneDNN packing measured slower in fp32 for one row);
- activations in fp32 whatever the weights: the residual stream, RMSNorm, RoPE, attention and the KV cache
  (a bf16 `bmm` of one query ran 4x slower than fp32, bf16 RMSNorm converts on every call);
- attention as two `matmul`s and a softmax over the slots in use (one fused call of the CPU's
  `scaled_dot_product_attention` for one query costs more than the three), the causal or tree mask added
  once per call as a bias shared by every layer;
- RoPE tables per head built once with the attention scale 1/sqrt(hd) folded into the query heads' rows.

Shapes: G guidance rows, n new tokens, M = G n rows per product, D hidden size, S cache slots, hd head size.
The eager path stays the reference: in fp32 both give the same logits up to float rounding
(`tests/models/test_lean.py`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

LEAN = "lean"  # the execution path's name (`coolsd.models.graphs.PATHS`)
PACKED_DTYPES = (torch.bfloat16,)  # (choice) weights packed for oneDNN; fp32 measured faster unpacked
_NONE = [None]  # oneDNN post-op scalars: none


def packs(dtype: torch.dtype) -> bool:
    """Whether weights of `dtype` are packed for oneDNN here (bf16 on a CPU whose oneDNN has bf16)."""
    return (dtype in PACKED_DTYPES and torch.backends.mkldnn.is_available()
            and torch.ops.mkldnn._is_mkldnn_bf16_supported())


class LeanLinear:
    """y = x @ w (+ bias) over a weight packed once: w_t (K, N) as the eager path stores it (`x @ w_t`).

    Every method takes x (M, K) in any float dtype (converted to the weight's) and returns (M, N) in the
    weight's dtype, except `add_to`, which adds into an fp32 residual in place and returns it.
    """

    def __init__(self, w_t: Tensor, bias: Tensor | None = None) -> None:
        self.dtype = w_t.dtype
        self.bias = None if bias is None else bias.detach().to(w_t.dtype)
        self.is_packed = packs(w_t.dtype) and w_t.device.type == "cpu"
        if self.is_packed:
            self.w = torch.ops.mkldnn._reorder_linear_weight(w_t.detach().T.contiguous(), 1)  # oneDNN layout
        else:
            self.w = w_t.detach()  # (K, N)

    def __call__(self, x: Tensor) -> Tensor:
        x = x.to(self.dtype)
        if self.is_packed:
            return torch.ops.mkldnn._linear_pointwise(x, self.w, self.bias, "none", _NONE, "")
        return x @ self.w if self.bias is None else torch.addmm(self.bias, x, self.w)

    def silu(self, x: Tensor) -> Tensor:
        """SiLU(x @ w), one call when packed."""
        x = x.to(self.dtype)
        if self.is_packed:
            return torch.ops.mkldnn._linear_pointwise(x, self.w, self.bias, "swish", _NONE, "")
        return F.silu(self(x), inplace=True)

    def times(self, x: Tensor, other: Tensor) -> Tensor:
        """(x @ w) * other, other (M, N) in the weight's dtype; one call when packed."""
        x = x.to(self.dtype)
        if self.is_packed:
            return torch.ops.mkldnn._linear_pointwise.binary(x, other, self.w, self.bias, "mul")
        return self(x).mul_(other)

    def add_to(self, x: Tensor, residual: Tensor) -> Tensor:
        """residual += x @ w: residual (M, N) fp32, changed in place and returned."""
        if self.is_packed or self.dtype != residual.dtype:
            return residual.add_(self(x))
        return residual.addmm_(x, self.w)


def rms(x: Tensor, eps: float, weight: Tensor | None = None) -> Tensor:
    """RMSNorm over the last dim in x's dtype (fp32 on this path): x / sqrt(mean(x^2) + eps) [* weight]."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


class LeanLayer:
    """One decoder layer's products: qkv (D -> (hq + 2 hk) hd), o (hq hd -> D), gate and up (D -> I), down
    (I -> D), from the eager path's fused transposed copies (RMSNorm weights already folded in)."""

    def __init__(self, w_qkv: Tensor, w_o: Tensor, w_gate_up: Tensor, w_down: Tensor) -> None:
        gate, up = w_gate_up.chunk(2, dim=1)
        self.qkv, self.o = LeanLinear(w_qkv), LeanLinear(w_o)
        self.gate, self.up = LeanLinear(gate.contiguous()), LeanLinear(up.contiguous())
        self.down = LeanLinear(w_down)


class LeanLayers:
    """The lean forward of a layer stack over a KV cache it does not own (the stack's `k`, `v`, fp32).

    Args:
        blocks: per layer (qkv (D, (hq + 2 hk) hd), o (hq hd, D), gate_up (D, 2 I), down (I, D)) as
            `LayerStack.blocks` holds them; read once (packed copies), never changed.
        n_heads, n_kv, head_dim: hq, hk, hd; theta: RoPE base; eps: RMSNorm epsilon;
        positions: RoPE table rows (every position a call may use).

    Holds weights and tables only (no per-call state), so forks of a stack share one.
    """

    def __init__(self, blocks, n_heads: int, n_kv: int, head_dim: int, theta: float, eps: float,
                 positions: int) -> None:
        self.layers = [LeanLayer(*b) for b in blocks]
        self.n_heads, self.n_kv, self.head_dim, self.eps = n_heads, n_kv, head_dim, eps
        device = blocks[0][0].device
        inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim))
        angles = torch.arange(positions, dtype=torch.float64, device=device)[:, None] * inv  # (P, hd/2)
        angles = torch.cat([angles, angles], dim=-1)
        half = head_dim // 2
        sin = torch.cat([-angles[:, :half].sin(), angles[:, half:].sin()], dim=-1)  # signed: rotate-half as a roll
        scale = torch.ones(n_heads + n_kv, 1, dtype=torch.float64, device=device)
        scale[:n_heads] = 1.0 / math.sqrt(head_dim)  # the attention scale, on the query heads only
        self.cos = (angles.cos()[:, None] * scale).float()  # (P, hq + hk, hd)
        self.sin = (sin[:, None] * scale).float()

    def forward(self, x_in: Tensor, positions: Tensor, k: Tensor, v: Tensor, start: int,
                mask: Tensor | None) -> Tensor:
        """x_in (G, n, D) inputs at RoPE `positions` (n,) int64, written to cache slots [start, start + n) of
        k, v (layers, G, hk, S, hd) fp32; mask (n, start + n) bool or None (causal). Returns the last
        layer's output (G, n, D) fp32, before any final norm."""
        g, n, d = x_in.shape
        hq, hk, hd = self.n_heads, self.n_kv, self.head_dim
        end = start + n
        cos, sin = self.cos.index_select(0, positions), self.sin.index_select(0, positions)  # (n, hq + hk, hd)
        if mask is None and n > 1:
            mask = torch.ones(n, end, dtype=torch.bool, device=x_in.device).tril(start)
        pair = torch.empty(g * n, 2 * d, dtype=torch.float32, device=x_in.device)  # [x, -x]: RMSNorm as LayerNorm
        x = pair[:, :d]  # (M, D) the residual stream, updated in place
        x.copy_(x_in.reshape(g * n, d))
        for i, layer in enumerate(self.layers):
            qkv = layer.qkv(self.norm(pair, layer.qkv.dtype)).view(g, n, hq + 2 * hk, hd)
            qk = qkv[:, :, : hq + hk]
            qk = torch.addcmul(qk * cos, qk.roll(hd // 2, -1), sin)  # (G, n, hq + hk, hd) fp32, q scaled
            k[i, :, :, start:end] = qk[:, :, hq:].transpose(1, 2)
            v[i, :, :, start:end] = qkv[:, :, hq + hk :].transpose(1, 2)
            att = F.scaled_dot_product_attention(qk[:, :, :hq].transpose(1, 2), k[i, :, :, :end], v[i, :, :, :end],
                                                 attn_mask=mask, scale=1.0, enable_gqa=hk != hq)  # (G, hq, n, hd)
            layer.o.add_to(att.transpose(1, 2).reshape(g * n, hq * hd), x)
            h = self.norm(pair, layer.up.dtype)  # converted once for both products
            layer.down.add_to(layer.up.times(h, layer.gate.silu(h)), x)
        return x.view(g, n, d)

    def norm(self, pair: Tensor, dtype: torch.dtype) -> Tensor:
        """RMSNorm of x = pair[:, :D] (no weight, folded into the products) in `dtype`: LayerNorm of
        [x, -x] (M, 2 D), whose mean is 0 and variance mean(x^2), is the CPU's one fused kernel for it."""
        d = pair.shape[1] // 2
        torch.neg(pair[:, :d], out=pair[:, d:])
        return F.layer_norm(pair, (2 * d,), None, None, self.eps)[:, :d].to(dtype)


class LeanHead:
    """RMSNorm (with its weight) and the codebook head of a target on the lean path.

    Args: norm_w (D,), head_t (D, V) as the eager target holds them; eps: RMSNorm epsilon."""

    def __init__(self, norm_w: Tensor, head_t: Tensor, eps: float) -> None:
        self.norm_w, self.head, self.eps = norm_w.detach().float(), LeanLinear(head_t), eps

    def __call__(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """h (G, n, D) last layer output -> (logits (G, n, V) fp32, features (G, n, D) fp32)."""
        g, n, d = h.shape
        feat = rms(h.float(), self.eps, self.norm_w)
        return self.head(feat.view(g * n, d)).view(g, n, -1).float(), feat
