"""ddp-gradient-copies: DDP without ``gradient_as_bucket_view=True`` keeps a second copy of the gradients.

**Detects** a DDP run whose capture recorded ``gradient_as_bucket_view=False`` (DDP's default). DDP reduces
gradients in flat bucket buffers; without bucket views each parameter's ``.grad`` is a separate tensor that lives
beside its bucket from the backward pass until ``zero_grad``, so the gradients are held twice. From the allocator's
events (docs/memory.md): the backward allocations that outlive their pass are those gradients.

**Condition**: DDP, ``gradient_as_bucket_view`` recorded false, and the peak without those gradients at least
``ddp_gradient_copies_min_bytes`` (64 MiB) below the peak. Runs whose capture did not record the setting are not
judged (the trace alone does not say which gradients are views).

**Claim**: bytes of peak memory: the step's peak minus the largest the step's memory reaches without the gradient
copies alive (``bytes_at_stake``: what bucket views take off the peak; less than the gradients' size where the peak
is in the forward). Info; warning at 5 % of the device. No time.

**Fix**::

    model = DistributedDataParallel(model, device_ids=[local_rank], gradient_as_bucket_view=True)
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ._memory import gib, rank_memory, share_grade
from ._rule import Claim, Fixed, Needs, PerRank, RankHit, Rule
from .units import BYTES

FIX = ("model = DistributedDataParallel(model, device_ids=[local_rank], gradient_as_bucket_view=True)\n"
       "# .grad becomes a view of DDP's bucket: one copy of the gradients, not two")


class RankEvidence(RankHit, kw_only=True):
    peak_allocated_bytes: Annotated[int, BYTES]
    peak_without_copies_bytes: Annotated[int, BYTES]
    gradient_copies_at_peak_bytes: Annotated[int, BYTES]


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    bytes_at_stake: Annotated[int, BYTES]
    capacity_bytes: Annotated[int, BYTES] | None
    min_bytes: Annotated[int, BYTES]


def _rank(ra, config, report):
    md = ra.metadata if isinstance(ra.metadata, dict) else {}
    ddp = md.get("ddp") if isinstance(md.get("ddp"), dict) else None
    if ddp is None or ddp.get("gradient_as_bucket_view") is not False:
        return None
    m = rank_memory(ra, config)
    if m is None:
        return None
    s = m.steps
    worst = s.loc[s["peak_allocated"].idxmax()]
    saved = int(worst["peak_allocated"] - worst["peak_without_grads"])
    if saved < config.ddp_gradient_copies_min_bytes:
        return None
    return RankEvidence(rank=ra.rank, steps=[int(x) for x in s["step"]],
                        peak_allocated_bytes=int(worst["peak_allocated"]),
                        peak_without_copies_bytes=int(worst["peak_without_grads"]),
                        gradient_copies_at_peak_bytes=int(worst["grads_at_peak"]))


def _summary(hits, w, report, config):
    e = w.ev
    m = rank_memory(w.ra, config)
    stake = e.peak_allocated_bytes - e.peak_without_copies_bytes
    title = (f"DDP keeps the gradients twice (gradient_as_bucket_view=False): bucket views take {gib(stake)} off "
             f"the peak (rank {e.rank})")
    return Evidence(per_rank=[h.ev for h in hits], bytes_at_stake=stake, capacity_bytes=m.capacity if m else None,
                    min_bytes=config.ddp_gradient_copies_min_bytes), title, None


RULE = Rule(
    id="ddp-gradient-copies",
    title="DDP keeps a second copy of the gradients",
    needs=Needs(),
    claim=Claim(order=903, gpu=None, cpu=None, memory=lambda f, c: share_grade(f, c, warning=0.05)),
    label="gradient copies",
    thresholds=("ddp_gradient_copies_min_bytes",),
    evidence=Evidence, fix=Fixed(FIX), check=PerRank(_rank, _summary, worst=lambda e: e.peak_allocated_bytes),
    strategies=("ddp",),
)
