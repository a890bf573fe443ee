"""Where each step's time went: GPU categories (exclusive and total), copy bytes, CPU-side waits.

Pure functions of a ``RankTrace`` and its ``Steps``; the definitions are in docs/metrics.md.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..thresholds import DEFAULT, Thresholds
from .events import LOADER_FETCH, EndTimes, name_mask, rows_sharing_corr, runtime_mask, starts_in, step_at
from .intervals import build_timeline
from .steps import Steps
from ..load.trace import Kind, RankTrace

from .categories import CPU_CATEGORIES, EXPOSED_NAMES, GPU_CATEGORIES  # noqa: F401  (defined once, there)

SYNC_CALLS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpyToSymbol",
        "cudaMemcpyFromSymbol",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
        # ROCm's synchronous copy (what torch calls for a blocking copy on HIP) and the driver API's copies.
        "hipMemcpyWithStream",
        "hipMemcpy2D",
        "hipMemcpyDtoH",
        "hipMemcpyHtoD",
        "hipCtxSynchronize",
        "cuMemcpy",
        "cuMemcpyDtoH",
        "cuMemcpyHtoD",
        "cuMemcpy2D",
    }
)


def is_comm_kernel(name: str) -> bool:
    n = name.lower()
    return "nccl" in n or "rccl" in n


def gpu_category_codes(ev: pd.DataFrame, gidx: np.ndarray) -> np.ndarray:
    """Category index (GPU_CATEGORIES) of each GPU event, decided once per distinct name."""
    kind = ev["kind"].to_numpy()[gidx]
    codes = ev["name"].cat.codes.to_numpy()[gidx]
    cats = ev["name"].cat.categories
    lut = np.zeros(len(cats) + 1, np.int64)
    for i, name in enumerate(cats):
        name = str(name)
        if "HtoD" in name:
            lut[i] = 2
        elif "DtoH" in name:
            lut[i] = 3
        elif "Memcpy" in name:  # DtoD, PtoP
            lut[i] = 4
        elif is_comm_kernel(name):
            lut[i] = 1
        else:
            lut[i] = 0
    out = lut[codes]
    out[kind == int(Kind.MEMSET)] = 5
    # A kernel named like a copy is still a kernel; a copy is only what CUPTI reports as one.
    is_kernel = kind == int(Kind.KERNEL)
    out[is_kernel & (out >= 2)] = 0
    out[(kind == int(Kind.MEMCPY)) & (out < 2)] = 4
    return out


def name_strings(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Names of the given rows as an object array of str (without materializing the whole column)."""
    cats = np.asarray(ev["name"].cat.categories, dtype=object)
    return cats[ev["name"].cat.codes.to_numpy()[rows]]


class CategoryView:
    """``view[i]`` / ``view[rows]`` of a categorical column without materializing it (missing values are NaN)."""

    def __init__(self, col: pd.Series):
        self._codes = col.cat.codes.to_numpy()
        self._cats = np.append(np.asarray(col.cat.categories, dtype=object), np.nan)  # code -1 -> NaN

    def __getitem__(self, rows):
        return self._cats[self._codes[rows]]

    def __len__(self) -> int:
        return len(self._codes)


