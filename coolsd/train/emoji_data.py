"""Emoji data for the colour embedded model: one class per emoji (its Unicode name), style = drawing set.

Sources (npm packages of Iconify SVG sets, fetched for training only; the images are never committed):

| style | npm package | licence |
|---|---|---|
| Twemoji | `@iconify-json/twemoji@1.2.5` | CC-BY 4.0, (c) Twitter, Inc and other contributors |
| Noto | `@iconify-json/noto@1.2.9` | Apache-2.0, Google |
| Fluent Flat | `@iconify-json/fluent-emoji-flat@1.2.6` | MIT, (c) Microsoft Corporation |
| EmojiOne | `@iconify-json/emojione@1.2.3` | CC-BY 4.0, EmojiOne 2.3 |

Labels (name, group, subgroup) come from Unicode's `emoji-test.txt` (`apt-get install -y unicode-data`).
Each set's `chars.json` maps code points to its icon names; EmojiOne has none, so it is matched by the
icon name (the same slugs as the other sets). SVGs are rasterised with `resvg-py`.

Pipeline: `parse_emoji_test` -> `IconSet.load` per style -> `match_styles` (per emoji, the icon of
each style) -> `select` (drop groups, keep emoji drawn in at least `min_styles` styles) ->
`render_all` -> `hold_out_pairs` (held-out (emoji, style) pairs: the emoji is seen in its other
styles, never in this one) -> one cached tensor file (`build_dataset`).
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

IMAGE_SIZE = 32
EMOJI_TEST = Path("/usr/share/unicode/emoji/emoji-test.txt")
# where the training data is fetched and cached: $COOLSD_DATA_DIR, else ~/.cache/coolsd/data (never in the repo)
DATA_DIR = Path(os.environ.get("COOLSD_DATA_DIR") or Path.home() / ".cache" / "coolsd" / "data") / "emoji"
NPM_DIR = DATA_DIR / "npm"
SKIN_TONES = frozenset({"1F3FB", "1F3FC", "1F3FD", "1F3FE", "1F3FF"})
# style name -> (npm package, version); `npm pack <package>@<version>` into NPM_DIR, then `tar xzf`
STYLE_SETS: dict[str, tuple[str, str]] = {
    "Twemoji": ("@iconify-json/twemoji", "1.2.5"),
    "Noto": ("@iconify-json/noto", "1.2.9"),
    "Fluent Flat": ("@iconify-json/fluent-emoji-flat", "1.2.6"),
    "EmojiOne": ("@iconify-json/emojione", "1.2.3"),
}
STYLES = tuple(STYLE_SETS)
# flags: ~260 striped rectangles that differ in details lost at 32 px; component: skin-tone swatches
DROP_GROUPS = frozenset({"Flags", "Component"})
# the shipped model learns the five groups of things a visitor names by sight (573 emoji in all four
# sets); people, objects and symbols (482 more) would cut the training each emoji gets by half
SHIPPED_DROP_GROUPS = DROP_GROUPS | {"People & Body", "Objects", "Symbols"}
# the shipped model's emoji: 187 of those 573 that a visitor names and tells apart at 32 px (a few distinct
# faces, not forty yellow circles; no clock faces or moon phases); fewer emoji give each image more of one
# session's training (187: three times what all 573 get).
SHIPPED_EMOJI = (
    # faces and hearts: the distinct ones
    "grinning face", "face with tears of joy", "winking face", "smiling face with heart-eyes",
    "smiling face with sunglasses", "thinking face", "sleeping face", "loudly crying face", "angry face",
    "face screaming in fear", "nerd face", "cowboy hat face", "face with medical mask", "smiling face with horns",
    "skull", "pile of poo", "clown face", "ghost", "alien", "alien monster", "see-no-evil monkey",
    "red heart", "broken heart", "collision", "speech balloon",
    # animals
    "monkey face", "gorilla", "dog face", "wolf", "fox", "cat face", "lion", "tiger face", "horse face", "unicorn",
    "cow face", "pig face", "elephant", "mouse face", "rabbit face", "bear", "koala", "panda", "chicken",
    "hatching chick", "penguin", "bird", "eagle", "duck", "owl", "frog", "crocodile", "turtle", "snake",
    "dragon", "spouting whale", "dolphin", "fish", "tropical fish", "shark", "octopus", "snail", "butterfly",
    "honeybee", "lady beetle", "spider",
    # plants
    "cherry blossom", "rose", "sunflower", "tulip", "seedling", "evergreen tree", "palm tree", "cactus",
    "four leaf clover", "maple leaf", "mushroom",
    # food and drink
    "grapes", "watermelon", "tangerine", "lemon", "banana", "pineapple", "red apple", "green apple", "pear",
    "peach", "cherries", "strawberry", "kiwi fruit", "tomato", "avocado", "eggplant", "carrot", "ear of corn",
    "hot pepper", "bread", "croissant", "cheese wedge", "meat on bone", "poultry leg", "bacon", "hamburger",
    "french fries", "pizza", "hot dog", "taco", "cooking", "popcorn", "cooked rice", "spaghetti", "sushi",
    "doughnut", "cookie", "birthday cake", "chocolate bar", "candy", "lollipop", "soft ice cream",
    "baby bottle", "hot beverage", "beer mug", "wine glass", "cocktail glass",
    # travel and places
    "globe showing Americas", "volcano", "mount fuji", "house", "castle", "Statue of Liberty", "ferris wheel",
    "circus tent", "locomotive", "bus", "ambulance", "fire engine", "police car", "taxi", "automobile",
    "racing car", "tractor", "motorcycle", "bicycle", "vertical traffic light", "stop sign", "anchor",
    "sailboat", "ship", "airplane", "helicopter", "satellite", "rocket", "hourglass done", "alarm clock",
    "crescent moon", "full moon face", "sun with face", "star", "cloud", "cloud with lightning and rain",
    "tornado", "rainbow", "umbrella with rain drops", "high voltage", "snowflake", "snowman", "fire", "droplet",
    "water wave",
    # activities
    "jack-o-lantern", "Christmas tree", "fireworks", "balloon", "party popper", "wrapped gift", "trophy",
    "1st place medal", "soccer ball", "baseball", "basketball", "american football", "tennis", "bowling",
    "video game", "game die", "crystal ball", "artist palette",
)
# mirroring changes these emoji's meaning (arrows, pointing hands, text, clocks)
NO_FLIP_WORDS = re.compile(r"\b(left|right|arrow|clockwise|counterclockwise|letter|keycap|button|clock|"
                           r"o[’']clock|thirty|ABC|abc|input|symbol|sign)\b", re.IGNORECASE)
CREDITS = ("Twemoji graphics (c) Twitter, Inc and other contributors, CC-BY 4.0; Noto Emoji (c) Google, "
           "Apache-2.0; Fluent Emoji (c) Microsoft Corporation, MIT; EmojiOne 2.3 graphics, CC-BY 4.0; "
           "emoji names from Unicode emoji-test.txt (Unicode licence)")


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
    def key(self) -> tuple[str, ...]:
        """Code points without FE0F and leading zeros: the key the sets' `chars.json` are matched on."""
        return codepoint_key(self.codepoints)

    @property
    def slug(self) -> str:
        """The name as the Iconify sets spell icons: lower case, runs of other characters -> '-'."""
        return slugify(self.name)

    @property
    def flippable(self) -> bool:
        return self.group not in ("Symbols", "Flags") and not NO_FLIP_WORDS.search(self.name)


