"""Steps of a rank, and which step each GPU activity belongs to.

A step is a CPU ``ProfilerStep#N`` user annotation. torch also writes a ``gpu_user_annotation`` copy of each on the
GPU timeline; it is ignored, so no step is counted twice. A window (file) without ProfilerStep is one step. The
partial step a profiler cuts at the end of a window (a stub of a few microseconds, ``_drop_edge_stubs``) is no step.

The step window used for attribution (documented in docs/metrics.md):

    start_N = max(cpu_start_N, end_{N-1})           (windows never overlap: nothing is counted twice)
    end_N   = max(cpu_end_N, end of the last GPU activity launched by step N)

so a step owns the GPU tail of the work it launched, and a GPU that lags the CPU does not show as idle.

GPU work queued before the window (the *backlog*: kernels, copies and memsets that run in the first step of a
window, or started before it and still run when it begins, but whose launch the file does not hold, or holds before
that step began) belongs to no step: it is labelled (``Steps.backlog``) and left out of every step's numbers, so the
first profiled step is not inflated.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .events import LOADER_FETCH, EndTimes, linked_runtime_rows, name_mask, pair_keys, step_at
from ..load.trace import Kind, RankTrace

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass(frozen=True)
class Steps:
    """One row per step: step, window, cpu_start, cpu_end, start, end, synthetic (no ProfilerStep in the trace)."""

    table: pd.DataFrame
    main_tid: int | None  # the thread that ran the training loop (holds the ProfilerStep annotations)
    gpu_step: np.ndarray  # for each GPU event (rank.events rows with kind >= KERNEL): its step index or -1
    gpu_index: np.ndarray  # row positions of those GPU events in rank.events
    backlog_step: np.ndarray | None = None  # for each GPU event: the step it runs in when it is backlog, else -1
    # Steps the profiler cut at a window's end (step, window, cpu_start, cpu_end): seen, not counted.
    partial: pd.DataFrame | None = None


def gpu_rows(ev: pd.DataFrame) -> np.ndarray:
    return np.flatnonzero(ev["kind"].to_numpy() >= int(Kind.KERNEL))


def find_steps(rank: RankTrace) -> Steps:
    ev = rank.events
    kind = ev["kind"].to_numpy()
    names = ev["name"]
    is_ann = kind == int(Kind.USER_ANNOTATION)
    cats = names.cat.categories
    step_codes = {i: int(m.group(1)) for i, c in enumerate(cats) if isinstance(c, str) and (m := _STEP_RE.match(c))}
    codes = names.cat.codes.to_numpy()
    rows = np.flatnonzero(is_ann & np.isin(codes, list(step_codes))) if step_codes else np.empty(0, int)
    partial = None
    if len(rows):
        t = pd.DataFrame(
            {
                "step": [step_codes[c] for c in codes[rows]],
                "window": ev["window"].to_numpy()[rows].astype(int),
                "cpu_start": ev["ts"].to_numpy()[rows],
                "cpu_end": ev["ts"].to_numpy()[rows] + ev["dur"].to_numpy()[rows],
                "synthetic": False,
            }
        )
        main_tid = int(pd.Series(ev["tid"].to_numpy()[rows]).mode().iloc[0])
        # The same step can be written twice (e.g. a nested record); keep the outermost.
        t = t.sort_values(["step", "cpu_start"]).groupby("step", as_index=False).agg(
            window=("window", "first"), cpu_start=("cpu_start", "min"), cpu_end=("cpu_end", "max"),
            synthetic=("synthetic", "first"))
        rows = functools.cache(lambda: _thread_fetch_rows(ev, main_tid))  # once, and only if a step may be a stub
        t, partial = _drop_edge_stubs(t, lambda a, b: _holds_only_fetches(*rows(), a, b))
    else:
        # No ProfilerStep: each window is one step spanning its events.
        g = ev.assign(end=ev["ts"] + ev["dur"]).groupby("window")
        t = pd.DataFrame({"cpu_start": g["ts"].min(), "cpu_end": g["end"].max()}).reset_index()
        t["step"] = t["window"].astype(int)
        t["synthetic"] = True
        main_tid = None
    t = t.sort_values("cpu_start").reset_index(drop=True)

    gidx = gpu_rows(ev)
    gpu_step, launch_ts = _launch_steps(ev, gidx, t)
    # Step ends: the last end of GPU work each step launched.
    gts = ev["ts"].to_numpy()[gidx]
    gend = gts + ev["dur"].to_numpy()[gidx]
    nsteps = len(t)
    gpu_end = np.full(nsteps, -np.inf)
    ok = gpu_step >= 0
    if ok.any():
        np.maximum.at(gpu_end, gpu_step[ok], gend[ok])
    start = t["cpu_start"].to_numpy().copy()
    end = np.maximum(t["cpu_end"].to_numpy(), gpu_end)
    win = t["window"].to_numpy()
    for i in range(1, nsteps):
        if win[i] == win[i - 1]:
            start[i] = max(start[i], end[i - 1])
        end[i] = max(end[i], start[i])
    t["start"] = start
    t["end"] = end
    # GPU events no step launched go to the window they start in; those queued before the window are backlog.
    backlog_step = np.full(len(gidx), -1, np.int64)
    if (~ok).any() and nsteps:
        fill = _running_into_first(step_at(start, end, gts[~ok]), gts[~ok], gend[~ok],
                                   ev["window"].to_numpy()[gidx][~ok], start, win)
        gpu_step = gpu_step.copy()
        gpu_step[~ok] = fill
        backlog = _backlog(ev, gidx, ok, launch_ts, gpu_step, t)
        backlog_step[backlog] = gpu_step[backlog]
        gpu_step[backlog] = -1
    return Steps(table=t, main_tid=main_tid, gpu_step=gpu_step, gpu_index=gidx, backlog_step=backlog_step,
                 partial=partial)


# A window's last step shorter than this share of the rank's shortest other step is a stub, not a step (see below).
STUB_SHARE = 0.1
# ... and one shorter than this share that holds nothing but DataLoader fetches (the fetch that ended the loop).
FETCH_STUB_SHARE = 0.5


def _drop_edge_stubs(t: pd.DataFrame, only_fetch=None) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Drop the partial step the profiler cuts at a window's end: (the steps, the dropped stubs or None).

    When the loop ends (or the profiler stops) right after ``prof.step()`` opened step N, the trace holds a
    ``ProfilerStep#N`` with only the start of that step (typically the DataLoader fetch that ended the loop): a
    few tens of microseconds against milliseconds for real steps. It is not a step: counted, it would be one made
    of nothing but data loading. A window's last step is a stub when it is shorter than ``STUB_SHARE`` of the
    shortest other step, or shorter than ``FETCH_STUB_SHARE`` of it and ``only_fetch(start, end)`` says it holds
    nothing but DataLoader fetches (on short CPU steps a fetch can take a tenth of a step).
    """
    if len(t) < 2:
        return t, None
    dur = t["cpu_end"] - t["cpu_start"]
    last = t.groupby("window")["cpu_start"].transform("max") == t["cpu_start"]
    ref = dur[~last] if (~last).any() else dur[dur >= STUB_SHARE * dur.max()]
    floor = float(ref.min())
    stub = last & (dur < STUB_SHARE * floor)
    if only_fetch is not None:
        for i in np.flatnonzero((last & ~stub & (dur < FETCH_STUB_SHARE * floor)).to_numpy()):
            if only_fetch(float(t["cpu_start"].iat[i]), float(t["cpu_end"].iat[i])):
                stub.iat[i] = True
    if not stub.any() or stub.all():
        return t, None
    return t[~stub].reset_index(drop=True), t[stub].reset_index(drop=True)


