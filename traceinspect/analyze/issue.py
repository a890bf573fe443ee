"""The CPU's own issuing work per step (``cpu_issue_us``): the part of a step a faster GPU cannot take away.

Within the step's CPU window ``[cpu_start_us, cpu_end_us]``: the union of the issuing threads' recorded events
(CPU ops, user annotations other than ``ProfilerStep#``, runtime and driver calls), less the time those threads
were waiting, on one sweep with the waits first:

- blocked in a synchronizing call (``attribution.sync_call_rows``: stream / event / device synchronize, the
  synchronous copies ``cudaMemcpy`` / ``hipMemcpyWithStream`` and their driver variants, the launch of a pageable
  copy);
- in a DataLoader fetch (``enumerate(DataLoader)...__next__`` annotations);
- in a launch call held until the GPU's launch queue had room (``queue_waits``: a GPU-bound step fills the queue,
  and each launch then waits for a kernel ahead of it to finish): time a faster GPU removes.

The issuing threads are the training thread (the one holding the ``ProfilerStep`` annotations) and every thread
whose runtime calls launched GPU work: in training, the autograd engine's device thread runs backward's ops and
launches while the training thread waits in ``loss.backward()``, so the step's CPU work is on both. Threads that
launch nothing (the DataLoader's pinning thread, a watchdog polling events) are not the step's issuing work.

Time in which no issuing thread had an event open is not counted (the interpreter between two recorded ops): the
column is the CPU work the trace shows, a lower bound of what the CPU needs to issue the step. It is what the
accounting's CPU floor reads (docs/findings.md); the definition is in docs/metrics.md.

``cpu_capturable_us``: the part of the step's CPU window that capturing the model's forward and backward in CUDA
graphs (``torch.compile(model, mode="reduce-overhead")``) takes off the CPU, and ``capturable_intervals`` the
intervals themselves (the idle split, analyze/idle.py, measures the GPU's launch wait inside them). Each instant of
the CPU window goes to the first that holds, over the issuing threads:

1. kept (``KEPT``): an optimizer step or ``zero_grad``, the autograd engine's per-parameter ``AccumulateGrad``, a
   read of a value to the host (``aten::item``, ``aten::_local_scalar_dense``), a synchronizing call, a DataLoader
   fetch, a collective, a graph launch, or a compiled region's generated code that replays a graph: what a graph
   of the model leaves on the CPU;
2. capturable: a compiled region's generated code that launches its kernels one by one (``## Call
   CompiledFxGraph``, holding no graph launch), which CUDA graphs replace by one replay;
3. kept: the compiled regions' own wrappers (``Torch-Compiled Region``, ``CompiledFunction``,
   ``CompiledFunctionBackward``, Dynamo's cache lookup), which stay around a replay;
4. capturable: every other recorded event of an issuing thread (an eager op, its launch calls);
5. between events: capturable where the events on both sides are capturable and no step boundary lies between
   them (the model's Python between two of its ops), else kept (the Python between the regions and around the
   optimizer).

What a replay itself costs on the CPU (the replay's input copies and checks, its launch) is not in a trace that
replays nothing: time taken off by this column is an upper bound of what the fix removes.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .attribution import sync_call_rows
from .events import LOADER_FETCH, isin, name_mask, row_bounds, rows_sharing_corr, runtime_mask
from .intervals import build_timeline, sweep
from ..load.trace import Kind, RankTrace
from .results import RankPart
from .setup import COMM_OP, GRAPH_LAUNCH

# What a graph of the model's forward and backward leaves on the CPU (docs/metrics.md, "cpu_capturable_us").
KEPT = re.compile(r"^(Optimizer\.(step|zero_grad)#|enumerate\(DataLoader\)"
                  r"|(autograd::engine::evaluate_function: )?torch::autograd::AccumulateGrad$"
                  r"|aten::(item|_local_scalar_dense)$)")
GENERATED = re.compile(r"^## Call CompiledFxGraph")
WRAPPER = re.compile(r"^(Torch-Compiled Region|TorchDynamo Cache Lookup"
                     r"|(autograd::engine::evaluate_function: )?CompiledFunction(Backward)?$)")
# Priority of the sweep (0 first): kept, generated code, wrappers, other work, the CPU window (no event open).
_KEPT, _GENERATED, _WRAPPER, _WORK, _WINDOW = range(5)


def issuing_threads(ev: pd.DataFrame, gidx: np.ndarray, main_tid: int | None) -> np.ndarray:
    """Thread ids of the training thread and of the threads whose runtime calls launched GPU work (``gidx``: the
    rows of the GPU activities). Without either, every thread."""
    tid = ev["tid"].to_numpy()
    launchers = rows_sharing_corr(ev, np.flatnonzero(runtime_mask(ev)), gidx) if len(gidx) else np.empty(0, int)
    found = set(np.unique(tid[launchers]).tolist())
    if main_tid is not None:
        found.add(main_tid)
    return np.array(sorted(found)) if found else np.unique(tid)


def cpu_issue_us(rank: RankTrace, steps, table: pd.DataFrame, threads: np.ndarray | None = None) -> np.ndarray:
    """Per row of the step table: the issuing threads' recorded work in its CPU window outside waits (us)."""
    ev = rank.events
    kind = ev["kind"].to_numpy()
    threads = issuing_threads(ev, steps.gpu_index, steps.main_tid) if threads is None else threads
    mine = isin(ev["tid"].to_numpy(), threads)
    host = (kind <= int(Kind.USER_ANNOTATION)) | runtime_mask(ev)
    work = np.flatnonzero(mine & host & ~name_mask(ev, lambda s: s.startswith("ProfilerStep#")))
    del host
    fetch = name_mask(ev, lambda s: s.startswith(LOADER_FETCH)) & (kind <= int(Kind.USER_ANNOTATION))
    fetch[sync_call_rows(ev, steps.gpu_index)] = True  # waits: fetches and synchronizing calls
    waits = np.flatnonzero(mine & fetch)
    del mine, fetch
    rows = np.concatenate([waits, work])
    cats = np.concatenate([np.zeros(len(waits), np.int8), np.ones(len(work), np.int8)])
    del waits, work
    bounds = row_bounds(ev, rows)  # the rows' times only, never a column's worth
    del rows
    qa, qb = queue_waits(ev, steps.gpu_index, threads)  # waits too: a launch held until the GPU's queue had room
    if len(qa):
        n = len(bounds) // 2
        bounds = np.concatenate([bounds[:n], qa, bounds[n:], qb])
        cats = np.concatenate([cats, np.zeros(len(qa), np.int8)])
    tl = sweep(bounds, cats, 2)
    del bounds, cats
    return tl.exclusive_in(table["cpu_start_us"].to_numpy(), table["cpu_end_us"].to_numpy())[1]


