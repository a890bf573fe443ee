"""How events link to each other: the runtime call that launched a GPU activity, and the CPU op that made a call.

Every analysis that needs "which op issued this copy / sync / kernel" asks here, so the rules for reading
``correlation`` and ``External id`` (and for traces whose ids do not link) live in one place.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .events import isin, linked_runtime_rows, pair_keys, window_keys
from ..load.trace import Kind


def launch_calls(ev: pd.DataFrame) -> pd.DataFrame:
    """The runtime / driver calls that launched GPU work, one per (window, correlation): columns window, corr, rt
    (the call's row)."""
    rt = linked_runtime_rows(ev)
    win, corr = ev["window"].to_numpy()[rt], ev["corr"].to_numpy()[rt]
    keys = window_keys(win, corr)
    if keys is None:
        return pd.DataFrame({"window": win, "corr": corr, "rt": rt}).drop_duplicates(["window", "corr"])
    first = np.flatnonzero(~pd.Index(keys).duplicated())
    return pd.DataFrame({"window": win[first], "corr": corr[first], "rt": rt[first]}, index=first)


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
    pos, op = _ops_by_external_id(ev, cpu, win[calls], ext)
    if len(pos):
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
        idx = grp["i"].to_numpy()
        out[idx] = _innermost(cand, ts[cand], ts[cand] + dur[cand], ts[calls[idx]])
    return out


def _ops_by_external_id(ev: pd.DataFrame, cpu: np.ndarray, win: np.ndarray, ext: np.ndarray):
    """(positions into the calls, op rows): the CPU op each call's (window, External id) names; where several ops
    carry one id, the shortest (the first of equals)."""
    ids = ev["ext"].to_numpy()
    ops = cpu[ids[cpu] >= 0]
    ops = ops[isin(ids[ops], ext)]  # only the ids asked for: sorting every op is most of the work otherwise
    ops = ops[np.argsort(ev["dur"].to_numpy()[ops], kind="stable")]
    keys = pair_keys([(ev["window"].to_numpy()[ops], ids[ops]), (win, ext)])
    if keys is None:  # ids too large for one integer key: join on both columns
        o = pd.DataFrame({"window": ev["window"].to_numpy()[ops], "ext": ids[ops], "op": ops})
        q = pd.DataFrame({"window": win, "ext": ext, "pos": np.arange(len(ext))})
        m = q.merge(o.drop_duplicates(["window", "ext"]), on=["window", "ext"], how="inner")
        return m["pos"].to_numpy(), m["op"].to_numpy()
    first = ~pd.Index(keys[0]).duplicated()
    at = pd.Index(keys[0][first]).get_indexer(keys[1])
    pos = np.flatnonzero(at >= 0)
    return pos, ops[first][at[pos]]


def _innermost(cand: np.ndarray, starts: np.ndarray, ends: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """For times ``xs``: the op of ``cand`` (one thread's ops, by start) that encloses each, the latest-starting
    one (ops on a thread nest, so it is the innermost), looking back at most 256 ops; -1 where none does."""
    found = np.full(len(xs), -1, np.int64)
    js = np.searchsorted(starts, xs, side="right") - 1
    open_ = np.flatnonzero(js >= 0)
    for back in range(256):
        if not len(open_):
            break
        k = js[open_] - back
        hit = ends[k] >= xs[open_]
        found[open_[hit]] = cand[k[hit]]
        open_ = open_[~hit & (k > 0)]
    return found


def launching_ops(ev: pd.DataFrame, gpu_rows: np.ndarray) -> np.ndarray:
    """For GPU event rows: the row of the CPU op that launched each (innermost op), or -1.

    Through the launching runtime call (joined on correlation) and the GPU event's own External id; a GPU event
    whose call the trace lacks keeps the op its id names, unchecked.
    """
    out = np.full(len(gpu_rows), -1, np.int64)
    if not len(gpu_rows):
        return out
    win, corr, ext = (ev[c].to_numpy()[gpu_rows] for c in ("window", "corr", "ext"))
    rt = _launch_call_of(ev, win, corr)
    has = rt >= 0
    out[has] = enclosing_ops(ev, rt[has], ext[has])
    if (~has).any():
        cpu = np.flatnonzero(ev["kind"].to_numpy() == int(Kind.CPU_OP))
        rest = np.flatnonzero(~has)
        pos, op = _ops_by_external_id(ev, cpu, win[rest], ext[rest])
        out[rest[pos]] = op
    return out


def _launch_call_of(ev: pd.DataFrame, win: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """For (window, correlation) pairs: the row of the runtime call that launched that GPU work, or -1."""
    return launch_rows(launch_calls(ev), win, corr)


def launch_rows(calls: pd.DataFrame, win: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """For (window, correlation) pairs: the row of the launch call among ``calls`` (``launch_calls``: one per
    pair) with that window and correlation, or -1; an inner join on the calls, without a merge."""
    cw, cc, crt = (calls[c].to_numpy() for c in ("window", "corr", "rt"))
    keys = pair_keys([(cw, cc), (win, corr)])
    if keys is None:  # ids too large for one integer key: join on both columns
        q = pd.DataFrame({"window": win, "corr": corr, "pos": np.arange(len(win))})
        q = q.merge(calls, on=["window", "corr"], how="left").sort_values("pos")
        return q["rt"].fillna(-1).to_numpy().astype(np.int64)
    at = pd.Index(keys[0]).get_indexer(keys[1])
    return np.where(at >= 0, crt[np.maximum(at, 0)] if len(crt) else -1, -1).astype(np.int64)
