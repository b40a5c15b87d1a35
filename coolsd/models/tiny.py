"""A tiny random-weight bundle of the embedded architecture (4x4 grid): for fast tests and dry runs."""

from __future__ import annotations

import torch

from coolsd.decoding.neighbours import neighbour_table
from coolsd.decoding.sampling import SamplingConfig
from coolsd.models.bundle import ModelBundle, VQTokenizer


def tiny_bundle(seed: int = 0, grid: tuple[int, int] = (4, 4), codebook_size: int = 32) -> ModelBundle:
    """Same classes as the shipped model (VQModel, LlamaForCausalLM, EagleHead), random weights, ~0.1 M params."""
    from diffusers import VQModel
    from transformers import LlamaForCausalLM

    from coolsd.models.eagle import EagleDrafter, EagleHead, eagle_config
    from coolsd.models.embedded import LlamaClassTarget, target_config, vq_config

    torch.manual_seed(seed)
    vq_cfg = vq_config(codebook_size) | {"block_out_channels": (16, 16), "norm_num_groups": 8,
                                         "sample_size": grid[0] * 2}
    vq = VQModel(**vq_cfg).eval()
    cfg = target_config(codebook_size, hidden=32, layers=2, heads=2, intermediate=64, grid=grid)
    model = LlamaForCausalLM(cfg).eval()
    head = EagleHead(eagle_config(cfg)).eval()
    target = LlamaClassTarget(model)
    drafter = EagleDrafter(head, model.model.embed_tokens.weight, model.lm_head.weight[:codebook_size],
                           grid[0] * grid[1])
    tokenizer = VQTokenizer(vq, grid)
    return ModelBundle(name="tiny random", target=target, drafter=drafter, tokenizer=tokenizer,
                       neighbours=neighbour_table(tokenizer.codebook, 16), class_names=list(cfg.class_names),
                       grid=grid, default_sampling=SamplingConfig(cfg_scale=2.0), kind="tiny")