#: A launch call (a kernel launch, an async copy or memset) this many times the rank's median launch call, and
#: QUEUE_WAIT_MIN_US beyond it, while the GPU ran work all along, waited for room in the GPU's launch queue (the
#: driver holds a bounded number of pending launches; a GPU-bound step fills it): that time is the GPU's, which a
#: faster GPU removes, not the CPU's own work. An ordinary launch call takes 2-20 us; a full queue holds one for as
#: long as the kernel ahead of it runs (up to 11 ms on the fp32 transformer of fixtures/gpu_diff).
QUEUE_WAIT_FACTOR = 4.0
QUEUE_WAIT_MIN_US = 50.0
#: ... the GPU busy at least this share of that time (else the call was slow for a reason of its own).
QUEUE_WAIT_BUSY_SHARE = 0.9


def queue_waits(ev: pd.DataFrame, gidx: np.ndarray, threads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The parts of the issuing threads' launch calls spent waiting for room in the GPU's queue: from the rank's
    median launch call into the call, to its end, where that is ``QUEUE_WAIT_FACTOR`` times the median and
    ``QUEUE_WAIT_MIN_US`` longer, and the GPU was busy through it."""
    from .links import launch_calls

    empty = (np.empty(0), np.empty(0))
    if not len(gidx):
        return empty
    rt = launch_calls(ev)["rt"].to_numpy()
    if not len(rt):
        return empty
    rt = rt[isin(ev["tid"].to_numpy()[rt], threads)]
    ts, dur = ev["ts"].to_numpy()[rt].astype(float), ev["dur"].to_numpy()[rt].astype(float)
    if not len(rt):
        return empty
    med = float(np.median(dur))
    long = (dur >= QUEUE_WAIT_FACTOR * med) & (dur - med >= QUEUE_WAIT_MIN_US)
    if not long.any():
        return empty
    a, b = ts[long] + med, ts[long] + dur[long]
    # the GPU's busy time: its activities merged, with the busy time before each merged interval's start
    gs, ge = ev["ts"].to_numpy()[gidx].astype(float), (ev["ts"].to_numpy()[gidx] + ev["dur"].to_numpy()[gidx]).astype(float)
    order = np.argsort(gs, kind="stable")
    gs, ge = gs[order], np.maximum.accumulate(ge[order])
    new = np.r_[True, gs[1:] > ge[:-1]]
    ms = gs[new]
    me = np.r_[ge[np.flatnonzero(new)[1:] - 1], ge[-1:]] if len(gs) else ge
    before = np.r_[0.0, np.cumsum(me - ms)[:-1]]

    def busy_until(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(ms, x, "right") - 1
        inside = np.clip(x - ms[np.clip(i, 0, None)], 0.0, (me - ms)[np.clip(i, 0, None)])
        return np.where(i >= 0, before[np.clip(i, 0, None)] + inside, 0.0)

    busy = busy_until(b) - busy_until(a)
    keep = busy >= QUEUE_WAIT_BUSY_SHARE * (b - a)
    return a[keep], b[keep]


def _holding(ev: pd.DataFrame, rows: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """Of ``rows``, those that hold one of the ``inner`` rows on their thread (it starts inside them)."""
    if not len(rows) or not len(inner):
        return np.zeros(len(rows), bool)
    ts, tid = ev["ts"].to_numpy(), ev["tid"].to_numpy()
    r_ts = ts[rows]
    r_end = r_ts + ev["dur"].to_numpy()[rows]  # the rows' ends only, never a column's worth
    r_tid, in_tid = tid[rows], tid[inner]
    out = np.zeros(len(rows), bool)
    for t in np.unique(r_tid):
        t_in = np.sort(ts[inner[in_tid == t]])
        mine = r_tid == t
        out[mine] = np.searchsorted(t_in, r_end[mine], "right") > np.searchsorted(t_in, r_ts[mine], "left")
    return out


def capturable_intervals(rank: RankTrace, steps, table: pd.DataFrame, threads: np.ndarray | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Sorted disjoint intervals (us) of the steps' CPU windows that a graph of the model's forward and backward
    takes off the CPU (the module docstring: kept work, compiled code, wrappers, eager work, the gaps)."""
    ev = rank.events
    cs, ce = table["cpu_start_us"].to_numpy(float), table["cpu_end_us"].to_numpy(float)
    if not len(ev) or not len(cs):
        return np.empty(0), np.empty(0)
    # Masks of one byte an event; the times and categories only for the rows that take part.
    span = ev["kind"].to_numpy() <= int(Kind.USER_ANNOTATION)
    runtime = runtime_mask(ev)
    threads = issuing_threads(ev, steps.gpu_index, steps.main_tid) if threads is None else threads
    work = isin(ev["tid"].to_numpy(), threads)
    work &= span | runtime
    work &= ~name_mask(ev, lambda s: s.startswith("ProfilerStep#"))
    graph = np.flatnonzero(runtime & name_mask(ev, lambda s: bool(GRAPH_LAUNCH.match(s))))
    generated = np.flatnonzero(work & span & name_mask(ev, lambda s: bool(GENERATED.match(s))))
    replays = _holding(ev, generated, graph)
    kept = span & name_mask(ev, lambda s: bool(KEPT.match(s) or COMM_OP.match(s)))
    kept[sync_call_rows(ev, steps.gpu_index)] = True
    kept[graph] = True
    kept &= work
    kept[generated[replays]] = True
    wrapper = work & span & name_mask(ev, lambda s: bool(WRAPPER.match(s)))
    del span, runtime
    cat = np.full(len(ev), _WORK, np.int8)
    cat[generated[~replays]] = _GENERATED
    cat[wrapper] = _WRAPPER
    cat[kept] = _KEPT
    del kept, wrapper
    rows = np.flatnonzero(work)
    del work
    cat = cat.take(rows)
    # The rows' intervals, then the CPU windows, which join the sweep last: on top only where no event is open
    # (a gap inside a step).
    n, m = len(rows), len(cs)
    bounds = np.empty(2 * (n + m))
    starts, ends = bounds[:n + m], bounds[n + m:]
    np.take(ev["ts"].to_numpy(), rows, out=starts[:n], mode="clip")  # rows are in range: "clip" skips a copy
    np.take(ev["dur"].to_numpy(), rows, out=ends[:n], mode="clip")
    del rows
    np.add(starts[:n], ends[:n], out=ends[:n])
    starts[n:], ends[n:] = cs, ce
    del starts, ends
    return _capturable(bounds, np.concatenate([cat, np.full(m, _WINDOW, np.int8)]))


def _capturable(bounds: np.ndarray, cat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The capturable intervals from the sweep of the rows' and the windows' intervals (``bounds``: starts, then
    ends; given away) and their categories."""
    if len(cat) == 0:
        return np.empty(0), np.empty(0)
    tl = sweep(bounds, cat, _WINDOW + 1)
    del bounds, cat
    t = tl.t
    seg = t[1:] > t[:-1]  # elementary segments of positive length
    # The category on top in each segment (the first active one), and whether it lies inside a CPU window.
    top, inside = tl.top[seg], tl.active[_WINDOW][seg]
    tl.active = None  # the sweep's per-category activity is not needed past here
    cap = ((top == _GENERATED) | (top == _WORK)) & inside
    del inside
    # A gap (no event open inside a step) is the model's own Python where the segments on both sides are
    # capturable; a gap at a step's edge has the outside of the windows on one side, so it is kept.
    gap = top == _WINDOW
    del top
    gap[1:] &= cap[:-1]
    gap[:-1] &= cap[1:]
    if len(gap):
        gap[0] = gap[-1] = False
    cap |= gap
    del gap
    keep = np.flatnonzero(seg)[cap]
    del seg, cap
    return t[keep], t[keep + 1]


def rank_part(rank: RankTrace, steps, table: pd.DataFrame, thresholds=None, shared=None) -> RankPart:
    """``cpu_issue_us`` and ``cpu_capturable_us`` for every step (GPU and CPU-only traces alike). ``shared``: the
    rank's ``rank.SharedInputs``, whose capturable intervals the idle split reads too."""
    if not len(table):
        return RankPart()
    threads = issuing_threads(rank.events, steps.gpu_index, steps.main_tid)  # once for both sweeps
    a, b = shared.capturable(threads) if shared is not None else capturable_intervals(rank, steps, table, threads)
    tl = build_timeline(a, b, np.zeros(len(a), int), 1)
    captured = tl.union_in(table["cpu_start_us"].to_numpy(), table["cpu_end_us"].to_numpy())[0]
    return RankPart(columns={"cpu_issue_us": cpu_issue_us(rank, steps, table, threads), "cpu_capturable_us": captured})
