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


_AS_IS = {str, type(None)}  # what ``clean`` gives back unchanged, whatever the column


def clean_records(table: pd.DataFrame) -> list[dict]:
    """``[clean(r) for r in table.to_dict("records")]``, column by column: numeric columns convert in one call each
    (NaN and infinities -> None), only object columns holding more than strings and None go value by value."""
    names = [str(c) for c in table.columns]
    cols = []
    for i in range(table.shape[1]):
        col = table.iloc[:, i]
        kind = col.dtype.kind if isinstance(col.dtype, np.dtype) else "O"
        if kind == "f":
            a = col.to_numpy()
            vals = a.tolist()
            for j in np.flatnonzero(~np.isfinite(a)).tolist():
                vals[j] = None
        elif kind in "iub":
            vals = col.tolist()
        else:
            vals = col.tolist()
            if not set(map(type, vals)) <= _AS_IS:  # strings and None stay as they are: the rest value by value
                vals = [clean(x) for x in vals]
        cols.append(vals)
    return [dict(zip(names, row)) for row in zip(*cols)]
