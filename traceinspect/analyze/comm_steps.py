"""The per-step communication columns of ``ra.steps``: calls, bytes, time, small-message share and all-reduce bus
bandwidth per step from the collectives table (``collectives.py``), with DDP's buckets, rounds and tails from
buckets.py. Definitions of every number: docs/communication.md.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .buckets import BUCKET_COUNTS, BUCKET_SIZES, bucket_columns, per_step, tail_columns
from .comm_names import busbw_factor
from ..thresholds import DEFAULT, Thresholds
from ..load.trace import RankTrace

# A rank without collectives in any step: these counts are 0 and these sizes, shares and bandwidths NaN.
_NO_COMM_COUNTS = ("comm_calls", "comm_unknown_size_count", "comm_bytes", "comm_time_us", "allreduce_count", "allreduce_bytes",
                   "allreduce_time_us", *BUCKET_COUNTS)
_NO_COMM_NANS = ("comm_small_time_share", "allreduce_busbw_gbps", *BUCKET_SIZES)
_INT_COLUMNS = ("comm_calls", "comm_unknown_size_count", "allreduce_count", "backward_passes", "allreduce_rounds", "bucket_count",
                "grad_allreduce_count")


def step_columns(coll: pd.DataFrame, steps_df: pd.DataFrame, rank: RankTrace, steps, passes: pd.DataFrame,
                 thresholds: Thresholds = DEFAULT) -> pd.DataFrame:
    """Per-step communication numbers, one row per ra.steps row (same order): the totals here, gradient buckets,
    rounds, backward passes and tails from buckets.py. Vectorized per step (groupby)."""
    small = thresholds.small_bucket_bytes
    out = pd.DataFrame(index=pd.Index(steps_df["step"].to_numpy()))
    c = coll[coll["step"] >= 0] if len(coll) else coll
    if len(c):
        c = c.assign(_b=c["bytes"].astype(float), _d=c["dur_us"].astype(float),
                     _known=(c["bytes"] >= 0).astype(float), _small=(c["bytes"] < small) & (c["bytes"] >= 0))
        c = c.assign(_sd=np.where(c["_small"], c["_d"], 0.0))
        _total_columns(out, c)
        bucket_columns(out, c)
    else:
        for k in _NO_COMM_COUNTS:
            out[k] = per_step(None, out.index, 0)
        for k in _NO_COMM_NANS:
            out[k] = per_step(None, out.index)
    tail_columns(out, coll, rank, steps, passes)
    out["comm_exposed_us"] = _exposed(steps_df)
    for k in _INT_COLUMNS:
        out[k] = out[k].astype(np.int64)
    return out.reset_index(drop=True)


KIND_COLUMNS = ["step", "name", "pg", "count", "bytes", "unknown_size_count", "time_us"]  # + exposed_us (comm_exposure.py)


def kind_table(coll: pd.DataFrame) -> pd.DataFrame:
    """Per step, collective kind and process group (``pg``, None where the trace does not name it): count, bytes
    (NaN if any size is unknown), collectives of unknown size, and execution time (sum of ``dur_us``). Rows in
    step order, then kind, then group; the steps' collectives only (``step >= 0``)."""
    c = coll[coll["step"] >= 0] if len(coll) else coll
    if not len(c):
        return pd.DataFrame({k: pd.Series(dtype=object) for k in KIND_COLUMNS})
    c = c.assign(_pg=c["pg"].where(c["pg"].notna(), ""), _b=c["bytes"].astype(float),
                 _u=(c["bytes"] < 0).astype(np.int64), _d=c["dur_us"].astype(float))
    g = c.groupby(["step", "name", "_pg"], sort=True).agg(count=("_b", "size"), bytes=("_b", "sum"),
                                                          unknown_size_count=("_u", "sum"),
                                                          time_us=("_d", lambda x: x.sum(min_count=1)))
    g.loc[g["unknown_size_count"] > 0, "bytes"] = np.nan
    g = g.reset_index().rename(columns={"_pg": "pg"})
    g["pg"] = g["pg"].where(g["pg"] != "", None)
    g["step"] = g["step"].astype(np.int64)
    return g[KIND_COLUMNS]


def _sums(g: pd.DataFrame) -> pd.DataFrame:
    """Per step: calls, bytes (NaN when a size is unknown), time, time in small messages, smallest size and
    duration, group size."""
    agg = g.groupby("step").agg(n=("_b", "size"), b=("_b", "sum"), known=("_known", "min"),
                                known_n=("_known", "sum"),
                                d=("_d", lambda x: x.sum(min_count=1)), sd=("_sd", "sum"),
                                bmin=("_b", "min"), dmin=("_d", "min"), g=("group_size", "first"))
    agg["unknown"] = agg["n"] - agg["known_n"]  # ``_known`` is 1.0 or 0.0: the rows of unknown size, exactly
    agg.loc[agg["known"] < 1, "b"] = np.nan
    return agg


def _total_columns(out: pd.DataFrame, c: pd.DataFrame) -> None:
    """Calls, bytes and time of all collectives and of the all-reduces, the share of the time spent in small
    messages, and the all-reduces' bus bandwidth, per step into ``out`` (indexed by step id)."""
    idx = out.index
    allc = _sums(c)
    out["comm_calls"] = per_step(allc["n"], idx, 0)
    out["comm_unknown_size_count"] = per_step(allc["unknown"], idx, 0)
    out["comm_bytes"] = per_step(allc["b"], idx, 0)
    out["comm_time_us"] = per_step(allc["d"].fillna(0.0), idx, 0)
    share = (allc["sd"] / allc["d"]).where((allc["known"] >= 1) & (allc["d"] > 0))
    out["comm_small_time_share"] = per_step(share, idx)
    ar = c[c["name"] == "allreduce"]
    if not len(ar):
        for k in ("allreduce_count", "allreduce_bytes", "allreduce_time_us"):
            out[k] = per_step(None, idx, 0)
        out["allreduce_busbw_gbps"] = per_step(None, idx)
        return
    a = _sums(ar)
    out["allreduce_count"] = per_step(a["n"], idx, 0)
    out["allreduce_bytes"] = per_step(a["b"], idx, 0)
    out["allreduce_time_us"] = per_step(a["d"].fillna(0.0), idx, 0)
    factor = pd.Series([busbw_factor("allreduce", g) for g in a["g"]], index=a.index)
    bw = (a["b"] / (a["d"] * 1e-6) / 1e9 * factor).where((a["bmin"] > 0) & (a["dmin"] > 0))
    out["allreduce_busbw_gbps"] = per_step(bw, idx)


def _exposed(steps_df: pd.DataFrame):
    """Communication the step waits for: GPU traces, the timeline's exposed communication (bd_comm_exposed); CPU
    traces, ``cpu_comm``: the training thread in collective calls or waiting, with nothing else to run, while a
    collective runs on gloo's threads. The tails after each backward are that same wait (the thread sits idle
    until the last all-reduce ends), so they are part of ``cpu_comm``, never added to it."""
    if "bd_comm_exposed" in steps_df:
        return steps_df["bd_comm_exposed"].to_numpy(dtype=float)
    if "cpu_comm" in steps_df:
        return np.minimum(steps_df["cpu_comm"].to_numpy(dtype=float), steps_df["cpu_step_us"].to_numpy(dtype=float))
    return np.nan

