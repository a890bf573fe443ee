"""Analysis values made JSON-safe for the report's records."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def clean(v):
    """numpy / pandas scalars -> JSON-safe Python values (NaN -> None)."""
    if v is None:
        return None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return None if math.isnan(f) or math.isinf(f) else f
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        return [clean(x) for x in v]
    if v is pd.NA:
        return None
    return v
