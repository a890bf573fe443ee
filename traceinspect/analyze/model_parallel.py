"""What model parallelism costs a step on the training thread: the pipeline bubble (time blocked in point-to-point
transfers to and from the neighbouring stages) and the tensor-parallel collectives the step waits for.

Both are measured where the training thread is (CPU basis): on gloo every send, receive and functional collective
is called, run or waited on by the thread that holds the ``ProfilerStep`` annotations, so the union of those calls
in the step's CPU window is time the stage was not computing. GPU-basis ranks get no value (NaN): there the
thread's wait says nothing of the device. Definitions: docs/communication.md (Pipeline parallel, Tensor parallel).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .comm_names import is_collective_op
from .events import EndTimes, name_mask
from .intervals import build_timeline
from ..load.trace import Kind, RankTrace
from .results import RankPart

# The training thread's records of a point-to-point transfer: the c10d issue op and gloo's execution of it.
P2P_NAMES = frozenset({"c10d::send", "c10d::recv_", "c10d::recv", "c10d::recv_any_source_", "gloo:send",
                       "gloo:recv"})
TP_PREFIX = "_c10d_functional::"
TP_WAIT = "_c10d_functional::wait_tensor"

PP_COLUMNS = ("pp_bubble_us", "pp_bubble_share", "pp_transfer_count")
TP_COLUMNS = ("tp_comm_exposed_us", "tp_comm_share", "tp_collective_count")


def is_p2p(name: str) -> bool:
    return name in P2P_NAMES


def is_tp_comm(name: str) -> bool:
    """A functional collective that moves data (DTensor's redistributions) or the wait on one."""
    return name == TP_WAIT or (name.startswith(TP_PREFIX) and is_collective_op(name))


def is_tp_collective(name: str) -> bool:
    return name.startswith(TP_PREFIX) and is_collective_op(name)


def rank_part(rank: RankTrace, steps, table: pd.DataFrame, thresholds=None) -> RankPart:
    """The pipeline and tensor-parallel columns (``PP_COLUMNS``, ``TP_COLUMNS``) of a CPU-basis rank whose
    training thread shows them; nothing otherwise (a rank without either gets no columns)."""
    if len(steps.gpu_index) or steps.main_tid is None or not len(table):
        return RankPart()
    ev = rank.events
    main = (ev["tid"].to_numpy() == steps.main_tid) & (ev["kind"].to_numpy() <= int(Kind.USER_ANNOTATION))
    cols: dict[str, np.ndarray] = {}
    p2p = main & name_mask(ev, is_p2p)
    if p2p.any():
        issue = p2p & name_mask(ev, lambda s: s.startswith("c10d::"))
        cols.update(_columns(ev, table, p2p, issue, PP_COLUMNS))
    tp = main & name_mask(ev, is_tp_comm)
    if tp.any():
        cols.update(_columns(ev, table, tp, main & name_mask(ev, is_tp_collective), TP_COLUMNS))
    return RankPart(columns=cols)


def _columns(ev: pd.DataFrame, table: pd.DataFrame, rows: np.ndarray, counted: np.ndarray, names) -> dict:
    """Per step: the union of ``rows``' intervals inside the step's CPU window (us), that over ``wall_us``, and
    how many ``counted`` records start in the window."""
    ts = ev["ts"].to_numpy()
    end = EndTimes(ev)
    sel = np.flatnonzero(rows)
    tl = build_timeline(ts[sel], end[sel], np.zeros(len(sel), np.int64), 1)
    a, b = table["cpu_start_us"].to_numpy(float), table["cpu_end_us"].to_numpy(float)
    union = tl.union_in(a, b)[0]
    wall = table["wall_us"].to_numpy(float)
    share = np.divide(union, wall, out=np.full(len(wall), np.nan), where=wall > 0)
    t = np.sort(ts[np.flatnonzero(counted)])
    count = (np.searchsorted(t, b, "left") - np.searchsorted(t, a, "left")).astype(np.int64)
    return dict(zip(names, (union, share, count)))
