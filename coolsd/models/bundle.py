"""Everything the engine and the app need for one model, loaded by one call: `ModelBundle`, the one bundle type.

`load_embedded()` reads the shipped `assets/embedded/` folders (transformers / diffusers
`save_pretrained` layout, fp16 safetensors) and returns a `ModelBundle`; the emoji model, the tiny
random one and LlamaGen (one bundle per resolution) return the same type. `bundle.condition(name, style)`
turns what a visitor names into the engine's condition (`coolsd.models.conditions`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from coolsd.decoding.neighbours import neighbour_table
from coolsd.decoding.protocol import Drafter, ImageTokenizer, TokenModel
from coolsd.decoding.sampling import SamplingConfig
from coolsd.models.channel import ChannelTarget, stored_channel
from coolsd.models.conditions import STYLE_SEP, Conditions
from coolsd.models.graphs import prepare
from coolsd.util.paths import EMBEDDED_DIR

# Sampling the embedded model was tuned for (see assets/embedded/README.md).
EMBEDDED_SAMPLING = SamplingConfig(cfg_scale=3.0, temperature=1.0, top_k=0, top_p=1.0)
PARTS = ("vq", "target", "drafter")


class BundleError(RuntimeError):
    """A model folder is missing, incomplete or unreadable."""


@dataclass
class ModelBundle:
    """name; target/drafter: engine models; tokenizer: ids -> image; neighbours: (V, k+1) int64 table;
    class_names: label of each engine condition id ("<class> · <style>" for a styled model; conditioning ==
    "class") or [] for text prompts; grid: (H, W) tokens. The rest says how the app offers it: kind (the
    loader: "embedded", "emoji", "tiny", "llamagen"), execution (the weights' dtype and why), note (a fallback
    to show), resolution (pixels per side, models offered at several), example prompts and the prompt cap, and
    credits (the training data's authors and licences, which the page shows)."""

    name: str
    target: TokenModel
    drafter: Drafter
    tokenizer: ImageTokenizer
    neighbours: Tensor
    class_names: list[str]
    grid: tuple[int, int]
    default_sampling: SamplingConfig = field(default_factory=SamplingConfig)
    conditioning: str = "class"
    classifier: object | None = None  # embedded only: the classifier used by the benchmark
    style_names: list[str] = field(default_factory=list)  # emoji: condition id = class * S + style
    execution: str = ""  # how the model runs, e.g. "bf16 (stored with the model)"; shown and recorded by the app
    class_groups: list[str] = field(default_factory=list)  # emoji: one Unicode group per class (the picker's filter)
    class_chars: list[str] = field(default_factory=list)  # emoji: the character each class draws (shown by its name)
    default_class: str | None = None  # the class a page starts on (config `default_class`; None: the loader's pick)
    credits: str = ""  # whose artwork and names the model learned, and their licences (config `credits`; shown)
    kind: str = "embedded"
    path: str = "eager"  # the execution path target and drafter run (`coolsd.models.graphs`: eager, fused, cuda-graphs)
    note: str = ""
    resolution: int | None = None
    example_prompts: tuple[str, ...] = ()
    check_prompt: Callable[[str], str] | None = None  # text models: the family's own prompt check (ValueError)
    max_prompt_chars: int = 300

    @property
    def conditions(self) -> Conditions:
        """The names a visitor may give (`coolsd.models.conditions.Conditions`)."""
        if self.conditioning == "text":
            return Conditions(kind="text", check_prompt=self.check_prompt, max_prompt_chars=self.max_prompt_chars)
        return Conditions(tuple(self.base_class_names), tuple(self.style_names), tuple(self.class_groups))

    def condition(self, value, style=None):
        """The engine condition of a visitor's class / emoji name (and style), condition id or prompt;
        a one-line ValueError otherwise (an unknown name suggests the closest)."""
        return self.conditions.resolve(value, style)

    @property
    def base_class_names(self) -> list[str]:
        """The class picker's names: class_names without the style part (same list without styles)."""
        if not self.style_names:
            return list(self.class_names)
        return [name.rsplit(STYLE_SEP, 1)[0] for name in self.class_names[:: len(self.style_names)]]

    def condition_name(self, class_name: str, style_name: str | None = None) -> str:
        """The class_names entry of a (class, style) pick; without styles the class name itself."""
        return f"{class_name}{STYLE_SEP}{style_name}" if self.style_names else class_name

    @property
    def num_tokens(self) -> int:
        return self.grid[0] * self.grid[1]


class VQTokenizer:
    """ImageTokenizer over a diffusers `VQModel` or a `PatchVQModel`: ids (T,) -> image (C, H*f, W*f) in [0, 1]; or
    (B, T) -> (B, C, H*f, W*f) in one call (`batched`)."""

    batched = True  # decode takes a batch of grids too

    def __init__(self, vq, grid: tuple[int, int]) -> None:
        self.vq = vq.eval()
        self.grid = tuple(grid)

    @torch.no_grad()
    def decode(self, ids: Tensor) -> Tensor:
        ids = ids.reshape(-1, self.grid[0] * self.grid[1]).to(self.vq.device)
        shape = (ids.shape[0], *self.grid, self.vq.config.latent_channels)
        z = self.vq.quantize.get_codebook_entry(ids.reshape(-1), shape)
        img = self.vq.decode(z.to(self.vq.dtype), force_not_quantize=True).sample.float()
        img = ((img.clamp(-1, 1) + 1) / 2).cpu()
        return img[0] if img.shape[0] == 1 else img

    @property
    def codebook(self) -> Tensor:
        return self.vq.quantize.embedding.weight.detach().float()


def _require(path: Path) -> Path:
    if not path.is_dir():
        raise BundleError(f"model folder not found: {path}")
    if not (path / "config.json").is_file():
        raise BundleError(f"{path} has no config.json: not a save_pretrained folder")
    if not any(path.glob("*.safetensors")):
        raise BundleError(f"{path} has no *.safetensors weights")
    return path


def _load(kind: str, path: Path, fn):
    try:
        return fn(_require(path))
    except BundleError:
        raise
    except Exception as err:  # corrupt json or weights: say which folder and why
        raise BundleError(f"could not load the {kind} from {path}: {type(err).__name__}: {err}") from err


def load_vq_llama(root: Path, name: str, sampling: SamplingConfig, device=None, dtype: torch.dtype | None = None,
                  with_classifier: bool = False, k_max: int = 32, execution_path: str | None = None) -> ModelBundle:
    """Load four save_pretrained folders (vq, target, drafter[, classifier]) under `root` strictly.

    `dtype`: what target and drafter run in (default fp32 on CPU, fp16 on CUDA); the VQ decoder runs
    in fp32 on CPU. A styled target (config `style_names`) gets class_names "<class> · <style>" for
    each condition id class * S + style. `execution_path`: "eager", "fused" or "cuda-graphs" (None: $COOLSD_EXECUTION,
    else auto; `coolsd.models.graphs.choose_path`), named by `ModelBundle.path`.
    """
    from transformers import LlamaForCausalLM

    from coolsd.models.eagle import EagleDrafter, EagleHead
    from coolsd.models.embedded import LlamaClassTarget
    from coolsd.models.patch_vq import load_vq

    if not root.is_dir():
        raise BundleError(f"embedded model folder not found: {root}")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    vq_dtype = torch.float16 if device.type == "cuda" else torch.float32
    dtype = dtype or vq_dtype
    # (low_cpu_mem_usage=False: what diffusers falls back to without `accelerate`, said here so it need not warn)
    vq = _load("VQ tokenizer", root / "vq", lambda p: load_vq(p, torch_dtype=vq_dtype,
                                                                 low_cpu_mem_usage=False))
    model = _load("target", root / "target", lambda p: LlamaForCausalLM.from_pretrained(p, dtype=dtype))
    head = _load("drafter", root / "drafter", lambda p: EagleHead.from_pretrained(p, dtype=dtype))
    vq, model, head = vq.to(device).eval(), model.to(device).eval(), head.to(device).eval()
    cfg = model.config
    grid = tuple(cfg.image_grid)
    target = LlamaClassTarget(model)
    drafter = EagleDrafter(head, model.model.embed_tokens.weight, model.lm_head.weight[: cfg.codebook_size],
                           grid[0] * grid[1])
    tokenizer = VQTokenizer(vq, grid)
    # execution path (argument / env / auto: CUDA graphs on a GPU, fused on a CPU that builds the row kernel),
    # warm-up; logs it
    path = prepare([target, drafter], execution_path, rows=(2, 1))
    channel = stored_channel(cfg, tokenizer.codebook)
    if channel is not None:  # the target hesitates between look-alike codes (`coolsd.models.channel`)
        target = ChannelTarget(target, *channel)
        drafter.temperature = target.temperature  # drafts from the transformer's logits at the same temperature
    classifier = None
    if with_classifier:
        from transformers import ResNetForImageClassification

        classifier = _load("classifier", root / "classifier",
                           lambda p: ResNetForImageClassification.from_pretrained(p, dtype=torch.float32)).eval()
    styles = list(getattr(cfg, "style_names", None) or [])
    names = [f"{c}{STYLE_SEP}{s}" for c in cfg.class_names for s in styles] if styles else list(cfg.class_names)
    return ModelBundle(name=name, target=target, drafter=drafter, tokenizer=tokenizer,
                       neighbours=neighbour_table(tokenizer.codebook, k_max).to(device), class_names=names,
                       grid=grid, default_sampling=sampling, classifier=classifier, style_names=styles,
                       execution=str(dtype).removeprefix("torch."),
                       class_groups=list(getattr(cfg, "class_groups", None) or []),
                       class_chars=list(getattr(cfg, "class_chars", None) or []),
                       default_class=getattr(cfg, "default_class", None),
                       credits=str(getattr(cfg, "credits", None) or ""), path=path)


def load_embedded(path: str | Path | None = None, device: str | torch.device | None = None,
                  with_classifier: bool = False, k_max: int = 32, execution_path: str | None = None) -> ModelBundle:
    """Load the shipped MNIST model: VQ tokenizer, Llama target, Eagle-1 head, neighbour table.

    Weights are stored in fp16 and run in fp32 (CPU) or fp16 (CUDA).
    """
    root = Path(path) if path is not None else EMBEDDED_DIR
    return load_vq_llama(root, "embedded MNIST (Llama 6.4M + Eagle-1 head)", EMBEDDED_SAMPLING, device,
                         with_classifier=with_classifier, k_max=k_max, execution_path=execution_path)
