"""A static-KV-cache forward over a transformers `LlamaForCausalLM`'s own weights.

On a CPU, a small model's step through stock `LlamaForCausalLM` + `DynamicCache` goes mostly to per-layer
dispatch. `LayerStack` reads the SAME modules' weights once into fused
copies (q/k/v in one matrix, gate/up in one, each RMSNorm weight folded into the projection after
it), keeps a pre-allocated cache and RoPE tables, and supports any attention mask over cache slots
(tree verification) and cheap rollback. `tests/models/test_models.py` checks it equals HF logits.

Two ways to run a call (same weights, same cache):
- eager (`forward`): exact shapes, attention over the slots in use; the CPU default;
- static (`use_static`): a call of n rows is padded to the smallest block size N >= n of a fixed
  ladder, written at slots given as a tensor, with attention over the whole cache under an (N, S)
  mask (`forward_static`); padded rows see only slot 0 and no real row sees a padded slot, so they
  change nothing that is kept. Shapes never change, so each (rows, N) is captured once as a CUDA
  graph and replayed (`coolsd.models.graphs`);
- fused (`fused`, a `coolsd.models.rowkernel.StackKernel`): a call of up to 32 rows in one C call on the stored
  weights, fp32 maths and cache, for a CPU; longer calls run `_layers` on fp32 copies (`coolsd.models.fused`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import LlamaConfig

from coolsd.models import rowkernel
from coolsd.models.fused import stack_kernel
from coolsd.models.graphs import FUSED, make_runner
from coolsd.models.static import STATIC_BLOCKS, pad_block, pick_block

ROPE_MARGIN = 64  # RoPE table rows past the cache size: drafts and tree nodes may sit past the grid


def rope_tables(positions: Tensor, head_dim: int, theta: float) -> tuple[Tensor, Tensor]:
    """positions (n,) -> cos, sin (n, head_dim) in HF's rotate-half layout."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim))
    freqs = positions.float()[:, None] * inv[None]  # (n, hd/2)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (G, h, n, hd) rotated by the (n, hd) tables (reference form, HF's rotate_half)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class LayerStack:
    """Decoder layers of a Llama with a static KV cache of `max_slots` slots and G guidance rows.

    Args:
        layers: the `LlamaDecoderLayer` modules (their weights are read once into fused copies).
        config: their `LlamaConfig`.
        max_slots: cache capacity in tokens (prefix included).
    """

    def __init__(self, layers, config: LlamaConfig, max_slots: int) -> None:
        self.config = config
        self.n_heads = config.num_attention_heads
        self.n_kv = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.n_heads
        self.theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta", None) or getattr(
            config, "rope_theta", 10000.0)
        self.eps = config.rms_norm_eps
        self.max_slots = max_slots
        # per layer: (qkv (D, (h + 2 h_kv) hd), o (h hd, D), gate_up (D, 2 I), down (I, D)), stored
        # transposed so every product is `x @ w`; RMSNorm weights folded into the matrix after them
        self.blocks: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []
        with torch.no_grad():
            for layer in layers:
                att, mlp = layer.self_attn, layer.mlp
                ln1, ln2 = layer.input_layernorm.weight, layer.post_attention_layernorm.weight
                qkv = torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]) * ln1
                gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]) * ln2
                self.blocks.append((qkv.T.contiguous(), att.o_proj.weight.T.contiguous(),
                                    gate_up.T.contiguous(), mlp.down_proj.weight.T.contiguous()))
        w = self.blocks[0][0]
        self.cos, self.sin = (t.to(w.dtype) for t in self.rope(w.device))  # (P, hd)
        self.k: Tensor | None = None  # (layers, G, h_kv, S, hd)
        self.v: Tensor | None = None
        self.length = 0  # slots in use
        self._kept: dict[int, tuple[Tensor, Tensor]] = {}  # cache per guidance-row count (graphs stay valid)
        self.blocks_static: tuple[int, ...] = ()  # () = eager path
        self.runner: Callable | None = None  # runs forward_static (a CUDA-graph cache), None = call it directly
        self.fused: rowkernel.StackKernel | None = None  # the fused path's C stack (shared by forks), None = not fused
        self.reference = (self.blocks, self.cos, self.sin)  # what `_layers` reads (fp32 copies on the fused path)

    def rope(self, device) -> tuple[Tensor, Tensor]:
        """fp32 cos, sin (P, hd) for every position a call may use, sin signed for `_rope`."""
        cos, sin = rope_tables(torch.arange(self.max_slots + ROPE_MARGIN, device=device), self.head_dim, self.theta)
        half = self.head_dim // 2
        return cos, torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)

    def use_static(self, blocks: tuple[int, ...] = STATIC_BLOCKS, runner: Callable | None = None) -> None:
        """Switch to the static path with these block sizes (() switches back to eager). `runner(x,
        positions, slots, mask)` replaces the direct call of `forward_static` (CUDA graphs)."""
        self.blocks_static = tuple(sorted(blocks))
        self.runner = runner

    def fork(self) -> LayerStack:
        """Same fused weights and tables (shared, not copied), own empty cache."""
        new = copy.copy(self)
        new.k, new.v, new.length, new.runner, new._kept = None, None, 0, None, {}
        if self.runner is not None:  # its own graphs, captured on its own cache
            set_path(new, "cuda-graphs", self.runner.rows)
        return new

    def reset(self, rows: int, device, dtype) -> None:
        """Empty cache for `rows` guidance rows in `dtype` (fp32 on the fused path, whatever the weights)."""
        dtype = torch.float32 if self.fused is not None else dtype
        shape = (len(self.blocks), rows, self.n_kv, self.max_slots, self.head_dim)
        if self.k is None or self.k.shape != shape or self.k.device != device or self.k.dtype != dtype:
            kept = self._kept.get(rows)
            if kept is not None and kept[0].shape == shape and kept[0].device == device and kept[0].dtype == dtype:
                self.k, self.v = kept  # switching CFG on/off keeps each cache (and the graphs captured on it)
            else:
                self.k = torch.zeros(shape, device=device, dtype=dtype)
                self.v = torch.zeros(shape, device=device, dtype=dtype)
                self._kept[rows] = self.k, self.v
        self.length = 0

    def _norm(self, x: Tensor) -> Tensor:
        """RMSNorm without its weight (folded into the next matrix)."""
        return F.rms_norm(x, (x.shape[-1],), None, self.eps)

    def _rope(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """x (G, n, heads, hd); cos, sin (n, 1, hd): rotate-half as a roll by hd/2 times the signed sin."""
        return torch.addcmul(x * cos, x.roll(self.head_dim // 2, -1), sin)

    def _layers(self, x: Tensor, positions: Tensor, write, keys_upto: int | None, attn_mask: Tensor | None) -> Tensor:
        """The reference maths, shared by every path. x (G, n, D); `write(i, k, v)` stores layer i's new keys/values
        (G, h_kv, n, hd); attention reads slots [0, keys_upto) (None: all). Returns (G, n, D)."""
        g, n, d = x.shape
        hq, hk, hd = self.n_heads, self.n_kv, self.head_dim
        blocks, cos, sin = self.reference
        cos, sin = cos[positions][:, None], sin[positions][:, None]  # (n, 1, hd)
        x = x.reshape(g * n, d).to(cos.dtype)
        for i, (w_qkv, w_o, w_gate_up, w_down) in enumerate(blocks):
            qkv = (self._norm(x) @ w_qkv).view(g, n, hq + 2 * hk, hd)
            qk = self._rope(qkv[:, :, : hq + hk], cos, sin).transpose(1, 2)  # (G, hq + hk, n, hd)
            write(i, qk[:, hq:], qkv[:, :, hq + hk :].transpose(1, 2))
            keys, values = self.k[i, :, :, :keys_upto], self.v[i, :, :, :keys_upto]
            att = F.scaled_dot_product_attention(qk[:, :hq], keys, values, attn_mask=attn_mask,
                                                 enable_gqa=hk != hq)  # (G, hq, n, hd)
            x = torch.addmm(x, att.transpose(1, 2).reshape(g * n, hq * hd), w_o)
            gate, up = (self._norm(x) @ w_gate_up).chunk(2, dim=-1)
            x = torch.addmm(x, F.silu(gate).mul_(up), w_down)
        return x.view(g, n, d)

    def claim(self, n: int) -> tuple[int, int]:
        """The slots [start, end) a call of n new tokens writes (ValueError when the cache has no room for them);
        the caller sets `length = end` once its call has run."""
        start, end = self.length, self.length + n
        if end > self.max_slots:
            raise ValueError(f"KV cache full: {end} > {self.max_slots} slots")
        return start, end

    @torch.no_grad()
    def forward(self, x: Tensor, positions: Tensor, mask: Tensor | None) -> Tensor:
        """Eager path. x (G, n, D) input embeddings at rope `positions` (n,); mask (n, length + n) bool
        or None (causal). Appends n slots and returns the last layer's output (G, n, D), before any final norm.
        """
        n = x.shape[1]
        start, end = self.claim(n)
        if self.fused is not None and self.fused.runs(x.shape[0] * n, self.k, self.v, mask):
            out = self.fused(x, positions, self.k, self.v, start, mask)
            self.length = end
            return out
        block = pick_block(self.blocks_static, n, start, self.max_slots)
        if block is not None:  # static path
            x, positions, slots, full = pad_block(x, positions, mask, start, block, self.max_slots)
            out = (self.runner or self.forward_static)(x, positions, slots, full)
            self.length = end  # padded slots lie past the end: free, overwritten by the next call
            return out[:, :n]
        if mask is None:
            mask = None if n == 1 else torch.ones(n, end, dtype=torch.bool, device=x.device).tril(start)

        def write(i: int, k: Tensor, v: Tensor) -> None:
            self.k[i, :, :, start:end] = k
            self.v[i, :, :, start:end] = v

        out = self._layers(x, positions, write, end, mask)
        self.length = end
        return out

    @torch.no_grad()
    def forward_static(self, x: Tensor, positions: Tensor, slots: Tensor, mask: Tensor) -> Tensor:
        """Static path. x (G, N, D) at rope `positions` (N,), written to cache slots `slots` (N,) int64;
        mask (N, max_slots) bool over the whole cache (every row must see at least one slot).

        Never reads or changes `length` (the caller owns it), never syncs with the host.
        """

        def write(i: int, k: Tensor, v: Tensor) -> None:
            self.k[i].index_copy_(2, slots, k)
            self.v[i].index_copy_(2, slots, v)

        return self._layers(x, positions, write, None, mask)

    def crop(self, length: int, keep: Tensor | None = None) -> None:
        """Keep slots [0, length), then move slots `keep` (absolute, ascending) right after them."""
        if keep is not None and len(keep):
            dest = slice(length, length + len(keep))
            self.k[:, :, :, dest] = self.k[:, :, :, keep]
            self.v[:, :, :, dest] = self.v[:, :, :, keep]
            length += len(keep)
        self.length = length


def set_path(stack: LayerStack, path: str, rows: Iterable[int]) -> None:
    """Put one LayerStack on `path` ("eager", "fused", "cuda-graphs" captured for every `rows`, or "static", the
    graphs' body uncaptured, for tests). "fused" raises RuntimeError where the C stack cannot run these weights."""
    stack.fused, stack.reference = None, (stack.blocks, stack.cos, stack.sin)
    stack.k = stack.v = None
    stack._kept = {}
    if path == FUSED:
        stack.use_static((), None)
        stack.fused = stack_kernel(stack.blocks, stack.n_heads, stack.n_kv, stack.head_dim, stack.theta, stack.eps,
                                   stack.max_slots + ROPE_MARGIN)
        if stack.fused is None:
            raise RuntimeError("the row kernel cannot run this layer stack here (no AVX2 / FMA, no C compiler, or "
                               "widths it does not take)")
        stack.reference = ([tuple(w.float() for w in b) for b in stack.blocks], *stack.rope(stack.cos.device))
        stack.length = 0
        return

    def allocate(r: int) -> None:
        stack.reset(r, stack.cos.device, stack.cos.dtype)

    blocks, runner = make_runner(path, stack.forward_static, lambda: (stack.k, stack.v), stack.config.hidden_size,
                                 rows, allocate)
    stack.use_static(blocks, runner)
    stack.length = 0
