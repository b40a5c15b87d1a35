#!/usr/bin/env bash
# Sets up a fresh machine for the tests (venv, Python packages, Debian's Chromium and C compiler) and runs them.
# Usage: tools/test.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
if ! command -v chromium >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
    || echo "warning: could not install Debian's chromium; the browser test will be skipped"
fi
if ! command -v cc >/dev/null 2>&1; then  # builds coolsd/models/rowkernel.c (the fused CPU path) on first use
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev) >/dev/null 2>&1 \
    || echo "warning: could not install a C compiler; the row-kernel tests will be skipped"
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -r requirements-test.txt -e .  # -e .: `import coolsd` from anywhere, no PYTHONPATH
set +e
.venv/bin/python -m pytest -q "$@"
rc=$?
set -e
# pytest exits 5 when no test was collected: not a failure of the code under test.
if [ "$rc" -eq 5 ]; then rc=0; fi
exit "$rc"