def codepoint_key(codepoints) -> tuple[str, ...]:
    """('0031', 'FE0F', '20E3') or '31-fe0f-20e3' -> ('31', '20E3')."""
    if isinstance(codepoints, str):
        codepoints = codepoints.split("-")
    return tuple(c.upper().lstrip("0") or "0" for c in codepoints if c.upper() != "FE0F")


def slugify(name: str) -> str:
    """'face with tears of joy' -> 'face-with-tears-of-joy'; 'piñata' -> 'pinata'."""
    import unicodedata

    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().lower()
    return re.sub(r"[^a-z0-9]+", "-", ascii_name.replace("’", "").replace("'", "")).strip("-")


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


@dataclass(frozen=True)
class Icon:
    """One icon of a set: its SVG body in a box (left, top, width, height), mirrored when `hflip`."""

    body: str
    box: tuple[float, float, float, float]
    hflip: bool = False


@dataclass
class IconSet:
    """An Iconify JSON set: icons by name (aliases resolved) and names by code-point key."""

    icons: dict[str, Icon]
    by_key: dict[tuple[str, ...], str]

    @classmethod
    def from_json(cls, icons_json: dict, chars_json: dict | None = None) -> IconSet:
        width, height = icons_json.get("width", 16), icons_json.get("height", 16)

        def icon(d: dict, hflip: bool = False) -> Icon:
            box = (d.get("left", 0), d.get("top", 0), d.get("width", width), d.get("height", height))
            return Icon(d["body"], box, hflip)

        icons = {name: icon(d) for name, d in icons_json["icons"].items()}
        for name, alias in icons_json.get("aliases", {}).items():
            parent = icons.get(alias.get("parent"))
            if parent is not None and not alias.get("rotate") and not alias.get("vFlip"):
                icons.setdefault(name, Icon(parent.body, parent.box, parent.hflip ^ bool(alias.get("hFlip"))))
        by_key = {codepoint_key(cp): name for cp, name in (chars_json or {}).items() if name in icons}
        return cls(icons, by_key)

    @classmethod
    def load(cls, folder: Path) -> IconSet:
        """From an unpacked npm package folder holding icons.json (and chars.json where the set has one)."""
        chars = folder / "chars.json"
        return cls.from_json(json.loads((folder / "icons.json").read_text()),
                             json.loads(chars.read_text()) if chars.is_file() else None)

    def find(self, emoji: Emoji) -> str | None:
        """The icon name of `emoji`: by code points, else by its name's slug."""
        name = self.by_key.get(emoji.key)
        return name if name is not None else (emoji.slug if emoji.slug in self.icons else None)


