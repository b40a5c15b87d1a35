#!/usr/bin/env bash
# Issue 34 on a GPU machine: train each emoji set-up's target and then its Eagle head, all set-ups side by side on
# the one GPU, and pack each as fp16 folders into $OUT/<set-up>.tar and <set-up>_last.tar (`tools/device_pack.py`).
# The target keeps the weights of its lowest NLL on unseen framings (`--keep-best`); its last weights come back too.
# Prepared here (no SVG sets, no network there): .devdata/ holds the dataset file and each set-up's framed codes
# (`coolsd.train.emoji.load_framed_codes`, xz), .whl/ the diffusers wheel (`/work/shared/tools/device-wheels.sh`):
#   bash tools/device_emoji_train.sh prepare         (here: the npm sets, rendering, codes, wheels; a few minutes)
#   device run: bash tools/device_emoji_train.sh      (carry .whl and .devdata; about 8 minutes)
# Each line of SETUPS: name, then the target stage's own flags.
set -u
TARGET_MIN=${TARGET_MIN:-5}
DRAFTER_MIN=${DRAFTER_MIN:-2}
DEVICE=${DEVICE:-cuda}
N_SELF=${N_SELF:-1000}
SETUPS=(
  "framed --framed 48 --framed-scales 0.85 1.0 --framed-shift 1.0"
  "subpixel --framed 48 --framed-scales 0.92 1.0 --framed-shift 0.5"
  "subpixel-channel --framed 48 --framed-scales 0.92 1.0 --framed-shift 0.5 --channel-sigma2 0.03 --channel-temperature 0.6"
)
if [ "${1:-}" = prepare ]; then  # here, not on the device machine
  py=${PYTHON:-.venv/bin/python}
  ls /work/data/emoji/emoji_names*.pt >/dev/null 2>&1 || "$py" -m coolsd.train.emoji_data || exit 1
  mkdir -p .devdata && rm -f .devdata/*
  cp /work/data/emoji/emoji_names*.pt .devdata/
  for line in "${SETUPS[@]}"; do  # a zero-minute target stage caches the set-up's framed codes (and checks its flags)
    # shellcheck disable=SC2086
    set -- $line; name=$1; shift
    codes=$("$py" -m coolsd.train target --model emoji --out "/tmp/prepare/$name" --budget-min 0 --fp32 "$@" 2>/dev/null \
      | sed -n 's/^\[target\] framed codes //p') || exit 1
    [ -z "$codes" ] || [ -f ".devdata/$(basename "$codes").xz" ] || xz -T2 -6 -c "$codes" > ".devdata/$(basename "$codes").xz"
  done
  bash /work/shared/tools/device-wheels.sh > /dev/null && rm -f .whl/transformers-* .whl/plotly-*  # 64 MiB tree
  du -sh .devdata .whl
  total=$(( $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) + $(du -cb .devdata .whl | tail -1 | cut -f1) ))
  echo "what travels: $(( total / 1048576 )) MiB of the 64 MiB a device call takes"
  [ "$total" -lt 67108864 ] || exit 1
  exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 GRADIO_ANALYTICS_ENABLED=False \
  HF_HUB_DISABLE_TELEMETRY=1
mkdir -p /work/data/emoji W
cp .devdata/emoji_names*.pt /work/data/emoji/
for f in .devdata/*.pt.xz; do xz -dc "$f" > "/work/data/emoji/$(basename "$f" .xz)"; done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers, diffusers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'diffusers', diffusers.__version__)"

one_setup() {
  local name=$1; shift
  local log=$OUT/$name.log
  python3 -m coolsd.train target --model emoji --out "W/$name" --device "$DEVICE" --batch 128 --lr 1e-3 \
    --budget-min "$TARGET_MIN" --init assets/emoji/target --keep-best "$@" > "$log" 2>&1 \
  && python3 -m coolsd.train drafter --model emoji --out "W/$name" --device "$DEVICE" --batch 64 --lr 1e-3 \
    --budget-min "$DRAFTER_MIN" --n-self "$N_SELF" --bf16 --init assets/emoji/drafter >> "$log" 2>&1
  echo "[$name] stages rc=$?" | tee -a "$log"
  python3 tools/device_pack.py "W/$name" "$OUT" "$name" 2>&1 | grep '^\[pack\]'
}
for line in "${SETUPS[@]}"; do
  # shellcheck disable=SC2086
  one_setup $line &
done
wait
nvidia-smi --query-gpu=memory.used --format=csv,noheader
ls -la "$OUT"
