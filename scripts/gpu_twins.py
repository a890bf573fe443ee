"""Capture real twins on one CUDA GPU: a graph-replaying forward pass and its eager twin, a small training step eager,
compiled (``torch.compile``) and compiled with ``mode="reduce-overhead"`` (CUDA graphs), and a single-GPU FSDP2 step.

Usage: python3 scripts/gpu_twins.py OUT_DIR [NAME ...]   (a machine with a CUDA GPU; NAME: only these captures)
Each capture writes one gzipped Chrome trace with ``tensorboard_trace_handler`` into OUT_DIR/NAME: warm-up
iterations first (compilation and graph capture happen there), then ``schedule(wait=1, warmup=2, active=12)``.
"""

from __future__ import annotations

import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

ACTIVE = 12
SCHED = dict(wait=1, warmup=2, active=ACTIVE, repeat=1)
STEPS = 1 + 2 + ACTIVE + 1


def _mlp(width: int, layers: int) -> torch.nn.Module:
    return torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU())
                                 for _ in range(layers)])


def _profile(out: str, name: str, step, warmup_iters: int = 5) -> None:
    for _ in range(warmup_iters):
        step()
    torch.cuda.synchronize()
    t0 = time.time()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=schedule(**SCHED),
                 on_trace_ready=tensorboard_trace_handler(os.path.join(out, name), worker_name=name,
                                                          use_gzip=True)) as prof:
        for _ in range(STEPS):
            step()
            prof.step()
    print(f"{name}: {STEPS} iterations profiled in {time.time() - t0:.1f} s", flush=True)


def graph_pair(out: str, want) -> None:
    """The forward pass of a 64-layer MLP (width 256, batch 64), 4 times a step: replayed as one CUDA graph
    (``graph_replay``) or run eagerly (``graph_eager``, 128 kernel launches a pass)."""
    model = _mlp(256, 64).cuda().eval()
    static_x = torch.randn(64, 256, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        model(static_x)

    def replay():
        for _ in range(4):
            static_x.copy_(torch.randn(64, 256, device="cuda"))
            graph.replay()
        torch.cuda.synchronize()

    def eager():
        with torch.no_grad():
            for _ in range(4):
                static_x.copy_(torch.randn(64, 256, device="cuda"))
                model(static_x)
        torch.cuda.synchronize()

    if want("graph_replay"):
        _profile(out, "graph_replay", replay)
    if want("graph_eager"):
        _profile(out, "graph_eager", eager)


def train_triplet(out: str, want) -> None:
    """A training step of a 16-layer MLP (width 512, batch 32, AdamW with foreach, one loss.item() a step so the
    host waits for the step's end): eager (``train_eager``), ``torch.compile(model)`` (``train_compiled``) and
    ``torch.compile(model, mode="reduce-overhead")`` (``train_graphs``: the compiled graphs replayed as CUDA graphs)."""
    for name, mode in (("train_eager", None), ("train_compiled", "default"), ("train_graphs", "reduce-overhead")):
        if not want(name):
            continue
        torch.manual_seed(0)
        model = _mlp(512, 16).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        fwd = model if mode is None else torch.compile(model, mode=mode)
        x = torch.randn(32, 512, device="cuda")
        y = torch.randn(32, 512, device="cuda")

        def step():
            if mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            loss = torch.nn.functional.mse_loss(fwd(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss.item()

        _profile(out, name, step, warmup_iters=8)


def fsdp2_single(out: str, want) -> None:
    """FSDP2 (``fully_shard`` per block and on the root) at world size 1 with NCCL: the GPU-side annotations of
    FSDP2; NCCL at world size 1 launches no communication kernels."""
    if not want("fsdp2_1gpu"):
        return
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    torch.manual_seed(0)
    model = _mlp(1024, 8).cuda()
    for block in model:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(64, 1024, device="cuda")
    y = torch.randn(64, 1024, device="cuda")

    def step():
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()

    _profile(out, "fsdp2_1gpu", step)
    dist.destroy_process_group()


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "./log/twins"
    only = set(sys.argv[2:])
    want = (lambda n: not only or n in only)
    print(f"# torch {torch.__version__} cuda {torch.version.cuda} device {torch.cuda.get_device_name(0)}", flush=True)
    graph_pair(out, want)
    train_triplet(out, want)
    fsdp2_single(out, want)


if __name__ == "__main__":
    main()
