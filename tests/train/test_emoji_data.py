"""The emoji data pipeline on a tiny synthetic emoji-test.txt and synthetic Iconify sets (no npm, no SVG renderer)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from coolsd.train import emoji_data as ed

TONES = ["1F3FB", "1F3FC", "1F3FD", "1F3FE", "1F3FF"]
EMOJI_TEST = "\n".join([
    "# group: Smileys & Emotion", "# subgroup: face-smiling",
    "1F600 ; fully-qualified # 😀 E1.0 grinning face",
    "263A FE0F ; fully-qualified # ☺️ E0.6 smiling face",
    "263A ; unqualified # ☺ E0.6 smiling face",
    "# group: People & Body", "# subgroup: hand-fingers-open",
    "1F44B ; fully-qualified # 👋 E0.6 waving hand",
    *[f"1F44B {t} ; fully-qualified # x E1.0 waving hand: tone {j}" for j, t in enumerate(TONES)],
    "# group: Symbols", "# subgroup: arrow",
    "27A1 FE0F ; fully-qualified # ➡️ E0.6 right arrow",
    "# subgroup: keycap",
    "0031 FE0F 20E3 ; fully-qualified # 1️⃣ E0.6 keycap: 1",
    "# group: Food & Drink", "# subgroup: food-fruit",
    "1F34E ; fully-qualified # 🍎 E0.6 red apple",
    "# group: Flags", "# subgroup: country-flag",
    "1F1E6 1F1E8 ; fully-qualified # x E2.0 flag: Ascension Island",
]) + "\n"


def icon_set(names: dict[str, str], chars: bool = True, aliases: dict | None = None) -> ed.IconSet:
    """A set whose icon bodies are 'fill:<n>' (n encodes the icon); chars.json from the given code points."""
    icons = {name: {"body": f"fill:{i + 1}"} for i, name in enumerate(names)}
    chars_json = {cp: name for name, cp in names.items() if cp} if chars else None
    return ed.IconSet.from_json({"icons": icons, "aliases": aliases or {}, "width": 36, "height": 36}, chars_json)


def fake_render(icon: ed.Icon):
    """A 40 x 30 solid rectangle whose red channel is the icon's number (x 20), mirrored marker at left."""
    n = int(icon.body.split(":")[1])
    img = Image.new("RGBA", (40, 30), (20 * n, 100, 50, 255))
    if icon.hflip:
        img.putpixel((0, 0), (0, 0, 0, 255))
    return img


def sets() -> dict[str, ed.IconSet]:
    common = {"grinning-face": "1f600", "smiling-face": "263a", "waving-hand": "1f44b",
              "waving-hand-light-skin-tone": "1f44b-1f3fb", "right-arrow": "27a1", "keycap-1": "31-20e3",
              "red-apple": "1f34e", "flag-ascension-island": "1f1e6-1f1e8"}
    no_apple = {k: v for k, v in common.items() if k != "red-apple"}
    return {"Twemoji": icon_set(common), "Noto": icon_set(common),
            "Fluent Flat": icon_set(no_apple, aliases={"apple-red": {"parent": "grinning-face", "hFlip": True}}),
            "EmojiOne": icon_set(common, chars=False)}  # no chars.json: matched by name


def emojis():
    return ed.parse_emoji_test(EMOJI_TEST)


def test_parse_keeps_fully_qualified_entries_with_group_subgroup_and_name():
    es = emojis()
    assert [e.name for e in es][:3] == ["grinning face", "smiling face", "waving hand"]
    assert len(es) == 3 + 5 + 4  # the unqualified line is dropped
    assert (es[0].group, es[0].subgroup, es[0].char) == ("Smileys & Emotion", "face-smiling", "\U0001F600")
    assert sum(e.toned for e in es) == 5
    assert es[1].key == ("263A",) and es[-3].key == ("31", "20E3")  # FE0F and leading zeros dropped


def test_codepoint_key_and_slug_agree_across_spellings():
    assert ed.codepoint_key("0031-fe0f-20e3") == ed.codepoint_key(("0031", "FE0F", "20E3")) == ("31", "20E3")
    assert ed.slugify("keycap: 1") == "keycap-1"
    assert ed.slugify("piñata") == "pinata"
    assert ed.slugify("man’s shoe") == "mans-shoe"


