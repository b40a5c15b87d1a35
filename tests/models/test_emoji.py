"""The emoji model's runtime side on tiny random weights saved as the shipped folder layout:
[class, style] prefix, strict loading, RGB decoding, the execution dtype choice, a race."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch
from diffusers import VQModel
from transformers import LlamaForCausalLM, ResNetForImageClassification

from coolsd.compare.race import Race, Racer, fork_models
from coolsd.decoding.drafting import Chain
from coolsd.decoding.engine import DecodeConfig, generate, run
from coolsd.decoding.rules import make_rule
from coolsd.models.bundle import BundleError
from coolsd.models.channel import ChannelTarget, lookalike_kernel
from coolsd.models.eagle import EagleHead, eagle_config
from coolsd.models.embedded import LlamaClassTarget, condition_prefix, num_conditions, target_config, vq_config
from coolsd.models.emoji import DTYPE_ENV, load_emoji
from coolsd.train.emoji import emoji_classifier
from coolsd.train.emoji_eval import SHEET_EMOJI
from coolsd.util.paths import EMOJI_DIR

K, CLASSES, STYLES, GRID = 32, ["cats", "cars", "hearts"], ["Twemoji", "Noto"], (4, 4)


@pytest.fixture(scope="module")
def emoji_dir(tmp_path_factory):
    """Random tiny parts of the emoji architecture, saved as vq/ target/ drafter/ classifier/ (fp16)."""
    root = tmp_path_factory.mktemp("emoji")
    torch.manual_seed(0)
    vq = VQModel(**(vq_config(K, channels=3, widths=(16, 16), latent_channels=4) | {"norm_num_groups": 8,
                                                                                    "sample_size": 8}))
    cfg = target_config(K, hidden=32, layers=2, heads=2, intermediate=64, grid=GRID, class_names=CLASSES,
                        style_names=STYLES)
    model = LlamaForCausalLM(cfg)
    for name, part in (("vq", vq), ("target", model), ("drafter", EagleHead(eagle_config(cfg))),
                       ("classifier", emoji_classifier(CLASSES, STYLES))):
        part.to(torch.float16).save_pretrained(root / name)
    return root


@pytest.fixture
def fp32_env(monkeypatch):
    monkeypatch.setenv(DTYPE_ENV, "fp32")


def test_condition_ids_map_to_class_and_style_tokens():
    cfg = target_config(K, hidden=32, layers=1, heads=2, intermediate=64, class_names=CLASSES, style_names=STYLES)
    assert num_conditions(cfg) == 6 and cfg.vocab_size == K + 3 + 1 + 2 + 1
    cond = torch.tensor([0, 1, 5])  # (cats, Twemoji), (cats, Noto), (hearts, Noto)
    assert condition_prefix(cfg, cond).tolist() == [[K, K + 4], [K, K + 5], [K + 2, K + 5]]
    assert condition_prefix(cfg, cond, null=True).tolist() == [[K + 3, K + 6]] * 3
    mnist = target_config(K, hidden=32, layers=1, heads=2, intermediate=64)
    assert condition_prefix(mnist, torch.tensor([7]), null=True).tolist() == [[K + 10]]


def test_target_start_equals_hf_logits_after_the_two_token_prefix():
    torch.manual_seed(1)
    cfg = target_config(K, hidden=32, layers=2, heads=2, intermediate=64, grid=GRID, class_names=CLASSES,
                        style_names=STYLES)
    model = LlamaForCausalLM(cfg).eval()
    target = LlamaClassTarget(model)
    step = target.start(5, guidance=True)  # (hearts, Noto) and the null row
    ids = torch.cat([condition_prefix(cfg, torch.tensor([5])), condition_prefix(cfg, torch.tensor([5]), True)])
    with torch.no_grad():
        ref = model(input_ids=ids).logits[:, -1:, :K]
    torch.testing.assert_close(step.logits, ref, atol=1e-4, rtol=1e-4)
    more = target.forward(torch.tensor([3, 9]), torch.arange(2))
    with torch.no_grad():
        ref2 = model(input_ids=torch.cat([ids, torch.tensor([[3, 9]] * 2)], 1)).logits[:, -2:, :K]
    torch.testing.assert_close(more.logits, ref2, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="class"):
        target.start(6, guidance=True)


def test_shipped_layout_loads_strictly_and_decodes_rgb(emoji_dir, fp32_env):
    b = load_emoji(emoji_dir, device="cpu", with_classifier=True)
    assert b.class_names[:2] == ["cats · Twemoji", "cats · Noto"] and len(b.class_names) == 6
    assert b.base_class_names == CLASSES and b.style_names == STYLES
    assert b.condition_name("cars", "Noto") == b.class_names[3]
    tokens = run(b.target, b.drafter, make_rule("eagle-1"), cond=3, num_tokens=b.num_tokens,
                 sampling=b.default_sampling, config=DecodeConfig(), seed=0).tokens
    image = b.tokenizer.decode(tokens)
    assert image.shape == (3, 2 * GRID[0], 2 * GRID[1]) and 0 <= image.min() and image.max() <= 1
    assert isinstance(b.classifier, ResNetForImageClassification)


def test_a_missing_or_broken_part_is_a_bundle_error(emoji_dir, tmp_path, fp32_env):
    with pytest.raises(BundleError, match="not found"):
        load_emoji(tmp_path / "nowhere", device="cpu")
    broken = tmp_path / "broken"
    for name in ("vq", "target", "drafter"):
        (broken / name).mkdir(parents=True)
        for f in (emoji_dir / name).iterdir():
            (broken / name / f.name).write_bytes(f.read_bytes())
    (broken / "vq" / "diffusion_pytorch_model.safetensors").write_bytes(b"not weights")
    with pytest.raises(BundleError, match="VQ tokenizer"):
        load_emoji(broken, device="cpu")


@pytest.mark.parametrize("choice,dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16)])
def test_the_dtype_variable_is_honoured_and_logged(emoji_dir, monkeypatch, caplog, choice, dtype):
    monkeypatch.setenv(DTYPE_ENV, choice)
    with caplog.at_level(logging.INFO, logger="coolsd"):
        b = load_emoji(emoji_dir, device="cpu")
    assert b.target.embed.dtype == dtype and b.drafter.embed.dtype == dtype
    assert b.execution.startswith(choice) and DTYPE_ENV in b.execution
    assert any(f"emoji model runs {choice}" in r.getMessage() for r in caplog.records)
    step = b.target.start(0, True)
    assert step.logits.dtype == torch.float32  # rules and sampling always see fp32 logits


def test_the_precision_follows_the_path_and_nothing_is_timed(emoji_dir, monkeypatch, tmp_path):
    """Precision is configuration keyed by the path, not by the machine: the fused path reads the type stored
    beside the model (precision.json), the eager CPU path runs fp32, COOLSD_DTYPE overrides both."""
    import shutil

    monkeypatch.delenv(DTYPE_ENV, raising=False)
    assert load_emoji(emoji_dir, device="cpu", execution_path="eager").execution == "fp32"
    stored = tmp_path / "stored"
    shutil.copytree(emoji_dir, stored)
    (stored / "precision.json").unlink(missing_ok=True)
    b = load_emoji(stored, device="cpu", execution_path="fused")
    assert b.execution == "fp32" and b.target.embed.dtype == torch.float32  # nothing stored: fp32
    (stored / "precision.json").write_text('{"fused": "bf16"}')
    b = load_emoji(stored, device="cpu", execution_path="fused")
    assert b.execution.startswith("bf16 weights, fp32 maths") and b.target.embed.dtype == torch.bfloat16
    assert load_emoji(stored, device="cpu", execution_path="eager").target.embed.dtype == torch.float32
    monkeypatch.setenv(DTYPE_ENV, "fp32")
    assert load_emoji(stored, device="cpu", execution_path="fused").target.embed.dtype == torch.float32
    monkeypatch.setenv(DTYPE_ENV, "fp64")
    with pytest.raises(BundleError, match=DTYPE_ENV):
        load_emoji(emoji_dir, device="cpu")


def test_race_on_the_emoji_model_equals_separate_runs(emoji_dir, fp32_env):
    b = load_emoji(emoji_dir, device="cpu")
    config = DecodeConfig(Chain(3))
    rules = {"eagle-1": make_rule("eagle-1"), "cool-sd": make_rule("cool-sd", delta=2.0),
             "lantern++": make_rule("lantern++", k=3, lam=5.0).with_neighbours(b.neighbours), "vanilla": None}
    lanes = {key: fork_models(b.target, b.drafter) for key in rules}
    solo = {key: fork_models(b.target, b.drafter) for key in rules}
    racers = [Racer(key, key, generate(lanes[key][0], lanes[key][1], rule, cond=4, num_tokens=b.num_tokens,
                                       sampling=b.default_sampling, config=config, seed=5), b.num_tokens)
              for key, rule in rules.items()]
    keys = [racer.key for racer, _ in Race(racers)]
    assert len(set(keys[:8])) > 1
    for racer, (key, rule) in zip(racers, rules.items()):
        target, drafter = solo[key]
        alone = run(target, drafter, rule, cond=4, num_tokens=b.num_tokens, sampling=b.default_sampling,
                    config=config, seed=5)
        assert racer.tokens.tolist() == alone.tokens.tolist(), key


def test_the_shipped_emoji_folder_loads_strictly_and_decodes_rgb(fp32_env):
    """Names, styles and sizes are read from the model (it is retrained with other names), never typed here."""
    folder = EMOJI_DIR
    b = load_emoji(folder, device="cpu", with_classifier=True)
    names, styles = b.base_class_names, b.style_names
    assert len(names) == len(set(names)) >= 12 and len(styles) >= 2 and b.grid == (16, 16)
    assert len(b.class_names) == len(names) * len(styles) == b.conditions.count
    labels = b.classifier.config.id2label  # the judge of the same emoji and styles, in the same order
    assert [labels[i] for i in range(len(labels))] == [f"class:{n}" for n in names] + [f"style:{s}" for s in styles]
    scale = 2 ** (len(b.tokenizer.vq.config.block_out_channels) - 1)  # pixels per token side
    image = b.tokenizer.decode(torch.zeros(b.num_tokens, dtype=torch.long))
    assert image.shape == (3, 16 * scale, 16 * scale) and 0 <= image.min() and image.max() <= 1
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    assert size <= 80e6  # a 24-layer target in fp16 and its benchmark
    assert (folder / "classifier" / "real_stats.safetensors").is_file()


def test_the_shipped_assets_fit_the_issue_budget():
    """assets/ at most 120 MB in all (models, benchmarks, traces, screenshots), in this checkout."""
    size = sum(f.stat().st_size for f in EMOJI_DIR.parent.rglob("*") if f.is_file())
    assert size <= 120e6, f"assets/ holds {size / 1e6:.1f} MB"


def test_the_shipped_target_dwarfs_its_head():
    """The shipped target is deep and its Eagle-1 head one layer beside it: at most a tenth of the target's layer
    weights, and the target's weights past a typical 32 MB L3 cache in the type the fused path reads."""
    target = json.loads((EMOJI_DIR / "target" / "config.json").read_text())
    head = json.loads((EMOJI_DIR / "drafter" / "config.json").read_text())
    d, inter = target["hidden_size"], target["intermediate_size"]
    per_layer = 4 * d * d + 3 * d * inter  # q, k, v, o + gate, up, down (heads of the hidden size)
    assert target["num_hidden_layers"] >= 24 and head.get("num_hidden_layers", 1) == 1
    head_weights = head.get("num_hidden_layers", 1) * per_layer + 2 * d * d  # + its fc over [feature, embedding]
    assert head_weights <= target["num_hidden_layers"] * per_layer / 10
    assert target["num_hidden_layers"] * per_layer * 2 > 32 * 2**20  # bf16 bytes the fused path reads a step


