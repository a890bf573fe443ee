"""What the GPU waited for while it was idle, per step: one exclusive split of the step's idle time.

In priority order, each instant of GPU idle time (``bd_idle``: the step window with no GPU work of the rank
running) goes to the first of:

1. ``idle_queued_us``: work already issued to the GPU (its launch call returned more than ``ISSUE_LATENCY_US``
   before) had not started: it waited behind an event or stream wait (``cudaStreamWaitEvent``), or for the
   device itself;
2. ``idle_blocked_us``: the CPU was blocked in a synchronizing call (stream / event / device synchronize, a
   synchronous copy such as ``cudaMemcpy`` or ROCm's ``hipMemcpyWithStream``, their driver variants, the launch of
   a pageable copy: ``attribution.sync_call_rows``);
3. ``idle_first_launch_us``: the CPU was inside a launch call far longer than the rank's median launch
   (``FIRST_USE_FACTOR`` times and at least ``FIRST_USE_MIN_US``): a first use (lazy module load, JIT), which
   warm-up steps remove;
4. ``idle_loader_us``: the training loop waited for the DataLoader (``enumerate(DataLoader)`` annotations);
5. ``idle_launch_us``: nothing was issued and the CPU was issuing: the step's code was running (its
   ``ProfilerStep`` annotation was open) and had not launched the GPU's next work yet. This, and only this, is
   launch overhead (Python, dispatch and launch calls slower than the kernels they launch);
6. ``idle_host_us``: the rest: idle outside the step's CPU window (between ``ProfilerStep`` annotations).

``idle_launch_capturable_us`` is the part of ``idle_launch_us`` during which the CPU ran work a CUDA graph of the
model's forward and backward takes off it (``issue.capturable_intervals``: its eager ops, compiled code that
launches its kernels one by one, the Python between them), the rest of it the GPU waited while the CPU ran what
such a graph leaves (the optimizer step, ``AccumulateGrad``, ``loss.item()``, the Python between the regions): what
``launch-bound`` claims.

The six add up to ``bd_idle`` in each step (docs/metrics.md, "Idle time by what the GPU waited for").
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .attribution import OTHER_STEP, gpu_category_codes, step_gpu_parts, sync_call_rows
from .events import LOADER_FETCH, EndTimes, name_mask, unique_ints
from .intervals import sweep
from .issue import capturable_intervals
from .links import launch_calls, launch_rows
from ..load.trace import Kind, RankTrace
from .results import RankPart

#: A launch reaches an idle GPU within a few microseconds (launch return to kernel start: median 1.5 us on the H200
#: fixtures, at most 8.1 us on the public MI250 trace); work waiting longer than this after its call returned is
#: queued, not late.
ISSUE_LATENCY_US = 10.0
#: A launch call this many times the rank's median launch, and at least FIRST_USE_MIN_US, is a first use (module
#: load, JIT): an ordinary launch takes 2-20 us; the MI250 trace's lazy load takes 6.5 ms.
FIRST_USE_FACTOR = 50.0
FIRST_USE_MIN_US = 500.0

IDLE_COLUMNS = ("idle_queued_us", "idle_blocked_us", "idle_first_launch_us", "idle_loader_us", "idle_launch_us",
                "idle_host_us")


def rank_part(rank: RankTrace, steps, table: pd.DataFrame, thresholds=None, shared=None) -> RankPart:
    """The idle split (``IDLE_COLUMNS``) and ``first_launch_count``; absent on CPU-only traces. ``shared``: the
    rank's ``rank.SharedInputs``, which holds the capturable intervals when the CPU-issue analysis made them here."""
    gidx = steps.gpu_index
    if not len(gidx) or "bd_idle" not in table:
        return RankPart()
    ev = rank.events
    # First: its sweep's peak stacks on nothing held here.
    cap = shared.capturable() if shared is not None else capturable_intervals(rank, steps, table)
    ts = ev["ts"].to_numpy()
    end = EndTimes(ev)
    kind = ev["kind"].to_numpy()
    calls = launch_calls(ev)
    pend_s, pend_e = _queued(ev, gidx, calls)
    sync = sync_call_rows(ev, gidx)
    first = first_use_launches(ev, calls)
    del calls
    loader = np.flatnonzero(name_mask(ev, lambda s: s.startswith(LOADER_FETCH)) & (kind <= int(Kind.USER_ANNOTATION)))
    cs, ce = table["cpu_start_us"].to_numpy(), table["cpu_end_us"].to_numpy()
    gs, ge = _step_work(ev, steps, ts[gidx], end[gidx], table)
    parts = [(gs, ge), (pend_s, pend_e), (ts[sync], end[sync]), (ts[first], end[first]),
             (ts[loader], end[loader]), cap, (cs, ce)]
    del gs, ge, pend_s, pend_e, cap
    c = np.concatenate([np.full(len(p[0]), i, np.int8) for i, p in enumerate(parts)])
    bounds = np.concatenate([np.asarray(p[0], float) for p in parts] + [np.asarray(p[1], float) for p in parts])
    del parts
    excl = sweep(bounds, c, 7).exclusive_in(table["start_us"].to_numpy(), table["end_us"].to_numpy())
    del bounds, c
    cols = {name: excl[i + 1] for i, name in enumerate(IDLE_COLUMNS[:-2])}
    # Launch overhead, split by what the CPU was running: work a graph of the model removes, or the rest.
    cols["idle_launch_capturable_us"] = excl[5]
    cols["idle_launch_us"] = excl[5] + excl[6]
    # The step's idle time is its window less its GPU work and the backlog; the rest of it is "host".
    split = sum(cols[c] for c in IDLE_COLUMNS[:-1])
    cols["idle_host_us"] = np.clip(table["bd_idle"].to_numpy() - split, 0.0, None)
    t = np.sort(ts[first])
    cols["first_launch_count"] = (np.searchsorted(t, ce, "left") - np.searchsorted(t, cs, "left")).astype(np.int64)
    return RankPart(columns=cols)