def test_styles_match_by_code_points_and_emojione_by_name():
    matched = ed.match_styles(emojis(), sets())
    by_name = {e.name: m for e, m in matched.items()}
    assert by_name["grinning face"] == {s: "grinning-face" for s in ed.STYLES}
    assert by_name["keycap: 1"]["Twemoji"] == "keycap-1"  # via chars.json (FE0F dropped on both sides)
    assert by_name["keycap: 1"]["EmojiOne"] == "keycap-1"  # via the slug
    assert set(by_name["red apple"]) == {"Twemoji", "Noto", "EmojiOne"}  # Fluent lacks it
    tone = next(e for e in matched if e.toned and e.codepoints[-1] == "1F3FB")
    assert matched[tone]["Twemoji"] == "waving-hand-light-skin-tone"


def test_select_drops_tones_flags_and_emoji_in_too_few_styles():
    matched = ed.match_styles(emojis(), sets())
    four = [e.name for e in ed.select(matched, min_styles=4)]
    assert four == ["grinning face", "smiling face", "waving hand", "right arrow", "keycap: 1"]
    three = [e.name for e in ed.select(matched, min_styles=3)]
    assert three == four + ["red apple"]  # in file order; flag and tones never
    assert [e.name for e in ed.select(matched, min_styles=3, drop_groups=())][-1] == "flag: Ascension Island"


def test_aliases_resolve_to_their_parent_and_keep_the_mirror_flag():
    s = sets()["Fluent Flat"]
    assert s.icons["apple-red"].body == s.icons["grinning-face"].body and s.icons["apple-red"].hflip
    assert not s.icons["grinning-face"].hflip


def test_flippable_is_false_for_arrows_keycaps_symbols():
    names = {e.name: e.flippable for e in emojis()}
    assert names["grinning face"] and names["red apple"] and names["waving hand"]
    assert not names["right arrow"] and not names["keycap: 1"]


def test_held_out_pairs_leave_every_emoji_seen_in_another_style():
    styles_of = [[0, 1, 2, 3]] * 30 + [[2]] * 5
    held = ed.hold_out_pairs(35, styles_of, frac=0.2, seed=3)
    assert len(held) == 6  # 20 % of the 30 emoji with >= 2 styles
    assert len({c for c, _ in held}) == 6  # one style per emoji
    assert all(c < 30 and s in styles_of[c] for c, s in held)  # never the single-style emoji
    assert held == ed.hold_out_pairs(35, styles_of, frac=0.2, seed=3)
    assert held != ed.hold_out_pairs(35, styles_of, frac=0.2, seed=4)
    assert ed.hold_out_pairs(35, styles_of, frac=0.0) == set()


def test_build_dataset_renders_each_style_and_splits_by_pairs(tmp_path):
    path = tmp_path / "emoji-test.txt"
    path.write_text(EMOJI_TEST, encoding="utf-8")
    d = ed.build_dataset(tmp_path / "d.pt", sets=sets(), emoji_test=path, min_styles=3, heldout_frac=0.5,
                         render=fake_render, drop_groups=ed.DROP_GROUPS, keep=None)
    assert d["class_names"] == ["grinning face", "smiling face", "waving hand", "right arrow", "keycap: 1",
                                "red apple"]
    assert d["class_groups"][5] == "Food & Drink" and d["class_chars"][5] == "\U0001F34E"
    assert d["style_names"] == list(ed.STYLES)
    n = 5 * 4 + 3
    assert d["images"].shape == (n, 3, 32, 32) and d["images"].dtype == torch.uint8
    assert d["labels"].tolist()[-3:] == [5, 5, 5] and d["styles"].tolist()[-3:] == [0, 1, 3]
    assert d["flippable"].tolist() == [c not in (3, 4) for c in d["labels"].tolist()]
    # the glyph fills the frame (cropped to content, resized); the fake colour encodes the icon
    assert d["images"][0, :, 16, 16].tolist() == [20, 100, 50]
    train, val = set(d["train"].tolist()), set(d["val"].tolist())
    assert not train & val and len(train | val) == n and len(val) == 3  # half of 6 emoji lose one pair
    for i in val:  # a held-out pair's emoji is still trained on in another style
        c = int(d["labels"][i])
        assert any(int(d["labels"][j]) == c for j in train)
    loaded = ed.splits(tmp_path / "d.pt")
    x, y, s, flip = loaded["train"]
    assert x.min() >= -1 and x.max() <= 1 and len(x) == n - 3 and loaded["class_names"] == d["class_names"]


