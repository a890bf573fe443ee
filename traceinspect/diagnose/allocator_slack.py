"""allocator-slack: the caching allocator reserves far more device memory than the step allocates.

**Detects** a rank whose largest peak reserved memory over its steps exceeds its peak allocated memory by at least
``allocator_slack_share`` of the reserved bytes and ``allocator_slack_min_bytes`` (docs/memory.md). PyTorch's
caching allocator keeps freed blocks for reuse; tensors whose sizes change from step to step (variable sequence
lengths, dynamic shapes) split its segments into pieces too small for the next request, so it reserves new ones:
memory the device cannot use and ``nvidia-smi`` shows as taken.

**Condition**: ``peak_reserved - peak_allocated >= allocator_slack_share x peak_reserved`` (20 %) and
``>= allocator_slack_min_bytes`` (1 GiB), on a run whose capture did not record
``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``. Info; warning when the slack is at least 5 % of the device
and the peak reserved reaches ``memory_near_full_share`` of it (the slack is then what runs the card out of memory).

**Claim**: bytes of peak memory: the slack (``bytes_at_stake``). No time.

**Fix**: expandable segments, which grow one segment instead of reserving new ones::

    export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ._memory import gib, rank_memory, share_grade
from ._rule import Claim, Fixed, Needs, PerRank, RankHit, Rule
from .units import BYTES, Share

FIX = ("# in the launcher's environment, before the process first touches CUDA:\n"
       "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
       "# or, first thing in the script: os.environ['PYTORCH_CUDA_ALLOC_CONF'] = 'expandable_segments:True'")


class RankEvidence(RankHit, kw_only=True):
    peak_reserved_bytes: Annotated[int, BYTES]
    peak_allocated_bytes: Annotated[int, BYTES]
    slack_bytes: Annotated[int, BYTES]
    slack_share: Share  # of the peak reserved
    alloc_conf: str | None


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    bytes_at_stake: Annotated[int, BYTES]
    capacity_bytes: Annotated[int, BYTES] | None
    near_full: bool
    threshold_share: Share
    min_bytes: Annotated[int, BYTES]


def _rank(ra, config, report):
    m = rank_memory(ra, config)
    if m is None or m.peak_reserved is None or m.peak_reserved <= 0:
        return None
    if m.alloc_conf and "expandable_segments:true" in m.alloc_conf.replace(" ", "").lower():
        return None
    slack = m.peak_reserved - m.peak_allocated
    if slack < config.allocator_slack_min_bytes or slack < config.allocator_slack_share * m.peak_reserved:
        return None
    return RankEvidence(rank=ra.rank, steps=[int(s) for s in m.steps["step"]], peak_reserved_bytes=m.peak_reserved,
                        peak_allocated_bytes=m.peak_allocated, slack_bytes=slack,
                        slack_share=slack / m.peak_reserved, alloc_conf=m.alloc_conf)


def _summary(hits, w, report, config):
    e = w.ev
    m = rank_memory(w.ra, config)
    cap = m.capacity if m else None
    title = (f"The allocator reserves {gib(e.peak_reserved_bytes)} for a peak of {gib(e.peak_allocated_bytes)} "
             f"allocated: {gib(e.slack_bytes)} ({100 * e.slack_share:.0f} %) fragmented (rank {e.rank})")
    near = bool(cap and e.peak_reserved_bytes >= config.memory_near_full_share * cap)
    return Evidence(per_rank=[h.ev for h in hits], bytes_at_stake=e.slack_bytes, capacity_bytes=cap, near_full=near,
                    threshold_share=config.allocator_slack_share, min_bytes=config.allocator_slack_min_bytes), \
        title, None


def _grade(f, config):
    sev, reason = share_grade(f, config, warning=0.05)
    if sev != "info" and not (f.evidence or {}).get("near_full"):
        return "info", reason + "; the peak is not near the device's capacity, so the slack costs no batch yet"
    return sev, reason


RULE = Rule(
    id="allocator-slack",
    title="Caching allocator holds far more than it hands out",
    needs=Needs(),
    claim=Claim(order=902, gpu=None, cpu=None, memory=_grade),
    label="allocator slack",
    thresholds=("allocator_slack_share", "allocator_slack_min_bytes", "memory_near_full_share"),
    evidence=Evidence, fix=Fixed(FIX), check=PerRank(_rank, _summary, worst=lambda e: e.slack_bytes),
)