def _only_loader_fetch(ev: pd.DataFrame, tid: int, start: float, end: float) -> bool:
    """True when every CPU event of thread ``tid`` in [start, end], other than the step itself, lies inside a
    DataLoader fetch (``enumerate(DataLoader)...``), and at least one fetch is there; no GPU launch either."""
    return _holds_only_fetches(*_thread_fetch_rows(ev, tid), start, end)


def _thread_fetch_rows(ev: pd.DataFrame, tid: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start, end and is-a-fetch of thread ``tid``'s CPU events other than ``ProfilerStep#``."""
    ts = ev["ts"].to_numpy()
    te = EndTimes(ev)
    mine = (ev["tid"].to_numpy() == tid) & (ev["kind"].to_numpy() < int(Kind.KERNEL))
    fetch = name_mask(ev, lambda s: s.startswith(LOADER_FETCH))
    rows = np.flatnonzero(mine & (fetch | ~name_mask(ev, lambda s: s.startswith("ProfilerStep#"))))
    return ts[rows], te[rows], fetch[rows]


def _holds_only_fetches(ts: np.ndarray, te: np.ndarray, is_fetch: np.ndarray, start: float, end: float) -> bool:
    inside = (ts >= start) & (te <= end)
    fetch = inside & is_fetch
    if not fetch.any():
        return False
    fs, fe = ts[fetch], te[fetch]
    return all(((fs <= ts[r]) & (te[r] <= fe)).any() for r in np.flatnonzero(inside & ~is_fetch))


def _running_into_first(fill: np.ndarray, gts: np.ndarray, gend: np.ndarray, gwin: np.ndarray, start: np.ndarray,
                        win: np.ndarray) -> np.ndarray:
    """``fill`` (the step each unlaunched GPU event starts in, or -1), where an event that started before its
    window's first step and still runs when that step begins is given to that step (it then goes to the backlog:
    it runs in the step but was queued before it)."""
    if not len(win):
        return fill
    firsts = np.flatnonzero(np.r_[True, win[1:] != win[:-1]])
    lo = int(min(win.min(), gwin.min(initial=0)))
    first_of = np.full(int(max(win.max(), gwin.max(initial=0))) - lo + 1, -1, np.int64)
    first_of[win[firsts].astype(np.int64) - lo] = firsts
    first = first_of[gwin.astype(np.int64) - lo]
    s0 = start[np.clip(first, 0, None)]
    into = (fill < 0) & (first >= 0) & (gts < s0) & (gend > s0)
    return np.where(into, first, fill)


def _backlog(ev: pd.DataFrame, gidx: np.ndarray, linked: np.ndarray, launch_ts: np.ndarray, gpu_step: np.ndarray,
             steps: pd.DataFrame) -> np.ndarray:
    """GPU events queued before their window: in the window's first step, launched by no step, with no launch
    call in the file or one before that step's CPU start. Only where the file links launches to GPU work at all
    (a trace without launch records has no way to tell backlog from the step's own work)."""
    out = np.zeros(len(gidx), bool)
    if not linked.any():
        return out
    first = steps.groupby("window").head(1)
    first_idx = dict(zip(first["window"].to_numpy(), first.index.to_numpy()))
    first_cs = dict(zip(first["window"].to_numpy(), first["cpu_start"].to_numpy()))
    win = ev["window"].to_numpy()[gidx]
    for w, i in first_idx.items():
        here = ~linked & (win == w) & (gpu_step == i)
        out |= here & (np.isnan(launch_ts) | (launch_ts < first_cs[w]))
    return out


def _launch_steps(ev: pd.DataFrame, gidx: np.ndarray, steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Step index of the runtime call that launched each GPU event (joined on window + correlation), or -1; and
    the time of that call (NaN when the file has none)."""
    out = np.full(len(gidx), -1, np.int64)
    lts = np.full(len(gidx), np.nan)
    if not len(gidx) or not len(steps):
        return out, lts
    rt = linked_runtime_rows(ev)
    if not len(rt):
        return out, lts
    rts = ev["ts"].to_numpy()[rt]
    cs = steps["cpu_start"].to_numpy()
    ce = steps["cpu_end"].to_numpy()
    order = np.argsort(cs)
    k = step_at(cs[order], ce[order], rts, ev["window"].to_numpy()[rt], steps["window"].to_numpy()[order])
    kk = order[np.clip(k, 0, None)]
    in_step = k >= 0
    rwin, rcorr = ev["window"].to_numpy()[rt], ev["corr"].to_numpy()[rt]
    gwin, gcorr = ev["window"].to_numpy()[gidx], ev["corr"].to_numpy()[gidx]
    keys = pair_keys([(rwin, rcorr), (gwin, gcorr)])
    if keys is None:  # ids too large for one integer key: join on both columns
        launch = pd.DataFrame({"window": rwin[in_step], "corr": rcorr[in_step], "step": kk[in_step]}
                              ).drop_duplicates(["window", "corr"])
        g = pd.DataFrame({"window": gwin, "corr": gcorr, "pos": np.arange(len(gidx))})
        m = g.merge(launch, on=["window", "corr"], how="inner")
        out[m["pos"].to_numpy()] = m["step"].to_numpy()
        calls = pd.DataFrame({"window": rwin, "corr": rcorr, "ts": rts}).drop_duplicates(["window", "corr"])
        mt = g.merge(calls, on=["window", "corr"], how="inner")
        lts[mt["pos"].to_numpy()] = mt["ts"].to_numpy()
        return out, lts
    # The first call of each (window, correlation), as a join on one integer key (what the frames' merge did).
    rkey, gkey = keys
    del rwin, rcorr, gwin, gcorr, keys
    calls = pd.Index(rkey)
    if calls.is_unique:  # one call per (window, correlation), as Kineto writes them: one hash table for both joins
        at = calls.get_indexer(gkey)
        hit = np.flatnonzero(at >= 0)
        lts[hit] = rts[at[hit]]
        hit = hit[in_step[at[hit]]]
        out[hit] = kk[at[hit]]
        return out, lts
    lkey = rkey[in_step]
    first = ~pd.Index(lkey).duplicated()
    at = pd.Index(lkey[first]).get_indexer(gkey)
    hit = np.flatnonzero(at >= 0)
    out[hit] = kk[in_step][first][at[hit]]
    del lkey, first, at, hit
    first = ~pd.Index(rkey).duplicated()
    at = pd.Index(rkey[first]).get_indexer(gkey)
    hit = np.flatnonzero(at >= 0)
    lts[hit] = rts[first][at[hit]]
    return out, lts
