"""A lean static-KV-cache forward over a transformers `LlamaForCausalLM`'s own weights.

Stock `LlamaForCausalLM` + `DynamicCache` costs 1.5-2x more per step on a 2-core CPU for small
models (per-layer dispatch overhead). This module reads the SAME modules' weights (fused q/k/v and
gate/up copies), keeps a pre-allocated cache, and supports any attention mask over cache slots
(tree verification) and cheap rollback. `tests/test_models.py` checks it equals HF logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import LlamaConfig


def rope_tables(positions: Tensor, head_dim: int, theta: float) -> tuple[Tensor, Tensor]:
    """positions (n,) -> cos, sin (n, head_dim) in HF's rotate-half layout."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim))
    freqs = positions.float()[:, None] * inv[None]  # (n, hd/2)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (G, h, n, hd) rotated by the (n, hd) tables."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class LayerStack:
    """Decoder layers of a Llama with a static KV cache of `max_slots` slots and G guidance rows.

    Args:
        layers: the `LlamaDecoderLayer` modules (weights are read, not copied for norms).
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
        self.blocks = []
        for layer in layers:
            att, mlp = layer.self_attn, layer.mlp
            self.blocks.append({
                "ln1": layer.input_layernorm.weight, "ln2": layer.post_attention_layernorm.weight,
                "qkv": torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]).detach(),
                "o": att.o_proj.weight.detach(),
                "gate_up": torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).detach(),
                "down": mlp.down_proj.weight.detach(),
            })
        self.k: Tensor | None = None
        self.v: Tensor | None = None
        self.length = 0  # slots in use

    def reset(self, rows: int, device, dtype) -> None:
        shape = (len(self.blocks), rows, self.n_kv, self.max_slots, self.head_dim)
        if self.k is None or self.k.shape != shape or self.k.device != device:
            self.k = torch.zeros(shape, device=device, dtype=dtype)
            self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0

    def _norm(self, x: Tensor, w: Tensor) -> Tensor:
        return F.rms_norm(x, (x.shape[-1],), w, self.eps)

    @torch.no_grad()
    def forward(self, x: Tensor, positions: Tensor, mask: Tensor | None) -> Tensor:
        """x (G, n, D) input embeddings at rope `positions` (n,); mask (n, length + n) bool or None (causal).

        Appends n slots and returns the last layer's output (G, n, D), before any final norm.
        """
        g, n, _ = x.shape
        start, end = self.length, self.length + n
        if end > self.max_slots:
            raise ValueError(f"KV cache full: {end} > {self.max_slots} slots")
        cos, sin = rope_tables(positions, self.head_dim, self.theta)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        if mask is None:
            attn_mask = None if n == 1 else torch.ones(n, end, dtype=torch.bool, device=x.device).tril(start)
        else:
            attn_mask = mask
        hq, hk, hd = self.n_heads, self.n_kv, self.head_dim
        for i, b in enumerate(self.blocks):
            h = self._norm(x, b["ln1"])
            qkv = h @ b["qkv"].T  # (G, n, (hq + 2 hk) hd)
            q, k, v = qkv.split([hq * hd, hk * hd, hk * hd], dim=-1)
            q = rotate(q.view(g, n, hq, hd).transpose(1, 2), cos, sin)  # (G, hq, n, hd)
            k = rotate(k.view(g, n, hk, hd).transpose(1, 2), cos, sin)
            self.k[i, :, :, start:end] = k
            self.v[i, :, :, start:end] = v.view(g, n, hk, hd).transpose(1, 2)
            keys, values = self.k[i, :, :, :end], self.v[i, :, :, :end]
            if hk != hq:
                keys = keys.repeat_interleave(hq // hk, dim=1)
                values = values.repeat_interleave(hq // hk, dim=1)
            att = F.scaled_dot_product_attention(q, keys, values, attn_mask=attn_mask)  # (G, hq, n, hd)
            x = x + att.transpose(1, 2).reshape(g, n, hq * hd) @ b["o"].T
            gate, up = (self._norm(x, b["ln2"]) @ b["gate_up"].T).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ b["down"].T
        self.length = end
        return x

    def crop(self, length: int, keep: Tensor | None = None) -> None:
        """Keep slots [0, length), then move slots `keep` (absolute, ascending) right after them."""
        if keep is not None and len(keep):
            dest = slice(length, length + len(keep))
            self.k[:, :, :, dest] = self.k[:, :, :, keep]
            self.v[:, :, :, dest] = self.v[:, :, :, keep]
            length += len(keep)
        self.length = length
