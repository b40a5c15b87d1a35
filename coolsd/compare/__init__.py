"""Comparison back-ends: several decoders side by side on the same models (the app's tabs call these).

Start reading at `race.py` (`Race`: racers stepped round by round with the same compute budget,
`fork_models`), then `trace.py` (a race recorded as events, replayable and downloadable as JSON) and
`lab.py` (the quality lab: many samples per decoder, judged by token NLL and the digit classifier)
and `metrics.py` (token NLL, classifier features and accuracy, FID: used by the lab, the benchmark
and training). `cost.py` is the cost model: the speed-up predicted from per-depth acceptance and the
measured call times, beside the speed-up a race measured.
"""
