"""The quality lab's backend: one grid of samples per decoder (same classes, same seeds), judged as it streams.

A lab run decodes `len(conditions)` samples with each decoder of a `LabSetup` (vanilla AR as the
reference, Eagle-1, the chosen relaxed rule and its twin), on a few worker threads that each hold
their own model handles (`coolsd.compare.race.fork_models`), and yields a `LabSample` as soon as one
finishes, row by row (sample j of every decoder before sample j + 1). Every sample carries what
judges it: the target's mean NLL of its tokens (`coolsd.compare.metrics.token_nll`), the shipped
classifier's reading (embedded models: the digit, or the emoji's class), tau and its decode time. `summarise` turns the
samples so far into per-decoder numbers: accuracy, mean NLL, tau, speed-up over vanilla AR.

Vanilla AR and Eagle-1 do not depend on the chosen relaxation, so their samples are cached per
(condition, seed, sampling, draft length): moving the relaxation slider only decodes the relaxed
decoders again (same seed, same tokens, so a cached sample is the sample).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from coolsd.compare.metrics import classifier_outputs, predicted, token_nll
from coolsd.compare.race import fork_models
from coolsd.decoding import variants
from coolsd.decoding.engine import DecodeConfig, run
from coolsd.decoding.rules import RULES, CoolSDRule, EagleRule, LanternPPRule, LinearDecayRule, Rule
from coolsd.decoding.sampling import SamplingConfig
from coolsd.util.checks import check_int, check_number
from coolsd.util.paths import EMBEDDED_CLASSIFIER

VANILLA = variants.VANILLA
# The lab's relaxed decoders (variant keys of `coolsd.decoding.variants`) -> label; each is relaxed by its
# variant's strength knob (delta for the omega rules, lambda for LANTERN++) and judged beside its twin.
LAB_RULES = {
    "cool-sd": f"COOL-SD (nu {CoolSDRule.nu:g}, floored at 1, mean omega = delta)",
    "cool-sd-unclipped": f"COOL-SD unclipped (nu {CoolSDRule.nu:g}, mean omega = delta)",
    "uniform-rsd": "UniformRSD",
    "linear-decay": f"Linear decay (slope {LinearDecayRule.slope:g})",
    "lantern++": "LANTERN++ (published residual)",
}
# Twins: COOL-SD (floored or not) and linear decay -> UniformRSD at the same delta (same mean omega);
# UniformRSD -> COOL-SD at the same delta; LANTERN++ -> LANTERN++ with the G* residual, same k and lambda.
TWINS = {"cool-sd": "uniform-rsd", "cool-sd-unclipped": "uniform-rsd", "linear-decay": "uniform-rsd",
         "uniform-rsd": "cool-sd", "lantern++": "lantern++-gstar"}
CACHED = ("vanilla", "eagle-1")  # decoders whose samples do not depend on the relaxation
CACHE_SIZE = 256  # samples kept, without their images (T token ids and a few numbers; images are re-decoded)


@dataclass(frozen=True)
class LabDecoder:
    """One column of the grid: key (unique), label, rule (None = vanilla AR)."""

    key: str
    label: str
    rule: Rule | None


def _column(key: str, relaxation: float, k: int, neighbours: Tensor | None) -> tuple[str, Rule]:
    """(label, rule) of variant `key` relaxed to `relaxation` (its strength knob)."""
    v = variants.get(key)
    table = RULES[v.rule].reads_neighbours  # (the rule reads the model's neighbour table: its k is bounded by it)
    rule = variants.at_strength(key, relaxation, {"k": k} if table else None, neighbours)
    if table:
        return f"{v.name}{' ' + v.tag if v.tag else ''} k={k} lambda={relaxation:g}", rule
    return f"{v.name} delta={relaxation:g}", rule


def lab_decoders(rule_key: str, relaxation: float, neighbours: Tensor | None = None,
                 lantern_k: int = LanternPPRule.k) -> list[LabDecoder]:
    """Vanilla AR, Eagle-1, the chosen variant (a LAB_RULES key or its alias) at `relaxation`, and its twin
    (TWINS); ValueError on bad input. neighbours: the model's (V, k_max + 1) table (LANTERN++ only);
    lantern_k is clamped to what it holds.
    """
    key = variants.ALIASES.get(rule_key, rule_key) if isinstance(rule_key, str) else rule_key
    if key not in LAB_RULES:
        raise ValueError(f"unknown lab rule {rule_key!r}; choose one of {', '.join(LAB_RULES)}")
    relaxation = check_number("the relaxation", relaxation)
    k = lantern_k
    if RULES[variants.get(key).rule].reads_neighbours:
        if neighbours is None:
            raise ValueError(f"{variants.get(key).name} needs the model's neighbour table")
        k = min(lantern_k, int(neighbours.shape[-1]) - 1)
    chosen, twin = _column(key, relaxation, k, neighbours), _column(TWINS[key], relaxation, k, neighbours)
    return [LabDecoder(VANILLA, "Vanilla AR", None), LabDecoder("eagle-1", "Eagle-1", EagleRule()),
            LabDecoder("chosen", *chosen), LabDecoder("twin", *twin)]


@dataclass(frozen=True)
class LabSample:
    """One finished sample. row: index of the sample (its condition and seed); column: decoder index.

    tokens: (T,) int64; image: (C, H, W) float in [0, 1]; seconds: decode wall time in its worker
    (the engine's draft + verify + other); nll: the target's mean NLL, nats/token; predicted: the
    classifier's class (None without a classifier); cached: reused from an earlier run.
    """

    row: int
    column: int
    decoder: str
    condition: Any
    seed: int
    tokens: Tensor
    image: Tensor
    tau: float
    target_forwards: int
    seconds: float
    nll: float
    predicted: int | None
    cached: bool = False
    styles: int = 0

    @property
    def correct(self) -> bool | None:
        """Whether the classifier read the requested class (None without a classifier)."""
        if self.predicted is None:
            return None
        if self.styles:
            return self.predicted // self.styles == self.condition // self.styles
        return self.predicted == self.condition


class Lab:
    """The classifier and the sample cache of the quality lab; `run` streams a grid.

    target, drafter, tokenizer: as the engine and the app use them (shared weights, never decoded
    on directly: every worker decodes on its own handle, see `run`). classifier: a
    `ResNetForImageClassification` (the MNIST digit classifier, or the emoji class + style one) or None.
    workers: threads decoding at once
    (2 on a 2-core machine). The lab forks its own handles here (before anything decodes on the
    models: `fork_models` refuses models with allocated caches); `run` may be given others.
    """

    def __init__(self, target, drafter, tokenizer, num_tokens: int, classifier=None, workers: int = 2) -> None:
        workers = check_int("workers", workers, 1)
        self.tokenizer, self.num_tokens, self.classifier, self.workers = tokenizer, num_tokens, classifier, workers
        self._own = [fork_models(target, drafter) for _ in range(workers)]  # weights shared, caches own
        self._cache: OrderedDict[tuple, LabSample] = OrderedDict()
        self._lock = threading.Lock()
        self._classifier_lock = threading.Lock()

    # -- one sample --------------------------------------------------------------------------
    def _decode(self, handles: queue.Queue, decoder: LabDecoder, row: int, column: int, cond, seed: int,
                sampling: SamplingConfig, config: DecodeConfig) -> LabSample:
        target, drafter = handles.get()
        try:
            result = run(target, drafter, decoder.rule, cond=cond, num_tokens=self.num_tokens,
                         sampling=sampling, config=config, seed=seed)
            nll = token_nll(target, sampling, cond, result.tokens)
        finally:
            handles.put((target, drafter))
        image = self.tokenizer.decode(result.tokens)  # (C, H, W) in [0, 1]
        read, styles = None, 0
        if self.classifier is not None:
            with self._classifier_lock:
                logits = classifier_outputs(self.classifier, image[None].float())[1][0]
            read = predicted(self.classifier, logits, cond)["pred"]
            styles = getattr(self.classifier.config, "num_styles", 0)
        return LabSample(row, column, decoder.key, cond, seed, result.tokens, image, result.tau,
                         result.target_forwards, sum(result.seconds.values()), nll, read, styles=styles)

    def _key(self, decoder: LabDecoder, cond, seed: int, sampling: SamplingConfig, config: DecodeConfig) -> tuple:
        rule = None if decoder.rule is None else tuple(sorted(decoder.rule.config().items()))
        return (decoder.key, rule, cond, seed, dataclasses.astuple(sampling), config.drafting)

    # -- a grid ------------------------------------------------------------------------------
    def run(self, decoders: list[LabDecoder], conditions: list, seeds: list[int], sampling: SamplingConfig,
            config: DecodeConfig | None = None, use_cache: bool = True,
            handles: list[tuple] | None = None) -> Iterator[LabSample]:
        """Decode sample j = (conditions[j], seeds[j]) with every decoder; yield each as it finishes.

        handles: (target, drafter) pairs with their own KV caches (e.g. an app lane); the first
        `workers` are used; None = the lab's own forks. Jobs are queued row by row (all decoders of
        sample 0 first), so rows complete in order as far as the workers allow. Closing the iterator
        (a cancelled request) drops the jobs not started and waits for the running ones.
        """
        if len(conditions) != len(seeds):
            raise ValueError(f"one seed per condition: got {len(conditions)} conditions and {len(seeds)} seeds")
        config = config or DecodeConfig()
        handles = self._own if handles is None else handles
        if not handles:
            raise ValueError("the lab needs at least one (target, drafter) handle")
        free: queue.Queue = queue.Queue()
        for pair in handles[: self.workers]:
            free.put(pair)
        pool = ThreadPoolExecutor(max_workers=free.qsize(), thread_name_prefix="coolsd-lab")
        done: queue.Queue = queue.Queue()
        try:
            for row, (cond, seed) in enumerate(zip(conditions, seeds)):
                for column, decoder in enumerate(decoders):
                    key = self._key(decoder, cond, seed, sampling, config)
                    with self._lock:
                        hit = self._cache.get(key) if use_cache and decoder.key in CACHED else None
                    if hit is not None:
                        image = self.tokenizer.decode(hit.tokens)  # (C, H, W) in [0, 1]
                        done.put(dataclasses.replace(hit, row=row, column=column, image=image, cached=True))
                        continue
                    future = pool.submit(self._decode, free, decoder, row, column, cond, seed, sampling, config)
                    future.add_done_callback(lambda f, key=key, d=decoder.key: self._finish(f, key, d, done))
            for _ in range(len(conditions) * len(decoders)):
                item = done.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _finish(self, future, key: tuple, decoder_key: str, done: queue.Queue) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            done.put(error)
            return
        sample = future.result()
        if decoder_key in CACHED:
            with self._lock:
                self._cache[key] = dataclasses.replace(sample, image=None)
                self._cache.move_to_end(key)
                while len(self._cache) > CACHE_SIZE:
                    self._cache.popitem(last=False)
        done.put(sample)


# ---------------------------------------------------------------- judging the grid
def summarise(samples: list[LabSample], decoders: list[LabDecoder]) -> list[dict]:
    """Per decoder (in column order): n, accuracy (share classified as their condition; None without a
    classifier), mean NLL (nats/token), tau (tokens / target forwards over its samples), seconds (sum),
    speed-up = vanilla seconds / this decoder's seconds over the rows both have finished (None before)."""
    by_column: dict[int, dict[int, LabSample]] = {j: {} for j in range(len(decoders))}
    for s in samples:
        by_column[s.column][s.row] = s
    vanilla = next((j for j, d in enumerate(decoders) if d.rule is None), None)
    out = []
    for j, d in enumerate(decoders):
        mine = list(by_column[j].values())
        judged = [s.correct for s in mine if s.correct is not None]
        speedup = None
        if vanilla is not None:
            rows = set(by_column[j]) & set(by_column[vanilla])
            ref = sum(by_column[vanilla][r].seconds for r in rows)
            own = sum(by_column[j][r].seconds for r in rows)
            speedup = ref / own if rows and own > 0 else None
        forwards = sum(s.target_forwards for s in mine)
        out.append({
            "decoder": d.key, "label": d.label, "rule": None if d.rule is None else d.rule.config(), "n": len(mine),
            "accuracy": sum(judged) / len(judged) if judged else None,
            "nll": sum(s.nll for s in mine) / len(mine) if mine else None,
            "tau": sum(len(s.tokens) for s in mine) / forwards if forwards else None,
            "seconds": sum(s.seconds for s in mine), "speedup": speedup,
            "cached": sum(s.cached for s in mine),
        })
    return out


def load_classifier(path=None):
    """A shipped classifier folder (default: the MNIST digit classifier, `assets/embedded/classifier`;
    the emoji one is `assets/emoji/classifier`), fp32 in eval mode, or None if absent."""
    folder = Path(path) if path is not None else EMBEDDED_CLASSIFIER
    if not (folder / "config.json").is_file():
        return None
    from transformers import ResNetForImageClassification

    return ResNetForImageClassification.from_pretrained(folder, dtype=torch.float32).eval()
