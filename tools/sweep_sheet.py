"""The Lab's sheet of a model's delta sweep as a PNG: vanilla AR, Eagle-1, COOL-SD at the swept delta nearest
`--delta` (default 2) and at the delta from which the sweep says pictures break (else the largest swept), the
samples the sweep kept (`python -m coolsd.bench.delta_sweep` first). For a README:

    .venv/bin/python tools/sweep_sheet.py --model emoji --out assets/emoji/delta_sweep.png
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> int:
    from coolsd.app import sweep_view
    from coolsd.app.context import open_context

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="emoji", help="a registry key: emoji, mnist")
    ap.add_argument("--delta", type=float, default=2.0, help="the COOL-SD row nearest this delta")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    ctx = open_context(args.model, others=[])
    sweep = sweep_view.load(ctx.model.kind)
    if sweep is None:
        raise SystemExit(f"no delta sweep for {args.model}: python -m coolsd.bench.delta_sweep --model {args.model}")
    image = sweep_view.sheet(ctx, sweep, args.delta)
    if image is None:
        raise SystemExit("the sweep keeps no samples that fit this model (--keep 0, or another model's tokens)")
    image.save(args.out)
    print(f"{args.out}: {', '.join(label for label, _ in sweep_view.sheet_rows(sweep, args.delta))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
