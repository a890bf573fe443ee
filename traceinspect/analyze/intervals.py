"""Interval algebra on numpy arrays: exclusive (priority) attribution of a timeline, measured over any window.

The idea: sweep all intervals once and build, for each category, a cumulative function F_c(t) = time up to t during
which category c was the highest-priority category active. F_c is piecewise linear, so the exclusive time of c in
any window [a, b] is F_c(b) - F_c(a), exactly, by interpolation. Same for "any category active" (busy) and for each
category on its own (union). One sweep serves every step of a rank.

What the sweep keeps is small: the sorted boundary times (8 bytes each), the highest-priority category active in
each segment (1 byte) and whether each category is active in it (1 byte a category). A cumulative function is made
from those when a query asks for it, one category at a time, and dropped after the query: a sweep of millions of
intervals holds 10-20 bytes a boundary, not the 8 bytes a boundary per function of all of them at once.
"""

from __future__ import annotations

import numpy as np


class Timeline:
    """The sweep of ``build_timeline``: boundary times ``t`` (sorted), and per segment ``i = [t[i], t[i+1])`` the
    highest-priority category active (``top``, -1 for none) and each category's activity (``active``)."""

    __slots__ = ("t", "top", "active")

    def __init__(self, t: np.ndarray, top: np.ndarray, active: np.ndarray):
        self.t = t
        self.top = top  # (len(t) - 1,) int8 (int16 past 127 categories)
        self.active = active  # (ncat, len(t) - 1) bool

    @property
    def ncat(self) -> int:
        return self.active.shape[0]

    # The cumulative functions, each (ncat, len(t)) or (len(t),): what a query interpolates.
    @property
    def exclusive(self) -> np.ndarray:
        return np.stack([self._cum(self.top == c) for c in range(self.ncat)]) if self.ncat else \
            np.zeros((0, len(self.t)))

    @property
    def union(self) -> np.ndarray:
        return np.stack([self._cum(self.active[c]) for c in range(self.ncat)]) if self.ncat else \
            np.zeros((0, len(self.t)))

    @property
    def busy(self) -> np.ndarray:
        return self._cum(self.top >= 0)

    def _cum(self, mask: np.ndarray) -> np.ndarray:
        """Cumulative time of the segments in ``mask``: 0 at ``t[0]``, then the running sum of their lengths (made
        in one array: the segments' lengths, zero outside ``mask``, summed in place)."""
        cum = np.empty(len(self.t))
        if len(cum):
            cum[0] = 0.0
            run = cum[1:]
            np.subtract(self.t[1:], self.t[:-1], out=run)  # np.diff(t)
            np.copyto(run, 0.0, where=~mask)
            np.cumsum(run, out=run)
        return cum

    def _at(self, cum: np.ndarray, x) -> np.ndarray:
        if len(self.t) == 0:
            return np.zeros(np.shape(x))
        return np.interp(x, self.t, cum)

    def _between(self, masks, a, b) -> np.ndarray:
        """Per mask (an iterable of segment masks, made one at a time): its time in the windows [a, b]."""
        a = np.atleast_1d(np.asarray(a, float))
        b = np.atleast_1d(np.asarray(b, float))
        out = []
        for mask in masks:
            cum = self._cum(mask)
            out.append(self._at(cum, b) - self._at(cum, a))
            del cum
        return np.stack(out)

    def exclusive_in(self, a, b) -> np.ndarray:
        """Exclusive time per category in windows [a, b] (arrays of windows allowed): shape (ncat, nwin)."""
        return self._between((self.top == c for c in range(self.ncat)), a, b)

    def union_in(self, a, b) -> np.ndarray:
        return self._between((self.active[c] for c in range(self.ncat)), a, b)

    def busy_in(self, a, b) -> np.ndarray:
        return self._between([self.top >= 0], a, b)[0]


def build_timeline(starts: np.ndarray, ends: np.ndarray, cats: np.ndarray, ncat: int) -> Timeline:
    """Sweep intervals [starts, ends) of categories ``cats`` (0 = highest priority) into a ``Timeline``."""
    starts = np.asarray(starts, float)
    return sweep(np.concatenate([starts, np.asarray(ends, float)]) if len(starts) else np.zeros(0), cats, ncat)


def sweep(bounds: np.ndarray, cats: np.ndarray, ncat: int) -> Timeline:
    """``build_timeline`` of the intervals whose starts are the first half of ``bounds`` (float64) and whose ends
    are the second half, in the order of ``cats``. ``bounds`` is the caller's to give away: it is sorted in place
    (the sweep then holds no second copy of it)."""
    small = np.int8 if ncat < 127 else np.int16
    cats = np.asarray(cats).astype(small)
    n = len(cats)
    if n == 0:
        return Timeline(np.zeros(0), np.zeros(0, small), np.zeros((ncat, 0), bool))
    t = bounds
    np.maximum(t[n:], t[:n], out=t[n:])  # an interval never ends before it starts
    order = np.argsort(t, kind="stable")
    sign = np.where(order < n, np.int8(1), np.int8(-1))  # +1 where an interval starts, -1 where it ends
    cat2 = np.concatenate([cats, cats]).take(order) if ncat > 1 else None
    del order
    t.sort(kind="stable")  # the same order as the argsort's: a stable sort has one outcome
    # Active count per category after each boundary; segment i = [t[i], t[i+1]) has the state after boundary i.
    active = np.empty((ncat, 2 * n - 1), bool)
    for c in range(ncat):
        delta = sign if cat2 is None else np.where(cat2 == c, sign, np.int8(0))
        counts = np.cumsum(delta, dtype=np.int32)
        np.greater(counts[:-1], 0, out=active[c])
        del delta, counts
    top = np.full(2 * n - 1, -1, small)
    for c in range(ncat - 1, -1, -1):  # the first active category wins: written last
        top[active[c]] = c
    return Timeline(t, top, active)


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
