"""`python -m coolsd.bench.same_noise` on the tiny random model: the numbers it reports are the engine's own."""

from __future__ import annotations

import torch

from coolsd.bench.same_noise import DepthOneRows, compare
from coolsd.decoding import variants
from coolsd.decoding.drafting import Chain
from coolsd.decoding.engine import DecodeConfig, run
from coolsd.models.tiny import tiny_bundle


def test_the_report_reads_the_engines_decodes():
    bundle = tiny_bundle()
    report = compare(bundle, [0, 5], [0, 1], draft_len=2, row_every=1, progress=False)
    for key in ("eagle-1", "sjd"):  # lossless: vanilla AR's tokens under same noise, every position
        assert report["racers"][key]["same_as_vanilla"] == 1.0
    same = DecodeConfig(Chain(2), noise="same")
    taus = [run(bundle.target, bundle.drafter, variants.build("cool-sd"), cond=c, num_tokens=bundle.num_tokens,
                sampling=bundle.default_sampling, config=same, seed=s).tau for c, s in ((0, 0), (5, 1))]
    assert report["racers"]["cool-sd"]["tau_same"] == sum(taus) / 2
    depth1 = report["eagle_depth1"]
    assert depth1["rows"] > 0 and 0 < depth1["coupled"] <= depth1["standard"] <= 1


def test_the_recorder_keeps_every_nth_depth_one_row_and_passes_the_rule_through():
    rule = variants.build("eagle-1")
    recorder = DepthOneRows(rule, every=2)
    p = torch.tensor([[0.5, 0.5], [0.9, 0.1]], dtype=torch.float64)
    q = torch.tensor([[0.2, 0.8], [0.5, 0.5]], dtype=torch.float64)
    x = torch.tensor([1, 0])
    for _ in range(3):
        assert recorder.chain_accept(p, q, x, 2) == rule.chain_accept(p, q, x, 2)
    assert len(recorder.rows) == 2 and torch.equal(recorder.rows[0][0], p[0]) and recorder.lossless
