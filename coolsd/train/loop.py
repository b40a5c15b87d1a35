"""Time-budgeted training loop shared by every stage: tqdm progress, checkpoints, resume, seeds."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch
from tqdm.auto import tqdm


def cosine_lr(base_lr: float, progress: float, warmup: float = 0.03, floor: float = 0.1) -> float:
    """Learning rate at `progress` in [0, 1] of the time budget: linear warm-up, cosine to floor*lr."""
    if progress < warmup:
        return base_lr * max(progress / warmup, 0.01)
    t = min(1.0, (progress - warmup) / (1 - warmup))
    return base_lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))


def resume(name: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer, ckpt: Path,
           eval_fn: Callable[[], dict[str, float]] | None = None) -> dict:
    """Load model, optimizer and torch RNG from `ckpt` when it exists; the loop state {step, elapsed,
    history} (a fresh one otherwise, with the evaluation of the weights it starts from as "initial")."""
    if not ckpt.exists():
        state = {"step": 0, "elapsed": 0.0, "history": []}
        _initial_evaluation(name, model, eval_fn, state)
        return state
    saved = torch.load(ckpt, weights_only=False)
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    torch.set_rng_state(saved["rng"])
    state = saved["state"]
    print(f"[{name}] resumed at step {state['step']} ({state['elapsed']:.0f} s spent)")
    return state


def save_checkpoint(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict, ckpt: Path) -> None:
    """Model, optimizer, loop state and torch RNG to `ckpt`, atomically (written aside, then renamed)."""
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    tmp = ckpt.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "state": state,
                "rng": torch.get_rng_state()}, tmp)
    os.replace(tmp, ckpt)


def update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor, clip: float = 1.0) -> float:
    """One optimiser step on `loss`: zero the gradients, backpropagate, clip the gradient norm of `model`'s
    parameters at `clip`, step; the loss value."""
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return loss.item()


def part_path(args, name: str) -> Path:
    """A trained part: args.out/NAME when this run trained it, else the shipped one in args.assets (fp16 there)."""
    path = args.out / name
    if not path.is_dir():
        path = args.assets / name
        print(f"[train] {name}: {args.out / name} missing, using the shipped {path}")
    return path


def _evaluate(model: torch.nn.Module, eval_fn: Callable[[], dict[str, float]]) -> dict[str, float]:
    model.eval()
    with torch.no_grad():
        return eval_fn()


class _Best:
    """The weights of the best evaluation so far by one metric (lower is better); inert when `key` is None."""

    def __init__(self, key: str | None) -> None:
        self.key, self.value, self.step, self.weights = key, math.inf, None, None

    def offer(self, model: torch.nn.Module, step: int, metrics: dict[str, float]) -> None:
        if self.key is not None and metrics[self.key] < self.value:
            self.value, self.step = metrics[self.key], step
            self.weights = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def restore(self, model: torch.nn.Module, state: dict) -> None:
        if self.weights is not None:
            model.load_state_dict(self.weights)
            state["best"] = {"step": self.step, self.key: self.value}
            tqdm.write(f"[best] step {self.step}: {self.key}={self.value:.4f} (weights kept)")


def _initial_evaluation(name: str, model: torch.nn.Module, eval_fn, state: dict) -> None:
    """A fresh run's evaluation before its first step (a warm start's own score) into state["initial"]."""
    if eval_fn is not None and state["step"] == 0:
        state["initial"] = _evaluate(model, eval_fn)
        tqdm.write(f"[{name}] step 0: " + ", ".join(f"{k}={v:.4f}" for k, v in state["initial"].items()))


def run_budgeted(
    name: str,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    step_fn: Callable[[int], dict[str, float]],
    ckpt: Path,
    budget_s: float,
    base_lr: float,
    eval_fn: Callable[[], dict[str, float]] | None = None,
    eval_every: int = 100,
    ckpt_every_s: float = 180.0,
    keep_best: str | None = None,
) -> dict:
    """Call `step_fn(step)` until `budget_s` seconds of training (summed over resumes) are spent.

    The learning rate follows `cosine_lr` over the fraction of the budget used, so a resumed run continues the same
    schedule. `keep_best`: an eval metric to minimise (e.g. "val_nll"); the model ends with the weights of its best
    evaluation in this process (state["best"] says which step), not its last ones, which a model with
    `save_pretrained` writes beside the checkpoint as folder NAME_last (the checkpoint holds them too, with their
    optimizer, so a resumed run goes on from them; state["last"] has their metrics).
    Returns the final state {step, elapsed, history, final[, initial (before a fresh run's first step), best, last]}.
    """
    if keep_best is not None and eval_fn is None:
        raise ValueError("keep_best needs an eval_fn to rank the weights by")
    state = resume(name, model, optimizer, ckpt, eval_fn)
    bar = tqdm(total=int(budget_s), initial=int(state["elapsed"]), desc=name, unit="s")
    last_save = time.perf_counter()
    best = _Best(keep_best)
    while state["elapsed"] < budget_s:
        t0 = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(base_lr, state["elapsed"] / budget_s)
        model.train()
        logs = step_fn(state["step"])
        state["step"] += 1
        dt = time.perf_counter() - t0
        state["elapsed"] += dt
        bar.update(int(state["elapsed"]) - bar.n)
        bar.set_postfix(step=state["step"], **{k: f"{v:.4f}" for k, v in logs.items()})
        if eval_fn is not None and state["step"] % eval_every == 0:
            metrics = _evaluate(model, eval_fn)
            state["history"].append({"step": state["step"], "elapsed": state["elapsed"], **logs, **metrics})
            tqdm.write(f"[{name}] step {state['step']}: " + ", ".join(f"{k}={v:.4f}" for k, v in metrics.items()))
            best.offer(model, state["step"], metrics)
        if time.perf_counter() - last_save > ckpt_every_s:
            save_checkpoint(model, optimizer, state, ckpt)
            last_save = time.perf_counter()
    bar.close()
    if keep_best is not None:
        state["last"] = _evaluate(model, eval_fn)
        best.offer(model, state["step"], state["last"])
        save_checkpoint(model, optimizer, state, ckpt)  # the last weights, with the optimizer they belong to
        if hasattr(model, "save_pretrained"):
            model.save_pretrained(ckpt.parent / f"{name}_last")
        best.restore(model, state)
    if eval_fn is not None:
        state["final"] = _evaluate(model, eval_fn)
    if keep_best is None:
        save_checkpoint(model, optimizer, state, ckpt)
    return state