def package_folder(style: str, root: Path = NPM_DIR) -> Path:
    """Where `npm pack` + `tar xzf` left a style's package: root/<pkg-name>-<version>/package."""
    package, version = STYLE_SETS[style]
    return root / f"{package.lstrip('@').replace('/', '-')}-{version}" / "package"


def fetch_sets(root: Path = NPM_DIR) -> None:
    """`npm pack` each style's package into root and unpack it (needs npm and the npm registry)."""
    import subprocess
    import tarfile

    root.mkdir(parents=True, exist_ok=True)
    for style, (package, version) in STYLE_SETS.items():
        if package_folder(style, root).is_dir():
            continue
        name = subprocess.run(["npm", "pack", f"{package}@{version}"], cwd=root, check=True, capture_output=True,
                              text=True).stdout.strip().splitlines()[-1]
        with tarfile.open(root / name) as tar:
            tar.extractall(package_folder(style, root).parent, filter="data")


def match_styles(emojis: list[Emoji], sets: dict[str, IconSet]) -> dict[Emoji, dict[str, str]]:
    """For each emoji, {style: icon name} over the styles that draw it."""
    out = {}
    for e in emojis:
        found = {style: s.find(e) for style, s in sets.items()}
        out[e] = {style: name for style, name in found.items() if name is not None}
    return out


def select(matched: dict[Emoji, dict[str, str]], min_styles: int = 4,
           drop_groups=DROP_GROUPS, keep: tuple[str, ...] | None = None) -> list[Emoji]:
    """The emoji to learn: no skin-tone variants, no dropped group, drawn in at least `min_styles`
    styles, named in `keep` (when given); one per name (the first in file order), in file order."""
    out, seen = [], set()
    wanted = None if keep is None else set(keep)
    for e, styles in matched.items():
        if e.toned or e.group in drop_groups or len(styles) < min_styles or e.name in seen:
            continue
        if wanted is not None and e.name not in wanted:
            continue
        seen.add(e.name)
        out.append(e)
    return out


