"""Execution paths of the layer stacks: eager, static shapes, static shapes captured as CUDA graphs.

- "eager": exact shapes, attention over the slots in use. The CPU default, and the fallback.
- "static": every call padded to a block size of `STATIC_BLOCKS`, attention over the whole cache
  (`LayerStack.forward_static`); runs anywhere, used by the CPU tests of the GPU path.
- "cuda-graphs": the static path with each (rows, block size) captured once as a CUDA graph at
  load (warm-up) and replayed: one launch per layer stack instead of ~15 per layer.
- "lean", "lean-packed", "lean-q8", "lean-rows", "lean-fused": the eager maths with products prepared once and fp32
  activations, for a CPU (`coolsd.models.lean`: one-row calls on fp32 BLAS, or every call on packed bf16 weights;
  "lean-q8": "lean" with the drafter's products on int8 weights; "lean-rows": "lean-q8" with the target's products
  of a few rows, a verify, on `coolsd.models.rowkernel`; "lean-fused": every layer stack's call of up to 16 rows,
  target and drafter, in one C call of that kernel's library, on the stored weights); models without a lean path
  of their own (LlamaGen) run eager on them.

`prepare(models)` picks the path: the caller's argument, else env `COOLSD_EXECUTION` (auto | eager | static |
cuda-graphs | lean | lean-packed | lean-q8 | lean-rows | lean-fused), else the choice stored with the model
(`execution.json` beside its parts, {"cpu": "lean"}, written by `python -m coolsd.bench.limit --store`), else
auto = cuda-graphs on CUDA, eager elsewhere. It warms every captured shape, falls back to eager when capture fails,
and logs which path runs.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from coolsd.models.lean import LEAN_PATHS
from coolsd.models.static import STATIC_BLOCKS
from coolsd.util.machine import stored_choice

log = logging.getLogger("coolsd")
PATHS = ("eager", "static", "cuda-graphs", *LEAN_PATHS)
ENV_VAR = "COOLSD_EXECUTION"
EXECUTION_FILE = "execution.json"  # {"cpu": "lean", ...}: the path a model folder runs on each device type


@dataclass
class _Graph:
    graph: object  # torch.cuda.CUDAGraph
    cache_ptr: int  # the cache tensor it was captured on
    x: Tensor  # (G, N, D) static inputs, copied into before each replay
    positions: Tensor  # (N,)
    slots: Tensor  # (N,)
    mask: Tensor  # (N, S)
    out: Tensor  # (G, N, D) static output


class CudaGraphs:
    """A static-path call `fn(x (G, N, D), positions (N,), slots (N,), mask (N, S)) -> (G, N, D)` captured
    as one CUDA graph per (rows, block size) and replayed.

    `cache()` returns the (k, v) tensors `fn` writes, (layers, G, h, S, hd). Capturing runs `fn` on
    scratch inputs with the cache saved before and restored after, so a capture in the middle of a
    decode (a shape not warmed at load) leaves the cache as it was. A graph is tied to the cache
    tensor it was captured on; a reallocated cache is captured again.
    """

    def __init__(self, fn: Callable, cache: Callable[[], tuple[Tensor, Tensor]], width: int) -> None:
        self.fn, self.cache, self.width = fn, cache, width
        self.graphs: dict[tuple[int, int], _Graph] = {}
        self.pool = None

    @property
    def rows(self) -> tuple[int, ...]:
        return tuple(sorted({r for r, _ in self.graphs}))

    def capture(self, rows: int, block: int) -> _Graph:
        k, v = self.cache()
        dev, dtype, S = k.device, k.dtype, k.shape[3]
        x = torch.zeros(rows, block, self.width, device=dev, dtype=dtype)
        positions = torch.zeros(block, dtype=torch.long, device=dev)
        slots = torch.arange(S - block, S, device=dev)
        mask = torch.zeros(block, S, dtype=torch.bool, device=dev)
        mask[:, 0] = True
        saved = k.clone(), v.clone()
        side = torch.cuda.Stream(device=dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            for _ in range(2):  # let lazy kernels and workspaces initialise outside the capture
                self.fn(x, positions, slots, mask)
        torch.cuda.current_stream(dev).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = self.fn(x, positions, slots, mask)
        self.pool = graph.pool()
        k.copy_(saved[0])
        v.copy_(saved[1])
        entry = _Graph(graph, k.data_ptr(), x, positions, slots, mask, out)
        self.graphs[(rows, block)] = entry
        return entry

    def __call__(self, x: Tensor, positions: Tensor, slots: Tensor, mask: Tensor) -> Tensor:
        key = (x.shape[0], x.shape[1])
        g = self.graphs.get(key)
        if g is None or g.cache_ptr != self.cache()[0].data_ptr():
            g = self.capture(*key)
        g.x.copy_(x)
        g.positions.copy_(positions)
        g.slots.copy_(slots)
        g.mask.copy_(mask)
        g.graph.replay()
        return g.out.clone()  # the static output is overwritten by the next replay


def make_runner(path: str, fn: Callable, cache: Callable[[], tuple[Tensor, Tensor]], width: int,
                rows: Iterable[int], allocate: Callable[[int], None]) -> tuple[tuple[int, ...], CudaGraphs | None]:
    """(block sizes, runner) for a model on `path`; for "cuda-graphs", `allocate(r)` makes the cache for
    r guidance rows and every block size is captured for it (the warm-up)."""
    if path not in PATHS:
        raise ValueError(f"unknown execution path {path!r}; choose one of {PATHS}")
    if path == "eager" or path in LEAN_PATHS:  # lean: the layer stack runs it (`coolsd.models.lean`); others eager
        return (), None
    if path == "static":
        return STATIC_BLOCKS, None
    runner = CudaGraphs(fn, cache, width)
    for r in rows:
        allocate(r)
        for block in STATIC_BLOCKS:
            runner.capture(r, block)
    return STATIC_BLOCKS, runner


def stored_path(root: str | Path, device: torch.device) -> str | None:
    """The path stored with the model folder `root` for `device`'s type (EXECUTION_FILE; on a CPU this CPU
    model's own entry first, `coolsd.util.machine`), or None when there is no file, no entry or an unknown name
    (the stored choice is advice; a bad one is ignored)."""
    stored = stored_choice(Path(root) / EXECUTION_FILE, torch.device(device).type)
    return stored if stored in PATHS else None


def choose_path(device: torch.device, requested: str | None = None, stored: str | None = None) -> str:
    """The path to run on `device`: `requested`, else $COOLSD_EXECUTION, else `stored` (the model folder's
    choice, see `stored_path`), else auto (cuda-graphs on CUDA, eager elsewhere)."""
    requested = requested or os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if requested == "auto" and stored in PATHS and (stored != "cuda-graphs" or torch.device(device).type == "cuda"):
        requested = stored
    if requested == "auto":
        return "cuda-graphs" if torch.device(device).type == "cuda" else "eager"
    if requested not in PATHS:
        raise ValueError(f"{ENV_VAR} must be auto or one of {PATHS}, got {requested!r}")
    if requested == "cuda-graphs" and torch.device(device).type != "cuda":
        raise ValueError(f"the cuda-graphs path needs a CUDA device, got {device}")
    return requested


def prepare(models: Iterable, path: str | None = None, rows: Iterable[int] = (2,), stored: str | None = None) -> str:
    """Set every model (objects with `use_path(path, rows)`) on one path, warm it, log it; returns the path.

    path: the caller's choice (None: see `choose_path`); stored: the model folder's (`stored_path`).
    rows: guidance rows to capture for (2 with CFG, 1 without); other counts are captured at first use.
    A capture failure logs a warning and leaves every model on the eager path.
    """
    models = [m for m in models if m is not None]
    device = torch.device(models[0].device)
    path = choose_path(device, path, stored)
    rows = tuple(rows)
    t0 = time.perf_counter()
    try:
        for m in models:
            m.use_path(path, rows)
    except Exception as err:  # capture can fail in many ways (ZeroGPU, driver, memory): never fatal
        log.warning("coolsd: %s path failed while warming up (%s: %s); running the eager path instead",
                    path, type(err).__name__, err)
        for m in models:
            m.use_path("eager", rows)
        path = "eager"
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    log.info("coolsd: execution path %s on %s (blocks %s, ready in %.2f s)", path, device,
             STATIC_BLOCKS if path in ("static", "cuda-graphs") else "exact", time.perf_counter() - t0)
    return path
