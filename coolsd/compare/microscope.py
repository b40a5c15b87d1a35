"""A round under the microscope: every number one round of one decoder computed.

A race records no detail (it stays as light as without this module). `rerun` decodes one racer of a
recorded race again with the race's own settings and seed and `DecodeConfig(detail=True)`, so each
event carries a `RoundDetail`; `matches` says whether the re-run committed the recorded tokens (a
trace recorded on another machine may differ); `round_view` makes one round JSON-ready for the app
and the API. Chain rounds and Jacobi iterations (the no-drafter racers, SJD, COOL-SD or LANTERN++ on Jacobi drafts:
the window, q from the last iteration, p now, omega per window depth, the verdicts);
a static-tree round has no detail (its view says so).

    events = rerun(trace, "cool-sd", target, drafter, cond, neighbours)   # RoundEvents with .detail
    view = round_view(events[5], trace.grid, residual_label(rule))          # what the Step view shows
"""

from __future__ import annotations

from coolsd.compare.trace import RaceTrace
from coolsd.decoding.drafting import Drafting
from coolsd.decoding.engine import DecodeConfig, generate
from coolsd.decoding.events import RoundEvent
from coolsd.decoding.rules import EagleRule, LanternPPRule, Rule, make_rule
from coolsd.decoding.sampling import SamplingConfig

VANILLA = "vanilla"
ACCEPTED, REJECTED, NOT_TESTED = "accepted", "rejected", "not tested"


def rule_of(trace: RaceTrace, key: str, neighbours) -> Rule | None:
    """The rule racer `key` ran, rebuilt from the trace's settings (None for vanilla AR)."""
    config = dict(trace.settings.rules.get(key) or {})
    if not config:
        if key == VANILLA:
            return None
        raise ValueError(f"racer {key!r} is not in this race; it raced {[k for k, _ in trace.racers]}")
    return make_rule(config.pop("rule"), **config).with_neighbours(neighbours)


def setup_of(trace: RaceTrace, key: str | None = None) -> tuple[SamplingConfig, DecodeConfig, int]:
    """(sampling, racer `key`'s drafting config with detail on and the race's noise, seed) of a recorded race."""
    s = trace.settings
    return s.sampling, DecodeConfig(s.drafting_of(key), detail=True, noise=s.noise), s.seed


def rerun(trace: RaceTrace, key: str, target, drafter, cond, neighbours, until: int | None = None) -> list[RoundEvent]:
    """Racer `key`'s rounds again, each with its RoundDetail (rounds 0..until, or all of them).

    target, drafter: model handles of the trace's model (their caches are reset); cond: the engine's
    condition for `trace.settings.condition`; neighbours: the model's LANTERN++ table.
    """
    rule = rule_of(trace, key, neighbours)
    sampling, config, seed = setup_of(trace, key)
    events = []
    stream = generate(target, drafter, rule, cond=cond, num_tokens=trace.num_tokens, sampling=sampling,
                      config=config, seed=seed)
    try:
        for event in stream:
            events.append(event)
            if until is not None and event.index >= until:
                break
    finally:
        stream.close()
    return events


def recorded(trace: RaceTrace, key: str) -> list[RoundEvent]:
    """Racer `key`'s events in the trace, in round order."""
    index = [k for k, _ in trace.racers].index(key)
    return [e for i, e in trace.steps if i == index]


def matches(trace: RaceTrace, key: str, events: list[RoundEvent]) -> bool:
    """True when the re-run's rounds committed exactly the recorded ones (same starts and tokens)."""
    old = recorded(trace, key)
    return all(a.start == b.start and a.tokens.tolist() == b.tokens.tolist() for a, b in zip(old, events))


def residual_label(rule: Rule | None) -> str:
    """Which residual a rejection samples from, in words (from the rule's own options)."""
    if rule is None:
        return "none (vanilla AR samples every token from p)"
    if isinstance(rule, EagleRule):
        return "Norm([p - q]+), lossless (= G* of Eagle-1)"
    if isinstance(rule, LanternPPRule) and rule.residual_kind == "published":
        return "LANTERN++'s published Norm([p - q']+), q' = q zeroed on the k+1 nearest codes"
    if getattr(rule, "residual_kind", "optimal") == "lossless":
        return "Norm([p - q]+) (ablation)"
    return "G* = Norm([p - q a]+), the optimal residual of this acceptance"