def hold_out_pairs(num_emoji: int, styles_of: list[list[int]], frac: float = 0.1,
                   seed: int = 0) -> set[tuple[int, int]]:
    """Held-out (emoji, style) pairs: a random `frac` of the emoji drawn in >= 2 styles each lose one
    random style of theirs to the held-out set, so the model sees the emoji, never in that style."""
    rng = np.random.default_rng(seed)
    candidates = [i for i in range(num_emoji) if len(styles_of[i]) >= 2]
    n = round(frac * len(candidates))
    picked = sorted(rng.choice(len(candidates), n, replace=False).tolist()) if n else []
    return {(candidates[j], int(rng.choice(styles_of[candidates[j]]))) for j in picked}


def to_square_rgb(img, size: int = IMAGE_SIZE) -> np.ndarray:
    """RGBA PIL image -> (3, size, size) uint8: cropped to its content, padded square, on white."""
    from PIL import Image

    canvas = square_rgba(img)
    white = Image.new("RGBA", canvas.size, (255, 255, 255, 255))
    rgb = Image.alpha_composite(white, canvas).convert("RGB").resize((size, size), Image.LANCZOS)
    return np.asarray(rgb).transpose(2, 0, 1).copy()


def rasterise(icon: Icon, pixels: int = 128):
    """An icon as an RGBA PIL image of pixels x pixels (resvg)."""
    import resvg_py
    from PIL import Image, ImageOps

    left, top, w, h = icon.box
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
           f'viewBox="{left} {top} {w} {h}" width="{w}" height="{h}">{icon.body}</svg>')
    img = Image.open(io.BytesIO(bytes(resvg_py.svg_to_bytes(svg_string=svg, width=pixels, height=pixels))))
    return ImageOps.mirror(img) if icon.hflip else img


@dataclass(frozen=True)
class Framing:
    """A random framing of an icon for one training picture: the content, cropped and padded square,
    is scaled to `scale` of the 32-px box and moved `dx`, `dy` pixels (fractions allowed) from its centre.
    Drawn per picture, so no two pictures of an emoji share their pixels and its edges fall on different
    look-alike codes: the target learns a spread over those codes instead of memorising one picture."""

    scale: float = 1.0  # content side / box side
    dx: float = 0.0  # pixels of the output image, + is right
    dy: float = 0.0  # pixels, + is down

    @classmethod
    def draw(cls, rng: np.random.Generator, scales: tuple[float, float] = (0.85, 1.0),
             shift: float = 1.0) -> Framing:
        """A random framing: scale uniform in `scales`; each offset uniform in +-`shift` px, held inside the
        box."""
        scale = float(rng.uniform(*scales))
        room = min(shift, (1.0 - scale) * IMAGE_SIZE / 2 + 0.5)
        dx, dy = rng.uniform(-room, room, size=2)
        return cls(scale, float(dx), float(dy))


