"""dataloader-stall: the training loop waits on the DataLoader for a large share of the step.

**Detects** time the training thread spends inside ``enumerate(DataLoader)#...__next__`` (the profiler's
annotation of fetching the next batch), per step.

**Condition**: the wait is at least ``dataloader_share_warning`` (10 %) of the step's wall time (*critical* at
``dataloader_share_critical``, 30 %), and, on a GPU run, the GPU is idle during at least half of that wait (a wait
that overlaps queued GPU work costs nothing). Why 10 %: below it a faster loader gains little; above it the data
pipeline is a first-order cost of every step and the GPU idles while the CPU waits.

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

import numpy as np

from . import Needs
from .finding import Finding
from .fixes import cpu_loader_fix, setup_of
from ._util import loader_evidence, loader_fix, mean, severity_for, step_ids

ID = "dataloader-stall"
TITLE = "Training loop waits on the DataLoader"
NEEDS = Needs(steps=("step", "wall_us", "dataloader_us"), gpu_steps=("idle_dataloader_us",))

# The GPU run's fix is made from the rank's recorded settings and loader timing (_util.loader_fix).
# A CPU-only run has no device to copy to: pinned memory and GPU-side augmentation do not apply.
FIX_CPU = (
    "loader = DataLoader(dataset, batch_size=..., num_workers=4,   # leave cores for the training processes\n"
    "                    persistent_workers=True, prefetch_factor=4)\n"
    "# and keep __getitem__ cheap: decode / augment ahead of time"
)


def check(report, config) -> list[Finding]:
    per_rank, ranks, steps = [], [], set()
    worst = None
    for ra in report.ranks:
        s = ra.steps
        if "dataloader_us" not in s or not len(s):
            continue
        share = s["dataloader_us"] / s["wall_us"].where(s["wall_us"] > 0, np.nan)
        mask = (share >= config.dataloader_share_warning).fillna(False).to_numpy()
        if ra.basis == "gpu" and "idle_dataloader_us" in s:
            mask = mask & (s["idle_dataloader_us"] >= 0.5 * s["dataloader_us"]).to_numpy()
        if not mask.any():
            continue
        sel = s[mask]
        sh = mean(share[mask])
        sev = severity_for(sh, config.dataloader_share_warning, config.dataloader_share_critical) or "warning"
        if worst is None or sh > worst[0]:
            worst = (sh, sev, ra.rank, mean(sel["dataloader_us"]))
        per_rank.append(
            {
                "rank": ra.rank,
                "steps": step_ids(s, mask),
                "dataloader_us_per_step": mean(sel["dataloader_us"]),
                "share_of_step": sh,
                "gpu_idle_during_wait_us_per_step": mean(sel["idle_dataloader_us"]) if "idle_dataloader_us" in sel else None,
                **loader_evidence(ra),  # its settings, and its timing where the capture timed it
            }
        )
        ranks.append(ra.rank)
        steps.update(step_ids(s, mask))
    if not per_rank:
        return []
    sh, sev, rank, us = worst
    per_rank.sort(key=lambda e: e["rank"] != rank)  # the rank the title names comes first (renderers show it)
    cpu_only = all(ra.basis == "cpu" for ra in report.ranks if ra.rank in ranks)
    return [
        Finding(
            id=ID,
            severity=sev,
            title=f"The loop waits {us / 1000:.1f} ms per step for data ({100 * sh:.0f} % of the step, rank {rank})",
            ranks=sorted(ranks),
            steps=sorted(steps),
            evidence={
                "per_rank": per_rank,
                "threshold_share_warning": config.dataloader_share_warning,
                "threshold_share_critical": config.dataloader_share_critical,
            },
            fix=(cpu_loader_fix(setup_of(report, per_rank[0]["rank"]), FIX_CPU) if cpu_only
                 else loader_fix(per_rank[0], setup_of(report, per_rank[0]["rank"]))),
            time_at_stake_us=us,
        )
    ]