@pytest.mark.slow
@pytest.mark.skipif(not __import__("coolsd.models.rowkernel", fromlist=["available"]).available(),
                    reason="no AVX2 / FMA CPU or no C compiler here")
@pytest.mark.parametrize("guidance", [False, True])
def test_a_verify_rows_logits_equal_one_token_steps_bit_for_bit(guidance):
    """On the shipped target's fused path, a call of 4 tokens (a verify at L = 3), of 2 + 2 or 1 + 3 gives each token
    the logits and features of four one-token calls, bit for bit: vanilla AR and every racer compute the same p."""
    b = load_emoji(EMOJI_DIR, device="cpu")
    assert b.path == "fused"
    ids = torch.tensor([5, 900, 17, 1203])
    results = []
    for split in ((1, 1, 1, 1), (4,), (2, 2), (1, 3)):
        target = b.target.fork()
        target.start(b.condition("cat face", "Noto"), guidance)
        steps, at = [], 0
        for n in split:
            steps.append(target.forward(ids[at : at + n], torch.arange(at, at + n)))
            at += n
        results.append((torch.cat([s.logits for s in steps], dim=1), torch.cat([s.hidden for s in steps], dim=1)))
    logits, hidden = results[0]
    assert logits.shape == (2 if guidance else 1, 4, b.target.vocab_size)
    for other_logits, other_hidden in results[1:]:
        assert torch.equal(other_logits, logits) and torch.equal(other_hidden, hidden)


