"""Fixes fitted to the run: each rule's fix is rendered from the rank's ``Setup`` (analyze/setup.py) and the
finding's evidence, never from a template that contradicts the run.

What every fix here keeps (docs/setup.md; tests/diagnose/test_fix_fits_setup.py holds each fixture and public
trace to it):

- the optimizer named is the run's own class; no ``fused=True`` for a run already fused, no optimizer advice
  where no optimizer step ran;
- nothing already on: no ``torch.compile(model)`` for a compiled run, no CUDA graphs for a program that replays
  them, no ``pin_memory`` where the copies are already pinned or on CPU runs;
- no more DataLoader workers than the cores the capture recorded;
- no DDP advice where DDP is not used;
- a compiled or graph-replaying program gets advice about what is left (the host work between replays, a bigger
  batch, ``mode="reduce-overhead"`` where it is not used yet);
- a comment paragraph of several lines is written in lines of at most 76 characters, by the rule that knows it
  is one paragraph: an 80-column report shows a fix after a 4-column indent and wraps a longer line on its own,
  which would leave a short line inside the paragraph.

A rank without a setup (its analysis failed) gets the fix as before: nothing is known to contradict.
"""

from __future__ import annotations

# torch.optim classes with a fused implementation (torch >= 2.4 on CPU too).
FUSED_CLASSES = {"Adam", "AdamW", "SGD", "Adagrad"}


def setup_of(report, rank: int | None):
    """The ``Setup`` of rank ``rank`` of the report, or None."""
    for ra in getattr(report, "ranks", []):
        if ra.rank == rank:
            return getattr(ra, "setup", None)
    return None


def _compiled(setup) -> bool:
    return bool(setup is not None and setup.compile.compiled)


def _graphs(setup) -> bool:
    return bool(setup is not None and (setup.graph_launches > 0 or setup.compile.mode == "reduce-overhead"))


def fused_optimizer_line(setup) -> str | None:
    """``torch.optim.<Class>(params, fused=True)`` for the run's own optimizer, where it has a fused form and is
    not fused yet; None otherwise (no optimizer step, fused already, a class without one, or not known)."""
    if setup is None or not setup.optimizer.present or setup.optimizer.fused is not False:
        return None
    name = setup.optimizer.name
    if name not in FUSED_CLASSES:
        return None
    return f"opt = torch.optim.{name}(model.parameters(), lr=lr, fused=True)   # one kernel for all parameters"


def launch_fix(setup, default: str, fit=None) -> str:
    """Fewer, larger launches, less what the program already does; a larger batch only as far as the memory
    analysis says it fits (``fit``: ``_memory.BatchFit``)."""
    from ._memory import larger_batch_line

    batch = larger_batch_line(fit)
    if setup is None:
        return f"{default}\n{batch}" if batch else default
    lines = []
    if _graphs(setup):
        lines.append("# the program already replays CUDA/HIP graphs: what is left is the host work between replays")
        lines.append("# keep Python, data handling and syncs out of the replayed step; replay a bigger batch per graph")
    elif _compiled(setup):
        lines.append('model = torch.compile(model, mode="reduce-overhead")   # already compiled: add CUDA graphs')
    else:
        passes = "the forward" if getattr(fit, "inference", False) else "forward and backward"
        lines.append(f'model = torch.compile(model, mode="reduce-overhead")   # CUDA graphs: {passes} replayed')
    if not _graphs(setup) and batch:
        lines.append(batch)
    opt = fused_optimizer_line(setup)
    if opt:  # its own fix: launch-bound's claim leaves the optimizer out (optimizer-not-fused claims it)
        lines.append("# the graphs leave the optimizer step on the CPU: fuse it too")
        lines.append(opt)
    return "\n".join(lines)


def loader_pinned(setup) -> bool:
    """The batches already reach the GPU from pinned memory (or there is no GPU to pin for)."""
    if setup is None:
        return False
    if setup.device == "cpu" or setup.loader.pin_memory is True:
        return True
    c = setup.copies
    return bool(c.h2d_pinned_count and not c.h2d_pageable_count)


