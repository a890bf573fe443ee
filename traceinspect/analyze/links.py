"""How events link to each other: the runtime call that launched a GPU activity, and the CPU op that made a call.

Every analysis that needs "which op issued this copy / sync / kernel" asks here, so the rules for reading
``correlation`` and ``External id`` (and for traces whose ids do not link) live in one place.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .events import linked_runtime_rows
from ..load.trace import Kind


def launch_calls(ev: pd.DataFrame) -> pd.DataFrame:
    """The runtime / driver calls that launched GPU work, one per (window, correlation): columns window, corr, rt
    (the call's row)."""
    rt = linked_runtime_rows(ev)
    return pd.DataFrame({"window": ev["window"].to_numpy()[rt], "corr": ev["corr"].to_numpy()[rt],
                         "rt": rt}).drop_duplicates(["window", "corr"])


def enclosing_ops(ev: pd.DataFrame, calls: np.ndarray, ext: np.ndarray | None = None) -> np.ndarray:
    """For runtime-call rows: the row of the CPU op that made each call (innermost), or -1.

    By External id (``ext``, default the calls' own) when the op carrying that id encloses the call on its thread
    (older Kineto wrote the correlation into the id, which then names no op or the wrong one); else by time: the
    innermost CPU op on the call's thread that encloses it.
    """
    out = np.full(len(calls), -1, np.int64)
    kind = ev["kind"].to_numpy()
    cpu = np.flatnonzero(kind == int(Kind.CPU_OP))
    if not len(calls) or not len(cpu):
        return out
    ts, dur, tid, win = (ev[c].to_numpy() for c in ("ts", "dur", "tid", "window"))
    ext = ev["ext"].to_numpy()[calls] if ext is None else ext
    ops = pd.DataFrame({"window": win[cpu], "ext": ev["ext"].to_numpy()[cpu], "op": cpu, "odur": dur[cpu]})
    ops = ops[ops["ext"] >= 0].sort_values("odur", kind="stable").drop_duplicates(["window", "ext"])
    q = pd.DataFrame({"window": win[calls], "ext": ext, "pos": np.arange(len(calls))})
    m = q.merge(ops[["window", "ext", "op"]], on=["window", "ext"], how="inner")
    if len(m):
        pos, op = m["pos"].to_numpy(), m["op"].to_numpy()
        rr = calls[pos]
        ok = (ts[op] <= ts[rr]) & (ts[rr] <= ts[op] + dur[op]) & (tid[op] == tid[rr])
        out[pos[ok]] = op[ok]
    todo = np.flatnonzero(out < 0)
    if not len(todo):
        return out
    q2 = pd.DataFrame({"w": win[calls[todo]], "t": tid[calls[todo]], "i": todo})
    for (w, t), grp in q2.groupby(["w", "t"], sort=False):
        cand = cpu[(win[cpu] == w) & (tid[cpu] == t)]
        if not len(cand):
            continue
        cand = cand[np.argsort(ts[cand], kind="stable")]
        starts, ends = ts[cand], ts[cand] + dur[cand]
        idx = grp["i"].to_numpy()
        xs = ts[calls[idx]]
        js = np.searchsorted(starts, xs, side="right") - 1
        for i, x, j in zip(idx, xs, js):
            # Ops on a thread nest: the latest-starting op that still encloses the call is the innermost.
            for k in range(j, max(j - 256, -1), -1):
                if ends[k] >= x:
                    out[i] = cand[k]
                    break
    return out


def launching_ops(ev: pd.DataFrame, gpu_rows: np.ndarray) -> np.ndarray:
    """For GPU event rows: the row of the CPU op that launched each (innermost op), or -1.

    Through the launching runtime call (joined on correlation) and the GPU event's own External id; a GPU event
    whose call the trace lacks keeps the op its id names, unchecked.
    """
    out = np.full(len(gpu_rows), -1, np.int64)
    if not len(gpu_rows):
        return out
    win, corr, ext = (ev[c].to_numpy()[gpu_rows] for c in ("window", "corr", "ext"))
    q = pd.DataFrame({"window": win, "corr": corr, "pos": np.arange(len(gpu_rows))})
    q = q.merge(launch_calls(ev), on=["window", "corr"], how="left").sort_values("pos")
    rt = q["rt"].fillna(-1).to_numpy().astype(np.int64)
    has = rt >= 0
    out[has] = enclosing_ops(ev, rt[has], ext[has])
    if (~has).any():
        kind = ev["kind"].to_numpy()
        cpu = np.flatnonzero((kind == int(Kind.CPU_OP)) & (ev["ext"].to_numpy() >= 0))
        ops = pd.DataFrame({"window": ev["window"].to_numpy()[cpu], "ext": ev["ext"].to_numpy()[cpu], "op": cpu,
                            "odur": ev["dur"].to_numpy()[cpu]})
        ops = ops.sort_values("odur", kind="stable").drop_duplicates(["window", "ext"])
        rest = np.flatnonzero(~has)
        m = pd.DataFrame({"window": win[rest], "ext": ext[rest], "pos": rest}).merge(ops, on=["window", "ext"])
        out[m["pos"].to_numpy()] = m["op"].to_numpy()
    return out
