"""The nvidia-smi view of a rank: the GPU-Util number users watch, recomputed from the trace, and what filled the
time it does not count.

NVML (``nvidia-smi``'s ``GPU-Util``, ``nvmlDeviceGetUtilizationRates().gpu``) defines utilization as the
*percent of time over the past sample period during which one or more kernels was executing on the GPU*. It is
not SM occupancy or FLOP efficiency: one tiny kernel on one SM for the whole period reads 100 %. So, per rank
and per sample window of ``util_window_us`` (100 ms):

    util = (time in the window during which at least one kernel runs, on any stream) / window length

Kernels only: copies (``gpu_memcpy``) and memsets run on copy engines or as driver work and do not count, as in
NVML. NCCL kernels *are* kernels: a collective that waits for a slow peer spins inside its kernel, so exposed
communication reads as busy in nvidia-smi; ``comm_only`` reports the share of the window in which only NCCL
kernels ran (counted in ``util``) so that "100 % busy" can be told apart from "100 % waiting on the network".

The rest of the window (no kernel at all) is split by priority into what the process was doing meanwhile:
``copy`` (a memcpy / memset ran), ``dataloader`` (the CPU waited in ``DataLoader.__next__``), ``sync`` (the CPU
was blocked in a synchronizing call) and ``other`` (launch gaps: the CPU was running Python, dispatching or
launching and did not keep the queue full). ``util + copy + dataloader + sync + other == 1`` for every window.

Windows start at the rank's first step and tile each trace window (file) up to the end of its last step; the
last one is usually shorter (``partial``). nvidia-smi's own samples are not aligned to steps, which is why its
number jumps from one reading to the next: ``summary`` also gives the range of window values over four phase
offsets of the grid. Definitions: docs/utilization.md.

``rank_part`` also makes the CPU launch columns ``launch_count`` / ``launch_call_us`` (number and summed
duration of the kernel-launch runtime calls made inside each step's CPU window), ``graph_launch_count`` (of them,
CUDA / HIP graph replays: one call runs every kernel of the graph), ``launch_gpu_median_us`` (median over the
step's launch calls of the GPU time of the kernels each launched: a graph replay's is its whole graph's) and
``kernels_per_launch``, and the step column ``smi_util`` (share of the step window in which a kernel ran). Nothing here imports torch.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .attribution import is_comm_kernel, sync_call_rows
from .events import EndTimes, rows_sharing_corr, runtime_mask, step_at
from .intervals import build_timeline
from ..thresholds import DEFAULT, Thresholds
from ..load.trace import Kind, RankTrace
from .results import RankPart

FILL_CATEGORIES = ("copy", "dataloader", "sync", "other")
COLUMNS = ["window", "window_start_us", "window_end_us", "partial", "util", "comm_only", *FILL_CATEGORIES]
LOW_UTIL = 0.5

#: Runtime / driver calls that launch kernels (a ``_vNNNN`` suffix some CUPTI versions add is ignored).
LAUNCH_CALLS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchKernelEx", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cudaGraphLaunch", "cuLaunchKernel", "cuLaunchKernelEx",
    "cuLaunchCooperativeKernel", "cuGraphLaunch", "hipLaunchKernel", "hipExtLaunchKernel",
    "hipModuleLaunchKernel", "hipExtModuleLaunchKernel", "hipGraphLaunch",
})
_VERSION_SUFFIX = re.compile(r"_v\d+$")


def rank_part(rank: RankTrace, steps, step_table: pd.DataFrame | None = None,
              thresholds: Thresholds = DEFAULT) -> RankPart:
    """The tables ``utilization`` and ``utilization_summary``, the launch step columns and ``smi_util``."""
    window_us = float(thresholds.util_window_us)
    ev = rank.events
    columns = _launch_columns(ev, steps)
    tl = _timeline(ev, steps)
    if tl is None:
        columns["smi_util"] = np.full(len(steps.table), np.nan)
        return RankPart(tables={"utilization": pd.DataFrame({c: pd.Series(dtype=float) for c in COLUMNS}),
                                "utilization_summary": pd.DataFrame()}, columns=columns)
    st = steps.table
    excl = tl.exclusive_in(st["start"].to_numpy(), st["end"].to_numpy())
    wall = (st["end"] - st["start"]).to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        columns["smi_util"] = np.where(wall > 0, (excl[0] + excl[1]) / wall, np.nan)
    table = windows_table(tl, _spans(steps), window_us)
    s = summarize(table, window_us, tl=tl, spans=_spans(steps))
    return RankPart(tables={"utilization": table, "utilization_summary": pd.DataFrame([s]) if s else pd.DataFrame()},
                    columns=columns)


def _timeline(ev: pd.DataFrame, steps):
    """One priority sweep: compute kernel > NCCL kernel > copy/memset > DataLoader wait > blocked sync."""
    gidx = steps.gpu_index
    if not len(gidx):
        return None
    kind = ev["kind"].to_numpy()
    ts = ev["ts"].to_numpy()
    end = EndTimes(ev)
    cats = ev["name"].cat.categories
    comm_lut = np.array([is_comm_kernel(str(c)) for c in cats] + [False])
    gk = kind[gidx]
    cat = np.where(gk == int(Kind.KERNEL), np.where(comm_lut[ev["name"].cat.codes.to_numpy()[gidx]], 1, 0), 2)
    dl_lut = np.array([str(c).startswith("enumerate(DataLoader)") for c in cats] + [False])
    dl = np.flatnonzero(dl_lut[ev["name"].cat.codes.to_numpy()] & (kind <= int(Kind.USER_ANNOTATION)))
    sy = sync_call_rows(ev, gidx)
    starts = np.concatenate([ts[gidx], ts[dl], ts[sy]])
    ends = np.concatenate([end[gidx], end[dl], end[sy]])
    cc = np.concatenate([cat, np.full(len(dl), 3), np.full(len(sy), 4)])
    return build_timeline(starts, ends, cc, 5)


def _spans(steps) -> list[tuple[int, float, float]]:
    """(trace window, first step start, last step end) per trace window (file) of the rank."""
    st = steps.table
    out = []
    for w, g in st.groupby("window", sort=True):
        a, b = float(g["start"].min()), float(g["end"].max())
        if b > a:
            out.append((int(w), a, b))
    return out


def _grid(spans, window_us: float, offset: float = 0.0):
    rows = []
    for w, a, b in spans:
        edges = np.arange(a + offset, b, window_us)
        if offset > 0:
            edges = np.concatenate([[a], edges])
        starts = edges
        ends = np.minimum(np.append(edges[1:], b), b)
        for x, y in zip(starts, ends):
            if y > x:
                rows.append((w, x, y))
    return rows


def windows_table(tl, spans, window_us: float) -> pd.DataFrame:
    """One row per sample window: util and the split of the rest of the window (shares of the window)."""
    grid = _grid(spans, window_us)
    if not grid:
        return pd.DataFrame({c: pd.Series(dtype=float) for c in COLUMNS})
    w = np.array([g[0] for g in grid])
    a = np.array([g[1] for g in grid])
    b = np.array([g[2] for g in grid])
    length = b - a
    excl = tl.exclusive_in(a, b)
    share = excl / length
    out = pd.DataFrame({
        "window": w.astype(np.int64),
        "window_start_us": a,
        "window_end_us": b,
        "partial": length < window_us * (1 - 1e-9),
        "util": share[0] + share[1],
        "comm_only": share[1],
        "copy": share[2],
        "dataloader": share[3],
        "sync": share[4],
    })
    out["other"] = np.clip(1.0 - share.sum(axis=0), 0.0, 1.0)
    return out[COLUMNS]


def summarize(table: pd.DataFrame, window_us: float, tl=None, spans=None) -> dict:
    """Mean / min / max utilization over full windows (all windows if none is full), the share of windows below
    50 %, and which category filled the non-kernel time of those low windows."""
    if table is None or not len(table):
        return {}
    full = table[~table["partial"]]
    use = full if len(full) else table
    util = use["util"].to_numpy()
    length = (use["window_end_us"] - use["window_start_us"]).to_numpy()
    low = use[use["util"] < LOW_UTIL]
    fill = {}
    if len(low):
        ll = (low["window_end_us"] - low["window_start_us"]).to_numpy()
        tot = {c: float((low[c].to_numpy() * ll).sum()) for c in FILL_CATEGORIES}
        denom = sum(tot.values())
        fill = {c: (v / denom if denom > 0 else 0.0) for c, v in tot.items()}
    filler = max(fill, key=fill.get) if fill and sum(fill.values()) > 0 else None
    s = {
        "window_us": float(window_us),
        "windows": int(len(use)),
        "partial_windows_used": bool(not len(full)),
        "mean_util": float(np.average(util, weights=length)) if length.sum() > 0 else float(util.mean()),
        "min_util": float(util.min()),
        "max_util": float(util.max()),
        "share_below_50": float((util < LOW_UTIL).mean()),
        "mean_comm_only": float(np.average(use["comm_only"], weights=length)) if length.sum() > 0 else 0.0,
        "low_windows": int(len(low)),
        "low_filler": filler,
        **{f"low_fill_{c}": fill.get(c, 0.0) for c in FILL_CATEGORIES},
    }
    if tl is not None and spans:
        lo, hi = s["min_util"], s["max_util"]
        for k in (1, 2, 3):  # the same grid shifted by a quarter window: where nvidia-smi's samples could fall
            grid = _grid(spans, window_us, offset=window_us * k / 4)
            a = np.array([g[1] for g in grid])
            b = np.array([g[2] for g in grid])
            keep = (b - a) >= window_us * (1 - 1e-9)
            if keep.any():
                e = tl.exclusive_in(a[keep], b[keep])
                u = (e[0] + e[1]) / (b[keep] - a[keep])
                lo, hi = min(lo, float(u.min())), max(hi, float(u.max()))
        s["min_util_any_phase"] = lo
        s["max_util_any_phase"] = hi
    s["text"] = summary_text(s)
    return s


_FILL_WORDS = {"copy": "copies (no kernel running)", "dataloader": "waiting for data",
               "sync": "the CPU blocked in syncs", "other": "launch gaps (the CPU not issuing kernels)"}


def summary_text(s: dict) -> str:
    if not s:
        return ""
    head = (f"nvidia-smi view ({s['window_us'] / 1000:.0f} ms samples, {s['windows']} windows): GPU-Util mean "
            f"{100 * s['mean_util']:.0f} %, min {100 * s['min_util']:.0f} %, max {100 * s['max_util']:.0f} %; "
            f"{100 * s['share_below_50']:.0f} % of samples below 50 %")
    if s.get("low_filler"):
        head += (f", their non-kernel time mostly {_FILL_WORDS[s['low_filler']]} "
                 f"({100 * s['low_fill_' + s['low_filler']]:.0f} %)")
    if s.get("mean_comm_only", 0) >= 0.05:
        head += f"; {100 * s['mean_comm_only']:.0f} % of the time only NCCL kernels ran (counted busy by NVML)"
    return head


def _launch_columns(ev: pd.DataFrame, steps) -> dict[str, np.ndarray]:
    """Per step: number and summed duration of kernel-launch calls made inside the step's CPU window."""
    kind = ev["kind"].to_numpy()
    cats = ev["name"].cat.categories
    lut = np.array([_VERSION_SUFFIX.sub("", str(c)) in LAUNCH_CALLS for c in cats] + [False])
    is_rt = runtime_mask(ev)
    launch = is_rt & lut[ev["name"].cat.codes.to_numpy()]
    # A runtime call whose correlation names a kernel launched it, whatever it is called.
    k = np.flatnonzero(kind == int(Kind.KERNEL))
    if len(k):
        rt = np.flatnonzero(is_rt & ~launch & (ev["corr"].to_numpy() >= 0))
        if len(rt):
            launch[rows_sharing_corr(ev, rt, k)] = True
    rows = np.flatnonzero(launch)
    n = len(steps.table)
    count = np.zeros(n, np.int64)
    total = np.zeros(n)
    graphs = np.zeros(n, np.int64)
    gpu_median = np.full(n, np.nan)
    per_launch = np.full(n, np.nan)
    if len(rows) and n:
        ts = ev["ts"].to_numpy()[rows]
        cs = steps.table["cpu_start"].to_numpy()
        ce = steps.table["cpu_end"].to_numpy()
        j = step_at(cs, ce, ts)
        ok = j >= 0
        count = np.bincount(j[ok], minlength=n)[:n].astype(np.int64)
        total = np.bincount(j[ok], weights=ev["dur"].to_numpy()[rows][ok], minlength=n)[:n]
        glut = np.array(["GraphLaunch" in str(c) for c in cats] + [False])
        is_graph = glut[ev["name"].cat.codes.to_numpy()[rows]]
        graphs = np.bincount(j[ok & is_graph], minlength=n)[:n].astype(np.int64)
        gpu_median, per_launch = _gpu_per_launch(ev, rows[ok], j[ok], k, n)
    return {"launch_count": count, "launch_call_us": total, "graph_launch_count": graphs,
            "launch_gpu_median_us": gpu_median, "kernels_per_launch": per_launch}


