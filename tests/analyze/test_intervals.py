"""Interval algebra on small constructed inputs (hand-built intervals, not traces): exact semantics."""

import numpy as np
import pytest

from traceinspect.analyze.intervals import build_timeline, union_length


def test_priority_exclusive_and_union():
    # cat 0 on [0, 10), cat 1 on [5, 20), cat 2 on [18, 30)
    tl = build_timeline(np.array([0, 5, 18.0]), np.array([10, 20, 30.0]), np.array([0, 1, 2]), 3)
    ex = tl.exclusive_in(0, 40)[:, 0]
    assert ex.tolist() == [10, 10, 10]  # 0:[0,10) 1:[10,20) 2:[20,30)
    un = tl.union_in(0, 40)[:, 0]
    assert un.tolist() == [10, 15, 12]
    assert tl.busy_in(0, 40)[0] == 30


def test_window_clipping_is_exact():
    tl = build_timeline(np.array([0, 5.0]), np.array([10, 20.0]), np.array([1, 0]), 2)
    ex = tl.exclusive_in([0, 7], [7, 25])
    # window [0,7): cat1 alone on [0,5), cat0 on [5,7)  | window [7,25): cat0 [7,20), cat1 none
    assert ex[:, 0].tolist() == [2, 5]
    assert ex[:, 1].tolist() == [13, 0]
    assert tl.busy_in([0, 7], [7, 25]).tolist() == [7, 13]


def test_overlapping_same_category_counts_once():
    tl = build_timeline(np.array([0, 2, 4.0]), np.array([5, 3, 9.0]), np.zeros(3, int), 1)
    assert tl.union_in(0, 10)[0, 0] == 9
    assert tl.exclusive_in(0, 10)[0, 0] == 9


def test_empty():
    tl = build_timeline(np.array([]), np.array([]), np.array([], int), 2)
    assert tl.exclusive_in(0, 5).tolist() == [[0.0], [0.0]]


@pytest.mark.parametrize(
    "s,e,a,b,expect",
    [([0, 2], [3, 5], 0, 10, 5), ([0, 6], [3, 9], 0, 10, 6), ([0, 1], [10, 2], 2, 4, 2), ([], [], 0, 1, 0)],
)
def test_union_length(s, e, a, b, expect):
    assert union_length(np.array(s, float), np.array(e, float), a, b) == expect


def _dense(starts, ends, cats, ncat):
    """The sweep's cumulative functions written out in full (every category's exclusive and union time and the
    busy time at every boundary): the reference the compact ``Timeline`` is checked against."""
    starts = np.asarray(starts, float)
    ends = np.maximum(np.asarray(ends, float), starts)
    t = np.concatenate([starts, ends])
    delta = np.concatenate([np.ones(len(starts), int), -np.ones(len(starts), int)])
    cat2 = np.concatenate([cats, cats])
    order = np.argsort(t, kind="stable")
    t, delta, cat2 = t[order], delta[order], cat2[order]
    active = np.stack([np.cumsum(np.where(cat2 == c, delta, 0)) for c in range(ncat)])[:, :-1] > 0
    top = np.where(active.any(axis=0), np.argmax(active, axis=0), -1)
    seg = np.diff(t)

    def cum(mask):
        return np.concatenate([[0.0], np.cumsum(np.where(mask, seg, 0.0))])

    return t, [cum(top == c) for c in range(ncat)], [cum(active[c]) for c in range(ncat)], cum(top >= 0)


@pytest.mark.parametrize("seed", range(20))
def test_compact_sweep_equals_the_dense_functions(seed):
    """Ties, nesting, zero-length and inverted intervals: every query equals interpolating the full functions,
    bit for bit, and the sweep holds 9 + ncat bytes a boundary (not 8 per function)."""
    rng = np.random.default_rng(seed)
    n, ncat = int(rng.integers(1, 2000)), int(rng.integers(1, 7))
    s = np.round(rng.uniform(0, 500, n), int(rng.integers(0, 2)))
    e = s + np.round(rng.exponential(4, n), 1) * (rng.uniform(size=n) > 0.1) - (3 if seed % 4 == 0 else 0)
    c = rng.integers(0, ncat, n)
    a = np.sort(rng.uniform(-5, 505, 30))
    b = a + rng.uniform(0, 80, 30)
    tl = build_timeline(s, e, c, ncat)
    t, excl, union, busy = _dense(s, e, c, ncat)
    assert tl.t.tobytes() == t.tobytes()
    for got, want in ((tl.exclusive_in(a, b), excl), (tl.union_in(a, b), union)):
        assert got.tobytes() == np.stack([np.interp(b, t, f) - np.interp(a, t, f) for f in want]).tobytes()
    assert tl.busy_in(a, b).tobytes() == (np.interp(b, t, busy) - np.interp(a, t, busy)).tobytes()
    assert tl.exclusive.tobytes() == np.stack(excl).tobytes() and tl.busy.tobytes() == busy.tobytes()
    assert tl.t.nbytes + tl.top.nbytes + tl.active.nbytes <= 2 * n * (9 + ncat)
