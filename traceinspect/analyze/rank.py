"""The per-rank stage: one rank's ``RankTrace`` -> ``RankAnalysis`` (independent per rank).

The per-rank stage reduces a rank's events to small tables (``RankAnalysis``); nothing after it touches raw
events. That is what lets the per-rank stage run anywhere (local processes or a Dask cluster).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .attribution import (GPU_CATEGORIES, attribute, gpu_category_codes, name_mask, name_strings, pageable_launch_rows,
                          sync_call_rows)
from ..config import Config, DEFAULT
from .events import step_at
from .links import enclosing_ops, launch_calls
from .steps import find_steps
from .timeline import step_timeline
from ..load.trace import Kind, RankTrace, Skipped, Trace


@dataclass
class RankAnalysis:
    """Everything the rules and renderers need about one rank, in raw units (us, bytes)."""

    rank: int
    world_size: int | None
    files: list[str]
    device: str | None
    compute_capability: tuple[int, int] | None
    basis: str  # "gpu": GPU timeline breakdown; "cpu": the training thread's breakdown (no GPU events)
    steps: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    distributed: dict = field(default_factory=dict)
    base_ns: int = 0
    event_count: int = 0
    errors: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------------------------
# Per-rank stage


def analyze_rank(rank: RankTrace, config: Config = DEFAULT) -> RankAnalysis:
    steps = find_steps(rank)
    table = attribute(rank, steps, config)
    basis = "gpu" if len(steps.gpu_index) else "cpu"
    ra = RankAnalysis(
        rank=rank.rank,
        world_size=rank.world_size,
        files=rank.files,
        device=rank.device_name,
        compute_capability=rank.compute_capability,
        basis=basis,
        steps=table,
        tables={},
        metadata=rank.metadata,
        distributed=rank.distributed,
        base_ns=rank.base_ns,
        event_count=len(rank.events),
    )
    _run_extensions(rank, steps, ra, config)
    return ra


def _base_tables(rank: RankTrace, steps) -> dict[str, pd.DataFrame]:
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
    return tables


# A rank this big runs its extensions on several cores (forked workers share its events copy-on-write).
PARALLEL_MIN_EVENTS = 500_000


def _run_extension(extend, rank, steps, ra, config) -> None:
    try:
        extend(rank, steps, ra, config)
    except Exception as exc:  # one failing analysis must not take the rank's report down
        ra.errors.append(f"{extend.__module__.rsplit('.', 1)[-1]} analysis failed on rank {ra.rank}: "
                         f"{type(exc).__name__}: {exc}")


_FORKED: tuple | None = None  # (rank, steps, ra, config) seen by forked workers


def _extension_in_child(i: int):
    """Run extension ``i`` on a private copy of the rank's summary; return only what it added."""
    rank, steps, ra, config = _FORKED
    mine = RankAnalysis(**{**ra.__dict__, "steps": ra.steps.copy(), "tables": {}, "errors": []})
    before = set(mine.steps.columns)
    _run_extension(_rank_extensions()[i], rank, steps, mine, config)
    cols = {c: mine.steps[c].to_numpy() for c in mine.steps.columns if c not in before}
    return mine.tables, cols, mine.errors


def _run_extensions(rank: RankTrace, steps, ra: RankAnalysis, config: Config) -> None:
    """The base tables, then the per-rank extensions. These read only the base step table and the events, never
    each other's output or the base tables, so on a big rank they run side by side: the base tables and the first
    extension here, the other extensions in forked workers; the tables merge in that order."""
    global _FORKED
    exts = _rank_extensions()
    from ..run.pool import can_fork, process_pool, worker_count

    workers = worker_count(config)
    if workers < 2 or len(exts) < 2 or len(rank.events) < PARALLEL_MIN_EVENTS or not can_fork():
        ra.tables.update(_base_tables(rank, steps))
        for extend in exts:
            _run_extension(extend, rank, steps, ra, config)
        return
    _FORKED = (rank, steps, ra, config)
    try:
        with process_pool(min(workers - 1, len(exts) - 1), fork_only=True) as pool:
            futures = [pool.submit(_extension_in_child, i) for i in range(1, len(exts))]
            ra.tables.update(_base_tables(rank, steps))  # while the workers run the other extensions
            _run_extension(exts[0], rank, steps, ra, config)
            for fut in futures:
                tables, cols, errors = fut.result()
                ra.tables.update(tables)
                for c, v in cols.items():
                    ra.steps[c] = v
                ra.errors.extend(errors)
    finally:
        _FORKED = None


# Per-rank analyses that add tables / step columns, each a module with ``extend_rank(rank, steps, ra, config)``.
RANK_EXTENSIONS = ("collectives", "precision", "optimizer", "utilization")


def _rank_extensions():
    """Every listed analysis; one that cannot be imported becomes a stand-in that raises, so ``_run_extension``
    puts it in the rank's errors (never a silent skip) and the other analyses still run."""
    import importlib

    out = []
    for name in RANK_EXTENSIONS:
        try:
            out.append(importlib.import_module(f"{__package__}.{name}").extend_rank)
        except Exception as exc:  # noqa: BLE001 - reported per rank, below
            out.append(_unavailable(name, exc))
    return out


def _unavailable(name: str, exc: Exception):
    def extend_rank(rank, steps, ra, config) -> None:
        raise ImportError(f"the {name} analysis cannot be loaded ({type(exc).__name__}: {exc})")

    extend_rank.__module__ = f"{__package__}.{name}"
    return extend_rank


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
    ts = ev["ts"].to_numpy()[rows]
    st = steps.table
    k = step_at(st["cpu_start"].to_numpy(), st["cpu_end"].to_numpy(), ts)
    ok = k >= 0
    df = pd.DataFrame({"step": st["step"].to_numpy()[k[ok]],
                       "name": pd.Categorical.from_codes(ev["name"].cat.codes.to_numpy()[rows][ok], ev["name"].cat.categories),
                       "dur": ev["dur"].to_numpy()[rows][ok]})
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
    calls = launch_calls(ev).rename(columns={"rt": "row"})
    calls["runtime_us"] = ev["dur"].to_numpy()[calls["row"].to_numpy()]
    copies = copies.merge(calls, on=["window", "corr"], how="left")
    has = copies["row"].notna().to_numpy()
    copies["op"] = None
    copies.loc[has, "op"] = issuing_ops(ev, copies.loc[has, "row"].to_numpy().astype(np.int64))
    copies["runtime_us"] = copies["runtime_us"].fillna(0.0)
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


def analyze_ranks(trace: Trace, config: Config = DEFAULT) -> list[RankAnalysis]:
    return [analyze_rank(r, config) for r in trace.ranks]
