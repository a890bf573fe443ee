"""memory-headroom: the peak is far below the device's memory, so a larger physical batch fits.

**Detects** a rank whose peak reserved memory is below ``memory_headroom_share`` of the device and whose predicted
largest physical batch (docs/memory.md: the activations that scale with the batch, the rest fixed, within the
device less what the allocator does not see, with the slack the allocator showed) is at least twice today's.

**Condition**: ``peak_reserved < memory_headroom_share x capacity`` (50 %), the batch recorded, and
``max_batch_predicted >= 2 x batch``. Always info: a larger batch is a choice (it changes the optimization, and
the learning rate wants scaling), not a defect. Under gradient accumulation, a larger physical batch with fewer
micro-batches keeps the logical batch and saves launches and all-reduces.

**Claim**: bytes: the device memory the peak leaves unused (``bytes_at_stake``). No time.

**Fix**: the largest batch predicted to fit, and a multiple of 8 (tensor cores) at or under it; under
accumulation, the (physical batch, accumulation steps) pairs that keep the logical batch exactly.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ._memory import batch_fit, gib, rank_memory
from ._rule import Claim, Needs, PerRank, RankHit, Rule
from .units import BYTES, COUNT, Share


class RankEvidence(RankHit, kw_only=True):
    peak_reserved_bytes: Annotated[int, BYTES]
    capacity_bytes: Annotated[int, BYTES]
    batch_size: Annotated[int, COUNT]
    accumulation_steps: Annotated[int, COUNT] | None
    max_batch_predicted: Annotated[int, COUNT]
    max_batch_peak_bytes: Annotated[int, BYTES]
    inference: bool = False  # the step runs no backward pass and no optimizer


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    bytes_at_stake: Annotated[int, BYTES]
    capacity_bytes: Annotated[int, BYTES]
    threshold_share: Share


def _rank(ra, config, report):
    m = rank_memory(ra, config)
    if m is None or not m.capacity or m.peak_reserved is None or not m.batch or not m.max_batch:
        return None
    if m.peak_reserved >= config.memory_headroom_share * m.capacity or m.max_batch < 2 * m.batch:
        return None
    return RankEvidence(rank=ra.rank, steps=[int(s) for s in m.steps["step"]], peak_reserved_bytes=m.peak_reserved,
                        capacity_bytes=m.capacity, batch_size=m.batch, accumulation_steps=m.accum,
                        max_batch_predicted=m.max_batch, max_batch_peak_bytes=int(m.predict(m.max_batch)),
                        inference=batch_fit(ra, config).inference)


def _summary(hits, w, report, config):
    e = w.ev
    title = (f"Peak memory {gib(e.peak_reserved_bytes)} of {gib(e.capacity_bytes)}: a physical batch of up to "
             f"{e.max_batch_predicted} fits (today {e.batch_size}, rank {e.rank})")
    return Evidence(per_rank=[h.ev for h in hits], bytes_at_stake=e.capacity_bytes - e.peak_reserved_bytes,
                    capacity_bytes=e.capacity_bytes, threshold_share=config.memory_headroom_share), title, None


def _fix(ev, setup=None) -> str:
    e = ev.per_rank[0]
    mult8 = e.max_batch_predicted // 8 * 8 or e.max_batch_predicted
    lines = [f"# predicted to fit: batch {e.max_batch_predicted} (peak {gib(e.max_batch_peak_bytes)} allocated of "
             f"{gib(e.capacity_bytes)}); a multiple of 8 for the tensor cores:",
             f"loader = DataLoader(dataset, batch_size={mult8}, ...)  # scale the learning rate with the batch"]
    if e.inference:  # no optimizer: more requests per forward, nothing to rescale
        lines[-1] = f"loader = DataLoader(dataset, batch_size={mult8}, ...)  # more requests per forward pass"
        return "\n".join(lines)
    if e.accumulation_steps and e.accumulation_steps > 1:
        logical = e.batch_size * e.accumulation_steps
        pairs = [(b, logical // b) for b in range(e.batch_size + 1, min(e.max_batch_predicted, logical) + 1)
                 if logical % b == 0]
        if pairs:
            lines = [f"# the same logical batch ({logical}) with fewer micro-batches (fewer launches and "
                     f"all-reduces): " + ", ".join(f"{b} x {k}" for b, k in pairs),
                     f"loader = DataLoader(dataset, batch_size={pairs[-1][0]}, ...); accum = {pairs[-1][1]}"]
    return "\n".join(lines)


RULE = Rule(
    id="memory-headroom",
    title="A larger physical batch fits in memory",
    needs=Needs(),
    claim=Claim(order=904, gpu=None, cpu=None, memory=lambda f, c: ("info", "a choice, not a defect: the "
                                                                          "device memory the peak leaves unused")),
    label="memory headroom",
    thresholds=("memory_headroom_share", "memory_unseen_bytes"),
    evidence=Evidence, fix=_fix, check=PerRank(_rank, _summary, worst=lambda e: e.max_batch_predicted),
)
