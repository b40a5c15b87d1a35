"""A decode step against the machine's memory limit, the eager path against the fused one; the command is
`python -m coolsd.bench.limit` (`coolsd/bench/limit.py`), and the benchmark records `measure` with every run.

For one shipped model, in its stored precision, at one torch thread (as the app decodes):
- the weight bytes one target step and one drafter (head) step read (every product's matrix once);
- the machine's memory bandwidth, measured by a plain copy of a large buffer (256 MB, far past any cache),
  and the rate of the same copy at the target's weight size (what a step gets when its weights stay in
  the last-level cache); the times those imply for a step's weights;
- the step's matrix products alone (its rows each, nothing around them): what its small ops add;
- measured on both CPU execution paths (`coolsd.models.graphs`: eager, fused), in alternating
  turns: one target step of one token, a verify of L + 1 tokens, one head step, a round (L head steps + the
  verify), each after `context` cached tokens, and the time to put the models on the path (packing, at start-up).

    python -m coolsd.bench.limit --model emoji
"""

from __future__ import annotations

import datetime
import statistics
import time
from collections.abc import Callable

import torch
from torch import Tensor

from coolsd.compare.race import fork_models
from coolsd.decoding.drafting import Chain
from coolsd.models import rowkernel
from coolsd.models.bundle import load_embedded
from coolsd.models.emoji import load_emoji
from coolsd.models.fused import RowsLinear
from coolsd.models.graphs import FUSED, prepare
from coolsd.models.timing import interleaved_medians
from coolsd.util.machine import cpu_key
from coolsd.util.paths import BENCH_DIR, EMBEDDED_DIR, EMOJI_DIR

PATHS = ("eager", FUSED)  # the CPU paths; CUDA graphs are the GPU's
BIG_BUFFER = 256 * 2**20  # bytes copied to measure the memory's bandwidth
CONTEXT = 128  # image tokens cached before every timed call (half the emoji image)
# --model: (loader(folder, device=...), model folder, default output folder)
MODELS = {"emoji": (load_emoji, EMOJI_DIR, EMOJI_DIR / "bench"), "embedded": (load_embedded, EMBEDDED_DIR, BENCH_DIR)}


def matrix_bytes(*tensors) -> int:
    """Bytes of the given tensors (a step reads each product's matrix once)."""
    return sum(t.numel() * t.element_size() for t in tensors)


def step_matrices(target, drafter) -> dict[str, list[Tensor]]:
    """{"target": the target's layer matrices and codebook head, "drafter": the head's fc, layer and head}, each
    (K, N) as a step multiplies by it (embedded Llama target + Eagle head)."""
    return {"target": [*(w for block in target.stack.blocks for w in block), target.head_t],
            "drafter": [*(w for block in drafter.stack.blocks for w in block), drafter.fc_t, drafter.head_t]}


def step_bytes(target, drafter) -> dict[str, int]:
    """{"target", "drafter"}: the bytes of `step_matrices`, what one step of each reads (caches and activations
    aside)."""
    return {name: matrix_bytes(*ws) for name, ws in step_matrices(target, drafter).items()}


def products_call(matrices: list[Tensor], rows: int = 1) -> Callable[[], None]:
    """One call of every matrix's product of `rows` rows (a step's: its guidance rows) with nothing around it, as the
    fused path runs them (`RowsLinear`: the row kernel on the stored weights): a step's floor in products."""
    linears = [RowsLinear(w) for w in matrices]
    inputs = [torch.randn(rows, w.shape[0], device=w.device) for w in matrices]

    def call() -> None:
        for lin, x in zip(linears, inputs):
            lin(x)

    return call