def test_to_square_rgb_pads_on_white_and_centres():
    img = Image.new("RGBA", (60, 60), (0, 0, 0, 0))
    img.paste((255, 0, 0, 255), (10, 20, 50, 40))  # a 40 x 20 red bar
    out = ed.to_square_rgb(img, 32)
    assert out.shape == (3, 32, 32)
    assert out[:, 16, 16].tolist() == [255, 0, 0]
    assert out[:, 2, 16].tolist() == [255, 255, 255]  # above the bar: white padding


def test_the_shipped_selection_keeps_five_groups(tmp_path):
    path = tmp_path / "emoji-test.txt"
    path.write_text(EMOJI_TEST, encoding="utf-8")
    d = ed.build_dataset(None, sets=sets(), emoji_test=path, min_styles=3, render=fake_render, keep=None)
    assert d["class_names"] == ["grinning face", "smiling face", "red apple"]  # no hands, arrows, keycaps
    assert ed.SHIPPED_DROP_GROUPS >= ed.DROP_GROUPS | {"People & Body", "Objects", "Symbols"}


def test_the_shipped_list_names_the_emoji_kept_in_file_order(tmp_path):
    path = tmp_path / "emoji-test.txt"
    path.write_text(EMOJI_TEST, encoding="utf-8")
    d = ed.build_dataset(None, sets=sets(), emoji_test=path, min_styles=3, render=fake_render,
                         keep=("red apple", "grinning face", "waving hand"))
    assert d["class_names"] == ["grinning face", "red apple"]  # file order; hands dropped by their group
    assert len(set(ed.SHIPPED_EMOJI)) == len(ed.SHIPPED_EMOJI) and "cat face" in ed.SHIPPED_EMOJI
    assert not {"twelve o’clock", "grinning face with big eyes"} & set(ed.SHIPPED_EMOJI)


def test_missing_labels_fail_with_one_clear_line(tmp_path):
    with pytest.raises(RuntimeError, match="apt-get install -y unicode-data"):
        ed.build_dataset(None, sets=sets(), emoji_test=tmp_path / "none.txt")


def test_package_folder_names_the_npm_layout(tmp_path):
    assert ed.package_folder("Fluent Flat", tmp_path) == tmp_path / "iconify-json-fluent-emoji-flat-1.2.6" / "package"
    assert np.array_equal(sorted(ed.STYLE_SETS), sorted(ed.STYLES))


# ---------------------------------------------------------------- class mapping and held-out split (issue 27)
def test_select_keeps_one_class_per_name_the_first_in_file_order():
    """Two entries of one name (other code points) make one class: the first; each name appears once."""
    first = ed.Emoji(("1F600",), "Smileys & Emotion", "face-smiling", "grinning face")
    again = ed.Emoji(("1F601",), "Smileys & Emotion", "face-smiling", "grinning face")
    other = ed.Emoji(("1F34E",), "Food & Drink", "food-fruit", "red apple")
    four = {style: "x" for style in ed.STYLES}
    chosen = ed.select({first: four, again: four, other: four})
    assert chosen == [first, other]
    assert ed.select({again: four, first: four}) == [again]


def test_select_takes_exactly_min_styles_and_match_styles_lists_only_found_ones():
    matched = ed.match_styles(emojis(), sets())
    assert all(None not in m.values() and set(m) <= set(ed.STYLES) for m in matched.values())
    apple = next(e for e in matched if e.name == "red apple")  # drawn in exactly 3 styles
    assert apple in ed.select(matched, min_styles=3) and apple not in ed.select(matched, min_styles=4)