def attribute(rank: RankTrace, steps: Steps, thresholds: Thresholds = DEFAULT) -> pd.DataFrame:
    """One row per step with every number of the step table (see docs/metrics.md)."""
    ev = rank.events
    st = steps.table
    out = pd.DataFrame(
        {
            "step": st["step"].astype(int),
            "synthetic": st["synthetic"],
            "window": st["window"],
            "cpu_start_us": st["cpu_start"],
            "cpu_end_us": st["cpu_end"],
            "start_us": st["start"],
            "end_us": st["end"],
        }
    )
    out["wall_us"] = out["end_us"] - out["start_us"]
    a = st["start"].to_numpy()
    b = st["end"].to_numpy()
    n = len(st)
    ts = ev["ts"].to_numpy()
    dur = ev["dur"].to_numpy()
    gidx = steps.gpu_index

    if len(gidx):
        gcat = gpu_category_codes(ev, gidx)
        own = _own_mask(steps)
        ps, pe, pc = step_gpu_parts(ts[gidx][own], (ts[gidx] + dur[gidx])[own], gcat[own], steps.gpu_step[own], a, b)
        tl = build_timeline(ps, pe, pc, len(GPU_CATEGORIES) + 1)
        excl = tl.exclusive_in(a, b)
        uni = tl.union_in(a, b)
        # A copy of another step running in this window is none of this step's GPU work: idle here (below).
        busy = tl.busy_in(a, b) - excl[-1]
        # GPU work queued before the window runs in the first step but is not its work: the time only it ran is
        # taken out of the step's wall (it is neither the step's compute nor its idle time).
        out["backlog_us"] = _backlog_only(ts[gidx], ts[gidx] + dur[gidx], own, a, b)
        out["wall_us"] = out["wall_us"] - out["backlog_us"]
        for i, name in enumerate(EXPOSED_NAMES):
            out[f"bd_{name}"] = excl[i]
        out["bd_idle"] = out["wall_us"] - busy
        for i, name in enumerate(GPU_CATEGORIES):
            out[f"tot_{name}"] = uni[i]
        out["gpu_busy_us"] = busy
        _copy_columns(out, ev, gidx, gcat, steps.gpu_step, n)
        _kernel_columns(out, ev, gidx, gcat, steps.gpu_step, n, thresholds)
    else:
        out["gpu_busy_us"] = np.nan

    _cpu_columns(out, rank, steps, gidx)
    if not len(gidx):
        _cpu_breakdown(out, rank, steps)
    return out


#: Category code (after GPU_CATEGORIES) of the part of a copy or memset that runs outside its step's window.
OTHER_STEP = len(GPU_CATEGORIES)


