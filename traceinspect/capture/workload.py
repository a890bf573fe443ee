"""The reference DDP training step traceinspect captures: a "before" and an "after", every fix a knob.

Run one process per rank under torchrun (``traceinspect capture`` does this)::

    torchrun --standalone --nproc-per-node 2 -m traceinspect.capture.workload \\
        --preset baseline --out ./log/profile_ddp --set batch_size=8 --set num_workers=0

Why it exists: the analyzer's findings need traces where the cause is known.
``baseline`` is a correct but naive DDP loop (pageable host->device copies,
synchronous loader, tiny DDP buckets, gradient sync on every micro-batch, fp32,
per-parameter AdamW); ``optimized`` is the same loop with each fix applied
(pinned memory + non_blocking, persistent workers, 25 MB buckets, ``no_sync``
accumulation, no per-micro-batch ``loss.item()``, bf16 autocast, fused AdamW). The GPU-only fixes
(``GPU_ONLY``: autocast, pinning, non_blocking, TF32) stay off on CPU, where they do not pay (bf16
autocast on CPU is slower than fp32). Any single knob can be flipped with
``--set key=value`` to produce a trace that shows exactly one problem.

Runs on CPU (gloo) and CUDA (NCCL, one GPU per rank at ``cuda:LOCAL_RANK``).
One profiler step is one optimizer step, i.e. all its micro-batches.

torch is imported inside functions only, so the config part (presets, knob
parsing) works where torch is missing, e.g. for the CLI's up-front checks.
The knobs and presets are :mod:`~traceinspect.capture.knobs`, the data and model
:mod:`~traceinspect.capture.models` (both re-exported here); this module is the training loop and its CLI.
Imports nothing from traceinspect but :mod:`traceinspect.capture`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import profiling as _capture
from .knobs import (CHOICES, GPU_ONLY, PRESETS, WHY, KnobError, WorkloadConfig, _cuda_available,  # noqa: F401
                    _field_types, applies_on, apply_overrides, knob_table, parse_overrides, preset_config,
                    resolve_auto, validate)
from .models import (SyntheticDataset, _batches, _input_dims, build_grad_scaler, build_loader,  # noqa: F401
                     build_model, build_optimizer)

__all__ = ["WorkloadConfig", "KnobError", "PRESETS", "CHOICES", "preset_config", "parse_overrides",
           "apply_overrides", "knob_table", "run", "main"]


# --------------------------------------------------------------------------- the run


def _init_distributed(cuda: bool) -> tuple[int, int, int, str]:
    """(rank, world_size, local_rank, backend); a 1-rank group when not launched by torchrun."""
    import torch.distributed as dist

    backend = "nccl" if cuda else "gloo"
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if cuda:
            import torch

            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend)
    else:
        local_rank = 0
        if cuda:
            import torch

            torch.cuda.set_device(0)
        fd, store = tempfile.mkstemp(prefix="traceinspect-store-")
        os.close(fd)
        dist.init_process_group(backend, init_method=f"file://{store}", rank=0, world_size=1)
    return dist.get_rank(), dist.get_world_size(), local_rank, backend


def run(cfg: WorkloadConfig, out: str, *, preset: str | None = None, wait: int = 1, warmup: int = 1,
        active: int = 3, repeat: int = 1, skip_first: int = 0, steps: int = 0, gzip: bool = True,
        record_shapes: bool = False, profile_memory: bool = False, with_stack: bool = False,
        quiet: bool = False) -> dict[str, Any]:
    """Train ``steps`` optimizer steps of ``cfg`` under :func:`traceinspect.capture.profile`.

    ``steps=0`` runs exactly what the schedule needs plus one spare step. Must be
    called in every rank's process (torchrun); returns a small summary dict.

    Teardown is explicit: everything that holds the process group or the
    profiler (DDP's reducer, the loader, the torch profiler) is released inside
    :func:`_train` and garbage-collected, then the ranks meet at a barrier and
    destroy the group. Rarely (about 1 run in 15-40 on a loaded 2-core box),
    torch 2.13 CPU runs died at interpreter exit with "terminate called without
    an active exception" (SIGABRT) after everything was written; the entry
    point therefore also leaves with ``os._exit`` (see the end of this file).
    """
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    cfg = resolve_auto(validate(cfg), cuda)
    need = _capture.required_steps(wait, warmup, active, repeat, skip_first)
    total = steps or need + 1
    # check the folder before the process group so a typo fails fast on every rank
    _capture._check_writable(Path(out))
    rank, world, local_rank, backend = _init_distributed(cuda)
    finished = False
    try:
        summary = _train(cfg, out, rank=rank, world=world, local_rank=local_rank, backend=backend,
                         preset=preset, total=total,
                         profile_kwargs=dict(wait=wait, warmup=warmup, active=active, repeat=repeat,
                                             skip_first=skip_first, record_shapes=record_shapes,
                                             profile_memory=profile_memory, with_stack=with_stack,
                                             gzip=gzip, verbose=not quiet),
                         quiet=quiet)
        finished = True
    finally:
        gc.collect()
        if finished and world > 1:
            dist.barrier(device_ids=[local_rank]) if backend == "nccl" else dist.barrier()
        dist.destroy_process_group()
    if rank == 0 and not quiet:
        times = summary["step_times_s"]
        tail = times[-active:] if len(times) >= active else times
        print(f"traceinspect.capture.workload: rank 0 ran {total} steps ({cfg.model}, {backend}, world {world}); "
              f"mean of last {len(tail)}: {1000 * sum(tail) / len(tail):.1f} ms/step", flush=True)
    return summary


def _train(cfg: WorkloadConfig, out: str, *, rank: int, world: int, local_rank: int, backend: str,
           preset: str | None, total: int, profile_kwargs: dict[str, Any], quiet: bool) -> dict[str, Any]:
    """Build loader/model/optimizer, run ``total`` profiled steps; all of it is freed on return."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")

    def note(msg: str) -> None:
        if rank == 0 and not quiet:
            print(f"traceinspect.capture.workload: {msg}", file=sys.stderr, flush=True)

    if cuda:
        torch.set_float32_matmul_precision("high" if cfg.tf32 else "highest")
    elif cfg.tf32:
        note("tf32 has no effect on CPU")
    if cfg.pin_memory and not cuda:
        note("pin_memory has no effect without CUDA; loading pageable batches")
    loader, sampler = build_loader(cfg, rank, world, total * cfg.accum_steps, cuda)
    model = build_model(cfg).to(device)
    ddp = DDP(model, device_ids=[local_rank] if cuda else None, bucket_cap_mb=cfg.bucket_cap_mb,
              gradient_as_bucket_view=cfg.gradient_as_bucket_view, static_graph=cfg.static_graph,
              find_unused_parameters=cfg.find_unused_parameters)
    opt = build_optimizer(cfg, ddp.parameters())
    # torch.compile wraps the DDP module (DDP's own hooks and no_sync stay on ``ddp``); it compiles in the first
    # steps, so profile after them (wait + warmup of 3 or more)
    forward = ddp if cfg.compile == "none" else torch.compile(ddp, mode=cfg.compile)
    scaler = build_grad_scaler(cfg, device.type, note)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.amp)
    workload_meta = {"preset": preset, "device": str(device), "backend": backend, "steps": total,
                     **dataclasses.asdict(cfg)}

    batches = _batches(loader, sampler)
    step_times: list[float] = []
    kept: list = []  # what keep_outputs holds on to
    try:
        with _capture.profile(out, dataloader=loader, model=ddp, accumulation_steps=cfg.accum_steps,
                              no_sync=cfg.no_sync, amp_dtype=amp_dtype,
                              grad_scaler=scaler if scaler is not None else False,
                              workload=workload_meta, probe_loader=cfg.probe_loader, **profile_kwargs) as prof:
            for _ in range(total):
                t0 = time.perf_counter()
                _train_step(cfg, ddp, opt, scaler, batches, device, amp_dtype, F, forward, kept)
                prof.step()
                step_times.append(time.perf_counter() - t0)
    finally:
        batches.close()  # shuts the loader's iterator (and its worker processes) down now
    if cuda:
        torch.cuda.synchronize(device)
    return {"rank": rank, "world_size": world, "files": [str(p) for p in prof.files],
            "step_times_s": step_times}


