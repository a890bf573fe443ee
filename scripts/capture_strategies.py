"""Capture real CPU (gloo) traces of the parallel strategies beyond DDP: FSDP2, tensor parallel, pipeline parallel.

One process per rank under torchrun, e.g.::

    torchrun --standalone --nproc-per-node 2 scripts/capture_strategies.py --strategy fsdp2 --out fixtures/x

Strategies (small models, so each trace stays small):

* ``fsdp2``: an MLP of ``--layers`` Linear+ReLU blocks, ``fully_shard`` on every block and on the root, AdamW.
  Knobs: ``--reshard-after-forward {true,false}``, ``--forward-prefetch {on,off}`` (explicit
  ``set_modules_to_forward_prefetch`` of the next block), ``--accumulation K`` (K micro-batches of ``--batch`` rows
  per optimizer step, each loss divided by K) with ``--no-sync {on,off}`` (``set_requires_gradient_sync(False)`` on
  every micro-batch but the last: no reduce-scatter in their backward passes).
* ``tp``: a two-layer MLP parallelized with ``ColwiseParallel`` / ``RowwiseParallel`` over a 1-D device mesh
  (``--tp-plan colwise-replicate``: both layers ``ColwiseParallel(output_layouts=Replicate())``, an all-gather after
  each layer instead of one all-reduce).
* ``pp``: an MLP cut into one stage per rank (``PipelineStage``), ``--schedule {1f1b,gpipe}`` over
  ``--microbatches`` micro-batches.

The profiler schedule is ``wait=1 warmup=1 active=--active`` (one file per rank and window, ``--rounds`` windows),
shapes recorded so gloo's collectives carry sizes. ``--twin OPTION=VALUE --twin-out DIR`` builds a second run with
that one option changed and captures it in the same job, its windows alternating with the first run's, so a
one-knob pair sees the same machine load (a shared machine's load drifts more between jobs than any knob here). What the run is (strategy, knobs, mesh) is written into every trace under
``traceinspect.extra.strategy``. The loop runs ``wait + warmup + active`` steps, plus one so the window closes.
"""

from __future__ import annotations

import argparse
import sys
import warnings
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

from traceinspect.capture import profile  # noqa: E402


def _mlp(width: int, layers: int) -> nn.Sequential:
    blocks = [nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(layers)]
    return nn.Sequential(*blocks)


def _batch(args, rank: int, step: int):
    if rank == args.slow_rank and args.slow_ms > 0:  # a slow input pipeline on one rank: the straggler case
        time.sleep(args.slow_ms / 1000.0)
    g = torch.Generator().manual_seed(1000 * step + (0 if args.strategy in ("tp", "pp") else rank))
    x = torch.randn(args.batch, args.width, generator=g)
    y = torch.randn(args.batch, args.width, generator=g)
    return x, y


class _Batches(torch.utils.data.Dataset):
    """``--loader``: the batches of ``_batch`` (the slow rank's sleep included) served by a DataLoader, so the
    data step is the DataLoader's ``__next__`` in the trace, as in a real input pipeline."""

    def __init__(self, args, rank: int):
        self.args, self.rank = args, rank

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int):
        return _batch(self.args, self.rank, i)


def _train_step(args, rank: int, model: nn.Module, opt, sync=None):
    """One training step of a model that runs whole on every rank (FSDP2, tensor parallel): ``--accumulation``
    micro-batches of forward, MSE loss (divided by their count) and backward, then the optimizer step. ``sync(last)``,
    where given, runs before each micro-batch (``last``: it is the step's last one)."""
    batches = iter(torch.utils.data.DataLoader(_Batches(args, rank), batch_size=None, num_workers=0)) \
        if args.loader else None
    k = max(1, args.accumulation)

    def step(i: int) -> None:
        for j in range(k):
            if sync is not None:
                sync(j == k - 1)
            x, y = next(batches) if batches is not None else _batch(args, rank, i * k + j if k > 1 else i)
            loss = nn.functional.mse_loss(model(x), y) / k
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _fsdp2(args, rank: int, ws: int):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (ws,), mesh_dim_names=("dp",))
    model = _mlp(args.width, args.layers)
    raf = args.reshard_after_forward == "true"
    for block in model:
        fully_shard(block, mesh=mesh, reshard_after_forward=raf)
    fully_shard(model, mesh=mesh, reshard_after_forward=raf)
    if args.forward_prefetch == "on":
        for cur, nxt in zip(model[:-1], model[1:]):
            cur.set_modules_to_forward_prefetch([nxt])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    described = {"reshard_after_forward": raf, "forward_prefetch": args.forward_prefetch == "on", "mesh": {"dp": ws},
                 "layers": args.layers, "accumulation": args.accumulation, "no_sync": args.no_sync == "on"}
    # gradient accumulation without communication: reduce-scatter only in the last micro-batch's backward
    sync = model.set_requires_gradient_sync if args.no_sync == "on" else None
    return _train_step(args, rank, model, opt, sync), described


