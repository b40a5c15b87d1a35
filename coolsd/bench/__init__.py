"""Benchmark of the decoders (issue 4): `python -m coolsd.bench`; see `coolsd.bench.cli` for the command.

settings.py: what is compared; runner.py: timed, scored work items and their split across processes;
report.py: per-setting rows, the paper's claims, targets, table and figure; cli.py: the command.
"""

from coolsd.bench.cli import main

__all__ = ["main"]
