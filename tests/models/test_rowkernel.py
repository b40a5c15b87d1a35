"""The row kernel (coolsd.models.rowkernel): fp32 products of a few rows against exact ones.

Each output within fp32 rounding of the float64 product, for every row count the kernel splits (1-6 rows a
pass, more in passes, eight as two fours), strided rows, odd inner sizes; a row's
result the same bits whatever rows share its call; weights
it cannot take, and machines it cannot run on, fall back (None, unavailable) rather than fail. Speed:
`python -m coolsd.bench.limit`.
"""

from __future__ import annotations

import ctypes
import logging
import math

import pytest
import torch

from coolsd.models import rowkernel

needs_kernel = pytest.mark.skipif(not rowkernel.available(), reason="no AVX2 / FMA CPU or no C compiler here")


@needs_kernel
@pytest.mark.parametrize("n", [48, 112])  # 3 column blocks, 7: one row runs four at a time, two rows two, then the rest
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 6, 7, 8, 13])  # 8: two passes of four
def test_rows_mm_equals_the_exact_product_for_strided_rows(rows, n):
    g = torch.Generator().manual_seed(rows)
    k = 37
    w_t = torch.randn(k, n, generator=g)
    wide = torch.randn(rows, 2 * k, generator=g)
    x = wide.narrow(1, 3, k)  # strided rows, as a norm's output in a pair
    assert x.stride() == (2 * k, 1)
    packed = rowkernel.pack(w_t)
    assert packed.shape == (n // rowkernel.BLOCK, k, rowkernel.BLOCK) and packed.is_contiguous()
    y = rowkernel.rows_mm(x, packed)
    assert y.shape == (rows, n) and y.dtype == torch.float32 and y.is_contiguous()
    exact = x.double() @ w_t.double()
    bound = 1e-6 * (x.abs().double() @ w_t.abs().double()) + 1e-7  # k roundings of fp32 sums, far below 1e-6
    assert ((y.double() - exact).abs() <= bound).all()


@needs_kernel
def test_a_rows_result_does_not_depend_on_the_rows_beside_it():
    """One row alone (four column blocks at a time, then the rest), in a pair or a three (two blocks at a time, then
    the odd one), one of five (one block at a time) or of seven or eight (six and one, four and four): the same bits
    (one FMA chain over k per output)."""
    g = torch.Generator().manual_seed(0)
    w_t, x = torch.randn(64, 16 * 9, generator=g), torch.randn(8, 64, generator=g)
    packed = rowkernel.pack(w_t)
    together = rowkernel.rows_mm(x, packed)
    assert torch.equal(rowkernel.rows_mm(x[:7], packed), together[:7])
    for i in range(8):
        assert torch.equal(rowkernel.rows_mm(x[i : i + 1], packed)[0], together[i]), i
        assert torch.equal(rowkernel.rows_mm(x[i : i + 2], packed), together[i : i + 2]), i
        assert torch.equal(rowkernel.rows_mm(x[i : i + 3], packed), together[i : i + 3]), i
    assert torch.equal(rowkernel.rows_mm(x[:5], packed), together[:5])


@needs_kernel
def test_rows_mm_refuses_a_weight_of_another_inner_size():
    packed = rowkernel.pack(torch.randn(8, 16))
    with pytest.raises(ValueError, match="columns"):
        rowkernel.rows_mm(torch.randn(2, 9), packed)


def test_pack_declines_what_the_kernel_cannot_take(monkeypatch):
    assert rowkernel.pack(torch.randn(8, 20)) is None  # 20 columns: not whole blocks of 16
    monkeypatch.setattr(rowkernel, "available", lambda: False)
    assert rowkernel.pack(torch.randn(8, 32)) is None


def test_unavailable_without_avx2_or_a_compiler(monkeypatch, caplog, tmp_path):
    """No AVX2: off, quietly. No compiler: off, said in the log. Neither builds anything."""
    monkeypatch.setenv("COOLSD_CACHE", str(tmp_path))
    try:
        rowkernel._library.cache_clear()
        monkeypatch.setattr(rowkernel, "cpu_flags", lambda: {"sse2", "fma"})
        assert not rowkernel.available()
        rowkernel._library.cache_clear()
        monkeypatch.setattr(rowkernel, "cpu_flags", lambda: {"avx2", "fma"})
        monkeypatch.setattr(rowkernel.shutil, "which", lambda name: None)
        with caplog.at_level(logging.WARNING, logger="coolsd"):
            assert not rowkernel.available()
        assert "no C compiler" in caplog.text
        assert not any(tmp_path.iterdir())
    finally:
        rowkernel._library.cache_clear()


@needs_kernel
def test_the_kernel_is_built_once_into_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("COOLSD_CACHE", str(tmp_path))
    import shutil as sh

    built = rowkernel._build(sh.which("cc") or sh.which("gcc"))
    assert built.parent == tmp_path and built.is_file() and built.suffix == ".so"
    stamp = built.stat().st_mtime_ns
    assert rowkernel._build("/nonexistent/cc") == built  # there already: not built again
    assert built.stat().st_mtime_ns == stamp and [p.name for p in tmp_path.iterdir()] == [built.name]


@needs_kernel
@pytest.mark.parametrize("n", [64, 112])  # 4 column blocks; 7: one row's and a pair's leftover blocks
@pytest.mark.parametrize("rows", [1, 2, 3, 7, 8])
def test_bf16_weights_give_the_bits_of_their_fp32_copy(rows, n):
    """A bf16 weight widens exactly in registers: the kernel on the bf16 pack gives the fp32 pack's bits, from half
    the bytes; a bf16 pack runs one-row calls, an fp32 pack from two rows (`min_rows`)."""
    g = torch.Generator().manual_seed(rows)
    w_t, x = torch.randn(40, n, generator=g).bfloat16(), torch.randn(rows, 40, generator=g)
    half, full = rowkernel.pack(w_t), rowkernel.pack(w_t.float())
    assert half.dtype == torch.bfloat16 and full.dtype == torch.float32
    assert torch.equal(rowkernel.rows_mm(x, half), rowkernel.rows_mm(x, full))
    assert (rowkernel.min_rows(half), rowkernel.min_rows(full)) == (rowkernel.MIN_ROWS_BF16, rowkernel.MIN_ROWS_F32)
    assert rowkernel.pack(w_t.half()).dtype == torch.float32  # fp16: not a kernel dtype, packed as fp32


@needs_kernel
@needs_kernel
def test_the_kernels_exp_and_silu_are_float_accurate_over_their_range():
    """The stack's own exp (softmax) and SiLU-times, against float64, over the range a softmax and an MLP meet:
    relative error within 4e-7 (two float roundings) down to x = -87.3 (normal floats); below that the
    vector path gives 0 (a softmax weight under 1e-38 of the largest); exp(-inf) = 0, NaN stays NaN, tails past the
    vector width (libm's expf) too."""
    lib = rowkernel._library()
    x = torch.cat([torch.linspace(-100, 88, 10_000), torch.tensor([-math.inf, math.nan, 0.0])])  # 10,003: a tail
    y = torch.empty_like(x)
    lib.coolsd_exp(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), ctypes.c_int(len(x)))
    exact = x.double().exp()
    assert y[-3] == 0 and y[-2].isnan() and y[-1] == 1
    normal = (x >= -87.3) | x.isnan()  # the vector path's floor: exp(-87.3) = 1.2e-38, the smallest normal floats
    normal[-3:] = False
    assert ((y.double()[normal] - exact[normal]).abs() <= 4e-7 * exact[normal]).all()
    assert (y[:-3][~normal[:-3]] == 0).all() and (~normal[:-3]).sum() > 500  # the vector path's underflow
    for x8 in (torch.full((8,), math.nan), torch.full((8,), -math.inf)):  # NaN and -inf on the vector path
        y8 = torch.empty_like(x8)
        lib.coolsd_exp(ctypes.c_void_p(x8.data_ptr()), ctypes.c_void_p(y8.data_ptr()), ctypes.c_int(8))
        assert (y8.isnan() if x8[0].isnan() else y8 == 0).all()
    gate, up = torch.linspace(-30, 30, 1_003), torch.linspace(-2, 3, 1_003)
    act = torch.empty_like(gate)
    lib.coolsd_silu_times(*(ctypes.c_void_p(t.data_ptr()) for t in (gate, up, act)), ctypes.c_int(len(gate)))
    exact = torch.nn.functional.silu(gate.double()) * up.double()
    assert ((act.double() - exact).abs() <= 4e-7 * exact.abs() + 1e-30).all()
