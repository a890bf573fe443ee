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


def _period(section) -> float | None:
    v = section.get("period_us") if isinstance(section, dict) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v <= 0:
        return None
    return float(v)


def loader_period_us(ra) -> float | None:
    """The least time a step fed by the rank's DataLoader can take, where the capture measured it: the larger of
    the period the pre-loop probe saw (``loader_probe``: batches drawn with no training work) and the workers'
    busy time per batch during the recorded steps over the number of workers (``loader_timing``). Both can only
    be shorter than the loader's real period (neither counts the training process's own share of each batch), so
    the bound they give is safe. None where the trace has neither."""
    meta = ra.metadata or {}
    found = [p for p in (_period(meta.get("loader_probe")), _period(meta.get("loader_timing"))) if p is not None]
    return max(found) if found else None
