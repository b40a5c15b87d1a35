"""coolsd: exact speculative decoding for AR image generators (Eagle-1, LANTERN++, COOL-SD).

Public API (kept stable):
    rules:    EagleRule, LanternPPRule, LanternRule, UniformRSDRule, CoolSDRule, LinearDecayRule,
              CustomScheduleRule, make_rule, RULES (short aliases: Eagle1, LanternPP, Lantern, UniformRSD, CoolSD)
    drafting: Chain (a drafter's L drafts), Tree (a static tree), Jacobi (no drafter: SJD is Jacobi + Eagle-1,
              "COOL-SD, no drafter" Jacobi + CoolSD), make_drafting, DRAFTINGS; any rule runs on any drafting
    decoding: SamplingConfig, DecodeConfig(drafting, ...), decode, generate (events iterator), run (DecodeResult)
    events:   RoundEvent, DecodeResult
    models:   load_embedded, ModelBundle, neighbour_table
    oracle:   exact, exact_jacobi (Jacobi drafting), rule_step, step_output, match_tau, sequence_probs,
              random_tables
"""

from coolsd.decoding.drafting import DRAFTINGS, Chain, Jacobi, Tree, make_drafting
from coolsd.decoding.engine import DecodeConfig, decode, generate, make_generator, run
from coolsd.decoding.events import DecodeResult, RoundEvent
from coolsd.decoding.neighbours import neighbour_table
from coolsd.decoding.rules import (
    RULES,
    CoolSDRule,
    CustomScheduleRule,
    EagleRule,
    LanternPPRule,
    LanternRule,
    LinearDecayRule,
    Rule,
    UniformRSDRule,
    make_rule,
)
from coolsd.decoding.sampling import SamplingConfig
from coolsd.models.bundle import ModelBundle, load_embedded
from coolsd.models.llamagen import load_llamagen  # the GPU LlamaGen text-to-image bundle
from coolsd.theory.jacobi_oracle import exact_jacobi
from coolsd.theory.oracle import exact, match_tau, rule_step, sequence_probs, step_output
from coolsd.theory.tabular import random_tables

Eagle1, LanternPP, Lantern, UniformRSD, CoolSD = EagleRule, LanternPPRule, LanternRule, UniformRSDRule, CoolSDRule


__all__ = [
    "DRAFTINGS", "RULES", "Chain", "CoolSD", "CoolSDRule", "CustomScheduleRule", "DecodeConfig", "DecodeResult",
    "Eagle1", "EagleRule", "Jacobi", "Lantern", "LanternPP", "LanternPPRule", "LanternRule", "LinearDecayRule",
    "ModelBundle", "RoundEvent", "Rule", "SamplingConfig", "Tree", "UniformRSD", "UniformRSDRule", "decode",
    "exact", "exact_jacobi", "generate", "load_embedded", "load_llamagen", "make_drafting", "make_generator",
    "make_rule", "match_tau", "neighbour_table", "random_tables", "rule_step", "run", "sequence_probs",
    "step_output",
]
