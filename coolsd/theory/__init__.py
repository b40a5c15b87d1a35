"""Exact theory on small tabular models: no sampling, every output sequence enumerated.

Start reading at `oracle.py` (`exact(rule, target, drafter)`: the exact output distribution of the
engine's rule and its expected accepted length), on the models of `tabular.py`. `annealing.py`
compares relaxation schedules (the Schedule tab), `sweeps.py` the TV-vs-length trade-off curves and
the report (`python -m coolsd.theory`, the Theory tab).
"""
