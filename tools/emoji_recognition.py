"""Recognisability of the emoji model's samples, per decoder, from a benchmark run's tokens.

A sample is recognised when its nearest real image (squared distance of the 32 x 32 RGB pixels in
[0, 1]; `coolsd.train.emoji_eval.recognised`), over every real image of every emoji and style,
shows the emoji that was asked for. Reported per setting, split into (emoji, style) pairs seen in
training and pairs held out of it (the emoji was seen, never in that style). Needs the training
data (`python -m coolsd.train.emoji_data`) and a benchmark run with tokens in items.jsonl. `--framings K` adds K
random framings of every real image to the bank (`emoji_data.load_framed`, the framings the issue-34 target learnt),
so a sample drawn a little smaller or off-centre is compared with real pictures framed the same way.

    .venv/bin/python tools/emoji_recognition.py --bench assets/emoji/bench
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def load_items(bench: Path) -> list[dict]:
    return [json.loads(line) for line in (bench / "items.jsonl").read_text().splitlines() if line.strip()]


def shares(items: list[dict], tokenizer, bank01, bank_labels, styles: int, heldout: set) -> dict:
    """{setting: {"seen": (hits, n), "held_out": (hits, n)}} over the items' decoded tokens."""
    from coolsd.train.emoji_eval import recognised

    out: dict[str, dict[str, list[int]]] = {}
    for it in items:
        image = tokenizer.decode(torch.tensor(it["tokens"]))[None]
        cls, style = divmod(it["cls"], styles)
        hit = bool(recognised(image, torch.tensor([cls]), bank01, bank_labels)[0])
        part = "held_out" if (cls, style) in heldout else "seen"
        row = out.setdefault(it["setting"], {"seen": [0, 0], "held_out": [0, 0]})
        row[part][0] += hit
        row[part][1] += 1
    return out


def real_bank(data: dict, framings: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The real images (M, 3, 32, 32) in [0, 1] and their class ids, each image followed in the bank by
    `framings` random framings of it (`emoji_data.load_framed`, 32 per picture, the first `framings`)."""
    from coolsd.train.emoji_data import load_framed

    images, labels = data["images"], data["labels"]
    if framings:
        framed = load_framed(32)
        order = torch.cat([data["train"], data["val"]])
        pictures = torch.cat([framed["train"], framed["val"]])[:, :framings]  # (M, K, 3, 32, 32) in `order`
        images = torch.cat([images, pictures.flatten(0, 1)])
        labels = torch.cat([labels, labels[order].repeat_interleave(framings)])
    return images.float() / 255, labels


def main() -> int:
    from coolsd.models.emoji import load_emoji
    from coolsd.train.emoji_data import load_dataset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, default=Path("assets/emoji/bench"))
    ap.add_argument("--model", type=Path, default=None, help="emoji model folder (default: the shipped one)")
    ap.add_argument("--framings", type=int, default=0, help="framings of every real image added to the bank")
    args = ap.parse_args()
    bundle = load_emoji(args.model, device="cpu")
    data = load_dataset()
    bank01, bank_labels = real_bank(data, args.framings)
    heldout = {(int(data["labels"][i]), int(data["styles"][i])) for i in data["val"]}
    table = shares(load_items(args.bench), bundle.tokenizer, bank01, bank_labels, len(data["style_names"]), heldout)
    table = {"bank_framings": args.framings} | table
    (args.bench / "recognition.json").write_text(json.dumps(table, indent=1) + "\n")
    lines = ["| setting | recognised, pairs seen in training | recognised, held-out pairs |", "|---|---:|---:|"]
    for name, row in table.items():
        if name == "bank_framings":
            continue
        cells = [f"{h / n:.0%} ({h} of {n})" if n else "-" for h, n in (row["seen"], row["held_out"])]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    (args.bench / "recognition.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
