"""The fused CPU path (coolsd.models.fused, the row kernel's C stack) against the eager reference, and the choice
of path.

fp32: the same logits up to float rounding for step, verify, tree masks, crop and calls past the C stack's rows,
and the same tokens for a seed for every rule, chain and tree, vanilla AR included. bf16 weights: the fused logits
are the fp32 maths of those weight values, whatever the CPU's own bf16 units (the premise of this test is that
nothing on the path runs a bf16 product: checked on every CPU). No timing here: speed lives in
`python -m coolsd.bench.limit` and the benchmark.
"""

from __future__ import annotations

import copy
import logging
import math

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

from coolsd.compare.race import fork_models
from coolsd.decoding.drafting import chain_or_tree
from coolsd.decoding.engine import DecodeConfig, run
from coolsd.decoding.rules import RULES
from coolsd.models import rowkernel
from coolsd.models.eagle import EagleDrafter
from coolsd.models.embedded import LlamaClassTarget
from coolsd.models.fused import RowsLinear
from coolsd.models.graphs import ENV_VAR, FUSED, PATHS, choose_path, prepare
from coolsd.models.llama import LayerStack, set_path

needs_kernel = pytest.mark.skipif(not rowkernel.available(), reason="no AVX2 / FMA CPU or no C compiler here")


def _pair(b, path):
    target, drafter = fork_models(b.target, b.drafter)
    prepare([target, drafter], path=path)
    return target, drafter


def _calls(old: int, ids: torch.Tensor):
    """(ids, positions, mask) of a step, a causal verify of 3, a step, then a tree block after `old` slots."""
    tree = torch.ones(4, old + 5 + 4, dtype=torch.bool)
    tree[:, old + 5 :] = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    tree_pos = torch.tensor([old + 5, old + 6, old + 6, old + 7])
    return [(ids[:1], torch.arange(old, old + 1), None), (ids[1:4], torch.arange(old + 1, old + 4), None),
            (ids[4:5], torch.arange(old + 4, old + 5), None), (ids[5:9], tree_pos, tree)]


def _bf16_models(b):
    """(target, drafter) of the tiny bundle's weights in bf16."""
    model = copy.deepcopy(b.target.model).to(torch.bfloat16)
    head = copy.deepcopy(b.drafter.head).to(torch.bfloat16)
    cb = model.config.codebook_size
    return LlamaClassTarget(model), EagleDrafter(head, model.model.embed_tokens.weight, model.lm_head.weight[:cb],
                                                 b.num_tokens)


def _fp32_copy(models):
    """(target, drafter) in fp32 holding the same weight values as `models` (bf16 values widened exactly)."""
    target, drafter = models
    model, head = copy.deepcopy(target.model).float(), copy.deepcopy(drafter.head).float()
    cb = model.config.codebook_size
    return LlamaClassTarget(model), EagleDrafter(head, model.model.embed_tokens.weight, model.lm_head.weight[:cb],
                                                 drafter.stack.max_slots - 64)


