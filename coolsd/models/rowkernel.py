"""The row kernel (`rowkernel.c`): a product of a few rows that reads each weight once, and the fused path's
whole layer stack and Eagle head step in one C call each.

- `rows_mm`: y = x @ w for up to MAX_ROWS rows, in fp32 maths, streaming each 16-column block of the weight once
  for every row (BLAS re-reads the weight for a few rows); fp32 or bf16 weights, bf16 widened exactly in registers
  (the products of the fp32 maths on the same values, from half the bytes).
- `StackKernel`: `coolsd.models.llama.LayerStack._layers`' maths (RMSNorm, the products, RoPE, cache writes,
  attention, SiLU, the residual adds) for up to MAX_ROWS rows in one call of `coolsd_layers*`: a decode step of a
  small model otherwise spends most of its time in the ~25 torch calls a layer between the products.
- `EagleKernel`: an Eagle head's fc, its layer stack and the LM head in one call.
- `ChannelMix`: the look-alike channel's mixture (`coolsd.models.channel`) in one pass, the same sums in the same
  order as torch's `scatter_add_`, without its (rows, V, k) shares.

It is plain C (no torch headers), built on first use with the system's C compiler (`cc -O3 -mavx2 -mfma`) into
`$COOLSD_CACHE` (default ~/.cache/coolsd) and loaded with ctypes. Where the CPU lacks AVX2 / FMA or no
compiler builds it, `available()` is False and the models run the eager path.

Exactness: each output is one FMA chain over k in order, so a row's result is the same whether it is computed
alone or among others, and differs from BLAS's by float rounding only (tests/models/test_rowkernel.py; the stack
against the eager maths: tests/models/test_fused.py).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
from torch import Tensor

from coolsd.util.machine import cpu_flags

log = logging.getLogger("coolsd")

SOURCE = Path(__file__).with_name("rowkernel.c")
FLAGS = ("-O3", "-mavx2", "-mfma", "-shared", "-fPIC")
LIBS = ("-lm",)  # after the source: expf, sqrtf
BLOCK = 16  # columns a packed block holds (two AVX2 registers)
# (choice) calls of MIN_ROWS_*..MAX_ROWS rows run `rows_mm`, the others BLAS: a one-row call on fp32 weights gains
# nothing over BLAS (the same bytes, a dearer call), on bf16 weights it reads half the bytes; up to 32 rows covers
# SJD's window under guidance and the eagle-25 tree, and past it (a long prefix, a 57-node tree) BLAS's blocked
# product is left to do it.
MIN_ROWS_F32, MIN_ROWS_BF16, MAX_ROWS = 2, 1, 32
SUFFIX = {torch.float32: "", torch.bfloat16: "_bf16"}  # rowkernel.c's function per packed dtype
BF16_ORDER = torch.tensor([j // 2 + BLOCK // 2 * (j % 2) for j in range(BLOCK)])  # a bf16 block's columns, packed


def cache_dir() -> Path:
    """Where the built kernel is kept: $COOLSD_CACHE, else ~/.cache/coolsd."""
    return Path(os.environ.get("COOLSD_CACHE") or Path.home() / ".cache" / "coolsd")


def _build(compiler: str) -> Path:
    """Compile rowkernel.c once per source and flags; a finished file is renamed into place (two processes
    may build at once)."""
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS + LIBS).encode()).hexdigest()[:16]
    lib = cache_dir() / f"rowkernel-{digest}.so"
    if not lib.is_file():
        lib.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
            built = Path(tmp) / lib.name
            subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", str(built), *LIBS], check=True, capture_output=True,
                           timeout=120)
            os.replace(built, lib)
    return lib


@functools.cache
def _library() -> ctypes.CDLL | None:
    """The built kernel library, or None where this CPU or machine cannot run it (said once in the log)."""
    if not {"avx2", "fma"} <= cpu_flags():
        return None
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        log.warning("coolsd: no C compiler; the row kernel is off (the fused CPU path cannot run)")
        return None
    try:
        return ctypes.CDLL(str(_build(compiler)))
    except (OSError, subprocess.SubprocessError) as err:
        log.warning("coolsd: the row kernel did not build (%s); the fused CPU path cannot run", err)
        return None


@functools.cache
def _kernel() -> dict | None:
    """The product functions by weight dtype, or None where the library is not here."""
    lib = _library()
    if lib is None:
        return None
    fns = {dtype: getattr(lib, "coolsd_rows_mm" + suffix) for dtype, suffix in SUFFIX.items()}
    for fn in fns.values():
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_int] * 3
    return fns


@functools.cache
def _stack_kernel(dtype: torch.dtype):
    """The layer-stack function for weights of `dtype` (`coolsd_layers*` in rowkernel.c)."""
    fn = getattr(_library(), "coolsd_layers" + SUFFIX[dtype])
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] * 8 + [ctypes.c_int] * 8 + [ctypes.c_long, ctypes.c_int, ctypes.c_float,
                                                                ctypes.c_long]
    return fn


def available() -> bool:
    """Whether the kernel runs here: a CPU with AVX2 and FMA and a C compiler that built it."""
    return _library() is not None


def pack(w_t: Tensor) -> Tensor | None:
    """w_t (K, N) -> (N / BLOCK, K, BLOCK) contiguous, the kernel's layout, in w_t's dtype where the kernel reads it
    (bf16: half the bytes, the same products; each block's columns interleaved, BF16_ORDER) else fp32; None where
    it cannot take this weight (N not a multiple of BLOCK, not on the CPU, or the kernel unavailable)."""
    k, n = w_t.shape
    if n % BLOCK or w_t.device.type != "cpu" or not available():
        return None
    dtype = w_t.dtype if w_t.dtype in SUFFIX else torch.float32
    blocks = w_t.detach().to(dtype).reshape(k, n // BLOCK, BLOCK).transpose(0, 1)
    if dtype == torch.bfloat16:  # interleaved: columns 0, 8, 1, 9, ... (rowkernel.c's `load_bf16` widens them so)
        blocks = blocks[:, :, BF16_ORDER]
    return blocks.contiguous()


def min_rows(packed: Tensor) -> int:
    """The fewest rows a call on this packed weight runs the kernel for (MIN_ROWS_BF16 or MIN_ROWS_F32)."""
    return MIN_ROWS_BF16 if packed.dtype == torch.bfloat16 else MIN_ROWS_F32


def takes(packed: Tensor, rows: int) -> bool:
    """Whether a call of `rows` rows on this packed weight runs the kernel: min_rows..MAX_ROWS."""
    return min_rows(packed) <= rows <= MAX_ROWS


def rows_mm(x: Tensor, packed: Tensor) -> Tensor:
    """x (M, K) fp32 (rows may be strided) @ the packed weight (N / BLOCK, K, BLOCK) fp32 or bf16 (`pack`) ->
    (M, N) fp32 contiguous."""
    if x.dtype != torch.float32 or x.stride(-1) != 1:
        x = x.float().contiguous()
    m, k = x.shape
    blocks, k_w, block = packed.shape
    if k != k_w or block != BLOCK or packed.dtype not in SUFFIX:
        raise ValueError(f"rows_mm: x has {k} columns, the packed weight {k_w} rows of blocks of {block} "
                         f"({packed.dtype})")
    y = torch.empty(m, blocks * BLOCK, dtype=torch.float32)
    if m:
        _kernel()[packed.dtype](x.data_ptr(), x.stride(0), packed.data_ptr(), y.data_ptr(), m, k, blocks * BLOCK)
    return y


class StackKernel:
    """A layer stack's forward for a few rows in one C call (`coolsd_layers*`): the maths of
    `coolsd.models.llama.LayerStack._layers` in fp32 on its packed weights (`pack`), reading the stored bf16 or fp32.

    Args: packed: 4 per layer (qkv, o, gate_up, down), all packed (`pack`) in one dtype; n_heads, n_kv, head_dim:
    hq, hk, hd; eps: RMSNorm epsilon; cos, sin: (P, hq + hk, hd) fp32 RoPE tables
    (`coolsd.models.fused.rope_tables`: queries scaled, sin signed). Holds weights and tables only, so forks of a
    stack share one.
    stack share one.
    """

    def __init__(self, packed: list[Tensor], n_heads: int, n_kv: int, head_dim: int, eps: float, cos: Tensor,
                 sin: Tensor) -> None:
        self.packed, self.cos, self.sin = packed, cos.contiguous(), sin.contiguous()
        self.pointers = (ctypes.c_void_p * len(packed))(*(p.data_ptr() for p in packed))
        self.fn = _stack_kernel(packed[0].dtype)
        self.dims = (len(packed) // 4, n_heads, n_kv, head_dim, packed[2].shape[0] * BLOCK // 2)  # L, hq, hk, hd, I
        self.eps = eps

    @classmethod
    def for_stack(cls, packed: list[Tensor | None], n_heads: int, n_kv: int, head_dim: int, eps: float, cos: Tensor,
                  sin: Tensor) -> StackKernel | None:
        """One where every weight is packed in one dtype and the heads fit the kernel (hd <= 512, hq a multiple of
        hk); else None (the stack runs its torch calls). Arguments as the constructor's."""
        if not packed or any(p is None for p in packed) or len({p.dtype for p in packed}) != 1:
            return None
        if head_dim > 512 or n_heads % n_kv:
            return None
        return cls(packed, n_heads, n_kv, head_dim, eps, cos, sin)

    def runs(self, rows: int, k: Tensor, v: Tensor, mask: Tensor | None) -> bool:
        """Whether a call of `rows` rows (G n) on these caches and mask runs here: up to MAX_ROWS rows, contiguous
        fp32 caches, a bool mask or none."""
        fp32 = k.dtype == v.dtype == torch.float32 and k.is_contiguous() and v.is_contiguous()
        return rows <= MAX_ROWS and fp32 and (mask is None or mask.dtype == torch.bool)

    def _check(self, g: int, n: int, k: Tensor, v: Tensor, start: int, mask: Tensor | None) -> None:
        """The shapes the C function trusts: caches (L, G, hk, S, hd) with room for slots [start, start + n), a mask
        (n, start + n); ValueError otherwise (the torch calls would fail on them too)."""
        layers, _, hk, hd, _ = self.dims
        expected = (layers, g, hk, hd)
        if k.shape != v.shape or k.dim() != 5 or (k.shape[0], k.shape[1], k.shape[2], k.shape[4]) != expected:
            raise ValueError(f"coolsd_layers: caches of shape {tuple(k.shape)} and {tuple(v.shape)}, not "
                             f"({layers}, {g}, {hk}, S, {hd})")
        if start < 0 or start + n > k.shape[3]:
            raise ValueError(f"coolsd_layers: slots [{start}, {start + n}) outside a cache of {k.shape[3]}")
        if not self.runs(g * n, k, v, mask):
            raise ValueError("coolsd_layers: more rows than MAX_ROWS, caches not fp32 and contiguous, or a mask "
                             "not bool")
        if mask is not None and tuple(mask.shape) != (n, start + n):
            raise ValueError(f"coolsd_layers: a mask of shape {tuple(mask.shape)}, not ({n}, {start + n})")

    def __call__(self, x_in: Tensor, positions: Tensor, k: Tensor, v: Tensor, start: int,
                 mask: Tensor | None) -> Tensor:
        """x_in (G, n, D) at table rows `positions` (n,) int64; k, v (L, G, hk, S, hd) fp32 contiguous caches,
        slots [start, start + n) written; mask (n, start + n) bool (True: may attend) or None (causal). Returns
        the last layer's output (G, n, D) fp32 (`runs` says which calls it takes; bad shapes or positions past the
        RoPE tables raise ValueError)."""
        g, n, d = x_in.shape
        x = x_in.to(torch.float32, copy=True).contiguous()
        args, _kept = self.arguments(g, n, d, positions, k, v, start, mask)
        self.raise_for(self.fn(x.data_ptr(), *args), g * n)
        return x

    def arguments(self, g: int, n: int, d: int, positions: Tensor, k: Tensor, v: Tensor, start: int,
                  mask: Tensor | None) -> tuple[tuple, tuple]:
        """(what `coolsd_layers*` takes after x for a call of (G, n, D) rows, checked by `_check`; the converted
        positions and mask it points to, which the caller holds until the call returns: nothing is kept here, so
        threads may share one kernel)."""
        self._check(g, n, k, v, start, mask)
        if positions.numel() != n:
            raise ValueError(f"coolsd_layers: {positions.numel()} positions for {n} tokens")
        positions = positions.to(torch.int64).contiguous()
        mask = None if mask is None else mask.contiguous()
        layers, hq, hk, hd, inter = self.dims
        return (self.pointers, self.cos.data_ptr(), self.sin.data_ptr(), positions.data_ptr(), k.data_ptr(),
                v.data_ptr(), None if mask is None else mask.data_ptr(), g, n, d, layers, hq, hk, hd, inter,
                k.shape[3], start, self.eps, self.cos.shape[0]), (positions, mask)

    def raise_for(self, status: int, rows: int) -> None:
        """A C call's status as an error: 2 MemoryError, 3 and 4 ValueError (0: nothing)."""
        if status == 2:
            raise MemoryError(f"coolsd_layers: no memory for the scratch of {rows} rows")
        if status == 4:
            raise ValueError("coolsd_eagle: a token id outside the embedding's rows")
        if status:
            raise ValueError(f"coolsd_layers: status {status} (3: a position past the {self.cos.shape[0]} RoPE rows)")


@functools.cache
def _eagle_kernel(dtype: torch.dtype):
    """An Eagle head's step for weights of `dtype` (`coolsd_eagle*` in rowkernel.c)."""
    fn = getattr(_library(), "coolsd_eagle" + SUFFIX[dtype])
    fn.restype = ctypes.c_int
    fn.argtypes = ([ctypes.c_void_p, ctypes.c_long] + [ctypes.c_void_p] * 5 + [ctypes.c_int, ctypes.c_float]
                   + [ctypes.c_void_p] * 9 + [ctypes.c_int] * 8 + [ctypes.c_long, ctypes.c_int, ctypes.c_float,
                                                                    ctypes.c_long])
    return fn


class EagleKernel:
    """An Eagle head's whole step in one C call (`coolsd_eagle*`): fc([embedding; feature]) + bias, its layer stack
    (a `StackKernel`), the LM head, / temperature: `coolsd.models.eagle.EagleDrafter.forward`'s maths in fp32.

    Args: stack: the head's `StackKernel`; embed: (E, D) token embedding (copied to fp32 once); fc, head: `pack`ed
    (2 D -> D) and (D -> V) in the stack's dtype; fc_bias: (D,)."""

    def __init__(self, stack: StackKernel, embed: Tensor, fc: Tensor, fc_bias: Tensor, head: Tensor) -> None:
        self.stack, self.fc, self.head = stack, fc, head
        self.embed = embed.detach().float().contiguous()
        self.fc_bias = fc_bias.detach().float().contiguous()
        self.vocab = head.shape[0] * BLOCK
        self.fn = _eagle_kernel(fc.dtype)

    @classmethod
    def for_head(cls, stack: StackKernel | None, embed: Tensor, fc: Tensor | None, fc_bias: Tensor | None,
                 head: Tensor | None) -> EagleKernel | None:
        """One where the stack runs in C and fc (2 D -> D, with a bias of D) and head (D -> V) are packed in its
        dtype, D the embedding's width; else None."""
        if stack is None or fc is None or head is None or fc_bias is None:
            return None
        if not fc.dtype == head.dtype == stack.packed[0].dtype:
            return None
        d = embed.shape[1]
        if (fc.shape[1], fc.shape[0] * BLOCK, head.shape[1], fc_bias.numel()) != (2 * d, d, d, d):
            return None
        return cls(stack, embed, fc, fc_bias, head)

    def __call__(self, ids: Tensor, hidden: Tensor, positions: Tensor, k: Tensor, v: Tensor, start: int,
                 mask: Tensor | None, temperature: float) -> tuple[Tensor, Tensor]:
        """ids (n,) int64 tokens (shared by the G rows), hidden (G, n, D) the feature before each, at RoPE table rows
        `positions` (n,); caches, slots and mask as `StackKernel`'s call (whose `runs` says which calls it takes).
        Returns (features (G, n, D), logits (G, n, V)) fp32; bad shapes, ids or positions raise ValueError."""
        g, n, d = hidden.shape
        if ids.shape != (n,) or d != self.embed.shape[1]:
            raise ValueError(f"coolsd_eagle: {tuple(ids.shape)} ids and features {tuple(hidden.shape)}, not ({n},) "
                             f"and (G, n, {self.embed.shape[1]})")
        ids = ids.to(torch.int64).contiguous()
        hidden = hidden.to(torch.float32).contiguous()
        x = torch.empty(g, n, d)
        logits = torch.empty(g, n, self.vocab)
        args, _kept = self.stack.arguments(g, n, d, positions, k, v, start, mask)
        status = self.fn(self.embed.data_ptr(), self.embed.shape[0], ids.data_ptr(), hidden.data_ptr(),
                         self.fc.data_ptr(), self.fc_bias.data_ptr(), self.head.data_ptr(), self.vocab, temperature,
                         x.data_ptr(), logits.data_ptr(), *args)
        self.stack.raise_for(status, g * n)
        return x, logits


@functools.cache
def _channel_kernel():
    """`coolsd_channel_mix` in rowkernel.c."""
    fn = _library().coolsd_channel_mix
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int] * 2
    return fn


