"""Drafter training code paths on tiny random models: data layout, features, losses, resumable shards, a run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import LlamaForCausalLM

from coolsd.models.bundle import EMBEDDED_SAMPLING
from coolsd.models.eagle import EagleHead, eagle_config
from coolsd.models.embedded import target_config
from coolsd.train.acceptance import depth_rates
from coolsd.train.drafter import drafter_losses, pair_ids, target_features, train_drafter
from coolsd.train.selfdistill import SampleShards, sample_batch

K = 32


@pytest.fixture(scope="module")
def target():
    torch.manual_seed(0)
    return LlamaForCausalLM(target_config(K, hidden=32, layers=2, heads=2, intermediate=64, grid=(16, 16))).eval()


def test_pair_ids_layout(target):
    cfg = target.config
    codes = torch.tensor([[1, 2, 3], [4, 5, 6]])
    ids = pair_ids(codes, torch.tensor([7, 2]), cfg)
    assert ids.tolist() == [[K + 7, 1, 2, 3], [K + 2, 4, 5, 6],
                            [cfg.null_class_token, 1, 2, 3], [cfg.null_class_token, 4, 5, 6]]


def test_sampled_features_equal_a_full_forward(target):
    """The features kept while sampling (KV cache, fp16) are the teacher-forced ones of a full forward."""
    codes, feats = sample_batch(target, torch.tensor([3, 8]), EMBEDDED_SAMPLING, torch.Generator().manual_seed(1),
                                with_features=True)
    assert codes.shape == (2, 256) and feats.shape == (2, 2, 256, 32) and feats.dtype == torch.float16
    ref = target_features(target, pair_ids(codes, torch.tensor([3, 8]), target.config))  # (4, 256, 32)
    torch.testing.assert_close(feats.transpose(0, 1).flatten(0, 1).float(), ref, atol=2e-2, rtol=1e-2)
    again = sample_batch(target, torch.tensor([3, 8]), EMBEDDED_SAMPLING, torch.Generator().manual_seed(1))
    assert torch.equal(again, codes)


def test_losses_terms_and_gradients(target):
    head = EagleHead(eagle_config(target.config))
    codes = torch.randint(0, K, (3, 256), generator=torch.Generator().manual_seed(2))
    ids = pair_ids(codes, torch.tensor([0, 1, 2]), target.config)
    feats = target_features(target, ids)
    base, logs = drafter_losses(head, target, ids, feats, EMBEDDED_SAMPLING)
    assert "accept2" not in logs and 0 < logs["accept"] <= 1 and 0 <= logs["top1_cfg"] <= 1
    assert torch.isclose(base, torch.tensor(logs["reg"] + 0.1 * logs["ce_raw"]), rtol=1e-5)
    full, logs2 = drafter_losses(head, target, ids, feats, EMBEDDED_SAMPLING, w_cfg=2.0, w_unroll=0.5)
    assert full > base + 2.0 * logs["ce_cfg"] - 1e-4 and 0 < logs2["accept2"] <= 1
    full.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in head.parameters() if p.requires_grad)
    # a head that reproduces the target's features is accepted with probability 1 at depth 1
    with torch.no_grad():
        perfect = lambda e, f: feats[:, 1 : f.shape[1] + 1]  # noqa: E731  (F[j-1], x_j) -> F[j]
        _, m = drafter_losses(perfect, target, ids, feats, EMBEDDED_SAMPLING)
    assert m["accept"] > 1 - 1e-6 and m["top1_cfg"] == 1.0


def test_shards_resume_to_the_same_samples(target, tmp_path):
    a = SampleShards(target, tmp_path / "a", seed=3, batch=2)
    a.fill(4)
    assert len(a) == 4 and len(list((tmp_path / "a").glob("shard_*.pt"))) == 2
    again = SampleShards(target, tmp_path / "a", seed=3, batch=2)  # reloads, samples nothing
    assert len(again) == 4 and torch.equal(again.tensors()[0], a.tensors()[0])
    b = SampleShards(target, tmp_path / "b", seed=3, batch=2)
    b.grow(), b.grow()
    assert torch.equal(b.tensors()[0], a.tensors()[0]) and b.tensors()[1].tolist() == [0, 1, 2, 3]
    codes, labels, feats = a.draw(5, torch.Generator().manual_seed(0))
    assert codes.shape == (5, 256) and feats.shape == (5, 2, 256, 32)


def test_unguided_losses_read_the_class_rows_only(target):
    """Without guidance (CFG 1: one row per sequence) the losses on the class rows equal the guided pair's
    terms at CFG 1, whose mix is the class row: the null rows add nothing a decode would use."""
    from coolsd.decoding.sampling import SamplingConfig

    head = EagleHead(eagle_config(target.config))
    codes = torch.randint(0, K, (3, 256), generator=torch.Generator().manual_seed(4))
    pairs = pair_ids(codes, torch.tensor([0, 1, 2]), target.config)
    ones = pair_ids(codes, torch.tensor([0, 1, 2]), target.config, rows=1)
    assert torch.equal(ones, pairs[:3])
    feats = target_features(target, pairs)
    unguided = SamplingConfig(cfg_scale=1.0)
    _, single = drafter_losses(head, target, ones, feats[:3], unguided, w_cfg=1.0)
    nearly = SamplingConfig(cfg_scale=1.0 + 1e-9)  # guided: runs the pairs, mixes to the class row
    _, paired = drafter_losses(head, target, pairs, feats, nearly, w_cfg=1.0)
    assert single["ce_cfg"] == pytest.approx(paired["ce_cfg"], rel=1e-5)
    assert single["accept"] == pytest.approx(paired["accept"], rel=1e-5)
    assert single["top1_raw"] == paired["top1_raw"]


@pytest.mark.parametrize("cfg_scale,bf16", [(3.0, False), (1.0, True)])
def test_train_drafter_runs_resumes_and_saves(target, tmp_path, cfg_scale, bf16):
    from diffusers import VQModel

    from coolsd.decoding.sampling import SamplingConfig
    from coolsd.models.embedded import vq_config

    torch.manual_seed(0)
    vq = VQModel(**(vq_config(K) | {"block_out_channels": (8, 8), "norm_num_groups": 4})).eval()
    rng = np.random.default_rng(0)
    data = {"train_raw": (rng.integers(0, 255, (4, 28, 28), dtype=np.uint8), np.arange(4)),
            "val": (torch.rand(4, 1, 32, 32) * 2 - 1, torch.arange(4))}
    kw = dict(batch=4, n_self=6, self_frac=0.5, w_cfg=1.0, w_unroll=0.5, n_val=2, n_real=3, grow_every=1,
              eval_every=1, shard=2, sampling=SamplingConfig(cfg_scale=cfg_scale), bf16=bf16)
    train_drafter(vq, target, data, tmp_path, budget_s=0.5, **kw)
    state = torch.load(tmp_path / "drafter_state.pt", weights_only=False)
    assert state["step"] >= 1 and 0 < state["final"]["val_accept"] <= 1
    assert (tmp_path / "drafter" / "config.json").exists() and len(list((tmp_path / "self_samples").glob("*.pt"))) >= 2
    # resumes: the budget counts the first run's seconds too, so a larger one runs at least one more step
    train_drafter(vq, target, data, tmp_path, budget_s=state["elapsed"] + 0.5, init=tmp_path / "drafter", **kw)
    assert torch.load(tmp_path / "drafter_state.pt", weights_only=False)["step"] > state["step"]


def test_depth_rates():
    class E:
        def __init__(self, n_accepted, n_drafted):
            self.n_accepted, self.n_drafted = n_accepted, n_drafted

    # rounds: all 3 accepted; 1 accepted then rejected; rejected at depth 1; 2 drafted (end of image), both accepted
    rates = depth_rates([E(3, 3), E(1, 3), E(0, 3), E(2, 2)], 3)
    assert rates == [3 / 4, 2 / 3, 1 / 1]
    assert np.isnan(depth_rates([E(0, 1)], 2)[1])


def test_engine_hands_the_drafter_the_training_features(target):
    """The feature the engine passes to the Eagle head (TokenModel hidden, post final norm) is the one it is
    trained on (`target_features`), for the class row and the CFG null row."""
    from coolsd.models.embedded import LlamaClassTarget

    model = LlamaClassTarget(target)
    first = model.start(3, guidance=True)  # (G=2, 1, D): after the class / null token
    step = model.forward(torch.tensor([5, 7, 9]), torch.arange(3))  # after codes 5, 7, 9
    ref = target_features(target, pair_ids(torch.tensor([[5, 7, 9, 0]]), torch.tensor([3]), target.config))
    torch.testing.assert_close(first.hidden[:, 0], ref[:, 0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(step.hidden, ref[:, 1:4], atol=1e-5, rtol=1e-5)


def test_update_is_one_step_on_the_clipped_gradient():
    from coolsd.train.loop import update

    torch.manual_seed(0)
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    x = torch.randn(4, 3) * 100  # a gradient far above the clip
    opt_a, opt_b = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
    for _ in range(2):  # the second step must not add the first one's gradient
        loss_b = b(x).square().mean()
        opt_b.zero_grad()
        loss_b.backward()
        norm = torch.nn.utils.clip_grad_norm_(b.parameters(), 1.0)
        opt_b.step()
        assert update(a, opt_a, a(x).square().mean()) == pytest.approx(loss_b.item())
    assert norm > 1.0
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_part_path_prefers_this_runs_part(tmp_path, capsys):
    from argparse import Namespace

    from coolsd.train.loop import part_path

    args = Namespace(out=tmp_path / "run", assets=tmp_path / "assets")
    assert part_path(args, "vq") == tmp_path / "assets" / "vq" and "missing" in capsys.readouterr().out
    (tmp_path / "run" / "vq").mkdir(parents=True)
    assert part_path(args, "vq") == tmp_path / "run" / "vq"


@pytest.mark.parametrize("model", ["mnist", "emoji"])
def test_target_stage_runs_and_saves(tmp_path, model):
    """The target stage of each model trains (loss going through `loop.update`) and saves on a tiny setup."""
    from diffusers import VQModel

    from coolsd.models.embedded import vq_config
    from coolsd.train.emoji import train_emoji_target
    from coolsd.train.target import train_target

    torch.manual_seed(0)
    channels = 1 if model == "mnist" else 3
    vq = VQModel(**(vq_config(K, channels=channels) | {"block_out_channels": (8, 8), "norm_num_groups": 4})).eval()
    size = dict(hidden=32, layers=2, heads=2, intermediate=64)
    images = torch.rand(4, channels, 32, 32) * 2 - 1
    if model == "mnist":
        rng = np.random.default_rng(0)
        data = {"train_raw": (rng.integers(0, 255, (4, 28, 28), dtype=np.uint8), np.arange(4)),
                "val": (images, torch.arange(4))}
        train_target(vq, data, tmp_path, budget_s=0.3, batch=2, **size)
    else:
        labels, styles, flippable = torch.arange(4) % 2, torch.arange(4) % 3, torch.tensor([1, 0, 1, 0])
        data = {"class_names": ["a", "b"], "style_names": ["x", "y", "z"],
                "train": (images, labels, styles, flippable), "val": (images, labels, styles, flippable)}
        train_emoji_target(vq, data, tmp_path, budget_s=0.3, batch=2, bf16=False, **size)
    state = torch.load(tmp_path / "target_state.pt", weights_only=False)
    assert state["step"] >= 1 and np.isfinite(state["final"]["val_nll"])
    assert (tmp_path / "target" / "config.json").exists()


def test_warm_start_keeps_what_each_emoji_and_style_predicts(tmp_path):
    """A target warm-started on a subset of the emoji (in another order) gives, for every kept (emoji,
    style) pair and for the unconditional row, exactly the old model's logits over the codes."""
    from coolsd.models.embedded import condition_prefix, target_config
    from coolsd.train.emoji import token_rows, warm_start

    size = dict(hidden=32, layers=2, heads=2, intermediate=64)
    torch.manual_seed(0)
    old = LlamaForCausalLM(target_config(K, class_names=["a", "b", "c", "d"], style_names=["x", "y"], **size)).eval()
    old.save_pretrained(tmp_path / "old")
    new = LlamaForCausalLM(target_config(K, class_names=["c", "a"], style_names=["x", "y"], **size)).eval()
    warm_start(new, tmp_path / "old")
    codes = torch.randint(K, (1, 7))
    for new_c, old_c in ((0, 2), (1, 0)):
        for s in (0, 1):
            for null in (False, True):
                ids_new = torch.cat([condition_prefix(new.config, torch.tensor([new_c * 2 + s]), null), codes], 1)
                ids_old = torch.cat([condition_prefix(old.config, torch.tensor([old_c * 2 + s]), null), codes], 1)
                with torch.no_grad():
                    a, b = new(input_ids=ids_new).logits[..., :K], old(input_ids=ids_old).logits[..., :K]
                assert torch.equal(a, b)
    assert token_rows(old.config, new.config).tolist()[K:] == [K + 2, K, K + 4, K + 5, K + 6, K + 7]
    missing = LlamaForCausalLM(target_config(K, class_names=["e"], style_names=["x", "y"], **size))
    with pytest.raises(KeyError, match="'e'"):
        warm_start(missing, tmp_path / "old")


