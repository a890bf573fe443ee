"""What the memory rules share: a rank's memory record read once from its tables (analyze/memory.py), byte
formatting, the memory severity scale, and the accumulation code fitted to the run's parallelism."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from ..analyze.memory import predicted_peak


@dataclass(frozen=True)
class RankMemory:
    """One rank's memory as the rules read it (bytes; None where unknown)."""

    steps: pd.DataFrame  # memory_steps rows with events
    capacity: int | None
    peak_allocated: int
    peak_reserved: int | None
    batch: int | None
    accum: int | None
    max_batch: int | None
    budget: float | None  # what the allocator may use: capacity less unseen, over the reserved ratio
    unseen: int
    unseen_recorded: bool
    alloc_conf: str | None
    oom_events: int
    envelope: pd.DataFrame  # memory_scaling rows

    def predict(self, batch: float) -> float | None:
        return predicted_peak(self.envelope, self.batch, batch) if self.batch and len(self.envelope) else None


def rank_memory(ra) -> RankMemory | None:
    t = ra.tables
    if "memory_steps" not in t or "memory_summary" not in t:
        return None
    steps = t["memory_steps"]
    steps = steps[steps["events"] > 0]
    if not len(steps):
        return None
    dev, summ = t["memory_device"].iloc[0], t["memory_summary"].iloc[0]
    reserved = int(steps["peak_reserved"].max())

    def opt_int(v):
        return int(v) if v is not None and not (isinstance(v, float) and math.isnan(v)) and v >= 0 else None

    budget = float(summ["budget"]) if not math.isnan(float(summ["budget"])) else None
    return RankMemory(steps=steps, capacity=opt_int(dev["capacity"]) or None,
                      peak_allocated=int(steps["peak_allocated"].max()),
                      peak_reserved=reserved if reserved >= 0 else None, batch=opt_int(summ["batch_size"]) or None,
                      accum=opt_int(summ["accumulation_steps"]), max_batch=opt_int(summ["max_batch"]),
                      budget=budget, unseen=int(summ["unseen"]), unseen_recorded=bool(summ["unseen_recorded"]),
                      alloc_conf=dev["alloc_conf"] if isinstance(dev["alloc_conf"], str) else None,
                      oom_events=int(dev["oom_events"]), envelope=t.get("memory_scaling", pd.DataFrame()))


def gib(nbytes: float | None) -> str:
    """Bytes in GB (MB below one GB; 1e9 and 1e6, as every byte figure of the report) for a title; exact bytes
    stay in the evidence."""
    if nbytes is None:
        return "?"
    if abs(nbytes) >= 1e9:
        return f"{nbytes / 1e9:.2f} GB"
    return f"{nbytes / 1e6:.1f} MB"


def share_grade(f, config, *, warning: float = 0.05, critical: float | None = None) -> tuple[str, str]:
    """A memory finding's severity by its bytes at stake as a share of the device (``warning``/``critical``
    shares; info below, or where no capacity is known)."""
    ev = f.evidence or {}
    stake, cap = ev.get("bytes_at_stake"), ev.get("capacity_bytes")
    if not stake or not cap:
        return "info", "bytes of peak memory; no device capacity to weigh them against" if stake else \
            "no bytes at stake could be measured"
    share = stake / cap
    head = f"{gib(stake)} of peak memory, {100 * share:.1f} % of the device's {gib(cap)}"
    if critical is not None and share >= critical:
        return "critical", f"{head}: at least {100 * critical:.0f} %"
    if share >= warning:
        return "warning", f"{head}: at least {100 * warning:.0f} %"
    return "info", f"{head}: below {100 * warning:.0f} % of the device"


def accumulation_code(setup, batch: int | None, accum: int | None, new_batch: int | None) -> str:
    """Gradient accumulation that keeps the logical batch with a physical batch of ``new_batch``, fitted to the
    parallelism: DDP's ``no_sync``, FSDP2's ``set_requires_gradient_sync``, or plain accumulation."""
    par = (getattr(setup, "parallelism", None) or "") if setup is not None else ""
    logical = batch * (accum or 1) if batch else None
    if logical and new_batch and logical % new_batch == 0:
        head = (f"# logical batch {logical} = {new_batch} x {logical // new_batch} micro-batches "
                f"(today {batch} x {accum or 1})")
        steps = f"{logical // new_batch}"
    else:
        head = "# a smaller physical batch, the same logical batch: accum_steps = logical_batch // micro_batch"
        steps = "accum_steps"
    if "fsdp" in par:
        sync = ("    model.set_requires_gradient_sync(i == accum - 1)  # FSDP2: reduce-scatter on the last only\n"
                "    ctx = contextlib.nullcontext()\n")
    elif "ddp" in par:
        sync = "    ctx = model.no_sync() if i < accum - 1 else contextlib.nullcontext()  # all-reduce once\n"
    else:
        sync = "    ctx = contextlib.nullcontext()\n"
    return (f"{head}\naccum = {steps}\n"
            "for i, (x, y) in enumerate(micro_batches):\n"
            f"{sync}"
            "    with ctx:\n"
            "        loss = loss_fn(model(x), y) / accum\n"
            "        loss.backward()\n"
            "optimizer.step()\n"
            "optimizer.zero_grad(set_to_none=True)")
