"""Small helpers shared by rules: step selection and formatting of evidence numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd


def gbps(nbytes: float, us: float) -> float | None:
    """GB/s (1e9 bytes per second) from bytes and microseconds."""
    return float(nbytes) / float(us) / 1e3 if us and us > 0 else None


def severity_for(share: float, warning: float, critical: float) -> str | None:
    if share >= critical:
        return "critical"
    if share >= warning:
        return "warning"
    return None


def step_ids(df: pd.DataFrame, mask) -> list[int]:
    return [int(s) for s in df.loc[np.asarray(mask, bool), "step"]]


def mean(x) -> float:
    x = np.asarray(x, float)
    return float(np.nanmean(x)) if len(x) and not np.all(np.isnan(x)) else 0.0
