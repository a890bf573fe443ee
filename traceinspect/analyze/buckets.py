"""DDP's structure in one rank's collectives: backward passes, gradient buckets, rounds and their tails.

DDP all-reduces gradients in buckets while the backward pass runs, so one backward pass issues one round of
buckets (a step syncing every micro-batch has one round per micro-batch). This module finds the backward passes
in the CPU ops, marks which rows of the collectives table are gradient buckets and of which round (its ``phase``,
``pass_``, ``grad``, ``round``, ``bucket`` columns), and computes the per-step bucket, round and tail columns.
``collectives.rank_part`` calls it; it works on the table's columns and computes no names, sizes or
bandwidths of its own. Definitions of every number: docs/communication.md. Nothing here imports torch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .attribution import is_comm_kernel, name_mask
from .events import EndTimes, step_at
from .links import launch_calls
from ..load.trace import Kind, RankTrace

PASS_COLUMNS = ["step_index", "pass_", "start", "bwd_end", "end", "window"]

# Ops on the training thread that neither start nor end a backward pass.
_NOT_MARKERS = ("autograd::engine::evaluate_function", "ProfilerStep#", "c10d::", "_c10d_functional::",
                "record_param_comms", "nccl:", "gloo:", "rccl:")


# --------------------------------------------------------------------------------------------------------------
# Backward passes


def backward_passes(rank: RankTrace, steps) -> pd.DataFrame:
    """The backward passes of each step: runs of ``autograd::engine::evaluate_function`` ops (any thread) that no
    forward-side op of the training thread separates. Columns: step_index, pass_, start, bwd_end, end, window
    (``end`` = where the next training-thread op starts: callbacks run by the engine after the last node, such as
    DDP's final bucket, still belong to the pass)."""
    ev = rank.events
    kind = ev["kind"].to_numpy()
    is_bwd = (kind == int(Kind.CPU_OP)) & name_mask(ev, lambda s: s.startswith("autograd::engine::evaluate_function"))
    b = np.flatnonzero(is_bwd)
    st = steps.table
    if not len(b) or not len(st):
        return pd.DataFrame(columns=PASS_COLUMNS)
    ts = ev["ts"].to_numpy()
    end = EndTimes(ev)
    win = ev["window"].to_numpy()
    markers_ts, markers_win = _pass_markers(ev, steps.main_tid, is_bwd)
    # Step of each backward op by its start on the step CPU windows.
    cs = st["cpu_start"].to_numpy()
    ce = st["cpu_end"].to_numpy()
    sw = st["window"].to_numpy()
    bts = ts[b]
    k = step_at(cs, ce, bts, win[b], sw)
    ok = k >= 0
    b, k = b[ok], k[ok]
    if not len(b):
        return pd.DataFrame(columns=PASS_COLUMNS)
    order = np.lexsort((ts[b], k))
    b, k = b[order], k[order]
    # Markers sorted once per window; each step takes its slice by binary search (no per-step scans).
    markers = {int(w): np.sort(markers_ts[markers_win == w]) for w in np.unique(sw)}
    steps_here, first = np.unique(k, return_index=True)
    last = np.append(first[1:], len(k))
    rows = []
    for si, lo, hi in zip(steps_here, first, last):
        sel = b[lo:hi]
        s_ts, s_end = ts[sel], end[sel]
        w = int(sw[si])
        wm = markers.get(w, np.empty(0))
        mts = wm[np.searchsorted(wm, cs[si], "left"):np.searchsorted(wm, ce[si], "left")]
        runmax = np.maximum.accumulate(s_end)
        # A new pass starts at op i when a marker starts between everything before it and op i.
        n_before = np.searchsorted(mts, s_ts, side="left")
        n_after_prev = np.searchsorted(mts, np.concatenate([[-np.inf], runmax[:-1]]), side="right")
        new = np.ones(len(sel), bool)
        new[1:] = n_before[1:] > n_after_prev[1:]
        bounds = np.flatnonzero(new).tolist() + [len(sel)]
        for p in range(len(bounds) - 1):
            a, z = bounds[p], bounds[p + 1]  # ops of a pass are contiguous in time order
            start, bwd_end = float(s_ts[a:z].min()), float(s_end[a:z].max())
            j = np.searchsorted(mts, bwd_end, "left")
            pend = float(mts[j]) if j < len(mts) else float(ce[si])
            rows.append((int(si), p, start, bwd_end, max(pend, bwd_end), w))
    return pd.DataFrame(rows, columns=PASS_COLUMNS)


def _pass_markers(ev: pd.DataFrame, main, is_bwd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, window) of the ops that separate backward passes: training-thread ops that are not backward, not
    communication, not inside a backward node."""
    if main is None:
        return np.empty(0), np.empty(0, np.int64)
    kind = ev["kind"].to_numpy()
    ts = ev["ts"].to_numpy()
    end = EndTimes(ev)
    tid = ev["tid"].to_numpy()
    on_main = (tid == main) & (kind <= int(Kind.USER_ANNOTATION))
    cand = np.flatnonzero(on_main & ~name_mask(ev, lambda s: s.startswith(_NOT_MARKERS)))
    mb = np.flatnonzero(is_bwd & (tid == main))
    if len(mb) and len(cand):
        # Drop candidates that start inside a training-thread backward node (the node's own ops).
        o = np.argsort(ts[mb], kind="stable")
        bs, be = ts[mb][o], end[mb][o]
        runmax = np.maximum.accumulate(be)
        k = np.searchsorted(bs, ts[cand], side="right") - 1
        inside = (k >= 0) & (ts[cand] < runmax[np.clip(k, 0, None)])
        cand = cand[~inside]
    return ts[cand], ev["window"].to_numpy()[cand]


# --------------------------------------------------------------------------------------------------------------
# Phases, gradient all-reduces, rounds and buckets (columns of the collectives table)


def assign_phase(df: pd.DataFrame, passes: pd.DataFrame) -> None:
    """phase: 'backward' if issued inside a backward pass, 'forward' if a later pass of the same step follows
    (issued before a backward: DDP's buffer broadcasts in forward), else 'other' (after the last backward)."""
    n = len(df)
    phase = np.full(n, "other", dtype=object)
    pass_ = np.full(n, -1, np.int64)
    if len(passes):
        t = df["cpu_ts_us"].to_numpy()
        si = df["step_index"].to_numpy()
        for s, pg in passes.groupby("step_index"):
            rows = np.flatnonzero(si == s)
            if not len(rows):
                continue
            starts, ends, ids = pg["start"].to_numpy(), pg["end"].to_numpy(), pg["pass_"].to_numpy()
            tr = t[rows][:, None]
            inside = (starts <= tr) & (tr < ends)  # rows x passes of the step
            hit = inside.any(axis=1)
            later = (starts > tr).any(axis=1)
            phase[rows[hit]] = "backward"
            pass_[rows[hit]] = ids[inside[hit].argmax(axis=1)].astype(np.int64)
            phase[rows[~hit & later]] = "forward"
    df["phase"] = phase
    df["pass_"] = pass_


def _period(seq: list) -> int:
    """Smallest p dividing len(seq) with seq[i] == seq[i % p]: the length of one repeated round."""
    n = len(seq)
    for p in range(1, n + 1):
        if n % p == 0 and all(seq[i] == seq[i % p] for i in range(n)):
            return p
    return n


def assign_rounds(df: pd.DataFrame) -> None:
    """Gradient all-reduces (``grad``), their round within the step (one backward pass = one round) and bucket
    index within the round, on a table in issue order. Without backward passes in the trace (kernels only), every
    all-reduce of a step is a gradient all-reduce and rounds are the repeats of the step's bucket-size sequence."""
    n = len(df)
    grad = np.zeros(n, bool)
    rnd = np.full(n, -1, np.int64)
    bucket = np.full(n, -1, np.int64)
    is_ar = (df["name"] == "allreduce").to_numpy()
    has_passes = (df["pass_"] >= 0).any()
    steps_ = df["step"].to_numpy()
    for s in np.unique(steps_[steps_ >= 0]):
        rows = np.flatnonzero((steps_ == s) & is_ar)
        if not len(rows):
            continue
        if has_passes:
            rows = rows[df["phase"].to_numpy()[rows] == "backward"]
            if not len(rows):
                continue
            passes = df["pass_"].to_numpy()[rows]
            for ri, p in enumerate(np.unique(passes)):
                pr = rows[passes == p]
                rnd[pr] = ri
                bucket[pr] = np.arange(len(pr))
        else:
            sizes = df["bytes"].to_numpy()[rows].tolist()
            p = _period(sizes) if all(x > 0 for x in sizes) else len(rows)
            if p == 1 and len(rows) > 1:  # all buckets the same size: rounds cannot be told from buckets
                p = len(rows)
            rnd[rows] = np.arange(len(rows)) // p
            bucket[rows] = np.arange(len(rows)) % p
        grad[rows] = True
    df["grad"] = grad
    df["round"] = rnd
    df["bucket"] = bucket


# --------------------------------------------------------------------------------------------------------------
# Per-step columns

# Written by bucket_columns, in this order; counts are 0 and sizes NaN in a step without gradient all-reduces.
BUCKET_COUNTS = ("grad_allreduce_count", "grad_comm_time_us", "allreduce_rounds", "bucket_count")
BUCKET_SIZES = ("bucket_min_bytes", "bucket_median_bytes", "bucket_max_bytes", "grad_bytes", "small_bucket_count",
                "redundant_grad_bytes")


def per_step(series: pd.Series | None, idx: pd.Index, fill=np.nan) -> np.ndarray:
    """``series`` (indexed by step id) as one value per step of ``idx``; steps it lacks get ``fill``. A NaN the
    series holds stays NaN: it is a value not known (e.g. a sum with an unrecorded size), not an absent one."""
    if series is None:
        return np.full(len(idx), fill, dtype=float)
    v = series.reindex(idx).to_numpy(dtype=float, copy=True)
    v[~idx.isin(series.index)] = fill
    return v


def bucket_columns(out: pd.DataFrame, c: pd.DataFrame) -> None:
    """Gradient all-reduces, rounds and buckets per step into ``out`` (indexed by step id). ``c``: the collectives
    inside steps with ``_b`` / ``_d`` (bytes and duration as float), ``_known`` (1.0 where the size is known) and
    ``_small`` (below ``small_bucket_bytes``). Bucket sizes are those of the step's last round; earlier rounds of
    the same step send the same gradients again (``redundant_grad_bytes``)."""
    idx = out.index
    gr = c[c["grad"]]
    if not len(gr):
        for k in BUCKET_COUNTS:
            out[k] = per_step(None, idx, 0)
        for k in BUCKET_SIZES:
            out[k] = per_step(None, idx)
        return
    a = gr.groupby("step").agg(n=("_b", "size"), d=("_d", lambda x: x.sum(min_count=1)))
    out["grad_allreduce_count"] = per_step(a["n"], idx, 0)
    out["grad_comm_time_us"] = per_step(a["d"].fillna(0.0), idx, 0)
    out["allreduce_rounds"] = per_step(gr.groupby("step")["round"].nunique(), idx, 0)
    last_round = gr.groupby("step")["round"].transform("max")
    last = gr[gr["round"] == last_round]
    lg = last.groupby("step")
    out["bucket_count"] = per_step(lg.size(), idx, 0)
    ok = lg["_b"].min() > 0
    out["bucket_min_bytes"] = per_step(lg["_b"].min().where(ok), idx)
    out["bucket_median_bytes"] = per_step(lg["_b"].median().where(ok), idx)
    out["bucket_max_bytes"] = per_step(lg["_b"].max().where(ok), idx)
    out["grad_bytes"] = per_step(lg["_b"].sum().where(ok), idx)
    out["small_bucket_count"] = per_step(lg["_small"].sum().where(ok), idx)
    rest = gr[gr["round"] != last_round]
    red = pd.Series(0.0, index=ok.index)
    if len(rest):
        rs = rest.groupby("step").agg(b=("_b", "sum"), known=("_known", "min"))
        red.loc[rs.index] = rs["b"].where(rs["known"] >= 1)
    out["redundant_grad_bytes"] = per_step(red.where(ok), idx)


def tail_columns(out: pd.DataFrame, coll: pd.DataFrame, rank: RankTrace, steps, passes: pd.DataFrame) -> None:
    """``backward_passes``, ``comm_tail_us`` (the tail of the step's last pass) and ``comm_tail_total_us`` (of all
    its passes) into ``out``, whose rows are the rows of ``steps.table``."""
    n = len(out)
    if len(passes):
        bp = passes.groupby("step_index").size()
        out["backward_passes"] = bp.reindex(np.arange(n)).fillna(0).to_numpy()
    else:
        out["backward_passes"] = 0
    tails = _comm_tails(coll, rank, steps, passes)
    out["comm_tail_us"] = [tails[i][max(tails[i])] if i in tails else np.nan for i in range(n)]
    out["comm_tail_total_us"] = [sum(tails[i].values()) if i in tails else np.nan for i in range(n)]


def _comm_tails(coll: pd.DataFrame, rank: RankTrace, steps, passes: pd.DataFrame) -> dict:
    """Per step index: {pass: tail_us} for every backward pass that issued gradient all-reduces. A pass's tail is
    the end of its last gradient all-reduce minus the end of its backward compute (GPU: the last non-communication
    kernel launched by the pass's backward ops, i.e. before its last ``evaluate_function`` ended; CPU: the end of
    its last backward op), clipped at 0."""
    out: dict = {}
    if not len(coll) or not len(passes) or "grad" not in coll:
        return out
    g = coll[coll["grad"] & (coll["step"] >= 0) & (coll["pass_"] >= 0)]
    if not len(g):
        return out
    agg = g.assign(_end=g["ts_us"] + g["dur_us"], _k=g["kernel"].notna()).groupby(["step", "pass_"]).agg(
        end=("_end", "max"), has_kernel=("_k", "any"))
    gpu = len(steps.gpu_index) > 0
    by_window = _compute_launches(rank.events) if gpu else {}
    step_ids = steps.table["step"].to_numpy()
    p = pd.DataFrame({"si": passes["step_index"].to_numpy().astype(int), "pass_": passes["pass_"].to_numpy().astype(int),
                      "start": passes["start"].to_numpy(), "bwd_end": passes["bwd_end"].to_numpy(),
                      "window": passes["window"].to_numpy().astype(int)})
    p["step"] = step_ids[p["si"].to_numpy()]
    m = p.merge(agg.reset_index(), on=["step", "pass_"], how="inner")
    m = m[np.isfinite(m["end"].to_numpy(dtype=float))]
    if gpu:
        m = m[m["has_kernel"].astype(bool) & m["window"].isin(list(by_window))]
        compute_end = np.full(len(m), np.nan)
        for w in m["window"].unique():
            sel = np.flatnonzero(m["window"].to_numpy() == w)
            lts, kend = by_window[int(w)]
            i0 = np.searchsorted(lts, m["start"].to_numpy()[sel], "left")
            i1 = np.searchsorted(lts, m["bwd_end"].to_numpy()[sel], "right")
            ok = i1 > i0
            if not ok.any():
                continue
            # Max of kend over each [i0, i1): reduceat on the interleaved bounds (a -inf sentinel closes the end).
            padded = np.append(kend, -np.inf)
            bounds = np.column_stack([i0[ok], i1[ok]]).ravel()
            compute_end[sel[ok]] = np.maximum.reduceat(padded, bounds)[::2]
        keep = ~np.isnan(compute_end)
        m, compute_end = m[keep], compute_end[keep]
    else:
        compute_end = m["bwd_end"].to_numpy()
    tails = np.maximum(0.0, m["end"].to_numpy(dtype=float) - compute_end)
    for si, pnum, tail in zip(m["si"].to_numpy(), m["pass_"].to_numpy(), tails):
        out.setdefault(int(si), {})[int(pnum)] = float(tail)
    return out


def _compute_launches(ev: pd.DataFrame) -> dict:
    """Per window: (launch call start, kernel end) of every non-communication kernel, sorted by launch."""
    kind = ev["kind"].to_numpy()
    kr = np.flatnonzero((kind == int(Kind.KERNEL)) & ~name_mask(ev, is_comm_kernel))
    corr, win = ev["corr"].to_numpy(), ev["window"].to_numpy()
    calls = launch_calls(ev)
    m = calls.assign(lts=ev["ts"].to_numpy()[calls["rt"].to_numpy()]).drop(columns="rt").merge(
        pd.DataFrame({"window": win[kr], "corr": corr[kr],
                      "kend": ev["ts"].to_numpy()[kr] + ev["dur"].to_numpy()[kr]}), on=["window", "corr"])
    out = {}
    for w, mw in m.groupby("window"):
        mw = mw.sort_values("lts")
        out[int(w)] = (mw["lts"].to_numpy(), mw["kend"].to_numpy())
    return out