def square_rgba(img):
    """RGBA PIL image -> its content (alpha bounding box), padded square, transparent around it."""
    from PIL import Image

    img = img.convert("RGBA")
    box = img.getchannel("A").getbbox()
    if box:
        img = img.crop(box)
    side = max(img.size)
    canvas = Image.new("RGBA", (side, side), (255, 255, 255, 0))
    canvas.paste(img, ((side - img.width) // 2, (side - img.height) // 2))
    return canvas


def framed_rgb(square, framing: Framing, size: int = IMAGE_SIZE, supersample: int = 8) -> np.ndarray:
    """A square RGBA content image (`square_rgba`) placed by `framing` on white -> (3, size, size) uint8.
    Drawn at `supersample` x the size and reduced (Lanczos), so offsets of 1/supersample px show."""
    from PIL import Image

    big = size * supersample
    side = max(1, round(framing.scale * big))
    content = square.resize((side, side), Image.LANCZOS)
    left = round((big - side) / 2 + framing.dx * supersample)
    top = round((big - side) / 2 + framing.dy * supersample)
    canvas = Image.new("RGBA", (big, big), (255, 255, 255, 0))
    canvas.paste(content, (left, top))
    white = Image.new("RGBA", canvas.size, (255, 255, 255, 255))
    rgb = Image.alpha_composite(white, canvas).convert("RGB").resize((size, size), Image.LANCZOS)
    return np.asarray(rgb).transpose(2, 0, 1).copy()


def framed_pictures(squares: list, per_icon: int, seed: int = 0, scales: tuple[float, float] = (0.85, 1.0),
                    shift: float = 1.0, size: int = IMAGE_SIZE) -> np.ndarray:
    """`per_icon` random framings of each square content image -> (len(squares), per_icon, 3, size, size)
    uint8. The same seed gives the same pixels."""
    rng = np.random.default_rng(seed)
    return np.stack([np.stack([framed_rgb(sq, Framing.draw(rng, scales, shift), size) for _ in range(per_icon)])
                     for sq in squares])


def render_all(emojis: list[Emoji], matched: dict[Emoji, dict[str, str]], sets: dict[str, IconSet],
               render: Callable[[Icon], object] = rasterise, size: int = IMAGE_SIZE) -> dict:
    """Every selected emoji in every style that draws it: images (N, 3, size, size) uint8, class
    (index into `emojis`), style (index into `sets`), in class-major order."""
    images, cls, style = [], [], []
    for c, e in enumerate(emojis):
        for s, (name, icon_set) in enumerate(sets.items()):
            icon = matched[e].get(name)
            if icon is not None:
                images.append(to_square_rgb(render(icon_set.icons[icon]), size))
                cls.append(c), style.append(s)
    return {"images": np.stack(images), "labels": np.array(cls), "styles": np.array(style)}


def chosen_emoji(sets: dict[str, IconSet] | None = None, emoji_test: Path = EMOJI_TEST, min_styles: int = 4,
                 drop_groups=SHIPPED_DROP_GROUPS, keep: tuple[str, ...] | None = SHIPPED_EMOJI):
    """(the emoji to learn, {emoji: {style: icon name}}, the icon sets by style)."""
    if not emoji_test.is_file():
        raise RuntimeError("Unicode emoji labels missing: apt-get install -y unicode-data")
    if sets is None:
        sets = {style: IconSet.load(package_folder(style)) for style in STYLES}
    matched = match_styles(parse_emoji_test(emoji_test.read_text(encoding="utf-8")), sets)
    return select(matched, min_styles, drop_groups, keep), matched, sets


def build_framed(per_icon: int, seed: int = 0, scales: tuple[float, float] = (0.85, 1.0), shift: float = 1.0,
                 pixels: int = 256, sets: dict[str, IconSet] | None = None, emoji_test: Path = EMOJI_TEST,
                 render: Callable[[Icon, int], object] = rasterise, **select_kw) -> torch.Tensor:
    """`per_icon` random framings (`Framing`) of every picture of `build_dataset`, in its order, each icon
    rasterised once at `pixels` px: (N, per_icon, 3, 32, 32) uint8."""
    chosen, matched, sets = chosen_emoji(sets, emoji_test, **select_kw)
    squares = [square_rgba(render(icon_set.icons[matched[e][name]], pixels))
               for e in chosen for name, icon_set in sets.items() if name in matched[e]]
    return torch.from_numpy(framed_pictures(squares, per_icon, seed, scales, shift))


def build_dataset(out: Path | None, seed: int = 0, sets: dict[str, IconSet] | None = None,
                  emoji_test: Path = EMOJI_TEST, min_styles: int = 4, heldout_frac: float = 0.1,
                  render: Callable[[Icon], object] = rasterise, size: int = IMAGE_SIZE,
                  drop_groups=SHIPPED_DROP_GROUPS, keep: tuple[str, ...] | None = SHIPPED_EMOJI) -> dict:
    """Build the dataset (and cache it at `out` as a torch file when given); returns it."""
    chosen, matched, sets = chosen_emoji(sets, emoji_test, min_styles, drop_groups, keep)
    data = render_all(chosen, matched, sets, render, size)
    styles_of = [sorted(data["styles"][data["labels"] == c].tolist()) for c in range(len(chosen))]
    held = hold_out_pairs(len(chosen), styles_of, heldout_frac, seed)
    is_val = np.array([(int(c), int(s)) in held for c, s in zip(data["labels"], data["styles"])], dtype=bool)
    dataset = {"images": torch.from_numpy(data["images"]), "labels": torch.from_numpy(data["labels"]),
               "styles": torch.from_numpy(data["styles"]),
               "flippable": torch.tensor([chosen[c].flippable for c in data["labels"]]),
               "train": torch.from_numpy(np.flatnonzero(~is_val)), "val": torch.from_numpy(np.flatnonzero(is_val)),
               "class_names": [e.name for e in chosen], "class_groups": [e.group for e in chosen],
               "class_chars": [e.char for e in chosen], "style_names": list(sets), "credits": CREDITS}
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        torch.save(dataset, out)
    return dataset


DATA_FILE = DATA_DIR / f"emoji_names{len(SHIPPED_EMOJI)}_32.pt"


def load_dataset(path: Path = DATA_FILE, seed: int = 0) -> dict:
    """The cached dataset, built on first use."""
    return torch.load(path, weights_only=False) if path.is_file() else build_dataset(path, seed)


def framed_path(per_icon: int, seed: int, scales: tuple[float, float], shift: float, folder: Path) -> Path:
    """Where `load_framed` caches these framings."""
    return folder / f"framed{len(SHIPPED_EMOJI)}_{per_icon}x_s{scales[0]:g}-{scales[1]:g}_d{shift:g}_seed{seed}.pt"


def load_framed(per_icon: int, seed: int = 0, scales: tuple[float, float] = (0.85, 1.0), shift: float = 1.0,
                folder: Path = DATA_FILE.parent) -> dict[str, torch.Tensor]:
    """`build_framed` of the shipped emoji, cached in `folder`, split like `splits`: {"train"/"val": (N,
    per_icon, 3, 32, 32) uint8}."""
    path = framed_path(per_icon, seed, scales, shift, folder)
    if path.is_file():
        pictures = torch.load(path)
    else:
        pictures = build_framed(per_icon, seed, scales, shift)
        torch.save(pictures, path)
    d = load_dataset()
    return {part: pictures[d[part]] for part in ("train", "val")}


def to_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 (N, 3, H, W) -> float in [-1, 1]."""
    return images.float() / 127.5 - 1.0


def splits(path: Path = DATA_FILE, seed: int = 0) -> dict:
    """{"train"/"val": (images (N,3,32,32) in [-1,1], classes (N,), styles (N,), flippable (N,) bool),
    "class_names", "class_groups", "class_chars", "style_names"}. "val" holds the held-out pairs."""
    d = load_dataset(path, seed)
    out = {k: d[k] for k in ("class_names", "class_groups", "class_chars", "style_names")}
    for part in ("train", "val"):
        idx = d[part]
        out[part] = (to_float(d["images"][idx]), d["labels"][idx], d["styles"][idx], d["flippable"][idx])
    return out


def main() -> int:
    import time

    t0 = time.perf_counter()
    fetch_sets()
    d = build_dataset(DATA_FILE)
    print(f"[emoji-data] {len(d['images'])} images of {len(d['class_names'])} emoji ({len(d['train'])} train / "
          f"{len(d['val'])} held-out pairs) in {time.perf_counter() - t0:.0f} s -> {DATA_FILE}")
    print(f"[emoji-data] per style {dict(zip(d['style_names'], np.bincount(d['styles'].numpy()).tolist()))}")
    groups = {}
    for g in d["class_groups"]:
        groups[g] = groups.get(g, 0) + 1
    print(f"[emoji-data] emoji per group {groups}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
