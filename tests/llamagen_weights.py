"""Tiny LlamaGen weights with the published parameter names (random, seeded), shared by the LlamaGen,
fetch and app tests: configs, synthetic checkpoints, the T5 folder, and the on-disk layouts."""

from __future__ import annotations

import torch

from coolsd.models.llamagen import VQ16Config

V, D, E, C = 64, 32, 24, 6  # codebook, hidden, caption width, caption slots


TINY = {
    "vocab_size": V,
    "hidden_size": D,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 48,
    "caption_dim": E,
    "cls_token_num": C,
    "block_size": 16,
}  # 4 x 4 grid, head dim 16


TINY_VQ = VQ16Config(
    codebook_size=V, codebook_dim=4, z_channels=8, base_channels=8, ch_mult=(1, 2), num_res_blocks=1, norm_groups=4
)


LAYER_SHAPES = {  # published HF Llama layer names -> shape
    "self_attn.q_proj.weight": (D, D),
    "self_attn.k_proj.weight": (D, D),
    "self_attn.v_proj.weight": (D, D),
    "self_attn.o_proj.weight": (D, D),
    "mlp.gate_proj.weight": (48, D),
    "mlp.up_proj.weight": (48, D),
    "mlp.down_proj.weight": (D, 48),
    "input_layernorm.weight": (D,),
    "post_attention_layernorm.weight": (D,),
}


PUBLISHED_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": V,
    "hidden_size": D,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 2048,
    "caption_dim": E,
    "cls_token_num": C,
    "block_size": 16,
    "rope_base": 10000,
    "input_type": "t2i",
    "class_dropout_p": 0.1,
    "token_dropout_p": 0.1,
    "resid_dropout_p": 0.1,
    "ffn_dropout_p": 0.1,
    "attention_bias": False,
    "num_classes": 1000,
}


def random_models(norm_one: bool = False):
    """(target, drafter, caption) built from TINY with seeded random weights (torch seed 0): every tensor
    N(0, 0.3), or with `norm_one` 0.3 N(0, 1) plus 1 on the norm weights; caption (C, E) from seed 2."""
    from coolsd.models.llamagen import LlamaGenConfig, LlamaGenDrafter, LlamaGenT2I

    torch.manual_seed(0)
    target = LlamaGenT2I(LlamaGenConfig(**TINY)).eval()
    drafter = LlamaGenDrafter(LlamaGenConfig(**{**TINY, "num_hidden_layers": 1}), target).eval()
    with torch.no_grad():
        for module in (target, drafter):
            for name, tensor in module.state_dict().items():
                if norm_one:
                    tensor.copy_(("norm" in name) + 0.3 * torch.randn(tensor.shape))
                else:
                    tensor.normal_(0, 0.3)
    return target, drafter, torch.randn(C, E, generator=torch.Generator().manual_seed(2))


def random_weights(shapes: dict, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        k: 0.3 * torch.randn(s, generator=gen) + (1.0 if "layernorm" in k or k.endswith("norm.weight") else 0.0)
        for k, s in shapes.items()
    }


def published_target() -> dict[str, torch.Tensor]:
    shapes = {
        "model.embed_tokens.weight": (V, D),
        "model.norm.weight": (D,),
        "lm_head.weight": (V, D),
        "model.cls_embedding.cap_proj.fc1.weight": (D, E),
        "model.cls_embedding.cap_proj.fc2.weight": (D, D),
        "model.cls_embedding.uncond_embedding": (C, E),
    }
    for i in range(2):
        shapes.update({f"model.layers.{i}.{k}": s for k, s in LAYER_SHAPES.items()})
    return random_weights(shapes, 5)


def published_drafter() -> dict[str, torch.Tensor]:
    shapes = {"embed_tokens.weight": (V, D), "fc.weight": (D, 2 * D), "fc.bias": (D,)}
    shapes.update({f"layers.0.{k}": s for k, s in LAYER_SHAPES.items() if k != "input_layernorm.weight"})
    return random_weights(shapes, 6)


