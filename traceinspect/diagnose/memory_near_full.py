"""memory-near-full: the step's peak memory reaches most of the device (the out-of-memory risk).

**Detects** a rank whose largest peak *reserved* memory over its steps (the caching allocator's hold on the device,
``[memory]`` events: docs/memory.md) is at least ``memory_near_full_share`` of the device's memory
(``deviceProperties[].totalGlobalMem``), or whose trace records an ``[OutOfMemory]`` event (an allocation failed).

**Condition**: ``peak_reserved >= memory_near_full_share x capacity`` (90 %), or an ``[OutOfMemory]`` event.
Critical at ``memory_near_full_critical_share`` (97 %) or with an ``[OutOfMemory]`` event; warning otherwise. A
longer sequence, a larger batch or fragmentation then runs the card out of memory, and a job that survives pays
for the allocator's ``cudaFree``/``cudaMalloc`` retries.

**Claim**: bytes of peak memory (``bytes_at_stake``): what halving the physical batch would take off the peak,
predicted from the trace (the activations that scale with the batch; docs/memory.md), null where the batch is not
recorded. No time.

**Fix**, fitted to the run: a smaller physical batch with gradient accumulation that keeps the logical batch
(``no_sync`` under DDP, ``set_requires_gradient_sync`` under FSDP2), activation checkpointing of the largest
blocks, bf16 autocast where the run is fp32.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ._memory import accumulation_code, gib, rank_memory
from ._rule import Claim, Needs, PerRank, RankHit, Rule
from .units import BYTES, COUNT, Share


class RankEvidence(RankHit, kw_only=True):
    peak_reserved_bytes: Annotated[int, BYTES] | None
    peak_allocated_bytes: Annotated[int, BYTES]
    capacity_bytes: Annotated[int, BYTES]
    share: Share  # of the device: the peak reserved (allocated where unknown) over the capacity
    oom_events: Annotated[int, COUNT]
    batch_size: Annotated[int, COUNT] | None
    accumulation_steps: Annotated[int, COUNT] | None
    half_batch_peak_bytes: Annotated[int, BYTES] | None  # predicted peak allocated at half the physical batch


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    bytes_at_stake: Annotated[int, BYTES] | None
    capacity_bytes: Annotated[int, BYTES]
    threshold_share: Share
    critical_share: Share
    FIX_ONLY = ("amp", "setup_parallelism")
    amp: str | None = None
    setup_parallelism: str | None = None


def _rank(ra, config, report):
    m = rank_memory(ra, config)
    if m is None or not m.capacity:
        return None
    held = m.peak_reserved if m.peak_reserved is not None else m.peak_allocated
    share = held / m.capacity
    if share < config.memory_near_full_share and not m.oom_events:
        return None
    half = m.predict(m.batch / 2) if m.batch and m.batch >= 2 else None
    return RankEvidence(rank=ra.rank, steps=[int(s) for s in m.steps["step"]], peak_reserved_bytes=m.peak_reserved,
                        peak_allocated_bytes=m.peak_allocated, capacity_bytes=m.capacity, share=share,
                        oom_events=m.oom_events, batch_size=m.batch, accumulation_steps=m.accum,
                        half_batch_peak_bytes=int(half) if half is not None else None)


def _summary(hits, w, report, config):
    e = w.ev
    stake = (e.peak_allocated_bytes - e.half_batch_peak_bytes) if e.half_batch_peak_bytes is not None else None
    setup = getattr(w.ra, "setup", None)
    oom = f", {e.oom_events} allocation(s) failed" if e.oom_events else ""
    title = (f"Peak memory {gib(e.peak_reserved_bytes or e.peak_allocated_bytes)} of the device's "
             f"{gib(e.capacity_bytes)} ({100 * e.share:.0f} %, rank {e.rank}){oom}")
    ev = Evidence(per_rank=[h.ev for h in hits], bytes_at_stake=stake, capacity_bytes=e.capacity_bytes,
                  threshold_share=config.memory_near_full_share,
                  critical_share=config.memory_near_full_critical_share,
                  amp=getattr(setup, "amp_dtype", None), setup_parallelism=getattr(setup, "parallelism", None))
    return ev, title, None


def _grade(f, config):
    ev = f.evidence or {}
    worst = max(ev.get("per_rank") or [{}], key=lambda r: r.get("share") or 0)
    share, oom = worst.get("share") or 0.0, worst.get("oom_events") or 0
    head = f"peak at {100 * share:.0f} % of the device"
    if oom:
        return "critical", f"{head}, and {oom} allocation(s) failed ([OutOfMemory])"
    if share >= config.memory_near_full_critical_share:
        return "critical", f"{head}: at least {100 * config.memory_near_full_critical_share:.0f} %"
    return "warning", f"{head}: at least {100 * config.memory_near_full_share:.0f} %"


def _fix(ev, setup=None) -> str:
    worst = max(ev.per_rank, key=lambda r: r.share)
    b = worst.batch_size
    new = b // 2 if b and b >= 2 else None
    code = accumulation_code(setup, b, worst.accumulation_steps, new)
    code += ("\n# or recompute the largest blocks' activations in the backward instead of keeping them:\n"
             "x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)")
    if (getattr(setup, "amp_dtype", None) or ev.amp) is None and getattr(setup, "device", "cuda") != "cpu":
        code += ("\n# and bf16 activations halve what the forward keeps:\n"
                 'with torch.autocast(device_type="cuda", dtype=torch.bfloat16):\n'
                 "    loss = loss_fn(model(x), y)")
    return code


RULE = Rule(
    id="memory-near-full",
    title="Peak memory near the device's capacity",
    needs=Needs(),
    claim=Claim(order=900, gpu=None, cpu=None, memory=_grade),
    label="memory near full",
    thresholds=("memory_near_full_share", "memory_near_full_critical_share"),
    evidence=Evidence, fix=_fix, check=PerRank(_rank, _summary, worst=lambda e: e.share),
)
