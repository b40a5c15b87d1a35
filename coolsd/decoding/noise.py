"""Where a decode's randomness comes from (`DecodeConfig.noise`): one stream, or the same noise at each position.

"stream" (default): a round draws the uniforms it needs in one call of the decode's seeded generator; tokens are
the inverse CDF of their distribution at one of them, tests compare a_i with one. Two racers under one seed draw
different dice as soon as they run different rounds.

"same" (ours): the dice are keyed by (seed, position), not by how far a stream has been read, so racers under one
seed differ by their rules, not by their dice. Position j holds E_j, V independent Exp(1) variables, and two
uniforms (its test's and its residual's), all drawn from a generator seeded by (seed, j) alone (`position_noise`).
A token at position j is drawn from a distribution r as argmin_y E_j[y] / r(y), the exponential race: the
Gumbel-max trick with Gumbel noise -log E, a draw from r for any r (r(y) = 0 is never picked). Then:

- vanilla AR's token at j is the race of p_j;
- a draft at j is the race of q_j (the same E_j: where q_j is close to p_j it picks vanilla's token);
- a lossless rule (`Rule.lossless`: Eagle-1, SJD) accepts a draft iff it equals the race of p_j, and on a rejection
  commits the race of p_j (a coupled test, the rule's a_i and residual are not read). The token committed at j is
  then always the race of p_j, and p_j depends only on earlier commits: the decode equals vanilla AR's under the
  same seed token for token (pathwise, not just in law), whatever the drafter. It accepts less than the standard
  test: P(race of q = race of p) = sum_x 1 / sum_y max(p_y / p_x, q_y / q_x) <= sum_x min(p_x, q_x)
  (`coolsd.theory.coupling.race_agreement`);
- a relaxed rule keeps its own test and residual: the draft at j is the race of q_j, its test reads position j's
  test uniform, a rejection draws the residual by inverse CDF at position j's residual uniform, a bonus token is
  the race of p_j. Each is independent of the others given the earlier positions, so the committed token at j has
  the rule's step kernel (exact, as in "stream"), and where the racer agrees with vanilla it draws vanilla's token.

A position drafted but never tested (past a rejection) is drafted again from the same E_j in a later round: nothing
committed depended on the first draw, so the second is still a fresh draw given what was committed. Static trees
draw their siblings without replacement from one stream and do not run in "same": the drafting says so
(`Drafting.same_noise`) and `check_noise` is the one refusal.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from coolsd.util.checks import check_choice

NOISES = ("stream", "same")  # DecodeConfig.noise


def check_noise(noise, drafting) -> str:
    """`noise` if it is one of NOISES and applies to `drafting` (`coolsd.decoding.drafting`); a one-line ValueError
    otherwise: the one place a (drafting, noise) pair is refused."""
    check_choice("noise", noise, NOISES)
    if noise == "same" and not drafting.same_noise:
        raise ValueError(f"same noise does not apply to {drafting.name} drafting (its draws cannot be keyed by "
                         "position; a static tree draws its siblings without replacement from one stream): "
                         "choose chain or Jacobi drafting")
    return noise


def without_replacement(q: Tensor, n: int, gen: torch.Generator) -> list[int]:
    """Up to n distinct ids in draw order from (V,) probs q (Gumbel top-k; never a q == 0 token)."""
    u = torch.rand(q.shape, generator=gen, device=q.device, dtype=q.dtype).clamp_min(1e-300)
    keys = q.log() - (-u.log()).log()
    keys = keys.masked_fill(q <= 0, -math.inf)
    order = torch.topk(keys, min(n, int((q > 0).sum())), dim=-1).indices
    return order.tolist()


def position_noise(seed: int, position: int, vocab: int) -> np.ndarray:
    """(V + 2,) float64 of position `position` under `seed`: E (V,) Exp(1) draws, then the test's and the residual's
    uniforms in [0, 1); a function of (seed, position) alone (numpy's SeedSequence mixes the pair)."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, position])))
    u = rng.random(vocab + 2)
    with np.errstate(divide="ignore"):
        u[:vocab] = -np.log1p(-u[:vocab])  # Exp(1) = -log(1 - U), finite for U in [0, 1)
    return u


def race(probs: Tensor, e: Tensor) -> Tensor:
    """argmin_y e[..., y] / probs[..., y]: a draw from each row of probs (..., V) given Exp(1) noise e (..., V), as
    (..., 1) int64 (a zero-probability token has ratio inf and is never picked while a row has mass)."""
    return (e / probs).argmin(-1, keepdim=True)


class StreamNoise:
    """One seeded stream: a round's uniforms in one call (`Session.uniforms`), tokens by inverse CDF."""

    kind = "stream"

    def __init__(self, session) -> None:
        self.s = session

    def round(self, t: int, n_draft: int) -> StreamDice:
        return StreamDice(self.s, self.s.uniforms(2 * n_draft + 1))

    def first(self, p: Tensor) -> Tensor:
        """Token 0 from p (V,): (1,) int64."""
        (u,) = self.s.uniforms(1).tolist()
        return self.s.draw(p, u)

    def uniform(self) -> float:
        """One uniform in [0, 1) (a static tree's sibling test, its last token)."""
        return self.s.uniforms(1).item()

    def children(self, q: Tensor, n: int) -> list[int]:
        """A static tree node's n children: distinct ids in draw order from q (V,)."""
        return without_replacement(q, n, self.s.gen)


class StreamDice:
    """One round's dice from the stream: u (2L + 1,) = the drafts', the tests', the last token's."""

    def __init__(self, s, u: Tensor) -> None:
        self.s, self.u, self.n = s, u, (u.shape[0] - 1) // 2
        self.host = u.tolist()

    def draft(self, i: int, q: Tensor) -> Tensor:
        """Draft of depth i (0-based) from q (V,): (1,) int64."""
        return self.s.draw(q, self.host[i])

    def drafts(self, q: Tensor) -> Tensor:
        """Drafts of depths 0..n-1 from rows q (n, V): (n,) int64."""
        return self.s.draw(q, self.u[: q.shape[0], None])[:, 0]

    def test(self, rule, p: Tensor, q: Tensor, x: Tensor, draft_len: int) -> tuple[list[float], list[float], int]:
        """The rule's tests of drafts x (L,): a, the uniforms they read, and n accepted."""
        a = rule.chain_accept(p, q, x, draft_len)
        u = self.host[self.n : 2 * self.n]
        return a, u, self.s.accepted(a, u)

    def last(self, rule, p: Tensor, q: Tensor | None, x: Tensor, n: int, draft_len: int) -> tuple[Tensor, Tensor]:
        """The round's last token after n accepted of L drafts: (row it was drawn from (V,), (1,) int64), the
        residual at depth n + 1 if it failed, else the bonus from p[n]."""
        row = p[n] if n == len(x) else rule.residual(p[n], q[n], x[n], self.s.depths[n], draft_len)
        return row, self.s.draw(row, self.host[-1])


class SameNoise:
    """Noise keyed by (seed, position) (module docstring); positions' noise is made once and kept on the device
    while a round may read it."""

    kind = "same"

    def __init__(self, session) -> None:
        self.s = session
        self.seed = session.gen.initial_seed()
        self.vocab = 0  # V, from token 0's distribution (round 0 runs before any other)
        self._cache: dict[int, Tensor] = {}

    def at(self, positions: range) -> Tensor:
        """(len(positions), V + 2) float64 on the device: E then the two uniforms of each position."""
        v = self.vocab
        for j in [j for j in self._cache if j < positions.start]:  # committed: never read again
            del self._cache[j]
        for j in positions:
            if j not in self._cache:
                self._cache[j] = torch.from_numpy(position_noise(self.seed, j, v)).to(self.s.device)
        return torch.stack([self._cache[j] for j in positions])

    def round(self, t: int, n_draft: int) -> SameDice:
        return SameDice(self.s, self.at(range(t, t + n_draft + 1)))

    def first(self, p: Tensor) -> Tensor:
        self.vocab = p.shape[-1]
        return race(p, self.at(range(0, 1))[0, :-2])


class SameDice:
    """One round's dice under same noise: noise (L + 1, V + 2) of positions t..t+L."""

    def __init__(self, s, noise: Tensor) -> None:
        self.s, self.e = s, noise[:, :-2]
        self.host = noise[:, -2:].tolist()  # (L + 1) x [test uniform, residual uniform]

    def draft(self, i: int, q: Tensor) -> Tensor:
        return race(q, self.e[i])

    def drafts(self, q: Tensor) -> Tensor:
        return race(q, self.e[: q.shape[0]])[:, 0]

    def test(self, rule, p, q, x, draft_len):
        if rule.lossless:  # coupled: accepted iff the draft is the target's own race
            y = race(p, self.e[: len(x)])[:, 0]
            a = (x == y).double().tolist()
            u = [0.5] * len(a)  # a_i is 0 or 1 given the noise: any u in (0, 1) decides the same
        else:
            a = rule.chain_accept(p, q, x, draft_len)
            u = [h[0] for h in self.host[: len(x)]]
        return a, u, self.s.accepted(a, u)

    def last(self, rule, p, q, x, n, draft_len):
        if n == len(x) or rule.lossless:  # the bonus, or a coupled rejection: the target's own race at depth n + 1
            row = p[n]
            return row, race(row, self.e[n])
        row = rule.residual(p[n], q[n], x[n], self.s.depths[n], draft_len)
        return row, self.s.draw(row, self.host[n][1])


def make_noise(kind: str, session):
    """The noise source of a session: StreamNoise or SameNoise."""
    return {"stream": StreamNoise, "same": SameNoise}[check_choice("noise", kind, NOISES)](session)
