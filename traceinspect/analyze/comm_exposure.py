"""Exposed communication per collective: the time of a step the rank waits for each collective, so the exposed
time can be split by kind (all-gather, reduce-scatter, all-reduce, send/recv, ...) and process group.

A collective's *wait window* is the span from its issue to the end of its execution; its exposed time is the part
of that window, inside its step, where the rank does nothing else useful:

* GPU ranks: the collective's NCCL kernel(s) (``kernel_ts_us`` .. end) while no compute kernel runs (the
  timeline's ``comm_exposed`` split by collective);
* CPU ranks (gloo): from its issue op's start to the end of its gloo work, while the training thread runs no
  leaf op (an op with no op inside it) other than collective ops and what runs inside them: the thread sits in
  the collective, or idle waiting for it (FSDP2 waits inside ``FSDP::all_gather (N)`` / ``post_backward_reduce``).

Where windows overlap, an instant is charged once, to the collective issued first among those in flight (gloo and
NCCL run a group's collectives in issue order). Definitions: docs/communication.md (Exposed time per kind).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .attribution import gpu_category_codes, name_mask
from .events import EndTimes
from ..load.trace import Kind, RankTrace

COMM_PREFIXES = ("gloo:", "nccl:", "rccl:", "c10d::", "_c10d_functional::", "record_param_comms")


def merged(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as disjoint sorted intervals."""
    if not len(starts):
        return np.empty(0), np.empty(0)
    o = np.argsort(starts, kind="stable")
    s, e = starts[o].astype(float), ends[o].astype(float)
    run_end = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > run_end[:-1]]
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx)


def charge(ws: np.ndarray, we: np.ndarray, bs: np.ndarray, be: np.ndarray) -> np.ndarray:
    """Per window (in issue order): its time not covered by the busy union (bs, be) nor by an earlier window.

    All windows at once: each starts where the earlier ones reached, so what is left of them is disjoint, and the
    busy intervals each covers are found by two searches; the covered time is summed per window as a sum over its
    overlaps would (in order, numpy's pairwise sum where it covers 8 intervals or more)."""
    out = np.zeros(len(ws))
    if not len(ws):
        return out
    reach = np.empty(len(ws))
    reach[0] = -np.inf  # end of the union of the earlier windows
    np.maximum.accumulate(we[:-1], out=reach[1:])
    a, b = np.maximum(ws, reach), np.asarray(we, float)
    live = np.flatnonzero(b > a)
    a, b = a[live], b[live]
    i, j = np.searchsorted(be, a, "right"), np.searchsorted(bs, b, "left")
    count = np.maximum(j - i, 0)
    covered = np.zeros(len(live))
    first = np.cumsum(count) - count  # where each window's overlaps start in the flat list
    if count.sum():
        w = np.repeat(np.arange(len(live)), count)
        k = i[w] + (np.arange(len(w)) - first[w])  # the busy interval of each (window, interval) pair
        over = np.clip(np.minimum(be[k], b[w]) - np.maximum(bs[k], a[w]), 0, None)
        has = count > 0
        covered[has] = np.add.reduceat(over, first[has])  # in order, as a sum of fewer than 8 values is
        for q in np.flatnonzero(count >= 8):
            covered[q] = over[first[q]:first[q] + count[q]].sum()
    out[live] = (b - a) - covered
    return out


def _windows(coll: pd.DataFrame, basis: str) -> tuple[np.ndarray, np.ndarray]:
    if basis == "gpu":
        s = coll["kernel_ts_us"].to_numpy(dtype=float)
        return s, s + coll["kernel_dur_us"].to_numpy(dtype=float)
    s = coll["cpu_ts_us"].to_numpy(dtype=float)
    issue_end = s + coll["cpu_dur_us"].to_numpy(dtype=float)
    exec_end = coll["ts_us"].to_numpy(dtype=float) + coll["dur_us"].to_numpy(dtype=float)
    return s, np.fmax(issue_end, exec_end)


