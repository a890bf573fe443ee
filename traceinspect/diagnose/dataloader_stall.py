"""dataloader-stall: the training loop waits on the DataLoader for a large share of the step.

**Detects** time the training thread spends inside ``enumerate(DataLoader)#...__next__`` (the profiler's
annotation of fetching the next batch), per step.

**Condition**: the wait is at least ``dataloader_share_warning`` (10 %) of the step's wall time, and, on a GPU run,
the GPU is idle during at least half of that wait (a wait that overlaps queued GPU work costs nothing). Why 10 %:
below it a faster loader gains little; above it the data pipeline is a first-order cost of every step and the GPU
idles while the CPU waits.

**Why it matters**: with ``num_workers=0`` the main process loads and collates every batch itself; with too few
workers, or workers restarted every epoch, batches are not ready when the step wants them. The GPU sits idle
meanwhile: the GPU-Util flicker of ``nvidia-smi``.

**Evidence**: wait per step (us and share of the step), GPU idle during the wait, the DataLoader settings the
capture recorded (``num_workers``, ``pin_memory``, ``persistent_workers``, ``prefetch_factor``), and where the
capture timed the loader, its period per batch and what set it (``loader_limited_by``: its workers, or its pinning
thread, each with its time per batch).

**Fix**::

    loader = DataLoader(dataset, batch_size=..., num_workers=8,        # ~ CPU cores per GPU; twice as many as now
                        persistent_workers=True, prefetch_factor=4, pin_memory=True)

where the capture recorded ``num_workers``, twice that; where the pinning thread set the pace, a note of what it
handles (every batch byte: fewer bytes, e.g. uint8 cast on the GPU, lighten it)

(on a CPU-only run without ``pin_memory``, which only helps copies to a GPU, and with fewer workers: they share the
cores with the training processes) and move heavy work (decoding, augmentation) out of ``__getitem__`` into preprocessing, or onto the GPU.
"""

from __future__ import annotations

import msgspec
import numpy as np

from ._rule import Claim, Needs, PerRank, RankHit, Rule
from ._util import loader_evidence, loader_fix, mean, step_ids
from .takes import Column
from .units import Share, Us

# The GPU run's fix is made from the rank's recorded settings and loader timing (_util.loader_fix).
# A CPU-only run has no device to copy to: pinned memory and GPU-side augmentation do not apply.
FIX_CPU = (
    "loader = DataLoader(dataset, batch_size=..., num_workers=4,   # leave cores for the training processes\n"
    "                    persistent_workers=True, prefetch_factor=4)\n"
    "# and keep __getitem__ cheap: decode / augment ahead of time"
)
UNSET = msgspec.UNSET


class RankEvidence(RankHit, kw_only=True):
    dataloader_us_per_step: Us
    share_of_step: Share
    gpu_idle_during_wait_us_per_step: Us | None  # None on a CPU-only rank
    # _util.loader_evidence: the settings the capture recorded, and its timing of the loader where it timed it
    dataloader_settings: dict | None
    loader_period_us: Us | msgspec.UnsetType = UNSET
    loader_limited_by: str | msgspec.UnsetType = UNSET
    workers_us_per_batch: Us | None | msgspec.UnsetType = UNSET
    pin_thread_us_per_batch: Us | None | msgspec.UnsetType = UNSET


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    threshold_share_warning: Share


def fix(ev: Evidence, setup=None) -> str:
    """The first rank's loader fix (the rank the title names); on a CPU-only run, the CPU variant."""
    if all(e.gpu_idle_during_wait_us_per_step is None for e in ev.per_rank):
        from .fixes import cpu_loader_fix

        return cpu_loader_fix(setup, FIX_CPU)
    return loader_fix(ev.per_rank[0], setup)


def _rank(ra, config, report):
    s = ra.steps
    if "dataloader_us" not in s or not len(s):
        return None
    share = s["dataloader_us"] / s["wall_us"].where(s["wall_us"] > 0, np.nan)
    mask = (share >= config.dataloader_share_warning).fillna(False).to_numpy()
    if ra.basis == "gpu" and "idle_dataloader_us" in s:
        mask = mask & (s["idle_dataloader_us"] >= 0.5 * s["dataloader_us"]).to_numpy()
    if not mask.any():
        return None
    sel = s[mask]
    return RankEvidence(
        rank=ra.rank,
        steps=step_ids(s, mask),
        dataloader_us_per_step=mean(sel["dataloader_us"]),
        share_of_step=mean(share[mask]),
        gpu_idle_during_wait_us_per_step=mean(sel["idle_dataloader_us"]) if "idle_dataloader_us" in sel else None,
        **loader_evidence(ra),  # its settings, and its timing where the capture timed it
    )


def _summary(hits, w, report, config):
    e = w.ev
    title = (f"The loop waits {e.dataloader_us_per_step / 1000:.1f} ms per step for data "
             f"({100 * e.share_of_step:.0f} % of the step, rank {e.rank})")
    ev = Evidence(per_rank=[h.ev for h in hits], threshold_share_warning=config.dataloader_share_warning)
    return ev, title, e.dataloader_us_per_step


RULE = Rule(
    id="dataloader-stall",
    title="Training loop waits on the DataLoader",
    needs=Needs(steps=("step", "wall_us", "dataloader_us"), gpu_steps=("idle_dataloader_us",)),
    claim=Claim(order=20, gpu=Column("data", "idle_dataloader_us"), cpu=Column("data", "cpu_dataloader"),
                fixes_loader=True),
    label="dataloader",
    thresholds=("dataloader_share_warning",),
    evidence=Evidence, fix=fix, check=PerRank(_rank, _summary, worst=lambda e: e.share_of_step),
)
