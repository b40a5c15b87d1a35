"""The decoders a benchmark compares: one `Setting` per (drafting, rule) pair.

A setting is data: rule slug + options, and a drafting (`coolsd.decoding.drafting`: a drafter's chain or static
tree, or Jacobi iteration without a drafter). Settings are built from the sweep flags (`sweep`) or from a one-line
spec (`parse_spec`): one way to name a rule, one to name a drafting,

    RULE[:name=value,...][@DRAFTING[:name=value,...]]
    "cool-sd:delta=2"  "lantern++:k=10,lam=5@tree:shape=eagle-25"  "cool-sd:delta=2@jacobi:window=8"  "vanilla"

(no drafting named: the sweep's chain of L).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coolsd.decoding import variants
from coolsd.decoding.drafting import Chain, Drafting, Jacobi, Tree, make_drafting
from coolsd.decoding.engine import DecodeConfig
from coolsd.decoding.rules import CoolSDRule, LanternPPRule, Rule, make_rule

VANILLA = "vanilla"  # vanilla AR: no drafter, one target forward per token (not a rule)
SHOWN_K = "lantern++"  # LANTERN++'s k is part of its family's name, not of its label's options


@dataclass(frozen=True)
class Setting:
    """One decoder to benchmark.

    rule: a slug of `coolsd.decoding.rules.RULES`, or None for vanilla AR.
    options: the rule's fields, as sorted (name, value) pairs (hashable).
    drafting: how its drafts are made (vanilla AR: unused).
    """

    rule: str | None
    options: tuple[tuple[str, object], ...] = ()
    drafting: Drafting = field(default_factory=Chain)

    @property
    def kwargs(self) -> dict:
        return dict(self.options)

    @property
    def draft_len(self) -> int:
        return self.drafting.draft_len

    @property
    def tree(self) -> str | None:
        """The static tree's shape, None for a chain or Jacobi drafting."""
        return self.drafting.shape if isinstance(self.drafting, Tree) else None

    @property
    def jacobi(self) -> bool:
        return isinstance(self.drafting, Jacobi)

    @property
    def family(self) -> str:
        """Curve of the Pareto figure: settings that differ only in their swept strength share one."""
        return self._name() + (f" tree {self.tree}" if self.tree else "")

    @property
    def variant(self) -> str | None:
        """Its key in `coolsd.decoding.variants` ("cool-sd", "sjd", ...), None if none matches."""
        if self.rule is None:
            return VANILLA
        return variants.variant_of({"rule": self.rule, **self.kwargs}, self.drafting.config())

    def _name(self) -> str:
        """The rule slug (on Jacobi drafts: "sjd" for Eagle-1's test, else "<rule>-jacobi"), LANTERN++'s k, and the
        variant's tag ("G*", "unclipped", "reuse")."""
        if self.rule is None:
            return VANILLA
        name = self.rule
        if self.jacobi:
            name = "sjd" if self.rule == "eagle-1" else f"{self.rule}-jacobi"
        if self.rule == SHOWN_K:
            name += f" k={self.kwargs.get('k', LanternPPRule.k)}"
        key = self.variant
        tag = variants.VARIANTS[key].tag if key else ""
        return f"{name} {tag}" if tag else name

    @property
    def label(self) -> str:
        """Unique, readable name: "cool-sd delta=2", "lantern++ k=5 G* lam=10", "eagle-1 tree eagle-25",
        "cool-sd-jacobi delta=2 window=8"."""
        if self.rule is None:
            return VANILLA
        key = self.variant
        v = variants.VARIANTS[key] if key else None
        hidden = set(v.fixed if v else ()) | ({"k"} if self.rule == SHOWN_K else set())
        shown = {k: x for k, x in self.options if k not in hidden}
        if shown.get("nu") == CoolSDRule.nu and self.rule == "cool-sd":
            shown.pop("nu")  # the paper's value, left out of labels
        parts = [self._name()] + [f"{k}={_fmt(x)}" for k, x in shown.items()]
        if self.jacobi:  # its window W is its draft length; reuse and init where not the variant's or the default
            fixed = (v.jacobi if v else None) or {}
            parts += [f"{k}={_fmt(x)}" for k, x in self.drafting.config().items()
                      if k == "window" or (k not in ("drafting", *fixed) and x != getattr(Jacobi, k))]
        elif self.tree:
            parts.append(f"tree {self.tree}")
        elif self.draft_len != Chain.draft_len:  # the default L: unnamed
            parts.append(f"L={self.draft_len}")
        return " ".join(parts)

    def decode_config(self) -> DecodeConfig:
        return DecodeConfig(self.drafting)

    def build_rule(self, neighbours) -> Rule | None:
        """The rule object (with the bundle's neighbour table, for a rule that reads one); None for vanilla."""
        if self.rule is None:
            return None
        return make_rule(self.rule, **self.kwargs).with_neighbours(neighbours)

    def describe(self, neighbours) -> dict:
        """JSON-ready: label, family, the rule's exact config (`Rule.config()`), the drafting's (`Drafting.config()`),
        its L and tree."""
        rule = self.build_rule(neighbours)
        vanilla = rule is None
        return {"setting": self.label, "family": self.family, "rule_config": None if vanilla else rule.config(),
                "drafting": None if vanilla else self.drafting.config(),
                "draft_len": 0 if vanilla else self.draft_len, "tree": self.tree}


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v).lower() if isinstance(v, bool) else str(v)


