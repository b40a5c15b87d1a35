"""The lean CPU paths (issue 35): the eager layer stack's maths with products prepared once and fewer calls a step.

What they change against the eager path (`coolsd.models.llama.LayerStack._layers`), each chosen by
interleaved measurement on the emoji model (1 thread, AMD EPYC with avx512_bf16, a shared 2-core VM;
`python -m coolsd.bench.limit` measures the paths side by side on any machine):
- products: one-row calls (a decode step without CFG, a head step) run plain fp32 BLAS on weights converted
  once at load (bf16 weights too: a bf16 product of one row goes through oneDNN, which costs ~20 us a call
  whatever its size, against ~3 us for fp32 BLAS, and the old path converted operands on every call);
  calls of more rows (a verify, CFG's two rows) run oneDNN on bf16 weights packed once
  (`_reorder_linear_weight`), SiLU, gate-times-up and the residual add riding on them as post-ops.
  Path "lean-packed" runs one-row calls on the packed weights too (half the bytes a step reads: better
  where the weights do not stay in the cache). fp32 models run fp32 BLAS throughout (exact);
- path "lean-q8": the target as on "lean"; the drafter's products (the Eagle head's fc, layer and LM head) on
  int8 weights, one scale per output feature, bf16 inputs and outputs (`Int8Linear`): a quarter of the fp32
  bytes. A drafter only proposes, so any q it computes keeps every rule's maths exact (the rules see the q they
  sampled from); its drafts, and so a relaxed rule's output, are those of a slightly different head (measured:
  tau in the benchmark; `tests/models/test_lean.py` bounds its logits against fp32);
- activations in fp32 whatever the weights: the residual stream, norms, RoPE, attention and the KV cache
  (bf16 RMSNorm and a bf16 attention of one query convert on every call);
- RMSNorm as one fused LayerNorm call over [x, -x] (whose mean is 0 and variance mean(x^2)), where
  `F.rms_norm` on a CPU is about eight calls; its weight stays folded into the next product;
- RoPE tables per head built once, the attention scale 1/sqrt(hd) folded into the query heads' rows;
  views (cache layers, halves, q / k / v) made once a call; the fp32 fused attention (`F.sdpa`: a
  hand-written one for one query measured no faster).
- the stack of plain (fp32 BLAS or int8) layers runs as ONE TorchScript function (`plain_layers`): the same aten
  calls bit for bit (tested), without the Python interpreter between the ~150 small calls of a step (measured on
  the emoji model, Intel Xeon: a lean-q8 step 1.87 -> 1.55 ms, a round of L = 2 2.93 -> 2.45 ms); `narrow`
  rather than `x[:, :, a:b]`, which costs one call per dimension. The packed (oneDNN) layers stay in Python.

- path "lean-rows": "lean-q8" with the target's products of a few rows (a verify of L + 1 tokens, CFG's two rows;
  up to 16) on `coolsd.models.rowkernel`, a small AVX2 kernel that reads each weight once for all rows (MKL's fp32
  product of 2-4 rows costs 2-2.6x one row on an AVX2-only EPYC), in fp32 maths; on fp32 weights one-row calls
  stay on fp32 BLAS (the kernel measured 6 % slower there, its call costing more), on bf16 weights the kernel
  reads the stored bf16 (half the bytes) and runs one-row calls too.
- path "lean-fused": "lean-rows" with every layer stack's call of up to 16 rows (a step, a verify, a tree block,
  the drafter's step) in one C call (`rowkernel.StackKernel`: the maths of `plain_layers_py` in fp32 on the
  stored weights, bf16 read as bf16), and the drafter's whole step (fc, its layer, LM head) in one
  (`rowkernel.EagleKernel`), not int8. Measured on the emoji model (AVX2-only EPYC, `python -m coolsd.bench.limit`,
  one run): a target step 2.65 -> 1.29 ms (the C stack alone, weights hot, 0.74 ms, its products about 0.57), a
  head step 0.65 -> 0.43 ms, a round of L = 2 3.89 -> 2.09 ms (docs/models.md has the later runs).
- path "lean-fused-q8": "lean-fused" with the drafter's weights rounded to int8 as `Int8Linear` rounds them (the
  same integers and scales), read by the row kernel (`rowkernel.pack(int8=True)`) in every drafter call (no
  oneDNN copy; the fp32 copies the plain layers hold stay unread): half the bf16 bytes of a head step, fp32 maths
  on the rounded weights (tested against the eager drafter on those weights). Where the kernel cannot take every
  weight it runs as "lean-q8" (never a mix of int8 and fp32).

Shapes: G guidance rows, n new tokens, M = G n rows per product, D hidden size, S cache slots, hd head size.
The eager path stays the reference: in fp32 both give the same logits up to float rounding and the same
tokens for a seed; in bf16 the lean logits are no further from fp32 than the eager bf16 ones
(`tests/models/test_lean.py`).
"""

