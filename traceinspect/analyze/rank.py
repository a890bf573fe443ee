"""The per-rank stage: one rank's ``RankTrace`` -> ``RankAnalysis`` (independent per rank).

The per-rank stage reduces a rank's events to small tables (``RankAnalysis``, frozen: ``analyze/results.py``);
nothing after it touches raw events. That is what lets the per-rank stage run anywhere (local processes or a Dask
cluster). It starts no processes itself: a big rank's analyses run side by side where the caller's ``fan_out``
puts them.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Protocol, Sequence

import numpy as np
import pandas as pd

from .attribution import (GPU_CATEGORIES, attribute, gpu_category_codes, name_mask, name_strings, pageable_launch_rows,
                          sync_call_rows)
from ..thresholds import DEFAULT, Thresholds
from .events import step_at
from .links import enclosing_ops, launch_calls, launch_rows
from .steps import find_steps
from .timeline import step_timeline
from ..load.trace import Kind, RankTrace, Trace
from .results import RankAnalysis, RankPart

__all__ = ["FanOut", "RankAnalysis", "RankPart", "analyze_rank", "analyze_ranks"]


def analyze_rank(rank: RankTrace, thresholds: Thresholds = DEFAULT, fan_out: FanOut | None = None) -> RankAnalysis:
    """One rank's events -> its frozen ``RankAnalysis``: the base step table, then the base tables and every
    per-rank analysis (``RANK_EXTENSIONS``) as parts, run by ``fan_out`` (handed in by ``run/``: side by side on
    a big rank) or one after the other here; composed in order."""
    steps = find_steps(rank)
    table = attribute(rank, steps, thresholds)
    basis = "gpu" if len(steps.gpu_index) else "cpu"
    thunks = [partial(_base_part, rank, steps)]
    shared = SharedInputs(rank, steps, table)
    thunks += [partial(_run_part, part, rank, steps, table, thresholds,
                       shared if name in READS_SHARED else None)
               for name, part in zip(RANK_EXTENSIONS, _rank_parts())]
    parts = _heaviest_first(fan_out, thunks, len(rank.events)) if fan_out is not None else [t() for t in thunks]
    tables: dict[str, pd.DataFrame] = {}
    errors: list[str] = []
    added: dict = {}
    for p in parts:
        tables.update(p.tables)
        for c, v in p.columns.items():
            if c in table:
                table[c] = v
            else:
                added[c] = v
        errors.extend(p.errors)
    if added:  # joined at once: a column at a time fragments a frame of a hundred columns
        table = pd.concat([table, pd.DataFrame(added, index=table.index)], axis=1)
    setup = _setup(rank, table, tables, errors)
    return RankAnalysis(
        rank=rank.rank,
        world_size=rank.world_size,
        files=rank.files,
        device=rank.device_name,
        compute_capability=rank.compute_capability,
        basis=basis,
        steps=table,
        tables=tables,
        metadata=rank.metadata,
        distributed=rank.distributed,
        base_ns=rank.base_ns,
        event_count=len(rank.events),
        errors=errors,
        setup=setup,
        unmodelled=dict(rank.unmodelled),
    )


# The parts' cost on a big rank, heaviest first (each run alone on a 1 GB memory-heavy DDP trace, 4.1 M events:
# collectives 1.2 s, issue 0.8, idle 0.7 (0.3 where it finds the issue analysis' intervals made: ``SharedInputs``),
# memory 0.7, utilization 0.4, the base tables 0.25, the rest below 0.2). A fan-out hands its processes the parts in
# this order, so the last to end ends soon after the others.
HEAVIEST_FIRST = ("collectives", "issue", "idle", "memory", "utilization", "base", "optimizer", "precision")


def _heaviest_first(fan_out: FanOut, thunks: list, events: int) -> list[RankPart]:
    """``fan_out`` of the parts (the base part, then ``RANK_EXTENSIONS``' in order) handed over heaviest first; the
    results in the parts' own order."""
    names = ["base", *RANK_EXTENSIONS]
    order = sorted(range(len(thunks)), key=lambda i: (HEAVIEST_FIRST.index(names[i]) if names[i] in HEAVIEST_FIRST
                                                      else len(HEAVIEST_FIRST)))
    ran = fan_out([thunks[i] for i in order], events)
    parts: list = [None] * len(thunks)
    for i, part in zip(order, ran):
        parts[i] = part
    return parts


def _setup(rank: RankTrace, table: pd.DataFrame, tables: dict, errors: list[str]):
    """The rank's ``Setup`` (read after the parts: it reads their tables); a failure is a line in the errors."""
    from .setup import describe_setup

    try:
        return describe_setup(rank, table, tables)
    except Exception as exc:  # the rank's report stands without its setup
        errors.append(f"setup analysis failed on rank {rank.rank}: {type(exc).__name__}: {exc}")
        return None


class FanOut(Protocol):
    """Runs a rank's parts (each a call that never raises) and returns their results in the same order; where
    they run is the caller's choice (``run/services.py`` forks workers for a big rank). ``events``: the rank's
    event count."""

    def __call__(self, parts: Sequence[Callable[[], RankPart]], events: int) -> list[RankPart]: ...


def _base_part(rank: RankTrace, steps) -> RankPart:
    tables = {
        "kernels": kernel_summary(rank, steps),
        "cpu_ops": cpu_op_summary(rank, steps),
        "pageable_copies": pageable_copies(rank, steps),
        "sync_calls": sync_calls(rank, steps),
        "timeline": step_timeline(rank, steps),  # one (the median) step's GPU intervals, for the timeline plot
    }
    if steps.partial is not None:  # cut at a window's end: listed in the report, not counted as steps
        tables["partial_steps"] = steps.partial.assign(cpu_us=steps.partial["cpu_end"] - steps.partial["cpu_start"])[
            ["step", "window", "cpu_us"]]
    return RankPart(tables=tables)


class SharedInputs:
    """What more than one analysis of a rank reads, made the first time one of them asks in a process and handed
    to the next that asks there: the CPU-issue analysis and the idle split both read the intervals a CUDA graph
    takes off the CPU (``issue.capturable_intervals``, a sweep over the rank's CPU events). Side by side, a forked
    worker inherits the instance before anything is made, so each process makes its own at most once."""

    def __init__(self, rank: RankTrace, steps, table: pd.DataFrame):
        self._inputs = (rank, steps, table)
        self._capturable: tuple[np.ndarray, np.ndarray] | None = None

    def capturable(self, threads: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``issue.capturable_intervals`` of the rank (``threads``: its issuing threads, when the caller has
        them)."""
        if self._capturable is None:
            from .issue import capturable_intervals

            self._capturable = capturable_intervals(*self._inputs, threads)
        return self._capturable


# The analyses handed the rank's ``SharedInputs`` (as ``shared=``).
READS_SHARED = frozenset({"issue", "idle"})


def _run_part(part, rank: RankTrace, steps, table: pd.DataFrame, thresholds: Thresholds,
              shared: SharedInputs | None = None) -> RankPart:
    """One analysis' part; its failure is a line in the rank's errors (the rank's report stands without it)."""
    try:
        if shared is not None:
            return part(rank, steps, table, thresholds, shared=shared)
        return part(rank, steps, table, thresholds)
    except Exception as exc:  # one failing analysis must not take the rank's report down
        return RankPart(errors=(f"{part.__module__.rsplit('.', 1)[-1]} analysis failed on rank {rank.rank}: "
                                f"{type(exc).__name__}: {exc}",))


# Per-rank analyses, each a module with ``rank_part(rank, steps, table, thresholds) -> RankPart``. They read the
# events and the base step table ``table`` (never each other's output, never changing ``table``), so they may run
# side by side.
RANK_EXTENSIONS = ("collectives", "precision", "optimizer", "utilization", "idle", "model_parallel", "issue", "flops",
                   "batch", "memory")


def _rank_parts():
    """Every listed analysis; one that cannot be imported becomes a stand-in that raises, so ``_run_part`` puts
    it in the rank's errors (never a silent skip) and the other analyses still run."""
    import importlib

    out = []
    for name in RANK_EXTENSIONS:
        try:
            out.append(importlib.import_module(f"{__package__}.{name}").rank_part)
        except Exception as exc:  # noqa: BLE001 - reported per rank, below
            out.append(_unavailable(name, exc))
    return out


def _unavailable(name: str, exc: Exception):
    def rank_part(rank, steps, table, thresholds) -> RankPart:
        raise ImportError(f"the {name} analysis cannot be loaded ({type(exc).__name__}: {exc})")

    rank_part.__module__ = f"{__package__}.{name}"
    return rank_part


def kernel_summary(rank: RankTrace, steps) -> pd.DataFrame:
    """Per step and kernel name: count and summed duration (us), with the GPU category."""
    ev = rank.events
    gidx = steps.gpu_index
    if not len(gidx):
        return pd.DataFrame(columns=["step", "name", "category", "count", "total_us"])
    kind = ev["kind"].to_numpy()[gidx]
    isk = kind == int(Kind.KERNEL)
    cat = gpu_category_codes(ev, gidx)
    st = steps.gpu_step
    step_ids = steps.table["step"].to_numpy()
    df = pd.DataFrame(
        {
            "step": np.where(st >= 0, step_ids[np.clip(st, 0, None)], -1)[isk],
            "name": pd.Categorical.from_codes(ev["name"].cat.codes.to_numpy()[gidx][isk], ev["name"].cat.categories),
            "category": np.array(GPU_CATEGORIES)[cat[isk]],
            "dur": ev["dur"].to_numpy()[gidx][isk],
        }
    )
    g = df.groupby(["step", "name", "category"], observed=True, sort=False)["dur"].agg(["count", "sum"]).reset_index()
    return g.rename(columns={"sum": "total_us"})


def cpu_op_summary(rank: RankTrace, steps) -> pd.DataFrame:
    """Per CPU op / annotation name: count and summed duration (us) inside steps."""
    ev = rank.events
    kind = ev["kind"].to_numpy()
    rows = np.flatnonzero(kind <= int(Kind.USER_ANNOTATION))
    st = steps.table
    k = step_at(st["cpu_start"].to_numpy(), st["cpu_end"].to_numpy(), ev["ts"].to_numpy()[rows])
    ok = k >= 0
    rows, step = rows[ok], st["step"].to_numpy()[k[ok]]
    del k, ok  # only the grouped columns are held while grouping (the frame takes them as they are)
    df = pd.DataFrame({"step": step,
                       "name": pd.Categorical.from_codes(ev["name"].cat.codes.to_numpy()[rows], ev["name"].cat.categories),
                       "dur": ev["dur"].to_numpy()[rows]}, copy=False)
    del rows, step
    g = df.groupby(["step", "name"], observed=True, sort=False)["dur"].agg(["count", "sum"]).reset_index()
    return g.rename(columns={"sum": "total_us"})


def pageable_copies(rank: RankTrace, steps) -> pd.DataFrame:
    """Every pageable host<->device copy with its step, size, time and the CPU op that issued it."""
    ev = rank.events
    gidx = steps.gpu_index
    cols = ["step", "name", "bytes", "dur_us", "ts_us", "op", "runtime_us"]
    if not len(gidx):
        return pd.DataFrame(columns=cols)
    kind = ev["kind"].to_numpy()[gidx]
    sel = (kind == int(Kind.MEMCPY)) & name_mask(ev, lambda s: "Pageable" in s)[gidx]
    if not sel.any():
        return pd.DataFrame(columns=cols)
    rows = gidx[sel]
    step_ids = steps.table["step"].to_numpy()
    st = steps.gpu_step[sel]
    copies = pd.DataFrame(
        {
            "step": np.where(st >= 0, step_ids[np.clip(st, 0, None)], -1),
            "name": name_strings(ev, rows),
            "bytes": ev["bytes"].to_numpy()[rows],
            "dur_us": ev["dur"].to_numpy()[rows],
            "ts_us": ev["ts"].to_numpy()[rows],
            "window": ev["window"].to_numpy()[rows],
            "corr": ev["corr"].to_numpy()[rows],
        }
    )
    row = launch_rows(launch_calls(ev), copies["window"].to_numpy(), copies["corr"].to_numpy())
    has = row >= 0
    copies["runtime_us"] = np.where(has, ev["dur"].to_numpy()[np.maximum(row, 0)], 0.0)
    copies["op"] = None
    copies.loc[has, "op"] = issuing_ops(ev, row[has])
    return copies[cols]


def issuing_ops(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """For runtime-call rows: the name of the CPU op that made the call, or None (see ``links.enclosing_ops``)."""
    ops = enclosing_ops(ev, rows)
    out = np.full(len(rows), None, dtype=object)
    found = ops >= 0
    out[found] = name_strings(ev, ops[found])
    return out


NO_OP = "(no op: torch.cuda.synchronize or C++)"


def sync_calls(rank: RankTrace, steps) -> pd.DataFrame:
    """Blocking runtime calls inside steps, grouped by step, call and the CPU op that made them (with no op around
    the call: the innermost annotation around it, e.g. ``DistributedDataParallel.forward``, where DDP times its
    first iterations), and whether the call is the launch of a pageable copy (``pageable``)."""
    ev = rank.events
    rows = sync_call_rows(ev, steps.gpu_index)
    cols = ["step", "call", "op", "pageable", "count", "total_us"]
    if not len(rows):
        return pd.DataFrame(columns=cols)
    ts = ev["ts"].to_numpy()[rows]
    st = steps.table
    k = step_at(st["cpu_start"].to_numpy(), st["cpu_end"].to_numpy(), ts)
    ok = k >= 0
    rows, k = rows[ok], k[ok]
    df = pd.DataFrame({"step": st["step"].to_numpy()[k], "call": name_strings(ev, rows),
                       "op": issuing_ops(ev, rows), "dur": ev["dur"].to_numpy()[rows],
                       "pageable": np.isin(rows, pageable_launch_rows(ev, steps.gpu_index))})
    none = df["op"].isna().to_numpy()
    if none.any():
        ann = _enclosing_annotations(ev, rows[none])
        df.loc[none, "op"] = np.where(pd.notna(ann), ann, NO_OP)
    g = df.groupby(["step", "call", "op", "pageable"], sort=False)["dur"].agg(["count", "sum"]).reset_index()
    return g.rename(columns={"sum": "total_us"})[cols]


def _enclosing_annotations(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """For runtime-call rows: the name of the innermost user annotation on the call's thread that encloses it,
    other than ``ProfilerStep#``, or None."""
    out = np.full(len(rows), None, dtype=object)
    kind = ev["kind"].to_numpy()
    ann = np.flatnonzero((kind == int(Kind.USER_ANNOTATION))
                         & ~name_mask(ev, lambda s: s.startswith("ProfilerStep#")))
    if not len(ann) or not len(rows):
        return out
    ts, dur, tid, win = (ev[c].to_numpy() for c in ("ts", "dur", "tid", "window"))
    names = name_strings(ev, ann)
    for i, r in enumerate(rows):
        mine = (tid[ann] == tid[r]) & (win[ann] == win[r]) & (ts[ann] <= ts[r]) & (ts[ann] + dur[ann] >= ts[r] + dur[r])
        if mine.any():
            j = np.flatnonzero(mine)
            out[i] = names[j[np.argmax(ts[ann][j])]]  # the latest-starting enclosing one is the innermost
    return out


# --------------------------------------------------------------------------------------------------------------


def analyze_ranks(trace: Trace, thresholds: Thresholds = DEFAULT, fan_out: FanOut | None = None) -> list[RankAnalysis]:
    return [analyze_rank(r, thresholds, fan_out) for r in trace.ranks]
