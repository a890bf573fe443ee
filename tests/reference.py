"""Independent reference computations the tests hold the program's numbers against: plain Python over raw trace
events, sharing no code with traceinspect."""

from __future__ import annotations


def union_us(intervals, a: float = float("-inf"), b: float = float("inf")) -> float:
    """Length of the union of (start, end) intervals clipped to [a, b], by sorting and merging."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted((max(s, a), min(e, b)) for s, e in intervals if min(e, b) > max(s, a)):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total