def test_the_named_emoji_model_names_each_emoji_its_group_character_and_credits(fp32_env):
    """Issue 25's model: one class per emoji, named in words, four styles, a start every visitor knows, the
    artwork's authors and licences, which the page shows (`ModelBundle.credits`), and the sampling it stores."""
    from coolsd.decoding.sampling import SamplingConfig
    from coolsd.models.patch_vq import PatchVQModel

    b = load_emoji(EMOJI_DIR, device="cpu")
    assert isinstance(b.tokenizer.vq, PatchVQModel)  # the local tokenizer: equal patches, equal codes
    assert b.default_sampling == SamplingConfig(cfg_scale=1.0, temperature=1.0) and len(b.base_class_names) == 187
    names = b.base_class_names
    assert b.style_names == ["Twemoji", "Noto", "Fluent Flat", "EmojiOne"]
    assert len(b.class_groups) == len(b.class_chars) == len(names) and b.default_class in names
    assert {"cat face", "red apple", "rocket", "rainbow", *SHEET_EMOJI} <= set(names)  # the README's sample sheet
    assert b.class_chars[names.index("red apple")] == "\U0001F34E"
    for credit in ("Twemoji", "CC-BY 4.0", "Noto", "Apache-2.0", "Fluent", "MIT", "EmojiOne"):
        assert credit in b.credits, credit
    assert b.condition("cat face", "Noto") == names.index("cat face") * 4 + 1


