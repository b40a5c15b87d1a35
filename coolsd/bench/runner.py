"""Runs the benchmark's work items: one image per (setting, class, seed), timed and scored.

Order: items are grouped by (class, seed); inside a group every setting decodes the same class
with the same seed, in an order rotated from group to group, so slow drift of the machine
(thermal, a neighbour process) falls on every setting alike and vanilla AR is always measured
next to the settings it is compared with. Under torchrun / accelerate launch each rank takes a
contiguous, deterministic slice of that list; `gather` merges the records on every rank.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import hashlib
import os
import time
from dataclasses import dataclass

import torch
from tqdm import tqdm

from coolsd.bench.settings import Setting
from coolsd.compare.likeness import RealPictures, broken, likeness
from coolsd.compare.metrics import ambiguity, classifier_outputs, nll_of, plain_background, predicted, token_logits
from coolsd.decoding.engine import run
from coolsd.decoding.sampling import SamplingConfig
from coolsd.models.bundle import ModelBundle


@dataclass(frozen=True)
class WorkItem:
    """setting: index into the settings list; cls: class id; seed: the decode's generator seed."""

    setting: int
    cls: int
    seed: int


def work_items(n_settings: int, classes: list[int], seeds: list[int]) -> list[WorkItem]:
    """Every (setting, class, seed), grouped by (class, seed); group g starts at setting g mod n."""
    items = []
    groups = [(c, s) for s in seeds for c in classes]
    for g, (cls, seed) in enumerate(groups):
        order = [(g + j) % n_settings for j in range(n_settings)]
        items += [WorkItem(i, cls, seed) for i in order]
    return items


