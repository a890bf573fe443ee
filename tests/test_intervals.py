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