def q_label(drafting: Drafting | None) -> str:
    """Where a round's q came from, in words: the drafter, or (Jacobi drafting) the target one iteration late."""
    if drafting is not None and not drafting.needs_drafter:
        return "q (the target's own row for that position, from the last iteration's forward)"
    return "q (drafter)"


def verdicts(n_drafted: int, n_accepted: int) -> list[str]:
    """Per depth 1..L: accepted (i <= n), rejected (i = n + 1), not tested (beyond)."""
    return [ACCEPTED if i <= n_accepted else REJECTED if i == n_accepted + 1 else NOT_TESTED
            for i in range(1, n_drafted + 1)]


def grid_cell(index: int, grid: tuple[int, int]) -> list[int]:
    """[row, column] of image-token `index` on an (H, W) grid (row-major)."""
    return list(divmod(int(index), int(grid[1])))


def round_view(event: RoundEvent, grid: tuple[int, int], residual: str) -> dict:
    """One round as plain JSON: positions, per depth x~_i, q(x~_i), p(x~_i), omega_i, a_i, u_i and the
    verdict, the last token and where it was drawn from with the top tokens of p, q and the residual.

    Raises ValueError for an event without detail (a race event, or a static-tree round).
    """
    d = event.detail
    if d is None:
        raise ValueError(f"round {event.index} has no detail: only chain rounds re-run with detail=True have one")
    n, length = d.n_accepted, len(d.drafts)
    depths = [{"depth": i + 1, "position": grid_cell(event.start + i, grid), "token": int(d.drafts[i]),
               "q": float(d.q_draft[i]), "p": float(d.p_draft[i]), "omega": float(d.omega[i]),
               "accept": float(d.accept[i]), "u": float(d.uniforms[i]), "verdict": v}
              for i, v in enumerate(verdicts(length, n))]
    top = {name: sorted(({"token": int(t), "prob": float(pr)} for t, pr in zip(d.ids, probs)),
                        key=lambda r: -r["prob"]) for name, probs in d.dists.items()}
    probs = {name: float(probs[(d.ids == d.token).nonzero()[0, 0]]) for name, probs in d.dists.items()}
    return _view(event, grid, residual, depths, n, n == length, d.token, top, probs)


def stored_view(event: RoundEvent, grid: tuple[int, int], residual: str) -> dict:
    """`round_view`'s dict for a round as a trace stores it (no detail): positions, verdicts, each depth's a_i and
    omega_i, the accepted drafts' tokens (the first n committed), the last token and how it came; q, p, u, a rejected
    or untested draft's token and the top tokens are None / empty (not stored)."""
    n, tokens = event.n_accepted, event.tokens.tolist()
    depths = [{"depth": i + 1, "position": grid_cell(event.start + i, grid), "token": tokens[i] if i < n else None,
               "q": None, "p": None, "omega": float(event.omega[i]), "accept": float(event.accept_probs[i]),
               "u": None, "verdict": v} for i, v in enumerate(verdicts(event.n_drafted, n))]
    return _view(event, grid, residual, depths, n, str(event.last) == "bonus", tokens[-1], {}, {})


def _view(event: RoundEvent, grid: tuple[int, int], residual: str, depths: list[dict], n: int, bonus: bool,
          token: int, top: dict, token_probs: dict) -> dict:
    length = len(depths)
    return {"round": event.index, "start": event.start, "n_drafted": length, "n_accepted": n,
            "positions": [grid_cell(event.start + i, grid) for i in range(max(length, 1))],
            "committed": [grid_cell(event.start + i, grid) for i in range(len(event.tokens))],
            "depths": depths, "last": "bonus" if bonus else "resampled", "token": token,
            "token_position": grid_cell(event.start + n, grid),
            "drawn_from": (f"p_{n + 1} (bonus: every draft accepted)" if bonus and length else
                           "p (no drafts this round)" if bonus else f"the residual at depth {n + 1}"),
            "residual": residual, "top": top, "token_probs": token_probs}


def round_at(events: list[RoundEvent], position: int) -> int:
    """Index (into `events`) of the round that committed image-token `position` (clamped to the rounds given)."""
    for j, e in enumerate(events):
        if e.start <= position < e.start + len(e.tokens):
            return j
    return len(events) - 1 if events and position >= events[-1].start else 0


def describe(rule: Rule | None) -> dict:
    """The rule's config for the view's header (JSON-ready)."""
    return {"rule": "vanilla"} if rule is None else rule.config()

