"""Acceptance rules of speculative decoding (spec section 3): one small frozen dataclass per rule.

Every rule answers three calls on processed distributions, vectorised over leading dims `...`:
  omega(depth, draft_len)                 -> (...)       relaxation weight (ones if lossless)
  accept_prob(p, q, x, depth, draft_len)  -> (...)       a in [0, 1], chance of keeping draft x
  residual(p, q, x, depth, draft_len)     -> (..., V)    where to resample after rejecting x
with p, q: (..., V) target / draft probabilities, x: (...) int64 draft ids, depth: (...) int64,
1-based position of the draft inside its round (restarts at 1 every round). `accept_all(p, q, depth, draft_len)`
-> (..., V) is the acceptance of every token (G* and the exact oracle read it). A chain round asks for the test at
every depth (`chain_accept`: host floats) and for the residual at the one depth that failed; the ratio rules' test
reads only the drafts' entries of p and q, the same numbers as `accept_all` at x, bit for bit
(tests/decoding/test_rules.py).

Greedy decoding (one-hot p and q): every rule commits the target's argmax token (G* of a one-hot p is p).

A rule never knows how its drafts were made (`coolsd.decoding.drafting`: a chain, a static tree, Jacobi iteration):
depth is the draft's position in its round and draft_len the drafting's L (a Jacobi window's size W). A rule that
reads the model's latent-neighbour table says so (`reads_neighbours`) and gets it through `with_neighbours`.

A rule's fields are its settings: their defaults, and the range a control offers (`knob`: field metadata
"ui"), live here, once; front ends read them from the dataclasses. A custom schedule's omega list as
text has one grammar, `coolsd.decoding.omega_text`.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar

import torch
from torch import Tensor

from coolsd.decoding.maths import g_star, lossless_residual, normalise, pick, ratio_accept
from coolsd.util.checks import check_bool, check_int, check_number

MAX_SCHEDULE_LEN = 64  # a custom schedule longer than any draft length is a typo, not a schedule

# ---------------------------------------------------------------- the interface
@dataclass(frozen=True)
class Rule:
    """Base rule: the relaxed ratio test with this rule's `omega` and its G*. Subclasses override `omega` (and
    maybe `accept_all`, `accept_prob`, `residual`); their fields are their config."""

    name: ClassVar[str] = ""
    lossless: ClassVar[bool] = False  # True when the rule provably reproduces p exactly
    reads_neighbours: ClassVar[bool] = False  # True: decoding needs the model's table (`with_neighbours`)

    def omega(self, depth: Tensor, draft_len: int) -> Tensor:
        """Relaxation weight omega_i per depth, float (...)."""
        return torch.ones_like(depth, dtype=torch.float64)

    def accept_all(self, p: Tensor, q: Tensor, depth: Tensor, draft_len: int) -> Tensor:
        """Acceptance probability a(y) of EVERY token y as a draft, (..., V). Base: the relaxed ratio test
        min(1, omega_i p(y) / q(y)) with this rule's omega (Eagle-1, UniformRSD, COOL-SD and the schedules)."""
        return ratio_accept(p, q, self.omega(depth, draft_len).to(p.dtype).unsqueeze(-1))

    def accept_prob(self, p: Tensor, q: Tensor, x: Tensor, depth: Tensor, draft_len: int) -> Tensor:
        """a of the drafts x, (...). With the base's ratio test, computed on the drafts' entries of p and q only
        (the same numbers as accept_all at x, bit for bit: the same elementwise operations)."""
        if type(self).accept_all is Rule.accept_all:
            return ratio_accept(pick(p, x), pick(q, x), self.omega(depth, draft_len).to(p.dtype))
        return pick(self.accept_all(p, q, depth, draft_len), x)

    def chain_accept(self, p: Tensor, q: Tensor, x: Tensor, draft_len: int) -> list[float]:
        """a_1..a_L of a chain round's drafts x (L,) at depths 1..L, p, q (L, V): host floats, equal to accept_prob's
        bit for bit. With the base's ratio test, only p(x) and q(x) are read and the ratio is taken on the host
        (the same IEEE operations as `ratio_accept`: omega * p / max(q, tiny), at most 1; 1 where q = 0)."""
        if type(self).accept_all is not Rule.accept_all or type(self).accept_prob is not Rule.accept_prob:
            return self.accept_prob(p, q, x, torch.arange(1, x.shape[0] + 1, device=x.device), draft_len).tolist()
        tiny = torch.finfo(q.dtype).tiny
        omega = omega_values(self, x.shape[0], draft_len)
        return [min(1.0, w * p_x / max(q_x, tiny)) if q_x > 0 else 1.0
                for w, p_x, q_x in zip(omega, pick(p, x).tolist(), pick(q, x).tolist())]

    def residual(self, p: Tensor, q: Tensor, x: Tensor, depth: Tensor, draft_len: int) -> Tensor:
        """Default: the optimal residual G* of this rule's acceptance, (..., V). With the base's ratio test
        G*_i = Norm([p - min(q, omega_i p)]_+) (q a = min(q, omega p) wherever q > 0, and 0 = q where q = 0);
        at one depth (depth ()), omega_i is read from the host cache, and omega_i >= 1 gives Norm([p - q]_+), the
        same numbers (min(q, omega p) is q wherever p - q >= 0)."""
        if type(self).accept_all is not Rule.accept_all:
            return g_star(p, q, self.accept_all(p, q, depth, draft_len))
        if depth.dim() > 0:
            w = self.omega(depth, draft_len).to(p.dtype).unsqueeze(-1)
            return normalise((p - torch.minimum(q, w * p)).clamp_min(0), p)
        i = int(depth)
        w = omega_values(self, i, draft_len)[i - 1]
        return normalise((p - (q if w >= 1 else torch.minimum(q, p * w))).clamp_min(0), p)

    def with_neighbours(self, table: Tensor | None) -> Rule:
        """This rule reading the model's latent-neighbour table `table` (V, >= k + 1): itself unless it
        `reads_neighbours`, so a caller hands every rule the table without asking which rule it is."""
        return self

    def config(self) -> dict:
        """Name + fields, JSON-ready (what benchmarks record next to their numbers)."""
        return {"rule": self.name} | {k: v for k, v in asdict(self).items() if not isinstance(v, Tensor)}


