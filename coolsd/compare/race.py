"""A fair race between decoders (spec section 5): always advance the one that has used the least compute.

UI-independent: it consumes `coolsd.decoding.engine` events and keeps, per decoder, the token grid filled so
far, the outcome of every token, and the running numbers the app shows. Several decoders that share
one model's weights need their own KV caches: `fork_models` makes such handles.

    racers = [Racer("eagle-1", "Eagle-1", generate(target_a, drafter_a, EagleRule(), cond=cond, num_tokens=T)),
              Racer("vanilla", "Vanilla AR", generate(target_b, None, None, cond=cond, num_tokens=T))]
    for racer, event in Race(racers):      # one engine round per step, least compute first
        ...
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor

from coolsd.decoding.events import RoundEvent
from coolsd.decoding.protocol import Drafter, TokenModel

log = logging.getLogger("coolsd")



@dataclass
class Racer:
    """One decoder in the race and everything it has reported so far.

    key: slug ("eagle-1", "vanilla", ...); label: display name; events: its engine iterator.
    tokens: (T,) int64 committed ids (-1 where not generated yet); kinds: (T,) int8 outcome codes.
    depth_sum, depth_count: (n,) float64 sums / counts of the acceptance probabilities tested at
        depth i = 1..n (running mean = sum / count); omega: the longest omega_1..omega_n its rounds reported
        where not all ones (a relaxed schedule; empty for lossless rules and vanilla AR).
    round_tokens: tokens committed by each speculative round (round 0, the prefix step, excluded).
    """

    key: str
    label: str
    events: Iterator[RoundEvent] = field(repr=False)
    num_tokens: int = 0
    tokens: Tensor = field(init=False, repr=False)
    kinds: Tensor = field(init=False, repr=False)
    done: int = 0
    seconds: float = 0.0
    target_forwards: int = 0
    draft_forwards: int = 0
    rounds: int = 0
    finished: bool = False
    depth_sum: Tensor = field(init=False, repr=False)
    depth_count: Tensor = field(init=False, repr=False)
    omega: Tensor = field(init=False, repr=False)
    round_tokens: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.tokens = torch.full((self.num_tokens,), -1, dtype=torch.long)
        self.kinds = torch.zeros(self.num_tokens, dtype=torch.int8)
        self.depth_sum = torch.zeros(0, dtype=torch.float64)
        self.depth_count = torch.zeros(0, dtype=torch.float64)
        self.omega = torch.zeros(0, dtype=torch.float64)

    def advance(self) -> RoundEvent | None:
        """Run one engine round and record it; None (and `finished`) once the iterator is exhausted."""
        try:
            event = next(self.events)
        except StopIteration:
            self.finished = True
            return None
        self.record(event)
        if self.done >= self.num_tokens:
            self.finished = True
        return event

    def record(self, e: RoundEvent) -> None:
        n = len(e.tokens)
        self.tokens[e.start : e.start + n] = e.tokens
        self.kinds[e.start : e.start + n] = torch.tensor([k.code for k in e.kinds], dtype=torch.int8)
        self.done = max(self.done, e.start + n)
        self.seconds += sum(e.seconds.values())
        self.target_forwards += e.target_forwards
        self.draft_forwards += e.draft_forwards
        self.rounds += 1
        if e.index > 0:
            self.round_tokens.append(n)
        if len(e.tested_depths):
            depth_max = int(e.tested_depths.max())
            if depth_max > len(self.depth_sum):
                grow = depth_max - len(self.depth_sum)
                self.depth_sum = torch.cat([self.depth_sum, torch.zeros(grow, dtype=torch.float64)])
                self.depth_count = torch.cat([self.depth_count, torch.zeros(grow, dtype=torch.float64)])
            idx = e.tested_depths - 1
            self.depth_sum.index_add_(0, idx, e.tested_probs.to(torch.float64))
            self.depth_count.index_add_(0, idx, torch.ones(len(idx), dtype=torch.float64))
        if len(e.omega) > len(self.omega) and not bool(torch.all(e.omega == 1)):
            self.omega = e.omega.to(torch.float64)

    @property
    def filled(self) -> Tensor:
        """(T,) bool: which tokens are committed."""
        return self.tokens >= 0

    @property
    def tau(self) -> float:
        """Mean accepted length: tokens committed per target forward (spec section 2); nan before any."""
        return self.done / self.target_forwards if self.target_forwards else math.nan

    @property
    def accept_rate(self) -> Tensor:
        """(n,) running mean of the tested acceptance probabilities per depth (nan where none tested)."""
        return self.depth_sum / self.depth_count.clamp_min(1) + torch.where(self.depth_count > 0, 0.0, math.nan)

    @property
    def tokens_per_second(self) -> float:
        return self.done / self.seconds if self.seconds > 0 else math.nan

    def versus(self, reference: Racer) -> tuple[Tensor, int, int]:
        """This racer's tokens against `reference`'s (vanilla AR's, under the same noise) at the positions both have
        committed -> (differs: (T,) bool, where both committed and the ids differ; same: how many of those
        positions hold the same id; compared: how many positions both committed)."""
        both = self.filled & reference.filled
        differs = both & (self.tokens != reference.tokens)
        compared = int(both.sum())
        return differs, compared - int(differs.sum()), compared

    def speedup(self, reference: Racer) -> float:
        """Throughput over `reference`'s at the compute spent so far (the final speed-up once both finished)."""
        mine, ref = self.tokens_per_second, reference.tokens_per_second
        return mine / ref if ref > 0 and math.isfinite(ref) and math.isfinite(mine) else math.nan

    def stats(self, reference: Racer | None = None) -> dict:
        """JSON-ready live numbers: tokens, forwards, tau, compute seconds, speed-up over `reference`."""
        out = {"decoder": self.label, "tokens": self.done, "num_tokens": self.num_tokens,
               "target_forwards": self.target_forwards, "draft_forwards": self.draft_forwards,
               "rounds": self.rounds, "mean_accepted_length": self.tau, "compute_seconds": self.seconds,
               "finished": self.finished}
        if reference is not None:
            out["speedup"] = self.speedup(reference)
        return out


# ---------------------------------------------------------------- device failures
class DeviceFailure(RuntimeError):
    """A decoder failed on the device (out of memory, a CUDA error): this race is over, the server is not."""


_DEVICE_ERROR_WORDS = ("CUDA", "cuDNN", "CUBLAS", "out of memory", "device-side assert", "HIP", "XPU")
_fault: Callable[[Racer], None] | None = None  # test hook: called before every round (see `inject_fault`)


def running_mean(values: list[float], window: int) -> list[float]:
    """Mean of the last `window` values at each position (fewer at the start): a racer's `round_tokens` smoothed."""
    sums = torch.tensor(values, dtype=torch.float64).cumsum(0)
    out = sums.clone()
    out[window:] -= sums[:-window]
    return (out / torch.arange(1, len(values) + 1).clamp(max=window)).tolist()


def is_device_failure(err: BaseException) -> bool:
    """True for errors raised by the accelerator (OOM, CUDA/cuDNN/cuBLAS errors), not by our code."""
    if isinstance(err, torch.OutOfMemoryError):
        return True
    accelerator_error = getattr(torch, "AcceleratorError", None)
    if accelerator_error is not None and isinstance(err, accelerator_error):
        return True
    return isinstance(err, RuntimeError) and any(w in str(err) for w in _DEVICE_ERROR_WORDS)


@contextlib.contextmanager
def inject_fault(fault: Callable[[Racer], None]):
    """Within the block, `fault(racer)` runs before each round of every race (it may raise, e.g. a
    `torch.OutOfMemoryError`): how CPU tests exercise the device-failure path of races and the app."""
    global _fault
    previous, _fault = _fault, fault
    try:
        yield
    finally:
        _fault = previous


def _free_device_memory() -> None:
    if torch.cuda.is_available():
        with contextlib.suppress(Exception):  # after a fatal CUDA error even this may fail
            torch.cuda.empty_cache()


class Race:
    """Steps several racers fairly: each step advances the unfinished racer with the least compute seconds.

    So at every step all racers have spent about the same compute (within one round), and a snapshot shows how
    far each got with the same budget. Ties go to the earlier racer in the list. `workers` > 1 runs that many
    racers at once, each round on a worker thread (the fused path's C calls release the GIL): the round that frees
    a worker hands it to the least-compute racer not running. Every racer is still charged only its own compute
    (a CPU decode's clock is its thread's CPU time, `coolsd.decoding.round.clock_source`), and its tokens do not
    depend on the schedule (its dice are its own), so a race on two cores ends in the same pictures and numbers
    as on one, sooner.
    """

    AHEAD = 64  # rounds the workers may finish before the caller has read them (then they wait)

    def __init__(self, racers: list[Racer], workers: int = 1) -> None:
        if not racers:
            raise ValueError("a race needs at least one racer")
        if workers < 1:
            raise ValueError(f"a race needs at least one worker, not {workers}")
        self.racers, self.workers = racers, workers
        self.steps = 0
        self._running: Iterator | None = None  # the workers' generator of a parallel race being iterated

    @property
    def finished(self) -> bool:
        return all(r.finished for r in self.racers)

    def _guarded(self, racer: Racer, round_of: Callable[[], RoundEvent | None]) -> RoundEvent | None:
        """`round_of()`: one round of `racer` (on the calling thread); a device failure ends the race with
        `DeviceFailure`."""
        try:
            if _fault is not None:
                _fault(racer)
            return round_of()
        except Exception as err:
            if not is_device_failure(err):
                raise
            self.close()  # every racer's iterator: their caches are released with them
            _free_device_memory()
            first_line = (str(err).strip().splitlines() or [""])[0][:160]
            log.error("race stopped: %s failed on the device: %s: %s", racer.label, type(err).__name__, first_line)
            raise DeviceFailure(f"the race was stopped: {racer.label} ran out of device memory or hit a device "
                                f"error ({type(err).__name__}: {first_line}). The server keeps serving; "
                                "try again, or with fewer decoders.") from err

    def step(self) -> tuple[Racer, RoundEvent] | None:
        """Advance the least-compute unfinished racer by one round; None when every racer has finished."""
        while not self.finished:
            racer = min((r for r in self.racers if not r.finished), key=lambda r: r.seconds)
            event = self._guarded(racer, racer.advance)
            if event is not None:
                self.steps += 1
                return racer, event
        return None

    def __iter__(self) -> Iterator[tuple[Racer, RoundEvent]]:
        if self.workers == 1:
            while (out := self.step()) is not None:
                yield out
            return
        self._running = self._parallel()
        yield from self._running

    def _parallel(self) -> Iterator[tuple[Racer, RoundEvent]]:
        """`workers` threads run rounds without waiting for the caller: each takes the least-compute racer no other
        is running, and hands (racer, event) to a queue this generator yields from, in the order rounds end (a caller
        drawing a frame leaves no core idle, up to `AHEAD` rounds). Closing the generator stops the workers after the
        rounds in flight; a worker's error is raised here."""
        out: queue.Queue = queue.Queue(maxsize=self.AHEAD)
        stop = threading.Event()
        workers = _Workers(self, out, stop)
        threads = [threading.Thread(target=workers.work, name=f"racer-{i}", daemon=True) for i in range(self.workers)]
        for t in threads:
            t.start()
        try:
            ended = 0
            while ended < len(threads):
                item = out.get()
                if item is None:
                    ended += 1
                elif isinstance(item, BaseException):
                    raise item
                elif (event := item[1]) is None:
                    item[0].finished = True
                else:
                    racer = item[0]
                    racer.record(event)  # here, not on the worker: what a caller shows is what it has read
                    racer.finished = racer.done >= racer.num_tokens
                    self.steps += 1
                    yield racer, event
        finally:
            stop.set()
            workers.wake()
            while any(t.is_alive() for t in threads):  # a stopped race: the rounds in flight end, their events go
                with contextlib.suppress(queue.Empty):
                    out.get(timeout=0.01)
            for t in threads:
                t.join()

    def close(self) -> None:
        """Close every racer's engine iterator (a cancelled race); a parallel race's workers are stopped first,
        after their rounds in flight, so that no iterator is still running when it is closed."""
        running, self._running = self._running, None
        if running is not None:
            with contextlib.suppress(ValueError):  # closed from a worker (a device failure): the caller stops them
                running.close()
        for r in self.racers:
            close = getattr(r.events, "close", None)
            if close is not None:
                with contextlib.suppress(ValueError):  # "generator already executing": a round in flight elsewhere
                    close()


class _Workers:
    """What a parallel race's worker threads share: which racers are running, and the turn they wait on."""

    def __init__(self, race: Race, out: queue.Queue, stop: threading.Event) -> None:
        self.race, self.out, self.stop = race, out, stop
        self.turn = threading.Condition()
        self.busy: set[int] = set()
        self.spent = {id(r): r.seconds for r in race.racers}  # compute per racer, as its rounds end
        self.done = {id(r) for r in race.racers if r.finished}

    def take(self) -> Racer | None:
        """The least-compute racer no worker runs (marked running); None once all finished or the race stopped."""
        with self.turn:
            while not self.stop.is_set():
                idle = [r for r in self.race.racers if id(r) not in self.done and id(r) not in self.busy]
                if idle:
                    racer = min(idle, key=lambda r: self.spent[id(r)])
                    self.busy.add(id(racer))
                    return racer
                if not self.busy:
                    return None
                self.turn.wait()
            return None

    def work(self) -> None:
        """A worker thread: rounds of `take`n racers into the queue; an error, then None, when it ends."""
        try:
            while (racer := self.take()) is not None:
                try:
                    event = self.race._guarded(racer, lambda r=racer: next(r.events, None))
                    self.count(racer, event)
                    self.out.put((racer, event))  # (None: its iterator ended) queued before another takes it
                finally:
                    with self.turn:
                        self.busy.discard(id(racer))
                        self.turn.notify_all()
        except BaseException as err:  # noqa: B036 (handed to the caller, who raises it)
            self.stop.set()
            self.out.put(err)
        finally:
            self.wake()
            self.out.put(None)

    def count(self, racer: Racer, event: RoundEvent | None) -> None:
        """A round's compute towards the racer's turn; the racer is done once its iterator ends or its grid is full."""
        with self.turn:
            if event is None or event.start + len(event.tokens) >= racer.num_tokens:
                self.done.add(id(racer))
            else:
                self.spent[id(racer)] += sum(event.seconds.values())
            self.turn.notify_all()

    def wake(self) -> None:
        with self.turn:
            self.turn.notify_all()


# ---------------------------------------------------------------- independent model handles
def fork_models(target: TokenModel, drafter: Drafter | None = None) -> tuple[TokenModel, Drafter | None]:
    """Independent handles on the same weights (the models' own `fork`): each has its own empty caches,
    and the forked drafter reads the forked target. Safe at any time, also after decoding."""
    forked = target.fork()
    return forked, None if drafter is None else drafter.fork(forked)
