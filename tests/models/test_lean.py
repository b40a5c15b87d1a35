"""The lean CPU path (coolsd.models.lean, issue 35) against the eager one on the tiny model, and its choice.

fp32: the same logits up to float rounding for step, verify, tree masks and crop, and the same tokens for
a seed for every rule, chain and tree. bf16: the lean logits no further from the fp32 ones than the eager
bf16 path's own. "lean-q8" (the drafter on int8 weights): the target exactly as on "lean", vanilla AR's tokens
unchanged, the drafter's logits within int8 rounding of fp32. The path is read from the model folder
(`execution.json`), overridden by the environment and by the caller's argument. No timing here: speed lives in
`python -m coolsd.bench.limit`.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from coolsd.compare.race import fork_models
from coolsd.decoding.engine import DecodeConfig, run
from coolsd.decoding.rules import RULES
from coolsd.decoding.sampling import SamplingConfig
from coolsd.models import rowkernel
from coolsd.models.bundle import load_vq_llama
from coolsd.models.eagle import EagleDrafter
from coolsd.models.embedded import LlamaClassTarget
from coolsd.models.graphs import ENV_VAR, EXECUTION_FILE, choose_path, prepare, stored_path
from coolsd.models.lean import (
    FUSED_PATHS,
    INT8_DRAFTER_PATHS,
    LEAN_PATHS,
    Int8Linear,
    LeanLayers,
    LeanLinear,
    PackedLinear,
    RowsLinear,
    packs,
    plain_layers,
    plain_layers_py,
)

EXACT_PATHS = [p for p in LEAN_PATHS if p not in INT8_DRAFTER_PATHS]  # target and drafter as the eager maths


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


def _close_drafter(out, ref, path):
    """A drafter's step equals the eager one's up to float rounding, or up to int8 rounding on INT8_DRAFTER_PATHS
    (a few hundredths of the logits' range: bf16 inputs, one weight step in 254 of each row's largest)."""
    if path not in INT8_DRAFTER_PATHS:
        torch.testing.assert_close(out.logits, ref.logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out.hidden, ref.hidden, atol=1e-5, rtol=1e-5)
        return
    for a, b in ((out.logits, ref.logits), (out.hidden, ref.hidden)):
        err, scale = (a - b).abs().max(), b.abs().max()
        assert 0 < err <= 0.05 * scale, (float(err), float(scale))


@pytest.mark.parametrize("path", LEAN_PATHS)
@pytest.mark.parametrize("guidance", [True, False])
def test_lean_equals_eager_in_fp32_for_step_verify_tree_and_crop(tiny, guidance, path):
    (eager, eager_d), (lean, lean_d) = _pair(tiny, "eager"), _pair(tiny, path)
    assert lean.stack.lean is not None and eager.stack.lean is None
    a, b = eager.start(3, guidance), lean.start(3, guidance)
    torch.testing.assert_close(b.logits, a.logits, atol=1e-5, rtol=1e-5)
    for d in (eager_d, lean_d):
        d.start(3, guidance)
    ids = torch.tensor([5, 9, 1, 30, 2, 7, 7, 4, 11])
    for x, pos, mask in _calls(0, ids):
        a, b = eager.forward(x, pos, mask), lean.forward(x, pos, mask)
        assert b.logits.shape == a.logits.shape == (2 if guidance else 1, len(x), eager.vocab_size)
        assert b.logits.dtype == torch.float32
        torch.testing.assert_close(b.logits, a.logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(b.hidden, a.hidden, atol=1e-5, rtol=1e-5)
        _close_drafter(lean_d.forward(x, a.hidden, pos, mask), eager_d.forward(x, a.hidden, pos, mask), path)
    # keep the tree root's first branch (slots 5, 6, 8), then one more step reads the moved slots
    keep = torch.tensor([6, 8])
    for m in (eager, lean, eager_d, lean_d):
        m.crop(6, keep)
    assert lean.length == eager.length == 8 and lean_d.length == eager_d.length == 8
    n = eager.stack.length
    torch.testing.assert_close(lean.stack.k[:, :, :, :n], eager.stack.k[:, :, :, :n], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lean.stack.v[:, :, :, :n], eager.stack.v[:, :, :, :n], atol=1e-5, rtol=1e-5)
    a, b = eager.forward(ids[:1], torch.tensor([8])), lean.forward(ids[:1], torch.tensor([8]))
    torch.testing.assert_close(b.logits, a.logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("tree", [None, "binary-2", "eagle-25"])
def test_same_tokens_on_lean_and_eager_for_every_rule(tiny, tree, build_rule):
    """Vanilla AR (rule None) included: it runs on the same path as the speculative decoders."""
    config = DecodeConfig(draft_len=3, tree=tree)
    lanes = {path: _pair(tiny, path) for path in ("eager", *LEAN_PATHS)}
    for name in [*RULES, None]:
        rule = build_rule(name, codebook=tiny.tokenizer.codebook) if name else None
        out = {path: run(t, d, rule, cond=2, num_tokens=tiny.num_tokens, sampling=tiny.default_sampling,
                         config=config, seed=13) for path, (t, d) in lanes.items()}
        for path in EXACT_PATHS if name else LEAN_PATHS:  # an int8 drafter drafts other tokens; vanilla has none
            assert out[path].tokens.tolist() == out["eager"].tokens.tolist(), (name, tree, path)
            assert out[path].target_forwards == out["eager"].target_forwards
        for path in INT8_DRAFTER_PATHS:  # a whole image of codes, in fewer forwards than tokens where drafts pass
            tokens = out[path].tokens
            assert len(tokens) == tiny.num_tokens
            assert 0 <= int(tokens.min()) and int(tokens.max()) < tiny.target.vocab_size
            assert out[path].target_forwards <= tiny.num_tokens
    assert lanes["lean"][0].stack.lean is not None and lanes["lean"][1].stack.lean is not None


@pytest.mark.skipif(not rowkernel.available(), reason="no AVX2 / FMA CPU or no C compiler here")
@pytest.mark.parametrize("tree", [None, "eagle-25"])
def test_the_row_kernel_target_commits_eagers_tokens_for_every_rule(tiny, tree, build_rule):
    """lean-rows' target (its verifies on the row kernel) with an fp32 drafter commits the eager pair's tokens for
    every rule: the kernel changes float rounding only. Its verifies do run the kernel."""
    config = DecodeConfig(draft_len=3, tree=tree)
    eager, (target, drafter) = _pair(tiny, "eager"), fork_models(tiny.target, tiny.drafter)
    prepare([target], path="lean-rows")
    prepare([drafter], path="lean")
    assert target.stack.lean.plain_packed and isinstance(target.lean_head.head, RowsLinear)
    for name in RULES:
        rule = build_rule(name, codebook=tiny.tokenizer.codebook)
        out = [run(t, d, rule, cond=2, num_tokens=tiny.num_tokens, sampling=tiny.default_sampling, config=config,
                   seed=5) for t, d in (eager, (target, drafter))]
        assert out[1].tokens.tolist() == out[0].tokens.tolist(), (name, tree)
        assert out[1].target_forwards == out[0].target_forwards < tiny.num_tokens


@pytest.mark.skipif(not rowkernel.available(), reason="no AVX2 / FMA CPU or no C compiler here")
@pytest.mark.parametrize("guidance", [True, False])
def test_lean_rows_on_bf16_weights_computes_their_fp32_products(tiny, guidance):
    """bf16 weights on lean-rows: every target product, one row too, reads the bf16 pack, and the logits are the
    fp32 maths of those same weight values (an fp32 eager copy of the bf16 model) up to float rounding."""
    rows, exact = _bf16_models(tiny), _bf16_models(tiny)
    exact = (LlamaClassTarget(exact[0].model.float()), None)
    prepare(rows, path="lean-rows")
    assert all(p.dtype == torch.bfloat16 for p in rows[0].stack.lean.plain_packed)
    assert rows[0].lean_head.head.packed.dtype == torch.bfloat16
    out = {}
    for key, t in (("rows", rows[0]), ("exact", exact[0])):
        out[key] = [t.start(1, guidance).logits]
        for x, pos, mask in _calls(0, torch.tensor([5, 9, 1, 30, 2, 7, 7, 4, 11])):
            out[key].append(t.forward(x, pos, mask).logits)
    for a, b in zip(out["rows"], out["exact"]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_lean_rows_without_the_kernel_runs_as_lean_q8(tiny, monkeypatch):
    """Where the row kernel cannot run, lean-rows' target is lean-q8's, bit for bit."""
    monkeypatch.setattr(rowkernel, "available", lambda: False)
    (q8, _), (rows, _) = _pair(tiny, "lean-q8"), _pair(tiny, "lean-rows")
    assert rows.stack.lean.plain_packed == [] and rows.lean_head.head.packed is None
    ids = torch.tensor([5, 9, 1, 30])
    for t in (q8, rows):
        t.start(1, True)
    a, b = q8.forward(ids, torch.arange(4)), rows.forward(ids, torch.arange(4))
    torch.testing.assert_close(b.logits, a.logits, atol=0, rtol=0)


def _bf16_models(b):
    """(target, drafter) of the tiny bundle's weights in bf16."""
    model = copy.deepcopy(b.target.model).to(torch.bfloat16)
    head = copy.deepcopy(b.drafter.head).to(torch.bfloat16)
    cb = model.config.codebook_size
    return LlamaClassTarget(model), EagleDrafter(head, model.model.embed_tokens.weight, model.lm_head.weight[:cb],
                                                 b.num_tokens)