def copy_rate(nbytes: int, repeats: int = 7, clock: Callable[[], float] = time.process_time) -> float:
    """Bytes per CPU second a plain `dst.copy_(src)` of `nbytes` moves (read + write counted), median of `repeats`."""
    src = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)  # touch every page once
    times = []
    for _ in range(max(repeats, 1)):
        t0 = clock()
        for _ in range(max(1, 2**24 // max(nbytes, 1))):  # a small buffer is copied often enough to read the clock
            dst.copy_(src)
        times.append((clock() - t0) / max(1, 2**24 // max(nbytes, 1)))
    return 2 * src.numel() * 4 / max(statistics.median(times), 1e-9)


def path_calls(bundle, path: str, draft_len: int, context: int = CONTEXT) -> tuple[dict[str, Callable], float]:
    """({"step", "verify", "head", "round": call}, seconds to prepare the path) on fresh forks of the bundle's
    models: the calls append after `context` cached tokens and crop back, so each can repeat."""
    target, drafter = fork_models(bundle.target, bundle.drafter)
    t0 = time.perf_counter()
    prepare([target, drafter], path=path, rows=(bundle.default_sampling.rows,))
    ready_s = time.perf_counter() - t0
    guidance = bundle.default_sampling.guidance
    ids = torch.zeros(context + draft_len + 1, dtype=torch.long, device=target.device)
    with torch.no_grad():
        first = target.start(0, guidance)
        drafter.start(0, guidance)
        pre = target.forward(ids[:context], torch.arange(context, device=target.device))
        drafter.forward(ids[:context], torch.cat([first.hidden, pre.hidden[:, :-1]], dim=1),
                        torch.arange(context, device=target.device))
    feature = pre.hidden[:, -1:]
    positions = torch.arange(context, context + draft_len + 1, device=target.device)

    def verify(n: int = draft_len + 1) -> None:
        target.forward(ids[:n], positions[:n])
        target.crop(context)

    def heads(n: int) -> None:
        hidden = feature
        for j in range(n):
            hidden = drafter.forward(ids[:1], hidden, positions[j : j + 1]).hidden
        drafter.crop(context)

    calls = {"step": lambda: verify(1), "verify": verify, "head": lambda: heads(1),
             "round": lambda: (heads(draft_len), verify())}
    return calls, ready_s


def measure(bundle, draft_len: int | None = None, repeats: int = 30, warmup: int = 5, context: int = CONTEXT,
            clock: Callable[[], float] = time.process_time, buffer_bytes: int = BIG_BUFFER,
            paths: tuple[str, ...] = PATHS) -> dict:
    """The limit and the measured calls of `bundle` on each path of PATHS (see the module docstring).
    Times in ms of `clock` (default the process's CPU time, as the benchmark's speed-ups: on a shared machine
    other processes stretch wall time, not this one's CPU time), bytes in MB (2^20), rates in GB/s (10^9 bytes);
    `context` is capped at half the image; `buffer_bytes`: the copy that measures the memory's bandwidth; `paths`:
    which of PATHS to time (eager always, the ratios' baseline; fused where the row kernel runs)."""
    paths = tuple(p for p in PATHS if p == "eager" or (p in paths and rowkernel.available()))
    draft_len = draft_len or Chain.draft_len
    context = min(context, bundle.num_tokens // 2)
    sizes = step_bytes(bundle.target, bundle.drafter)
    memory, cached = copy_rate(buffer_bytes, clock=clock), copy_rate(sizes["target"], clock=clock)
    matrices = step_matrices(bundle.target, bundle.drafter)
    rows = bundle.default_sampling.rows
    calls = {"products/target": products_call(matrices["target"], rows=rows),
             "products/drafter": products_call(matrices["drafter"], rows=rows)}
    ready = {}
    for path in paths:
        each, ready[path] = path_calls(bundle, path, draft_len, context)
        calls |= {f"{path}/{name}": fn for name, fn in each.items()}
    with torch.no_grad():
        ms = {key: 1e3 * s for key, s in interleaved_medians(calls, repeats, warmup, clock=clock).items()}
    times = {path: {name: round(ms[f"{path}/{name}"], 3) for name in ("step", "verify", "head", "round")}
             | {"ready_s": round(ready[path], 3)} for path in paths}
    return {
        "model": bundle.name, "execution": bundle.execution, "execution_path": bundle.path, "cpu": cpu_key(),
        "threads": torch.get_num_threads(), "torch": torch.__version__, "draft_len": draft_len, "context": context,
        "rows": bundle.default_sampling.rows, "turns": repeats, "clock": getattr(clock, "__name__", str(clock)),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),  # noqa: UP017 - Python 3.10
        "weights_mb": {k: round(v / 2**20, 3) for k, v in sizes.items()},
        "bandwidth_gbs": {"memory": round(memory / 1e9, 2), "cache": round(cached / 1e9, 2)},
        "implied_ms": {f"{k}_{where}": round(1e3 * v / rate, 3) for k, v in sizes.items()
                       for where, rate in (("memory", memory), ("cache", cached))},
        "products_ms": {name: round(ms[f"products/{name}"], 3) for name in ("target", "drafter")},
        "paths": times,
        "ratios": {path: ratios(times[path], times["eager"]) for path in paths},
    }


def ratios(times: dict, eager: dict) -> dict[str, float]:
    """A path's head / step, round / step (in its own steps) and step / the eager step."""
    return {"head_per_step": round(times["head"] / times["step"], 3),
            "round_per_step": round(times["round"] / times["step"], 3),
            "step_vs_eager": round(times["step"] / eager["step"], 3)}


def markdown(result: dict) -> str:
    """The limit table: bytes, bandwidth and implied times, then one row per path."""
    w, bw, implied = result["weights_mb"], result["bandwidth_gbs"], result["implied_ms"]
    head = (f"{result['model']}, {result['execution']}, {result['cpu']}, {result['threads']} thread(s), torch "
            f"{result['torch']}, {result['date']}; L = {result['draft_len']}, {result['rows']} guidance row(s), after "
            f"{result['context']} cached tokens, medians of {result['turns']} alternating turns of "
            f"`time.{result['clock']}` "
            "(`python -m coolsd.bench.limit`).\n\n"
            f"Weights read per step: target {w['target']:.2f} MB, head {w['drafter']:.2f} MB. Copy rate: "
            f"{bw['memory']:.1f} GB/s through memory (256 MB buffer), {bw['cache']:.1f} GB/s at the target's weight "
            f"size. Implied target step: {implied['target_memory']:.3f} ms (memory), {implied['target_cache']:.3f} ms "
            f"(cache); head step {implied['drafter_memory']:.3f} / {implied['drafter_cache']:.3f} ms.\n\n"
            + products_line(result))
    rows = ["| path | step ms | verify L+1 ms | head step ms | round ms | head / step | round / step "
            "| step / eager step | ready s |", "|---|---|---|---|---|---|---|---|---|"]
    for path, t in result["paths"].items():
        r = result["ratios"][path]
        rows.append(f"| {path} | {t['step']:.3f} | {t['verify']:.3f} | {t['head']:.3f} | {t['round']:.3f} "
                    f"| {r['head_per_step']:.2f} | {r['round_per_step']:.2f} | {r['step_vs_eager']:.2f} "
                    f"| {t['ready_s']:.2f} |")
    return head + "\n".join(rows) + "\n"


def products_line(result: dict) -> str:
    """What a step's products alone take (`products_call`) against the fused step (else the eager one): the rest is
    its small ops."""
    base = FUSED if FUSED in result["paths"] else "eager"
    prod, step = result["products_ms"], result["paths"][base]["step"]
    return (f"The matrix products alone ({result['rows']} row(s) each, as a step, nothing around them): target "
            f"{prod['target']:.3f} ms ({prod['target'] / step:.0%} of the {base} step), head {prod['drafter']:.3f} "
            "ms; the rest of a step is the small ops around them (norms, RoPE, cache writes, attention, views).\n\n")
