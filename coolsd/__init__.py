"""coolsd: exact speculative decoding for AR image generators (Eagle-1, LANTERN++, COOL-SD).

Public API (kept stable):
    rules:    EagleRule, LanternPPRule, LanternRule, UniformRSDRule, CoolSDRule, LinearDecayRule,
              CustomScheduleRule, SJDRule (Speculative Jacobi Decoding, no drafter), CoolSDJacobiRule and
              LanternPPJacobiRule (COOL-SD / LANTERN++ without a drafter), on_jacobi (any chain rule on Jacobi
              drafts), make_rule, RULES (short aliases: Eagle1, LanternPP, Lantern, UniformRSD, CoolSD)
    decoding: SamplingConfig, DecodeConfig, decode, generate (events iterator), run (DecodeResult)
    events:   RoundEvent, DecodeResult
    models:   load_embedded, ModelBundle, neighbour_table
    oracle:   exact, exact_jacobi (Jacobi drafting), rule_step, step_output, match_tau, sequence_probs,
              random_tables
"""

from coolsd.decoding.engine import DecodeConfig, decode, generate, make_generator, run
from coolsd.decoding.events import DecodeResult, RoundEvent
from coolsd.decoding.neighbours import neighbour_table
from coolsd.decoding.rules import (
    RULES,
    CoolSDJacobiRule,
    CoolSDRule,
    CustomScheduleRule,
    EagleRule,
    LanternPPJacobiRule,
    LanternPPRule,
    LanternRule,
    LinearDecayRule,
    Rule,
    SJDRule,
    UniformRSDRule,
    make_rule,
    on_jacobi,
)
from coolsd.decoding.sampling import SamplingConfig
from coolsd.models.bundle import ModelBundle, load_embedded
from coolsd.models.llamagen import load_llamagen  # the GPU LlamaGen text-to-image bundle
from coolsd.theory.jacobi_oracle import exact_jacobi
from coolsd.theory.oracle import exact, match_tau, rule_step, sequence_probs, step_output
from coolsd.theory.tabular import random_tables

Eagle1, LanternPP, Lantern, UniformRSD, CoolSD = EagleRule, LanternPPRule, LanternRule, UniformRSDRule, CoolSDRule


__all__ = [
    "RULES", "CoolSD", "CoolSDJacobiRule", "CoolSDRule", "CustomScheduleRule", "DecodeConfig", "DecodeResult",
    "Eagle1", "EagleRule", "Lantern", "LanternPP", "LanternPPJacobiRule", "LanternPPRule", "LanternRule",
    "LinearDecayRule", "ModelBundle", "RoundEvent", "Rule", "SJDRule", "SamplingConfig", "UniformRSD",
    "UniformRSDRule", "decode", "exact", "exact_jacobi", "generate", "load_embedded", "load_llamagen",
    "make_generator", "make_rule", "match_tau", "neighbour_table", "on_jacobi", "random_tables", "rule_step",
    "run", "sequence_probs", "step_output",
]