@pytest.mark.parametrize("path", EXACT_PATHS)
@pytest.mark.parametrize("guidance", [True, False])
def test_bf16_lean_logits_within_the_eager_bf16_error(tiny, guidance, path):
    """The bf16 lean paths are no further from the fp32 logits than the eager bf16 path (x 2, plus rounding)."""
    reference = fork_models(tiny.target, tiny.drafter)
    paths = {"eager": _bf16_models(tiny), "lean": _bf16_models(tiny)}
    prepare(paths["lean"], path=path)
    prepare(paths["eager"], path="eager")
    if path in FUSED_PATHS:  # the drafter's fc and LM head read the bf16 weights on the row kernel
        assert all(isinstance(lin, RowsLinear) for lin in paths["lean"][1].lean)
        assert all((lin.packed is not None) == rowkernel.available() for lin in paths["lean"][1].lean)
    else:
        assert all((lin.packed is not None) == packs(torch.bfloat16) for lin in paths["lean"][1].lean)
    ids = torch.tensor([5, 9, 1, 30, 2, 7, 7, 4, 11])
    logits = {}
    for key, (t, d) in {"fp32": reference, **paths}.items():
        out = [t.start(1, guidance)]
        d.start(1, guidance)
        for x, pos, mask in _calls(0, ids):
            out.append(t.forward(x, pos, mask))
            out.append(d.forward(x, out[-1].hidden, pos, mask))
        logits[key] = torch.cat([o.logits.float() for o in out], dim=1)
    eager_err = (logits["eager"] - logits["fp32"]).abs().max()
    lean_err = (logits["lean"] - logits["fp32"]).abs().max()
    assert 0 < lean_err <= 2 * eager_err + 1e-2, (lean_err, eager_err)


