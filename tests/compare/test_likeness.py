"""The likeness readout (coolsd.compare.likeness): SSIM against hand-computed values, the framing search, the
shipped real pictures, the shipped threshold against the pictures judged by eye, and the caption under a picture."""

from __future__ import annotations

import gzip
import json
import re

import pytest
import torch

from coolsd.app.judge import Judge, caption
from coolsd.app.recorded import well
from coolsd.bench import delta_sweep
from coolsd.compare.likeness import (
    BROKEN_BELOW,
    FRAMINGS,
    REAL_PICTURES_NAME,
    RealPictures,
    framed,
    likeness,
    ssim,
)
from coolsd.compare.recognise import shipped_real_pictures
from coolsd.models.emoji import load_emoji
from coolsd.util.format import percent
from coolsd.util.paths import EMOJI_CLASSIFIER, EMOJI_DIR, ROOT

REAL = shipped_real_pictures("emoji")
BUNDLE = load_emoji(device="cpu")


def cat() -> torch.Tensor:
    """The real Twemoji "cat face", (1, 3, 32, 32) in [0, 1]."""
    return REAL.of(BUNDLE.condition("cat face · Twemoji"))[None]


def test_ssim_matches_a_hand_computation_on_a_flat_window():
    x = torch.full((1, 1, 7, 7), 0.5)
    y = torch.full((1, 1, 7, 7), 0.25)  # flat pictures: variances 0, so SSIM = (2 mx my + C1) / (mx^2 + my^2 + C1)
    c1 = 0.01 ** 2
    assert float(ssim(x, y)) == pytest.approx((2 * 0.5 * 0.25 + c1) / (0.25 + 0.0625 + c1), rel=1e-5)
    noise = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    assert ssim(noise, noise).tolist() == pytest.approx([1.0, 1.0], abs=1e-5)
    assert float(ssim(noise[:1], 1 - noise[:1])) < 0  # an inverted picture anti-correlates


def test_the_framing_search_forgives_the_training_framings_not_a_missing_face():
    real = cat()
    assert float(likeness(real, real)) == pytest.approx(1.0, abs=1e-5)
    moved = framed(real, 0.9, 1.0, -1.0)  # a framing the target was trained on
    assert float(ssim(moved, real)) < 0.9 < float(likeness(moved, real))
    faceless = real.clone()
    faceless[:, :, 14:27, 8:24] = real[:, :, 20:21, 5:6]  # the cheek colour over eyes, nose and mouth
    assert float(likeness(faceless, real)) < float(likeness(moved, real))
    scrambled = real[..., torch.randperm(32, generator=torch.Generator().manual_seed(1)), :]
    assert float(likeness(scrambled, real)) < BROKEN_BELOW
    assert len(FRAMINGS) == 36 and (1.0, 0.0, 0.0) in FRAMINGS


def test_real_pictures_round_trip_and_refuse_bad_shapes(tmp_path):
    pictures = torch.randint(0, 256, (3, 3, 8, 8), dtype=torch.uint8)
    RealPictures(torch.tensor([5, 2, 9]), pictures).save(tmp_path / REAL_PICTURES_NAME)
    back = RealPictures.beside(tmp_path)
    assert torch.equal(back.of(2), pictures[1].float() / 255) and back.of(3) is None
    assert RealPictures.beside(tmp_path / "nothing") is None
    with pytest.raises(ValueError, match="need"):
        RealPictures(torch.tensor([1, 2]), pictures)


def test_every_emoji_and_style_ships_its_real_picture():
    count = len(BUNDLE.conditions.classes) * len(BUNDLE.conditions.styles)
    assert count == 748 and sorted(REAL.index) == list(range(count)) and REAL.pictures.shape[1:] == (3, 32, 32)
    assert REAL.pictures.dtype == torch.uint8 and (EMOJI_CLASSIFIER / REAL_PICTURES_NAME).is_file()


def test_the_shipped_threshold_separates_the_pictures_judged_by_eye():
    """The threshold's comment quotes these counts (`tools/likeness_calibration.py`): 32 of 34 broken pictures
    caught, 7 of 86 good ones flagged."""
    data = json.loads(gzip.decompress((EMOJI_DIR / "likeness_calibration.json.gz").read_bytes()))
    caught = flagged = n_broken = n_good = 0
    for entry in data["sets"].values():
        pictures = BUNDLE.tokenizer.decode(torch.tensor(entry["tokens"]))
        reals = torch.stack([REAL.of(c) for c in data["conditions"]])
        for v, label in zip(likeness(pictures, reals).tolist(), entry["labels"]):
            n_broken, n_good = n_broken + (label == "broken"), n_good + (label == "good")
            caught += label == "broken" and v < BROKEN_BELOW
            flagged += label == "good" and v < BROKEN_BELOW
    assert (caught, n_broken, flagged, n_good) == (32, 34, 7, 86)


class _Emoji:
    """The parts of the emoji ModelBundle a Judge reads (its shipped classifier loaded on first use)."""

    def __init__(self) -> None:
        self.conditions, self.class_chars, self.kind = BUNDLE.conditions, BUNDLE.class_chars, "emoji"
        self.conditioning, self.classifier = "class", None


def test_the_caption_calls_a_broken_picture_broken_even_when_the_classifier_is_sure():
    model = _Emoji()
    judge = Judge(model)
    asked = BUNDLE.condition("cat face · Twemoji")
    real = judge.real(asked)
    good, bad = judge.read([real, real.flip(-2)], asked)  # an upside-down picture: the classifier may still agree
    assert good["likeness"] == pytest.approx(1.0, abs=1e-5) and good["broken"] is False
    assert bad["broken"] is True and bad["likeness"] < BROKEN_BELOW
    assert caption(judge, good).endswith("· likeness 1.00")
    vanilla = delta_sweep.reference(delta_sweep.load("emoji"), None)["broken"]  # the shipped sweep's
    assert vanilla is not None and 0 < vanilla < 0.5  # (the shipped emoji sweep measures the broken share)
    assert caption(judge, bad).startswith(f"✗ **broken**: likeness {bad['likeness']:.2f} < {BROKEN_BELOW} (as are "
                                          f"{percent(vanilla)} of vanilla AR's pictures) · classifier sees")
    assert Judge(model, real=lambda kind: None).read([real], asked)[0].get("likeness") is None
    small = torch.nn.functional.avg_pool2d(real[None], 2)[0]  # another size than the real picture's: no likeness
    assert "likeness" not in judge.read([small], asked)[0]


def test_the_recorded_race_wants_lossless_pictures_recognised_and_not_broken():
    assert well({"class_ok": True, "broken": False}) and well({"class_ok": True})  # (a digit: no likeness)
    assert not well({"class_ok": True, "broken": True}) and not well({"class_ok": False, "broken": False})
    assert not well(None)


def test_the_docs_name_the_shipped_threshold():
    said = {path: (ROOT / path).read_text() for path in ("README.md", "docs/app-and-api.md", "assets/emoji/README.md")}
    for path, text in said.items():
        found = set(re.findall(r"below \**(0\.\d+)", text, flags=re.IGNORECASE))
        assert found == {f"{BROKEN_BELOW:g}"}, (path, found)
