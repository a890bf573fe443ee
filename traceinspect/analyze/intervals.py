"""Interval algebra on numpy arrays: exclusive (priority) attribution of a timeline, measured over any window.

The idea: sweep all intervals once and build, for each category, a cumulative function F_c(t) = time up to t during
which category c was the highest-priority category active. F_c is piecewise linear, so the exclusive time of c in
any window [a, b] is F_c(b) - F_c(a), exactly, by interpolation. Same for "any category active" (busy) and for each
category on its own (union). One sweep serves every step of a rank.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np


class Timeline:
    """The sweep of a set of intervals: boundary times ``t`` (sorted) and, per segment [t[i], t[i+1]), which
    categories are active and which one is on top. The cumulative functions (each an ``(ncat, len(t))`` array, or
    ``(len(t),)`` for ``busy``) are summed from these the first time they are asked for, so a caller that reads
    only the union, or only the exclusive time, pays for that one."""

    def __init__(self, t: np.ndarray, seg: np.ndarray, active: np.ndarray, any_active: np.ndarray,
                 top: np.ndarray, ncat: int):
        self.t = t
        self._seg, self._active, self._any, self._top = seg, active, any_active, top
        self._ncat = ncat
        self._finite = bool(np.isfinite(seg).all())

    @property
    def ncat(self) -> int:
        return self._ncat

    def _cum(self, on: np.ndarray) -> np.ndarray:
        out = np.zeros(len(self.t))
        if len(self.t) > 1:
            if self._finite:  # a finite length times 1 or 0 is the length or 0.0, exactly as np.where picks them
                np.cumsum(np.multiply(self._seg, on), out=out[1:])
            else:
                np.cumsum(np.where(on, self._seg, 0.0), out=out[1:])
        return out

    @cached_property
    def busy(self) -> np.ndarray:
        """Cumulative time any category is active."""
        return self._cum(self._any)

    @cached_property
    def exclusive(self) -> np.ndarray:
        """Cumulative exclusive time per category (the highest-priority active one)."""
        if self._ncat == 1:  # with one category, on top exactly where anything is active
            return self.busy[None, :]
        out = np.zeros((self._ncat, len(self.t)))
        for c in range(self._ncat):
            out[c] = self._cum(self._top == c)
        return out

    @cached_property
    def union(self) -> np.ndarray:
        """Cumulative time each category is active at all."""
        if self._ncat == 1:
            return self.busy[None, :]
        out = np.zeros((self._ncat, len(self.t)))
        for c in range(self._ncat):
            out[c] = self._cum(self._active[c])
        return out

    def _at(self, cum: np.ndarray, x) -> np.ndarray:
        if len(self.t) == 0:
            return np.zeros(np.shape(x))
        return np.interp(x, self.t, cum)

    def exclusive_in(self, a, b) -> np.ndarray:
        """Exclusive time per category in windows [a, b] (arrays of windows allowed): shape (ncat, nwin)."""
        a = np.atleast_1d(np.asarray(a, float))
        b = np.atleast_1d(np.asarray(b, float))
        cum = self.exclusive
        return np.stack([self._at(cum[c], b) - self._at(cum[c], a) for c in range(self.ncat)])

    def union_in(self, a, b) -> np.ndarray:
        a = np.atleast_1d(np.asarray(a, float))
        b = np.atleast_1d(np.asarray(b, float))
        cum = self.union
        return np.stack([self._at(cum[c], b) - self._at(cum[c], a) for c in range(self.ncat)])

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
        empty = np.zeros((ncat, 0), bool)
        return Timeline(np.zeros(0), np.zeros(0), empty, np.zeros(0, bool), np.zeros(0, np.int64), ncat)
    t = np.concatenate([starts, ends])
    delta = np.concatenate([np.ones(n, np.int32), -np.ones(n, np.int32)])
    order = np.argsort(t, kind="stable")
    t = t[order]
    delta = delta[order]
    seg = np.diff(t)  # segment i = [t[i], t[i+1]), state = the active counts after boundary i
    if ncat == 1 and not cats.any():  # one category: the count is of every interval
        active = (np.cumsum(delta)[:-1] > 0)[None, :]
        any_active = active[0]
        top = np.where(any_active, 0, -1)
    else:
        cat2 = np.concatenate([cats, cats])[order]
        # Active count per category after each boundary (counted in place: +1 / -1 where the category is c).
        active = np.empty((ncat, 2 * n - 1), bool)
        count = np.empty(2 * n, np.int32)
        for c in range(ncat):
            np.multiply(delta, cat2 == c, out=count)
            np.cumsum(count, out=count)
            np.greater(count[:-1], 0, out=active[c])
        any_active = active.any(axis=0)
        top = np.full(2 * n - 1, -1, np.int64)  # the highest-priority (lowest) active category, -1 for none
        for c in range(ncat - 1, -1, -1):
            top[active[c]] = c
    return Timeline(t, seg, active, any_active, top, ncat)


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