@dataclass(frozen=True)
class EagleRule(Rule):
    """Eagle-1 / exact speculative sampling: a = min(1, p/q), residual Norm([p - q]_+)."""

    name: ClassVar[str] = "eagle-1"
    lossless: ClassVar[bool] = True

    def residual(self, p, q, x, depth, draft_len):
        return lossless_residual(p, q)


def knob(default, low: float, high: float, step: float):
    """A rule field whose default is `default` and whose control offers [low, high] in steps of `step` (field
    metadata "ui": what a front end shows; the rule's own checks in __post_init__ say what is valid)."""
    return field(default=default, metadata={"ui": (low, high, step)})


@dataclass(frozen=True)
class UniformRSDRule(Rule):
    """Uniformly relaxed SD (ablation): a = min(1, delta p/q), residual G* with omega = delta."""

    name: ClassVar[str] = "uniform-rsd"
    delta: float = knob(2.0, 0.1, 8.0, 0.05)  # omega at every depth

    def __post_init__(self):
        check_number("delta", self.delta, 0, low_open=True)

    def omega(self, depth, draft_len):
        return torch.full_like(depth, self.delta, dtype=torch.float64)


def log_mean_decay(nu: float, draft_len: int) -> float:
    """log(mean_i exp(-nu i)) over i = 1..draft_len (at least 1): COOL-SD's mean-normalising mu."""
    i = torch.arange(1, max(draft_len, 1) + 1, dtype=torch.float64)
    return math.log(torch.exp(-nu * i).mean().item())