def _setting(rule: str | None, drafting: Drafting, **options) -> Setting:
    return Setting(rule, tuple(sorted(options.items())), drafting)


def _options(text: str, spec: str) -> dict:
    """'name=value,...' -> {name: value}: ints, then floats, then true/false, else text."""
    options: dict[str, object] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"bad option {item!r} in setting {spec!r}: expected name=value")
        options[key.strip()] = _value(value.strip())
    return options


def parse_spec(text: str, draft_len: int = Chain.draft_len) -> Setting:
    """'RULE[:name=value,...][@DRAFTING[:name=value,...]]' -> Setting (module docstring), e.g.
    'cool-sd:delta=2,nu=0.5@tree:shape=eagle-25', 'eagle-1@jacobi:window=8,reuse=true', 'vanilla'. Without a
    drafting: a chain of `draft_len`. Bad names or options raise ValueError."""
    body, at, drafted = text.strip().partition("@")
    name, _, opts = body.partition(":")
    name, options = name.strip(), _options(opts, text)
    if name == VANILLA:
        if options or at:
            raise ValueError(f"vanilla takes no options or drafting, got {text!r}")
        return _setting(None, Chain(draft_len))
    kind, _, drafting_opts = drafted.partition(":")
    drafting = make_drafting(kind.strip(), **_options(drafting_opts, text)) if at else Chain(draft_len)
    setting = _setting(name, drafting, **options)
    setting.build_rule(_dummy_table(setting))  # fail early on bad options
    return setting


def _dummy_table(setting: Setting):
    import torch

    k = int(setting.kwargs.get("k", LanternPPRule.k))
    return torch.zeros(1, k + 1, dtype=torch.long)


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _variant_setting(key: str, drafting: Drafting, **options) -> Setting:
    """A setting of variant `key` (`coolsd.decoding.variants`): its rule, `options` and the variant's fixed options,
    on `drafting` (the no-drafter group: Jacobi with the variant's fixed drafting options over it)."""
    v = variants.get(key)
    if v.jacobi is not None:
        drafting = variants.drafting(key, drafting, {f: getattr(drafting, f) for f in ("window", "reuse", "init")})
    return _setting(v.rule, drafting, **(options | v.fixed))


NO_DRAFTER = ["cool-sd:delta=2", "cool-sd:delta=4", "cool-sd:delta=8", "lantern++:k=5,lam=5"]  # `--no-drafter`


def sweep(draft_len: int = Chain.draft_len, lantern_k: list[int] = (), lantern_lam: list[float] = (),
          lantern_gstar: bool = True,
          uniform_delta: list[float] = (), cool_delta: list[float] = (), cool_nu: float = CoolSDRule.nu,
          cool_unclipped_delta: list[float] = (), extra: list[str] = (), jacobi_window: list[int] = (),
          sjd_reuse: bool = True, no_drafter: list[str] = ()) -> list[Setting]:
    """Vanilla AR, Eagle-1, then every swept rule on a chain of `draft_len`, the no-drafter rows, then the `extra`
    specs.

    cool_delta: COOL-SD (floored at 1, the default); cool_unclipped_delta: the unclipped schedule;
    jacobi_window: at each window W, SJD (Eagle-1's test on Jacobi drafts), "SJD + reuse" too when `sjd_reuse`, and
    each rule spec of `no_drafter` (RULE[:options], e.g. "cool-sd:delta=2") on Jacobi drafts of window W.
    """
    chain = Chain(draft_len)
    out = [_setting(None, chain), _setting("eagle-1", chain)]
    for k in lantern_k:
        out += [_variant_setting("lantern++", chain, k=int(k), lam=float(lam)) for lam in lantern_lam]
    if lantern_gstar:
        for k in lantern_k:
            out += [_variant_setting("lantern++-gstar", chain, k=int(k), lam=float(lam)) for lam in lantern_lam]
    out += [_setting("uniform-rsd", chain, delta=float(d)) for d in uniform_delta]
    out += [_variant_setting("cool-sd", chain, delta=float(d), nu=float(cool_nu)) for d in cool_delta]
    out += [_variant_setting("cool-sd-unclipped", chain, delta=float(d), nu=float(cool_nu))
            for d in cool_unclipped_delta]
    for key in ("sjd", "sjd-reuse") if sjd_reuse else ("sjd",):
        out += [_variant_setting(key, Jacobi(int(w))) for w in jacobi_window]
    for w in jacobi_window:
        for spec in no_drafter:
            if "@" in spec:
                raise ValueError(f"--no-drafter takes rules only (they run on Jacobi drafts), got {spec!r}")
            rule = parse_spec(spec)
            key = variants.variant_of({"rule": rule.rule, **rule.kwargs}, Jacobi().config())
            options = rule.kwargs | ({"nu": float(cool_nu)} if rule.rule == "cool-sd" and "nu" not in rule.kwargs
                                     else {})
            out.append(_variant_setting(key, Jacobi(int(w)), **options) if key else
                       _setting(rule.rule, Jacobi(int(w)), **options))
    out += [parse_spec(s, draft_len) for s in extra]
    labels = [s.label for s in out]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ValueError(f"settings listed twice: {dupes}")
    return out
