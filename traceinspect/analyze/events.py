"""Which events are which, and which step holds a time: the two questions every analysis asks, answered once.

A *runtime call* is a CUDA/HIP runtime or driver API event (``cuda_runtime`` / ``cuda_driver`` in the trace);
the ones that carry a correlation id (>= 0) are those that can link to GPU work. A step *holds* a time when the
time lies in the step's ``[start, end)`` (and, given windows, in the same profiling window).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..load.trace import Kind


def runtime_mask(ev: pd.DataFrame) -> np.ndarray:
    """Per event: whether it is a runtime or driver API call."""
    kind = ev["kind"].to_numpy()
    return (kind == int(Kind.RUNTIME)) | (kind == int(Kind.DRIVER))


def linked_runtime_rows(ev: pd.DataFrame) -> np.ndarray:
    """Rows of the runtime / driver calls that carry a correlation id (the ones that can launch GPU work)."""
    return np.flatnonzero(runtime_mask(ev) & (ev["corr"].to_numpy() >= 0))


# The profiler's annotation of a DataLoader fetch: ``enumerate(DataLoader)#_...DataLoaderIter.__next__``.
LOADER_FETCH = "enumerate(DataLoader)"


class EndTimes:
    """``ends[rows]``: the end times (``ts + dur``, us) of the given rows of the events, computed for those rows only
    (the same values as indexing the whole column's sum, without holding 8 bytes an event of it)."""

    __slots__ = ("_ts", "_dur")

    def __init__(self, ev: pd.DataFrame):
        self._ts = ev["ts"].to_numpy()
        self._dur = ev["dur"].to_numpy()

    def __getitem__(self, rows):
        return self._ts[rows] + self._dur[rows]

    def __len__(self) -> int:
        return len(self._ts)


def row_bounds(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """The rows' start times then their end times (``ts + dur``, us), as one float64 array of ``2 * len(rows)``:
    the intervals ``intervals.sweep`` takes, made without a column's worth of temporaries."""
    n = len(rows)
    out = np.empty(2 * n)
    np.take(ev["ts"].to_numpy(), rows, out=out[:n], mode="clip")  # rows are in range: "clip" only skips a copy
    np.take(ev["dur"].to_numpy(), rows, out=out[n:], mode="clip")
    np.add(out[:n], out[n:], out=out[n:])
    return out


def name_mask(ev: pd.DataFrame, pred) -> np.ndarray:
    """Rows whose name satisfies ``pred``: the predicate runs once per distinct name."""
    hits = [i for i, c in enumerate(ev["name"].cat.categories) if pred(str(c))]
    return isin(ev["name"].cat.codes.to_numpy(), np.array(hits, np.int64))  # code -1 is in no hits


def unique_ints(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of an integer array, as ``np.unique`` gives them, by sorting: numpy's own
    (hash-based) unique takes ~2 us an element where most values are distinct, sorting ~50 ns."""
    s = np.sort(values)
    if len(s) < 2:
        return s
    keep = np.empty(len(s), bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def starts_in(ts: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """How many of the times ``ts`` fall in each window [start, end)."""
    t = np.sort(ts)
    return np.searchsorted(t, ends, "left") - np.searchsorted(t, starts, "left")


def rows_sharing_corr(ev: pd.DataFrame, rows: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Those of ``rows`` whose (window, correlation) is the (window, correlation) of one of ``targets``."""
    win, corr = ev["window"].to_numpy(), ev["corr"].to_numpy()
    keys = window_keys(win, corr)
    if keys is None:
        index = pd.MultiIndex.from_arrays([win[targets], corr[targets]])
        return rows[pd.MultiIndex.from_arrays([win[rows], corr[rows]]).isin(index)]
    return rows[isin(keys[rows], keys[targets])]


def isin(values: np.ndarray, among) -> np.ndarray:
    """``np.isin`` for integer ids (a categorical's codes, threads, correlations): a comparison per wanted value
    where they are few (a predicate on names mostly picks a few, a rank has a few threads: a fraction of any lookup
    on millions of values), a lookup table over the range of ``among`` where that range is small (ids are dense:
    ten times faster than sorting), else a hash lookup."""
    among = np.asarray(among)
    if not len(values) or not len(among):
        return np.zeros(len(values), bool)
    if len(among) <= _FEW:
        out = np.zeros(len(values), bool)
        eq = np.empty(len(values), bool)
        fits = np.iinfo(values.dtype) if values.dtype.kind in "iu" else None
        for w in np.unique(among).tolist():
            if fits is None or fits.min <= w <= fits.max:  # a value past the values' type equals none of them
                np.equal(values, w, out=eq)
                out |= eq
        return out
    if int(among.max()) - int(among.min()) < (1 << 25):
        return np.isin(values, among, kind="table")
    return pd.Series(values).isin(among).to_numpy()


_FEW = 3


def window_keys(win: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
    """Each (window, id) pair as one int64, equal exactly when both are equal (a join on one integer column is
    several times faster than on two); None where the ids are too large to share an int64 with the window."""
    keys = pair_keys([(win, ids)])
    return None if keys is None else keys[0]


def pair_keys(pairs: list[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray] | None:
    """``window_keys`` of several (windows, ids) arrays, comparable across them."""
    wins = [w for w, _ in pairs if len(w)]
    span = max(int(w.max()) for w in wins) + 1 if wins else 1
    if span == 1:
        return [ids.astype(np.int64, copy=False) for _, ids in pairs]
    ids_all = [i for _, i in pairs if len(i)]
    lo = min(int(i.min()) for i in ids_all)
    hi = max(int(i.max()) for i in ids_all)
    if lo * span < -(1 << 62) or (hi + 1) * span > (1 << 62):
        return None
    return [ids.astype(np.int64) * span + w for w, ids in pairs]


def step_at(starts: np.ndarray, ends: np.ndarray, t: np.ndarray, win: np.ndarray | None = None,
            step_win: np.ndarray | None = None) -> np.ndarray:
    """Index of the step whose ``[start, end)`` holds each time of ``t``, or -1 (``starts`` ascending). Given the
    times' windows ``win`` and the steps' ``step_win``, the step must also be of the same window. NaN times
    fall in no step."""
    t = np.asarray(t)
    if not len(starts):
        return np.full(len(t), -1, np.int64)
    k = np.searchsorted(starts, t, side="right") - 1
    kk = np.clip(k, 0, None)
    ok = (k >= 0) & (t < ends[kk])
    if win is not None:
        ok &= win == step_win[kk]
    return np.where(ok, k, -1)