@dataclass(frozen=True)
class CoolSDRule(Rule):
    """COOL-SD: a_i = min(1, omega_i p/q), omega_i = delta exp(-nu i - mu), residual G*_i.

    mu=None (default, choice) is mean-normalised: mu = log(mean_i exp(-nu i)) over i = 1..draft_len,
    so mean(omega) = delta. omega is floored at 1 by default (choice, spec section 3 revised):
    omega_i = max(1, delta exp(-nu i - mu)); floor_at_one=False is the unclipped schedule ("COOL-SD
    unclipped"), stricter than Eagle-1 at the depths where omega_i < 1.
    residual="optimal" uses G*_i (spec); "lossless" uses Norm([p - q]_+) (ablation only, biased
    where omega_i < 1).
    """

    name: ClassVar[str] = "cool-sd"
    delta: float = knob(2.0, 0.1, 8.0, 0.05)  # overall relaxation (paper: 1.1, 2)
    nu: float = knob(0.7, 0.0, 3.0, 0.05)  # annealing rate per depth (paper value)
    mu: float | None = knob(None, -5.0, 5.0, 0.05)  # None = mean-normalised (choice), else the shift used as given
    floor_at_one: bool = True  # (choice) clip omega_i below at 1: with G*, omega_i < 1 buys no accuracy
    residual_kind: str = "optimal"  # "optimal" (G*) or "lossless"

    def __post_init__(self):
        check_number("delta", self.delta, 0, low_open=True)
        check_number("nu", self.nu, 0)
        if self.mu is not None:
            check_number("mu", self.mu)
        if self.residual_kind not in ("optimal", "lossless"):
            raise ValueError(f"residual_kind must be 'optimal' or 'lossless', got {self.residual_kind!r}")

    def mu_value(self, draft_len: int) -> float:
        return float(self.mu) if self.mu is not None else log_mean_decay(self.nu, draft_len)

    def omega(self, depth, draft_len):
        w = self.delta * torch.exp(-self.nu * depth.to(torch.float64) - self.mu_value(draft_len))
        return w.clamp_min(1.0) if self.floor_at_one else w

    def residual(self, p, q, x, depth, draft_len):
        if self.residual_kind == "lossless":
            return lossless_residual(p, q)
        return super().residual(p, q, x, depth, draft_len)


@dataclass(frozen=True)
class ScheduleRule(Rule):
    """Base of the per-depth schedules of spec section 3, "Other schedules": a_i = min(1, omega_i p/q), G*_i.

    Subclasses give `schedule(draft_len)` -> (L,) float64 omega_1..omega_L; floor_at_one clips it
    below at 1 like COOL-SD's option. Depths beyond the schedule's length reuse its last value.
    """

    floor_at_one: bool = field(default=False, kw_only=True)  # (choice, as COOL-SD) clip omega_i below at 1

    def __post_init__(self):
        check_bool("floor_at_one", self.floor_at_one)

    def schedule(self, draft_len: int) -> Tensor:
        raise NotImplementedError

    def omega(self, depth, draft_len):
        w = self.schedule(draft_len).to(depth.device)  # (L,)
        w = w[(depth.long() - 1).clamp(0, len(w) - 1)]  # (...)
        return w.clamp_min(1.0) if self.floor_at_one else w


@dataclass(frozen=True)
class LinearDecayRule(ScheduleRule):
    """Linear decay (spec section 3, our form): omega_i = delta (1 + s (L + 1 - 2i) / (L - 1)), L >= 2.

    Mean over the round = delta (as COOL-SD's default); omega_1 = delta (1 + s), omega_L = delta (1 - s);
    slope s = 0 is UniformRSD, s = 1 falls from 2 delta to 0; L = 1 gives delta.
    """

    name: ClassVar[str] = "linear-decay"
    delta: float = knob(2.0, 0.1, 8.0, 0.05)  # mean omega over the round
    slope: float = knob(0.5, 0.0, 1.0, 0.05)  # s in [0, 1] (choice: omega falls from 1.5 delta to 0.5 delta)

    def __post_init__(self):
        super().__post_init__()
        check_number("delta", self.delta, 0, low_open=True)
        check_number("slope", self.slope, 0, 1, bounds="in [0, 1] (1 falls from 2 delta to 0)")

    def schedule(self, draft_len):
        i = torch.arange(1, max(draft_len, 1) + 1, dtype=torch.float64)
        if draft_len < 2:
            return torch.full_like(i, float(self.delta))
        return self.delta * (1 + self.slope * (draft_len + 1 - 2 * i) / (draft_len - 1))


@dataclass(frozen=True)
class CustomScheduleRule(ScheduleRule):
    """A custom schedule: omegas = (omega_1, ..., omega_L), positive numbers, one per depth.

    A list is stored as a tuple (hashable, equal to itself after a JSON round trip). Depths beyond the
    list (a shorter list than the draft length, or a deeper tree) reuse the last value.
    """

    name: ClassVar[str] = "custom"
    omegas: tuple[float, ...] = (2.0, 1.0, 0.5)  # omega_i at depth i = 1, 2, 3

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.omegas, (str, bytes)) or not hasattr(self.omegas, "__iter__"):
            raise ValueError(f"omegas must be a list of positive numbers, got {self.omegas!r}")
        omegas = tuple(self.omegas)
        if not omegas:
            raise ValueError("omegas must hold at least one number (omega_1)")
        if len(omegas) > MAX_SCHEDULE_LEN:
            raise ValueError(f"omegas may hold at most {MAX_SCHEDULE_LEN} numbers, got {len(omegas)}")
        for i, w in enumerate(omegas, 1):
            check_number(f"omega_{i}", w, 0, low_open=True)
        object.__setattr__(self, "omegas", tuple(float(w) for w in omegas))

    def schedule(self, draft_len):
        return torch.tensor(self.omegas, dtype=torch.float64)


