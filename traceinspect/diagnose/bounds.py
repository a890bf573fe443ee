"""What bounds a faster step: the CPU's own work, the DataLoader's pace, the casts bf16 autocast adds.

Helpers of the accounting (accounting.py; the model is docs/findings.md): per-step arrays from the step columns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def col(s: pd.DataFrame, name: str) -> np.ndarray:
    """A step column as floats, 0 where unknown (or absent)."""
    if name not in s:
        return np.zeros(len(s))
    return np.nan_to_num(s[name].to_numpy(dtype=float), nan=0.0)


def cpu_floor(s: pd.DataFrame) -> np.ndarray:
    """The CPU's own work of each step: its span less the time it only waited (for the GPU, for a batch)."""
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
