"""Can a per-picture distance to the real (emoji, style) picture tell a broken emoji from a good one? (not a test)

    OMP_NUM_THREADS=1 python tools/quality_probe.py --emoji "cat face"     # needs the training data (emoji_data)

Issue 60 asks for a per-picture readout that calls COOL-SD's faceless cat at delta 1024 broken, where the shipped
classifier reads "cat face 100 %". Before shipping one, this measures two candidate distances on the real pictures
of one emoji (its four styles), against what a harmless redraw moves them by:

- the classifier's pooled features (the FID space), cosine distance to the real picture's;
- pixels: RMSE to the real picture, at its best alignment over scales 0.85-1 and shifts of -1..1 px (the framings
  the target was trained on).

"faceless": the real picture with its nose and mouth painted over in the cheek colour (rows 17-24, columns 11-20),
the issue's broken cat; "redraw": the real picture shifted by 1 px, scaled by 0.875 or warped by (0.92, 0.5 px);
A usable measure puts "faceless" clearly beyond every
"redraw". Measured 2026-12-07 on "cat face" (shipped classifier, the four styles):

    features  faceless 0.025 0.203 0.077 0.039 | shift 1 px 0.035 0.022 0.031 0.021 | scale 0.875 0.054 0.109 0.168
              0.060 | warp (0.92, 0.5 px) 0.038 0.063 0.063 0.032
    pixels    faceless 0.048 0.105 0.071 0.099 | shift 1 px 0 (a framing searched) | scale 0.875 0.038 0.045 0.039
              0.064 | warp (0.92, 0.5 px) 0.070 0.088 0.073 0.113

Neither separates them: a faceless cat is as near its real picture as a redraw a few per cent smaller, so neither
could flag the issue's cat without flagging good pictures, and neither ships as a readout.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F


def warp(x: torch.Tensor, scale: float, dx: float, dy: float) -> torch.Tensor:
    """Pictures (N, 3, H, W) in [0, 1] on white, scaled about the centre and shifted by (dx, dy) pixels."""
    size = x.shape[-1]
    theta = torch.tensor([[1 / scale, 0, -dx * 2 / size / scale], [0, 1 / scale, -dy * 2 / size / scale]])
    grid = F.affine_grid(theta[None].expand(len(x), 2, 3), list(x.shape), align_corners=False)
    return F.grid_sample(x - 1, grid, mode="bilinear", padding_mode="zeros", align_corners=False) + 1


FRAMINGS = [(s, dx, dy) for s in (0.85, 0.9, 0.95, 1.0) for dx in (-1, 0, 1) for dy in (-1, 0, 1)]


def aligned_rmse(pictures: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """Per picture, the RMSE to its real picture at the real one's best framing (FRAMINGS)."""
    return torch.stack([((warp(real, *f) - pictures) ** 2).mean((1, 2, 3)).sqrt() for f in FRAMINGS]).min(0).values


def main(argv: list[str] | None = None) -> int:
    from coolsd.compare.metrics import classifier_outputs
    from coolsd.compare.recognise import shipped_classifier
    from coolsd.train.emoji_data import load_dataset

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emoji", default="cat face", help="a shipped emoji name")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = load_dataset()
    names = list(data["class_names"])
    if args.emoji not in names:
        raise SystemExit(f"unknown emoji {args.emoji!r}")
    mine = [i for i, c in enumerate(data["labels"].tolist()) if c == names.index(args.emoji)]
    real = data["images"][mine].float() / 255
    faceless = real.clone()
    faceless[:, :, 17:25, 11:21] = real[:, :, 20:21, 9:10]  # the cheek colour over the nose and mouth
    redraws = {"shift 1 px": warp(real, 1.0, 1, 1), "scale 0.875": warp(real, 0.875, 0, 0),
               "warp (0.92, 0.5 px)": warp(real, 0.92, 0.5, -0.5)}
    classifier = shipped_classifier("emoji")
    pool = torch.cat([real, faceless, *redraws.values()])
    feats = classifier_outputs(classifier, pool)[0].view(2 + len(redraws), len(mine), -1)

    def show(values: torch.Tensor) -> str:
        return " ".join(f"{v:.3f}" for v in values.tolist())

    print(f"{args.emoji}, styles {[data['style_names'][s] for s in data['styles'][mine].tolist()]}")
    print("features (cosine distance to the real picture's):")
    print(f"  faceless {show(1 - F.cosine_similarity(feats[0], feats[1], dim=-1))}")
    for k, name in enumerate(redraws, start=2):
        print(f"  {name} {show(1 - F.cosine_similarity(feats[0], feats[k], dim=-1))}")
    print("pixels (RMSE at the best framing):")
    print(f"  faceless {show(aligned_rmse(faceless, real))}")
    for name, pictures in redraws.items():
        print(f"  {name} {show(aligned_rmse(pictures, real))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