def _step_work(ev: pd.DataFrame, steps, start: np.ndarray, end: np.ndarray, table: pd.DataFrame
               ) -> tuple[np.ndarray, np.ndarray]:
    """The GPU intervals that are busy time of the step whose window they run in: every GPU event, less the parts
    of copies and memsets that run in another step's window (``attribution.step_gpu_parts``: idle there)."""
    cat = gpu_category_codes(ev, steps.gpu_index)
    s, e, c = step_gpu_parts(start, end, cat, steps.gpu_step, table["start_us"].to_numpy(), table["end_us"].to_numpy())
    keep = c != OTHER_STEP
    return s[keep], e[keep]


def _queued(ev: pd.DataFrame, gidx: np.ndarray, calls: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per GPU activity with a launch call: [call end + ISSUE_LATENCY_US, activity start), where not empty."""
    win, corr, ts, dur = (ev[c].to_numpy() for c in ("window", "corr", "ts", "dur"))
    g = gidx[corr[gidx] >= 0]
    rt = launch_rows(calls, win[g], corr[g])
    linked = rt >= 0
    if not linked.any():
        return np.empty(0), np.empty(0)
    rt = rt[linked]
    a = ts[rt] + dur[rt] + ISSUE_LATENCY_US
    b = ts[g[linked]]
    ok = b > a
    return a[ok], b[ok]


def first_use_launches(ev: pd.DataFrame, calls: pd.DataFrame | None = None) -> np.ndarray:
    """Rows of launch calls that took ``FIRST_USE_FACTOR`` times the rank's median launch call (and at least
    ``FIRST_USE_MIN_US``)."""
    calls = launch_calls(ev) if calls is None else calls
    rows = unique_ints(calls["rt"].to_numpy()) if len(calls) else np.empty(0, np.int64)
    rows = rows[~np.isin(rows, sync_call_rows(ev, np.empty(0, np.int64)))]  # a synchronous copy is a sync
    if not len(rows):
        return rows
    dur = ev["dur"].to_numpy()[rows]
    return rows[dur >= max(FIRST_USE_FACTOR * float(np.median(dur)), FIRST_USE_MIN_US)]
