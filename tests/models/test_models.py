"""The embedded model's runtime: lean cache == transformers logits, rollback, tree keep, Eagle head, loader errors."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaForCausalLM

from coolsd.decoding.drafting import Chain, chain_or_tree
from coolsd.decoding.engine import DecodeConfig, run
from coolsd.decoding.rules import make_rule
from coolsd.decoding.sampling import SamplingConfig
from coolsd.models.bundle import EMBEDDED_DIR, BundleError, load_embedded
from coolsd.models.eagle import EagleDrafter, EagleHead, eagle_config
from coolsd.models.embedded import LlamaClassTarget, target_config
from coolsd.models.protocol import causal_mask
from coolsd.models.tiny import tiny_bundle

K = 32  # codebook size of the tiny models


@pytest.fixture(scope="module")
def llama():
    torch.manual_seed(0)
    cfg = target_config(K, hidden=64, layers=2, heads=4, intermediate=128, grid=(4, 4))
    return LlamaForCausalLM(cfg).eval()


def hf_logits(model, cls_token: int, ids: torch.Tensor) -> torch.Tensor:
    """Reference: full recompute with transformers, codebook logits (n + 1, K)."""
    with torch.no_grad():
        return model(torch.cat([torch.tensor([cls_token]), ids])[None]).logits[0, :, :K]


def test_lean_forward_equals_transformers_with_cfg_rows(llama):
    ids = torch.randint(0, K, (12,), generator=torch.Generator().manual_seed(1))
    cfg = llama.config
    target = LlamaClassTarget(llama, max_tokens=16)
    first = target.start(3, guidance=True)
    step = target.forward(ids, torch.arange(12))
    for row, cls in enumerate([cfg.class_token_offset + 3, cfg.null_class_token]):
        ref = hf_logits(llama, cls, ids)
        torch.testing.assert_close(first.logits[row, 0], ref[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(step.logits[row], ref[1:], atol=1e-5, rtol=1e-5)


def test_crop_then_refeed_equals_recompute(llama):
    ids = torch.randint(0, K, (10,), generator=torch.Generator().manual_seed(2))
    target = LlamaClassTarget(llama, max_tokens=16)
    target.start(1, guidance=False)
    target.forward(torch.randint(0, K, (6,)), torch.arange(6))  # junk that gets rolled back
    target.crop(0)
    target.forward(ids[:4], torch.arange(4))
    target.crop(2)
    out = target.forward(ids[2:], torch.arange(2, 10))
    ref = hf_logits(llama, llama.config.class_token_offset + 1, ids)
    torch.testing.assert_close(out.logits[0], ref[3:], atol=1e-5, rtol=1e-5)
    assert target.length == 10


def test_tree_mask_and_keep_equal_recompute(llama):
    """Verify two branches in one forward with a tree mask, keep one branch, continue: equals the plain sequence."""
    target = LlamaClassTarget(llama, max_tokens=16)
    target.start(2, guidance=False)
    target.forward(torch.tensor([5, 6]), torch.arange(2))
    # branch A = [7, 8], branch B = [9]; slots 2, 3 (A) and 4 (B)
    mask = causal_mask(2, 3)
    mask[1, 2 + 0] = True
    mask[2, 2:4] = False  # B does not see A
    mask[2, 4] = True
    tree = target.forward(torch.tensor([7, 8, 9]), torch.tensor([2, 3, 2]), mask)
    ref_a = hf_logits(llama, llama.config.class_token_offset + 2, torch.tensor([5, 6, 7, 8]))
    ref_b = hf_logits(llama, llama.config.class_token_offset + 2, torch.tensor([5, 6, 9]))
    torch.testing.assert_close(tree.logits[0, :2], ref_a[3:5], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(tree.logits[0, 2], ref_b[3], atol=1e-5, rtol=1e-5)
    target.crop(2, keep=torch.tensor([4]))  # keep branch B only
    out = target.forward(torch.tensor([3]), torch.tensor([3]))
    ref = hf_logits(llama, llama.config.class_token_offset + 2, torch.tensor([5, 6, 9, 3]))
    torch.testing.assert_close(out.logits[0, 0], ref[4], atol=1e-5, rtol=1e-5)


def test_eagle_drafter_runtime_equals_training_path(llama):
    head = EagleHead(eagle_config(llama.config)).eval()
    drafter = EagleDrafter(head, llama.model.embed_tokens.weight, llama.lm_head.weight[:K], 16)
    ids = torch.randint(0, K, (7,), generator=torch.Generator().manual_seed(3))
    feats = torch.randn(1, 7, 64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ref = head(llama.model.embed_tokens.weight[ids][None], feats)
    drafter.start(None, guidance=False)
    first = drafter.forward(ids[:3], feats[:, :3], torch.arange(3))
    drafter.forward(ids[3:5], feats[:, 3:5], torch.arange(3, 5))
    drafter.crop(4)
    last = drafter.forward(ids[4:], feats[:, 4:], torch.arange(4, 7))
    torch.testing.assert_close(first.hidden[0], ref[0, :3], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(last.hidden[0], ref[0, 4:], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(last.logits[0], ref[0, 4:] @ llama.lm_head.weight[:K].T, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("tree", [None, "eagle-25"])
def test_rollback_greedy_speculative_equals_vanilla_greedy(llama, tree):
    """omega == 1 and greedy: every round's rollback must leave the caches exactly as plain decoding would."""
    torch.manual_seed(5)
    head = EagleHead(eagle_config(llama.config)).eval()
    drafter = EagleDrafter(head, llama.model.embed_tokens.weight, llama.lm_head.weight[:K], 16)
    target = LlamaClassTarget(llama, max_tokens=16)
    greedy = SamplingConfig(temperature=0.0)
    # reference: greedy by full recompute with transformers, no cache at all
    ids = torch.zeros(0, dtype=torch.long)
    for _ in range(16):
        ids = torch.cat([ids, hf_logits(llama, llama.config.class_token_offset + 4, ids)[-1].argmax()[None]])
    accepted = []
    for rule in [make_rule("cool-sd", delta=1.0, nu=0.0), make_rule("eagle-1")]:
        res = run(target, drafter, rule, cond=4, num_tokens=16, sampling=greedy,
            config=DecodeConfig(chain_or_tree(3, tree)), seed=9)
        assert res.tokens.tolist() == ids.tolist()
        accepted.append([e.n_accepted for e in res.events])
    assert accepted[0] == accepted[1]  # omega == 1 is Eagle-1: the same drafts accepted in every round
    vanilla = run(target, None, None, cond=4, num_tokens=16, sampling=greedy, seed=0)
    assert vanilla.tokens.tolist() == ids.tolist() and vanilla.target_forwards == 16


