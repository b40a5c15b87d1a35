"""The three execution paths of the layer stacks, and which one runs.

- "eager": the reference maths in torch, exact shapes, attention over the slots in use; any device.
- "fused": the CPU path (`coolsd.models.fused`): each call of up to 32 rows in one C call of the row kernel on the
  stored weights, fp32 maths; needs AVX2 / FMA and a C compiler (`coolsd.models.rowkernel.available`). Models
  without a fused stack of their own (LlamaGen) run eager.
- "cuda-graphs": every call padded to a block size of `STATIC_BLOCKS`, attention over the whole cache
  (`LayerStack.forward_static`), each (rows, block size) captured once as a CUDA graph at load and replayed.
  Its uncaptured body, "static", runs anywhere and serves the CPU tests of the GPU path; it is not offered.

`prepare(models)` picks the path: the caller's argument, else env `COOLSD_EXECUTION` (auto | eager | fused |
cuda-graphs), else auto = cuda-graphs on CUDA, fused on a CPU where the row kernel runs, eager elsewhere. It warms
every captured shape, falls back to eager (saying why) where a path cannot run, and logs which path runs.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

from coolsd.models import rowkernel
from coolsd.models.static import STATIC_BLOCKS

log = logging.getLogger("coolsd")
FUSED = "fused"
PATHS = ("eager", FUSED, "cuda-graphs")  # the paths offered
STATIC = "static"  # the graphs' body without capture: CPU tests of the GPU path only
ENV_VAR = "COOLSD_EXECUTION"


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
    if path not in (*PATHS, STATIC):
        raise ValueError(f"unknown execution path {path!r}; choose one of {PATHS}")
    if path in ("eager", FUSED):  # fused: the layer stack runs it itself; models without a fused stack run eager
        return (), None
    if path == STATIC:
        return STATIC_BLOCKS, None
    runner = CudaGraphs(fn, cache, width)
    for r in rows:
        allocate(r)
        for block in STATIC_BLOCKS:
            runner.capture(r, block)
    return STATIC_BLOCKS, runner


def choose_path(device: torch.device, requested: str | None = None) -> str:
    """The path to run on `device`: `requested`, else $COOLSD_EXECUTION, else auto (cuda-graphs on CUDA, fused on
    a CPU where the row kernel runs, eager elsewhere). ValueError for an unknown name or cuda-graphs off CUDA."""
    kind = torch.device(device).type
    if requested == STATIC:  # the caller's only (tests of the GPU path on a CPU), never the environment's
        return STATIC
    requested = requested or os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if requested == "auto":
        if kind == "cuda":
            return "cuda-graphs"
        return FUSED if kind == "cpu" and rowkernel.available() else "eager"
    if requested not in PATHS:
        raise ValueError(f"{ENV_VAR} must be auto or one of {PATHS}, got {requested!r}")
    if requested == "cuda-graphs" and kind != "cuda":
        raise ValueError(f"the cuda-graphs path needs a CUDA device, got {device}")
    return requested


def prepare(models: Iterable, path: str | None = None, rows: Iterable[int] = (2,)) -> str:
    """Set every model (objects with `use_path(path, rows)`) on one path, warm it, log it; returns the path.

    path: the caller's choice (None: see `choose_path`). rows: guidance rows to capture for (2 with CFG, 1
    without); other counts are captured at first use. "fused" runs where every model has a fused stack
    (`fused_stack = True`), else eager; a path that fails while warming up logs a warning and leaves every model
    on the eager path.
    """
    models = [m for m in models if m is not None]
    device = torch.device(models[0].device)
    path = choose_path(device, path)
    rows = tuple(rows)
    if path == FUSED and not all(getattr(m, "fused_stack", False) for m in models):
        log.info("coolsd: these models have no fused stack; running the eager path")
        path = "eager"
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
             STATIC_BLOCKS if path in (STATIC, "cuda-graphs") else "exact", time.perf_counter() - t0)
    return path