def test_held_out_pairs_name_a_style_the_emoji_has_once_per_emoji():
    """The held-out style is one of the emoji's own styles (not an index into its list), each emoji at most once,
    and frac counts the emoji drawn in >= 2 styles only."""
    styles_of = [[1, 3]] * 20 + [[2]] * 20
    held = ed.hold_out_pairs(40, styles_of, frac=1.0, seed=1)
    assert len(held) == 20 and {c for c, _ in held} == set(range(20))  # every candidate once, no single-style one
    assert all(s in (1, 3) for _, s in held) and {s for _, s in held} == {1, 3}
    assert len(ed.hold_out_pairs(40, styles_of, frac=0.5, seed=1)) == 10


def ink_centre(image: np.ndarray) -> tuple[float, float, float]:
    """(column centre, row centre, area in pixels) of the ink of a (3, H, W) uint8 image of a pure red glyph on
    white: a pixel's ink is how far its green channel is below white (1 = fully covered)."""
    ink = np.clip((255 - image[1].astype(float)) / 255, 0, None)
    rows, cols = np.indices(ink.shape)
    return (ink * cols).sum() / ink.sum(), (ink * rows).sum() / ink.sum(), ink.sum()


def test_framed_pictures_same_emoji_other_pixels_and_same_pixels_under_a_seed(tmp_path):
    path = tmp_path / "emoji-test.txt"
    path.write_text(EMOJI_TEST, encoding="utf-8")
    kw = dict(sets=sets(), emoji_test=path, render=lambda icon, px: fake_render(icon), min_styles=3,
              drop_groups=ed.DROP_GROUPS, keep=None)
    framed = ed.build_framed(3, seed=5, **kw)
    plain = ed.build_dataset(None, sets=sets(), emoji_test=path, min_styles=3, render=fake_render,
                             drop_groups=ed.DROP_GROUPS, keep=None)
    assert framed.shape == (len(plain["images"]), 3, 3, 32, 32) and framed.dtype == torch.uint8
    assert torch.equal(framed, ed.build_framed(3, seed=5, **kw))  # same seed, same pixels
    assert not torch.equal(framed, ed.build_framed(3, seed=6, **kw))
    for i in (0, len(framed) - 1):  # each picture of an emoji: other pixels, the same glyph colour inside
        a, b = framed[i, 0].numpy(), framed[i, 1].numpy()
        assert (a != b).any()
        assert a[:, 16, 16].tolist() == b[:, 16, 16].tolist() == plain["images"][i, :, 16, 16].tolist()


def test_framing_scales_and_moves_the_glyph_by_fractions_of_a_pixel():
    square = ed.square_rgba(Image.new("RGBA", (40, 40), (255, 0, 0, 255)))
    full = ed.framed_rgb(square, ed.Framing())
    assert (full[1] == 0).all()  # scale 1, no offset: the glyph fills the box
    half = ed.framed_rgb(square, ed.Framing(scale=0.5))
    cx, cy, area = ink_centre(half)
    assert area == pytest.approx(16 * 16, rel=0.02) and cx == pytest.approx(15.5) and cy == pytest.approx(15.5)
    assert half[:, 0, 0].tolist() == [255, 255, 255] and half[1, 16, 16] == 0
    moved = ed.framed_rgb(square, ed.Framing(scale=0.5, dx=0.5, dy=-2.0))
    mx, my, moved_area = ink_centre(moved)
    assert mx - cx == pytest.approx(0.5, abs=0.05) and my - cy == pytest.approx(-2.0, abs=0.05)
    assert moved_area == pytest.approx(area, rel=0.02)
    # half a pixel right: the glyph's first and the column after its last are half covered
    assert 80 < moved[1, 12, 8] < 180 and 80 < moved[1, 12, 24] < 180


def test_a_drawn_framing_stays_in_its_ranges_and_inside_the_box():
    rng = np.random.default_rng(0)
    for _ in range(200):
        f = ed.Framing.draw(rng, scales=(0.8, 1.0), shift=3.0)
        assert 0.8 <= f.scale <= 1.0
        room = (1 - f.scale) * 16 + 0.5
        assert abs(f.dx) <= min(3.0, room) and abs(f.dy) <= min(3.0, room)