def test_self_samples_pass_through_the_targets_channel(target):
    """`sample_batch` with a kernel draws each code through it: a kernel sending every code to code 5 gives only
    5s (the target alone does not)."""
    labels, gen = torch.tensor([3, 8]), lambda: torch.Generator().manual_seed(4)
    to_five = torch.zeros(K, K)
    to_five[:, 5] = 1
    assert (sample_batch(target, labels, EMBEDDED_SAMPLING, gen(), kernel=to_five) == 5).all()
    assert not (sample_batch(target, labels, EMBEDDED_SAMPLING, gen()) == 5).all()


def _tiny_emoji_setup():
    """A tiny RGB VQ (seeded) and 4 pictures of 2 emoji in 3 styles, the same sets for training and held out."""
    from diffusers import VQModel

    from coolsd.models.embedded import vq_config

    torch.manual_seed(0)
    vq = VQModel(**(vq_config(K, channels=3) | {"block_out_channels": (8, 8), "norm_num_groups": 4})).eval()
    images = torch.rand(4, 3, 32, 32) * 2 - 1
    labels, styles, flippable = torch.arange(4) % 2, torch.arange(4) % 3, torch.tensor([1, 0, 1, 0])
    return vq, {"class_names": ["a", "b"], "style_names": ["x", "y", "z"],
                "train": (images, labels, styles, flippable), "val": (images, labels, styles, flippable)}


