"""A tiny random emoji model of the named kind (one class per emoji, named by its CLDR name, a Unicode group per
class, four drawing styles), saved in the shipped folder layout: for tests that must not depend on the shipped
model's names, counts or weights."""

from __future__ import annotations

from pathlib import Path

import torch
from diffusers import VQModel
from transformers import LlamaForCausalLM

from coolsd.models.eagle import EagleHead, eagle_config
from coolsd.models.embedded import target_config, vq_config
from coolsd.train.emoji import emoji_classifier

GROUPS = {
    "Smileys & Emotion": ["grinning face", "face with tears of joy", "smiling face with heart-eyes", "winking face",
                          "thinking face", "sleeping face", "cat face", "red heart"],
    "Food & Drink": ["red apple", "banana", "grapes", "pizza", "hamburger", "hot beverage", "birthday cake"],
    "Travel & Places": ["rocket", "rainbow", "sun", "crescent moon", "snowflake", "automobile", "airplane"],
    "Activities": ["soccer ball", "basketball", "trophy", "party popper"],
    "Animals & Nature": ["dog face", "mouse face", "sunflower", "evergreen tree"],
}
NAMES = [name for names in GROUPS.values() for name in names]  # 30 emoji
CLASS_GROUPS = [group for group, names in GROUPS.items() for _ in names]
CHARS = [chr(0x1F300 + i) for i in range(len(NAMES))]  # stand-ins for the emoji characters (config class_chars)
DEFAULT = "rocket"  # config default_class: where the page starts
STYLES = ["Twemoji", "Noto", "Fluent Flat", "EmojiOne"]
CREDITS = "Twemoji graphics (c) Twitter, CC-BY 4.0; Noto Emoji (c) Google, Apache-2.0"  # config credits (shown)
K, GRID = 32, (4, 4)


def save_new_emoji(root: Path, seed: int = 0) -> Path:
    """vq/ target/ drafter/ classifier/ of random tiny weights under `root` (target config with class_groups,
    class_chars, default_class and credits, as the shipped model's)."""
    torch.manual_seed(seed)
    vq = VQModel(**(vq_config(K, channels=3, widths=(16, 16, 16), latent_channels=4) | {"norm_num_groups": 8,
                                                                                        "sample_size": 16}))
    cfg = target_config(K, hidden=32, layers=2, heads=2, intermediate=64, grid=GRID, class_names=NAMES,
                        style_names=STYLES)
    cfg.class_groups, cfg.class_chars, cfg.default_class, cfg.credits = CLASS_GROUPS, CHARS, DEFAULT, CREDITS
    model = LlamaForCausalLM(cfg)
    for name, part in (("vq", vq), ("target", model), ("drafter", EagleHead(eagle_config(cfg))),
                       ("classifier", emoji_classifier(NAMES, STYLES))):
        part.to(torch.float16).save_pretrained(root / name)
    return root
