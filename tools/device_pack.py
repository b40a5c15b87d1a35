"""Pack one device-trained emoji set-up (`tools/device_emoji_train.sh`): its target and head as fp16
`save_pretrained` folders, with the loop states (histories), into one tar.

    python tools/device_pack.py W/<set-up> $OUT/<set-up>.tar
"""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

import torch


def main(src: Path, dst: Path) -> int:
    from transformers import LlamaForCausalLM

    from coolsd.models.eagle import EagleHead

    half = src / "fp16"
    loaders = {"target": LlamaForCausalLM.from_pretrained, "drafter": EagleHead.from_pretrained}
    with tarfile.open(dst, "w") as tar:
        for part, load in loaders.items():
            if (src / part).is_dir():
                load(src / part, dtype=torch.float32).half().save_pretrained(half / part)
                tar.add(half / part, arcname=part)
        for state in ("target_state.pt", "drafter_state.pt"):
            if (src / state).is_file():
                tar.add(src / state, arcname=state)
    print(f"[pack] {dst}: {dst.stat().st_size / 1e6:.1f} MB", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]), Path(sys.argv[2])))
