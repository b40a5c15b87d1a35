"""`python -m coolsd.bench.precision [FOLDER]`: measure once which precision a model runs faster in here, and store it.

Times a default round (L drafter steps + one target verify of L + 1 tokens, with the guidance rows of the
model's default sampling: one for the emoji model's CFG 1, two under CFG) in fp32 and bf16, in alternating
turns at one thread (as the app decodes), on the execution path the model folder stores (`execution.json`,
e.g. lean; eager when none: `coolsd.models.graphs.stored_path`), and writes the faster to
`FOLDER/precision.json` ({"cpu": "bf16", "measured": ...}). The loader reads that file at every start
(`coolsd.models.emoji.stored_precision`; $COOLSD_DTYPE overrides it), so the path, the recorded race and
the speed-ups no longer depend on the load of the moment a server starts. Run it again after a retrain
or on a new kind of machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
from collections.abc import Callable
from pathlib import Path

import torch

from coolsd.decoding.engine import DecodeConfig
from coolsd.models.emoji import DTYPES, PRECISION_FILE, stored_sampling
from coolsd.models.graphs import prepare, stored_path
from coolsd.models.timing import interleaved_medians
from coolsd.util.machine import record_choice
from coolsd.util.paths import EMOJI_DIR

WARMUP, REPEATS = 4, 15  # untimed and timed turns (each a round of each precision)


def round_call(model, head, draft_len: int, context: int = 64, path: str = "eager",
               guidance: bool = True) -> Callable[[], None]:
    """One default round as a call to time: `draft_len` drafter steps of one token and one target verify
    of draft_len + 1 tokens, both CFG rows (`guidance`; else the condition's row alone), after `context` cached
    tokens, on execution `path`."""
    from coolsd.models.eagle import EagleDrafter
    from coolsd.models.embedded import LlamaClassTarget

    cfg = model.config
    target = LlamaClassTarget(model, max_tokens=context + draft_len + 1)
    drafter = EagleDrafter(head, model.model.embed_tokens.weight, model.lm_head.weight[: cfg.codebook_size],
                           context + draft_len + 1)
    prepare([target, drafter], path=path, rows=(2 if guidance else 1,))
    with torch.no_grad():
        target.start(0, guidance)
        drafter.start(0, guidance)
        pre = target.forward(torch.zeros(context, dtype=torch.long), torch.arange(context))
        drafter.forward(torch.zeros(context, dtype=torch.long), pre.hidden, torch.arange(context))

    @torch.no_grad()
    def one_round() -> None:
        hidden = pre.hidden[:, -1:]
        for j in range(draft_len):
            hidden = drafter.forward(torch.zeros(1, dtype=torch.long), hidden, torch.tensor([context + j])).hidden
        target.forward(torch.zeros(draft_len + 1, dtype=torch.long), torch.arange(context, context + draft_len + 1))
        target.crop(context)
        drafter.crop(context)

    return one_round


def measure(root: Path, draft_len: int | None = None, repeats: int = REPEATS, warmup: int = WARMUP) -> dict:
    """{"cpu": the faster precision, "measured": {precision: ms per round}, "path": ...} for the model under
    `root`, on its stored execution path."""
    from transformers import LlamaForCausalLM

    from coolsd.models.eagle import EagleHead

    draft_len = draft_len or DecodeConfig().draft_len
    path = stored_path(root, torch.device("cpu")) or "eager"
    guidance = stored_sampling(root).guidance
    calls = {}
    for name, dtype in DTYPES.items():
        model = LlamaForCausalLM.from_pretrained(root / "target", dtype=dtype).eval()
        head = EagleHead.from_pretrained(root / "drafter", dtype=dtype).eval()
        calls[name] = round_call(model, head, draft_len, path=path, guidance=guidance)
    ms = {name: round(1e3 * s, 2) for name, s in interleaved_medians(calls, repeats, warmup).items()}
    now = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017 - Python 3.10 has no datetime.UTC
    return {"cpu": min(ms, key=ms.get), "measured_ms_per_round": ms, "draft_len": draft_len, "guidance": guidance,
            "threads": torch.get_num_threads(), "turns": repeats, "date": now.strftime("%Y-%m-%d"), "path": path}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default=str(EMOJI_DIR), help="model folder (default: the emoji model)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads while timing (the app decodes at 1)")
    parser.add_argument("--dry-run", action="store_true", help="print the choice, write nothing")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    root = Path(args.folder)
    choice = measure(root)
    print(json.dumps(choice))
    if not args.dry_run:
        record_choice(root / PRECISION_FILE, choice)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