def test_a_model_folder_may_store_its_own_sampling(tmp_path):
    """`default_sampling` in the target config is the sampling the model is shown with; without it, CFG 3."""
    from coolsd.decoding.sampling import SamplingConfig
    from coolsd.models.emoji import EMOJI_SAMPLING, stored_sampling

    (tmp_path / "target").mkdir()
    assert stored_sampling(tmp_path) == EMOJI_SAMPLING and EMOJI_SAMPLING.cfg_scale == 3.0  # no config at all
    config = tmp_path / "target" / "config.json"
    config.write_text('{"num_classes": 2}')
    assert stored_sampling(tmp_path) == EMOJI_SAMPLING
    config.write_text('{"default_sampling": {"cfg_scale": 1.0, "temperature": 0.5, "top_k": 7, "top_p": 1.0}}')
    assert stored_sampling(tmp_path) == SamplingConfig(cfg_scale=1.0, temperature=0.5, top_k=7, top_p=1.0)
    config.write_text('{"default_sampling": {"cfg_scale": 1.0, "temperature": -1}}')
    with pytest.raises(ValueError, match="temperature"):
        stored_sampling(tmp_path)


def test_a_folder_with_a_channel_loads_a_hesitating_target_that_races_exactly(emoji_dir, fp32_env, tmp_path):
    root = tmp_path / "m"
    shutil.copytree(emoji_dir, root)
    config = json.loads((root / "target" / "config.json").read_text())
    (root / "target" / "config.json").write_text(json.dumps(config | {"lookalike_channel": {"sigma2": 0.5, "k": 4}}))
    plain, wrapped = load_emoji(emoji_dir, device="cpu"), load_emoji(root, device="cpu")
    assert not isinstance(plain.target, ChannelTarget) and isinstance(wrapped.target, ChannelTarget)
    kernel = lookalike_kernel(wrapped.tokenizer.codebook, 0.5, 4)
    a, b = plain.target.start(3, False), wrapped.target.start(3, False)
    assert torch.allclose(b.logits.exp(), torch.softmax(a.logits.float(), -1) @ kernel, atol=1e-6)
    for rule in (None, make_rule("eagle-1"), make_rule("cool-sd", delta=2.0)):
        out = [run(wrapped.target.fork(), wrapped.drafter.fork(wrapped.target) if rule else None, rule, cond=3,
                   num_tokens=wrapped.num_tokens, sampling=wrapped.default_sampling, config=DecodeConfig(Chain(2)),
                   seed=s) for s in (1, 1, 2)]
        assert out[0].tokens.tolist() == out[1].tokens.tolist()  # a seed fixes the tokens


def test_a_channel_temperature_sharpens_the_target_and_its_drafter_alike(emoji_dir, fp32_env, tmp_path):
    root = tmp_path / "m"
    shutil.copytree(emoji_dir, root)
    config = json.loads((root / "target" / "config.json").read_text())
    channel = {"sigma2": 0.5, "k": 4, "temperature": 0.5}
    (root / "target" / "config.json").write_text(json.dumps(config | {"lookalike_channel": channel}))
    plain, wrapped = load_emoji(emoji_dir, device="cpu"), load_emoji(root, device="cpu")
    kernel = lookalike_kernel(wrapped.tokenizer.codebook, 0.5, 4)
    a, b = plain.target.start(3, False), wrapped.target.start(3, False)
    assert torch.allclose(b.logits.exp(), torch.softmax(a.logits.float() / 0.5, -1) @ kernel, atol=1e-6)
    assert plain.drafter.temperature == 1.0 and wrapped.drafter.temperature == 0.5
    ids, positions = torch.tensor([5, 9]), torch.tensor([2, 3])
    hidden = torch.randn(1, 2, plain.drafter.embed.shape[1])
    steps = []
    for bundle in (plain, wrapped):
        bundle.drafter.start(3, False)
        steps.append(bundle.drafter.forward(ids, hidden, positions).logits)
    assert torch.allclose(steps[1], steps[0] / 0.5, atol=1e-5)
