"""How the annealed-vs-uniform verdict (coolsd.theory.annealing.compare_schedules) moves with the random models' shape.

    OMP_NUM_THREADS=1 python -m scripts.schedule_sensitivity > runs/sensitivity.txt   (reported, not asserted)
"""

from __future__ import annotations

import json
import sys

import torch

from coolsd.theory.annealing import compare_schedules, format_schedules

VARIANTS = [{"sharpness": 1.5, "noise": "uniform"}, {"sharpness": 3.0, "noise": "random"},
            {"sharpness": 0.75, "noise": "random"}]


def main() -> None:
    torch.set_num_threads(1)
    out = []
    for v in VARIANTS:
        report = compare_schedules(n_close=4, n_far=3, **v)
        print(v, "\n" + format_schedules(report), flush=True)
        out.append(report)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