@pytest.mark.parametrize("plain_rows", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 3])
def test_lean_products_equal_their_plain_maths_for_one_row_and_many(dtype, rows, plain_rows):
    """One row: fp32 BLAS on weights converted once (exact products of the stored weights); many rows: the
    packed bf16 weights with their post-ops (bf16 rounding), or fp32 BLAS for fp32 weights."""
    g = torch.Generator().manual_seed(0)
    w_t, x = torch.randn(16, 24, generator=g).to(dtype), torch.randn(rows, 16, generator=g)
    other, residual = torch.randn(rows, 24, generator=g), torch.randn(rows, 24, generator=g)
    bias = torch.randn(24, generator=g)
    lin = LeanLinear(w_t, bias, plain_rows)
    chosen = lin.for_rows(rows)
    assert isinstance(chosen, PackedLinear) == (rows > plain_rows and packs(dtype))
    y = x.to(chosen.dtype).double() @ w_t.double()
    tol = dict(atol=1e-5, rtol=1e-5) if chosen.dtype == torch.float32 else dict(atol=0.1, rtol=0.02)
    assert lin(x).dtype == chosen.dtype
    torch.testing.assert_close(lin(x).double(), y + bias.to(chosen.dtype).double(), **tol)
    plain = LeanLinear(w_t, None, plain_rows).for_rows(rows)
    expected = residual.double() + y
    assert plain.add_to(x, residual) is residual
    torch.testing.assert_close(residual.double(), expected, **tol)
    if isinstance(plain, PackedLinear):
        other = other.to(dtype)
        torch.testing.assert_close(plain.silu(x).double(), torch.nn.functional.silu(y), **tol)
        torch.testing.assert_close(plain.times(x, other).double(), y * other.double(), **tol)


@pytest.mark.parametrize("rows", [1, 3])
def test_int8_products_within_their_rounding(rows):
    """Int8Linear against the fp32 product: each output within the bound its roundings allow (half a weight step
    per product term, bf16 inputs), the residual form adds the same, the bias is added once."""
    g = torch.Generator().manual_seed(1)
    w_t, x = torch.randn(64, 40, generator=g), torch.randn(rows, 64, generator=g)
    bias, residual = torch.randn(40, generator=g), torch.randn(rows, 40, generator=g)
    lin = Int8Linear(w_t, bias)
    assert lin.w.dtype == torch.int8 and lin.w.shape == (40, 64) and int(lin.w.abs().max()) == 127
    exact = x.double() @ w_t.double()
    step = w_t.abs().amax(0).double() / 127  # (N,) one weight step per output
    bound = x.abs().double().sum(1, keepdim=True) * (step / 2 + 0.01 * w_t.abs().amax(0).double()) + 1e-3
    y = lin(x)
    assert y.dtype == torch.float32 and y.shape == (rows, 40)
    assert ((y.double() - exact - bias.double()).abs() <= bound).all()
    assert (y.double() - exact - bias.double()).abs().max() > 0  # it is not the fp32 product
    expected = residual.double() + exact
    assert Int8Linear(w_t).add_to(x, residual) is residual
    assert ((residual.double() - expected).abs() <= bound).all()


