"""Capture launch-bound trios on one CUDA GPU: the same training step run eagerly, as one CUDA graph of the whole
step, and with the report's launch fixes applied as written; the unprofiled step time recorded beside each trace.

Usage: python3 scripts/gpu_step_graph.py OUT_DIR [NAME ...]     (NAME: only these captures)

Two models, each small enough that launching its kernels costs more than running them:

* ``mlp``: 48 blocks of ``Linear(512, 512)`` + ReLU, batch 64, MSE loss;
* ``conv``: 24 blocks of 3x3 ``Conv2d(64, 64)`` + BatchNorm + ReLU on 32 x 32 images, batch 32, cross-entropy.

Three variants of each (``NAME`` = ``{model}_{variant}``):

* ``eager``: ``AdamW`` (its default, ``foreach``), ``zero_grad()`` (gradients set to None), a fresh input each step;
* ``graph``: the whole step (forward, backward, ``AdamW(capturable=True)``) captured once with
  ``torch.cuda.graph`` on static input and target tensors and replayed each step, gradients kept (not set to None)
  between replays, the new batch copied into the static input;
* ``compiled``: the launch fixes as the report writes them: ``torch.compile(model, mode="reduce-overhead")`` (CUDA
  graphs of the forward and the backward) and ``AdamW(fused=True)``; the rest of the step stays eager.

Each capture: 20 warm-up steps, then 30 steps outside the profiler (each CUDA-synchronized; their median is
``step_ms``), then ``traceinspect.capture.profile`` (wait=1, warmup=1, active=5, ``record_shapes=True``), one
gzipped trace into OUT_DIR/NAME. OUT_DIR/truth-graph.json holds, per capture, ``step_ms`` (median),
``step_ms_all`` and the device's name.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import traceinspect.capture as capture  # noqa: E402

DEV = torch.device("cuda")
SCHED = dict(wait=1, warmup=1, active=5)
TRUTH: dict = {}


def mlp() -> tuple[nn.Module, torch.Tensor, torch.Tensor, callable]:
    model = nn.Sequential(*[nn.Sequential(nn.Linear(512, 512), nn.ReLU()) for _ in range(48)])
    return model, torch.randn(64, 512), torch.randn(64, 512), F.mse_loss


def conv() -> tuple[nn.Module, torch.Tensor, torch.Tensor, callable]:
    layers = [nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU()]
    for _ in range(24):
        layers += [nn.Conv2d(64, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers), torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,)), F.cross_entropy


MODELS = {"mlp": mlp, "conv": conv}


class Eager:
    def __init__(self, kind: str, compiled: bool = False) -> None:
        model, self.x, self.y, self.loss_fn = MODELS[kind]()
        self.model = model.to(DEV)
        if compiled:
            self.model = torch.compile(self.model, mode="reduce-overhead")
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=True if compiled else None)

    def step(self) -> None:
        x, y = self.x.to(DEV, non_blocking=True), self.y.to(DEV, non_blocking=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()


class Graph:
    """The whole step as one CUDA graph (torch's "whole network capture" recipe)."""

    def __init__(self, kind: str) -> None:
        model, x, y, self.loss_fn = MODELS[kind]()
        self.model = model.to(DEV)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, capturable=True)
        self.x, self.y = x.to(DEV), y.to(DEV)
        self.host_x, self.host_y = x, y
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.opt.zero_grad(set_to_none=True)
                self.loss_fn(self.model(self.x), self.y).backward()
                self.opt.step()
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        self.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.loss = self.loss_fn(self.model(self.x), self.y)
            self.loss.backward()
            self.opt.step()

    def step(self) -> None:
        self.x.copy_(self.host_x, non_blocking=True)
        self.y.copy_(self.host_y, non_blocking=True)
        self.graph.replay()


def median_step_ms(job, n: int = 30) -> list[float]:
    out = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        job.step()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def run(out: str, name: str) -> None:
    kind, variant = name.split("_", 1)
    job = Graph(kind) if variant == "graph" else Eager(kind, compiled=variant == "compiled")
    for _ in range(20):
        job.step()
    times = median_step_ms(job)
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    batch = int((job.host_x if isinstance(job, Graph) else job.x).shape[0])
    with capture.profile(folder, record_shapes=True, batch_size=batch, verbose=False, **SCHED) as prof:
        for _ in range(sum(SCHED.values()) + 1):
            job.step()
            torch.cuda.synchronize()
            prof.step()
    TRUTH[name] = {"step_ms": statistics.median(times), "step_ms_all": times,
                   "device": torch.cuda.get_device_name()}
    print(f"{name}: {statistics.median(times):.2f} ms a step (median of {len(times)}, outside the profiler)",
          flush=True)


def main() -> None:
    out = sys.argv[1]
    names = sys.argv[2:] or [f"{k}_{v}" for k in MODELS for v in ("eager", "graph", "compiled")]
    os.makedirs(out, exist_ok=True)
    for name in names:
        try:
            run(out, name)
        except Exception as e:  # one capture that fails leaves the others
            print(f"{name}: failed: {type(e).__name__}: {e}", flush=True)
        with open(os.path.join(out, "truth-graph.json"), "w") as f:
            json.dump(TRUTH, f, indent=1)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
