"""FSDP2's gradient reductions on the training thread, placed in the backward pass they close.

FSDP2 reduces a parameter group's gradients in its post-backward hook, inside the annotation
``FSDP::post_backward_reduce (<module>)`` (the copy into the reduce-scatter input, the reduce-scatter's issue and,
where the backend runs it on the issuing side or the next op needs its result, its wait), after
``FSDP::post_backward_rs_wait (<module>)`` (waiting for the previous group's reduce-scatter). With
``set_requires_gradient_sync(False)`` the hook returns before both (torch 2.4+ FSDP2: the gradients accumulate
unsharded), so their time is what skipping the reduction of a micro-batch removes from the training thread.

``reduction_table`` lists every such annotation of the training thread inside a step, and every reduce-scatter of
the collectives table (any FSDP version, any basis): ``step``, ``pass_`` (the backward pass it closes: the last
pass of the step that started at or before its start, or its issue; -1: before any), ``last_pass`` (that pass is
the step's last), ``kind`` (``reduce`` or ``rs_wait``: an annotation; ``reduce_scatter``: a collective), ``ts_us``
(start, or issue), ``dur_us`` (the annotation's duration, or the collective's execution), ``exposed_us`` (a
collective's exposed time, analyze/comm_exposure.py; NaN for an annotation), ``phase`` (a collective's phase;
None for an annotation). Definitions: docs/communication.md (FSDP).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .events import name_mask, step_at
from ..load.trace import Kind, RankTrace

REDUCE_MARK = "FSDP::post_backward_reduce"
RS_WAIT_MARK = "FSDP::post_backward_rs_wait"
COLUMNS = ["step", "pass_", "last_pass", "kind", "ts_us", "dur_us", "exposed_us", "phase"]


def pass_of(step_index: np.ndarray, ts: np.ndarray, passes: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per time (with its step's index): the backward pass of its step that started last at or before it (-1: none),
    and whether that pass is the step's last."""
    out, last = np.full(len(ts), -1, np.int64), np.zeros(len(ts), bool)
    if not len(passes) or not len(ts):
        return out, last
    for si, pg in passes.groupby("step_index"):
        rows = np.flatnonzero((step_index == int(si)) & np.isfinite(ts))
        if not len(rows):
            continue
        pg = pg.sort_values("start")
        starts, nums = pg["start"].to_numpy(dtype=float), pg["pass_"].to_numpy().astype(np.int64)
        k = np.searchsorted(starts, ts[rows], "right") - 1
        out[rows] = np.where(k >= 0, nums[np.clip(k, 0, None)], -1)
        last[rows] = k == len(starts) - 1
    return out, last


def reduction_table(rank: RankTrace, steps, passes: pd.DataFrame, coll: pd.DataFrame | None = None) -> pd.DataFrame:
    """The training thread's FSDP2 reduction annotations inside steps, and the reduce-scatters of ``coll`` (the
    collectives table with ``step_index``, ``exposed_us``): see the module docstring."""
    parts = [_annotations(rank, steps, passes)]
    if coll is not None and len(coll):
        rs = coll[(coll["name"] == "reduce_scatter") & (coll["step_index"] >= 0)]
        if len(rs):
            ts = rs["cpu_ts_us"].to_numpy(dtype=float)
            p, last = pass_of(rs["step_index"].to_numpy(), ts, passes)
            parts.append(pd.DataFrame({
                "step": rs["step"].to_numpy().astype(np.int64), "pass_": p, "last_pass": last,
                "kind": "reduce_scatter", "ts_us": ts, "dur_us": rs["dur_us"].to_numpy(dtype=float),
                "exposed_us": rs["exposed_us"].to_numpy(dtype=float), "phase": rs["phase"].to_numpy()}))
    parts = [x for x in parts if len(x)]
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(parts, ignore_index=True).sort_values("ts_us", kind="stable").reset_index(drop=True)


def _annotations(rank: RankTrace, steps, passes: pd.DataFrame) -> pd.DataFrame:
    ev = rank.events
    if steps.main_tid is None or not len(ev):
        return pd.DataFrame(columns=COLUMNS)
    reduce = name_mask(ev, lambda s: s.startswith(REDUCE_MARK))
    wait = name_mask(ev, lambda s: s.startswith(RS_WAIT_MARK))
    on = ((reduce | wait) & (ev["kind"].to_numpy() <= int(Kind.USER_ANNOTATION))
          & (ev["tid"].to_numpy() == steps.main_tid))
    rows = np.flatnonzero(on)
    st = steps.table
    if not len(rows) or not len(st):
        return pd.DataFrame(columns=COLUMNS)
    ts = ev["ts"].to_numpy(dtype=float)[rows]
    k = step_at(st["cpu_start"].to_numpy(), st["cpu_end"].to_numpy(), ts, ev["window"].to_numpy()[rows],
                st["window"].to_numpy())
    ok = k >= 0
    rows, ts, k = rows[ok], ts[ok], k[ok]
    p, last = pass_of(k, ts, passes)
    return pd.DataFrame({
        "step": st["step"].to_numpy()[k].astype(np.int64), "pass_": p, "last_pass": last,
        "kind": np.where(reduce[rows], "reduce", "rs_wait"), "ts_us": ts,
        "dur_us": ev["dur"].to_numpy(dtype=float)[rows], "exposed_us": np.nan, "phase": None}, columns=COLUMNS)
