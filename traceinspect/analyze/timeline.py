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
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .attribution import name_strings, GPU_CATEGORIES, gpu_category_codes
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