def test_substitute_neighbours_replaces_codes_after_the_prefix_by_a_listed_neighbour():
    from coolsd.train.target import substitute_neighbours

    neighbours = torch.tensor([[1, 2], [0, 2], [3, 1], [2, 0]])  # (K = 4, k = 2)
    ids = torch.tensor([[9, 8, 0, 1, 2, 3] * 3] * 50)[:, :6]  # prefix of 2, then codes 0..3
    gen = torch.Generator().manual_seed(0)
    assert torch.equal(substitute_neighbours(ids, neighbours, 0.0, 2, gen), ids)
    every = substitute_neighbours(ids, neighbours, 1.0, 2, gen)
    assert torch.equal(every[:, :2], ids[:, :2]) and torch.equal(ids[0], torch.tensor([9, 8, 0, 1, 2, 3]))
    for col, code in zip(range(2, 6), range(4)):
        assert set(every[:, col].tolist()) == set(neighbours[code].tolist())  # both neighbours, nothing else
    some = substitute_neighbours(ids, neighbours, 0.3, 2, gen)
    assert 0.2 < (some[:, 2:] != ids[:, 2:]).float().mean() < 0.4


def test_framed_codes_keep_each_framing_with_its_labels():
    from coolsd.models.patch_vq import PatchVQModel
    from coolsd.train.emoji import flat_framings, framed_codes

    vq = PatchVQModel(num_vq_embeddings=8, block_out_channels=(8, 8), norm_num_groups=4).eval()
    pictures = torch.randint(0, 256, (3, 2, 3, 32, 32), dtype=torch.uint8)
    per_picture = framed_codes(vq, pictures, chunk=4)
    assert per_picture.shape == (3, 2, 256) and per_picture.dtype == torch.int16
    codes, labels, styles = flat_framings(per_picture, torch.tensor([4, 5, 6]), torch.tensor([0, 1, 2]))
    assert codes.shape == (6, 256) and labels.tolist() == [4, 4, 5, 5, 6, 6] and styles.tolist() == [0, 0, 1, 1, 2, 2]
    from coolsd.train.vq import encode_tokens

    assert torch.equal(codes[3], encode_tokens(vq, pictures[1, 1:].float() / 127.5 - 1).flatten())


def _vq_with_codebook(book: torch.Tensor):
    from coolsd.models.patch_vq import PatchVQModel

    vq = PatchVQModel(num_vq_embeddings=len(book), block_out_channels=(8, 8), norm_num_groups=4).eval()
    with torch.no_grad():
        vq.quantize.embedding.weight.copy_(book)
    return vq


def test_soft_candidates_weigh_look_alike_codes_by_distance_and_keep_plain_white():
    from coolsd.train.emoji import soft_candidates

    grey, dark, white = torch.full((12,), 0.2), torch.full((12,), -0.6), torch.ones(12)
    book = torch.stack([grey, grey + 0.1, dark, white, white - 0.01])  # codes 0 and 1 look alike, 3 and 4 too
    vq = _vq_with_codebook(book)
    image = torch.ones(1, 3, 32, 32)  # plain white, except two patches
    image[0, :, 0:2, 0:2] = 0.25  # patch 0: halfway between codes 0 and 1
    image[0, :, 0:2, 2:4] = -0.6  # patch 1: on code 2, far from every other
    ids, probs = soft_candidates(vq, image, sigma2=0.02, k=3)
    assert ids.shape == probs.shape == (1, 256, 3)
    assert set(ids[0, 0, :2].tolist()) == {0, 1} and probs[0, 0, :2].tolist() == pytest.approx([0.5, 0.5], abs=1e-4)
    assert ids[0, 1, 0] == 2 and probs[0, 1, 0] > 0.999
    assert ids[0, 2, 0] == 3 and probs[0, 2].tolist() == [1.0, 0.0, 0.0]  # plain white keeps its nearest code
    # a larger sigma^2 spreads the far patch too; probabilities always sum to one
    _, wide = soft_candidates(vq, image, sigma2=5.0, k=3)
    assert wide[0, 1, 0] < 0.9 and torch.allclose(wide.sum(-1), torch.ones(1, 256))


