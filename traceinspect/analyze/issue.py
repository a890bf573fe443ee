"""The CPU's own issuing work per step (``cpu_issue_us``): the part of a step a faster GPU cannot take away.

Within the step's CPU window ``[cpu_start_us, cpu_end_us]``: the union of the issuing threads' recorded events
(CPU ops, user annotations other than ``ProfilerStep#``, runtime and driver calls), less the time those threads
were waiting, on one sweep with the waits first:

- blocked in a synchronizing call (``attribution.sync_call_rows``: stream / event / device synchronize, the
  synchronous copies ``cudaMemcpy`` / ``hipMemcpyWithStream`` and their driver variants, the launch of a pageable
  copy);
- in a DataLoader fetch (``enumerate(DataLoader)...__next__`` annotations).

The issuing threads are the training thread (the one holding the ``ProfilerStep`` annotations) and every thread
whose runtime calls launched GPU work: in training, the autograd engine's device thread runs backward's ops and
launches while the training thread waits in ``loss.backward()``, so the step's CPU work is on both. Threads that
launch nothing (the DataLoader's pinning thread, a watchdog polling events) are not the step's issuing work.

Time in which no issuing thread had an event open is not counted (the interpreter between two recorded ops): the
column is the CPU work the trace shows, a lower bound of what the CPU needs to issue the step. It is what the
accounting's CPU floor reads (docs/findings.md); the definition is in docs/metrics.md.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .attribution import sync_call_rows
from .events import LOADER_FETCH, name_mask, row_bounds, rows_sharing_corr, runtime_mask
from .intervals import sweep
from ..load.trace import Kind, RankTrace
from .results import RankPart


def issuing_threads(ev: pd.DataFrame, gidx: np.ndarray, main_tid: int | None) -> np.ndarray:
    """Thread ids of the training thread and of the threads whose runtime calls launched GPU work (``gidx``: the
    rows of the GPU activities). Without either, every thread."""
    tid = ev["tid"].to_numpy()
    launchers = rows_sharing_corr(ev, np.flatnonzero(runtime_mask(ev)), gidx) if len(gidx) else np.empty(0, int)
    found = set(np.unique(tid[launchers]).tolist())
    if main_tid is not None:
        found.add(main_tid)
    return np.array(sorted(found)) if found else np.unique(tid)


def cpu_issue_us(rank: RankTrace, steps, table: pd.DataFrame) -> np.ndarray:
    """Per row of the step table: the issuing threads' recorded work in its CPU window outside waits (us)."""
    ev = rank.events
    kind = ev["kind"].to_numpy()
    mine = np.isin(ev["tid"].to_numpy(), issuing_threads(ev, steps.gpu_index, steps.main_tid))
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
    tl = sweep(bounds, cats, 2)
    del bounds, cats
    return tl.exclusive_in(table["cpu_start_us"].to_numpy(), table["cpu_end_us"].to_numpy())[1]


def rank_part(rank: RankTrace, steps, table: pd.DataFrame, config=None) -> RankPart:
    """``cpu_issue_us`` for every step (GPU and CPU-only traces alike)."""
    if not len(table):
        return RankPart()
    return RankPart(columns={"cpu_issue_us": cpu_issue_us(rank, steps, table)})
