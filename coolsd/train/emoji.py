"""Training stages of the emoji model (class + style conditional, RGB), built on the MNIST stages.

Recipe (one class per emoji, `coolsd.train.emoji_data`; assets/emoji/README.md):
- VQ: the local `PatchVQModel` (`train_patch_vq`, `--vq-kind patch`, the default): 2,048 codes, the k-means
  of every 2 x 2 RGB patch of the training images, a decoder correction (widths 32, 64) trained with MSE,
  left-right flips where safe. (`--vq-kind conv`: the earlier diffusers `VQModel`, widths (32, 64), 8-dim
  codes, 1024 codes, unused codes re-seeded every 200 steps during the first 2,000; its codes are not local,
  assets/emoji/README.md);
- target: `LlamaForCausalLM` d256 x 24 layers (20.4 M; grown from 6 by `expanded_layers`), prefix [emoji, style],
  CFG dropout 0.1 on both
  (+ 0.05 on each alone), trained under bf16 autocast on the VQ codes of every training image (no
  mirror copies: each (emoji, style) pair is one picture to learn);
- classifier: ResNet with C + S outputs (emoji logits, then style logits), on the real images.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM, ResNetForImageClassification

from coolsd.decoding.neighbours import neighbour_table
from coolsd.models.channel import CHANNEL_K, PLAIN, emit, kernel_rows, lookalike_kernel
from coolsd.models.embedded import prefix_len, target_config
from coolsd.train import emoji_data
from coolsd.train.classifier import classifier_config, shift
from coolsd.train.loop import run_budgeted, update
from coolsd.train.target import code_nll, sequences, soft_code_nll, substitute_neighbours
from coolsd.train.vq import encode_tokens, flip_where

VQ_ARCH = dict(channels=3, widths=(32, 64), latent_channels=8)
VQ_CODES = 1024
PATCH_VQ_CODES = 2048  # the local tokenizer (--vq-kind patch, the default): k-means of 2 x 2 RGB patches
# the shipped target: 24 layers of width 256, so a step streams its weights (bf16: 39 MB, past a 32 MB L3) and a
# one-layer head costs a tenth of it (assets/emoji/README.md, "Why this size")
TARGET_SIZE = dict(hidden=256, layers=24, heads=4, intermediate=704)
DROP_BOTH, DROP_SINGLE = 0.1, 0.05
HELD_FRAMED_PICTURES = 128  # framed training: the last framing of every picture is never trained on; 128 are scored


def emoji_target_config(codebook_size: int, data: dict, **size):
    """The target's LlamaConfig: one class per emoji (names, Unicode groups and characters kept in the
    config for the app's picker), one style per drawing set."""
    config = target_config(codebook_size, class_names=data["class_names"], style_names=data["style_names"],
                           **(TARGET_SIZE | size))
    config.class_groups = list(data.get("class_groups", []))
    config.class_chars = list(data.get("class_chars", []))
    return config


def emoji_token_dataset(vq, images: torch.Tensor, labels, styles, flippable, flips: bool = False):
    """Codes of every image [and of the mirror image of the flippable ones]: (M, 256), labels, styles."""
    flip = torch.nonzero(flippable & flips).flatten()
    codes = encode_tokens(vq, images)
    if len(flip):
        codes = torch.cat([codes, encode_tokens(vq, images[flip].flip(-1))])
    codes = codes.flatten(1)
    return codes, torch.cat([labels, labels[flip]]), torch.cat([styles, styles[flip]])


def token_rows(old_config, new_config) -> torch.Tensor:
    """For each id of `new_config`'s vocabulary, the id of `old_config` that means the same token: codes by
    index, emoji by name, styles by name, the nulls by role. (V_new,) long; KeyError names a missing emoji."""
    k = new_config.codebook_size
    if old_config.codebook_size != k:
        raise ValueError(f"codebooks differ: {old_config.codebook_size} vs {k} codes")
    old_class = {n: old_config.class_token_offset + i for i, n in enumerate(old_config.class_names)}
    old_style = {n: old_config.style_token_offset + i for i, n in enumerate(old_config.style_names)}
    rows = list(range(k)) + [old_class[n] for n in new_config.class_names] + [old_config.null_class_token]
    rows += [old_style[n] for n in new_config.style_names] + [old_config.null_style_token]
    return torch.tensor(rows)


