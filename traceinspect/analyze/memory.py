"""Device memory per step, from the allocator's ``[memory]`` events (``profile_memory=True``): what the step holds
at its start, its peak and when, what the caching allocator reserves beyond it, what the peak is made of, what
grows step after step, and how the peak moves with the batch.

Every ``[memory]`` event carries the bytes the allocator hands out (``allocated``) and holds from the device
(``reserved``) *after* it, so these figures are exact at every event, with nothing summed by us:

* ``start_allocated`` = ``allocated - bytes`` of the step's first event (what was allocated when it began);
* ``peak_allocated`` = the largest ``allocated`` of the step's events, ``peak_at`` its time from the step's start;
* ``peak_reserved`` = the largest ``reserved`` of the step's events and of the last event before the step;
* ``end_allocated`` = ``allocated`` after the step's last event; ``slack_at_peak`` = reserved - allocated at the peak.

A run with no device events (CPU only) is read the same way on its host events, with no capacity.

A step is a ``ProfilerStep#N`` on the CPU (memory events are recorded on the thread that asked). The device is the
one the rank's memory events name (CUDA device type 1, ROCm's HIP 6, or any other non-CPU type); host memory
(device type 0) is kept apart (``host_peak_allocated``).

**What the peak is made of.** An allocation is paired with the next free of its address. At the step's peak, the
live allocations the trace saw being made are sorted by when (this step, by phase; an earlier step of the window),
and by the top-level CPU op on the thread that made them; what was allocated before the recording began (weights,
optimizer state, buffers) is the rest of the peak (``allocated`` minus what the trace saw). Phases: ``optimizer``
inside an ``Optimizer.step#``/``Optimizer.zero_grad#`` span; ``backward`` inside a backward pass
(``buckets.backward_passes``); ``forward`` before a backward pass of the same step (the whole step where it has
none: inference); ``other`` after the last one.

**How the peak moves with the batch.** An allocation *scales with the batch* when this step's forward or backward
made it, except a backward allocation that outlives the backward pass (a parameter's gradient). Everything else (what
the step began with, earlier steps' allocations, the optimizer's) stays. At every event ``k`` of a step,
``allocated_k = fixed_k + scaling_k``; at batch ``b`` the prediction is ``max_k fixed_k + scaling_k * b / b0``
(the peak may move to another moment), the largest over the steps. The largest batch that fits is the largest ``b``
whose prediction, times the reserved/allocated ratio the step showed at its peak, stays within the device's memory
less what the allocator does not see (the CUDA context, NCCL's buffers, other processes: from the capture's
``device_memory`` record where it exists, else ``Thresholds.memory_unseen_bytes``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..load.trace import Kind, RankTrace
from .events import EndTimes, name_mask, step_at
from .results import RankPart

PHASES = ("forward", "backward", "optimizer", "other")
_OPT = ("Optimizer.step#", "Optimizer.zero_grad#")
# Device types of the allocator's records: 0 is the host; every other type is a device (1 CUDA, 6 HIP, ...).
HOST = 0
# Rows of the per-rank tables of what holds the peak and what leaks: the largest first, the rest summed.
TOP_OPS = 12


def rank_part(rank: RankTrace, steps, table: pd.DataFrame, thresholds) -> RankPart:
    mem = memory_tables(rank, steps, table, thresholds)
    return RankPart(tables=mem) if mem else RankPart()


def memory_tables(rank: RankTrace, steps, table: pd.DataFrame, thresholds) -> dict[str, pd.DataFrame]:
    """The rank's memory tables (empty where the trace holds no device memory events):

    * ``memory_steps``: per step (the base step table's steps): start/peak/end allocated, peak reserved, when the
      peak happened, slack at the peak, host peak, fixed and scaling bytes at the peak;
    * ``memory_peak``: what holds the step with the largest peak at its peak: (origin, phase, op, bytes, count);
    * ``memory_leak``: allocations of each step but the last that the window never frees, by op and phase;
    * ``memory_scaling``: per step and event of interest, fixed and scaling bytes (for the batch prediction):
      only the events where the prediction can peak (the upper envelope), with the step;
    * ``memory_device``: one row: device type and id, capacity, what the allocator does not see, OOM events.
    """
    inst = rank.instants
    if inst is None or not len(inst):
        return {}
    dev_mask = inst["device_type"].to_numpy() != HOST
    if not dev_mask.any():  # a run without a device: its memory is the host's (no capacity is known)
        dev_mask = inst["device_type"].to_numpy() == HOST
    ids = inst["device_id"].to_numpy()[dev_mask]
    device_id = int(pd.Series(ids).mode().iloc[0])
    dtype_ = int(pd.Series(inst["device_type"].to_numpy()[dev_mask]).mode().iloc[0])
    sel = dev_mask & (inst["device_id"].to_numpy() == device_id)
    oom_rows = inst[sel & inst["oom"].to_numpy()]
    d = inst[sel & ~inst["oom"].to_numpy()].reset_index(drop=True)
    host = inst[(inst["device_type"].to_numpy() == HOST) & ~dev_mask & ~inst["oom"].to_numpy()]
    st = table
    cs, ce = st["cpu_start_us"].to_numpy(), st["cpu_end_us"].to_numpy()
    order = np.argsort(cs, kind="stable")
    cs_s, ce_s = cs[order], ce[order]
    ts = d["ts"].to_numpy()
    k = step_at(cs_s, ce_s, ts)
    step_idx = np.where(k >= 0, order[np.clip(k, 0, None)], -1)
    phase = _phases(rank, steps, ts, d["tid"].to_numpy(), step_idx, st)
    op = _top_ops(rank, ts, d["tid"].to_numpy())
    b = d["bytes"].to_numpy()
    alloc = d["allocated"].to_numpy()
    res = d["reserved"].to_numpy()
    n = len(d)
    free_at = _frees(d["addr"].to_numpy(), b)
    # Scaling with the batch: this step's forward/backward allocations, but backward ones that outlive their pass.
    bwd_end = _pass_end_of(rank, steps, ts, step_idx)
    is_alloc = b > 0
    outlives = np.zeros(n, bool)
    fa = np.minimum(free_at, n - 1)
    outlives[is_alloc] = (free_at[is_alloc] >= n) | (ts[fa[is_alloc]] > bwd_end[is_alloc])
    scaling = is_alloc & (step_idx >= 0) & ((phase == 0) | ((phase == 1) & ~outlives))
    delta = np.zeros(n + 1)
    np.add.at(delta, np.flatnonzero(scaling), b[scaling])
    freed = scaling & (free_at < n)
    np.add.at(delta, free_at[freed], -b[freed])
    scal = np.cumsum(delta[:n])
    fixed = alloc - scal
    # Gradients: this step's backward allocations that outlive their pass (what DDP without
    # gradient_as_bucket_view keeps beside its buckets); the peak without them is what bucket views would leave.
    grads = is_alloc & (step_idx >= 0) & (phase == 1) & outlives
    gdelta = np.zeros(n + 1)
    np.add.at(gdelta, np.flatnonzero(grads), b[grads])
    gfreed = grads & (free_at < n)
    np.add.at(gdelta, free_at[gfreed], -b[gfreed])
    grad_alive = np.cumsum(gdelta[:n])
    rows, env = [], []
    for i in range(len(st)):
        ev_rows = np.flatnonzero(step_idx == i)
        if not len(ev_rows):
            rows.append(_empty_step(st, i))
            continue
        first, last = ev_rows[0], ev_rows[-1]
        p = ev_rows[np.argmax(alloc[ev_rows])]
        before = res[first - 1] if first > 0 else res[first]
        known_reserved = res[ev_rows].max() > 0  # the host allocator reports no reserved bytes
        hmask = (host["ts"].to_numpy() >= cs[i]) & (host["ts"].to_numpy() < ce[i])
        rows.append({
            "step": int(st["step"].iloc[i]),
            "start_allocated": int(alloc[first] - b[first]),
            "peak_allocated": int(max(alloc[p], alloc[first] - b[first])),
            "peak_at_us": float(ts[p] - cs[i]),
            "peak_reserved": int(max(res[ev_rows].max(), before)) if known_reserved else -1,
            "end_allocated": int(alloc[last]),
            "slack_at_peak": int(res[p] - alloc[p]) if known_reserved else -1,
            "reserved_at_peak": int(res[p]) if known_reserved else -1,
            "fixed_at_peak": int(fixed[p]),
            "scaling_at_peak": int(scal[p]),
            "peak_without_grads": int((alloc[ev_rows] - grad_alive[ev_rows]).max()),
            "grads_at_peak": int(grad_alive[p]),
            "events": int(len(ev_rows)),
            "host_peak_allocated": int(host["allocated"].to_numpy()[hmask].max()) if hmask.any() else -1,
        })
        env.append(_envelope(fixed[ev_rows], scal[ev_rows], int(st["step"].iloc[i])))
    out = {"memory_steps": pd.DataFrame(rows)}
    steps_df = out["memory_steps"]
    ok = steps_df["events"] > 0 if "events" in steps_df else pd.Series(False, index=steps_df.index)
    if ok.any():
        worst = int(steps_df.loc[ok, "peak_allocated"].idxmax())
        ev_rows = np.flatnonzero(step_idx == worst)
        p = ev_rows[np.argmax(alloc[ev_rows])]
        out["memory_peak"] = _holders(p, alloc[p], b, free_at, step_idx, phase, op, worst, st)
    out["memory_leak"] = _leaks(b, free_at, step_idx, phase, op, st)
    out["memory_scaling"] = pd.concat(env, ignore_index=True) if env else pd.DataFrame(
        columns=["step", "fixed", "scaling"])
    meta_mem = (rank.metadata or {}).get("device_memory") if isinstance(rank.metadata, dict) else None
    out["memory_device"] = pd.DataFrame([{
        "device_type": dtype_, "device_id": device_id,
        "capacity": int(rank.device_capacity.get(device_id, -1)) if rank.device_capacity else -1,
        "unseen": _unseen(meta_mem),
        "unseen_recorded": _unseen(meta_mem) >= 0,
        "alloc_conf": (meta_mem or {}).get("alloc_conf") if isinstance(meta_mem, dict) else None,
        "oom_events": int(len(oom_rows)),
        "oom_bytes": int(oom_rows["bytes"].max()) if len(oom_rows) else -1,
        "events": int(n),
    }])
    ends = out["memory_steps"].loc[ok, "end_allocated"].to_numpy(float) if ok.any() else np.empty(0)
    out["memory_device"]["growth_per_step"] = float(np.diff(ends).mean()) if len(ends) >= 2 else np.nan
    return out


def _empty_step(st: pd.DataFrame, i: int) -> dict:
    return {"step": int(st["step"].iloc[i]), "start_allocated": -1, "peak_allocated": -1, "peak_at_us": np.nan,
            "peak_reserved": -1, "end_allocated": -1, "slack_at_peak": -1, "reserved_at_peak": -1,
            "fixed_at_peak": -1, "scaling_at_peak": -1, "peak_without_grads": -1, "grads_at_peak": -1, "events": 0, "host_peak_allocated": -1}


def _unseen(meta_mem) -> int:
    """Device bytes in use that the allocator does not hold, when the capture recorded them: total - free - the
    allocator's reserved bytes at the capture's start (the CUDA context, NCCL's buffers, other processes); -1."""
    if not isinstance(meta_mem, dict):
        return -1
    vals = [meta_mem.get(k) for k in ("total_bytes", "free_bytes", "reserved_bytes")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < (1 << 50) for v in vals):
        return -1
    total, free, reserved = vals
    return max(total - free - reserved, 0)


def _frees(addr: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each event, the index of the free that releases it when it is an allocation (the next event of the same
    address, when that is a free), else ``len`` (never freed in the window, or not an allocation)."""
    n = len(addr)
    out = np.full(n, n, np.int64)
    if n < 2:
        return out
    idx = np.arange(n)
    order = np.lexsort((idx, addr))
    a, bb = addr[order], b[order]
    pair = (a[1:] == a[:-1]) & (bb[:-1] > 0) & (bb[1:] < 0) & (a[:-1] >= 0)
    out[order[:-1][pair]] = order[1:][pair]
    return out


def _top_ops(rank: RankTrace, ts: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """For each memory event, the name of the outermost CPU op running on its thread at that time ("" if none)."""
    ev = rank.events
    kind = ev["kind"].to_numpy()
    rows = np.flatnonzero(kind == int(Kind.CPU_OP))
    out = np.full(len(ts), "", dtype=object)
    if not len(rows) or not len(ts):
        return out
    ots = ev["ts"].to_numpy()[rows]
    oend = ots + ev["dur"].to_numpy()[rows]
    otid = ev["tid"].to_numpy()[rows]
    names = ev["name"].to_numpy()[rows] if not hasattr(ev["name"], "cat") else ev["name"].cat.categories.to_numpy(
        dtype=object)[ev["name"].cat.codes.to_numpy()[rows]]
    for t in np.unique(tid):
        on = np.flatnonzero(otid == t)
        if not len(on):
            continue
        o = on[np.lexsort((-oend[on], ots[on]))]
        # outermost: ops that end after every earlier-starting op of the thread has ended
        prev_end = np.concatenate([[-np.inf], np.maximum.accumulate(oend[o])[:-1]])
        top = o[oend[o] > prev_end]
        mine = np.flatnonzero(tid == t)
        j = np.searchsorted(ots[top], ts[mine], side="right") - 1
        jj = np.clip(j, 0, None)
        hit = (j >= 0) & (oend[top][jj] >= ts[mine])
        out[mine[hit]] = names[top[jj[hit]]]
    return out


def _phases(rank: RankTrace, steps, ts: np.ndarray, tid: np.ndarray, step_idx: np.ndarray,
            st: pd.DataFrame) -> np.ndarray:
    """0 forward, 1 backward, 2 optimizer, 3 other (``PHASES``), per memory event."""
    from .buckets import backward_passes

    out = np.full(len(ts), 3, np.int8)
    ev = rank.events
    kind = ev["kind"].to_numpy()
    end = EndTimes(ev)
    opt = np.flatnonzero((kind == int(Kind.USER_ANNOTATION)) & name_mask(ev, lambda s: s.startswith(_OPT)))
    bp = backward_passes(rank, steps)
    has_bwd = np.zeros(len(st) + 1, bool)  # the last slot: events outside every step
    if len(bp):
        has_bwd[bp["step_index"].to_numpy(int)] = True
    # a step without a backward pass (inference): its forward is the whole step (the optimizer's spans aside)
    out[(step_idx >= 0) & ~has_bwd[step_idx]] = 0
    if len(bp):
        bs, be = bp["start"].to_numpy(float), bp["bwd_end"].to_numpy(float)
        o = np.argsort(bs)
        k = step_at(bs[o], be[o], ts)
        in_bwd = k >= 0
        # forward: a later backward pass of the same step starts after the event
        bstep = bp["step_index"].to_numpy(int)
        last_start = np.full(len(st), -np.inf)
        np.maximum.at(last_start, bstep, bs)
        fwd = (step_idx >= 0) & ~in_bwd & (ts < last_start[np.clip(step_idx, 0, None)])
        out[fwd] = 0
        out[in_bwd] = 1
    if len(opt):
        os_, oe = ev["ts"].to_numpy()[opt], end[opt]
        o = np.argsort(os_)
        k = step_at(os_[o], np.maximum.accumulate(oe[o]), ts)
        out[k >= 0] = 2
    return out


def _pass_end_of(rank: RankTrace, steps, ts: np.ndarray, step_idx: np.ndarray) -> np.ndarray:
    """For each event, the end of the backward pass it falls in (or the next one of its step); +inf when none."""
    from .buckets import backward_passes

    out = np.full(len(ts), np.inf)
    bp = backward_passes(rank, steps)
    if not len(bp):
        return out
    bp = bp.sort_values("start")
    be = bp["bwd_end"].to_numpy(float)
    j = np.searchsorted(be, ts, side="left")
    ok = j < len(be)
    out[ok] = be[j[ok]]
    return out


def _envelope(fixed: np.ndarray, scal: np.ndarray, step: int) -> pd.DataFrame:
    """The events where ``fixed + scaling * x`` can be the largest for some x >= 0: for each distinct scaling
    value, the largest fixed part; then only those not beaten by another with both more fixed and more scaling."""
    f, s = fixed.astype(np.int64), scal.astype(np.int64)
    o = np.lexsort((f, s))  # by scaling, then fixed: the last of each scaling value holds its largest fixed part
    f, s = f[o], s[o]
    last = np.flatnonzero(np.append(s[1:] != s[:-1], True)) if len(s) else np.empty(0, np.int64)
    f, s = f[last][::-1], s[last][::-1]  # one row per scaling value, the most scaling first
    before = np.concatenate([[-np.inf], np.maximum.accumulate(f)[:-1]]) if len(f) else np.empty(0)
    keep = f > before  # no event with at least as much scaling has as much fixed
    return pd.DataFrame({"step": np.full(int(keep.sum()), step, np.int64), "fixed": f[keep], "scaling": s[keep]})


def _holders(p: int, total: int, b, free_at, step_idx, phase, op, worst: int, st: pd.DataFrame) -> pd.DataFrame:
    """What is alive at event ``p`` of step ``worst``: the allocations the trace saw being made, by origin, phase
    and op, the largest first; the rest of ``total`` as allocated before the recording began."""
    idx = np.arange(len(b))
    alive = (b > 0) & (idx <= p) & (free_at > p)
    origin = np.where(step_idx[alive] == worst, "this step", "earlier step")
    df = pd.DataFrame({"origin": origin, "phase": [PHASES[x] for x in phase[alive]], "op": op[alive],
                       "bytes": b[alive]})
    g = df.groupby(["origin", "phase", "op"], as_index=False).agg(bytes=("bytes", "sum"), count=("bytes", "size"))
    g = g.sort_values("bytes", ascending=False, kind="stable").reset_index(drop=True)
    seen = int(g["bytes"].sum())
    before = pd.DataFrame([{"origin": "before the recording", "phase": "", "op": "", "bytes": int(total) - seen,
                            "count": 0}])
    return pd.concat([before, g], ignore_index=True)


def _leaks(b, free_at, step_idx, phase, op, st: pd.DataFrame) -> pd.DataFrame:
    """Allocations of each step but the last that the recording never saw freed, by step, phase and op."""
    n = len(b)
    real = np.unique(step_idx[step_idx >= 0])
    if len(real) < 2:
        return pd.DataFrame(columns=["step", "phase", "op", "bytes", "count"])
    last = real.max()
    kept = (b > 0) & (free_at >= n) & (step_idx >= 0) & (step_idx < last)
    df = pd.DataFrame({"step": st["step"].to_numpy()[step_idx[kept]], "phase": [PHASES[x] for x in phase[kept]],
                       "op": op[kept], "bytes": b[kept]})
    return df.groupby(["step", "phase", "op"], as_index=False).agg(bytes=("bytes", "sum"), count=("bytes", "size"))
