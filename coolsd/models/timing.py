"""How long a model's calls take, measured through the engine's model protocol (what the engine calls).

The one home of forward timing: the cost model (`coolsd.compare.cost`) reads the target's time for
1..n new tokens and the drafter's step time from here, and so may a loader choosing its precision
or a benchmark tool drawing a cost curve.

    times = forward_times(target, drafter, cond=3, guidance=True, max_tokens=9, context=128)
    times.target_s[3] / times.target_s[0]    # verifying 4 tokens costs this many single-token steps

Each timed call appends tokens after `context` cached ones and is cropped back afterwards, so the
models are left as they were after the context (callers time on their own handles: `fork`).
`clock` is injectable: tests drive the measurement with a fake clock and a fake model.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from coolsd.util.checks import check_int


def device_sync(device) -> Callable[[], None]:
    """A function that waits for `device`'s queued work (CUDA), a no-op elsewhere."""
    device = torch.device(device)
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def median_seconds(fn: Callable[[], Any], repeats: int = 7, warmup: int = 2, sync: Callable[[], None] = lambda: None,
                   clock: Callable[[], float] = time.perf_counter) -> float:
    """Median wall seconds of `fn()` over `repeats` calls after `warmup` untimed ones (each call synchronised)."""
    return interleaved_medians({"fn": fn}, repeats, warmup, sync, clock)["fn"]


def interleaved_medians(fns: Mapping[str, Callable[[], Any]], repeats: int = 7, warmup: int = 2,
                        sync: Callable[[], None] = lambda: None,
                        clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """{name: median wall seconds of fns[name]()}, the calls taken in turns (a, b, a, b, ...): `warmup`
    untimed turns, then `repeats` timed ones, so a change of machine load during the measurement falls
    on every candidate alike instead of on whichever happened to be timed then."""
    repeats, warmup = check_int("repeats", repeats, 1), check_int("warmup", warmup, 0)
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            sync()
            t0 = clock()
            fn()
            sync()
            times[name].append(clock() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


@dataclass(frozen=True)
class ForwardTimes:
    """Measured call times of one (target, drafter) pair on one execution path, in seconds.

    target_s: (n_max,) one target forward of n = 1..n_max new tokens, every guidance row (2 with CFG).
    drafter_s: one drafter step (one new token, every row, its own feature as in a chain round); None
        without a drafter. rows: guidance rows; context: cached tokens before each call; repeats: calls
        per median.
    """

    target_s: tuple[float, ...]
    drafter_s: float | None
    rows: int
    context: int
    repeats: int

    def verify_steps(self, n: int) -> float:
        """A forward of n tokens in units of one single-token step: t(n) / t(1)."""
        n = check_int("n", n, 1, len(self.target_s))
        return self.target_s[n - 1] / self.target_s[0]

    def to_json(self) -> dict:
        return {"target_s": list(self.target_s), "drafter_s": self.drafter_s, "rows": self.rows,
                "context": self.context, "repeats": self.repeats}


def forward_times(target, drafter, cond: Any, guidance: bool = True, max_tokens: int = 9, context: int = 64,
                  repeats: int = 7, warmup: int = 2, clock: Callable[[], float] = time.perf_counter) -> ForwardTimes:
    """Median time of a target forward of 1..max_tokens tokens and of one drafter step after `context` tokens.

    target / drafter: engine models (`coolsd.decoding.protocol`; drafter may be None); cond: their
    condition; guidance: True times both CFG rows, as a decode with CFG runs them. Token ids are 0
    (time does not depend on them). The caches hold the context afterwards.
    """
    max_tokens, context = check_int("max_tokens", max_tokens, 1), check_int("context", context, 1)
    dev = target.device
    sync = device_sync(dev)
    ids = torch.zeros(context + max_tokens, dtype=torch.long, device=dev)
    first = target.start(cond, guidance)
    step = target.forward(ids[:context], torch.arange(context, device=dev))
    rows = int(step.logits.shape[0])

    def verify(n: int) -> None:
        target.forward(ids[:n], torch.arange(context, context + n, device=dev))
        target.crop(context)

    target_s = tuple(median_seconds(lambda n=n: verify(n), repeats, warmup, sync, clock)
                     for n in range(1, max_tokens + 1))
    drafter_s = None
    if drafter is not None:
        drafter.start(cond, guidance)
        hidden = None if step.hidden is None else torch.cat([first.hidden, step.hidden[:, :-1]], dim=1)
        out = drafter.forward(ids[:context], hidden, torch.arange(context, device=dev))
        own = None if out.hidden is None else out.hidden[:, -1:]  # a chain round's later steps read this
        position = torch.tensor([context], device=dev)

        def draft_step() -> None:
            drafter.forward(ids[:1], own, position)
            drafter.crop(context)

        drafter_s = median_seconds(draft_step, repeats, warmup, sync, clock)
    return ForwardTimes(target_s, drafter_s, rows, context, repeats)