def expanded_layers(state: dict, old_layers: int, new_layers: int) -> dict:
    """Block expansion (LLaMA Pro): a state dict of `old_layers` Llama blocks -> one of `new_layers` (a multiple),
    each old block followed by copies of itself whose output projections (o_proj, down_proj) are zero, so each copy
    adds nothing to the residual stream and the expanded model computes exactly what the old one did. Training
    then moves every block (the zeroed projections get gradients at once, the rest through them)."""
    if new_layers % old_layers:
        raise ValueError(f"{new_layers} layers is not a multiple of the {old_layers} to expand")
    ratio, out = new_layers // old_layers, {}
    for name, value in state.items():
        m = re.match(r"model\.layers\.(\d+)\.(.+)", name)
        if m is None:
            out[name] = value
            continue
        old, rest = int(m.group(1)), m.group(2)
        for copy in range(ratio):
            zeroed = copy > 0 and rest in ("self_attn.o_proj.weight", "mlp.down_proj.weight")
            out[f"model.layers.{old * ratio + copy}.{rest}"] = torch.zeros_like(value) if zeroed else value.clone()
    return out


def warm_start(model: LlamaForCausalLM, init) -> None:
    """Copy a trained target (save_pretrained folder `init`) into `model`, whose emoji may be a subset of
    the old one's: the embedding and output rows picked by `token_rows`, every layer as is, or expanded to
    `model`'s depth by `expanded_layers` when it is a multiple of the old one's."""
    old = LlamaForCausalLM.from_pretrained(init, dtype=torch.float32)
    rows = token_rows(old.config, model.config)
    state = old.state_dict()
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        state[name] = state[name][rows]
    old_layers, new_layers = old.config.num_hidden_layers, model.config.num_hidden_layers
    if new_layers != old_layers:
        state = expanded_layers(state, old_layers, new_layers)
    model.load_state_dict(state, strict=True)
    print(f"[target] warm start from {init}: {len(rows)} of {old.config.vocab_size} token rows, "
          f"{old_layers} -> {new_layers} layers", flush=True)


