"""LlamaGen target, drafter, VQ-16 decoder and loaders on tiny random configurations (CPU, seeded)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from llamagen_weights import (  # tests/ helper
    PUBLISHED_CONFIG,
    TINY,
    TINY_VQ,
    C,
    D,
    E,
    V,
    nested_layout,
    original_layout,
    published_drafter,
    published_target,
    published_vq,
    write_t5,
)
from safetensors.torch import save_file

from coolsd.decoding.drafting import chain_or_tree
from coolsd.decoding.neighbours import neighbour_table
from coolsd.models.llamagen import (
    CaptionEmbedding,
    CheckpointMismatch,
    LlamaGenConfig,
    LlamaGenDrafter,
    LlamaGenT2I,
    T5CaptionEncoder,
    VQ16Tokenizer,
    find_llamagen,
    load_llamagen,
    load_original_target,
)
from coolsd.models.llamagen.caption import left_pad
from coolsd.models.llamagen.clean import clean_caption, clean_caption_once
from coolsd.models.llamagen.layers import apply_rope, rope_2d
from coolsd.models.llamagen.loaders import load_drafter, load_target, load_vq
from coolsd.models.protocol import Drafter, ImageTokenizer, TokenModel

torch.set_num_threads(1)



def randomise(module: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            base = 1.0 if name.endswith(("norm_attn.weight", "norm_mlp.weight")) else 0.0
            tensor.copy_(base + 0.3 * torch.randn(tensor.shape, generator=gen))


@pytest.fixture(scope="module")
def target() -> LlamaGenT2I:
    model = LlamaGenT2I(LlamaGenConfig(**TINY)).eval()
    randomise(model, 0)
    return model


@pytest.fixture(scope="module")
def drafter(target) -> LlamaGenDrafter:
    model = LlamaGenDrafter(LlamaGenConfig(**{**TINY, "num_hidden_layers": 1}), target).eval()
    randomise(model, 1)
    return model


@pytest.fixture(scope="module")
def caption() -> torch.Tensor:
    return torch.randn(C, E, generator=torch.Generator().manual_seed(2))


def additive_mask(allowed: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """bool -> float32 additive mask: 0 where allowed, the minimum of `dtype` elsewhere."""
    return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(dtype).min)


def reference_forward(
    model: LlamaGenT2I, cap: CaptionEmbedding, ids: torch.Tensor, guidance: bool, padded: str = "lantern"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Whole sequence without a cache, RoPE as complex multiplication.

    Returns logits (G, n + 1, V) (row 0 predicts token 0) and final-normed features (G, C + n, D).
    `padded` says how caption slots are masked: "lantern" adds LANTERN's two float masks, causal at the
    float32 minimum and padding at the bfloat16 minimum (its default precision), in float32: a left-
    padded slot then sees the padded slots before it (their sum overflows to -inf; a future valid
    slot sits at the lower float32 minimum and gets no weight),
    "eye" lets a padded slot see itself only (LlamaGen's `generate`), "all" lets a slot that sees
    nothing see every slot (this project before the fix).
    """
    cfg, n = model.config, ids.numel()
    heads, hd, S = cfg.num_attention_heads, cfg.head_dim, C + n
    rows = [cap.emb * cap.mask[:, None]] + ([model.caption.uncond] if guidance else [])
    G = len(rows)
    x = torch.cat([model.caption(torch.stack(rows)), model.tok_emb(ids)[None].expand(G, -1, -1)], dim=1)
    freqs = cfg.rope_base ** (-torch.arange(hd // 4) / (hd // 4))
    width = cfg.grid[1]
    angle = torch.cat(
        [torch.outer((torch.arange(n) // width).float(), freqs), torch.outer((torch.arange(n) % width).float(), freqs)],
        dim=1,
    )
    rot = torch.cat([torch.zeros(C, hd // 2, dtype=torch.complex64), torch.polar(torch.ones_like(angle), angle)])
    causal = torch.ones(S, S, dtype=torch.bool).tril()
    valid = torch.cat([cap.mask, torch.ones(n, dtype=torch.bool)])
    if padded == "lantern":
        bias = additive_mask(causal) + additive_mask(valid[None, :].expand(S, S), torch.bfloat16)
    else:
        allowed = causal & valid
        empty = ~allowed.any(1, keepdim=True)
        allowed |= (torch.eye(S, dtype=torch.bool) & empty) if padded == "eye" else empty
        bias = additive_mask(allowed)

    def turn(t):  # (G, S, heads, hd) -> same, pairs (2j, 2j+1) rotated
        pairs = torch.view_as_complex(t.reshape(G, S, heads, hd // 2, 2).contiguous())
        return torch.view_as_real(pairs * rot[None, :, None]).reshape(G, S, heads, hd)

    for layer in model.layers:
        h = layer.norm_attn(x)
        q, k, v = (proj(h).view(G, S, heads, hd) for proj in (layer.attn.q, layer.attn.k, layer.attn.v))
        scores = torch.einsum("gshd,gthd->ghst", turn(q), turn(k)) / math.sqrt(hd)
        weights = (scores + bias).softmax(-1)
        out = torch.einsum("ghst,gthd->gshd", weights, v).reshape(G, S, D)
        x = x + layer.attn.o(out)
        x = x + layer.mlp(layer.norm_mlp(x))
    features = model.norm(x)
    return model.head(features[:, C - 1 :]).float(), features


def reference_logits(model: LlamaGenT2I, cap: CaptionEmbedding, ids: torch.Tensor, guidance: bool) -> torch.Tensor:
    return reference_forward(model, cap, ids, guidance)[0]


# --- target ---------------------------------------------------------------------------------


def test_protocols(target, drafter):
    assert isinstance(target, TokenModel)
    assert isinstance(drafter, Drafter)
    assert isinstance(VQ16Tokenizer(TINY_VQ, (4, 4)), ImageTokenizer)


@pytest.mark.parametrize("guidance", [True, False])
def test_cached_equals_uncached(target, caption, guidance):
    ids = torch.randint(0, V, (16,), generator=torch.Generator().manual_seed(3))
    expected = reference_logits(target, CaptionEmbedding.from_tensor(caption), ids, guidance)
    first = target.start(caption, guidance)
    whole = target.forward(ids, torch.arange(16)).logits
    torch.testing.assert_close(torch.cat([first.logits, whole], 1), expected, atol=1e-4, rtol=1e-4)
    target.start(caption, guidance)
    steps = [target.forward(ids[i : i + 1], torch.tensor([i])).logits for i in range(16)]
    torch.testing.assert_close(torch.cat(steps, 1), whole, atol=1e-4, rtol=1e-4)
    assert target.length == 16


def test_rope_2d_positions_on_grid():
    hd, base = 16, 10000.0
    cos, sin = rope_2d(torch.tensor([-1, 0, 6, 15, 16]), (4, 4), hd, base)
    angle = torch.atan2(sin, cos)  # (5, 8)
    freqs = base ** (-torch.arange(4) / 4)
    torch.testing.assert_close(angle[2], torch.cat([1 * freqs, 2 * freqs]))  # index 6 = row 1, column 2
    torch.testing.assert_close(angle[3], torch.cat([3 * freqs, 3 * freqs]))  # index 15 = (3, 3)
    torch.testing.assert_close(cos[1], torch.ones(8))  # (0, 0): identity
    for zero in (0, 4):  # caption slot (-1) and past the grid (16): no rotation, q/k zeroed
        assert cos[zero].abs().max() == 0 and sin[zero].abs().max() == 0
        assert apply_rope(torch.randn(1, 1, 1, hd), cos[zero : zero + 1], sin[zero : zero + 1]).abs().max() == 0
    # pairs are interleaved: (x0, x1) turns into (cos, sin) of the first row angle
    x = torch.zeros(1, 1, 1, hd)
    x[..., 0] = 1
    turned = apply_rope(x, cos[2:3], sin[2:3])[0, 0, 0]
    torch.testing.assert_close(turned[:2], torch.stack([cos[2, 0], sin[2, 0]]))


def test_cfg_rows(target, caption):
    both = target.start(caption, True)
    assert both.logits.shape == (2, 1, V) and both.hidden.shape == (2, 1, D)
    step = target.forward(torch.tensor([1, 2, 3]), torch.arange(3))
    assert step.logits.shape == (2, 3, V) and step.hidden.shape == (2, 3, D) and step.logits.dtype == torch.float32
    single = target.start(caption, False)
    assert single.logits.shape == (1, 1, V)
    torch.testing.assert_close(single.logits[0], both.logits[0])
    other = target.start(caption + 1, True)  # a new caption changes the cond row only
    torch.testing.assert_close(other.logits[1], both.logits[1])
    assert (other.logits[0] - both.logits[0]).abs().max() > 1e-3
    assert target.prefix_hidden.shape == (2, C, D)


def test_padded_caption_slots_are_ignored(target, caption):
    cap = left_pad(caption, torch.tensor([True, True, True, False, False, False]))
    assert cap.mask.tolist() == [False, False, False, True, True, True]
    torch.testing.assert_close(cap.emb[3:], caption[:3])
    assert cap.emb[:3].abs().max() == 0
    ids = torch.tensor([5, 9, 1])
    expected = reference_logits(target, cap, ids, True)
    noisy = CaptionEmbedding(cap.emb + 5.0 * (~cap.mask)[:, None], cap.mask)  # garbage on padded rows
    first = target.start(noisy, True)
    out = target.forward(ids, torch.arange(3))
    torch.testing.assert_close(torch.cat([first.logits, out.logits], 1), expected, atol=1e-4, rtol=1e-4)


def test_padded_caption_features_are_exactly_zero_in_the_cond_row(target, caption):
    cap = left_pad(caption, torch.tensor([True, True, False, False, False, False]))  # 4 padded slots
    target.start(cap, True)
    features = target.prefix_hidden  # (2, C, D)
    assert features[0, :4].abs().max() == 0  # exactly zero, as upstream
    assert features[1, :4].abs().min() > 0  # the uncond row holds the learned caption there
    _, lantern = reference_forward(target, cap, torch.tensor([1]), True, padded="lantern")
    torch.testing.assert_close(features, lantern[:, :C], atol=1e-5, rtol=1e-5)
    _, eye = reference_forward(target, cap, torch.tensor([1]), True, padded="eye")  # LlamaGen's generate
    torch.testing.assert_close(features[0], eye[0, :C], atol=1e-5, rtol=1e-5)  # same cond row
    _, old = reference_forward(target, cap, torch.tensor([1]), True, padded="all")
    assert old[0, :4].abs().max() > 0.1  # what the previous mask produced


def test_drafter_reads_the_padded_features_as_lantern_does(target, drafter, caption):
    """The drafter's prefix holds the target's caption features; with the old mask its answer changes."""
    cap = left_pad(caption, torch.tensor([True, True, False, False, False, False]))
    first = target.start(cap, True)
    token, position = torch.tensor([4]), torch.tensor([0])
    drafter.start(cap, True)
    ours = drafter.forward(token, first.hidden, position).logits
    answers = {}
    for padded in ("lantern", "all"):
        _, features = reference_forward(target, cap, token, True, padded=padded)
        target.prefix_hidden = features[:, :C]  # what the drafter's prefix reads
        drafter.start(cap, True)
        answers[padded] = drafter.forward(token, first.hidden, position).logits
    torch.testing.assert_close(ours, answers["lantern"], atol=1e-4, rtol=1e-4)
    assert (ours - answers["all"]).abs().max() > 1e-2
    assert (ours.argmax(-1) != answers["all"].argmax(-1)).any() or (ours - answers["all"]).abs().max() > 0.1


def test_crop_and_keep_equal_recompute(target, caption):
    committed, nodes = torch.tensor([3, 1, 4, 1, 5]), torch.tensor([9, 2, 6, 5])
    # tree after the 5 committed slots: n0, n1 at depth 1; n2 child of n1, n3 child of n0
    target.start(caption, True)
    target.forward(committed, torch.arange(5))
    mask = torch.zeros(4, 9, dtype=torch.bool)
    mask[:, :5] = True
    for row, ancestors in enumerate([[0], [1], [1, 2], [0, 3]]):
        mask[row, [5 + a for a in ancestors]] = True
    tree = target.forward(nodes, torch.tensor([5, 5, 6, 6]), mask).logits
    target.crop(5, keep=torch.tensor([6, 7]))  # accept the path n1 -> n2
    assert target.length == 7
    after = target.forward(torch.tensor([8]), torch.tensor([7])).logits
    fresh = reference_logits(
        target, CaptionEmbedding.from_tensor(caption), torch.tensor([3, 1, 4, 1, 5, 2, 6, 8]), True
    )
    torch.testing.assert_close(tree[:, 1:3], fresh[:, 6:8], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(after, fresh[:, 8:9], atol=1e-4, rtol=1e-4)
    target.crop(2)  # plain rollback
    again = target.forward(torch.tensor([4]), torch.tensor([2])).logits
    torch.testing.assert_close(again, fresh[:, 3:4], atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="keep"):
        target.crop(1, keep=torch.tensor([0]))
    with pytest.raises(ValueError, match="crop length"):
        target.crop(9)


def test_string_prompt_needs_an_encoder(target):
    with pytest.raises(ValueError, match="T5"):
        target.start("a red cat", True)


# --- drafter ----------------------------------------------------------------------------------


def test_drafter_shapes_and_contract(target, drafter, caption):
    first = target.start(caption, True)
    ids = torch.tensor([7, 3, 2, 11])
    feats = torch.cat([first.hidden, target.forward(ids[:3], torch.arange(3)).hidden], 1)  # feature before each id
    drafter.start(caption, True)
    whole = drafter.forward(ids, feats, torch.arange(4))
    assert whole.logits.shape == (2, 4, V) and whole.hidden.shape == (2, 4, D)
    assert "head.weight" not in drafter.state_dict()  # the LM head is the target's
    drafter.start(caption, True)
    steps = [drafter.forward(ids[i : i + 1], feats[:, i : i + 1], torch.tensor([i])).logits for i in range(4)]
    torch.testing.assert_close(torch.cat(steps, 1), whole.logits, atol=1e-4, rtol=1e-4)
    # hidden=None reads the drafter's own output at the previous slot, also after a crop
    chained = drafter.forward(torch.tensor([5]), None, torch.tensor([4]))
    explicit_hidden = whole.hidden[:, 3:4]
    drafter.crop(4)
    explicit = drafter.forward(torch.tensor([5]), explicit_hidden, torch.tensor([4]))
    torch.testing.assert_close(chained.logits, explicit.logits)
    with pytest.raises(ValueError, match="n == 1"):
        drafter.forward(torch.tensor([1, 2]), None, torch.tensor([5, 6]))


def test_drafter_reads_the_caption_through_the_target(target, drafter, caption):
    outs = []
    for cap in (caption, caption + 1):
        first = target.start(cap, True)
        drafter.start(cap, True)
        outs.append(drafter.forward(torch.tensor([4]), first.hidden * 0, torch.tensor([0])).logits)
    assert (outs[0] - outs[1]).abs().max() > 1e-4  # same token and feature: only the prefix differs
    target.start(caption, False)
    drafter.start(caption, True)
    with pytest.raises(RuntimeError, match="same guidance"):
        drafter.forward(torch.tensor([4]), torch.zeros(2, 1, D), torch.tensor([0]))


# --- VQ-16 ------------------------------------------------------------------------------------


def test_vq_decoder_image_size_and_neighbours():
    vq = VQ16Tokenizer(TINY_VQ, grid=(4, 4))
    randomise(vq, 4)
    image = vq.decode(torch.randint(0, V, (16,)))
    assert image.shape == (3, 8, 8) and image.min() >= 0 and image.max() <= 1  # f = 2 with ch_mult (1, 2)
    assert vq.decode(torch.randint(0, V, (4, 4))).shape == (3, 8, 8)
    with pytest.raises(ValueError, match="16 tokens"):
        vq.decode(torch.zeros(15, dtype=torch.long))
    table = neighbour_table(vq.codes(), k_max=4)
    assert table.shape == (V, 5) and not (table == torch.arange(V)[:, None]).any()
    with torch.device("meta"):
        published = VQ16Tokenizer()
    assert published.factor == 16 and published.decoder.conv_in.out_channels == 512
    assert [level.res[-1].conv2.out_channels for level in published.decoder.levels] == [512, 256, 256, 128, 128]


# --- loaders: synthetic checkpoints with the published names ----------------------------------













@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("llamagen")
    (root / "target").mkdir()
    (root / "target" / "config.json").write_text(json.dumps(PUBLISHED_CONFIG))
    save_file(published_target(), root / "target" / "model.safetensors")
    (root / "drafter").mkdir()
    (root / "drafter" / "config.json").write_text(json.dumps({**PUBLISHED_CONFIG, "num_hidden_layers": 1}))
    torch.save(published_drafter(), root / "drafter" / "pytorch_model.bin")
    torch.save({"model": published_vq(), "steps": 1}, root / "vq_ds16_t2i.pt")
    write_t5(root / "t5")
    return root


def test_loaders_fill_every_parameter_from_published_names(weights_dir):
    state = published_target()
    target = load_target(weights_dir / "target")
    torch.testing.assert_close(target.layers[1].attn.k.weight, state["model.layers.1.self_attn.k_proj.weight"])
    torch.testing.assert_close(target.caption.uncond, state["model.cls_embedding.uncond_embedding"])
    torch.testing.assert_close(target.head.weight, state["lm_head.weight"])
    drafter = load_drafter(weights_dir / "drafter", target)
    torch.testing.assert_close(drafter.fc.bias, published_drafter()["fc.bias"])
    vq = load_vq(weights_dir / "vq_ds16_t2i.pt", (4, 4), config=TINY_VQ)
    torch.testing.assert_close(
        vq.decoder.levels[1].res[0].skip.weight, published_vq()["decoder.conv_blocks.1.res.0.nin_shortcut.weight"]
    )
    assert vq.decode(torch.zeros(16, dtype=torch.long)).shape == (3, 8, 8)


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            "rename",
            r"missing keys \(1\): model.layers.1.mlp.up_proj.weight(.|\n)*unexpected keys \(1\): model.layers.1.mlp.up",
        ),
        ("drop", r"missing keys \(1\): model.layers.1.mlp.up_proj.weight"),
        ("reshape", r"shape mismatches \(1\): model.layers.1.mlp.up_proj.weight \(48, 31\)"),
        ("extra", r"unexpected keys \(1\): model.extra"),
    ],
)
def test_wrong_checkpoint_fails_clearly(tmp_path, change, expected):
    state = published_target()
    key = "model.layers.1.mlp.up_proj.weight"
    if change == "rename":
        state["model.layers.1.mlp.up_projection.weight"] = state.pop(key)
    elif change == "drop":
        del state[key]
    elif change == "reshape":
        state[key] = state[key][:, :31].contiguous()
    else:
        state["model.extra"] = torch.zeros(1)
    state["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.zeros(4)  # derived buffers are fine
    (tmp_path / "config.json").write_text(json.dumps(PUBLISHED_CONFIG))
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointMismatch, match=expected):
        load_target(tmp_path)


def test_vq_checkpoint_without_model_entry_fails(tmp_path):
    torch.save(published_vq(), tmp_path / "vq.pt")
    with pytest.raises(CheckpointMismatch, match="'model' entry"):
        load_vq(tmp_path / "vq.pt", (4, 4), config=TINY_VQ)


def test_find_and_load_llamagen(weights_dir, monkeypatch, tmp_path):
    monkeypatch.delenv("COOLSD_LLAMAGEN_DIR", raising=False)
    assert find_llamagen() is None
    monkeypatch.setenv("COOLSD_LLAMAGEN_DIR", str(tmp_path))  # empty folder
    assert find_llamagen() is None
    monkeypatch.setenv("COOLSD_LLAMAGEN_DIR", str(weights_dir))
    assert find_llamagen() == weights_dir
    with pytest.raises(CheckpointMismatch, match="LlamaGen VQ"):  # the published VQ widths do not fit
        load_llamagen(device="cpu")
    bundle = load_llamagen(device="cpu", k_max=4, vq_config=TINY_VQ)
    assert bundle.grid == (4, 4) and bundle.conditioning == "text" and bundle.name == "LlamaGen T2I (8 px)"
    assert bundle.neighbours.shape == (V, 5) and bundle.neighbours.dtype == torch.int64
    raw = published_vq()["quantize.embedding.weight"]
    assert torch.equal(bundle.neighbours, neighbour_table(raw, k_max=4))  # LANTERN's ranking by default
    assert not torch.equal(bundle.neighbours, neighbour_table(raw, k_max=4, normalise=True))
    assert isinstance(bundle.target, TokenModel) and bundle.drafter.target is bundle.target
    assert bundle.target.start("a red dog", True).logits.shape == (2, 1, V)


def test_t5_prompt_path(weights_dir):
    encoder = T5CaptionEncoder(weights_dir / "t5", max_length=C)
    cap = encoder("A  red cat")
    assert cap.emb.shape == (C, E) and cap.mask.tolist() == [False, False, True, True, True, True]  # a red cat </s>
    target = load_target(weights_dir / "target", caption_encoder=encoder)
    assert target.start("a red cat", True).logits.shape == (2, 1, V)


# --- a full speculative generation through the engine -----------------------------------------


@pytest.mark.parametrize("tree", [None, "binary-2", "lantern-57"])
def test_engine_generation_each_rule(target, drafter, caption, tree):
    from coolsd.decoding.engine import DecodeConfig, run
    from coolsd.decoding.rules import make_rule
    from coolsd.decoding.sampling import SamplingConfig

    vq = VQ16Tokenizer(TINY_VQ, grid=(4, 4))
    table = neighbour_table(vq.codes(), k_max=4)
    rules = [
        make_rule("eagle-1"),
        make_rule("lantern++", k=2, lam=5.0, neighbours=table),
        make_rule("uniform-rsd", delta=2.0),
        make_rule("cool-sd", delta=2.0),
    ]
    sampling, config = SamplingConfig(cfg_scale=3.0, top_k=20), DecodeConfig(chain_or_tree(3, tree))
    for rule in rules:
        result = run(target, drafter, rule, cond=caption, num_tokens=16, sampling=sampling, config=config, seed=0)
        assert result.tokens.shape == (16,) and 0 <= int(result.tokens.min()) and int(result.tokens.max()) < V
        again = run(target, drafter, rule, cond=caption, num_tokens=16, sampling=sampling, config=config, seed=0)
        assert torch.equal(result.tokens, again.tokens)
    # greedy: every speculative decoder reproduces vanilla greedy decoding token for token
    greedy = SamplingConfig(cfg_scale=3.0, temperature=0.0)
    vanilla = run(target, None, None, cond=caption, num_tokens=16, sampling=greedy, config=config, seed=0)
    for rule in rules:
        assert torch.equal(run(target, drafter, rule, cond=caption, num_tokens=16, sampling=greedy, config=config,
                               seed=0).tokens, vanilla.tokens)


# --- caption cleaning, LANTERN's static tree, neighbour ranking ---------------------------------

# (prompt, what upstream's cleaner gives after its two passes), read off LlamaGen's `language/t5.py`
CLEANED = [
    ("A photo of a cat, see https://example.com/cats?id=3 for more", "a photo of a cat, see ?id=3 for more"),
    ("visit www.catpics.org/gallery today", "visit today"),
    ("Thanks @john_doe99 for the photo", "thanks for the photo"),
    ("<p>A <b>red</b> apple &amp; a pear</p>", "a red apple a pear"),
    ("a 2x2 grid of tiles", "a grid of tiles"),
    ("a poster 1.5×3 meters", "a poster meters"),
    ("the u.s. flag", "the u. s. flag"),
    ("a cat 猫 sitting on a mat", "a cat sitting on a mat"),
    ("a happy dog 🐶 in the park!!!", "a happy dog 🐶 in the park!!!"),
    ("wait... what???", "wait what???"),
    ("my-cute-little-cat-photo", "my cute little cat photo"),
    ("an image file IMG_1234.jpg of a bridge", "an image file of a bridge"),
    ("“Quoted” text — with an em dash", '"quoted" text - with an em dash'),
    ("'a lone quoted caption'", "a lone quoted caption"),
    ("product ab1234 free shipping worldwide", "product worldwide"),
    ("server at 192.168.0.1 glowing", "server at glowing"),
    ("A  Red   Cat ", "a red cat"),
    ("caf%C3%A9+latte art", "café latte art"),
    ("a robot (with a hat) [3d render] {cute} | blue", "a robot with a hat 3d render cute blue"),
]


@pytest.mark.parametrize("prompt, cleaned", CLEANED)
def test_caption_cleaning_matches_upstream(prompt, cleaned):
    assert clean_caption(prompt) == cleaned
    assert clean_caption(cleaned) == cleaned  # stable on its own output for these


@pytest.mark.parametrize(
    "prompt, once, twice",
    [
        ("&lt;b&gt;bold&lt;/b&gt; cat", "<b>bold< b> cat", "bold< b> cat"),  # escaped tags surface in pass 1
        ("_'a cat'", "'a cat", "a cat"),  # one stray mark per pass
    ],
)
def test_caption_cleaning_runs_twice_as_upstream(prompt, once, twice):
    assert clean_caption_once(prompt) == once
    assert clean_caption(prompt) == twice == clean_caption_once(once)


def test_t5_encoder_cleans_prompts(weights_dir):
    encoder = T5CaptionEncoder(weights_dir / "t5", max_length=C)
    plain = encoder("a red cat")
    for noisy in ("A <b>Red</b> cat @someone", "a red cat https://cats.com/x", "A 2x2 red cat"):
        torch.testing.assert_close(encoder(noisy).emb, plain.emb)


def test_lantern_static_tree_shape():
    from collections import Counter

    from coolsd.decoding.tree import NAIVE_EXTEND_57, TREES, validate

    assert TREES["lantern-57"] is NAIVE_EXTEND_57
    assert len(NAIVE_EXTEND_57) == len(set(NAIVE_EXTEND_57)) == 57
    validate(NAIVE_EXTEND_57)
    assert sorted(Counter(map(len, NAIVE_EXTEND_57)).items()) == [(1, 5), (2, 13), (3, 16), (4, 14), (5, 9)]
    children = Counter(path[:-1] for path in NAIVE_EXTEND_57)
    assert [children[p] for p in [(), (0,), (1,), (2,), (3,), (4,)]] == [5, 4, 3, 3, 2, 1]
    assert [children[p] for p in [(0, 0), (0, 0, 0), (0, 0, 0, 0)]] == [4, 4, 3]
    assert max(NAIVE_EXTEND_57, key=len) == (0, 0, 0, 0, 0)


def test_neighbours_ranked_on_raw_codes_as_lantern():
    gen = torch.Generator().manual_seed(9)
    codebook = torch.randn(40, 3, generator=gen) * torch.rand(40, 1, generator=gen) * 3  # codes of mixed norms
    table = neighbour_table(codebook, k_max=6)
    distance = torch.cdist(codebook, codebook).fill_diagonal_(math.inf)
    assert torch.equal(table, distance.argsort(dim=1, stable=True)[:, :7])  # raw Euclidean, nearest first
    cosine = neighbour_table(codebook, k_max=6, normalise=True)  # the option: unit codes
    assert not torch.equal(cosine, table)
    unit = torch.nn.functional.normalize(codebook, dim=-1)
    assert torch.equal(cosine, torch.cdist(unit, unit).fill_diagonal_(math.inf).argsort(dim=1, stable=True)[:, :7])


# --- LlamaGen's own checkpoint layout ---------------------------------------------------------




def save_original(path, state, entry="model"):
    import argparse

    torch.save({entry: state, "args": argparse.Namespace(gpt_model="GPT-XL"), "steps": 10}, path)


def test_both_target_layouts_give_the_same_logits(weights_dir, tmp_path, caption):
    from coolsd.models.llamagen.loaders import original_config

    state = original_layout(published_target())
    save_original(tmp_path / "t2i_tiny_256.pt", state)
    config = original_config(state, block_size=16)
    assert (config.hidden_size, config.num_hidden_layers, config.intermediate_size) == (D, 2, 48)
    assert (config.caption_dim, config.cls_token_num, config.rms_norm_eps) == (E, C, 1e-5)
    assert config.num_attention_heads == 1  # hidden / 64, at least one
    converted = load_target(weights_dir / "target")
    original = load_original_target(tmp_path / "t2i_tiny_256.pt", config=converted.config)
    for name, tensor in converted.state_dict().items():
        assert torch.equal(tensor, original.state_dict()[name]), name
    ids = torch.tensor([3, 1, 4, 1])
    for model in (converted, original):
        first = model.start(caption, True)
        model.logits = torch.cat([first.logits, model.forward(ids, torch.arange(4)).logits], 1)
    torch.testing.assert_close(converted.logits, original.logits, atol=0, rtol=0)
    # a folder holding only the .pt is read as the original layout; block size from the name (256 px)
    (tmp_path / "folder").mkdir()
    save_original(tmp_path / "folder" / "t2i_XL_stage1_256.pt", state, entry="module")
    from_folder = load_target(tmp_path / "folder")
    assert from_folder.config.block_size == 256 and from_folder.config.rms_norm_eps == 1e-5
    torch.testing.assert_close(from_folder.head.weight, converted.head.weight, atol=0, rtol=0)


def test_original_config_reads_gpt_xl_widths():
    """LlamaGen-XL's own state dict (meta tensors, no memory): widths from shapes, grid from the file name."""
    from coolsd.models.llamagen.layout import VQ_FACTOR, resolution_from_name
    from coolsd.models.llamagen.loaders import original_config, original_target_key_map

    xl = LlamaGenConfig()  # GPT-XL T2I defaults: 1280 wide, 36 layers, 20 heads, SwiGLU 3584
    with torch.device("meta"):
        ours = LlamaGenT2I(xl).state_dict()
    state = {}
    for theirs, names in original_target_key_map(xl).items():
        names = (names,) if isinstance(names, str) else names
        shape = (sum(ours[n].shape[0] for n in names), *ours[names[0]].shape[1:])
        state[theirs] = torch.empty(shape, device="meta")
    for name, pixels in (("t2i_XL_stage1_256.pt", 256), ("t2i_XL_stage2_512.pt", 512)):
        assert resolution_from_name(name) == pixels
        config = original_config(state, (pixels // VQ_FACTOR) ** 2)
        assert config.grid == (pixels // 16,) * 2
        assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (1280, 36, 20)
        assert (config.intermediate_size, config.caption_dim, config.cls_token_num) == (3584, 2048, 120)
    assert resolution_from_name("t2i_XL.pt") is None


@pytest.mark.parametrize(
    "change, expected",
    [
        ("drop", r"missing keys \(1\): layers.1.feed_forward.w3.weight"),
        ("rename", r"unexpected keys \(1\): layers.1.feed_forward.w4.weight"),
        ("fused", r"shape mismatches \(1\): layers.0.attention.wqkv.weight \(64, 32\) vs layers.0.attn.q.weight"),
        ("wrapper", r"'model', 'module' or 'state_dict' entry"),
    ],
)
def test_wrong_original_checkpoint_fails_clearly(tmp_path, change, expected):
    state = original_layout(published_target())
    if change == "drop":
        del state["layers.1.feed_forward.w3.weight"]
    elif change == "rename":
        state["layers.1.feed_forward.w4.weight"] = state.pop("layers.1.feed_forward.w3.weight")
    elif change == "fused":
        state["layers.0.attention.wqkv.weight"] = state["layers.0.attention.wqkv.weight"][:64]
    path = tmp_path / "t2i.pt"
    if change == "wrapper":
        torch.save({"weights": state}, path)
    else:
        save_original(path, state)
    with pytest.raises(CheckpointMismatch, match=expected):
        load_original_target(path, config=LlamaGenConfig(**TINY))


# --- folder layout: resolutions side by side ----------------------------------------------------




def test_resolutions_side_by_side(weights_dir, tmp_path, monkeypatch):
    from coolsd.models.llamagen import available_resolutions

    monkeypatch.delenv("COOLSD_LLAMAGEN_DIR", raising=False)
    assert available_resolutions() == []
    root = nested_layout(tmp_path / "lg", weights_dir)
    assert available_resolutions(root) == [256, 512]
    (root / "512" / "drafter" / "pytorch_model.bin").unlink()
    assert available_resolutions(root) == [256]
    with pytest.raises(FileNotFoundError, match=r"512 px\) lacks drafter"):
        load_llamagen(root, resolution=512, vq_config=TINY_VQ)
    with pytest.raises(FileNotFoundError, match="python -m coolsd.fetch llamagen --resolution 512"):
        load_llamagen(tmp_path, resolution=512)
    monkeypatch.setenv("COOLSD_LLAMAGEN_DIR", str(root))
    assert find_llamagen() == root and available_resolutions() == [256]
    first = load_llamagen(resolution=256, k_max=4, vq_config=TINY_VQ)
    second = load_llamagen(resolution=256, k_max=4, vq_config=TINY_VQ, caption_encoder=first.target.caption_encoder)
    assert second.target.caption_encoder is first.target.caption_encoder  # one T5 shared
    assert first.default_sampling.cfg_scale == 7.5 and first.default_sampling.top_k == 1000


def test_prompt_checks():
    from coolsd.models.llamagen import EXAMPLE_PROMPTS, check_prompt, clean_prompt

    assert len(EXAMPLE_PROMPTS) >= 4
    for prompt in EXAMPLE_PROMPTS:
        assert check_prompt(prompt) == prompt and clean_prompt(prompt)
    assert check_prompt("  a red cat  ") == "a red cat"
    assert clean_prompt("A <b>Red</b> Cat") == "a red cat"
    for bad, message in [
        ("", "type a prompt"),
        ("   ", "type a prompt"),
        (None, "must be text"),
        ("x" * 501, "501 characters"),
        ("http://x.com @someone", "nothing is left"),
        ("猫", "nothing is left"),
    ]:
        with pytest.raises(ValueError, match=message):
            check_prompt(bad)
