"""The static-shape execution path (coolsd.models.graphs) equals the eager one, on CPU where it runs uncaptured.

Padded blocks must never let a masked slot change a kept token or the kept cache; decoding must give
the same tokens for a seed on both paths, for every rule, chain and tree.
"""

from __future__ import annotations

import pytest
import torch
from llamagen_weights import random_models  # tests/ helper

from coolsd.compare.race import fork_models
from coolsd.decoding.drafting import Chain, chain_or_tree
from coolsd.decoding.engine import DecodeConfig, generate, run
from coolsd.decoding.rules import RULES
from coolsd.models import rowkernel
from coolsd.models.graphs import choose_path, prepare


@pytest.fixture(scope="module")
def tiny():
    from coolsd.models.tiny import tiny_bundle

    return tiny_bundle(grid=(4, 4))


def _pair(b, path):
    target, drafter = fork_models(b.target, b.drafter)
    prepare([target, drafter], path=path)
    return target, drafter


def _rule(build_rule, name, b):
    return build_rule(name, codebook=b.tokenizer.codebook)


def test_static_forward_equals_eager_with_cfg_rows_chain_and_tree_masks(tiny):
    eager, _ = _pair(tiny, "eager")
    static, _ = _pair(tiny, "static")
    assert static.stack.blocks_static and not eager.stack.blocks_static
    for m in (eager, static):
        m.start(3, True)
    ids = torch.tensor([5, 9, 1, 30, 2, 7, 7])
    calls = [(ids[:1], torch.arange(0, 1), None), (ids[1:4], torch.arange(1, 4), None),  # causal blocks of 1 and 3
             (ids[4:5], torch.arange(4, 5), None)]
    for x, pos, mask in calls:
        a, b = eager.forward(x, pos, mask), static.forward(x, pos, mask)
        assert b.logits.shape == a.logits.shape == (2, len(x), eager.vocab_size)
        torch.testing.assert_close(b.logits, a.logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(b.hidden, a.hidden, atol=1e-5, rtol=1e-5)
    # a tree block: root + two siblings + a child of the first, then keep the root's first branch
    old = eager.length
    tree = torch.ones(4, old + 4, dtype=torch.bool)
    tree[:, old:] = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    pos = torch.tensor([old, old + 1, old + 1, old + 2])
    a, b = eager.forward(ids[3:7], pos, tree), static.forward(ids[3:7], pos, tree)
    torch.testing.assert_close(b.logits, a.logits, atol=1e-5, rtol=1e-5)
    keep = torch.tensor([old + 1, old + 3])
    for m in (eager, static):
        m.crop(old + 1, keep)
    assert static.length == eager.length == old + 3
    n = eager.stack.length
    torch.testing.assert_close(static.stack.k[:, :, :, :n], eager.stack.k[:, :, :, :n], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(static.stack.v[:, :, :, :n], eager.stack.v[:, :, :, :n], atol=1e-5, rtol=1e-5)


def test_padded_slots_never_change_kept_tokens_or_cache(tiny):
    """Poison the padding: the real rows and every kept slot must not notice."""
    target, _ = _pair(tiny, "static")
    stack = target.stack
    target.start(1, True)
    target.forward(torch.tensor([3, 4, 5]), torch.arange(3))
    before_k, before_v, length = stack.k.clone(), stack.v.clone(), stack.length
    x = target.embed[torch.tensor([6, 7])][None].expand(2, -1, -1)
    real = stack.forward(x, torch.tensor([4, 5]), None)  # n = 2 is a block of its own
    stack.crop(length)
    # n = 3 pads to 4: the padded row gets huge inputs, written to slot length + 3
    x3 = target.embed[torch.tensor([6, 7, 8])][None].expand(2, -1, -1)
    poisoned = torch.cat([x3, torch.full((2, 1, x3.shape[-1]), 1e4)], dim=1)
    full = torch.zeros(4, stack.max_slots, dtype=torch.bool)
    full[:3, : length + 3] = torch.ones(3, length + 3, dtype=torch.bool).tril(length)
    full[3, 0] = True
    out = stack.forward_static(poisoned, torch.tensor([4, 5, 6, 0]), torch.arange(length, length + 4), full)
    torch.testing.assert_close(out[:, :2], real, atol=1e-5, rtol=1e-5)
    assert torch.equal(stack.k[:, :, :, :length], before_k[:, :, :, :length])
    assert torch.equal(stack.v[:, :, :, :length], before_v[:, :, :, :length])
    # and the padded path of `forward` leaves the cache length at the real rows only
    stack.crop(length)
    stack.forward(x3, torch.tensor([4, 5, 6]), None)
    assert stack.length == length + 3


@pytest.mark.parametrize("tree", [None, "binary-2", "eagle-25"])
def test_same_tokens_on_both_paths_for_every_rule(tiny, tree, build_rule):
    config = DecodeConfig(chain_or_tree(3, tree))
    lanes = {path: _pair(tiny, path) for path in ("eager", "static")}
    for name in [*RULES, None]:
        rule = _rule(build_rule, name, tiny) if name else None
        out = {}
        for path, (target, drafter) in lanes.items():
            res = run(target, drafter, rule, cond=2, num_tokens=tiny.num_tokens, sampling=tiny.default_sampling,
                      config=config, seed=13)
            out[path] = res
        assert out["static"].tokens.tolist() == out["eager"].tokens.tolist(), (name, tree)
        assert out["static"].target_forwards == out["eager"].target_forwards
    assert lanes["static"][0].stack.blocks_static and lanes["static"][1].stack.blocks_static


def test_shipped_model_same_tokens_on_both_paths(embedded_bundle, build_rule):
    b = embedded_bundle
    lanes = {path: _pair(b, path) for path in ("eager", "static")}
    settings = [("cool-sd", DecodeConfig(Chain(5))), ("eagle-1", DecodeConfig(chain_or_tree(4, "eagle-25")))]
    for name, config in settings:
        rule = _rule(build_rule, name, b)
        tokens = {path: run(t, d, rule, cond=7, num_tokens=b.num_tokens, sampling=b.default_sampling, config=config,
                            seed=1).tokens.tolist()
                  for path, (t, d) in lanes.items()}
        assert tokens["static"] == tokens["eager"], name


@pytest.fixture(scope="module")
def embedded_bundle():
    from coolsd.models.bundle import load_embedded

    return load_embedded(device="cpu")


def test_rule_and_drafter_come_together(tiny, build_rule):
    target, drafter = fork_models(tiny.target, tiny.drafter)
    with pytest.raises(ValueError, match="chain drafting without a drafter"):
        run(target, None, _rule(build_rule, "eagle-1", tiny), cond=0, num_tokens=tiny.num_tokens)
    vanilla = list(generate(target, drafter, None, cond=0, num_tokens=tiny.num_tokens))  # rule None: drafter unused
    assert all(e.draft_forwards == 0 and e.target_forwards == 1 for e in vanilla)
    alone = run(target, None, None, cond=0, num_tokens=tiny.num_tokens)
    assert torch.equal(torch.cat([e.tokens for e in vanilla]), alone.tokens)


def test_path_choice_and_fork_keeps_the_path(tiny, monkeypatch):
    monkeypatch.setattr(rowkernel, "available", lambda: False)
    monkeypatch.delenv("COOLSD_EXECUTION", raising=False)
    assert choose_path(torch.device("cpu")) == "eager"
    monkeypatch.setenv("COOLSD_EXECUTION", "static")  # the graphs' body: the caller's choice, not offered
    with pytest.raises(ValueError, match="auto or one of"):
        choose_path(torch.device("cpu"))
    assert choose_path(torch.device("cpu"), "static") == "static"
    with pytest.raises(ValueError, match="CUDA"):
        choose_path(torch.device("cpu"), "cuda-graphs")
    with pytest.raises(ValueError, match="auto or one of"):
        choose_path(torch.device("cpu"), "fast")
    target, drafter = _pair(tiny, "static")
    again, again_d = fork_models(target, drafter)
    assert again.stack.blocks_static == target.stack.blocks_static != ()
    assert again_d.stack.blocks_static != ()


@pytest.fixture(scope="module")
def tiny_llamagen():
    return random_models()


def test_llamagen_static_forward_equals_eager(tiny_llamagen):
    target, drafter, caption = tiny_llamagen
    (te, de), (ts, ds) = fork_models(target, drafter), fork_models(target, drafter)
    prepare([ts, ds], path="static")
    assert ts._blocks and ds._blocks and not te._blocks
    ids = torch.tensor([3, 9, 14, 2, 60])
    outs = {}
    for key, t, d in (("eager", te, de), ("static", ts, ds)):
        t.start(caption, True)
        d.start(caption, True)
        a = t.forward(ids[:3], torch.arange(3))
        b = d.forward(ids[:3], a.hidden, torch.arange(3))
        c = t.forward(ids[3:4], torch.arange(3, 4))
        outs[key] = (a.logits, b.logits, c.logits, d.forward(ids[4:5], None, torch.arange(3, 4)).logits)
    for e, s in zip(outs["eager"], outs["static"]):
        torch.testing.assert_close(s, e, atol=1e-5, rtol=1e-5)
    assert ts._blocks and ds._blocks  # still on the static path after start()


@pytest.mark.parametrize("tree", [None, "binary-2"])
def test_llamagen_same_tokens_on_both_paths_for_every_rule(tiny_llamagen, tree, build_rule):
    from coolsd.decoding.sampling import SamplingConfig

    target, drafter, caption = tiny_llamagen
    lanes = {"eager": fork_models(target, drafter), "static": fork_models(target, drafter)}
    prepare(lanes["static"], path="static")
    codebook = torch.randn(64, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    for name in [*RULES, None]:
        rule = build_rule(name, codebook=codebook) if name else None
        tokens = {path: run(t, d, rule, cond=caption, num_tokens=16, sampling=SamplingConfig(cfg_scale=2.0),
                            config=DecodeConfig(chain_or_tree(3, tree)), seed=4).tokens.tolist()
                  for path, (t, d) in lanes.items()}
        assert tokens["static"] == tokens["eager"], (name, tree)
    assert lanes["static"][0]._blocks and lanes["static"][1]._blocks and not lanes["eager"][0]._blocks


def test_cache_per_guidance_rows_is_kept_and_never_shared_by_forks(tiny, tiny_llamagen):
    """Captured graphs point at cache tensors: switching CFG off and on must find the same tensors again."""
    target, _ = fork_models(tiny.target, tiny.drafter)
    target.start(3, True)
    with_cfg = target.stack.k
    target.start(3, False)
    assert target.stack.k.shape[1] == 1
    target.start(3, True)
    assert target.stack.k is with_cfg
    other, _ = fork_models(target)
    other.start(3, True)
    assert other.stack.k is not with_cfg
    lg, _, caption = tiny_llamagen
    lg_a, lg_b = lg.fork(), lg.fork()
    lg_a.start(caption, True)
    kept = lg_a._cache
    lg_a.start(caption, False)
    lg_a.start(caption, True)
    lg_b.start(caption, True)
    assert lg_a._cache is kept and lg_b._cache is not kept
