"""pageable-memcpy: host<->device copies from or to pageable (not pinned) host memory.

**Detects** GPU copy events named ``Memcpy HtoD (Pageable -> Device)`` or ``Memcpy DtoH (Device -> Pageable)``.

**Condition**: in a step, pageable copies move at least ``pageable_min_bytes_per_step`` bytes (64 KiB: smaller ones,
like a scalar ``.item()``, are not a data-transfer problem; ``host-sync`` covers them). Its claim (docs/findings.md)
is the copy time beyond a pinned copy of the same bytes (the pinned bandwidth measured in the trace, else
``pinned_h2d_gbps_assumed``, 25 GB/s) and the GPU idle while the CPU was blocked in the copies' calls; its
severity comes from that claim.

**Why it matters**: the CUDA driver cannot DMA from pageable memory. It first copies the batch into an internal
pinned staging buffer on the CPU, then transfers it, in chunks, and the call blocks the CPU until done: the copy
is slower (typically a third to half of pinned bandwidth) and cannot overlap compute, and the CPU cannot queue the
next kernels meanwhile.

**Evidence**: bytes and time per step, achieved GB/s next to the pinned copies' GB/s in the same trace, the CPU op
that issued the copies, the CPU time blocked in their launch calls, and the DataLoader's ``pin_memory`` setting
when the capture recorded it. Where that setting is off and the loop waits for its batches, the wait too
(``unpinned_loader_wait_us_per_step``) and a note (``claim_note``): ``pin_memory=True`` moves the batches' hand-over
from the worker processes to the DataLoader's pinning thread, so the fix may take part of that wait away as well;
the wait stays the DataLoader's claim (``dataloader-stall``), so no time is claimed twice. On the small step of
fixtures/gpu_setup pinning saved 4.2 ms a step against 0.51 ms claimed here and 4.95 ms by the DataLoader's finding;
on a twin with 8 workers (fixtures/gpu_pairs) it saved nothing measurable: the pinning thread then competed with the
training thread, so the note says "may".

**Fix**::

    loader = DataLoader(dataset, batch_size=..., num_workers=4, pin_memory=True)
    for x, y in loader:
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)

For device-to-host results, copy into a pinned buffer (``torch.empty(..., pin_memory=True)``) with
``non_blocking=True`` and synchronize once, when the value is needed.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import numpy as np

from ._rule import Claim, Fixed, Needs, PerRank, RankHit, Rule
from ._util import gbps, mean, pageable_mask, step_ids
from .bounds import col, per_step
from .takes import Custom
from .units import BYTES, Bytes, Count, GBps, Share, Us

FIX = (
    "loader = DataLoader(dataset, ..., pin_memory=True)\n"
    "x = x.to(device, non_blocking=True)\n"
    "y = y.to(device, non_blocking=True)"
)


class RankEvidence(RankHit, kw_only=True):
    pageable_h2d_bytes_per_step: Bytes
    pageable_d2h_bytes_per_step: Bytes
    pageable_copies_per_step: Count
    pageable_copy_us_per_step: Us
    cpu_blocked_us_per_step: Us  # CPU time in the copies' launch calls
    share_of_step: Share
    pageable_h2d_gbps: GBps | None
    pageable_d2h_gbps: GBps | None
    pinned_h2d_gbps: GBps | None  # the pinned copies of the same trace, for comparison
    issuing_ops_bytes: dict[str, Annotated[int, BYTES]]  # the CPU ops that issued the most pageable bytes (3 at most)
    dataloader_pin_memory: bool | None  # the DataLoader's pin_memory, where the capture recorded it
    # the loop's wait for batches per step where the recorded DataLoader does not pin (else null): pin_memory=True
    # also moves the batches' hand-over from the workers off the training thread; that wait is the DataLoader's claim
    unpinned_loader_wait_us_per_step: Us | None = None


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    threshold_bytes_per_step: Annotated[int, BYTES]
    claim_note: str | None = None  # what the fix may save beyond the claim, and whose claim that is


def _rank(ra, config, report):
    mask = pageable_mask(ra, config)
    if mask is None:
        return None
    s = ra.steps
    sel = s[mask]
    copies = ra.tables.get("pageable_copies")
    blocked = 0.0
    ops = {}
    if copies is not None and len(copies):
        c = copies[copies["step"].isin(sel["step"])]
        blocked = float(c["runtime_us"].sum()) / max(len(sel), 1)
        ops = c.groupby(c["op"].fillna("(unknown)"))["bytes"].sum().sort_values(ascending=False).head(3).to_dict()
    copy_us = mean(sel["pageable_h2d_time_us"] + sel["pageable_d2h_time_us"])
    pin = (ra.metadata.get("dataloader") or {}).get("pin_memory") if ra.metadata else None
    wait = mean(sel["dataloader_us"]) if "dataloader_us" in sel else 0.0
    pin_bw = gbps(s["pinned_h2d_bytes"].sum(), s["pinned_h2d_time_us"].sum())
    ev = RankEvidence(
        rank=ra.rank,
        steps=step_ids(s, mask),
        pageable_h2d_bytes_per_step=mean(sel["pageable_h2d_bytes"]),
        pageable_d2h_bytes_per_step=mean(sel["pageable_d2h_bytes"]),
        pageable_copies_per_step=mean(sel["pageable_h2d_count"] + sel["pageable_d2h_count"]),
        pageable_copy_us_per_step=copy_us,
        cpu_blocked_us_per_step=blocked,
        share_of_step=max(copy_us, blocked) / max(mean(sel["wall_us"]), 1e-9),
        pageable_h2d_gbps=gbps(sel["pageable_h2d_bytes"].sum(), sel["pageable_h2d_time_us"].sum()),
        pageable_d2h_gbps=gbps(sel["pageable_d2h_bytes"].sum(), sel["pageable_d2h_time_us"].sum()),
        pinned_h2d_gbps=pin_bw,
        issuing_ops_bytes={str(k): int(v) for k, v in ops.items()},
        dataloader_pin_memory=pin,
        unpinned_loader_wait_us_per_step=wait if pin is False and wait > 0 else None,
    )
    # At stake: the copy time beyond what the same bytes would take at pinned bandwidth, and the blocked CPU.
    est = copy_us
    if pin_bw:
        est = max(copy_us - mean(sel["pageable_h2d_bytes"] + sel["pageable_d2h_bytes"]) / (pin_bw * 1e3), 0.0)
    return ev, max(est, blocked)


def _summary(hits, w, report, config):
    r0 = w.ev
    bw = f"{r0.pageable_h2d_gbps:.1f} GB/s" if r0.pageable_h2d_gbps else "n/a"
    pin = f" vs pinned {r0.pinned_h2d_gbps:.1f} GB/s" if r0.pinned_h2d_gbps else ""
    title = (f"{(r0.pageable_h2d_bytes_per_step + r0.pageable_d2h_bytes_per_step) / 1e6:.1f} MB/step copied from "
             f"pageable memory ({bw}{pin}), {100 * r0.share_of_step:.1f} % of the step")
    waits = [h.ev.unpinned_loader_wait_us_per_step for h in hits if h.ev.unpinned_loader_wait_us_per_step]
    note = (f"the fix's pin_memory=True also hands the batches over from the workers on the DataLoader's pinning "
            f"thread, off the training thread, which waits {max(waits) / 1000:.2f} ms per step for them in these "
            f"steps: part of that wait may go too; it is the DataLoader's claim (dataloader-stall), not counted "
            f"here") if waits else None
    ev = Evidence(per_rank=[h.ev for h in hits], threshold_bytes_per_step=config.pageable_min_bytes_per_step,
                  claim_note=note)
    return ev, title, float(np.mean([h.aux for h in hits]))


# --- the claim (accounting.py) -----------------------------------------------------------------------------------

def _pageable_blocked(ra, s) -> np.ndarray:
    """CPU time per step blocked by pageable copies: their launch calls, and the blocking calls the same ops make
    (a ``non_blocking=False`` copy is ``cudaMemcpyAsync`` then ``cudaStreamSynchronize``, both under ``aten::copy_``)."""
    copies, calls = ra.tables.get("pageable_copies"), ra.tables.get("sync_calls")
    own = per_step(copies, s, "runtime_us")
    if copies is None or not len(copies) or calls is None or not len(calls):
        return own
    return np.maximum(own, per_step(calls[calls["op"].isin(set(copies["op"].dropna()))], s, "total_us"))


def _pinned_gbps(ra, config) -> float:
    """The pinned copies' bandwidth in the rank's trace, else ``pinned_h2d_gbps_assumed``."""
    s = ra.steps
    return gbps(col(s, "pinned_h2d_bytes").sum(), col(s, "pinned_h2d_time_us").sum()) or config.pinned_h2d_gbps_assumed


def _demands(f, ra, s, config) -> list:
    n = len(s)
    copy = col(s, "pageable_h2d_time_us") + col(s, "pageable_d2h_time_us")
    nbytes = col(s, "pageable_h2d_bytes") + col(s, "pageable_d2h_bytes")
    pinned = nbytes / (_pinned_gbps(ra, config) * 1e3)
    blocked = _pageable_blocked(ra, s)
    sync = col(s, "sync_us")
    blocked_share = np.divide(blocked, sync, out=np.zeros(n), where=sync > 0).clip(0.0, 1.0)
    # The copy itself beyond what a pinned copy of the same bytes takes, the GPU idle while the CPU was blocked in
    # the copy's calls, and, where the GPU waits on the CPU (launch pool), the rest of the blocked CPU time, one for
    # one: a pinned non-blocking copy does not block the CPU at all (it runs while the CPU issues), and on a
    # launch-bound step every microsecond the CPU is stuck delays the next launches. That time is the copy's, not
    # launch overhead's: this claim comes first.
    return [("copy", np.clip(copy - pinned, 0.0, None)), ("sync", col(s, "idle_sync_us") * blocked_share),
            ("launch", lambda got: np.clip(blocked - got, 0.0, None))]


RULE = Rule(
    id="pageable-memcpy",
    title="Copies from pageable host memory",
    needs=Needs(
        steps=("step", "wall_us"),
        gpu_steps=("pageable_h2d_bytes", "pageable_h2d_count", "pageable_h2d_time_us", "pageable_d2h_bytes",
                   "pageable_d2h_count", "pageable_d2h_time_us", "pinned_h2d_bytes", "pinned_h2d_time_us"),
        tables=("pageable_copies",),
    ),
    claim=Claim(order=10, cpu=None, gpu=Custom(
        _demands, "`copy`: pageable copy time - bytes / pinned bandwidth; `sync`: `idle_sync_us` x (CPU time in the "
        "pageable copies' calls / `sync_us`); `launch`: the rest of that blocked time (a pinned non-blocking copy "
        "blocks nothing)")),
    label="pageable copies",
    thresholds=("pageable_min_bytes_per_step", "pinned_h2d_gbps_assumed"),
    evidence=Evidence, fix=Fixed(FIX), check=PerRank(_rank, _summary),
)
