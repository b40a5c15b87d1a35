"""Pack one device-trained emoji set-up (`tools/device_emoji_train.sh`) as fp16 `save_pretrained` folders into two
tars (one file back may hold 16 MB): OUT/NAME.tar (the kept target, its head, both loop states) and
OUT/NAME_last.tar (the target's last weights where `--keep-best` kept others, and the set-up's log OUT/NAME.log,
which then leaves OUT).

    python tools/device_pack.py W/<set-up> $OUT <set-up>
"""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

import torch


def main(src: Path, out: Path, name: str) -> int:
    from transformers import LlamaForCausalLM

    from coolsd.models.eagle import EagleHead

    half = src / "fp16"
    loaders = {"target": LlamaForCausalLM.from_pretrained, "drafter": EagleHead.from_pretrained,
               "target_last": LlamaForCausalLM.from_pretrained}
    for part, load in loaders.items():
        if (src / part).is_dir():
            load(src / part, dtype=torch.float32).half().save_pretrained(half / part)
    log = out / f"{name}.log"
    contents = {f"{name}.tar": ["target", "drafter", "target_state.pt", "drafter_state.pt"],
                f"{name}_last.tar": ["target_last", log.name]}
    for tar_name, members in contents.items():
        missing = []
        with tarfile.open(out / tar_name, "w") as tar:
            for member in members:
                path = next((p for p in (half / member, src / member, out / member) if p.exists()), None)
                if path is None:
                    missing.append(member)
                else:
                    tar.add(path, arcname=member)
        print(f"[pack] {tar_name}: {(out / tar_name).stat().st_size / 1e6:.1f} MB; missing: {missing or 'none'}",
              flush=True)
    log.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]))
