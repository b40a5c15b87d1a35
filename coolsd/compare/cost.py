"""Where the time goes: the cost model of speculative decoding, from this machine's measured call times.

Units: one *target step* (one target forward of one token, with its guidance rows) costs 1.

    c    = drafter step / target step                      (measured: `coolsd.models.timing`)
    V(n) = target forward of n tokens / target step        (V(1) = 1; V(n) = 1 where verifying is free)
    E    = 1 + a_1 + a_1 a_2 + ... + a_1 a_2 ... a_L       (expected tokens a chain round commits)

with a_i the acceptance rate at draft depth i (the chance that a draft at depth i is kept, given the
round reached it). A chain round of L drafts costs L c + V(L + 1) target steps and vanilla AR commits
one token per step, so the predicted speed-up over vanilla AR is

    speed-up = E / (L c + V(L + 1)).

SJD (Speculative Jacobi Decoding), and every rule on Jacobi drafts (COOL-SD or LANTERN++ without a drafter), has no
drafter: an iteration is one target forward on the last committed token and its window of W drafts, so c = 0 and
L = W: speed-up = E / V(W + 1).

It leaves out the image's first and last rounds (shorter), the time spent outside model calls
(sampling, the rules) and the independence it assumes between depths: `compare_racers` puts the
prediction beside the speed-up a race measured, so the gap shows how much those matter.
`CurveCache` measures each model's curve once, on a background thread.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from coolsd.compare.race import Racer
from coolsd.models.timing import ForwardTimes
from coolsd.util.checks import check_int, check_number


# ---------------------------------------------------------------- the formula
def expected_tokens(accept: Sequence[float]) -> float:
    """E[tokens per round] = 1 + sum_j prod_{i <= j} a_i for per-depth acceptance rates a_1..a_L in [0, 1]."""
    total, reach = 1.0, 1.0
    for i, a in enumerate(accept, 1):
        check_number(f"acceptance at depth {i}", a, 0, 1)
        reach *= a
        total += reach
    return total


def round_cost(draft_len: int, draft_cost: float, verify_cost: float) -> float:
    """Target steps of one chain round: L c + V(L + 1) (verify_cost is V(L + 1))."""
    draft_len = check_int("draft length L", draft_len, 0)
    check_number("draft cost c", draft_cost, 0)
    check_number("verify cost V", verify_cost, 0, low_open=True)
    return draft_len * draft_cost + verify_cost


def predicted_speedup(accept: Sequence[float], draft_cost: float, verify_cost: float) -> float:
    """E / (L c + V(L + 1)) with L = len(accept): speed-up over vanilla AR (1 token per target step)."""
    return expected_tokens(accept) / round_cost(len(accept), draft_cost, verify_cost)


# ---------------------------------------------------------------- measured costs in target steps
@dataclass(frozen=True)
class Costs:
    """The model's inputs in target steps: c and V(1..n_max); memory_bound sets every V(n) to 1."""

    times: ForwardTimes
    memory_bound: bool = False

    @property
    def step_ms(self) -> float:
        """One target step in milliseconds (the unit)."""
        return 1000 * self.times.target_s[0]

    @property
    def draft_cost(self) -> float:
        """c = drafter step / target step (nan without a drafter)."""
        d = self.times.drafter_s
        return math.nan if d is None else d / self.times.target_s[0]

    def verify_cost(self, n: int) -> float:
        """V(n) = target forward of n tokens / target step (1 when memory_bound)."""
        steps = self.times.verify_steps(n)
        return 1.0 if self.memory_bound else steps

    def curve(self) -> list[dict]:
        """Per n = 1..n_max: {"tokens": n, "ms": measured, "steps": V(n) measured}; JSON-ready."""
        return [{"tokens": n, "ms": 1000 * s, "steps": self.times.verify_steps(n)}
                for n, s in enumerate(self.times.target_s, 1)]

    def speedup(self, accept: Sequence[float]) -> float:
        """Predicted speed-up of chain rounds with per-depth acceptance `accept` (L = len(accept))."""
        return predicted_speedup(accept, self.draft_cost, self.verify_cost(len(accept) + 1))

    def jacobi_speedup(self, accept: Sequence[float]) -> float:
        """Predicted speed-up of Jacobi iterations (any rule on Jacobi drafts: SJD, COOL-SD or LANTERN++ without a
        drafter) of window W = len(accept): E / V(W + 1), no drafter (c = 0);
        nan where W + 1 is beyond the measured curve."""
        if len(accept) + 1 > len(self.times.target_s):
            return math.nan
        return predicted_speedup(accept, 0.0, self.verify_cost(len(accept) + 1))


