"""The decoding layer: one engine, many acceptance rules (speculative decoding of AR image models).

Start reading at `engine.py` (`decode` / `generate` / `run`: the loop over draft rounds), then
`drafting.py` (how drafts are made: a drafter's chain or static tree, or Jacobi iteration), `chain.py` (one chain
round: draft L tokens, verify, accept / resample / bonus) and `rules.py` (the acceptance rules: Eagle-1, LANTERN++,
UniformRSD, COOL-SD, schedules; any rule runs on any drafting). `tree.py` is the static-tree round, `jacobi.py`
Jacobi drafting (the target drafts for itself one iteration late, no drafter: SJD is Eagle-1's test on it),
`maths.py` the accept / reject maths the rules share, `noise.py` where a decode's randomness comes from,
`round.py` the pieces the rounds share (session, clock, a round's uniforms, draws and tests), `events.py`
what a round reports (`RoundEvent`, `DecodeResult`, `TokenOutcome`), `sampling.py` the
temperature / top-k / CFG settings and the one sampler (inverse CDF), `protocol.py` what a model must offer the
engine (`TokenModel`, `Drafter`, `ImageTokenizer`: models implement it, the engine owns it), `neighbours.py` the
latent-neighbour table LANTERN++ uses.
`variants.py` is the one registry of named decoder variants (key, label, colour, rule, fixed options:
"cool-sd" floored at 1, "cool-sd-unclipped", "lantern++-gstar", ...); each builds its rule from
options named by the rule's own dataclass fields (defaults and control ranges live on those fields).
docs/rules-and-theory.md states the maths each rule implements; `coolsd.theory` checks it exactly.
"""
