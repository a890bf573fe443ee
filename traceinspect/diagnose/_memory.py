"""What the memory rules share: a rank's memory record read once from its tables (analyze/memory.py), byte
formatting, the memory severity scale, and the accumulation code fitted to the run's parallelism."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import msgspec

import pandas as pd

from ..analyze.outlook import Outlook, memory_outlook
from .units import COUNT


@dataclass(frozen=True)
class RankMemory:
    """One rank's memory as the rules read it (bytes; None where unknown): its steps and its outlook."""

    steps: pd.DataFrame  # memory_steps rows with events
    outlook: Outlook
    alloc_conf: str | None
    oom_events: int

    def __getattr__(self, name):  # the outlook's fields read as the record's own (capacity, batch, max_batch...)
        return getattr(self.__dict__["outlook"], name)

    @property
    def accum(self) -> int | None:
        return self.outlook.accum


def rank_memory(ra, config) -> RankMemory | None:
    o = memory_outlook(ra, config)
    if o is None:
        return None
    steps = ra.tables["memory_steps"]
    dev = ra.tables["memory_device"].iloc[0]
    return RankMemory(steps=steps[steps["events"] > 0], outlook=o,
                      alloc_conf=dev["alloc_conf"] if isinstance(dev["alloc_conf"], str) else None,
                      oom_events=int(dev["oom_events"]))


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


class BatchFit(msgspec.Struct, kw_only=True):
    """Whether a larger physical batch fits, for the rules whose fix is "a larger batch per step" (launch-bound,
    gpu-idle): in their evidence, so that the fix says what the memory analysis knows."""

    memory_recorded: bool  # the trace has the allocator's events
    batch_size: Annotated[int, COUNT] | None  # today's physical batch (docs/memory.md)
    max_batch_predicted: Annotated[int, COUNT] | None  # the largest predicted to fit; null: not known
    inference: bool  # no backward pass and no optimizer: nothing to rescale


def batch_fit(ra, config) -> BatchFit:
    m = rank_memory(ra, config)
    bp = ra.tables.get("backward_passes")
    opt = getattr(getattr(ra, "setup", None), "optimizer", None)
    inference = (bp is None or not len(bp)) and not getattr(opt, "present", False)
    if m is None:
        return BatchFit(memory_recorded=False, batch_size=None, max_batch_predicted=None, inference=inference)
    return BatchFit(memory_recorded=True, batch_size=m.batch, max_batch_predicted=m.max_batch, inference=inference)


def larger_batch_line(fit: BatchFit | None) -> str | None:
    """The "larger batch per step" advice as one comment line, fitted to what memory allows; None where the memory
    analysis predicts that no larger batch fits."""
    why = "more work per kernel" + ("" if fit is not None and fit.inference else " (scale the learning rate)")
    if fit is None or not fit.memory_recorded:
        return (f"# a larger batch per step, where it fits: {why}; a trace recorded with profile_memory=True "
                "tells how large")
    b, top = fit.batch_size, fit.max_batch_predicted
    if b and top:
        if top <= b:
            return None  # the card holds no larger batch: the memory findings say what to do
        return f"# a larger batch per step: up to {top} predicted to fit in memory (today {b}); {why}"
    return f"# a larger batch per step, where it fits (the largest could not be predicted: docs/memory.md); {why}"