# ---------------------------------------------------------------- a race's numbers beside the prediction
def racer_acceptance(racer: Racer, draft_len: int) -> list[float]:
    """The race's per-depth acceptance a_1..a_L: the mean acceptance probability tested at each depth
    (`Racer.accept_rate`); depths the race never reached count as 0 (no tokens come from them)."""
    rate = racer.accept_rate.tolist()[:draft_len]
    rate += [0.0] * (draft_len - len(rate))
    return [0.0 if not math.isfinite(a) else a for a in rate]


def compare_racers(racers: Sequence[Racer], costs: Costs, draft_len: int, reference: Racer,
                   chain: bool = True, windows: Mapping[str, int] | None = None) -> list[dict]:
    """Per racer: measured a_i, predicted E and speed-up, measured tokens per round and speed-up, and measured over
    predicted speed-up (what the work outside model calls leaves of the prediction) (JSON-ready).

    reference: vanilla AR of the same race (its predicted speed-up is 1 by definition). Tree
    drafting is not modelled (chain=False: predictions are nan). windows: racer key -> W for the racers that
    draft by Jacobi iteration (the no-drafter racers: L = W, c = 0, whatever the race's drafting).
    """
    rows, windows = [], windows or {}
    for r in racers:
        if r is reference:
            rows.append(_row(r, [], 1.0, 1.0, 1.0, reference))
            continue
        jacobi = r.key in windows
        accept = racer_acceptance(r, windows[r.key] if jacobi else draft_len)
        e = expected_tokens(accept)
        modelled = chain or jacobi
        predicted = (costs.jacobi_speedup(accept) if jacobi else costs.speedup(accept)) if modelled else math.nan
        rows.append(_row(r, accept, e if modelled else math.nan, predicted, _mean(r.round_tokens), reference))
    return rows


def _row(r: Racer, accept: list[float], expected: float, predicted: float, measured_e: float,
         reference: Racer) -> dict:
    measured = r.speedup(reference)
    return {"key": r.key, "decoder": r.label, "acceptance": accept, "expected_tokens": expected,
            "measured_tokens_per_round": measured_e, "predicted_speedup": predicted,
            "measured_speedup": measured, "finished": r.finished,
            "measured_over_predicted": measured / predicted if predicted > 0 else math.nan}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


# ---------------------------------------------------------------- measured once, in the background
class CurveCache:
    """Forward times measured once per key (model and execution path), each on its own background thread.

    start(key, measure) begins `measure()` unless it ran or runs; get(key, timeout) waits for it (None
    while still running after `timeout` seconds); a failed measurement raises its error from `get`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[object, threading.Thread] = {}
        self._results: dict[object, ForwardTimes | BaseException] = {}

    def start(self, key, measure: Callable[[], ForwardTimes]) -> None:
        with self._lock:
            if key in self._threads:
                return

            def work() -> None:
                try:
                    result = measure()
                except Exception as err:  # kept, raised to whoever asks
                    result = err
                with self._lock:
                    self._results[key] = result

            thread = threading.Thread(target=work, name=f"coolsd-cost-{key}", daemon=True)
            self._threads[key] = thread
        thread.start()

    def get(self, key, timeout: float | None = None) -> ForwardTimes | None:
        with self._lock:
            thread = self._threads.get(key)
        if thread is None:
            raise KeyError(f"no measurement started for {key!r}")
        thread.join(timeout)
        with self._lock:
            result = self._results.get(key)
        if isinstance(result, BaseException):
            raise RuntimeError(f"measuring the call times failed: {type(result).__name__}: {result}") from result
        return result
