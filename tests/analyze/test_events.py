"""events.step_at against a direct scan over the steps, on constructed step windows (not trace data)."""

import numpy as np
from hypothesis import given, strategies as st

from traceinspect.analyze.events import isin, step_at


def _scan(starts, ends, t, win=None, step_win=None):
    """The latest-starting step with start <= t whose [start, end) holds t (same window when given), else -1."""
    out = []
    for i, x in enumerate(t):
        k = max((j for j, s in enumerate(starts) if s <= x), default=-1)
        ok = k >= 0 and x < ends[k] and (win is None or win[i] == step_win[k])
        out.append(k if ok else -1)
    return np.array(out, np.int64)


steps_st = st.lists(st.tuples(st.floats(0, 100), st.floats(0, 20), st.integers(0, 1)), max_size=8)
times_st = st.lists(st.tuples(st.floats(-10, 130), st.integers(0, 1)), max_size=20)


@given(steps_st, times_st)
def test_step_at_matches_scan(steps, times):
    steps = sorted(steps)
    starts = np.array([s for s, _, _ in steps], float)
    ends = starts + np.array([d for _, d, _ in steps], float)
    sw = np.array([w for _, _, w in steps], np.int64)
    t = np.array([x for x, _ in times], float)
    win = np.array([w for _, w in times], np.int64)
    assert np.array_equal(step_at(starts, ends, t), _scan(starts, ends, t))
    assert np.array_equal(step_at(starts, ends, t, win, sw), _scan(starts, ends, t, win, sw))


def test_nan_and_no_steps():
    assert step_at(np.array([0.0]), np.array([10.0]), np.array([np.nan, 5.0])).tolist() == [-1, 0]
    assert step_at(np.empty(0), np.empty(0), np.array([1.0, 2.0])).tolist() == [-1, -1]


@given(st.lists(st.integers(-1, 40), max_size=60), st.lists(st.integers(0, 40), max_size=12, unique=True))
def test_isin_of_codes_equals_numpy_isin(codes, hits):
    """Categorical codes (-1: none) against few hits (one comparison each) and many (``isin``): never the -1."""
    for dtype in (np.int8, np.int16, np.int32, np.int64):
        c = np.array(codes, dtype)
        assert np.array_equal(isin(c, hits), np.isin(c, hits)), dtype


@given(st.lists(st.integers(-(1 << 62), 1 << 62), max_size=40), st.lists(st.integers(-(1 << 62), 1 << 62), max_size=6))
def test_isin_takes_ids_of_any_size(values, wanted):
    """Thread ids and the like, spread over the whole int64 range: few or many wanted, the same as ``np.isin``."""
    v = np.array(values, np.int64)
    assert np.array_equal(isin(v, wanted), np.isin(v, np.array(wanted, np.int64)))
