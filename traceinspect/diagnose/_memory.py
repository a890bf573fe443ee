"""What the memory rules share: a rank's memory record read once from its tables (analyze/memory.py), byte
formatting, the memory severity scale, and the accumulation code fitted to the run's parallelism."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..analyze.outlook import Outlook, memory_outlook


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