from __future__ import annotations

import functools
import math
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor

from coolsd.models import rowkernel

# The lean paths (`coolsd.models.graphs.PATHS`) -> products of up to this many rows run plain fp32 BLAS, the rest
# oneDNN on packed bf16 weights (bf16 models only). "lean": one-row calls (a step without CFG, a head step) on
# fp32 BLAS, about 3 us a call against oneDNN's ~20 but twice the bytes; "lean-packed": every call on oneDNN
# (half the bytes: better where the weights do not stay in the cache); "lean-q8": "lean" with the drafter on
# `Int8Linear`. `python -m coolsd.bench.limit` measures them side by side.
LEAN_PATHS = {"lean": 1, "lean-packed": 0, "lean-q8": 1, "lean-rows": 1, "lean-fused": 1, "lean-fused-q8": 1}
INT8_DRAFTER_PATHS = ("lean-q8", "lean-rows", "lean-fused-q8")  # lean paths whose drafter reads int8 weights
# "lean-rows": "lean-q8" with the target's products of a few rows (a verify; bf16 weights: every call) on the row kernel
ROW_KERNEL_PATHS = ("lean-rows", "lean-fused", "lean-fused-q8")
# "lean-fused": "lean-rows" with each layer stack (target and drafter) for up to 16 rows in one C call
# (`rowkernel.StackKernel`) on the stored weights, the drafter's whole step in one (`rowkernel.EagleKernel`), no int8
# "lean-fused-q8": "lean-fused" with the drafter's weights int8 on the row kernel (half its bf16 bytes)
FUSED_PATHS = ("lean-fused", "lean-fused-q8")
KERNEL_INT8_PATHS = ("lean-fused-q8",)  # int8 drafters on the row kernel (elsewhere torch's int8 product)
PACKED_DTYPES = (torch.bfloat16,)  # (choice) weights packed for oneDNN; fp32 measured faster unpacked
_NONE = [None]  # oneDNN post-op scalars: none