def step_gpu_parts(start: np.ndarray, end: np.ndarray, cat: np.ndarray, step: np.ndarray, a: np.ndarray,
                   b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPU intervals as each step's windows [a, b] see them: kernels as they are; a copy or memset (category >= 2)
    of step ``step`` keeps its category inside that step's window, and the parts of it that run in another step's
    window (a side-stream prefetch launched by the next step, running while this one's GPU work is still on) are
    ``OTHER_STEP``, so a step's exposed copy time is never more than its own copies' time."""
    split = (cat >= 2) & (step >= 0)
    if not split.any():
        return start, end, cat
    k = np.clip(step, 0, None)
    lo = np.where(split, np.clip(start, a[k], b[k]), start)
    hi = np.where(split, np.clip(end, a[k], b[k]), end)
    before = split & (start < lo)
    after = split & (end > hi)
    return (np.concatenate([lo, start[before], hi[after]]), np.concatenate([hi, lo[before], end[after]]),
            np.concatenate([cat, np.full(int(before.sum()) + int(after.sum()), OTHER_STEP)]))


def _own_mask(steps: Steps) -> np.ndarray:
    """GPU events (of steps.gpu_index) that are not backlog from before the window."""
    if steps.backlog_step is None:
        return np.ones(len(steps.gpu_index), bool)
    return steps.backlog_step < 0


def _backlog_only(start: np.ndarray, end: np.ndarray, own: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per window [a, b]: time in which backlog GPU work runs and none of the steps' own work does."""
    if own.all():
        return np.zeros(len(a))
    everything = build_timeline(start, end, np.zeros(len(start), int), 1).union_in(a, b)[0]
    mine = build_timeline(start[own], end[own], np.zeros(int(own.sum()), int), 1).union_in(a, b)[0]
    return np.maximum(everything - mine, 0.0)


def _per_step_sum(values: np.ndarray, step: np.ndarray, mask: np.ndarray, n: int) -> np.ndarray:
    ok = mask & (step >= 0)
    return np.bincount(step[ok], weights=values[ok], minlength=n)[:n] if n else np.zeros(0)


def _copy_columns(out, ev, gidx, gcat, gstep, n) -> None:
    names = ev["name"]
    pageable = name_mask(ev, lambda s: "Pageable" in s)[gidx]
    pinned = name_mask(ev, lambda s: "Pinned" in s)[gidx]
    nbytes = np.maximum(ev["bytes"].to_numpy()[gidx], 0).astype(np.float64)
    dur = ev["dur"].to_numpy()[gidx]
    h2d, d2h, d2d = gcat == 2, gcat == 3, gcat == 4
    for label, mask in (
        ("h2d", h2d),
        ("pageable_h2d", h2d & pageable),
        ("pinned_h2d", h2d & pinned),
        ("d2h", d2h),
        ("pageable_d2h", d2h & pageable),
        ("d2d", d2d),
    ):
        out[f"{label}_bytes"] = _per_step_sum(nbytes, gstep, mask, n).astype(np.int64)
        out[f"{label}_time_us"] = _per_step_sum(dur, gstep, mask, n)
        out[f"{label}_count"] = _per_step_sum(np.ones(len(gidx)), gstep, mask, n).astype(np.int64)
    del names


def _kernel_columns(out, ev, gidx, gcat, gstep, n, thresholds: Thresholds) -> None:
    kernel = ev["kind"].to_numpy()[gidx] == int(Kind.KERNEL)
    dur = ev["dur"].to_numpy()[gidx]
    compute = kernel & (gcat == 0)
    out["kernel_count"] = _per_step_sum(np.ones(len(gidx)), gstep, kernel, n).astype(np.int64)
    out["compute_kernel_count"] = _per_step_sum(np.ones(len(gidx)), gstep, compute, n).astype(np.int64)
    out["compute_kernel_time_us"] = _per_step_sum(dur, gstep, compute, n)
    short = compute & (dur < thresholds.short_kernel_us)
    out["short_kernel_count"] = _per_step_sum(np.ones(len(gidx)), gstep, short, n).astype(np.int64)
    med = np.full(n, np.nan)
    if compute.any():
        df = pd.DataFrame({"s": gstep[compute], "d": dur[compute]})
        df = df[df["s"] >= 0]
        m = df.groupby("s")["d"].median()
        med[m.index.to_numpy()] = m.to_numpy()
    out["median_kernel_us"] = med


def pageable_launch_rows(ev: pd.DataFrame, gidx: np.ndarray) -> np.ndarray:
    """Rows of the runtime calls that launched pageable host<->device copies (they block until the copy is done)."""
    kind = ev["kind"].to_numpy()
    if not len(gidx):
        return np.empty(0, np.int64)
    pageable = name_mask(ev, lambda s: "Pageable" in s)[gidx] & (kind[gidx] == int(Kind.MEMCPY))
    if not pageable.any():
        return np.empty(0, np.int64)
    return rows_sharing_corr(ev, np.flatnonzero(runtime_mask(ev)), gidx[pageable])


def sync_call_rows(ev: pd.DataFrame, gidx: np.ndarray) -> np.ndarray:
    """Rows of runtime calls that block the CPU on the GPU: synchronize calls, synchronous copies, and the
    launch calls of pageable copies (the CPU waits for those to finish)."""
    sync = runtime_mask(ev) & name_mask(ev, lambda s: re.sub(r"_v\d+$", "", s) in SYNC_CALLS)
    sync[pageable_launch_rows(ev, gidx)] = True
    return np.flatnonzero(sync)


def _cpu_columns(out, rank: RankTrace, steps: Steps, gidx) -> None:
    """Dataloader wait and blocked-in-sync time on the CPU, within each step's CPU window."""
    ev = rank.events
    kind = ev["kind"].to_numpy()
    ts = ev["ts"].to_numpy()
    end = EndTimes(ev)
    dl = np.flatnonzero(name_mask(ev, lambda s: s.startswith(LOADER_FETCH)) & (kind <= int(Kind.USER_ANNOTATION)))
    sync_rows = sync_call_rows(ev, gidx)
    cs = out["cpu_start_us"].to_numpy()
    ce = out["cpu_end_us"].to_numpy()
    # Unions per step window from one sweep each (a per-step scan would be quadratic on long traces).
    out["dataloader_us"] = build_timeline(ts[dl], end[dl], np.zeros(len(dl), int), 1).union_in(cs, ce)[0]
    out["dataloader_count"] = starts_in(ts[dl], cs, ce)
    workers = dl[name_mask(ev, lambda s: "_MultiProcessingDataLoaderIter" in s)[dl]]
    out["dataloader_worker_count"] = starts_in(ts[workers], cs, ce)
    out["sync_us"] = build_timeline(ts[sync_rows], end[sync_rows], np.zeros(len(sync_rows), int), 1).union_in(cs, ce)[0]
    out["sync_count"] = starts_in(ts[sync_rows], cs, ce)
    out["cpu_step_us"] = ce - cs
    if len(gidx):
        _idle_causes(out, ts, end, gidx, dl, sync_rows)


def _idle_causes(out, ts, end, gidx, dl, sync_rows) -> None:
    """Split GPU idle time by what the CPU was doing meanwhile: waiting for data, blocked in a sync, or else.

    One sweep with priorities GPU busy > dataloader wait > blocked sync: the exclusive time of "dataloader" in a
    step window is GPU-idle time that overlaps the loader wait, and so on; the rest of idle is "other" (the CPU
    was running Python / launching, not feeding the GPU fast enough).
    """
    s = np.concatenate([ts[gidx], ts[dl], ts[sync_rows]])
    e = np.concatenate([end[gidx], end[dl], end[sync_rows]])
    c = np.concatenate([np.zeros(len(gidx)), np.ones(len(dl)), np.full(len(sync_rows), 2)])
    tl = build_timeline(s, e, c, 3)
    excl = tl.exclusive_in(out["start_us"].to_numpy(), out["end_us"].to_numpy())
    out["idle_dataloader_us"] = excl[1]
    out["idle_sync_us"] = excl[2]
    out["idle_other_us"] = out["bd_idle"] - excl[1] - excl[2]


def _cpu_breakdown(out, rank: RankTrace, steps: Steps) -> None:
    """CPU-only runs: the training thread's step time by category (priority CPU_CATEGORIES, rest 'other')."""
    ev = rank.events
    kind = ev["kind"].to_numpy()
    tid = ev["tid"].to_numpy()
    main = steps.main_tid
    on_main = (tid == main) if main is not None else np.ones(len(ev), bool)
    cpu_like = on_main & (kind <= int(Kind.USER_ANNOTATION))
    ts = ev["ts"].to_numpy()
    end = EndTimes(ev)
    is_step = name_mask(ev, lambda s: s.startswith("ProfilerStep#"))
    masks = {
        "dataloader": name_mask(ev, lambda s: s.startswith(LOADER_FETCH)),
        "comm": name_mask(ev, lambda s: s.startswith(("gloo:", "nccl:", "c10d::", "record_param_comms"))),
        "optimizer": name_mask(ev, lambda s: s.startswith(("Optimizer.step#", "Optimizer.zero_grad#"))),
        "backward": name_mask(ev, lambda s: s.startswith("autograd::engine::evaluate_function")),
    }
    starts, ends, cats = [], [], []
    for c, name in enumerate(CPU_CATEGORIES[:4]):
        rows = np.flatnonzero(cpu_like & masks[name])
        starts.append(ts[rows]); ends.append(end[rows]); cats.append(np.full(len(rows), c))
    # Forward: the training thread's ops before the step's first backward op; the rest of its ops are "other".
    first_bwd = {}
    bwd_rows = np.flatnonzero(cpu_like & masks["backward"])
    cs = out["cpu_start_us"].to_numpy()
    ce = out["cpu_end_us"].to_numpy()
    for i, (x, y) in enumerate(zip(cs, ce)):
        bt = ts[bwd_rows]
        inside = bt[(bt >= x) & (bt < y)]
        first_bwd[i] = inside.min() if len(inside) else y
    generic = np.flatnonzero(cpu_like & ~is_step & ~masks["dataloader"] & ~masks["comm"] & ~masks["optimizer"] & ~masks["backward"])
    k = step_at(cs, ce, ts[generic])
    fb = np.array([first_bwd.get(int(j), -np.inf) for j in k])
    fwd = generic[(k >= 0) & (ts[generic] < fb)]
    starts.append(ts[fwd]); ends.append(np.minimum(end[fwd], fb[(k >= 0) & (ts[generic] < fb)])); cats.append(np.full(len(fwd), 4))
    # Waiting for a collective: gloo runs it on its own threads and the training thread sits in an unannotated
    # gap until it is done (end of backward). Collective spans on any thread fill only such gaps (lowest priority).
    coll_any = np.flatnonzero(masks["comm"] & (kind <= int(Kind.USER_ANNOTATION)) & ~on_main)
    starts.append(ts[coll_any]); ends.append(end[coll_any]); cats.append(np.full(len(coll_any), 5))
    tl = build_timeline(np.concatenate(starts), np.concatenate(ends), np.concatenate(cats), 6)
    excl = tl.exclusive_in(cs, ce)
    excl[1] += excl[5]  # comm = collectives on the training thread + waiting for collectives elsewhere
    excl = excl[:5]
    for c, name in enumerate(CPU_CATEGORIES[:5]):
        out[f"cpu_{name}"] = excl[c]
    out["cpu_other"] = (ce - cs) - excl.sum(axis=0)