def _busy(rank: RankTrace, steps, basis: str) -> tuple[np.ndarray, np.ndarray]:
    """What the rank does instead of waiting: compute kernels (GPU), or the training thread's leaf ops outside
    collective ops (CPU), as a disjoint union."""
    ev = rank.events
    ts = ev["ts"].to_numpy(dtype=float)
    end = EndTimes(ev)
    if basis == "gpu":
        g = steps.gpu_index
        comp = g[(gpu_category_codes(ev, g) == 0) & (ev["kind"].to_numpy()[g] == int(Kind.KERNEL))]
        return merged(ts[comp], end[comp])
    kind = ev["kind"].to_numpy()
    on = (kind == int(Kind.CPU_OP)) & ((ev["tid"].to_numpy() == steps.main_tid) if steps.main_tid is not None else True)
    rows = np.flatnonzero(on)
    comm = name_mask(ev, lambda s: s.startswith(COMM_PREFIXES))[rows]
    o = np.argsort(ts[rows], kind="stable")
    rows, comm = rows[o], comm[o]
    s, e = ts[rows], end[rows]
    leaf = np.r_[s[1:] >= e[:-1], True] if len(rows) else np.zeros(0, bool)
    cs, ce = merged(s[comm], e[comm])
    keep = leaf & ~comm
    if len(cs):  # leaves inside a collective op are the collective's own work
        k = np.searchsorted(cs, s, "right") - 1
        inside = (k >= 0) & (s < ce[np.clip(k, 0, None)])
        keep &= ~inside
    return merged(s[keep], e[keep])


def exposed_per_collective(coll: pd.DataFrame, rank: RankTrace, steps, basis: str) -> np.ndarray:
    """Exposed us of each row of the collectives table (0 where the row has no window or no step)."""
    out = np.zeros(len(coll))
    if not len(coll):
        return out
    ws, we = _windows(coll, basis)
    st = steps.table
    lo_col, hi_col = ("start", "end") if basis == "gpu" else ("cpu_start", "cpu_end")
    bounds = dict(zip(st["step"].to_numpy(), zip(st[lo_col].to_numpy(dtype=float), st[hi_col].to_numpy(dtype=float))))
    step = coll["step"].to_numpy()
    ok = np.isfinite(ws) & np.isfinite(we) & (step >= 0)
    if not ok.any():
        return out
    bs, be = _busy(rank, steps, basis)
    for sid in np.unique(step[ok]):
        if sid not in bounds:
            continue
        lo, hi = bounds[sid]
        idx = np.flatnonzero(ok & (step == sid))
        idx = idx[np.argsort(ws[idx], kind="stable")]
        out[idx] = charge(np.clip(ws[idx], lo, hi), np.clip(we[idx], lo, hi), bs, be)
    return out


def with_exposure(kinds: pd.DataFrame, coll: pd.DataFrame) -> pd.DataFrame:
    """The per-kind table (``comm_steps.kind_table``) with ``exposed_us``: its collectives' exposed time summed."""
    if not len(kinds):
        return kinds.assign(exposed_us=pd.Series(dtype=float))
    c = coll[coll["step"] >= 0]
    e = pd.DataFrame({"step": c["step"].to_numpy().astype(np.int64), "name": c["name"].to_numpy(),
                      "_pg": c["pg"].where(c["pg"].notna(), "").to_numpy(), "exposed_us": c["exposed_us"].to_numpy()})
    g = e.groupby(["step", "name", "_pg"], sort=False)["exposed_us"].sum().reset_index()
    k = kinds.assign(_pg=kinds["pg"].where(kinds["pg"].notna(), ""))
    m = k.merge(g, on=["step", "name", "_pg"], how="left")
    m["exposed_us"] = m["exposed_us"].fillna(0.0)
    return m.drop(columns="_pg")