def test_a_target_trained_through_its_channel_reads_drawn_codes_and_stores_the_channel(tmp_path, monkeypatch):
    """`channel_sigma2`: the model reads codes passed through the channel, is scored on the clean codes, and the
    saved config names the channel (so the loader wraps it)."""
    from coolsd.train import emoji

    vq, data = _tiny_emoji_setup()
    seen = []
    real_nll = emoji.code_nll
    monkeypatch.setattr(emoji, "code_nll", lambda model, ids, inputs=None: seen.append((ids, inputs))
                        or real_nll(model, ids, inputs))
    emoji.train_emoji_target(vq, data, tmp_path, budget_s=0.3, batch=2, bf16=False, channel_sigma2=0.5,
                             channel_temperature=0.6, hidden=32, layers=2, heads=2, intermediate=64)
    ids, inputs = next((i, x) for i, x in seen if x is not None)  # a training step (evaluation reads clean ids)
    p = ids.shape[1] - 256
    assert torch.equal(inputs[:, :p], ids[:, :p]) and not torch.equal(inputs[:, p:], ids[:, p:])
    saved = json.loads((tmp_path / "target" / "config.json").read_text())
    assert saved["lookalike_channel"] == {"sigma2": 0.5, "k": 8, "temperature": 0.6}


def test_framed_training_holds_out_an_unseen_framing_of_training_pictures(monkeypatch):
    """With framed codes, the held-out sequences are the last framing of `HELD_FRAMED_PICTURES` training pictures
    spread over the list, and no training sequence is a last framing (`target_codes`)."""
    from coolsd.train import emoji

    monkeypatch.setattr(emoji, "HELD_FRAMED_PICTURES", 2)
    n, v = 3, 4
    framed = {"train": torch.arange(n * v * 256, dtype=torch.int16).view(n, v, 256) % 1000,
              "val": torch.zeros(1, v, 256, dtype=torch.int16)}
    labels, styles = torch.tensor([5, 6, 7]), torch.tensor([0, 1, 2])
    data = {"train": (None, labels, styles, None), "val": (None, torch.tensor([1]), torch.tensor([1]), None)}
    (codes, ys, ss, soft), (held, hy, hs) = emoji.target_codes(None, data, False, framed, 0.0, 0)
    assert soft is None and codes.dtype == torch.long and len(codes) == n * (v - 1)
    assert torch.equal(held, framed["train"][[0, 2], -1].long()) and hy.tolist() == [5, 7] and hs.tolist() == [0, 2]
    trained = {tuple(c.tolist()) for c in codes}
    assert not any(tuple(last.tolist()) in trained for last in framed["train"][:, -1])
    assert ys.tolist() == [5, 5, 5, 6, 6, 6, 7, 7, 7] and ss.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]