class ChannelMix:
    """The look-alike channel's mixture (`coolsd.models.channel`) in one C call: probs (..., V) fp32 -> (..., V),
    out[x] = sum over (c, j) with ids[c, j] = x of probs[c] weights[c, j]: the same bits as torch's
    `zeros.scatter_add_(-1, ids.flatten(), (probs[..., None] * weights).flatten(-2))`, which adds x's shares in
    ascending c, in one pass without the (..., V k) shares. weights (V, k) fp32, ids (V, k) int64 in [0, V) as
    `channel.kernel_rows` gives them, regrouped here once by destination x (in the flattened order; a zero weight
    dropped: for finite probabilities its share, +0, leaves a sum of non-negative shares as it is). CPU only."""

    def __init__(self, weights: Tensor, ids: Tensor) -> None:
        v, k = weights.shape
        if ids.shape != (v, k) or not bool(((ids >= 0) & (ids < v)).all()):
            raise ValueError(f"ChannelMix: ids {tuple(ids.shape)} not ({v}, {k}) codes in [0, {v})")
        w, x = weights.detach().float().cpu().flatten(), ids.detach().to(torch.int64).cpu().flatten()
        c = torch.arange(v).repeat_interleave(k)  # the source of each flattened share
        keep = w != 0
        w, x, c = w[keep], x[keep], c[keep]
        order = torch.argsort(x, stable=True)  # by destination, each in the flattened order scatter_add_ adds in
        self.src, self.w = c[order].contiguous(), w[order].contiguous()
        self.start = torch.cat([torch.zeros(1, dtype=torch.int64), torch.bincount(x, minlength=v).cumsum(0)])
        self.vocab = v
        self.fn = _channel_kernel()

    @classmethod
    def for_rows(cls, weights: Tensor, ids: Tensor) -> ChannelMix | None:
        """One where the kernel runs here and the rows are on the CPU; else None (torch's scatter does it)."""
        return cls(weights, ids) if available() and weights.device.type == "cpu" else None

    def __call__(self, probs: Tensor) -> Tensor:
        if probs.device.type != "cpu":
            raise ValueError(f"ChannelMix: probabilities on {probs.device}; the kernel reads CPU memory")
        if probs.shape[-1] != self.vocab:
            raise ValueError(f"ChannelMix: probabilities over {probs.shape[-1]} codes, the channel has {self.vocab}")
        probs = probs.to(torch.float32).contiguous()
        out = torch.empty_like(probs)
        self.fn(probs.data_ptr(), self.start.data_ptr(), self.src.data_ptr(), self.w.data_ptr(), out.data_ptr(),
                probs.numel() // self.vocab, self.vocab)
        return out
