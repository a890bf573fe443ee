"""pageable-memcpy: host<->device copies from or to pageable (not pinned) host memory.

**Detects** GPU copy events named ``Memcpy HtoD (Pageable -> Device)`` or ``Memcpy DtoH (Device -> Pageable)``.

**Condition**: in a step, pageable copies move at least ``pageable_min_bytes_per_step`` bytes (64 KiB: smaller ones,
like a scalar ``.item()``, are not a data-transfer problem; ``host-sync`` covers them). Severity: *warning* when
the copies' time (GPU copy time, or the CPU time blocked in their launch calls if longer) is at least
``pageable_share_warning`` (2 %) of the step, *critical* at twice that, *info* below.

**Why it matters**: the CUDA driver cannot DMA from pageable memory. It first copies the batch into an internal
pinned staging buffer on the CPU, then transfers it, in chunks, and the call blocks the CPU until done: the copy
is slower (typically a third to half of pinned bandwidth) and cannot overlap compute, and the CPU cannot queue the
next kernels meanwhile.

**Evidence**: bytes and time per step, achieved GB/s next to the pinned copies' GB/s in the same trace, the CPU op
that issued the copies, the CPU time blocked in their launch calls, and the DataLoader's ``pin_memory`` setting
when the capture recorded it.

**Fix**::

    loader = DataLoader(dataset, batch_size=..., num_workers=4, pin_memory=True)
    for x, y in loader:
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)

For device-to-host results, copy into a pinned buffer (``torch.empty(..., pin_memory=True)``) with
``non_blocking=True`` and synchronize once, when the value is needed.
"""

from __future__ import annotations

import numpy as np

from . import Needs
from .finding import Finding
from ._util import gbps, mean, step_ids

ID = "pageable-memcpy"
TITLE = "Copies from pageable host memory"
NEEDS = Needs(
    steps=("step", "wall_us"),
    gpu_steps=("pageable_h2d_bytes", "pageable_h2d_count", "pageable_h2d_time_us", "pageable_d2h_bytes",
               "pageable_d2h_count", "pageable_d2h_time_us", "pinned_h2d_bytes", "pinned_h2d_time_us"),
    tables=("pageable_copies",),
)

FIX = (
    "loader = DataLoader(dataset, ..., pin_memory=True)\n"
    "x = x.to(device, non_blocking=True)\n"
    "y = y.to(device, non_blocking=True)"
)


def check(report, config) -> list[Finding]:
    out = []
    hits = []
    for ra in report.ranks:
        s = ra.steps
        if ra.basis != "gpu" or "pageable_h2d_bytes" not in s:
            continue
        pbytes = s["pageable_h2d_bytes"] + s["pageable_d2h_bytes"]
        mask = pbytes >= config.pageable_min_bytes_per_step
        if not mask.any():
            continue
        hits.append((ra, mask))
    if not hits:
        return out
    ranks, steps, per_rank = [], set(), []
    worst_share = 0.0
    stake = []
    for ra, mask in hits:
        s = ra.steps[mask]
        copies = ra.tables.get("pageable_copies")
        blocked = 0.0
        ops = {}
        if copies is not None and len(copies):
            c = copies[copies["step"].isin(s["step"])]
            blocked = float(c["runtime_us"].sum()) / max(len(s), 1)
            ops = c.groupby(c["op"].fillna("(unknown)"))["bytes"].sum().sort_values(ascending=False).head(3).to_dict()
        copy_us = mean(s["pageable_h2d_time_us"] + s["pageable_d2h_time_us"])
        share = max(copy_us, blocked) / max(mean(s["wall_us"]), 1e-9)
        worst_share = max(worst_share, share)
        pin_bw = gbps(ra.steps["pinned_h2d_bytes"].sum(), ra.steps["pinned_h2d_time_us"].sum())
        page_bw = gbps(s["pageable_h2d_bytes"].sum(), s["pageable_h2d_time_us"].sum())
        page_d2h_bw = gbps(s["pageable_d2h_bytes"].sum(), s["pageable_d2h_time_us"].sum())
        pinned_setting = (ra.metadata.get("dataloader") or {}).get("pin_memory") if ra.metadata else None
        per_rank.append(
            {
                "rank": ra.rank,
                "steps": step_ids(ra.steps, mask),
                "pageable_h2d_bytes_per_step": mean(s["pageable_h2d_bytes"]),
                "pageable_d2h_bytes_per_step": mean(s["pageable_d2h_bytes"]),
                "pageable_copies_per_step": mean(s["pageable_h2d_count"] + s["pageable_d2h_count"]),
                "pageable_copy_us_per_step": copy_us,
                "cpu_blocked_us_per_step": blocked,
                "share_of_step": share,
                "pageable_h2d_gbps": page_bw,
                "pageable_d2h_gbps": page_d2h_bw,
                "pinned_h2d_gbps": pin_bw,
                "issuing_ops_bytes": {str(k): int(v) for k, v in ops.items()},
                "dataloader_pin_memory": pinned_setting,
            }
        )
        ranks.append(ra.rank)
        steps.update(step_ids(ra.steps, mask))
        # At stake: the copy time beyond what the same bytes would take at pinned bandwidth, and the blocked CPU.
        est = copy_us
        if pin_bw:
            est = max(copy_us - mean(s["pageable_h2d_bytes"] + s["pageable_d2h_bytes"]) / (pin_bw * 1e3), 0.0)
        stake.append(max(est, blocked))
    if worst_share >= 2 * config.pageable_share_warning:
        sev = "critical"
    elif worst_share >= config.pageable_share_warning:
        sev = "warning"
    else:
        sev = "info"
    r0 = per_rank[0]
    bw = f"{r0['pageable_h2d_gbps']:.1f} GB/s" if r0["pageable_h2d_gbps"] else "n/a"
    pin = f" vs pinned {r0['pinned_h2d_gbps']:.1f} GB/s" if r0["pinned_h2d_gbps"] else ""
    title = (
        f"{(r0['pageable_h2d_bytes_per_step'] + r0['pageable_d2h_bytes_per_step']) / 1e6:.1f} MB/step copied from "
        f"pageable memory ({bw}{pin}), {100 * r0['share_of_step']:.1f} % of the step"
    )
    out.append(
        Finding(
            id=ID,
            severity=sev,
            title=title,
            ranks=sorted(ranks),
            steps=sorted(steps),
            evidence={
                "per_rank": per_rank,
                "threshold_bytes_per_step": config.pageable_min_bytes_per_step,
                "threshold_share_warning": config.pageable_share_warning,
            },
            fix=FIX,
            time_at_stake_us=float(np.mean(stake)) if stake else None,
        )
    )
    return out
