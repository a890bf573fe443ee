"""memory-growth: allocated memory at the step's end grows step after step (a leak).

**Detects** a rank whose device memory allocated at the end of each step (``end_allocated``, exact from the
allocator's ``[memory]`` events: docs/memory.md) grows by at least ``memory_growth_min_bytes`` from every step to
the next, over at least three steps, and names what grows: the allocations each step makes that the recording never
sees freed, by the phase and the top-level op that made them (``memory_leak``).

**Condition**: at least 3 steps with memory events, each step's ``end_allocated`` at least
``memory_growth_min_bytes`` (16 MiB) above the previous one's. Warning; critical when, at this rate, the device
fills within 10,000 steps (hours of training). Typical causes: a loss, an output or a metric kept across steps
while attached to its graph (``losses.append(loss)``, ``outputs.append(logits)``), a growing cache of tensors.

**Claim**: bytes of peak memory: the growth over the recorded steps (``bytes_at_stake``), what the next steps add
again. No time.

**Fix**: keep plain numbers or detached copies of what outlives the step (``loss.item()``,
``logits.detach().cpu()``), and clear what the step keeps.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import numpy as np

from ._memory import gib, rank_memory, share_grade
from ._rule import Claim, Needs, PerRank, RankHit, Rule
from ._util import quoted, shown
from .units import BYTES, Bytes, Count

STEPS_TO_FULL_CRITICAL = 10_000


class Grower(msgspec.Struct, kw_only=True):
    op: str
    phase: str
    bytes_per_step: Bytes
    count_per_step: Count


class RankEvidence(RankHit, kw_only=True):
    end_allocated_bytes: list[Annotated[int, BYTES]]
    growth_bytes_per_step: Bytes
    kept_bytes_per_step: Bytes  # allocations the recording never saw freed, per step
    growers: list[Grower]
    steps_to_full: Count | None  # at this rate, until the peak reaches the device's memory


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    bytes_at_stake: Annotated[int, BYTES]
    capacity_bytes: Annotated[int, BYTES] | None
    min_growth_bytes: Annotated[int, BYTES]


def _rank(ra, config, report):
    m = rank_memory(ra, config)
    if m is None or len(m.steps) < 3:
        return None
    ends = m.steps["end_allocated"].to_numpy(np.int64)
    d = np.diff(ends)
    if not (d >= config.memory_growth_min_bytes).all():
        return None
    leak = ra.tables.get("memory_leak")
    nsteps = max(len(m.steps) - 1, 1)
    growers = []
    kept = 0.0
    if leak is not None and len(leak):
        g = leak.groupby(["op", "phase"], as_index=False).agg(bytes=("bytes", "sum"), count=("count", "sum"))
        g = g.sort_values("bytes", ascending=False).head(5)
        growers = [Grower(op=str(r.op), phase=str(r.phase), bytes_per_step=float(r.bytes) / nsteps,
                          count_per_step=float(r.count) / nsteps) for r in g.itertuples()]
        kept = float(leak["bytes"].sum()) / nsteps
    rate = float(d.mean())
    full = ((m.capacity - m.unseen - (m.peak_reserved or m.peak_allocated)) / rate
            if m.capacity and rate > 0 else None)
    return RankEvidence(rank=ra.rank, steps=[int(s) for s in m.steps["step"]], end_allocated_bytes=ends.tolist(),
                        growth_bytes_per_step=rate, kept_bytes_per_step=kept, growers=growers,
                        steps_to_full=max(full, 0.0) if full is not None else None)


def _summary(hits, w, report, config):
    e = w.ev
    m = rank_memory(w.ra, config)
    top = f": {shown(e.growers[0].op, 60)} in the {e.growers[0].phase}" if e.growers else ""
    title = (f"Allocated memory grows {gib(e.growth_bytes_per_step)} every step (rank {e.rank}){top}, never "
             f"freed")
    stake = int(e.end_allocated_bytes[-1] - e.end_allocated_bytes[0])
    return Evidence(per_rank=[h.ev for h in hits], bytes_at_stake=stake, capacity_bytes=m.capacity if m else None,
                    min_growth_bytes=config.memory_growth_min_bytes), title, None


def _grade(f, config):
    ev = f.evidence or {}
    full = [r.get("steps_to_full") for r in ev.get("per_rank") or [] if r.get("steps_to_full") is not None]
    if full and min(full) < STEPS_TO_FULL_CRITICAL:
        return "critical", f"at this rate the device is full in {min(full):,.0f} steps"
    sev, reason = share_grade(f, config, warning=0.0)
    return ("warning", reason) if sev == "info" else (sev, reason)


def _fix(ev, setup=None) -> str:
    worst = max(ev.per_rank, key=lambda r: r.growth_bytes_per_step)
    lines = []
    for g in worst.growers[:3]:
        lines.append(f"# kept every step: {gib(g.bytes_per_step)} made by {quoted(g.op)} in the {g.phase}")
    lines += ["# keep numbers or detached copies of what outlives the step, never tensors attached to the graph:",
              "losses.append(loss.item())            # not losses.append(loss)",
              "outputs.append(logits.detach().cpu())  # not outputs.append(logits)"]
    return "\n".join(lines)


RULE = Rule(
    id="memory-growth",
    title="Allocated memory grows step after step",
    needs=Needs(),
    claim=Claim(order=901, gpu=None, cpu=None, memory=_grade),
    label="memory growth",
    thresholds=("memory_growth_min_bytes",),
    evidence=Evidence, fix=_fix, check=PerRank(_rank, _summary, worst=lambda e: e.growth_bytes_per_step),
)