def _tp(args, rank: int, ws: int):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from torch.distributed.tensor import Replicate

    mesh = init_device_mesh("cpu", (ws,), mesh_dim_names=("tp",))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(args.width, 4 * args.width), nn.ReLU(), nn.Linear(4 * args.width, args.width))
    if args.tp_plan == "colwise-replicate":  # every layer's output gathered whole: one more redistribution each
        plan = {"0": ColwiseParallel(output_layouts=Replicate()), "2": ColwiseParallel(output_layouts=Replicate())}
        names = {"0": "ColwiseParallel(output_layouts=Replicate())", "2": "ColwiseParallel(output_layouts=Replicate())"}
    else:  # Megatron's pairing: one all-reduce in forward, one in backward
        plan, names = {"0": ColwiseParallel(), "2": RowwiseParallel()}, {"0": "ColwiseParallel", "2": "RowwiseParallel"}
    parallelize_module(model, mesh, plan)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    described = {"mesh": {"tp": ws}, "plan": names}
    return _train_step(args, rank, model, opt), described


def _pp(args, rank: int, ws: int):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    torch.manual_seed(0)
    per = max(1, args.layers // ws)
    stage_mod = _mlp(args.width, per)
    stage = PipelineStage(stage_mod, rank, ws, torch.device("cpu"))
    cls = Schedule1F1B if args.schedule == "1f1b" else ScheduleGPipe
    sched = cls(stage, n_microbatches=args.microbatches, loss_fn=nn.functional.mse_loss)
    opt = torch.optim.AdamW(stage_mod.parameters(), lr=1e-3)

    def step(i: int) -> None:
        x, y = _batch(args, rank, i)
        if rank == 0:
            sched.step(x)
        elif rank == ws - 1:
            sched.step(target=y, losses=[])
        else:
            sched.step()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, {"stages": ws, "stage": rank, "schedule": args.schedule, "microbatches": args.microbatches,
                  "layers_per_stage": per}


BUILDERS = {"fsdp2": _fsdp2, "tp": _tp, "pp": _pp}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--strategy", choices=sorted(BUILDERS), required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--active", type=int, default=6)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--reshard-after-forward", choices=("true", "false"), default="true")
    p.add_argument("--forward-prefetch", choices=("on", "off"), default="off")
    p.add_argument("--accumulation", type=int, default=1, help="fsdp2: micro-batches per optimizer step")
    p.add_argument("--no-sync", choices=("on", "off"), default="off",
                   help="fsdp2: set_requires_gradient_sync(False) on every micro-batch but the last")
    p.add_argument("--schedule", choices=("1f1b", "gpipe"), default="1f1b")
    p.add_argument("--microbatches", type=int, default=4, help="pp: n_microbatches of the schedule")
    p.add_argument("--tp-plan", choices=("colwise-rowwise", "colwise-replicate"), default="colwise-rowwise",
                   help="tp: ColwiseParallel + RowwiseParallel, or both ColwiseParallel with a replicated output")
    p.add_argument("--slow-rank", type=int, default=-1, help="this rank sleeps --slow-ms before each batch")
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--loader", action="store_true", help="batches from a DataLoader (the sleep in its __getitem__)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--twin", metavar="OPTION=VALUE",
                   help="also capture the run with this one option changed (e.g. microbatches=8, schedule=gpipe, "
                        "tp_plan=colwise-replicate) into --twin-out, alternating windows with the first run so "
                        "both see the same machine load")
    p.add_argument("--twin-out")
    p.add_argument("--rounds", type=int, default=1, help="windows per run (alternating with the twin's)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, ws = dist.get_rank(), dist.get_world_size()
    runs = [(args, args.out)]
    if args.twin:
        if not args.twin_out:
            p.error("--twin needs --twin-out")
        knob, _, value = args.twin.partition("=")
        knob = knob.replace("-", "_")
        if not hasattr(args, knob):
            p.error(f"--twin: no option {knob}")
        kind = type(getattr(args, knob))
        runs.append((argparse.Namespace(**{**vars(args), knob: kind(value)}), args.twin_out))
    built = [(BUILDERS[a.strategy](a, rank, ws), a, out) for a, out in runs]
    # a later window's profiler counts only its own steps and would warn that it saw too few
    warnings.filterwarnings("ignore", message="the loop called prof.step")
    wait, warmup = 1, 1
    i = 0
    for r in range(args.rounds):
        for (step, described), a, out in built:
            extra = {"strategy": {"name": a.strategy, "world_size": ws, **described},
                     "slow": {"rank": a.slow_rank, "ms": a.slow_ms} if a.slow_ms > 0 else None,
                     "torch": torch.__version__, "batch": a.batch, "width": a.width, "loader": a.loader,
                     "twin": {"option": args.twin, "round": r, "rounds": args.rounds} if args.twin else None}
            # ProfilerStep#N numbers the job's training steps: a later window of a folder continues its numbering
            # (as one process's windows do), so the folder reads as one run
            with profile(out, wait=wait, warmup=warmup, active=a.active, skip_first=i, record_shapes=True,
                         extra=extra, verbose=rank == 0, strict=i == 0) as prof:  # it counts its own steps
                prof.profiler.step_num = i
                for _ in range(wait + warmup + a.active + 1):
                    step(i)
                    prof.step()
                    i += 1
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