@dataclass(frozen=True)
class LanternPPRule(Rule):
    """LANTERN++: accept with min(1, p~(x)/q(x)), p~(x) = p(x) + mass of x's m nearest codes.

    m = the largest j <= k whose cumulative neighbour mass c_j stays within the budget
    (lam - 1) p(x), so p~(x) <= lam p(x); lam = 1 is Eagle-1.
    residual_kind: "published" = Norm([p - q']_+), q' = q zeroed on the k+1 nearest codes of x
    when m >= 1 (as in the LANTERN code); "optimal" = G* of this acceptance (ablation).
    neighbours: (V, >= k+1) int64 table from `coolsd.decoding.neighbours.neighbour_table`.
    """

    name: ClassVar[str] = "lantern++"
    reads_neighbours: ClassVar[bool] = True
    k: int = knob(10, 1, 64, 1)  # neighbourhood search size (a control's top: the model's neighbour table)
    lam: float = knob(5.0, 1.0, 50.0, 0.5)  # lambda, multiplicative budget (LANTERN++)
    residual_kind: str = "published"
    neighbours: Tensor | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "k", check_int("k", self.k, 1))  # 5.0 (e.g. from a UI slider): a slice bound
        self._check_budget()
        if self.residual_kind not in ("published", "optimal"):
            raise ValueError(f"residual_kind must be 'published' or 'optimal', got {self.residual_kind!r}")
        if self.neighbours is not None and self.neighbours.shape[-1] < self.k + 1:
            raise ValueError(f"k={self.k} needs a neighbour table with >= {self.k + 1} columns, "
                             f"got {self.neighbours.shape[-1]}")

    def _check_budget(self):
        check_number("lam", self.lam, 1)

    def budget(self, px: Tensor | float) -> Tensor | float:
        """Neighbour mass allowed for a draft with target probability px (a tensor, or a host float)."""
        return (self.lam - 1) * px

    def with_neighbours(self, table: Tensor | None) -> LanternPPRule:
        if table is None:
            return self
        return type(self)(**{k: v for k, v in self.__dict__.items() if k != "neighbours"}, neighbours=table)

    def _table(self, device) -> Tensor:
        if self.neighbours is None:
            raise ValueError(f"{self.name} needs a neighbour table: rule.with_neighbours(neighbour_table(codebook))")
        return self.neighbours.to(device)

    def _aggregate(self, p: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """p (..., V), x (...) -> (p~(x) (...), m (...)) with the neighbour mass aggregated."""
        nb = self._table(p.device)[x][..., : self.k]  # (..., k)
        c = p.gather(-1, nb).cumsum(-1)  # (..., k) non-decreasing
        px = pick(p, x)
        m = (c <= self.budget(px).unsqueeze(-1)).sum(-1)  # fits form a prefix since c is monotone
        c_m = torch.where(m > 0, c.gather(-1, (m - 1).clamp_min(0).unsqueeze(-1)).squeeze(-1), torch.zeros_like(px))
        return px + c_m, m

    def accept_prob(self, p, q, x, depth, draft_len):
        p_tilde, _ = self._aggregate(p, x)
        qx = pick(q, x)
        return torch.where(qx > 0, (p_tilde / qx.clamp_min(torch.finfo(q.dtype).tiny)).clamp(max=1.0),
                           torch.ones_like(qx))

    def chain_accept(self, p, q, x, draft_len):
        """accept_prob's numbers as host floats, bit for bit: the drafts' neighbour masses are read once, (L, k)
        cumulative sums, and m, p~(x) and the ratio are taken on the host."""
        cls = type(self)
        if cls.accept_prob is not LanternPPRule.accept_prob or cls._aggregate is not LanternPPRule._aggregate:
            return super().chain_accept(p, q, x, draft_len)  # a subclass's own test
        tiny = torch.finfo(q.dtype).tiny
        return [min(1.0, (p_x + c_m) / max(q_x, tiny)) if q_x > 0 else 1.0
                for (p_x, c_m, _), q_x in zip(self._pooled(p, x), pick(q, x).tolist())]

    def _pooled(self, p: Tensor, x: Tensor) -> list[tuple[float, float, int]]:
        """(p(x), c_m, m) of each draft on the host, as `_aggregate` computes them: p (L, V), x (L,) (or (V,), ())."""
        nb = self._table(p.device)[x, : self.k]  # (L, k)
        sums = p.gather(-1, nb).cumsum(-1).view(-1, self.k).tolist()  # c_1..c_k of each draft, non-decreasing
        out = []
        for c, p_x in zip(sums, pick(p, x).view(-1).tolist()):
            m = bisect.bisect_right(c, self.budget(p_x))  # the fits form a prefix: m of them
            out.append((p_x, c[m - 1] if m else 0.0, m))
        return out

    def accept_all(self, p, q, depth, draft_len):
        every = torch.arange(p.shape[-1], device=p.device).expand(p.shape)  # (..., V)
        p_rows = p.unsqueeze(-2).expand(*p.shape[:-1], p.shape[-1], p.shape[-1])  # (..., V, V)
        q_rows = q.unsqueeze(-2).expand_as(p_rows)
        return self.accept_prob(p_rows, q_rows, every, depth, draft_len)

    def residual(self, p, q, x, depth, draft_len):
        if self.residual_kind == "optimal":
            return super().residual(p, q, x, depth, draft_len)
        if x.dim() == 0:  # one draft (a chain round's rejected depth): m on the host, q' only if it pooled
            ((_, _, m),) = self._pooled(p, x)
            q_prime = q.index_fill(-1, self._table(p.device)[x, : self.k + 1], 0.0) if m else q
            return normalise((p - q_prime).clamp_min(0), p)
        _, m = self._aggregate(p, x)
        zero = self._table(p.device)[x][..., : self.k + 1]  # (..., k+1)
        q_zeroed = q.scatter(-1, zero, 0.0)
        q_prime = torch.where((m > 0).unsqueeze(-1), q_zeroed, q)
        return normalise((p - q_prime).clamp_min(0), p)


@dataclass(frozen=True)
class LanternRule(LanternPPRule):
    """LANTERN (not ++): absolute budget, the aggregated neighbour mass is at most delta <= 1."""

    name: ClassVar[str] = "lantern"
    lam: float = 1.0  # unused in this mode
    delta: float = 0.1  # absolute total-variation budget

    def _check_budget(self):
        check_number("delta", self.delta, 0, low_open=True)
        if self.delta > 1:
            raise ValueError(f"LANTERN's absolute delta must be <= 1, got {self.delta} (use lantern++ for lambda)")

    def budget(self, px):
        return torch.full_like(px, self.delta) if isinstance(px, Tensor) else self.delta


_OMEGA_VALUES: dict[tuple, tuple[float, ...]] = {}  # omega_values' cache: settings -> omegas (no rule kept alive)


def omega_values(rule: Rule, depths: int, draft_len: int) -> list[float]:
    """rule.omega at depths 1..`depths` of a round of `draft_len`, as host floats: what a round's event records.
    Cached per rule settings (a race asks the same question every round); LANTERN's table is not part of the key
    (omega ignores it) and no rule is kept by the cache."""
    try:  # its settings are its dataclass fields; a wrapper or a setting that does not hash: no cache
        key = (type(rule), tuple(getattr(rule, f.name) for f in fields(rule) if f.compare), depths, draft_len)
        values = _OMEGA_VALUES.get(key)
    except TypeError:
        return rule.omega(torch.arange(1, depths + 1), draft_len).tolist()
    if values is None:
        if len(_OMEGA_VALUES) >= 1024:
            _OMEGA_VALUES.clear()
        values = _OMEGA_VALUES[key] = tuple(rule.omega(torch.arange(1, depths + 1), draft_len).tolist())
    return list(values)


RULES: dict[str, type[Rule]] = {r.name: r for r in (EagleRule, UniformRSDRule, CoolSDRule, LanternPPRule, LanternRule,
                                                    LinearDecayRule, CustomScheduleRule)}  # the acceptance rules


def make_rule(name: str, **kwargs) -> Rule:
    """Build a rule by slug: make_rule("cool-sd", delta=2.0, nu=0.7). Unknown names/fields raise ValueError."""
    cls = RULES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"unknown rule {name!r}; choose one of {sorted(RULES)}")
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise ValueError(f"bad options for rule {name!r}: {err}") from None