def framed_codes(vq, pictures: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """Codes of every framing of every picture: pictures (N, V, 3, 32, 32) uint8 -> (N, V, 256) int16."""
    flat = pictures.flatten(0, 1)
    with torch.no_grad():
        codes = torch.cat([encode_tokens(vq, flat[i : i + chunk].float() / 127.5 - 1).flatten(1)
                           for i in range(0, len(flat), chunk)])
    return codes.to(torch.int16).view(*pictures.shape[:2], -1)


def codebook_key(vq) -> str:
    """A short fingerprint of the VQ's codebook (12 hex digits): codes cached under it belong to that codebook."""
    book = vq.quantize.embedding.weight.detach().float().cpu().contiguous()
    return hashlib.sha1(book.numpy().tobytes()).hexdigest()[:12]


def load_framed_codes(vq, per_icon: int, seed: int = 0, scales: tuple[float, float] = (0.85, 1.0),
                      shift: float = 1.0, folder: Path | None = None) -> dict[str, torch.Tensor]:
    """`framed_codes` of `emoji_data.load_framed`'s pictures, cached beside them (`<pictures>.codes-<codebook
    key>.pt`, a sixth of their bytes; what a training machine without the SVG sets needs): {"train"/"val": (N, V,
    256) int16}, the training and held-out pairs' framings."""
    folder = folder or emoji_data.DATA_FILE.parent
    path = emoji_data.framed_path(per_icon, seed, scales, shift, folder).with_suffix(f".codes-{codebook_key(vq)}.pt")
    print(f"[target] framed codes {path}", flush=True)
    if path.is_file():
        return torch.load(path)
    pictures = emoji_data.load_framed(per_icon, seed, scales, shift, folder)
    codes = {part: framed_codes(vq, pictures[part]) for part in ("train", "val")}
    torch.save(codes, path)
    return codes


def flat_framings(codes: torch.Tensor, labels: torch.Tensor, styles: torch.Tensor):
    """(N, V, T) codes of V framings a picture -> (N*V, T) int64 codes and the (N*V,) labels and styles."""
    v = codes.shape[1]
    return codes.flatten(0, 1).long(), labels.repeat_interleave(v), styles.repeat_interleave(v)


@torch.no_grad()
def soft_candidates(vq, images: torch.Tensor, sigma2: float, k: int = CHANNEL_K, chunk: int = 256):
    """Stochastic quantisation: each patch of images (N, 3, 32, 32) in [-1, 1] may take any of its k
    nearest codes, code c with probability proportional to exp(-|z - c|^2 / (2 sigma2)) (z the patch, in the
    codebook's space): a patch between look-alike codes gets either, a patch on one code keeps it. Plain white
    patches (`PLAIN`) keep their nearest code. -> ids (N, T, k) int64 nearest first, probs (N, T, k) float."""
    ids, probs = [], []
    book = vq.quantize.embedding.weight.float()
    for i in range(0, len(images), chunk):
        z = vq.encode(images[i : i + chunk]).latents.flatten(2).transpose(1, 2)  # (n, T, C)
        d = torch.cdist(z, book[None]) ** 2  # (n, T, K)
        dk, ik = d.topk(k, dim=-1, largest=False)  # nearest first
        p = torch.softmax(-(dk - dk[..., :1]) / (2 * sigma2), dim=-1)
        plain = (z > PLAIN).all(-1)
        p[plain] = F.one_hot(torch.zeros(int(plain.sum()), dtype=torch.long), k).float()
        ids.append(ik)
        probs.append(p)
    return torch.cat(ids), torch.cat(probs)


def draw_codes(ids: torch.Tensor, probs: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One stochastic quantisation: ids, probs (B, T, k) from `soft_candidates` -> codes (B, T)."""
    pick = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=gen).view(probs.shape[:2])
    return ids.gather(-1, pick[..., None])[..., 0]


def target_codes(vq, data: dict, flips: bool, framed: dict | None, soft_sigma2: float, seed: int):
    """The target's training and held-out sequences (see `train_emoji_target`): ((codes (N, T), classes (N,),
    styles (N,), soft candidates (ids, probs) or None), (held-out codes (M, T), classes (M,), styles (M,))).
    Held out: the held-out (emoji, style) pairs; with `framed`, the last framing of `HELD_FRAMED_PICTURES`
    training pictures spread evenly over the list instead (the last framing of every training picture is never
    trained on; `framed["val"]` is not read), so the held-out NLL says when the target stops learning the
    pictures and starts memorising framings."""
    vx, vy, vs, _ = data["val"]
    if soft_sigma2 > 0:
        x, ys, ss, _ = data["train"]
        soft = soft_candidates(vq, x, soft_sigma2)
        val_codes = draw_codes(*soft_candidates(vq, vx, soft_sigma2), torch.Generator().manual_seed(seed + 1))
        return (soft[0][..., 0], ys, ss, soft), (val_codes, vy, vs)  # nearest codes: each step draws its own
    if framed is None:
        return (*emoji_token_dataset(vq, *data["train"], flips=flips), None), (encode_tokens(vq, vx).flatten(1), vy, vs)
    train = framed["train"]
    spread = torch.linspace(0, len(train) - 1, min(HELD_FRAMED_PICTURES, len(train))).round().long()
    unseen = flat_framings(train[spread, -1:], data["train"][1][spread], data["train"][2][spread])
    return (*flat_framings(train[:, :-1], *data["train"][1:3]), None), unseen


def new_emoji_target(vq, data: dict, init: Path | None, channel_sigma2: float, channel_temperature: float,
                     device: str, **size) -> LlamaForCausalLM:
    """The target to train, on `device`: fresh, or warm-started from `init` (`warm_start`); with channel_sigma2 > 0
    its config carries the look-alike channel it will learn to follow (saved with it)."""
    model = LlamaForCausalLM(emoji_target_config(vq.config.num_vq_embeddings, data, **size))
    if init is not None:
        warm_start(model, init)
    if channel_sigma2 > 0:
        model.config.lookalike_channel = {"sigma2": channel_sigma2, "k": CHANNEL_K, "temperature": channel_temperature}
    print(f"[target] {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters on {device}", flush=True)
    return model.to(device)


def train_emoji_target(vq, data: dict, out: Path, budget_s: float, seed: int = 0, batch: int = 32,
                       lr: float = 8e-4, bf16: bool = True, flips: bool = False, init: Path | None = None,
                       framed: dict | None = None, substitute: float = 0.0, substitute_k: int = 4,
                       soft_sigma2: float = 0.0, soft_expected: bool = False, channel_sigma2: float = 0.0,
                       channel_temperature: float = 1.0, device: str = "cpu", keep_best: bool = False,
                       **size) -> LlamaForCausalLM:
    """Train the [class, style] + 256-code Llama for `budget_s` seconds (resumable, see `run_budgeted`);
    `init`: warm-start from a trained target's folder (see `warm_start`). `framed` ({"train"/"val": (N, V, 256)
    codes}, `load_framed_codes`): learn V - 1 random framings of every picture instead of the one centred
    picture, and report the held-out NLL on unseen framings of training pictures (`target_codes`);
    `substitute`: the probability that an input code is replaced by one of its `substitute_k` latent neighbours
    (targets unchanged);
    `soft_sigma2` > 0: every step quantises its pictures afresh by `soft_candidates` (the held-out NLL on one such
    quantisation of the held-out pairs); `soft_expected`: the loss is the cross-entropy against each position's
    whole soft label (`soft_code_nll`) rather than against the one code drawn (same optimum, less noise);
    `channel_sigma2` > 0: every input code is passed through the look-alike channel of that sigma^2
    (`coolsd.models.channel`, k = 8), the targets stay the clean codes, so the target learns to follow the
    pictures its channel draws; `channel_temperature`: stored with the channel, the temperature its logits are
    divided by before the channel when it is sampled (training unchanged). `device`: where the model trains (the
    batches are made on the CPU under the seeded generator, so a device changes no batch); `keep_best`: end with
    the weights of the lowest held-out NLL (evaluated every 100 steps), not the last ones."""
    torch.manual_seed(seed)
    model = new_emoji_target(vq, data, init, channel_sigma2, channel_temperature, device, **size)
    config, autocast = model.config, torch.device(device).type
    (codes, ys, ss, soft), (val_codes, vy, vs) = target_codes(vq, data, flips, framed, soft_sigma2, seed)
    print(f"[target] {len(codes)} training sequences, {len(val_codes)} held out", flush=True)
    neighbours = neighbour_table(vq.quantize.embedding.weight, substitute_k) if substitute > 0 else None
    kernel = None
    if channel_sigma2 > 0:
        kernel = kernel_rows(lookalike_kernel(vq.quantize.embedding.weight, channel_sigma2, CHANNEL_K))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.05)
    gen = torch.Generator().manual_seed(seed)
    p = prefix_len(config)

    def step(i: int) -> dict[str, float]:
        rows = torch.randint(len(codes), (batch,), generator=gen)
        picked = codes[rows] if soft is None else draw_codes(soft[0][rows], soft[1][rows], gen)
        ids = sequences(picked, ys[rows], config, DROP_BOTH, gen, ss[rows], DROP_SINGLE)
        inputs = None if neighbours is None else substitute_neighbours(ids, neighbours, substitute, p, gen)
        inputs = inputs if kernel is None else torch.cat([ids[:, :p], emit(ids[:, p:], kernel, gen)], dim=1)
        ids, inputs = ids.to(device), None if inputs is None else inputs.to(device)
        with torch.autocast(autocast, dtype=torch.bfloat16, enabled=bf16):
            if soft is not None and soft_expected:
                cand = soft[0][rows].to(device), soft[1][rows].to(device)
                loss = soft_code_nll(model, ids if inputs is None else inputs, *cand)
            else:
                loss = code_nll(model, ids, inputs)
        return {"loss": update(model, opt, loss)}

    def evaluate() -> dict[str, float]:
        ids = sequences(val_codes, vy, config, 0.0, gen, vs).to(device)
        with torch.no_grad(), torch.autocast(autocast, dtype=torch.bfloat16, enabled=bf16):
            return {"val_nll": code_nll(model, ids).item()}

    state = run_budgeted("target", model, opt, step, out / "target.ckpt", budget_s, lr, evaluate, eval_every=100,
                         keep_best="val_nll" if keep_best else None)
    model.save_pretrained(out / "target")
    torch.save(state, out / "target_state.pt")
    return model


def emoji_classifier(class_names: list[str], style_names: list[str]) -> ResNetForImageClassification:
    """ResNet on 3x32x32 with len(classes) + len(styles) logits; 256-d pooled features."""
    labels = [f"class:{c}" for c in class_names] + [f"style:{s}" for s in style_names]
    return ResNetForImageClassification(classifier_config(labels, channels=3, widths=(32, 64, 128, 256),
                                                          num_classes=len(class_names), num_styles=len(style_names)))


def split_logits(model, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """images (B, 3, 32, 32) in [-1, 1] -> (class logits (B, C), style logits (B, S))."""
    logits = model(pixel_values=images).logits
    return logits[:, : model.config.num_classes], logits[:, model.config.num_classes :]


@torch.no_grad()
def class_style_accuracy(model, images, labels, styles) -> dict[str, float]:
    c, s = split_logits(model, images)
    return {"val_class_acc": (c.argmax(-1) == labels).float().mean().item(),
            "val_style_acc": (s.argmax(-1) == styles).float().mean().item()}


def train_emoji_classifier(data: dict, out: Path, budget_s: float, seed: int = 0, batch: int = 64,
                           lr: float = 2e-3) -> ResNetForImageClassification:
    """Cross-entropy on class + cross-entropy on style; random flips (where safe) and 2-px shifts."""
    torch.manual_seed(seed)
    model = emoji_classifier(data["class_names"], data["style_names"])
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    gen = torch.Generator().manual_seed(seed)
    x, y, s, flippable = data["train"]
    vx, vy, vs, _ = data["val"]

    def step(i: int) -> dict[str, float]:
        rows = torch.randint(len(x), (batch,), generator=gen)
        xb = shift(flip_where(x[rows], flippable[rows], gen), gen, fill=1.0)
        c, st = split_logits(model, xb)
        loss = F.cross_entropy(c, y[rows]) + F.cross_entropy(st, s[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return {"loss": loss.item()}

    state = run_budgeted("classifier", model, opt, step, out / "classifier.ckpt", budget_s, lr,
                         lambda: class_style_accuracy(model, vx, vy, vs), eval_every=100)
    model.save_pretrained(out / "classifier")
    torch.save(state, out / "classifier_state.pt")
    return model
