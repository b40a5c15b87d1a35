"""The one draft/verify loop (spec sections 2, 4, 5): `decode` yields a RoundEvent per round.

Everything (app, benchmark, tests) drives this loop. A rule is an object (`coolsd.decoding.rules`); the
drafting shape is data (`DecodeConfig.tree`): chain rounds in `coolsd.decoding.chain`, static trees in
`coolsd.decoding.tree`, the state they share in `coolsd.decoding.round`. Drafting and acceptance are independent:
a rule with Jacobi settings (`Rule.jacobi`: SJD, COOL-SD or LANTERN++ without a drafter, any chain rule through
`coolsd.decoding.rules.on_jacobi`) runs Jacobi iterations (`coolsd.decoding.jacobi`), its test per window position
the chain rule's, and needs no drafter. A racer is the pair: its drafting is its rule's (the Jacobi settings, or the
chain / tree of `DecodeConfig` the race shares), so racers of one race can draft differently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from coolsd.decoding.chain import chain_round
from coolsd.decoding.events import DecodeResult, RoundEvent
from coolsd.decoding.jacobi import JacobiDrafts
from coolsd.decoding.noise import check_noise
from coolsd.decoding.protocol import Drafter, TokenModel
from coolsd.decoding.round import Session
from coolsd.decoding.rules import Rule
from coolsd.decoding.sampling import SamplingConfig
from coolsd.decoding.tree import TREES, tree_round
from coolsd.util.checks import check_bool, check_choice, check_int


@dataclass(frozen=True)
class DecodeConfig:
    """draft_len: L, drafts per round (chain) >= 1. tree: a name in `coolsd.decoding.tree.TREES` or None (chain).

    detail: chain rounds (and round 0) report every number they computed in `RoundEvent.detail` (the
    microscope, `coolsd.compare.microscope`); off by default, so a decode costs what it did without it.
    noise: "stream" (one seeded stream) or "same" (dice keyed by (seed, position): a lossless racer then draws
    vanilla AR's tokens exactly; chain and Jacobi drafting only), `coolsd.decoding.noise`.
    """

    draft_len: int = 3  # fastest on the 2-core CPU with the shipped head (docs/benchmark.md, coolsd/bench/tuning.py)
    tree: str | None = None
    detail: bool = False
    noise: str = "stream"

    def __post_init__(self) -> None:
        object.__setattr__(self, "draft_len", check_int("draft_len", self.draft_len, 1))  # (3.0 from a JSON client)
        check_bool("detail", self.detail)
        if self.tree is not None:
            check_choice("tree", self.tree, sorted(TREES), " or None for chain")
        check_noise(self.noise, self.tree)


def make_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """The only source of randomness of a decode: same seed, same tokens."""
    seed = check_int("seed", seed, 0, 2**63 - 1, bounds="in [0, 2**63)")
    return torch.Generator(device=device).manual_seed(seed)


def speculative_drafter(drafter: Drafter | None, rule: Rule | None) -> Drafter | None:
    """The drafter a decode uses: none for vanilla AR (rule None; a drafter given is left unused) and for a rule
    that drafts with the target itself (a Jacobi rule), else `drafter`, which a rule cannot do without (ValueError)."""
    if rule is None or rule.jacobi:
        return None
    if drafter is None:
        raise ValueError("a rule without a drafter: pass both for speculative decoding, or rule=None "
                         "for vanilla AR")
    return drafter


def decode(target: TokenModel, drafter: Drafter | None, rule: Rule | None, *, cond: Any = None, num_tokens: int,
           sampling: SamplingConfig | None = None, config: DecodeConfig | None = None,
           generator: torch.Generator | None = None) -> Iterator[RoundEvent]:
    """Decode one image of `num_tokens` tokens; yields a RoundEvent as soon as each round ends.

    rule=None is vanilla AR (one target forward per token; `drafter` may be given, it is not used), so
    callers pass their drafter whatever the rule. A rule without a drafter is an error.
    cond: the model's condition (class id, caption embedding, ...; None for unconditional models).
    """
    sampling = sampling or SamplingConfig()
    config = config or DecodeConfig()
    num_tokens = check_int("num_tokens", num_tokens, 1)
    drafter = speculative_drafter(drafter, rule)
    s = Session(target, drafter, rule, sampling, generator or make_generator(0, target.device), num_tokens, cond,
                config.noise)
    s.detail = config.detail
    yield s.first()
    next_round = round_maker(s, config)
    index = 1
    while len(s.committed) < num_tokens:
        yield next_round(index)
        index += 1


def round_maker(s: Session, config: DecodeConfig) -> Callable[[int], RoundEvent]:
    """index -> the next RoundEvent of this decode: Jacobi iterations for a rule that drafts with the target itself
    (its window replaces L and the tree), else static-tree rounds when a tree is asked for, else chain rounds."""
    if s.rule is not None and s.rule.jacobi:
        return JacobiDrafts(s, s.rule).round
    shape = TREES[config.tree] if config.tree is not None and s.drafter is not None else None

    def chain_or_tree(index: int) -> RoundEvent:
        # the last token of an image has nothing left to draft: a plain target step, even for trees
        last = len(s.committed) == s.num_tokens - 1
        return tree_round(s, index, shape) if shape and not last else chain_round(s, index, config.draft_len)

    return chain_or_tree


def generate(target: TokenModel, drafter: Drafter | None, rule: Rule | None, *, cond: Any = None, num_tokens: int,
             sampling: SamplingConfig | None = None, config: DecodeConfig | None = None,
             seed: int = 0) -> Iterator[RoundEvent]:
    """One call: the events iterator of `decode` with a generator seeded by `seed` (same seed, same tokens).

    Arguments are checked here, before the first event, so bad input fails early.
    """
    sampling = sampling or SamplingConfig()
    config = config or DecodeConfig()
    speculative_drafter(drafter, rule)
    gen = make_generator(seed, target.device)
    return decode(target, drafter, rule, cond=cond, num_tokens=num_tokens, sampling=sampling, config=config,
                  generator=gen)


def run(target: TokenModel, drafter: Drafter | None, rule: Rule | None, *, cond: Any = None, num_tokens: int,
        sampling: SamplingConfig | None = None, config: DecodeConfig | None = None, seed: int = 0) -> DecodeResult:
    """`generate(...)` (same arguments) drained into a DecodeResult."""
    return DecodeResult.from_events(generate(target, drafter, rule, cond=cond, num_tokens=num_tokens,
                                             sampling=sampling, config=config, seed=seed))