def published_vq() -> dict[str, torch.Tensor]:
    """TINY_VQ in the published VQ_16 layout; encoder-side keys included (unused by decoding)."""
    shapes = {
        "quantize.embedding.weight": (V, 4),
        "post_quant_conv.weight": (8, 4, 1, 1),
        "post_quant_conv.bias": (8,),
        "quant_conv.weight": (4, 8, 1, 1),
        "quant_conv.bias": (4,),
        "encoder.conv_in.weight": (8, 3, 3, 3),
        "decoder.conv_in.weight": (16, 8, 3, 3),
        "decoder.conv_in.bias": (16,),
        "decoder.norm_out.weight": (8,),
        "decoder.norm_out.bias": (8,),
        "decoder.conv_out.weight": (3, 8, 3, 3),
        "decoder.conv_out.bias": (3,),
    }

    def conv(name, c_out, c_in, size):
        shapes.update({f"{name}.weight": (c_out, c_in, size, size), f"{name}.bias": (c_out,)})

    def norm(name, c):
        shapes.update({f"{name}.weight": (c,), f"{name}.bias": (c,)})

    def res(name, c_in, c_out):
        norm(f"{name}.norm1", c_in), conv(f"{name}.conv1", c_out, c_in, 3)
        norm(f"{name}.norm2", c_out), conv(f"{name}.conv2", c_out, c_out, 3)
        if c_in != c_out:
            conv(f"{name}.nin_shortcut", c_out, c_in, 1)

    def attn(name, c):
        norm(f"{name}.norm", c)
        for part in ("q", "k", "v", "proj_out"):
            conv(f"{name}.{part}", c, c, 1)

    res("decoder.mid.0", 16, 16), attn("decoder.mid.1", 16), res("decoder.mid.2", 16, 16)
    for j in range(2):
        res(f"decoder.conv_blocks.0.res.{j}", 16, 16), attn(f"decoder.conv_blocks.0.attn.{j}", 16)
    conv("decoder.conv_blocks.0.upsample.conv", 16, 16, 3)
    res("decoder.conv_blocks.1.res.0", 16, 8), res("decoder.conv_blocks.1.res.1", 8, 8)
    return random_weights(shapes, 7)


def write_t5(folder) -> None:
    """A tiny T5 encoder and a word-level tokenizer in `save_pretrained` layout."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, T5Config, T5EncoderModel

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, "a": 3, "red": 4, "cat": 5, "dog": 6}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    ).save_pretrained(folder)
    torch.manual_seed(8)
    T5EncoderModel(T5Config(vocab_size=8, d_model=E, d_kv=8, d_ff=32, num_layers=1, num_heads=2)).save_pretrained(
        folder
    )


def original_layout(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The converted names of `published_target()` renamed to LlamaGen's gpt.py names, q/k/v fused."""
    out = {
        "tok_embeddings.weight": state["model.embed_tokens.weight"],
        "norm.weight": state["model.norm.weight"],
        "output.weight": state["lm_head.weight"],
    }
    for name in ("cap_proj.fc1.weight", "cap_proj.fc2.weight", "uncond_embedding"):
        out[f"cls_embedding.{name}"] = state[f"model.cls_embedding.{name}"]
    for i in range(2):
        layer = f"model.layers.{i}"
        out[f"layers.{i}.attention.wqkv.weight"] = torch.cat(
            [state[f"{layer}.self_attn.{x}_proj.weight"] for x in "qkv"]
        )
        out[f"layers.{i}.attention.wo.weight"] = state[f"{layer}.self_attn.o_proj.weight"]
        for theirs, ours in (("w1", "gate"), ("w3", "up"), ("w2", "down")):
            out[f"layers.{i}.feed_forward.{theirs}.weight"] = state[f"{layer}.mlp.{ours}_proj.weight"]
        out[f"layers.{i}.attention_norm.weight"] = state[f"{layer}.input_layernorm.weight"]
        out[f"layers.{i}.ffn_norm.weight"] = state[f"{layer}.post_attention_layernorm.weight"]
    return out


def nested_layout(root, weights_dir, resolutions=(256, 512)):
    """ROOT/t5, ROOT/vq_ds16_t2i.pt, ROOT/<res>/target + drafter (copies of the tiny flat folder)."""
    import shutil

    shutil.copytree(weights_dir / "t5", root / "t5")
    shutil.copy(weights_dir / "vq_ds16_t2i.pt", root / "vq_ds16_t2i.pt")
    for res in resolutions:
        for part in ("target", "drafter"):
            shutil.copytree(weights_dir / part, root / str(res) / part)
    return root
