"""Interval algebra on numpy arrays: exclusive (priority) attribution of a timeline, measured over any window.

The idea: sweep all intervals once and build, for each category, a cumulative function F_c(t) = time up to t during
which category c was the highest-priority category active. F_c is piecewise linear, so the exclusive time of c in
any window [a, b] is F_c(b) - F_c(a), exactly, by interpolation. Same for "any category active" (busy) and for each
category on its own (union). One sweep serves every step of a rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Timeline:
    t: np.ndarray  # boundary times, sorted
    exclusive: np.ndarray  # (ncat, len(t)) cumulative exclusive time per category
    union: np.ndarray  # (ncat, len(t)) cumulative time each category is active at all
    busy: np.ndarray  # (len(t),) cumulative time any category is active

    @property
    def ncat(self) -> int:
        return self.exclusive.shape[0]

    def _at(self, cum: np.ndarray, x) -> np.ndarray:
        if len(self.t) == 0:
            return np.zeros(np.shape(x))
        return np.interp(x, self.t, cum)

    def exclusive_in(self, a, b) -> np.ndarray:
        """Exclusive time per category in windows [a, b] (arrays of windows allowed): shape (ncat, nwin)."""
        a = np.atleast_1d(np.asarray(a, float))
        b = np.atleast_1d(np.asarray(b, float))
        return np.stack([self._at(self.exclusive[c], b) - self._at(self.exclusive[c], a) for c in range(self.ncat)])

    def union_in(self, a, b) -> np.ndarray:
        a = np.atleast_1d(np.asarray(a, float))
        b = np.atleast_1d(np.asarray(b, float))
        return np.stack([self._at(self.union[c], b) - self._at(self.union[c], a) for c in range(self.ncat)])

    def busy_in(self, a, b) -> np.ndarray:
        a = np.atleast_1d(np.asarray(a, float))
        b = np.atleast_1d(np.asarray(b, float))
        return self._at(self.busy, b) - self._at(self.busy, a)


def build_timeline(starts: np.ndarray, ends: np.ndarray, cats: np.ndarray, ncat: int) -> Timeline:
    """Sweep intervals [starts, ends) of categories ``cats`` (0 = highest priority) into cumulative functions."""
    starts = np.asarray(starts, float)
    ends = np.maximum(np.asarray(ends, float), starts)
    cats = np.asarray(cats, np.int64)
    n = len(starts)
    if n == 0:
        z = np.zeros((ncat, 0))
        return Timeline(np.zeros(0), z, z, np.zeros(0))
    t = np.concatenate([starts, ends])
    delta = np.concatenate([np.ones(n, np.int32), -np.ones(n, np.int32)])
    cat2 = np.concatenate([cats, cats])
    order = np.argsort(t, kind="stable")
    t = t[order]
    delta = delta[order]
    cat2 = cat2[order]
    # Active count per category after each boundary.
    counts = np.zeros((ncat, 2 * n), np.int32)
    for c in range(ncat):
        counts[c] = np.cumsum(np.where(cat2 == c, delta, 0))
    seg = np.diff(t)  # segment i = [t[i], t[i+1]), state = counts[:, i]
    active = counts[:, :-1] > 0
    any_active = active.any(axis=0)
    top = np.where(any_active, np.argmax(active, axis=0), -1)
    exclusive = np.zeros((ncat, 2 * n))
    union = np.zeros((ncat, 2 * n))
    for c in range(ncat):
        exclusive[c, 1:] = np.cumsum(np.where(top == c, seg, 0.0))
        union[c, 1:] = np.cumsum(np.where(active[c], seg, 0.0))
    busy = np.zeros(2 * n)
    busy[1:] = np.cumsum(np.where(any_active, seg, 0.0))
    return Timeline(t, exclusive, union, busy)


def union_length(starts: np.ndarray, ends: np.ndarray, a: float, b: float) -> float:
    """Length of the union of intervals clipped to [a, b]."""
    s = np.clip(np.asarray(starts, float), a, b)
    e = np.clip(np.asarray(ends, float), a, b)
    keep = e > s
    if not keep.any():
        return 0.0
    s, e = s[keep], e[keep]
    order = np.argsort(s)
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    # A new run starts where an interval begins after everything before it ended.
    new = np.empty(len(s), bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    run_starts = s[idx]
    run_ends = np.append(run_end[idx[1:] - 1], run_end[-1])
    return float((run_ends - run_starts).sum())
