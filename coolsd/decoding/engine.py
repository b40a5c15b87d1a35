"""The one draft/verify loop (spec sections 2, 4, 5): `decode` yields a RoundEvent per round.

Everything (app, benchmark, tests) drives this loop. A decode is a (drafting, rule) pair chosen independently: the
rule is an object (`coolsd.decoding.rules`), the drafting too (`DecodeConfig.drafting`, `coolsd.decoding.drafting`:
a drafter's chain of L or static tree, or Jacobi iteration by the target itself), and any rule runs on any drafting.
The drafting makes the rounds (`coolsd.decoding.chain`, `.tree`, `.jacobi`) from the state they share
(`coolsd.decoding.round`); this loop calls them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from coolsd.decoding.drafting import Chain, Drafting
from coolsd.decoding.events import DecodeResult, RoundEvent
from coolsd.decoding.noise import check_noise
from coolsd.decoding.protocol import Drafter, TokenModel
from coolsd.decoding.round import Session
from coolsd.decoding.rules import Rule
from coolsd.decoding.sampling import SamplingConfig
from coolsd.util.checks import check_bool, check_int, show


@dataclass(frozen=True)
class DecodeConfig:
    """drafting: how drafts are made (`coolsd.decoding.drafting`: Chain(draft_len), Tree(shape), Jacobi(window,
    reuse, init)); vanilla AR (rule None) ignores it.

    detail: chain rounds (and round 0) report every number they computed in `RoundEvent.detail` (the
    microscope, `coolsd.compare.microscope`); off by default, so a decode costs what it did without it.
    noise: "stream" (one seeded stream) or "same" (dice keyed by (seed, position): a lossless racer then draws
    vanilla AR's tokens exactly; the draftings that allow it), `coolsd.decoding.noise`.
    """

    drafting: Drafting = Chain()
    detail: bool = False
    noise: str = "stream"

    def __post_init__(self) -> None:
        if not isinstance(self.drafting, Drafting):
            raise ValueError(f"drafting must be a Chain, Tree or Jacobi (coolsd.decoding.drafting), got "
                             f"{show(self.drafting)}")
        check_bool("detail", self.detail)
        check_noise(self.noise, self.drafting)


def make_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """The only source of randomness of a decode: same seed, same tokens."""
    seed = check_int("seed", seed, 0, 2**63 - 1, bounds="in [0, 2**63)")
    return torch.Generator(device=device).manual_seed(seed)


def speculative_drafter(drafter: Drafter | None, rule: Rule | None, drafting: Drafting) -> Drafter | None:
    """The drafter a decode uses: none for vanilla AR (rule None; a drafter given is left unused) and for a drafting
    that needs none (Jacobi), else `drafter`, which such a drafting cannot do without (ValueError)."""
    if rule is None or not drafting.needs_drafter:
        return None
    if drafter is None:
        raise ValueError(f"{drafting.name} drafting without a drafter: pass one, draft by Jacobi iteration "
                         "(coolsd.decoding.drafting.Jacobi), or rule=None for vanilla AR")
    return drafter


def decode(target: TokenModel, drafter: Drafter | None, rule: Rule | None, *, cond: Any = None, num_tokens: int,
           sampling: SamplingConfig | None = None, config: DecodeConfig | None = None,
           generator: torch.Generator | None = None) -> Iterator[RoundEvent]:
    """Decode one image of `num_tokens` tokens; yields a RoundEvent as soon as each round ends.

    rule=None is vanilla AR (one target forward per token; `drafter` may be given, it is not used), so
    callers pass their drafter whatever the rule. A drafting that needs a drafter without one is an error.
    cond: the model's condition (class id, caption embedding, ...; None for unconditional models).
    """
    sampling = sampling or SamplingConfig()
    config = config or DecodeConfig()
    num_tokens = check_int("num_tokens", num_tokens, 1)
    drafter = speculative_drafter(drafter, rule, config.drafting)
    s = Session(target, drafter, rule, sampling, generator or make_generator(0, target.device), num_tokens, cond,
                config.noise)
    s.detail = config.detail
    yield s.first()
    next_round = config.drafting.rounds(s) if rule is not None else Chain().rounds(s)  # (vanilla: no drafts)
    index = 1
    while len(s.committed) < num_tokens:
        yield next_round(index)
        index += 1


def generate(target: TokenModel, drafter: Drafter | None, rule: Rule | None, *, cond: Any = None, num_tokens: int,
             sampling: SamplingConfig | None = None, config: DecodeConfig | None = None,
             seed: int = 0) -> Iterator[RoundEvent]:
    """One call: the events iterator of `decode` with a generator seeded by `seed` (same seed, same tokens).

    Arguments are checked here, before the first event, so bad input fails early.
    """
    sampling = sampling or SamplingConfig()
    config = config or DecodeConfig()
    speculative_drafter(drafter, rule, config.drafting)
    gen = make_generator(seed, target.device)
    return decode(target, drafter, rule, cond=cond, num_tokens=num_tokens, sampling=sampling, config=config,
                  generator=gen)


def run(target: TokenModel, drafter: Drafter | None, rule: Rule | None, *, cond: Any = None, num_tokens: int,
        sampling: SamplingConfig | None = None, config: DecodeConfig | None = None, seed: int = 0) -> DecodeResult:
    """`generate(...)` (same arguments) drained into a DecodeResult."""
    return DecodeResult.from_events(generate(target, drafter, rule, cond=cond, num_tokens=num_tokens,
                                             sampling=sampling, config=config, seed=seed))