def rank_slice(items: list, rank: int, world: int) -> list:
    """Contiguous slice of rank `rank` out of `world` (sizes differ by at most one)."""
    n = len(items)
    return items[rank * n // world : (rank + 1) * n // world]


def tokens_digest(tokens: torch.Tensor) -> str:
    """Short hash of a token sequence: equal digests, equal images."""
    return hashlib.sha1(tokens.to(torch.int64).cpu().numpy().tobytes()).hexdigest()[:16]


def measure(bundle: ModelBundle, setting: Setting, rule, cls: int, seed: int, sampling: SamplingConfig,
            classifier) -> dict:
    """Decode one image, time it, then score it (scoring is not timed).

    Returns a JSON-ready record: counts, seconds (wall = around the whole decode; cpu = this
    process's CPU time over the same span, which time stolen by other processes on a shared
    machine does not inflate; draft / verify = inside model forwards; other = the engine's own
    bookkeeping of rules and sampling),
    the tokens and their digest, NLL under the target, the classifier's prediction and its 128-d features, and
    where real pictures ship beside the classifier its likeness to the real picture (`scores_against_real`).
    """
    cuda = getattr(bundle.target, "device", torch.device("cpu")).type == "cuda"
    gc.collect()
    gc.disable()  # as timeit does: a collection inside one decode would be charged to that setting alone
    try:
        if cuda:
            torch.cuda.synchronize()
        t0, c0 = time.perf_counter(), time.process_time()
        result = run(bundle.target, bundle.drafter, rule, cond=cls, num_tokens=bundle.num_tokens, sampling=sampling,
                     config=setting.decode_config(), seed=seed)
        if cuda:
            torch.cuda.synchronize()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        gc.enable()
    image = bundle.tokenizer.decode(result.tokens)  # (C, H, W) in [0, 1]
    features, logits = classifier_outputs(classifier, image[None])
    return predicted(classifier, logits[0], cls) | {
        "cls": cls, "seed": seed, "tokens_sha": tokens_digest(result.tokens), "num_tokens": len(result.tokens),
        "tokens": result.tokens.tolist(),
        "tau": result.tau, "rounds": result.rounds, "target_forwards": result.target_forwards,
        "draft_forwards": result.draft_forwards, "wall_s": wall, "cpu_s": cpu,
        "draft_s": result.seconds["draft"], "verify_s": result.seconds["verify"], "other_s": result.seconds["other"],
        **token_scores(bundle, sampling, cls, result.tokens, image), "features": features[0].tolist(),
        **scores_against_real(classifier, cls, image),
    }


def scores_against_real(classifier, cls: int, image01) -> dict:
    """{"likeness", "broken"} of a decoded image (C, H, W) in [0, 1] against the real picture of its class
    (`coolsd.compare.likeness`), read beside the classifier (its `name_or_path`); {} where there is none of that
    size."""
    real = real_pictures(str(getattr(classifier, "name_or_path", "") or ""))
    picture = real.of(cls) if real is not None else None
    if picture is None or picture.shape != image01.shape:
        return {}
    value = float(likeness(image01[None], picture[None]))
    return {"likeness": value, "broken": broken(value)}


@functools.lru_cache(maxsize=4)
def real_pictures(folder: str) -> RealPictures | None:
    """The real pictures beside a classifier folder (read once per folder), or None."""
    return RealPictures.beside(folder) if folder else None


def token_scores(bundle: ModelBundle, sampling: SamplingConfig, cls, tokens, image01) -> dict:
    """The target's view of a decoded image: NLL of its tokens (nats/token) under the target's untruncated
    distribution (CFG and temperature of `sampling`, no top-k/top-p: a truncated p gives a token that crossed its
    boundary between two numeric paths an infinite NLL), and how sure the target was before each under the
    processed p the decoders aim to sample (mean top-1 probability and entropy, `ambiguity`), over all tokens and
    over those whose patch is not plain background (`plain_background` of the decoded image, "_fg")."""
    logits = token_logits(bundle.target, sampling.guidance, cls, tokens).double()
    p = sampling.probs(logits)
    fg = ~plain_background(image01, bundle.tokenizer.grid)
    whole, ink = ambiguity(p), ambiguity(p, fg)
    untruncated = dataclasses.replace(sampling, top_k=0, top_p=1.0).probs(logits)
    return {"nll": nll_of(untruncated, tokens), "top1": whole["top1"], "entropy": whole["entropy"],
            "top1_fg": ink["top1"], "entropy_fg": ink["entropy"], "fg_tokens": ink["positions"]}


def run_items(bundle: ModelBundle, settings: list[Setting], items: list[WorkItem], sampling: SamplingConfig,
              classifier, rank: int = 0, warmup: int = 1, progress: bool = True) -> list[dict]:
    """Measure `items` in order; `warmup` untimed passes over a few settings first (allocations, caches).

    Every setting's image of this process's first (class, seed) is still marked `warm_up`: the report
    leaves those images out of the speed statistics (first-image effects) and keeps them for quality.
    """
    rules = [s.build_rule(bundle.neighbours) for s in settings]
    warm = [i for i, s in enumerate(settings) if s.rule is None or s.rule == "eagle-1"]
    warm_cls = items[0].cls if items else 0
    for _ in range(warmup if items else 0):
        for i in warm:
            run(bundle.target, bundle.drafter, rules[i], cond=warm_cls, num_tokens=bundle.num_tokens, sampling=sampling,
                config=settings[i].decode_config(), seed=2**31 - 1)
    records = []
    first = (items[0].cls, items[0].seed) if items else None
    bar = tqdm(items, desc=f"bench rank {rank}", disable=not progress, unit="img", dynamic_ncols=True)
    for order, item in enumerate(bar):
        setting = settings[item.setting]
        record = measure(bundle, setting, rules[item.setting], item.cls, item.seed, sampling, classifier)
        records.append({"setting": setting.label, "setting_index": item.setting, "rank": rank, "order": order,
                        "warm_up": (item.cls, item.seed) == first} | record)
        bar.set_postfix_str(setting.label, refresh=False)
    return records


# ---------------------------------------------------------------- processes (torchrun / accelerate launch)
@dataclass(frozen=True)
class Processes:
    """rank / world of this process; world == 1 when not launched by torchrun or accelerate."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_processes() -> Processes:
    """Join the process group that torchrun / accelerate launch set up (env RANK, WORLD_SIZE, MASTER_*).

    The group only gathers result records (Python objects), so it always uses gloo, also when the
    models run on GPUs.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Processes()
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend="gloo")
    return Processes(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def gather(records: list[dict], procs: Processes) -> list[dict]:
    """Every rank's records, in rank order, on every rank (torch.distributed.all_gather_object)."""
    if procs.world == 1:
        return records
    import torch.distributed as dist

    parts: list[list[dict] | None] = [None] * procs.world
    dist.all_gather_object(parts, records)
    return [r for part in parts for r in part]


def close_processes(procs: Processes) -> None:
    if procs.world > 1:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
