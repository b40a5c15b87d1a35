"""`python -m coolsd.bench.limit`: the limit table of a shipped model (`coolsd.bench.limit_table`).

Writes limit.json and limit.md (the table) into --out (default: the model's bench folder).

    python -m coolsd.bench.limit --model emoji
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from coolsd.bench.limit_table import BIG_BUFFER, MODELS, markdown, measure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coolsd.bench.limit", description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="emoji")
    parser.add_argument("--model-dir", type=Path, default=None,
                        help="another folder of that model's kind (an earlier emoji model) instead of the shipped one")
    parser.add_argument("--out", type=Path, default=None, help="folder for limit.json / limit.md (default: the "
                                                               "model's bench folder)")
    parser.add_argument("--draft-len", type=int, default=None, help="L of the round (default: the engine's)")
    parser.add_argument("--repeats", type=int, default=30, help="timed turns per call")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the app decodes at 1)")
    parser.add_argument("--buffer-mb", type=int, default=BIG_BUFFER // 2**20,
                        help="MB copied to measure the memory's bandwidth (past every cache)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    load, root, out = MODELS[args.model]
    root, out = args.model_dir or root, args.out or (args.model_dir / "bench" if args.model_dir else out)
    bundle = load(root, device="cpu")
    result = measure(bundle, args.draft_len, args.repeats, buffer_bytes=args.buffer_mb * 2**20)
    out.mkdir(parents=True, exist_ok=True)
    (out / "limit.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (out / "limit.md").write_text(markdown(result), encoding="utf-8")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