class _Scalar(torch.nn.Module):
    """One weight and a `save_pretrained` that writes it: a model for the loop's own tests."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))

    def save_pretrained(self, folder) -> None:
        folder.mkdir(parents=True)
        torch.save(self.state_dict(), folder / "w.pt")


def test_keep_best_ends_with_the_best_evaluation_and_saves_the_last(tmp_path, monkeypatch):
    """`run_budgeted(keep_best=...)`: the model ends with the weights of its lowest metric, state["best"] names
    that step, the last weights are saved beside the checkpoint (and in it) with their metrics in state["last"].
    The loop's clock is faked: every reading advances one second, so the budget buys a fixed number of steps."""
    from coolsd.train import loop

    ticks = iter(range(10_000))
    monkeypatch.setattr(loop.time, "perf_counter", lambda: float(next(ticks)))
    model = _Scalar()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)

    def step(i: int) -> dict[str, float]:
        with torch.no_grad():
            model.w.fill_(i + 1)  # the weight after step i is i + 1
        return {}

    state = loop.run_budgeted("toy", model, opt, step, tmp_path / "toy.ckpt", budget_s=8, base_lr=0.0,
                              eval_fn=lambda: {"val": (model.w.item() - 3) ** 2}, eval_every=1, keep_best="val")
    assert state["step"] == 8 and state["best"] == {"step": 3, "val": 0.0} and state["last"] == {"val": 25.0}
    assert model.w.item() == 3 and state["final"]["val"] == 0.0
    assert torch.load(tmp_path / "toy_last" / "w.pt")["w"].item() == 8
    assert torch.load(tmp_path / "toy.ckpt", weights_only=False)["model"]["w"].item() == 8
    with pytest.raises(ValueError, match="eval_fn"):
        loop.run_budgeted("toy", model, opt, step, tmp_path / "other.ckpt", 1, 0.0, keep_best="val")


def test_the_emoji_target_stage_keeps_its_best_when_asked(tmp_path, monkeypatch):
    """`train_emoji_target(keep_best=True)` asks the loop to keep the lowest held-out NLL (and not otherwise), and
    runs on a named device ("cpu" here; `--device cuda` on a GPU)."""
    from coolsd.train import emoji

    asked = []
    real = emoji.run_budgeted
    monkeypatch.setattr(emoji, "run_budgeted", lambda *a, **k: asked.append(k.get("keep_best")) or real(*a, **k))
    vq, data = _tiny_emoji_setup()
    size = dict(hidden=32, layers=2, heads=2, intermediate=64)
    emoji.train_emoji_target(vq, data, tmp_path / "a", budget_s=0.3, batch=2, bf16=False, device="cpu",
                             keep_best=True, **size)
    emoji.train_emoji_target(vq, data, tmp_path / "b", budget_s=0.3, batch=2, bf16=False, **size)
    assert asked == ["val_nll", None]
    assert (tmp_path / "a" / "target_last" / "config.json").exists() and not (tmp_path / "b" / "target_last").exists()
