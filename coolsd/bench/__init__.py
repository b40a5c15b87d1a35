"""Benchmark of the decoders: `python -m coolsd.bench`; see `coolsd.bench.cli` for the command.

Start reading at `cli.py` (the command). settings.py: what is compared; runner.py: timed, scored work
items and their split across processes; report.py: per-setting rows, the paper's claims, targets,
table and figure (the metrics themselves: `coolsd.compare.metrics`). Tools on the same code:
`python -m coolsd.bench.gpu` (GPU check of the LlamaGen path), `python -m coolsd.bench.tuning`
(chain length / tree tuned to this CPU) and `python -m coolsd.bench.limit` (a step against the machine's
memory limit, eager and fused paths: `limit_table.py`, recorded by every benchmark run) and
`python -m coolsd.bench.delta_sweep` (COOL-SD's delta swept on one model: the file the app's Lab draws).
"""

from coolsd.bench.cli import main

__all__ = ["main"]