def packs(dtype: torch.dtype, device=None) -> bool:
    """Whether weights of `dtype` on `device` (default CPU) are packed for oneDNN here: bf16 on a CPU whose
    oneDNN has bf16."""
    return (dtype in PACKED_DTYPES and torch.device(device or "cpu").type == "cpu"
            and torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


class PlainLinear:
    """y = x @ w (+ bias) by plain fp32 BLAS: w_t (K, N) converted to fp32 once here (never per call).
    x (M, K) any float dtype -> (M, N) fp32."""

    dtype = torch.float32  # what its inputs are converted to, and what it returns

    def __init__(self, w_t: Tensor, bias: Tensor | None = None) -> None:
        self.w = w_t.detach().float()  # (K, N) (the same tensor for fp32 weights)
        self.bias = None if bias is None else bias.detach().float()

    def __call__(self, x: Tensor) -> Tensor:
        x = x.float()
        return x @ self.w if self.bias is None else torch.addmm(self.bias, x, self.w)

    def add_to(self, x: Tensor, residual: Tensor) -> Tensor:
        """residual += x @ w: residual (M, N) fp32, changed in place and returned."""
        return residual.addmm_(x.float(), self.w)


class RowsLinear(PlainLinear):
    """`PlainLinear` whose calls of `rowkernel.min_rows`..MAX_ROWS rows run the row kernel (`coolsd.models.rowkernel`,
    a packed copy of w; int8: every call, on w rounded to int8); where the kernel cannot take w, every call runs
    fp32 BLAS."""

    def __init__(self, w_t: Tensor, bias: Tensor | None = None, int8: bool = False) -> None:
        super().__init__(w_t, bias)
        self.packed = rowkernel.pack(w_t, int8)  # in w_t's own dtype where the kernel reads it (bf16: half the bytes)

    def __call__(self, x: Tensor) -> Tensor:
        if self.packed is not None and rowkernel.takes(self.packed, x.shape[0]):
            y = rowkernel.rows_mm(x, self.packed)
            return y if self.bias is None else y.add_(self.bias)
        return super().__call__(x)


class PackedLinear:
    """y = x @ w (+ bias) by oneDNN over bf16 weights packed once here (`_reorder_linear_weight`), with SiLU,
    a product by another tensor and a residual add as post-ops. x (M, K) -> (M, N) in the weights' dtype."""

    def __init__(self, w_t: Tensor, bias: Tensor | None = None) -> None:
        self.dtype = w_t.dtype
        self.w = torch.ops.mkldnn._reorder_linear_weight(w_t.detach().T.contiguous(), 1)  # oneDNN's layout
        self.bias = None if bias is None else bias.detach().to(w_t.dtype)

    def __call__(self, x: Tensor) -> Tensor:
        return torch.ops.mkldnn._linear_pointwise(x.to(self.dtype), self.w, self.bias, "none", _NONE, "")

    def silu(self, x: Tensor) -> Tensor:
        """SiLU(x @ w) in one call."""
        return torch.ops.mkldnn._linear_pointwise(x.to(self.dtype), self.w, self.bias, "swish", _NONE, "")

    def times(self, x: Tensor, other: Tensor) -> Tensor:
        """(x @ w) * other in one call; other (M, N) in the weights' dtype."""
        return torch.ops.mkldnn._linear_pointwise.binary(x.to(self.dtype), other, self.w, self.bias, "mul")

    def add_to(self, x: Tensor, residual: Tensor) -> Tensor:
        """residual += x @ w: residual (M, N) fp32, changed in place and returned."""
        return residual.add_(self(x))


class Int8Linear:
    """y = x @ w (+ bias) on int8 weights with one bf16 scale per output feature (symmetric, |w| max -> 127), by
    `torch._weight_int8pack_mm`: bf16 inputs and outputs (fp32 sums inside), a quarter of the fp32 weight bytes,
    for a drafter only (module doc). w_t (K, N) -> x (M, K) any float dtype -> (M, N) fp32. CPU only
    (`int8_runs`)."""

    dtype = torch.float32  # what it returns

    def __init__(self, w_t: Tensor, bias: Tensor | None = None) -> None:
        w = w_t.detach().float().T  # (N, K)
        scale = w.abs().amax(dim=1).clamp_min(1e-12) / 127  # (N,) fp32: the weights are rounded on it
        self.w = torch.round(w / scale[:, None]).to(torch.int8).contiguous()  # (N, K), |w| <= 127
        self.scale = scale.to(torch.bfloat16)  # as the product reads it (a relative change below 2^-8)
        self.bias = None if bias is None else bias.detach().float()

    def _mm(self, x: Tensor) -> Tensor:
        return int8_mm(x, self.w, self.scale)

    def __call__(self, x: Tensor) -> Tensor:
        y = self._mm(x).float()
        return y if self.bias is None else y.add_(self.bias)

    def add_to(self, x: Tensor, residual: Tensor) -> Tensor:
        """residual += x @ w: residual (M, N) fp32, changed in place and returned."""
        return residual.add_(self._mm(x))


def int8_mm(x: Tensor, w: Tensor, scale: Tensor) -> Tensor:
    """x (M, K) any float dtype @ int8 w (N, K) with scale (N,) -> (M, N) bf16 (`contiguous`: the kernel reads rows
    of x): `Int8Linear`'s product, and the scripted stack's (`plain_layers`)."""
    return torch._weight_int8pack_mm(x.to(torch.bfloat16).contiguous(), w, scale)


def int8_runs(device=None) -> bool:
    """Whether `Int8Linear` runs on `device` (default CPU): torch's int8 weight-only product is a CPU kernel here."""
    return torch.device(device or "cpu").type == "cpu"


class LeanLinear:
    """A product that picks its kind by the rows of each call: up to `plain_rows` rows run `PlainLinear`,
    more rows `PackedLinear` when the weights are bf16 (`packs`), else `PlainLinear` (see LEAN_PATHS).
    w_t (K, N); bias (N,) or None. `for_rows(M)` is the one a call of M rows uses."""

    def __init__(self, w_t: Tensor, bias: Tensor | None = None, plain_rows: int = 1) -> None:
        self.packed = PackedLinear(w_t, bias) if packs(w_t.dtype, w_t.device) else None
        self.plain = PlainLinear(w_t, bias) if self.packed is None or plain_rows > 0 else None
        self.plain_rows = plain_rows

    def for_rows(self, rows: int) -> PlainLinear | PackedLinear:
        return self.packed if self.packed is not None and rows > self.plain_rows else self.plain

    def __call__(self, x: Tensor) -> Tensor:
        """x (M, K) -> (M, N) in `for_rows(M).dtype`."""
        return self.for_rows(x.shape[0])(x)


class PlainLayer:
    """One decoder layer's products by `PlainLinear` (or `Int8Linear`, `linear`): qkv (D -> (hq + 2 hk) hd),
    o (hq hd -> D), gate_up (D -> 2 I: gate and up in one product), down (I -> D). Weights: the eager path's
    fused transposed copies (RMSNorm weights folded in)."""

    def __init__(self, w_qkv: Tensor, w_o: Tensor, w_gate_up: Tensor, w_down: Tensor, linear=PlainLinear) -> None:
        self.qkv, self.o, self.gate_up, self.down = (linear(w) for w in (w_qkv, w_o, w_gate_up, w_down))


class PackedLayer:
    """The same products by `PackedLinear`, gate and up apart so that SiLU and the product ride on them."""

    def __init__(self, w_qkv: Tensor, w_o: Tensor, w_gate_up: Tensor, w_down: Tensor) -> None:
        gate, up = w_gate_up.chunk(2, dim=1)
        self.qkv, self.o, self.gate, self.up, self.down = (PackedLinear(w.contiguous()) for w in
                                                           (w_qkv, w_o, gate, up, w_down))
        self.dtype = w_qkv.dtype

    def mlp_add_to(self, h: Tensor, residual: Tensor) -> None:
        """residual += down(SiLU(h @ gate) * (h @ up)); h (M, D) bf16: three oneDNN calls."""
        self.down.add_to(self.up.times(h, self.gate.silu(h)), residual)


class LeanLayers:
    """The lean forward of a layer stack over a KV cache it does not own (the stack's `k`, `v`, fp32).

    Args:
        blocks: per layer (qkv (D, (hq + 2 hk) hd), o (hq hd, D), gate_up (D, 2 I), down (I, D)) as
            `LayerStack.blocks` holds them; read once (packed copies), never changed.
        n_heads, n_kv, head_dim: hq, hk, hd; theta: RoPE base; eps: RMSNorm epsilon;
        positions: RoPE table rows (every position a call may use).
        plain_rows: calls of up to this many rows (G n) run the plain fp32 products (LEAN_PATHS).
        int8: every call runs `Int8Linear` products (a drafter on INT8_DRAFTER_PATHS; needs `int8_runs`).
        row_kernel: plain calls of `rowkernel.min_rows`..MAX_ROWS rows (2+ on fp32 weights, 1+ on bf16) run the
            row kernel (ROW_KERNEL_PATHS) where `rowkernel.available()`; else MKL, as on "lean".
        fused: calls of up to MAX_ROWS rows run the whole stack in one C call (`rowkernel.StackKernel`,
            FUSED_PATHS; with row_kernel, where every weight packs), the others as without it.
        kernel_int8: the row kernel's copies in int8 (`rowkernel.pack`; a drafter on KERNEL_INT8_PATHS), and every
            call on them (no oneDNN copy).

    Holds weights and tables only (no per-call state), so forks of a stack share one.
    """

    def __init__(self, blocks, n_heads: int, n_kv: int, head_dim: int, theta: float, eps: float,
                 positions: int, plain_rows: int = 1, int8: bool = False, row_kernel: bool = False,
                 fused: bool = False, kernel_int8: bool = False) -> None:
        device = blocks[0][0].device
        one_dnn = packs(blocks[0][0].dtype, device) and not (int8 or kernel_int8)
        self.packed = [PackedLayer(*b) for b in blocks] if one_dnn else None
        linear = Int8Linear if int8 else PlainLinear
        self.plain = [PlainLayer(*b, linear=linear) for b in blocks] if self.packed is None or plain_rows > 0 else None
        linears = [lin for layer in self.plain or () for lin in (layer.qkv, layer.o, layer.gate_up, layer.down)]
        self.plain_weights = [lin.w for lin in linears]  # what `plain_layers` reads: 4 a layer
        self.plain_scales = [lin.scale for lin in linears] if int8 else []
        # the kernel's copies from the stored weights (bf16 stays bf16: half the bytes, the same products)
        packed = [rowkernel.pack(w, kernel_int8) for b in blocks for w in b] if row_kernel and not int8 else []
        empty = torch.empty(0)  # `plain_layers` runs MKL for a weight the kernel cannot take
        self.plain_packed = [empty if p is None else p for p in packed] if any(p is not None for p in packed) else []
        self.plain_rows = plain_rows
        self.n_heads, self.n_kv, self.head_dim, self.eps = n_heads, n_kv, head_dim, eps
        inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim))
        angles = torch.arange(positions, dtype=torch.float64, device=device)[:, None] * inv  # (P, hd/2)
        angles = torch.cat([angles, angles], dim=-1)
        half = head_dim // 2
        sin = torch.cat([-angles[:, :half].sin(), angles[:, half:].sin()], dim=-1)  # signed: rotate-half as a roll
        scale = torch.ones(n_heads + n_kv, 1, dtype=torch.float64, device=device)
        scale[:n_heads] = 1.0 / math.sqrt(head_dim)  # the attention scale, on the query heads only
        self.cos = (angles.cos()[:, None] * scale).float()  # (P, hq + hk, hd)
        self.sin = (sin[:, None] * scale).float()
        self.fused = (rowkernel.StackKernel.for_stack(packed, n_heads, n_kv, head_dim, eps, self.cos, self.sin)
                      if fused else None)

    def forward(self, x_in: Tensor, positions: Tensor, k: Tensor, v: Tensor, start: int,
                mask: Tensor | None) -> Tensor:
        """x_in (G, n, D) inputs at RoPE `positions` (n,) int64, written to cache slots [start, start + n) of
        k, v (layers, G, hk, S, hd) fp32; mask (n, start + n) bool or None (causal). Returns the last
        layer's output (G, n, D) fp32, before any final norm."""
        g, n, d = x_in.shape
        if self.fused is not None and self.fused.runs(g * n, k, v, mask):
            return self.fused(x_in, positions, k, v, start, mask)
        cos, sin = self.cos.index_select(0, positions), self.sin.index_select(0, positions)  # (n, hq + hk, hd)
        if mask is None and n > 1:
            mask = torch.ones(n, start + n, dtype=torch.bool, device=x_in.device).tril(start)
        if mask is not None:  # additive, once a call: the float mask `F.sdpa` would make of it in every layer
            mask = torch.zeros(mask.shape, device=x_in.device).masked_fill_(mask.logical_not(), -math.inf)
        if self.packed is None or g * n <= self.plain_rows:  # the whole stack in one TorchScript call
            return plain_layers()(x_in, cos, sin, k, v, start, mask, self.plain_weights, self.plain_scales,
                                  self.plain_packed, self.n_heads, self.n_kv, self.head_dim, self.eps)
        hq, hk, hd = self.n_heads, self.n_kv, self.head_dim
        pair = torch.empty(g * n, 2 * d, dtype=torch.float32, device=x_in.device)  # see `plain_layers_py`
        x, minus = pair[:, :d], pair[:, d:]
        x.view(g, n, d).copy_(x_in)
        for layer, kc, vc in zip(self.packed, k.unbind(0), v.unbind(0)):
            torch.neg(x, out=minus)
            qkv = layer.qkv(F.layer_norm(pair, (2 * d,), None, None, self.eps)[:, :d].to(layer.dtype))
            qk, new_v = qkv.view(g, n, hq + 2 * hk, hd).split([hq + hk, hk], 2)
            att = _attend(torch.addcmul(qk * cos, qk.roll(hd // 2, -1), sin), new_v, kc, vc, start, mask, hq, hk)
            layer.o.add_to(att.transpose(1, 2).reshape(g * n, hq * hd), x)
            torch.neg(x, out=minus)
            layer.mlp_add_to(F.layer_norm(pair, (2 * d,), None, None, self.eps)[:, :d].to(layer.dtype), x)
        return x.view(g, n, d)


def _attend(qk: Tensor, new_v: Tensor, kc: Tensor, vc: Tensor, start: int, mask: Tensor | None, hq: int,
            hk: int) -> Tensor:
    """Write one layer's new keys and values into its cache and attend. qk (G, n, hq + hk, hd) fp32 after RoPE
    (queries scaled), new_v (G, n, hk, hd); kc, vc (G, hk, S, hd) the layer's cache, slots [start, start + n)
    written; mask (n, start + n) bool or additive fp32, or None. Returns (G, hq, n, hd)."""
    n = qk.shape[1]  # `narrow`, not `[:, :, a:b]`: one call, not one a dimension
    kc.narrow(2, start, n).copy_(qk.narrow(2, hq, hk).transpose(1, 2))
    vc.narrow(2, start, n).copy_(new_v.transpose(1, 2))
    return F.scaled_dot_product_attention(qk.narrow(2, 0, hq).transpose(1, 2), kc.narrow(2, 0, start + n),
                                          vc.narrow(2, 0, start + n), attn_mask=mask, scale=1.0,
                                          enable_gqa=hk != hq)


def _on_row_kernel(x: Tensor, packed: list[Tensor], i: int) -> bool:
    """Whether weight i's product of x (M, K) runs the row kernel: a packed copy, and rows in its range
    (`rowkernel.min_rows`..MAX_ROWS)."""
    if len(packed) == 0 or packed[i].numel() == 0:
        return False
    if packed[i].dtype == torch.int8:  # every call: the int8 copy is the weight (`rowkernel.takes`)
        return True
    if x.shape[0] > rowkernel.MAX_ROWS:
        return False
    return x.shape[0] >= (rowkernel.MIN_ROWS_BF16 if packed[i].dtype == torch.bfloat16 else rowkernel.MIN_ROWS_F32)


def _product(x: Tensor, w: Tensor, scales: list[Tensor], packed: list[Tensor], i: int) -> Tensor:
    """x (M, K) fp32 @ weight i: fp32 w (K, N) by BLAS (`PlainLinear`) or by the row kernel on packed[i]
    (`_on_row_kernel`) or, when `scales` is not empty, int8 w (N, K) with scales[i] (N,) (`Int8Linear`); (M, N)
    fp32."""
    if len(scales) > 0:
        return int8_mm(x, w, scales[i]).float()
    if _on_row_kernel(x, packed, i):
        return torch.ops.coolsd.rows_mm(x, packed[i])
    return x @ w


def _add_product(residual: Tensor, x: Tensor, w: Tensor, scales: list[Tensor], packed: list[Tensor],
                 i: int) -> None:
    """residual (M, N) fp32 += x @ weight i (as `_product`; `PlainLinear.add_to` / `Int8Linear.add_to`)."""
    if len(scales) > 0:
        residual.add_(int8_mm(x, w, scales[i]))
    elif _on_row_kernel(x, packed, i):
        residual.add_(torch.ops.coolsd.rows_mm(x, packed[i]))
    else:
        residual.addmm_(x, w)


def plain_layers_py(x_in: Tensor, cos: Tensor, sin: Tensor, k: Tensor, v: Tensor, start: int,
                    mask: Tensor | None, weights: list[Tensor], scales: list[Tensor], packed: list[Tensor], hq: int,
                    hk: int, hd: int, eps: float) -> Tensor:
    """`LeanLayers.forward` on `PlainLayer`s: the whole stack, one function (`plain_layers` scripts it).

    x_in (G, n, D); cos, sin (n, hq + hk, hd) RoPE rows (query rows scaled); k, v (layers, G, hk, S, hd) fp32
    caches; mask (n, start + n) bool or additive fp32 (0 / -inf), or None (one row); weights: per layer qkv, o,
    gate_up, down as `PlainLinear.w` (fp32 (K, N)) or `Int8Linear.w` (int8 (N, K), with `scales` one (N,) per
    weight; [] for fp32); packed: [] or per weight its row-kernel copy (`rowkernel.pack`; an empty tensor where
    none), used for calls of `rowkernel.min_rows`..MAX_ROWS rows. Returns (G, n, D) fp32. RMSNorm (weight folded
    into the next product) is one fused LayerNorm over [x, -x], whose mean is 0 and variance mean(x^2)."""
    g, n, d = x_in.shape[0], x_in.shape[1], x_in.shape[2]
    pair = torch.empty(g * n, 2 * d, dtype=torch.float32, device=x_in.device)
    x, minus = pair.narrow(1, 0, d), pair.narrow(1, d, d)  # (M, D) the residual stream, in place; its negative
    x.view(g, n, d).copy_(x_in)  # one copy, also from an expanded (G, n, D) input
    for layer in range(len(weights) // 4):
        i = 4 * layer
        torch.neg(x, out=minus)
        qkv = _product(F.layer_norm(pair, [2 * d], None, None, eps).narrow(1, 0, d), weights[i], scales, packed, i)
        parts = qkv.view(g, n, hq + 2 * hk, hd).split([hq + hk, hk], 2)
        qk = torch.addcmul(parts[0] * cos, parts[0].roll(hd // 2, -1), sin)  # (G, n, hq + hk, hd), q scaled
        att = _attend(qk, parts[1], k[layer], v[layer], start, mask, hq, hk)
        _add_product(x, att.transpose(1, 2).reshape(g * n, hq * hd), weights[i + 1], scales, packed, i + 1)
        torch.neg(x, out=minus)
        gate, up = _product(F.layer_norm(pair, [2 * d], None, None, eps).narrow(1, 0, d), weights[i + 2], scales,
                            packed, i + 2).chunk(2, dim=-1)
        _add_product(x, F.silu(gate).mul_(up), weights[i + 3], scales, packed, i + 3)
    return x.view(g, n, d)


@functools.cache
def plain_layers():
    """`plain_layers_py` compiled once by TorchScript (the same aten calls, bit for bit, without Python between
    them: 0.3 ms of a 1.45 ms emoji step, docs/models.md). `torch.jit.script` is deprecated in torch 2.x but
    present in the pinned 2.13; where it is missing or fails (no source files), the Python function runs."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.script(plain_layers_py)
    except Exception:  # noqa: BLE001 (any scripting failure: the same maths in Python)
        return plain_layers_py


class LeanHead:
    """RMSNorm (with its weight) and the codebook head of a target on the lean path.

    Args: norm_w (D,), head_t (D, V) as the eager target holds them; eps: RMSNorm epsilon; plain_rows: see
    `LeanLinear`; row_kernel: calls of a few rows on `RowsLinear` (ROW_KERNEL_PATHS)."""

    def __init__(self, norm_w: Tensor, head_t: Tensor, eps: float, plain_rows: int = 1,
                 row_kernel: bool = False) -> None:
        norm_w = norm_w.detach().float()
        self.norm_w = torch.cat([norm_w, torch.zeros_like(norm_w)])  # (2 D,): LayerNorm's weight over [h, -h]
        # the kernel where the plain product runs every call (no oneDNN packing of these weights here)
        on_kernel = row_kernel and not packs(head_t.dtype, head_t.device)
        self.head = RowsLinear(head_t) if on_kernel else LeanLinear(head_t, plain_rows=plain_rows)
        self.eps = eps

    def __call__(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """h (G, n, D) last layer output -> (logits (G, n, V) fp32, features (G, n, D) fp32)."""
        g, n, d = h.shape
        h = h.float()
        feat = F.layer_norm(torch.cat([h, -h], dim=-1), (2 * d,), self.norm_w, None, self.eps)[..., :d]  # RMSNorm
        return self.head(feat.reshape(g * n, d)).view(g, n, -1).float(), feat