def loader_workers(now, cpu_count, device: str | None = None) -> str | None:
    """The ``num_workers=`` argument to advise: twice the workers there are (8 without a count), never more than
    the cores the capture recorded; None where the workers already use every core. The rule of thumb is per GPU
    on a GPU run, per training process on a CPU-only one (``device`` "cpu")."""
    has_now = isinstance(now, int) and not isinstance(now, bool)
    want = 2 * now if has_now and now > 0 else 8
    per = "spare CPU cores per training process" if device == "cpu" else "CPU cores per GPU"
    note = f"   # now {now}" if has_now and now > 0 else f"   # ~ {per}" + (
        " (now 0: batches made in the loop)" if has_now and now == 0 else "")
    if isinstance(cpu_count, int) and cpu_count > 0:
        cap = max(cpu_count - 1, 1)  # one core stays with the training loop
        if has_now and now >= cap:
            return None
        if want > cap:
            want, note = cap, f"   # {cpu_count} cores: one stays with the training loop" + (
                f" (now {now})" if has_now else "")
    return f"num_workers={want},{note}"


def fit_loader_fix(setup, lines: list[str], now) -> list[str]:
    """The DataLoader lines with only what the run lacks: workers within the cores, ``persistent_workers`` where
    not on, ``pin_memory`` only for a GPU run whose copies are not pinned yet."""
    if setup is None:
        return lines
    workers = loader_workers(now, setup.cpu_count, setup.device)
    first = f"loader = DataLoader(dataset, batch_size=..., {workers}" if workers else \
        f"loader = DataLoader(dataset, batch_size=...,   # the workers already use the {setup.cpu_count} cores"
    rest = ["persistent_workers=True"] if setup.loader.persistent_workers is not True else []
    rest.append("prefetch_factor=4")
    if not loader_pinned(setup):
        rest.append("pin_memory=True")
    return [first, "                    " + ", ".join(rest) + ")"] + lines[2:]


def pinned_copy_fix(setup, default: str) -> str:
    """host-sync's pageable-copy fix: pinning only where the host-to-device copies are not pinned yet; else the
    blocking copies are device-to-host reads, which a pinned buffer and ``non_blocking=True`` make asynchronous."""
    if setup is None or not loader_pinned(setup):
        return default
    return ("# the host-to-device copies are already pinned: the blocking ones are device-to-host reads\n"
            "host = torch.empty(shape, dtype=dtype, pin_memory=True)   # once\n"
            "host.copy_(t, non_blocking=True)   # read it after an event, or every N steps")


def kinds_of(setup) -> tuple[str, ...]:
    """The strategies the setup record names (``parallelism``: analyze/strategy.py's kinds joined by "+")."""
    p = getattr(setup, "parallelism", None)
    return tuple(p.split("+")) if isinstance(p, str) and p != "none" else ()


def is_ddp(setup) -> bool:
    return setup is None or "ddp" in kinds_of(setup)


def is_fsdp(setup) -> bool:
    return any(k.startswith("fsdp") for k in kinds_of(setup))


def comm_fix(setup, default: str) -> str:
    """Communication advice for the wrapper the run uses: DDP's buckets only under DDP."""
    if is_ddp(setup):
        return default
    if is_fsdp(setup):
        return ("# FSDP: overlap the all-gathers and reduce-scatters with compute\n"
                "fully_shard(block, reshard_after_forward=False)   # fewer all-gathers for the blocks that fit\n"
                "model.set_modules_to_forward_prefetch([...]); model.set_modules_to_backward_prefetch([...])")
    return ("# the collectives are not DDP's: overlap them with compute\n"
            "# (async_op=True, wait just before use)")


def accumulation_fix(setup, default: str) -> str:
    """Skipping the gradient sync of the accumulation micro-batches, in the wrapper the run uses."""
    if is_ddp(setup):
        return default
    if is_fsdp(setup):
        return ("# FSDP2: reduce gradients only on the last micro-batch\n"
                "model.set_requires_gradient_sync(is_last_micro_batch)")
    return "# all-reduce the accumulated gradients once, after the last micro-batch"


def cpu_loader_fix(setup, default: str) -> str:
    """A CPU run's DataLoader: workers within the recorded cores (one stays with the training loop)."""
    if setup is None or not isinstance(setup.cpu_count, int):
        return default
    workers = loader_workers(setup.loader.num_workers, setup.cpu_count, "cpu")
    if workers is None:
        return (f"# the workers already use the {setup.cpu_count} cores: fewer or cheaper samples per batch\n"
                "# keep __getitem__ cheap: decode / augment ahead of time")
    return default.replace("num_workers=4,   # leave cores for the training processes", workers.split("   #")[0].rstrip(",")
                           + ",   # leave cores for the training processes")


def first_use_fix() -> str:
    return ("# the idle time is a first-use launch (module load / JIT) in the profiled steps: profile after warm-up\n"
            "torch.profiler.schedule(skip_first=10, wait=1, warmup=1, active=3)")
