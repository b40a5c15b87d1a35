"""Published LlamaGen checkpoints -> our modules, key by key (research/models.md §C, lantern.md §2-4).

Every checkpoint key is either mapped explicitly to one of our parameter names or listed as a
derived buffer we recompute; anything else, or any of our parameters left unfilled, or any shape
mismatch, raises `CheckpointMismatch` naming the keys. A wrong checkpoint never loads silently.

Published layouts:
- target `jadohu/LlamaGen-T2I`: HF `LlamaForCausalLM` names (`model.layers.{i}.self_attn.q_proj`...)
  plus the caption embedder `model.cls_embedding.*`;
- drafter `jadohu/llamagen_drafter`: `config.json` + `pytorch_model.bin`, names without `model.`;
- VQ `vq_ds16_t2i.pt`: a dict whose `"model"` entry is the VQ state dict;
- LlamaGen's own target `t2i_XL_stage1_256.pt` / `t2i_XL_stage2_512.pt` (`peizesun/llamagen_t2i`):
  a dict whose `"model"` (or `"module"`, `"state_dict"`) entry uses LlamaGen's `gpt.py` names
  (`layers.{i}.attention.wqkv` fused q/k/v, `feed_forward.w1/w3/w2` = gate/up/down,
  `attention_norm`, `ffn_norm`, `tok_embeddings`, `norm`, `output`, `cls_embedding.*`); no config.
Names marked "unverified" below are our reading of the published code; a real checkpoint that
differs fails here with the exact keys, and only this table needs editing.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import torch
from torch import Tensor, nn

from coolsd.models.llamagen.config import LlamaGenConfig
from coolsd.models.llamagen.drafter import LlamaGenDrafter
from coolsd.models.llamagen.layout import VQ_FACTOR, original_checkpoint, resolution_from_name
from coolsd.models.llamagen.target import LlamaGenT2I
from coolsd.models.llamagen.vq16 import VQ16Config, VQ16Tokenizer


class CheckpointMismatch(ValueError):
    """A checkpoint whose keys or shapes do not match the model it is loaded into."""


# derived tables that some exports keep as buffers; we recompute them (2D RoPE, lantern.md §2.3)
DERIVED_KEYS = re.compile(r"(^|\.)(freqs_cis|rotary_emb\.inv_freq)$")


def _layer_keys(published: str, ours: str, attention_bias: bool, input_norm: bool = True) -> dict[str, str]:
    """HF Llama decoder-layer names under `published` -> ours under `ours`."""
    keys = {}
    for name in ("q", "k", "v", "o"):
        keys[f"{published}.self_attn.{name}_proj.weight"] = f"{ours}.attn.{name}.weight"
        if attention_bias:
            keys[f"{published}.self_attn.{name}_proj.bias"] = f"{ours}.attn.{name}.bias"
    for name in ("gate", "up", "down"):
        keys[f"{published}.mlp.{name}_proj.weight"] = f"{ours}.mlp.{name}.weight"
    if input_norm:
        keys[f"{published}.input_layernorm.weight"] = f"{ours}.norm_attn.weight"
    keys[f"{published}.post_attention_layernorm.weight"] = f"{ours}.norm_mlp.weight"
    return keys


def target_key_map(config: LlamaGenConfig) -> dict[str, str]:
    """Published target key -> `LlamaGenT2I` parameter/buffer name."""
    keys = {
        "model.embed_tokens.weight": "tok_emb.weight",
        "model.norm.weight": "norm.weight",
        "lm_head.weight": "head.weight",
        "model.cls_embedding.cap_proj.fc1.weight": "caption.fc1.weight",  # unverified inner names fc1/fc2
        "model.cls_embedding.cap_proj.fc2.weight": "caption.fc2.weight",
        "model.cls_embedding.uncond_embedding": "caption.uncond",
    }
    for i in range(config.num_hidden_layers):
        keys.update(_layer_keys(f"model.layers.{i}", f"layers.{i}", config.attention_bias))
    return keys


def drafter_key_map(config: LlamaGenConfig) -> dict[str, str]:
    """Published Eagle-1 drafter key -> `LlamaGenDrafter` name (layer 0 has no input norm, lantern.md §4.1)."""
    if config.num_hidden_layers != 1:
        raise CheckpointMismatch(f"the LlamaGen drafter has one layer, config says {config.num_hidden_layers}")
    keys = {"embed_tokens.weight": "tok_emb.weight", "fc.weight": "fc.weight"}
    if config.bias:
        keys["fc.bias"] = "fc.bias"
    keys.update(_layer_keys("layers.0", "layer", config.attention_bias, input_norm=False))
    return keys


def original_target_key_map(config: LlamaGenConfig) -> dict[str, str | tuple[str, ...]]:
    """LlamaGen `gpt.py` key -> `LlamaGenT2I` name; a tuple splits a fused tensor along dim 0 (q, k, v)."""
    keys: dict[str, str | tuple[str, ...]] = {
        "tok_embeddings.weight": "tok_emb.weight",
        "norm.weight": "norm.weight",
        "output.weight": "head.weight",
        "cls_embedding.cap_proj.fc1.weight": "caption.fc1.weight",
        "cls_embedding.cap_proj.fc2.weight": "caption.fc2.weight",
        "cls_embedding.uncond_embedding": "caption.uncond",
    }
    for i in range(config.num_hidden_layers):
        theirs, ours = f"layers.{i}", f"layers.{i}"
        keys[f"{theirs}.attention.wqkv.weight"] = tuple(f"{ours}.attn.{name}.weight" for name in ("q", "k", "v"))
        keys[f"{theirs}.attention.wo.weight"] = f"{ours}.attn.o.weight"
        for name, mine in (("w1", "gate"), ("w3", "up"), ("w2", "down")):
            keys[f"{theirs}.feed_forward.{name}.weight"] = f"{ours}.mlp.{mine}.weight"
        keys[f"{theirs}.attention_norm.weight"] = f"{ours}.norm_attn.weight"
        keys[f"{theirs}.ffn_norm.weight"] = f"{ours}.norm_mlp.weight"
    return keys


ORIGINAL_NORM_EPS = 1e-5  # LlamaGen's ModelArgs.norm_eps (LANTERN's converted config.json says 1e-6)
ORIGINAL_HEAD_DIM = 64  # every LlamaGen GPT size up to XXL: dim / n_head = 64 (GPT-XL: 1280 / 20)


def original_config(
    state: dict[str, Tensor], block_size: int, num_attention_heads: int | None = None
) -> LlamaGenConfig:
    """Widths of a LlamaGen `gpt.py` state dict, read from its tensor shapes; `block_size` = image tokens.

    The checkpoint holds no config: heads default to hidden / 64 (at least 1) and the norm eps is
    LlamaGen's default 1e-5.
    """
    try:
        vocab, hidden = state["tok_embeddings.weight"].shape
        caption_dim = state["cls_embedding.cap_proj.fc1.weight"].shape[1]
        cls_token_num = state["cls_embedding.uncond_embedding"].reshape(-1, caption_dim).shape[0]
        intermediate = state["layers.0.feed_forward.w1.weight"].shape[0]
    except KeyError as err:
        raise CheckpointMismatch(f"not a LlamaGen T2I gpt.py state dict: no {err.args[0]}") from None
    layers = len({k.split(".")[1] for k in state if k.startswith("layers.")})
    return LlamaGenConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=num_attention_heads or max(1, hidden // ORIGINAL_HEAD_DIM),
        intermediate_size=intermediate,
        rms_norm_eps=ORIGINAL_NORM_EPS,
        caption_dim=caption_dim,
        cls_token_num=cls_token_num,
        block_size=block_size,
    )


def vq_key_map(config: VQ16Config) -> dict[str, str]:
    """Published VQ_16 decoder-side key -> `VQ16Tokenizer` name. Inner decoder names are unverified."""
    keys = {"quantize.embedding.weight": "codebook.weight"}

    def conv(published: str, ours: str) -> None:
        keys[f"{published}.weight"] = f"{ours}.weight"
        keys[f"{published}.bias"] = f"{ours}.bias"

    def res(published: str, ours: str, has_skip: bool) -> None:
        for name in ("norm1", "conv1", "norm2", "conv2"):
            conv(f"{published}.{name}", f"{ours}.{name}")
        if has_skip:
            conv(f"{published}.nin_shortcut", f"{ours}.skip")

    def attn(published: str, ours: str) -> None:
        for theirs, mine in (("norm", "norm"), ("q", "q"), ("k", "k"), ("v", "v"), ("proj_out", "proj")):
            conv(f"{published}.{theirs}", f"{ours}.{mine}")

    conv("post_quant_conv", "post_quant_conv")
    conv("decoder.conv_in", "decoder.conv_in")
    res("decoder.mid.0", "decoder.mid_res1", False)
    attn("decoder.mid.1", "decoder.mid_attn")
    res("decoder.mid.2", "decoder.mid_res2", False)
    widths = [config.base_channels * m for m in reversed(config.ch_mult)]
    c_in = widths[0]
    for i, width in enumerate(widths):
        for j in range(config.num_res_blocks + 1):
            res(f"decoder.conv_blocks.{i}.res.{j}", f"decoder.levels.{i}.res.{j}", (c_in if j == 0 else width) != width)
            if i == 0:
                attn(f"decoder.conv_blocks.{i}.attn.{j}", f"decoder.levels.{i}.attn.{j}")
        if i < len(widths) - 1:
            conv(f"decoder.conv_blocks.{i}.upsample.conv", f"decoder.levels.{i}.up")
        c_in = width
    conv("decoder.norm_out", "decoder.norm_out")
    conv("decoder.conv_out", "decoder.conv_out")
    return keys


# encoder half and training statistics of the VQ checkpoint: not used to decode
VQ_UNUSED_KEYS = re.compile(r"^(encoder\.|quant_conv\.|quantize\.codebook_used$)")


def _listing(title: str, keys: list[str], limit: int = 20) -> str:
    shown = ", ".join(keys[:limit]) + (f", ... ({len(keys) - limit} more)" if len(keys) > limit else "")
    return f"{title} ({len(keys)}): {shown}"


def load_mapped(
    module: nn.Module, state: dict[str, Tensor], key_map: dict, what: str, unused: re.Pattern | None = None
) -> None:
    """Copy `state` into `module` through `key_map` (published -> ours); raise on any mismatch.

    A tuple of our names splits the published tensor along dim 0 in that order (a fused q/k/v).

    A leading singleton dim in a checkpoint tensor is dropped (e.g. (1, C, E) -> (C, E)); any other
    shape difference is an error.
    """
    ours = module.state_dict()
    mapped_to = {name for value in key_map.values() for name in ((value,) if isinstance(value, str) else value)}
    problems = []
    missing = sorted(k for k in key_map if k not in state)
    unexpected = sorted(
        k
        for k in state
        if k not in key_map and not DERIVED_KEYS.search(k) and not (unused is not None and unused.search(k))
    )
    unmapped = sorted(k for k in ours if k not in mapped_to)  # our names no checkpoint key fills
    if missing:
        problems.append(_listing("missing keys", missing))
    if unexpected:
        problems.append(_listing("unexpected keys", unexpected))
    if unmapped:
        problems.append(_listing("model parameters with no checkpoint key", unmapped))
    converted, wrong_shapes = {}, []
    for published, names in key_map.items():
        names = (names,) if isinstance(names, str) else names
        if published not in state or any(name not in ours for name in names):
            continue
        tensor = state[published]
        while tensor.dim() > ours[names[0]].dim() and tensor.shape[0] == 1:
            tensor = tensor[0]
        expected = torch.Size([sum(ours[n].shape[0] for n in names), *ours[names[0]].shape[1:]])
        if tensor.shape != expected:
            wrong_shapes.append(f"{published} {tuple(state[published].shape)} vs {'+'.join(names)} {tuple(expected)}")
            continue
        for name, part in zip(names, tensor.split([ours[n].shape[0] for n in names])):
            converted[name] = part
    if wrong_shapes:
        problems.append(_listing("shape mismatches", wrong_shapes))
    if problems:
        raise CheckpointMismatch(f"{what} checkpoint does not match the model:\n  " + "\n  ".join(problems))
    module.load_state_dict(converted, strict=True, assign=True)


def read_state_dict(path: str | Path) -> dict[str, Tensor]:
    """Tensors from a .safetensors/.bin/.pt file, or from a folder (single file or sharded with an index)."""
    path = Path(path)
    if path.is_dir():
        for name in ("model.safetensors", "pytorch_model.bin"):
            if (path / name).exists():
                return read_state_dict(path / name)
        for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
            if (path / index).exists():
                shards = sorted(set(json.loads((path / index).read_text())["weight_map"].values()))
                state = {}
                for shard in shards:
                    state.update(read_state_dict(path / shard))
                return state
        raise FileNotFoundError(f"no model.safetensors, pytorch_model.bin or shard index in {path}")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    return torch.load(path, map_location="cpu", weights_only=True, mmap=True)


def resolve(path_or_id: str | Path) -> Path:
    """A local folder/file as is; an `owner/name` hub id downloaded (needs network) into the HF cache."""
    path = Path(path_or_id)
    if path.exists():
        return path
    if re.fullmatch(r"[\w.-]+/[\w.-]+", str(path_or_id)):
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(str(path_or_id)))
    raise FileNotFoundError(f"{path_or_id} is neither a local path nor a hub id")


def _unwrap(checkpoint, path) -> dict[str, Tensor]:
    """The state dict inside a LlamaGen training checkpoint (its "model", "module" or "state_dict" entry)."""
    if isinstance(checkpoint, dict):
        for entry in ("model", "module", "state_dict"):
            if isinstance(checkpoint.get(entry), dict):
                return checkpoint[entry]
    raise CheckpointMismatch(f"{path}: expected a dict with a 'model', 'module' or 'state_dict' entry (LlamaGen .pt)")


def load_original_target(
    path: str | Path,
    device="cpu",
    dtype=torch.float32,
    caption_encoder=None,
    block_size: int | None = None,
    config: LlamaGenConfig | None = None,
) -> LlamaGenT2I:
    """`LlamaGenT2I` from LlamaGen's own checkpoint (`t2i_XL_stage1_256.pt`, `t2i_XL_stage2_512.pt`).

    Args:
        path: the .pt file.
        block_size: image tokens (256 for 256 px, 1024 for 512 px); default read from the file name.
        config: explicit widths; default `original_config` (from the tensor shapes).
    """
    path = Path(path)
    with torch.serialization.safe_globals([argparse.Namespace]):  # training args may sit beside the weights
        state = _unwrap(torch.load(path, map_location="cpu", weights_only=True, mmap=True), path)
    if config is None:
        if block_size is None:
            resolution = resolution_from_name(path)
            if resolution is None:
                raise ValueError(f"{path.name}: cannot tell the resolution from the name; pass block_size")
            block_size = (resolution // VQ_FACTOR) ** 2
        config = original_config(state, block_size)
    with torch.device("meta"):
        model = LlamaGenT2I(config, caption_encoder=caption_encoder)
    load_mapped(model, state, original_target_key_map(config), f"LlamaGen original target ({path})")
    return model.to(device=device, dtype=dtype).eval()


def load_target(
    path_or_id: str | Path, device="cpu", dtype=torch.float32, caption_encoder=None, block_size: int | None = None
) -> LlamaGenT2I:
    """`LlamaGenT2I` from either layout: a folder with config.json + weights (LANTERN's conversion, or a hub
    id such as `jadohu/LlamaGen-T2I`), or LlamaGen's own `.pt` (a file, or a folder holding one and no
    config.json; see `load_original_target`, which `block_size` is passed to)."""
    folder = resolve(path_or_id)
    original = folder if folder.is_file() and folder.suffix in (".pt", ".pth") else original_checkpoint(folder)
    if original is not None:
        return load_original_target(original, device, dtype, caption_encoder, block_size=block_size)
    config = LlamaGenConfig.from_json(folder / "config.json")
    with torch.device("meta"):
        model = LlamaGenT2I(config, caption_encoder=caption_encoder)
    load_mapped(model, read_state_dict(folder), target_key_map(config), f"LlamaGen target ({folder})")
    return model.to(device=device, dtype=dtype).eval()


def load_drafter(path_or_id: str | Path, target: LlamaGenT2I, device="cpu", dtype=torch.float32) -> LlamaGenDrafter:
    """`LlamaGenDrafter` from a folder (config.json + pytorch_model.bin) or hub id `jadohu/llamagen_drafter`."""
    folder = resolve(path_or_id)
    config = LlamaGenConfig.from_json(folder / "config.json")
    with torch.device("meta"):
        model = LlamaGenDrafter(config, target)
    load_mapped(model, read_state_dict(folder), drafter_key_map(config), f"LlamaGen drafter ({folder})")
    return model.to(device=device, dtype=dtype).eval()


def load_vq(path: str | Path, grid: tuple[int, int], device="cpu", config: VQ16Config | None = None) -> VQ16Tokenizer:
    """`VQ16Tokenizer` from `vq_ds16_t2i.pt` (its `"model"` entry), decoding a `grid` (H, W) of tokens.

    `config` defaults to the published VQ_16 widths.
    """
    config = config or VQ16Config()
    with torch.serialization.safe_globals([argparse.Namespace]):  # training args may sit beside the weights
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(checkpoint, dict) or "model" not in checkpoint:
        raise CheckpointMismatch(f"{path}: expected a dict with a 'model' entry (LlamaGen VQ checkpoint)")
    with torch.device("meta"):
        model = VQ16Tokenizer(config, grid)
    load_mapped(model, checkpoint["model"], vq_key_map(config), f"LlamaGen VQ ({path})", unused=VQ_UNUSED_KEYS)
    return model.to(device=device).eval()
