"""What bounds a faster step: the CPU's own work, the DataLoader's pace, the casts bf16 autocast adds.

Helpers of the accounting (accounting.py; the model is docs/findings.md): per-step arrays from the step columns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._util import loader_bound


def col(s: pd.DataFrame, name: str) -> np.ndarray:
    """A step column as floats, 0 where unknown (or absent)."""
    if name not in s:
        return np.zeros(len(s))
    return np.nan_to_num(s[name].to_numpy(dtype=float), nan=0.0)


def cpu_floor(s: pd.DataFrame) -> np.ndarray:
    """The CPU's own work of each step, which no faster GPU removes: its issuing work (``cpu_issue_us``: the
    issuing threads' ops and runtime calls outside syncs and DataLoader waits, docs/metrics.md), not its wall
    time, which in a GPU-bound step is mostly waiting. A step table without the column (made before it existed)
    falls back to the span less the time it was blocked in syncs or waited for a batch."""
    if "cpu_issue_us" in s:
        return col(s, "cpu_issue_us")
    return np.clip(col(s, "cpu_step_us") - col(s, "sync_us") - col(s, "dataloader_us"), 0.0, None)


def gpu_room(s: pd.DataFrame) -> np.ndarray:
    """How much of the step a faster GPU could remove: the step beyond the CPU's own work."""
    return np.clip(col(s, "wall_us") - cpu_floor(s), 0.0, None)


def paced(s: pd.DataFrame, config) -> np.ndarray:
    """Steps the DataLoader paced: the GPU idled waiting for the batch, so a faster GPU alone would only wait
    longer. What it would save there becomes real only once the loader keeps up (``after`` the loader's fix)."""
    wait = col(s, "idle_dataloader_us")
    return (wait >= config.loader_paced_min_us) & (wait >= config.loader_paced_min_share * col(s, "wall_us"))


def autocast_cpu_us(s: pd.DataFrame, config) -> np.ndarray:
    """CPU time per step bf16 autocast would add: a cast kernel launch per fp32 input of each matrix op (forward
    and backward), each at the step's measured CPU time per launch. The step of the fix is at least its CPU work."""
    launches = col(s, "launch_count")
    per_launch = np.divide(cpu_floor(s), launches, out=np.zeros(len(s)), where=launches > 0)
    mm, mm_us = col(s, "matmul_count"), col(s, "matmul_us")
    fp32_share = np.divide(col(s, "matmul_fp32_us"), mm_us, out=np.zeros(len(s)), where=mm_us > 0)
    return config.autocast_casts_per_gemm * mm * fp32_share * per_launch


def pinned_untimed(s: pd.DataFrame, bound: dict | None) -> np.ndarray:
    """Per step, the pinned host-to-device bytes of a loop fed by DataLoader workers whose pinning thread the
    capture did not time (``bound``: the rank's ``loader_bound``; 0 elsewhere): what that thread, which no trace
    shows, handled in the step."""
    if (bound is not None and bound["pin_thread_us"] is not None) or "dataloader_worker_count" not in s \
            or "pinned_h2d_bytes" not in s:
        return np.zeros(len(s))
    workers = np.nan_to_num(s["dataloader_worker_count"].to_numpy(float)) > 0
    return np.where(workers, np.nan_to_num(s["pinned_h2d_bytes"].to_numpy(float)), 0.0)


def pin_rate_gbps(s: pd.DataFrame, pinned: np.ndarray, config) -> float | None:
    """The untimed pinning thread's assumed rate: ``config.pin_thread_min_gbps``, or the rate the rank's steps show
    it kept if that is faster (it handled their pinned bytes within their walls). None where nothing is pinned."""
    if not pinned.any() or config.pin_thread_min_gbps <= 0:
        return None
    wall = float(np.nansum(s["wall_us"].to_numpy(float))) if "wall_us" in s else 0.0
    seen = float(pinned.sum()) / wall / 1e3 if wall > 0 else 0.0
    return max(float(config.pin_thread_min_gbps), seen)


def loader_floor(ra, s: pd.DataFrame, config) -> tuple[np.ndarray, dict] | None:
    """The least time each step can take for its batches, and what that rests on (a finding's ``loader_bound``):
    the measured loader's period per batch drawn (``loader_bound``: its workers, its pinning thread), and where the
    capture did not time the pinning thread of a loop fed by pinning workers, the step's pinned batch bytes at
    ``pin_rate_gbps`` (an estimate); the larger of the two. None where neither applies."""
    b = loader_bound(ra)
    batches = float(np.nanmean(s["dataloader_count"].to_numpy(float))) if "dataloader_count" in s and len(s) else None
    found = []
    if b is not None:
        count = s["dataloader_count"].to_numpy(float) if "dataloader_count" in s else np.ones(len(s))
        found.append((np.maximum(np.nan_to_num(count), 1.0) * b["period_us"],
                      {"period_us": b["period_us"], "limited_by": b["limited_by"], "batches_per_step": batches}))
    pinned = pinned_untimed(s, b)
    rate = pin_rate_gbps(s, pinned, config)
    if rate is not None:
        found.append((pinned / (rate * 1e3),  # bytes / (GB/s) -> us
                      {"period_us": None, "limited_by": "pinning thread", "batches_per_step": batches,
                       "estimated": True, "pinned_bytes_per_step": float(pinned.mean()), "rate_gbps": rate}))
    return max(found, key=lambda fe: float(fe[0].mean())) if found else None


def per_step(t: pd.DataFrame | None, s: pd.DataFrame, value: str) -> np.ndarray:
    """A per-step sum of a column of one of the rank's tables (0 where the table has no row for the step)."""
    if t is None or not len(t) or value not in t:
        return np.zeros(len(s))
    g = t.groupby("step")[value].sum()
    return np.nan_to_num(s["step"].map(g).to_numpy(dtype=float), nan=0.0)
