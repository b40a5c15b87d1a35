"""The app's Context: what its panels share (decoding a frame's grids)."""

from __future__ import annotations

import torch

from coolsd.app import context


def test_a_frames_grids_decode_in_one_call_as_one_by_one(monkeypatch):
    """`Context.decode_many`: the grids of a race frame in one tokenizer call give each grid's own pixels (within
    float rounding: a batched convolution); a tokenizer without batches decodes them one by one."""
    ctx = context.open_context("mnist", others=[])
    gen = torch.Generator().manual_seed(0)
    grids = [torch.randint(0, ctx.model.tokenizer.vq.config.num_vq_embeddings, (ctx.model.num_tokens,), generator=gen)
             for _ in range(3)]
    grids[1][5:] = -1  # a grid still being generated
    one_by_one = [ctx.decode_pixels(g) for g in grids]
    calls = []
    kind = type(ctx.model.tokenizer)
    real = kind.decode
    monkeypatch.setattr(kind, "decode", lambda self, ids: calls.append(ids.shape) or real(self, ids))
    together = ctx.decode_many(grids)
    assert calls == [(3, ctx.model.num_tokens)] and len(together) == 3
    for a, b in zip(together, one_by_one):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    monkeypatch.setattr(kind, "batched", False)
    calls.clear()
    assert len(ctx.decode_many(grids)) == 3 and calls == [(ctx.model.num_tokens,)] * 3