def _train_step(cfg, ddp, opt, scaler, batches, device, amp_dtype, F, forward, kept: list) -> None:
    """One optimizer step: ``accum_steps`` micro-batches, then clip + step + zero_grad."""
    import torch

    for micro in range(cfg.accum_steps):
        x, y = next(batches)
        x = x.to(device, non_blocking=cfg.non_blocking)
        y = y.to(device, non_blocking=cfg.non_blocking)
        skip_sync = cfg.no_sync and micro < cfg.accum_steps - 1
        with ddp.no_sync() if skip_sync else contextlib.nullcontext():
            autocast = (torch.autocast(device.type, dtype=amp_dtype) if amp_dtype is not None
                        else contextlib.nullcontext())
            with autocast:
                out = forward(x)
                loss = F.cross_entropy(out.float(), y) / cfg.accum_steps
            if cfg.keep_outputs:  # the leak the knob plants: outputs kept across steps, still attached
                kept.append(out)
            (scaler.scale(loss) if scaler is not None else loss).backward()
        if cfg.sync_loss:
            loss.item()
    if scaler is not None and cfg.clip_grad:
        scaler.unscale_(opt)
    if cfg.clip_grad:
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), cfg.clip_grad,
                                       foreach=cfg.optimizer_impl != "single")
    if scaler is not None:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
    opt.zero_grad(set_to_none=cfg.zero_grad_set_to_none)


