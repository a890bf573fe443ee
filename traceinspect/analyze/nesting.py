"""Nesting of CPU records: which record on the same (window, thread) encloses another. The collectives table
uses it to tell an issuing record from the records inside it."""

from __future__ import annotations

import numpy as np
import pandas as pd


def _enclosing(outer: pd.DataFrame, inner: pd.DataFrame) -> np.ndarray:
    """For each inner row, the position (in ``outer``) of the latest-starting outer row on the same (window, tid)
    that encloses it (outer.ts <= inner.ts and inner.end <= outer.end), or -1. Frames need ts, end, window, tid."""
    out = np.full(len(inner), -1, np.int64)
    if not len(outer) or not len(inner):
        return out
    o = outer.reset_index(drop=True)
    inner = inner.reset_index(drop=True)
    for (w, t), ig in inner.groupby(["window", "tid"], sort=False):
        og = o[(o["window"] == w) & (o["tid"] == t)]
        if not len(og):
            continue
        og = og.sort_values("ts", kind="stable")
        ots = og["ts"].to_numpy()
        oend = og["end"].to_numpy()
        opos = og.index.to_numpy()
        its = ig["ts"].to_numpy()
        iend = ig["end"].to_numpy()
        k = np.searchsorted(ots, its, side="right") - 1
        ok = k >= 0
        kk = np.clip(k, 0, None)
        # The latest start may be a sibling that already ended; walk back a few candidates (nesting is shallow).
        res = np.full(len(ig), -1, np.int64)
        for step_back in range(4):
            idx = kk - step_back
            valid = ok & (idx >= 0) & (res < 0)
            if not valid.any():
                break
            idx_c = np.clip(idx, 0, None)
            hit = valid & (oend[idx_c] >= iend - 1e-6)
            res[hit] = opos[idx_c[hit]]
        out[ig.index.to_numpy()] = res
    return out


def _nested(df: pd.DataFrame) -> np.ndarray:
    """For each row, whether it lies inside an earlier-starting row of the same frame on the same (window, tid)."""
    out = np.zeros(len(df), bool)
    if len(df) < 2:
        return out
    d = df.reset_index(drop=True)
    for _, g in d.groupby(["window", "tid"], sort=False):
        g = g.sort_values(["ts", "end"], ascending=[True, False], kind="stable")
        ends = g["end"].to_numpy()
        prev = np.concatenate([[-np.inf], np.maximum.accumulate(ends)[:-1]])
        out[g.index.to_numpy()] = g["end"].to_numpy() <= prev
    return out


def _frame(ev: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """The given event rows as the (row, ts, end, window, tid) frame the nesting helpers take."""
    ts = ev["ts"].to_numpy()[rows]
    return pd.DataFrame(
        {"row": rows, "ts": ts, "end": ts + ev["dur"].to_numpy()[rows], "window": ev["window"].to_numpy()[rows],
         "tid": ev["tid"].to_numpy()[rows]}
    )