@needs_kernel
@pytest.mark.parametrize("guidance", [True, False])
def test_fused_equals_eager_in_fp32_for_step_verify_tree_crop_and_long_calls(tiny, guidance):
    (eager, eager_d), (fused, fused_d) = _pair(tiny, "eager"), _pair(tiny, FUSED)
    assert fused.stack.fused is not None and eager.stack.fused is None and fused_d.fused is not None
    a, b = eager.start(3, guidance), fused.start(3, guidance)
    torch.testing.assert_close(b.logits, a.logits, atol=1e-5, rtol=1e-5)
    for d in (eager_d, fused_d):
        d.start(3, guidance)
    ids = torch.tensor([5, 9, 1, 30, 2, 7, 7, 4, 11])
    for x, pos, mask in _calls(0, ids):
        a, b = eager.forward(x, pos, mask), fused.forward(x, pos, mask)
        assert b.logits.shape == a.logits.shape == (2 if guidance else 1, len(x), eager.vocab_size)
        assert b.logits.dtype == torch.float32
        torch.testing.assert_close(b.logits, a.logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(b.hidden, a.hidden, atol=1e-5, rtol=1e-5)
        da, db = eager_d.forward(x, a.hidden, pos, mask), fused_d.forward(x, a.hidden, pos, mask)
        torch.testing.assert_close(db.logits, da.logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(db.hidden, da.hidden, atol=1e-5, rtol=1e-5)
    keep = torch.tensor([6, 8])  # the tree root's first branch (slots 5, 6, 8); the next calls read moved slots
    for m in (eager, fused, eager_d, fused_d):
        m.crop(6, keep)
    assert fused.length == eager.length == 8 and fused_d.length == eager_d.length == 8
    n = eager.stack.length
    torch.testing.assert_close(fused.stack.k[:, :, :, :n], eager.stack.k[:, :, :, :n], atol=1e-5, rtol=1e-5)
    many = torch.arange(rowkernel.MAX_ROWS + 1) % 7  # past the C stack's rows: the reference maths on fp32 copies
    pos = torch.arange(8, 8 + len(many))
    a, b = eager.forward(many, pos), fused.forward(many, pos)
    torch.testing.assert_close(b.logits, a.logits, atol=1e-5, rtol=1e-5)
    da, db = eager_d.forward(many, a.hidden, pos), fused_d.forward(many, a.hidden, pos)
    torch.testing.assert_close(db.logits, da.logits, atol=1e-5, rtol=1e-5)


@needs_kernel
@pytest.mark.parametrize("tree", [None, "binary-2", "eagle-25"])
def test_same_tokens_on_fused_and_eager_for_every_rule(tiny, tree, build_rule):
    """Vanilla AR (rule None) included: it runs on the same path as the speculative decoders."""
    config = DecodeConfig(chain_or_tree(3, tree))
    lanes = {path: _pair(tiny, path) for path in ("eager", FUSED)}
    for name in [*RULES, None]:
        rule = build_rule(name, codebook=tiny.tokenizer.codebook) if name else None
        out = {path: run(t, d, rule, cond=2, num_tokens=tiny.num_tokens, sampling=tiny.default_sampling,
                         config=config, seed=13) for path, (t, d) in lanes.items()}
        assert out[FUSED].tokens.tolist() == out["eager"].tokens.tolist(), (name, tree)
        assert out[FUSED].target_forwards == out["eager"].target_forwards


@needs_kernel
@pytest.mark.parametrize("guidance", [True, False])
def test_fused_on_bf16_weights_computes_their_fp32_maths(tiny, guidance):
    """bf16 weights on the fused path: every product reads the stored bf16 (the C stack's, the head's, fc's), and
    the logits of start, steps, verifies, a tree block and a call past the C stack's rows are the fp32 maths of the
    same weight values (an fp32 eager copy) up to float rounding. The premise: no bf16 product runs on this path,
    which must hold on a CPU with bf16 units too, where torch's own bf16 products run bf16 instructions."""
    fused = _bf16_models(tiny)
    exact = _fp32_copy(fused)
    prepare(fused, path=FUSED)
    prepare(exact, path="eager")
    assert all(p.dtype == torch.bfloat16 for p in fused[0].stack.fused.packed)
    assert fused[0].fused_head.head.packed.dtype == torch.bfloat16 and fused[1].fused.fc.dtype == torch.bfloat16
    ids = torch.tensor([5, 9, 1, 30, 2, 7, 7, 4, 11])
    many = torch.arange(rowkernel.MAX_ROWS + 1) % 7
    logits = {}
    for key, (t, d) in (("fused", fused), ("exact", exact)):
        out = [t.start(1, guidance)]
        d.start(1, guidance)
        for x, pos, mask in [*_calls(0, ids), (many, torch.arange(9, 9 + len(many)), None)]:
            out.append(t.forward(x, pos, mask))
            out.append(d.forward(x, out[-1].hidden, pos, mask))
        logits[key] = [o.logits for o in out]
    for a, b in zip(logits["fused"], logits["exact"]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def _stack(hq: int, hk: int, hd: int, dtype: torch.dtype, seed: int = 0, path: str = FUSED) -> LayerStack:
    """A 2-layer LayerStack of random Llama layers (D 32, I 24), hq query and hk key-value heads of hd, on `path`."""
    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=32, intermediate_size=24, num_attention_heads=hq, num_key_value_heads=hk,
                         head_dim=hd, num_hidden_layers=2)
    layers = [LlamaDecoderLayer(config, i).to(dtype) for i in range(2)]
    for layer in layers:  # RMSNorm weights away from 1, so folding them in is tested
        for norm in (layer.input_layernorm, layer.post_attention_layernorm):
            norm.weight.data.uniform_(0.5, 1.5)
    stack = LayerStack(layers, config, 48)
    set_path(stack, path, (1,))
    return stack


@needs_kernel
@pytest.mark.parametrize("g", [1, 2])
@pytest.mark.parametrize(("heads", "dtype"), [((4, 4, 8), torch.float32), ((4, 1, 8), torch.float32),
                                              ((4, 2, 6), torch.float32), ((2, 1, 64), torch.float32),
                                              ((2, 1, 80), torch.float32), ((4, 1, 8), torch.bfloat16)])
def test_the_c_stack_equals_the_reference_stack_within_float_rounding(g, heads, dtype):
    """The C stack against the eager reference maths on the same weights (bf16 read as stored against an fp32 copy
    of the same values) over a prefix, steps, a verify (causal default) and a tree block, CFG's two rows and one;
    grouped queries (4 query heads on 1 and on 2 key-value heads), a head size of 6 (the products' tails) and 80
    (attention's output in memory): the output within 2e-6 of its largest value, the caches within 1e-5."""
    fused, ref = _stack(*heads, dtype), _stack(*heads, dtype, path="eager")
    ref.blocks = [tuple(w.float() for w in b) for b in ref.blocks]  # the same values, fp32 maths
    ref.cos, ref.sin = fused.reference[1], fused.reference[2]
    set_path(ref, "eager", (1,))
    for s in (fused, ref):
        s.reset(g, torch.device("cpu"), torch.float32)
    gen = torch.Generator().manual_seed(5)
    start = 0
    for n, tree in ((5, False), (1, False), (3, False), (4, True), (1, False)):
        x, pos = torch.randn(g, n, 32, generator=gen), torch.arange(start, start + n)
        mask = None
        if tree:
            mask = torch.ones(n, start + n, dtype=torch.bool).tril(start)
            mask[:, start:] = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
        assert fused.fused.runs(g * n, fused.k, fused.v, mask)
        out, want = fused.forward(x, pos, mask), ref.forward(x, pos, mask)
        err = float((out - want).abs().max() / want.abs().max())
        assert err <= 2e-6, err  # float rounding (its exp and SiLU over a wide range: test_rowkernel.py)
        torch.testing.assert_close(fused.k, ref.k, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fused.v, ref.v, rtol=1e-5, atol=1e-5)
        start += n


@needs_kernel
@pytest.mark.parametrize("hd", [8, 64])
def test_the_c_stacks_causal_default_is_its_causal_mask_and_a_closed_key_is_never_read(hd):
    """No mask and the causal mask give the same bits; a key a tree mask closes may hold NaN (a stale slot) and the
    output keeps every bit (its score is set to -inf before the softmax, its value skipped)."""
    kernel = _stack(2, 1, hd, torch.float32, seed=hd).fused
    gen = torch.Generator().manual_seed(2)
    k = torch.randn(2, 1, 1, 16, hd, generator=gen)
    v = torch.randn(2, 1, 1, 16, hd, generator=gen)
    start, n = 9, 3
    x, pos = torch.randn(1, n, 32, generator=gen), torch.arange(start, start + n)
    causal = torch.ones(n, start + n, dtype=torch.bool).tril(start)
    plain = kernel(x, pos, k.clone(), v.clone(), start, None)
    assert torch.equal(kernel(x, pos, k.clone(), v.clone(), start, causal), plain)
    closed = causal.clone()
    closed[:, 4] = False
    want = kernel(x, pos, k.clone(), v.clone(), start, closed)
    k_nan, v_nan = k.clone(), v.clone()
    k_nan[:, :, :, 4], v_nan[:, :, :, 4] = math.nan, math.nan
    got = kernel(x, pos, k_nan, v_nan, start, closed)
    assert torch.equal(got, want) and not torch.equal(got, plain)


@needs_kernel
def test_the_c_stack_refuses_what_it_cannot_index():
    """More than MAX_ROWS rows, a cache it cannot index or an additive mask go to the reference maths (`runs`);
    caches, slots, masks or positions that do not fit raise ValueError, as the torch calls would fail on them."""
    kernel = _stack(4, 1, 8, torch.float32).fused
    k = torch.zeros(2, 1, 1, 16, 8)
    v, x = k.clone(), torch.randn(1, 2, 32)
    assert not kernel.runs(rowkernel.MAX_ROWS + 1, k, v, None)
    assert not kernel.runs(2, k.transpose(3, 4), v, None)
    assert not kernel.runs(2, k, v, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="caches"):
        kernel(x, torch.arange(2), k[:, :, :, :, :4].contiguous(), v[:, :, :, :, :4].contiguous(), 0, None)
    with pytest.raises(ValueError, match="slots"):
        kernel(x, torch.arange(2), k, v, 15, None)
    with pytest.raises(ValueError, match="mask"):
        kernel(x, torch.arange(2), k, v, 0, torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="RoPE"):
        kernel(x, torch.tensor([0, 48 + 64]), k, v, 0, None)
    with pytest.raises(ValueError, match="positions"):
        kernel(x, torch.arange(1), k, v, 0, None)
    with pytest.raises(ValueError, match="contiguous"):  # what `runs` declines, called anyway
        kernel(x, torch.arange(2), k.double(), v.double(), 0, None)


@needs_kernel
def test_the_fused_path_runs_both_stacks_in_c_up_to_max_rows(tiny, monkeypatch):
    """The target's steps, verifies and tree blocks go through the C stack and the drafter's whole step through the
    C head step; calls of more than MAX_ROWS rows do not."""
    target, drafter = _pair(tiny, FUSED)
    assert drafter.fused.stack is drafter.stack.fused
    rows = []
    real, real_head = rowkernel.StackKernel.__call__, rowkernel.EagleKernel.__call__
    monkeypatch.setattr(rowkernel.StackKernel, "__call__",
                        lambda self, x, *a: rows.append(x.shape[0] * x.shape[1]) or real(self, x, *a))
    monkeypatch.setattr(rowkernel.EagleKernel, "__call__", lambda self, i, h, *a: rows.append(
        ("head", h.shape[0] * h.shape[1])) or real_head(self, i, h, *a))
    target.start(2, True)
    drafter.start(2, True)
    for x, pos, mask in _calls(0, torch.tensor([5, 9, 1, 30, 2, 7, 7, 4, 11])):
        drafter.forward(x, target.forward(x, pos, mask).hidden, pos, mask)
    assert rows == [2, 2, ("head", 2), 6, ("head", 6), 2, ("head", 2), 8, ("head", 8)]
    many = torch.arange(rowkernel.MAX_ROWS // 2 + 1) % 7
    out = target.forward(many, torch.arange(target.length, target.length + len(many)))
    drafter.forward(many, out.hidden, torch.arange(drafter.length, drafter.length + len(many)))
    assert rows[-1] == ("head", 8)  # 2 x 9 = 18 rows ran the reference maths, target and drafter


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_c_head_step_is_the_python_head_step(tiny, dtype):
    """The Eagle head's step in one C call (fc, the layer, the LM head, / temperature) against the same drafter's
    fused step without it (the C stack between `RowsLinear` products), at a temperature, with CFG's two rows."""
    target, drafter = _bf16_models(tiny) if dtype == torch.bfloat16 else fork_models(tiny.target, tiny.drafter)
    drafter.fc_b = torch.randn(drafter.fc_b.shape, generator=torch.Generator().manual_seed(3)).to(dtype)  # not 0
    prepare([target, drafter], path=FUSED)
    python = drafter.fork()
    python.fused = None
    for d in (drafter, python):
        d.temperature = 0.6
        d.start(1, True)
    target.start(1, True)
    for x, pos, mask in _calls(0, torch.tensor([5, 9, 1, 30, 2, 7, 7, 4, 11])):
        hidden = target.forward(x, pos, mask).hidden
        out, ref = drafter.forward(x, hidden, pos, mask), python.forward(x, hidden, pos, mask)
        assert out.logits.shape == ref.logits.shape and drafter.length == python.length
        torch.testing.assert_close(out.logits, ref.logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out.hidden, ref.hidden, atol=1e-5, rtol=1e-5)


@needs_kernel
def test_the_c_head_step_refuses_ids_it_cannot_read(tiny):
    """An id past the embedding's rows, ids that do not match the features or a full cache raise ValueError and
    leave the cache's length as it was."""
    target, drafter = _pair(tiny, FUSED)
    drafter.start(1, False)
    hidden = torch.randn(1, 2, drafter.embed.shape[1])
    with pytest.raises(ValueError, match="embedding"):
        drafter.forward(torch.tensor([0, drafter.embed.shape[0]]), hidden, torch.arange(2))
    with pytest.raises(ValueError, match="ids"):
        drafter.fused(torch.tensor([0, 1, 2]), hidden, torch.arange(2), drafter.stack.k, drafter.stack.v, 0, None, 1.0)
    drafter.stack.length = drafter.stack.max_slots - 1
    with pytest.raises(ValueError, match="KV cache full"):
        drafter.forward(torch.tensor([0, 1]), hidden, torch.arange(2))
    assert drafter.stack.length == drafter.stack.max_slots - 1


def test_rows_linear_is_the_fp32_product_for_one_row_and_many():
    """`RowsLinear` (the row kernel where it takes the rows, BLAS on an fp32 copy elsewhere) computes x @ w + b in
    fp32 for 1, 3 and MAX_ROWS + 1 rows, on fp32 and bf16 weights."""
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        w, b = torch.randn(24, 32, generator=gen).to(dtype), torch.randn(32, generator=gen)
        lin = RowsLinear(w, b)
        for rows in (1, 3, rowkernel.MAX_ROWS + 1):
            x = torch.randn(rows, 24, generator=gen)
            torch.testing.assert_close(lin(x), x @ w.float() + b, atol=1e-5, rtol=1e-5)


def test_three_paths_are_offered_and_auto_picks_by_what_the_cpu_can_do(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    cpu = torch.device("cpu")
    assert PATHS == ("eager", FUSED, "cuda-graphs")
    monkeypatch.setattr(rowkernel, "available", lambda: True)
    assert choose_path(cpu) == FUSED and choose_path(torch.device("cuda")) == "cuda-graphs"
    assert choose_path(cpu, "eager") == "eager"
    monkeypatch.setenv(ENV_VAR, "eager")
    assert choose_path(cpu) == "eager" and choose_path(cpu, FUSED) == FUSED  # the argument wins
    monkeypatch.setattr(rowkernel, "available", lambda: False)
    monkeypatch.setenv(ENV_VAR, "auto")
    assert choose_path(cpu) == "eager"
    for bad in ("lean-fused", "static"):
        monkeypatch.setenv(ENV_VAR, bad)
        with pytest.raises(ValueError, match="must be auto or one of"):
            choose_path(cpu)
    with pytest.raises(ValueError, match="CUDA"):
        choose_path(cpu, "cuda-graphs")


def test_fused_falls_back_to_eager_where_the_kernel_cannot_run_and_says_so(tiny, monkeypatch, caplog):
    monkeypatch.setattr(rowkernel, "available", lambda: False)
    target, drafter = fork_models(tiny.target, tiny.drafter)
    with caplog.at_level(logging.WARNING, logger="coolsd"):
        assert prepare([target, drafter], path=FUSED) == "eager"
    assert "running the eager path instead" in caplog.text and target.stack.fused is None and drafter.fused is None


def test_models_without_a_fused_stack_run_eager(tiny, caplog):
    """A model that has no fused stack of its own (LlamaGen's) makes the whole pair run eager, said in the log."""
    target, drafter = fork_models(tiny.target, tiny.drafter)
    drafter.fused_stack = False
    with caplog.at_level(logging.INFO, logger="coolsd"):
        assert prepare([target, drafter], path=FUSED) == "eager"
    assert "no fused stack" in caplog.text and target.stack.fused is None