def test_draw_codes_follows_the_probabilities():
    from coolsd.train.emoji import draw_codes

    ids = torch.tensor([[[7, 8], [5, 6]]]).repeat(4000, 1, 1)  # (4000, T = 2, k = 2)
    probs = torch.tensor([[[0.25, 0.75], [1.0, 0.0]]]).repeat(4000, 1, 1)
    codes = draw_codes(ids, probs, torch.Generator().manual_seed(0))
    assert codes.shape == (4000, 2) and set(codes[:, 0].tolist()) == {7, 8} and (codes[:, 1] == 5).all()
    assert (codes[:, 0] == 8).float().mean() == pytest.approx(0.75, abs=0.03)


def test_soft_code_nll_is_the_cross_entropy_against_each_soft_label():
    from transformers import LlamaForCausalLM

    from coolsd.models.embedded import target_config
    from coolsd.train.target import code_nll, soft_code_nll

    torch.manual_seed(0)
    model = LlamaForCausalLM(target_config(16, hidden=16, layers=1, heads=2, intermediate=32, grid=(2, 2))).eval()
    ids = torch.tensor([[16 + 3, 1, 5, 9, 2], [16 + 1, 7, 7, 0, 15]])  # [class, 4 codes] x 2
    logp = model(input_ids=ids[:, :-1]).logits[:, :, :16].float().log_softmax(-1)  # (2, 4, 16)
    one_hot_ids, one = ids[:, 1:, None], torch.ones(2, 4, 1)
    assert soft_code_nll(model, ids, one_hot_ids, one).item() == pytest.approx(code_nll(model, ids).item(), abs=1e-6)
    cand = torch.tensor([5, 6, 4]).repeat(2, 4, 1)  # (2, 4, 3) the same three candidates everywhere
    probs = torch.tensor([0.5, 0.3, 0.2]).repeat(2, 4, 1)
    by_hand = -sum(w * logp[b, t, c] for b in range(2) for t in range(4) for c, w in zip([5, 6, 4], [0.5, 0.3, 0.2]))
    assert soft_code_nll(model, ids, cand, probs).item() == pytest.approx(by_hand.item() / 8, abs=1e-5)


def test_framed_codes_are_encoded_once_and_cached_beside_the_pictures(tmp_path, monkeypatch):
    """`load_framed_codes`: the first call encodes `load_framed`'s pictures into a `.codes.pt` file in the folder;
    the next reads that file and never asks for the pictures (a training machine without the SVG sets)."""
    from coolsd.models.patch_vq import PatchVQModel
    from coolsd.train import emoji_data
    from coolsd.train.emoji import framed_codes, load_framed_codes

    vq = PatchVQModel(num_vq_embeddings=8, block_out_channels=(8, 8), norm_num_groups=4).eval()
    pictures = {"train": torch.randint(0, 256, (2, 3, 3, 32, 32), dtype=torch.uint8),
                "val": torch.randint(0, 256, (1, 3, 3, 32, 32), dtype=torch.uint8)}
    calls = []
    monkeypatch.setattr(emoji_data, "load_framed", lambda *a, **k: calls.append(a) or pictures)
    first = load_framed_codes(vq, 3, 0, (0.9, 1.0), 0.5, folder=tmp_path)
    assert len(calls) == 1 and list(tmp_path.glob("*.codes-*.pt"))
    assert torch.equal(first["train"], framed_codes(vq, pictures["train"])) and first["val"].shape == (1, 3, 256)
    again = load_framed_codes(vq, 3, 0, (0.9, 1.0), 0.5, folder=tmp_path)
    assert len(calls) == 1 and torch.equal(again["val"], first["val"])
    with torch.no_grad():
        vq.quantize.embedding.weight.add_(1.0)  # another codebook: its codes are not those cached
    load_framed_codes(vq, 3, 0, (0.9, 1.0), 0.5, folder=tmp_path)
    assert len(calls) == 2 and len(list(tmp_path.glob("*.pt"))) == 2