@pytest.mark.parametrize(("int8", "row_kernel"), [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("g", [1, 2])
def test_scripted_layers_equal_their_python_bit_for_bit(tiny, int8, row_kernel, g):
    """The lean stack's TorchScript function (`plain_layers`, scripted on the pinned torch) gives the Python
    function's output and cache writes exactly, over steps and verifies of several sizes (masks from the causal
    default and a tree), after its profiling runs too, fp32, int8 and row-kernel products, CFG's two rows and one."""
    assert isinstance(plain_layers(), torch.jit.ScriptFunction)
    stack = tiny.target.stack
    lean = LeanLayers(stack.blocks, stack.n_heads, stack.n_kv, stack.head_dim, stack.theta, stack.eps, 64, int8=int8,
                      row_kernel=row_kernel)
    assert len(lean.plain_scales) == (len(lean.plain_weights) if int8 else 0)
    assert len(lean.plain_packed) == (len(lean.plain_weights) if row_kernel and rowkernel.available() else 0)
    gen = torch.Generator().manual_seed(3)
    shape = (len(stack.blocks), g, stack.n_kv, 64, stack.head_dim)
    k, v = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    k_py, v_py = k.clone(), v.clone()
    start = 0
    for n, tree in ((5, False), (1, False), (3, False), (1, False), (4, True), (1, False), (1, False)):
        x, pos = torch.randn(g, n, stack.blocks[0][0].shape[0], generator=gen), torch.arange(start, start + n)
        mask = torch.ones(n, start + n, dtype=torch.bool).tril(start) if n > 1 else None
        if tree:
            mask[:, start:] = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
        cos, sin = lean.cos[pos], lean.sin[pos]
        args = (lean.plain_weights, lean.plain_scales, lean.plain_packed, lean.n_heads, lean.n_kv, lean.head_dim,
                lean.eps)
        out = lean.forward(x, pos, k, v, start, mask)
        ref = plain_layers_py(x, cos, sin, k_py, v_py, start, mask, *args)
        assert torch.equal(out, ref) and torch.equal(k, k_py) and torch.equal(v, v_py), (n, tree)
        start += n


@pytest.mark.parametrize("guidance", [True, False])
def test_lean_q8_runs_the_drafter_only_on_int8(tiny, guidance):
    """On lean-q8 the target is the lean one (same weights, same logits); every drafter product is int8."""
    (lean, _), (q8, q8_d) = _pair(tiny, "lean"), _pair(tiny, "lean-q8")
    assert all(isinstance(lin, Int8Linear) for lin in q8_d.lean)
    assert all(isinstance(lin, Int8Linear) for layer in q8_d.stack.lean.plain
               for lin in (layer.qkv, layer.o, layer.gate_up, layer.down))
    assert not any(isinstance(layer.qkv, Int8Linear) for layer in q8.stack.lean.plain)
    torch.testing.assert_close(q8.start(2, guidance).logits, lean.start(2, guidance).logits, atol=0, rtol=0)
    ids = torch.tensor([5, 9, 1, 30])
    a, b = lean.forward(ids, torch.arange(4)), q8.forward(ids, torch.arange(4))
    torch.testing.assert_close(b.logits, a.logits, atol=0, rtol=0)


@pytest.mark.parametrize("guidance", [True, False])
def test_lean_q8_on_bf16_weights_keeps_the_lean_target_and_a_close_drafter(tiny, guidance):
    """bf16 weights: lean-q8's target logits are lean's exactly; its drafter stays near the fp32 drafter (within
    the int8 bound of `_close_drafter`, on top of bf16's own error)."""
    reference = fork_models(tiny.target, tiny.drafter)
    lean, q8 = _bf16_models(tiny), _bf16_models(tiny)
    prepare(lean, path="lean")
    prepare(q8, path="lean-q8")
    assert all(isinstance(lin, Int8Linear) for lin in q8[1].lean)
    ids = torch.tensor([5, 9, 1, 30])
    for (t, d) in (reference, lean, q8):
        t.start(1, guidance)
        d.start(1, guidance)
    steps = [t.forward(ids, torch.arange(4)) for t, _ in (reference, lean, q8)]
    torch.testing.assert_close(steps[2].logits, steps[1].logits, atol=0, rtol=0)
    drafts = [d.forward(ids, steps[0].hidden, torch.arange(4)) for _, d in (reference, lean, q8)]
    _close_drafter(drafts[2], drafts[0], "lean-q8")


def test_lean_q8_off_a_cpu_runs_the_drafter_as_lean(tiny, monkeypatch, caplog):
    """Where the int8 product does not run (`int8_runs` false: a GPU), the drafter runs lean's products and says so."""
    from coolsd.models import eagle

    monkeypatch.setattr(eagle, "int8_runs", lambda device: False)
    _, drafter = fork_models(tiny.target, tiny.drafter)
    with caplog.at_level("WARNING", logger="coolsd"):
        drafter.use_path("lean-q8")
    assert all(isinstance(lin, LeanLinear) for lin in drafter.lean)
    assert "int8 products on a CPU only" in caplog.text


@pytest.fixture(scope="module")
def tiny_folder(tiny, tmp_path_factory):
    """The tiny bundle saved as a model folder (vq/ target/ drafter/), as `load_vq_llama` reads one."""
    root = tmp_path_factory.mktemp("tiny_model")
    tiny.tokenizer.vq.save_pretrained(root / "vq")
    tiny.target.model.save_pretrained(root / "target")
    tiny.drafter.head.save_pretrained(root / "drafter")
    return root


def _load(root, **kw):
    return load_vq_llama(root, "tiny", SamplingConfig(), device="cpu", dtype=torch.float32, **kw)


def test_the_path_is_read_from_the_model_folder_and_overridden(tiny_folder, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    cpu = torch.device("cpu")
    assert stored_path(tiny_folder, cpu) is None and _load(tiny_folder).path == "eager"  # nothing stored: auto
    (tiny_folder / EXECUTION_FILE).write_text(json.dumps({"cpu": "lean", "cuda": "cuda-graphs"}))
    try:
        assert stored_path(tiny_folder, cpu) == "lean" and stored_path(tiny_folder, "cuda") == "cuda-graphs"
        b = _load(tiny_folder)
        assert b.path == "lean" and b.target.stack.lean is not None and b.drafter.stack.lean is not None
        target, drafter = fork_models(b.target, b.drafter)  # a fork keeps the path, with its own cache
        assert target.stack.lean is b.target.stack.lean and drafter.lean is b.drafter.lean
        assert _load(tiny_folder, execution_path="eager").path == "eager"  # the argument wins
        monkeypatch.setenv(ENV_VAR, "eager")
        assert _load(tiny_folder).path == "eager"  # the environment wins over the folder
        assert _load(tiny_folder, execution_path="lean").path == "lean"  # and the argument over the environment
        monkeypatch.setenv(ENV_VAR, "auto")
        assert _load(tiny_folder).path == "lean"
        (tiny_folder / EXECUTION_FILE).write_text('{"cpu": "fastest"}')  # unknown: ignored, auto
        assert stored_path(tiny_folder, cpu) is None and _load(tiny_folder).path == "eager"
    finally:
        (tiny_folder / EXECUTION_FILE).unlink()


def test_choose_path_order():
    cpu = torch.device("cpu")
    assert choose_path(cpu, None, "lean") == "lean"
    assert choose_path(cpu, "eager", "lean") == "eager"
    assert choose_path(cpu, None, "cuda-graphs") == "eager"  # a CUDA choice stored for a CPU: auto
    assert choose_path(cpu, "lean") == "lean"


def test_shipped_model_same_tokens_on_lean_and_eager(build_rule):
    """The embedded MNIST model (fp32 on a CPU, where both lean paths run fp32 BLAS; CFG: two rows a call)
    gives the eager path's tokens on the lean path: chain, tree and vanilla AR."""
    from coolsd.models.bundle import load_embedded

    b = load_embedded(device="cpu", execution_path="eager")
    lanes = {path: _pair(b, path) for path in ("eager", "lean")}
    settings = [("cool-sd", DecodeConfig(draft_len=5)), ("eagle-1", DecodeConfig(draft_len=4, tree="eagle-25")),
                (None, DecodeConfig())]
    for name, config in settings:
        rule = build_rule(name, codebook=b.tokenizer.codebook) if name else None
        tokens = {path: run(t, d, rule, cond=7, num_tokens=b.num_tokens, sampling=b.default_sampling, config=config,
                            seed=1).tokens.tolist() for path, (t, d) in lanes.items()}
        assert tokens["lean"] == tokens["eager"], name


@pytest.mark.skipif(not rowkernel.available(), reason="no AVX2 / FMA CPU or no C compiler here")
def test_lean_fused_runs_both_stacks_in_the_c_kernel_up_to_max_rows(tiny, monkeypatch):
    """On lean-fused the target's and the drafter's layer stacks hold a `StackKernel`, and their steps, verifies
    and tree blocks go through it (those of more than MAX_ROWS rows do not); the drafter keeps fp32 weights."""
    target, drafter = _pair(tiny, "lean-fused")
    assert target.stack.lean.fused is not None and drafter.stack.lean.fused is not None
    assert not drafter.stack.lean.plain_scales  # no int8 drafter on this path
    assert drafter.fused is not None and drafter.fused.stack is drafter.stack.lean.fused  # its whole step in C
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
    # the target's start (its class token), then target, drafter
    assert rows == [2, 2, ("head", 2), 6, ("head", 6), 2, ("head", 2), 8, ("head", 8)]
    many = torch.arange(rowkernel.MAX_ROWS // 2 + 1) % 7
    out = target.forward(many, torch.arange(target.length, target.length + len(many)))
    drafter.forward(many, out.hidden, torch.arange(drafter.length, drafter.length + len(many)))
    assert rows[-1] == ("head", 8)  # 2 x 9 = 18 rows ran the torch calls, target and drafter


def test_lean_fused_without_the_kernel_runs_as_lean(tiny, monkeypatch):
    """Where the kernel cannot run (no AVX2 or no compiler), lean-fused's target and drafter are lean's, bit for
    bit (fp32 weights: the plain products either way)."""
    monkeypatch.setattr(rowkernel, "available", lambda: False)
    (lean, lean_d), (fused, fused_d) = _pair(tiny, "lean"), _pair(tiny, "lean-fused")
    assert fused.stack.lean.fused is None and fused_d.stack.lean.fused is None and fused_d.fused is None
    ids = torch.tensor([5, 9, 1, 30])
    for t, d in ((lean, lean_d), (fused, fused_d)):
        t.start(1, True)
        d.start(1, True)
    a, b = lean.forward(ids, torch.arange(4)), fused.forward(ids, torch.arange(4))
    torch.testing.assert_close(b.logits, a.logits, atol=0, rtol=0)
    da, db = lean_d.forward(ids, a.hidden, torch.arange(4)), fused_d.forward(ids, a.hidden, torch.arange(4))
    torch.testing.assert_close(db.logits, da.logits, atol=0, rtol=0)
    _, q8_d = _pair(tiny, "lean-fused-q8")  # its drafter: lean-q8's, on torch's int8 product
    assert q8_d.fused is None and all(isinstance(lin, Int8Linear) for lin in q8_d.lean)


def _random_stack(hq: int, hk: int, hd: int, dtype: torch.dtype, seed: int = 0) -> LeanLayers:
    """A 2-layer LeanLayers of random weights (D 32, I 24) on lean-fused, hq query and hk key-value heads of hd."""
    gen = torch.Generator().manual_seed(seed)
    d, inter = 32, 24
    shapes = ((d, (hq + 2 * hk) * hd), (hq * hd, d), (d, 2 * inter), (inter, d))
    blocks = [tuple((torch.randn(*sh, generator=gen) / sh[0] ** 0.5).to(dtype) for sh in shapes) for _ in range(2)]
    return LeanLayers(blocks, hq, hk, hd, 10_000.0, 1e-5, 64, row_kernel=True, fused=True)


@pytest.mark.skipif(not rowkernel.available(), reason="no AVX2 / FMA CPU or no C compiler here")
@pytest.mark.parametrize("g", [1, 2])
@pytest.mark.parametrize(("heads", "dtype"), [("tiny", torch.float32), ((4, 1, 8), torch.float32),
                                              ((4, 2, 6), torch.float32), ((2, 1, 64), torch.float32),
                                              ((2, 1, 80), torch.float32),
                                              ((4, 1, 8), torch.bfloat16)])
def test_the_c_stack_equals_the_python_stack_within_float_rounding(tiny, g, heads, dtype):
    """`StackKernel` against `plain_layers_py` on the same packed weights (fp32, or bf16 read as stored), over
    steps, verifies (causal default) and a tree block, CFG's two rows and one; the tiny model's heads, grouped
    queries (4 query heads on 1 and on 2 key-value heads: torch's `enable_gqa` mapping), a head size of 6 (the
    products' tails; attention's plain loops) and of 80 (attention's output in memory, not registers): the output
    within 2e-6 of its largest value, the cache writes within 1e-5."""
    if heads == "tiny":
        stack = tiny.target.stack
        lean = LeanLayers(stack.blocks, stack.n_heads, stack.n_kv, stack.head_dim, stack.theta, stack.eps, 64,
                          row_kernel=True, fused=True)
    else:
        lean = _random_stack(*heads, dtype)
    assert lean.fused is not None
    gen = torch.Generator().manual_seed(5)
    k = torch.zeros(len(lean.plain_weights) // 4, g, lean.n_kv, 64, lean.head_dim)
    v, k_py, v_py = k.clone(), k.clone(), k.clone()
    start = 0
    for n, tree in ((5, False), (1, False), (3, False), (4, True), (1, False)):
        x, pos = torch.randn(g, n, lean.plain_weights[0].shape[0], generator=gen), torch.arange(start, start + n)
        mask = None
        if tree:
            mask = torch.ones(n, start + n, dtype=torch.bool).tril(start)
            mask[:, start:] = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
        assert lean.fused.runs(g * n, k, v, mask)
        out = lean.fused(x, pos, k, v, start, mask)
        causal = mask if mask is not None or n == 1 else torch.ones(n, start + n, dtype=torch.bool).tril(start)
        additive = None if causal is None else torch.zeros(causal.shape).masked_fill_(~causal, -math.inf)
        ref = plain_layers_py(x, lean.cos[pos], lean.sin[pos], k_py, v_py, start, additive, lean.plain_weights, [],
                              lean.plain_packed, lean.n_heads, lean.n_kv, lean.head_dim, lean.eps)
        err = float((out - ref).abs().max() / ref.abs().max())
        assert err <= 2e-6, err  # float rounding (its exp and SiLU over a wide range: test_rowkernel.py)
        torch.testing.assert_close(k, k_py, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(v, v_py, rtol=1e-5, atol=1e-5)
        start += n


@pytest.mark.skipif(not rowkernel.available(), reason="no AVX2 / FMA CPU or no C compiler here")
@pytest.mark.parametrize("hd", [8, 64])
def test_the_c_stacks_causal_default_is_its_causal_mask_and_a_closed_key_is_never_read(hd):
    """No mask and the causal mask give the same bits; a key a tree mask closes may hold NaN (a stale slot) and the
    output keeps every bit (its score is set to -inf before the softmax, its value skipped)."""
    lean = _random_stack(2, 1, hd, torch.float32, seed=hd)
    gen = torch.Generator().manual_seed(2)
    k = torch.randn(2, 1, 1, 16, hd, generator=gen)
    v = torch.randn(2, 1, 1, 16, hd, generator=gen)
    start, n = 9, 3
    x, pos = torch.randn(1, n, 32, generator=gen), torch.arange(start, start + n)
    causal = torch.ones(n, start + n, dtype=torch.bool).tril(start)
    plain = lean.fused(x, pos, k.clone(), v.clone(), start, None)
    assert torch.equal(lean.fused(x, pos, k.clone(), v.clone(), start, causal), plain)
    closed = causal.clone()
    closed[:, 4] = False
    want = lean.fused(x, pos, k.clone(), v.clone(), start, closed)
    k_nan, v_nan = k.clone(), v.clone()
    k_nan[:, :, :, 4], v_nan[:, :, :, 4] = math.nan, math.nan
    got = lean.fused(x, pos, k_nan, v_nan, start, closed)
    assert torch.equal(got, want) and not torch.equal(got, plain)


@pytest.mark.skipif(not rowkernel.available(), reason="no AVX2 / FMA CPU or no C compiler here")
def test_the_c_stack_refuses_what_it_cannot_index():
    """More than MAX_ROWS rows, a cache it cannot index or an additive mask go to the torch calls (`runs`); caches,
    slots, masks or positions that do not fit raise ValueError, as the torch calls would fail on them."""
    lean = _random_stack(4, 1, 8, torch.float32)
    k = torch.zeros(2, 1, 1, 16, 8)
    v, x = k.clone(), torch.randn(1, 2, 32)
    assert not lean.fused.runs(rowkernel.MAX_ROWS + 1, k, v, None)
    assert not lean.fused.runs(2, k.transpose(3, 4), v, None)
    assert not lean.fused.runs(2, k, v, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="caches"):
        lean.fused(x, torch.arange(2), k[:, :, :, :, :4].contiguous(), v[:, :, :, :, :4].contiguous(), 0, None)
    with pytest.raises(ValueError, match="slots"):
        lean.fused(x, torch.arange(2), k, v, 15, None)
    with pytest.raises(ValueError, match="mask"):
        lean.fused(x, torch.arange(2), k, v, 0, torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="RoPE"):
        lean.fused(x, torch.tensor([0, 64]), k, v, 0, None)
    with pytest.raises(ValueError, match="positions"):
        lean.fused(x, torch.arange(1), k, v, 0, None)
    with pytest.raises(ValueError, match="contiguous"):  # what `runs` declines, called anyway
        lean.fused(x, torch.arange(2), k.double(), v.double(), 0, None)


@pytest.mark.skipif(not rowkernel.available(), reason="no AVX2 / FMA CPU or no C compiler here")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("guidance", [True, False])
def test_the_c_head_step_is_the_python_head_step(tiny, guidance, dtype):
    """The Eagle head's step in one C call (`EagleKernel`: fc, the layer, the LM head, / temperature) against the
    same drafter's lean-fused step in Python over a step, a verify, a step and a tree block, at a temperature: on
    bf16 weights the same bits; on fp32 weights float rounding (a one-row fc or head runs MKL in Python)."""
    target, drafter = _bf16_models(tiny) if dtype == torch.bfloat16 else fork_models(tiny.target, tiny.drafter)
    drafter.fc_b = torch.randn(drafter.fc_b.shape, generator=torch.Generator().manual_seed(3)).to(dtype)  # not 0
    prepare([target, drafter], path="lean-fused")
    python = drafter.fork()
    python.fused = None
    assert drafter.fused is not None
    for d in (drafter, python):
        d.temperature = 0.6
        d.start(1, guidance)
    target.start(1, guidance)
    for x, pos, mask in _calls(0, torch.tensor([5, 9, 1, 30, 2, 7, 7, 4, 11])):
        hidden = target.forward(x, pos, mask).hidden
        out, ref = drafter.forward(x, hidden, pos, mask), python.forward(x, hidden, pos, mask)
        assert out.logits.shape == ref.logits.shape and drafter.length == python.length
        if dtype == torch.bfloat16:
            assert torch.equal(out.logits, ref.logits) and torch.equal(out.hidden, ref.hidden)
        else:
            torch.testing.assert_close(out.logits, ref.logits, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(out.hidden, ref.hidden, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not rowkernel.available(), reason="no AVX2 / FMA CPU or no C compiler here")
def test_the_c_head_step_refuses_ids_it_cannot_read(tiny):
    """An id past the embedding's rows, ids that do not match the features or a full cache raise ValueError (the
    torch calls fail on them too) and leave the cache's length as it was."""
    target, drafter = fork_models(tiny.target, tiny.drafter)
    prepare([target, drafter], path="lean-fused")
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


def _on_rounded_weights(b):
    """(target, drafter) on the eager path whose drafter's products read its weights rounded as lean-fused-q8 rounds
    them (`rowkernel.quantise` of each fused, norm-folded matrix, fc and LM head): the maths that path runs."""
    target, drafter = _pair(b, "eager")

    def rounded(w_t):
        q, scale = rowkernel.quantise(w_t)
        return q.float() * scale

    drafter.stack = copy.copy(drafter.stack)
    drafter.stack.blocks = [tuple(rounded(w) for w in block) for block in drafter.stack.blocks]
    drafter.fc_t, drafter.head_t = rounded(drafter.fc_t), rounded(drafter.head_t)
    return target, drafter


@pytest.mark.skipif(not rowkernel.available(), reason="no AVX2 / FMA CPU or no C compiler here")
@pytest.mark.parametrize("guidance", [True, False])
def test_lean_fused_q8_drafts_from_its_int8_weights_exactly(tiny, guidance):
    """lean-fused-q8: the target is lean-fused's, bit for bit; the drafter's products read int8 copies on the row
    kernel (no oneDNN copy; every product packed in int8), its whole step in one C call up to MAX_ROWS rows, and
    equal the eager drafter on the same rounded weights within float rounding, in one call and past MAX_ROWS rows
    (9 tokens x 2 rows: the rounded weights there too, not the fp32 ones)."""
    (fused, _), (q8, q8_d) = _pair(tiny, "lean-fused"), _pair(tiny, "lean-fused-q8")
    ref, ref_d = _on_rounded_weights(tiny)
    assert q8_d.fused is not None and q8_d.stack.lean.packed is None
    assert all(p.dtype == torch.int8 for p in q8_d.stack.lean.plain_packed)
    assert all(lin.packed.dtype == torch.int8 for lin in q8_d.lean)
    assert all(p.dtype != torch.int8 for p in q8.stack.lean.plain_packed)  # the target: lean-fused's weights
    for m in (fused, q8, ref):
        m.start(3, guidance)
    for d in (q8_d, ref_d):
        d.start(3, guidance)
    ids = torch.tensor([5, 9, 1, 30, 2, 7, 7, 4, 11])
    for x, pos, mask in [*_calls(0, ids), (ids, torch.arange(9, 18), None)]:
        a, b = fused.forward(x, pos, mask), q8.forward(x, pos, mask)
        assert torch.equal(a.logits, b.logits)
        ref.forward(x, pos, mask)
        out, expected = q8_d.forward(x, a.hidden, pos, mask), ref_d.forward(x, a.hidden, pos, mask)
        torch.testing.assert_close(out.logits, expected.logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out.hidden, expected.hidden, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not rowkernel.available(), reason="no AVX2 / FMA CPU or no C compiler here")
def test_lean_fused_q8_never_mixes_int8_and_fp32_weights(tiny, monkeypatch):
    """Where the kernel cannot take one of the head's weights (here: the LM head), lean-fused-q8's drafter runs all
    of them on torch's int8 product, as lean-q8 does, not some int8 on the kernel and the rest in fp32."""
    real = rowkernel.pack
    monkeypatch.setattr(rowkernel, "pack", lambda w, int8=False: None if w.shape[1] == tiny.drafter.vocab_size
                        else real(w, int8))
    _, drafter = _pair(tiny, "lean-fused-q8")
    assert drafter.fused is None and all(isinstance(lin, Int8Linear) for lin in drafter.lean)
    assert drafter.stack.lean.plain_scales and not drafter.stack.lean.plain_packed