def _gpu_per_launch(ev: pd.DataFrame, rows: np.ndarray, step: np.ndarray, kernels: np.ndarray, n: int):
    """Per step: the median GPU time of the kernels one launch call ran (over the step's calls that ran any), and
    kernels per such call. A call's kernels share its correlation id (all of a graph's, for a graph launch)."""
    med, per = np.full(n, np.nan), np.full(n, np.nan)
    if not len(rows) or not len(kernels):
        return med, per
    win, corr, dur = ev["window"].to_numpy(), ev["corr"].to_numpy(), ev["dur"].to_numpy()
    kd = pd.DataFrame({"window": win[kernels], "corr": corr[kernels], "d": dur[kernels]})
    kd = kd[kd["corr"] >= 0].groupby(["window", "corr"])["d"].agg(["sum", "size"]).reset_index()
    calls = pd.DataFrame({"window": win[rows], "corr": corr[rows], "step": step})
    m = calls.merge(kd, on=["window", "corr"], how="inner")
    if not len(m):
        return med, per
    g = m.groupby("step").agg(med=("sum", "median"), k=("size", "sum"), c=("size", "count"))
    idx = g.index.to_numpy()
    med[idx] = g["med"].to_numpy()
    per[idx] = (g["k"] / g["c"]).to_numpy()
    return med, per