# --------------------------------------------------------------------------- entry


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m traceinspect.capture.workload",
        description="One rank of the reference DDP workload, profiled (launch with torchrun).",
        epilog="Knobs (--set key=value):\n" + "\n".join(
            f"  {n} ({t}, default {d!r}): {c}" for n, t, d, c in knob_table()),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="optimized", choices=sorted(PRESETS), help="starting config")
    p.add_argument("--out", default="./log/profile_ddp", help="trace folder (default ./log/profile_ddp)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one knob; repeatable")
    p.add_argument("--model", choices=CHOICES["model"], help="shortcut for --set model=...")
    p.add_argument("--steps", type=int, default=0, help="optimizer steps to run (0 = what the schedule needs + 1)")
    p.add_argument("--wait", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--active", type=int, default=3)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--skip-first", type=int, default=0)
    p.add_argument("--no-gzip", action="store_true", help="write plain .json traces")
    p.add_argument("--record-shapes", action="store_true")
    p.add_argument("--profile-memory", action="store_true")
    p.add_argument("--with-stack", action="store_true")
    p.add_argument("--show-config", action="store_true", help="print the resolved config as JSON and exit")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    return p


def config_from_args(preset: str, overrides: list[str], model: str | None = None, *,
                     cuda: bool | None = None) -> WorkloadConfig:
    """Preset + ``--model`` + ``--set`` pairs -> validated config (raises KnobError).

    ``cuda`` picks the device-dependent preset values; None asks torch. Passing
    a bool keeps torch unimported, which is how the CLI checks knobs instantly.
    """
    values = parse_overrides(overrides)
    if model is not None:
        values.setdefault("model", model)
    return apply_overrides(preset_config(preset, cuda=cuda), values)


def main(argv: list[str] | None = None) -> int:
    """Per-rank entry point; returns the exit code (0 ok, 2 bad use, 1 failure)."""
    args = build_arg_parser().parse_args(argv)
    try:
        cfg = config_from_args(args.preset, args.overrides, args.model)
        if args.show_config:
            print(json.dumps(dataclasses.asdict(resolve_auto(cfg, _cuda_available())), indent=2))
            return 0
        if args.steps < 0:
            raise KnobError(f"--steps must be >= 0 (got {args.steps})")
        run(cfg, args.out, preset=args.preset, wait=args.wait, warmup=args.warmup, active=args.active,
            repeat=args.repeat, skip_first=args.skip_first, steps=args.steps, gzip=not args.no_gzip,
            record_shapes=args.record_shapes, profile_memory=args.profile_memory,
            with_stack=args.with_stack, quiet=args.quiet)
    except (KnobError, _capture.CaptureError) as e:
        rank = os.environ.get("RANK", "0")
        print(f"traceinspect: error (rank {rank}): {e}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    _code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is written and torn down by now; skipping interpreter and C++ static
    # teardown avoids a rare exit-time abort in torch (see run()), which torchrun would
    # report as a failed rank although the traces are complete.
    os._exit(_code)