def test_tiny_bundle_generates_with_every_rule():
    b = tiny_bundle()
    rules = [make_rule("eagle-1"), make_rule("cool-sd"), make_rule("uniform-rsd"),
             make_rule("lantern++", k=5, lam=10, neighbours=b.neighbours)]
    for rule in rules:
        res = run(b.target, b.drafter, rule, cond=7, num_tokens=b.num_tokens, sampling=b.default_sampling,
                  config=DecodeConfig(Chain(4)), seed=0)
        assert len(res.tokens) == b.num_tokens
        assert res.target_forwards < b.num_tokens  # the tiny drafter helps (tau 3.2 to 4 at seed 0)
    assert b.tokenizer.decode(res.tokens).shape == (1, 8, 8)


def test_bad_class_is_a_clear_error():
    b = tiny_bundle()
    with pytest.raises(ValueError, match=r"class must be in \[0, "):
        run(b.target, None, None, cond=12, num_tokens=b.num_tokens)


def test_loader_errors_are_clear(tmp_path):
    with pytest.raises(BundleError, match="not found"):
        load_embedded(tmp_path / "nowhere")
    (tmp_path / "vq").mkdir()
    with pytest.raises(BundleError, match="no config.json"):
        load_embedded(tmp_path)
    (tmp_path / "vq" / "config.json").write_text("{ this is not json")
    (tmp_path / "vq" / "diffusion_pytorch_model.safetensors").write_bytes(b"garbage")
    with pytest.raises(BundleError, match="could not load the VQ tokenizer"):
        load_embedded(tmp_path)
    (tmp_path / "vq" / "config.json").write_text(json.dumps({"_class_name": "VQModel"}))
    with pytest.raises(BundleError, match="VQ tokenizer"):
        load_embedded(tmp_path)


shipped = pytest.mark.skipif(not (EMBEDDED_DIR / "target" / "config.json").is_file(),
                             reason="assets/embedded is not there (model not exported)")


@pytest.fixture(scope="module")
def embedded():
    return load_embedded(device="cpu", with_classifier=True)


@shipped
def test_shipped_bundle_generates_one_image_per_decoder(embedded):
    b = embedded
    assert b.grid == (16, 16) and b.class_names == [str(c) for c in range(10)]
    assert b.neighbours.shape[0] == 256
    decoders = [(None, None), (b.drafter, make_rule("eagle-1")), (b.drafter, make_rule("cool-sd", delta=2.0)),
                (b.drafter, make_rule("lantern++", k=5, lam=10, neighbours=b.neighbours))]
    for drafter, rule in decoders:
        res = run(b.target, drafter, rule, cond=3, num_tokens=b.num_tokens, sampling=b.default_sampling,
                  config=DecodeConfig(Chain(5)), seed=0)
        assert len(res.tokens) == 256 and res.tokens.max() < 256
        assert res.tau == 1 if rule is None else res.tau > 1.5  # the shipped drafter: tau about 2.8 to 3.5
        image = b.tokenizer.decode(res.tokens)
        assert image.shape == (1, 32, 32) and 0 <= image.min() and image.max() <= 1


@shipped
def test_shipped_classifier_recognises_vanilla_samples(embedded):
    """Smoke test on a handful of fixed-seed samples (the full figures are in the model card)."""
    b = embedded
    correct = 0
    for digit in (0, 1, 7, 9):
        res = run(b.target, None, None, cond=digit, num_tokens=b.num_tokens, sampling=b.default_sampling, seed=digit)
        with torch.no_grad():
            logits = b.classifier(pixel_values=b.tokenizer.decode(res.tokens)[None] * 2 - 1).logits
        correct += int(logits.argmax(-1).item() == digit)
    assert correct >= 3
