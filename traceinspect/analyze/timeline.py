"""One step's GPU activity as intervals, for drawing a timeline (pure: no printing, no plotting).

The report keeps per-step sums, not events; a timeline plot needs the events of one step. ``step_timeline`` cuts
them out of a rank's trace:

* the step window is the one the breakdown uses (``Steps.table`` ``start``/``end``, docs/metrics.md), so what the
  plot shows is exactly what ``breakdown_us`` adds up;
* every kernel, copy and memset that overlaps the window is kept, clipped to the window;
* ``category`` is the breakdown's GPU category (``compute``, ``comm``, ``h2d``, ``d2h``, ``d2d``, ``memset``),
  decided by the same function (``attribution.gpu_category_codes``);
* ``pageable`` marks host<->device copies from pageable memory (``Pageable`` in the copy's name).

Columns: ``step, stream, start_us, end_us, category, name, pageable`` (times on the rank's clock, microseconds,
like ``ra.steps`` ``start_us``/``end_us``). Sorted by stream, then start.

``step_intervals`` turns that table into what the report's ``timeline`` carries: per category the instants the
breakdown gives it, per stream the union of its events, the pageable copies (docs/metrics.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .attribution import name_strings, GPU_CATEGORIES, gpu_category_codes
from .intervals import build_timeline
from .steps import Steps
from ..load.trace import Kind, RankTrace

COLUMNS = ["step", "stream", "start_us", "end_us", "category", "name", "pageable"]


def median_step(steps: Steps) -> int | None:
    """The step whose wall time is the median of the rank's steps (the lower middle for an even count).

    Real steps are preferred over synthetic whole-window ones; ties go to the earlier step. None without steps.
    """
    t = steps.table
    if not len(t):
        return None
    real = t[~t["synthetic"].astype(bool)]
    t = real if len(real) else t
    wall = (t["end"] - t["start"]).to_numpy()
    order = np.argsort(wall, kind="stable")
    pick = order[(len(order) - 1) // 2]
    return int(t["step"].to_numpy()[pick])


def step_timeline(rank_trace: RankTrace, steps: Steps, step_id: int | None = None) -> pd.DataFrame:
    """GPU intervals of one step of one rank: ``step_id``, or the median-wall step when None.

    Returns an empty frame with the same columns when the rank has no GPU events or the step does not exist.
    """
    empty = pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(
        COLUMNS, ("int64", "int64", "float64", "float64", "object", "object", "bool"))})
    if step_id is None:
        step_id = median_step(steps)
    t = steps.table
    if step_id is None or not len(steps.gpu_index):
        return empty
    row = t[t["step"] == int(step_id)]
    if not len(row):
        return empty
    a = float(row["start"].iloc[0])
    b = float(row["end"].iloc[0])
    win = int(row["window"].iloc[0])

    ev = rank_trace.events
    gidx = steps.gpu_index
    ts = ev["ts"].to_numpy()[gidx]
    end = ts + ev["dur"].to_numpy()[gidx]
    # Several files of one rank share one clock and never overlap, so the time test alone selects the window's
    # events; the window test guards against a zero-length step sitting exactly on a file boundary.
    sel = (end > a) & (ts < b) & (ev["window"].to_numpy()[gidx] == win)
    if not sel.any():
        return empty
    rows = gidx[sel]
    cat = gpu_category_codes(ev, rows)
    names = name_strings(ev, rows)
    kind = ev["kind"].to_numpy()[rows]
    stream = ev["stream"].to_numpy()[rows]
    stream = np.where(stream >= 0, stream, ev["tid"].to_numpy()[rows])
    pageable = (kind == int(Kind.MEMCPY)) & (cat >= 2) & (cat <= 3) & np.array(["Pageable" in n for n in names], bool)
    out = pd.DataFrame(
        {
            "step": np.full(len(rows), int(step_id), np.int64),
            "stream": stream.astype(np.int64),
            "start_us": np.maximum(ts[sel], a),
            "end_us": np.minimum(end[sel], b),
            "category": np.array(GPU_CATEGORIES, dtype=object)[cat],
            "name": names.astype(object),
            "pageable": pageable.astype(bool),
        }
    )
    return out.sort_values(["stream", "start_us"], kind="stable").reset_index(drop=True)


def _merge(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [s, e) as sorted, disjoint runs."""
    keep = e > s
    s, e = s[keep], e[keep]
    if not len(s):
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum.accumulate(e[order])
    new = np.empty(len(s), bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.append(e[idx[1:] - 1], e[-1])


def _spans(s: np.ndarray, e: np.ndarray, t0: float) -> list[list[float]]:
    """[[start, duration], ...] in microseconds since the step's start (nanosecond precision)."""
    return [[round(a, 3), round(d, 3)] for a, d in zip((s - t0).tolist(), (e - s).tolist())]


@dataclass(frozen=True)
class StreamIntervals:
    stream: int
    events: dict[str, int]  # category -> number of events
    intervals: dict[str, list[list[float]]]  # category -> [[start, duration], ...], the union of its events


@dataclass(frozen=True)
class StepIntervals:
    """One step's GPU activity as intervals, in microseconds since the step's start (nanosecond precision)."""

    step: int
    start_us: float
    wall_us: float
    steps_in_rank: int
    breakdown: dict[str, list[list[float]]]  # category -> the instants the breakdown gives it
    streams: list[StreamIntervals]
    pageable: list[list[float]]  # the pageable host<->device copies


def step_intervals(tl: pd.DataFrame | None, step_table: pd.DataFrame) -> StepIntervals | None:
    """The one step the timeline plot shows (``tl``: ``step_timeline``'s table, the median-wall step), as intervals.

    ``breakdown``: per GPU category, the instants the step's breakdown gives that category (the highest-priority
    category running, docs/metrics.md), so each list's durations add up to the step's ``breakdown_us`` entry;
    ``streams``: per stream and category, the union of its events (``events`` counts them); ``pageable``: the
    pageable host<->device copies. Times are microseconds since the step's start. None without GPU events.
    """
    if tl is None or not len(tl):
        return None
    step = int(tl["step"].iloc[0])
    row = step_table[step_table["step"] == step]
    if len(row):
        t0, wall = float(row["start_us"].iloc[0]), float(row["wall_us"].iloc[0])
    else:  # a step the step table does not have: framed by its own events
        t0 = float(tl["start_us"].min())
        wall = float(tl["end_us"].max()) - t0
    start = tl["start_us"].to_numpy(float)
    end = tl["end_us"].to_numpy(float)
    codes = np.array([GPU_CATEGORIES.index(c) for c in tl["category"]], np.int64)
    ex = build_timeline(start, end, codes, len(GPU_CATEGORIES))
    gain = np.diff(ex.exclusive, axis=1) > 0  # segment i of the sweep belongs to the category whose time grew
    breakdown = {}
    for i, cat in enumerate(GPU_CATEGORIES):
        if gain[i].any():
            breakdown[cat] = _spans(*_merge(ex.t[:-1][gain[i]], ex.t[1:][gain[i]]), t0)
    streams = []
    for sid, g in tl.groupby("stream", sort=True):
        lane = StreamIntervals(stream=int(sid), events={}, intervals={})
        for cat, gc in g.groupby("category", sort=False):
            lane.events[str(cat)] = int(len(gc))
            lane.intervals[str(cat)] = _spans(*_merge(gc["start_us"].to_numpy(float), gc["end_us"].to_numpy(float)), t0)
        streams.append(lane)
    pg = tl[tl["pageable"].astype(bool)]
    return StepIntervals(step=step, start_us=t0, wall_us=wall, steps_in_rank=int(len(step_table)),
                         breakdown=breakdown, streams=streams,
                         pageable=_spans(pg["start_us"].to_numpy(float), pg["end_us"].to_numpy(float), t0))
